//! Every `sh` block of README.md runs as written (issue 18): each block in one bash session, in
//! a fresh temporary directory, with the workspace's three binaries (`model`, `consumer`,
//! `conformance`, built for these tests) first on `PATH`. After each command the block shows
//! what it prints (stdout and stderr together) on `#> ` lines and, when not 0, its exit code on
//! a `#? CODE` line; a command followed by neither must print nothing and exit 0. Comments and
//! blank lines are pasteable and ignored by bash. Placeholders: `[..]` inside a line matches
//! any text, a line `#> ...` any number of lines. `/tmp/` in a block stands for the block's
//! temporary directory. A block whose first line is `# not run by the doc tests: REASON` is
//! skipped, visibly. A difference fails with the block, the command, what was expected and
//! what came out, and the command that reproduces it.
//!
//! `DOCS=overwrite cargo test -p conformance --test docs` rewrites the `#>`/`#?` lines of
//! README.md from what the commands print (then put `[..]` back where output varies).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const REPRO: &str = "cargo test -p conformance --test docs";
/// The whole README's blocks together (CI's cap for the docs family).
const DOCS_TIMEOUT: Duration = Duration::from_secs(300);
const SKIP: &str = "# not run by the doc tests: ";

/// One command of a block and what the block says it prints.
#[derive(Debug)]
struct Step {
    /// The 1-based line of README.md the command starts on.
    line: usize,
    command: String,
    expected: Vec<String>,
    /// `None`: stderr is not compared.
    errors: Option<Vec<String>>,
    code: i32,
    /// Lines of README.md (0-based) holding this step's `#>`/`#?` lines.
    shown: std::ops::Range<usize>,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `sh` blocks of `text`: (first line's index, lines).
fn sh_blocks(text: &str) -> Vec<(usize, Vec<&str>)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() == "```sh" {
            let start = i + 1;
            let end = (start..lines.len()).find(|&j| lines[j].trim_end() == "```").expect("a closed block");
            blocks.push((start, lines[start..end].to_vec()));
            i = end;
        }
        i += 1;
    }
    blocks
}

/// A block's commands with their shown output (`start`: the block's first line index).
fn steps(start: usize, lines: &[&str]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(shown) = line.strip_prefix("#>").map(|s| s.strip_prefix(' ').unwrap_or(s)) {
            let step =
                steps.last_mut().unwrap_or_else(|| panic!("README.md:{}: output before any command", start + i + 1));
            step.expected.push(shown.to_string());
            step.shown.end = start + i + 1;
        } else if let Some(shown) = line.strip_prefix("#!").map(|s| s.strip_prefix(' ').unwrap_or(s)) {
            let step =
                steps.last_mut().unwrap_or_else(|| panic!("README.md:{}: stderr before any command", start + i + 1));
            step.errors.get_or_insert_with(Vec::new).push(shown.to_string());
            step.shown.end = start + i + 1;
        } else if let Some(code) = line.strip_prefix("#? ") {
            let step =
                steps.last_mut().unwrap_or_else(|| panic!("README.md:{}: exit code before any command", start + i + 1));
            step.code =
                code.trim().parse().unwrap_or_else(|_| panic!("README.md:{}: '{code}' is no exit code", start + i + 1));
            step.shown.end = start + i + 1;
        } else if !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            let mut command = line.to_string();
            let first = i;
            while command.ends_with('\\') && i + 1 < lines.len() {
                i += 1;
                command.push('\n');
                command.push_str(lines[i]);
            }
            let at = start + i + 1;
            steps.push(Step {
                line: start + first + 1,
                command,
                expected: Vec::new(),
                errors: None,
                code: 0,
                shown: at..at,
            });
        }
        i += 1;
    }
    steps
}

/// Whether `actual` lines match `expected` lines (`[..]` within a line, `...` lines).
fn matches(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first == "..." => (0..=actual.len()).any(|skip| matches(rest, &actual[skip..])),
        Some((first, rest)) => {
            actual.split_first().is_some_and(|(line, more)| line_matches(first, line) && matches(rest, more))
        }
    }
}

fn line_matches(expected: &str, actual: &str) -> bool {
    let mut parts = expected.split("[..]");
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = actual.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    for (index, part) in parts.iter().enumerate() {
        if index + 1 == parts.len() {
            return rest.ends_with(part) && rest.len() >= part.len();
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// One bash session: commands in, their output and exit code out, with a marker line.
struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// The file each command's stderr goes to.
    errors: PathBuf,
}

const MARKER: &str = "__onceproof_doc_exit__";

impl Session {
    fn start(dir: &Path, path: &str, errors: PathBuf) -> Session {
        let mut child = Command::new("bash")
            .arg("--noprofile")
            .arg("--norc")
            .current_dir(dir)
            .env("PATH", path)
            .env("COLUMNS", "100")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("bash runs");
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        Session { child, stdin, stdout, errors }
    }

    /// Runs `command`: its stdout lines, stderr lines and exit code.
    fn run(&mut self, command: &str) -> (Vec<String>, Vec<String>, i32) {
        let errors = self.errors.display();
        let script = format!("{{\n{command}\n}} 2>'{errors}' </dev/null; echo \"\n{MARKER} $?\"\n");
        self.stdin.write_all(script.as_bytes()).expect("bash reads");
        self.stdin.flush().expect("bash reads");
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            let read = self.stdout.read_line(&mut line).expect("bash writes");
            assert!(read > 0, "bash ended while running: {command}");
            let line = line.trim_end_matches('\n').to_string();
            if let Some(code) = line.strip_prefix(&format!("{MARKER} ")) {
                // The echo's leading newline ends a last line printed without one.
                if lines.last().is_some_and(|l: &String| l.is_empty()) {
                    lines.pop();
                }
                let errors = std::fs::read_to_string(&self.errors).unwrap_or_default();
                let errors = errors.lines().map(String::from).collect();
                return (lines, errors, code.trim().parse().expect("an exit code"));
            }
            lines.push(line);
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The directory of the workspace's binaries, built if this test's build did not build them.
fn binaries() -> PathBuf {
    let conformance = PathBuf::from(env!("CARGO_BIN_EXE_conformance"));
    let dir = conformance.parent().expect("a target directory").to_path_buf();
    if !dir.join("model").exists() || !dir.join("consumer").exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--bins", "-p", "model", "-p", "consumer"])
            .current_dir(repo_root())
            .status()
            .expect("cargo runs");
        assert!(status.success(), "cannot build the binaries the docs use: {REPRO}");
    }
    dir
}

#[test]
fn every_sh_block_of_the_readme_runs_as_written() {
    let readme_path = repo_root().join("README.md");
    let readme = std::fs::read_to_string(&readme_path).expect("README.md");
    let bin = binaries();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let overwrite = std::env::var("DOCS").is_ok_and(|v| v == "overwrite");
    let deadline = Instant::now() + DOCS_TIMEOUT;
    let (mut failures, mut run, mut skipped) = (Vec::new(), 0, Vec::new());
    let mut rewrites: Vec<(std::ops::Range<usize>, Vec<String>)> = Vec::new();
    for (start, lines) in sh_blocks(&readme) {
        if let Some(reason) = lines.first().and_then(|l| l.strip_prefix(SKIP)) {
            skipped.push(format!("README.md:{}: {reason}", start));
            continue;
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        let tmp = format!("{}/", dir.path().display());
        let mut session = Session::start(&repo_root(), &path, dir.path().join(".stderr"));
        for step in steps(start, &lines) {
            assert!(Instant::now() < deadline, "the docs' commands passed {DOCS_TIMEOUT:?}: {REPRO}");
            let (output, errors, code) = session.run(&step.command.replace("/tmp/", &tmp));
            let output: Vec<String> = output.iter().map(|l| l.replace(&tmp, "/tmp/")).collect();
            let errors: Vec<String> = errors.iter().map(|l| l.replace(&tmp, "/tmp/")).collect();
            run += 1;
            if overwrite {
                let mut shown: Vec<String> = output.iter().map(|l| format!("#> {l}").trim_end().to_string()).collect();
                if code != 0 {
                    shown.extend(errors.iter().map(|l| format!("#! {l}").trim_end().to_string()));
                    shown.push(format!("#? {code}"));
                }
                rewrites.push((step.shown.clone(), shown));
            } else if code != step.code
                || !matches(&step.expected, &output)
                || step.errors.as_ref().is_some_and(|shown| !matches(shown, &errors))
            {
                failures.push(format!(
                    "README.md:{}: {}\n  expected (exit {}):\n{}\n{}\n  got (exit {code}):\n{}\n{}",
                    step.line,
                    step.command,
                    step.code,
                    indent(&step.expected),
                    indent(step.errors.as_deref().unwrap_or_default()),
                    indent(&output),
                    indent(&errors)
                ));
            }
        }
    }
    if overwrite {
        rewrite(&readme_path, &readme, rewrites);
        return;
    }
    println!("docs: {run} commands run; not run: {skipped:#?}");
    assert!(run > 40, "only {run} documented commands ran");
    assert!(failures.is_empty(), "{} documented commands differ ({REPRO}):\n{}", failures.len(), failures.join("\n"));
}

fn indent(lines: &[String]) -> String {
    lines.iter().map(|l| format!("    | {l}")).collect::<Vec<_>>().join("\n")
}

/// Replaces each step's shown lines by what it printed, from the bottom up.
fn rewrite(path: &Path, text: &str, mut rewrites: Vec<(std::ops::Range<usize>, Vec<String>)>) {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    rewrites.sort_by_key(|(range, _)| std::cmp::Reverse(range.start));
    for (range, shown) in rewrites {
        lines.splice(range, shown);
    }
    std::fs::write(path, lines.join("\n") + "\n").expect("README.md is writable");
}

#[test]
fn placeholders_match_what_they_say() {
    let lines = |text: &[&str]| text.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let cases: [(&[&str], &[&str], bool); 7] = [
        (&["a b"], &["a b"], true),
        (&["a [..] c"], &["a bbb c"], true),
        (&["a [..] c"], &["a bbb d"], false),
        (&["log [..]"], &["log x", "more"], false),
        (&["x", "...", "z"], &["x", "y1", "y2", "z"], true),
        (&["..."], &[], true),
        (&[], &["unexpected"], false),
    ];
    for (expected, actual, result) in cases {
        assert_eq!(matches(&lines(expected), &lines(actual)), result, "{expected:?} vs {actual:?}");
    }
}
