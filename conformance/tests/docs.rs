//! Every `sh` block of the user's documents (`DOCUMENTS`: README.md and the pages of docs/ it
//! leads to) runs as written: each block in one bash session, in
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
//! those documents from what the commands print (then put `[..]` back where output varies).
//!
//! PROTOCOL.md's row sections are checked against the model: every step kind the model can ask
//! of a row a consumer of your own may claim is named in that row's section, and no section
//! names a step the model never asks of its rows (`every_step_the_model_asks_of_a_row_is_in_its_protocol_section`).
//!
//! The blocks run the Python examples with `python3` (`bash scripts/setup.sh` installs it):
//! without it the blocks' test prints `skipped: python3 not installed (bash scripts/setup.sh
//! installs it)` and returns, unless `CI` is set: then it fails.

#[path = "../../tests/support/tools.rs"]
mod tools;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const REPRO: &str = "cargo test -p conformance --test docs";
/// The documents whose blocks run, README first (what a user meets first).
const DOCUMENTS: [&str; 4] = ["README.md", "docs/checking.md", "docs/real-consumer.md", "docs/conformance.md"];
/// Every document's blocks together (CI's cap for the docs family; the blocks were README's
/// alone until its reference material moved to docs/). Their debug builds took
/// 226 s and 318 s on the 2-core machine while other builds ran beside them (and 301 s once
/// over the old cap of 300 s), so the cap leaves room for a loaded machine.
const DOCS_TIMEOUT: Duration = Duration::from_secs(480);
const SKIP: &str = "# not run by the doc tests: ";

/// One command of a block and what the block says it prints.
#[derive(Debug)]
struct Step {
    /// The 1-based line of its document the command starts on.
    line: usize,
    command: String,
    expected: Vec<String>,
    /// `None`: stderr is not compared.
    errors: Option<Vec<String>>,
    code: i32,
    /// Lines of its document (0-based) holding this step's `#>`/`#?` lines.
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
fn steps(document: &str, start: usize, lines: &[&str]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(shown) = line.strip_prefix("#>").map(|s| s.strip_prefix(' ').unwrap_or(s)) {
            let step =
                steps.last_mut().unwrap_or_else(|| panic!("{document}:{}: output before any command", start + i + 1));
            step.expected.push(shown.to_string());
            step.shown.end = start + i + 1;
        } else if let Some(shown) = line.strip_prefix("#!").map(|s| s.strip_prefix(' ').unwrap_or(s)) {
            let step =
                steps.last_mut().unwrap_or_else(|| panic!("{document}:{}: stderr before any command", start + i + 1));
            step.errors.get_or_insert_with(Vec::new).push(shown.to_string());
            step.shown.end = start + i + 1;
        } else if let Some(code) = line.strip_prefix("#? ") {
            let step = steps
                .last_mut()
                .unwrap_or_else(|| panic!("{document}:{}: exit code before any command", start + i + 1));
            step.code = code
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("{document}:{}: '{code}' is no exit code", start + i + 1));
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
fn every_sh_block_of_the_documents_runs_as_written() {
    if tools::python3().is_none() {
        return;
    }
    let bin = binaries();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let overwrite = std::env::var("DOCS").is_ok_and(|v| v == "overwrite");
    let deadline = Instant::now() + DOCS_TIMEOUT;
    let (mut failures, mut run, mut skipped) = (Vec::new(), 0, Vec::new());
    for document in DOCUMENTS {
        let file = repo_root().join(document);
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{document}: {e}"));
        let mut rewrites: Vec<(std::ops::Range<usize>, Vec<String>)> = Vec::new();
        for (start, lines) in sh_blocks(&text) {
            if let Some(reason) = lines.first().and_then(|l| l.strip_prefix(SKIP)) {
                skipped.push(format!("{document}:{}: {reason}", start));
                continue;
            }
            let dir = tempfile::tempdir().expect("a temporary directory");
            let tmp = format!("{}/", dir.path().display());
            let mut session = Session::start(&repo_root(), &path, dir.path().join(".stderr"));
            for step in steps(document, start, &lines) {
                assert!(Instant::now() < deadline, "the docs' commands passed {DOCS_TIMEOUT:?}: {REPRO}");
                let (output, errors, code) = session.run(&step.command.replace("/tmp/", &tmp));
                let output: Vec<String> = output.iter().map(|l| l.replace(&tmp, "/tmp/")).collect();
                let errors: Vec<String> = errors.iter().map(|l| l.replace(&tmp, "/tmp/")).collect();
                run += 1;
                if overwrite {
                    rewrites.push((step.shown.clone(), shown_lines(&output, &errors, code)));
                } else if code != step.code
                    || !matches(&step.expected, &output)
                    || step.errors.as_ref().is_some_and(|shown| !matches(shown, &errors))
                {
                    failures.push(format!(
                        "{document}:{}: {}\n  expected (exit {}):\n{}\n{}\n  got (exit {code}):\n{}\n{}",
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
            rewrite(&file, &text, rewrites);
        }
    }
    if overwrite {
        return;
    }
    println!("docs: {run} commands run; not run: {skipped:#?}");
    assert!(run > 40, "only {run} documented commands ran");
    assert!(failures.is_empty(), "{} documented commands differ ({REPRO}):\n{}", failures.len(), failures.join("\n"));
}

/// What a step printed, as the `#>`, `#!` and `#?` lines a document shows.
fn shown_lines(output: &[String], errors: &[String], code: i32) -> Vec<String> {
    let mut shown: Vec<String> = output.iter().map(|l| format!("#> {l}").trim_end().to_string()).collect();
    if code != 0 {
        shown.extend(errors.iter().map(|l| format!("#! {l}").trim_end().to_string()));
        shown.push(format!("#? {code}"));
    }
    shown
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
    std::fs::write(path, lines.join("\n") + "\n").unwrap_or_else(|e| panic!("{}: {e}", path.display()));
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

/// The rows a consumer of your own may claim over the open protocol, each with the bounds its
/// exploration departs from the shared ones by (`explored`): the records appended and the
/// offset of the poison record (the three poison rows). One record enables every step kind a
/// row has (below); retry-forever needs two, its poison record second, because a partition
/// never gets past a poison record there and `refuse-ahead` needs a checkpoint the log lost.
const CLAIMABLE: [(&str, u8, Option<u8>); 33] = [
    ("commit-first", 1, None),
    ("effect-first", 1, None),
    ("periodic-commit", 1, None),
    ("offset-stamp", 1, None),
    ("dedup-separate", 1, None),
    ("dedup-atomic", 1, None),
    ("atomic", 1, None),
    ("atomic-fenced", 1, None),
    ("atomic-cas", 1, None),
    ("parallel-max", 1, None),
    ("parallel-watermark", 1, None),
    ("atomic-dlq", 1, Some(0)),
    ("skip-poison", 1, Some(0)),
    ("retry-forever", 2, Some(1)),
    ("producer-idempotent", 1, None),
    ("producer-new-sequence", 1, None),
    ("reset-earliest", 1, None),
    ("reset-silent", 1, None),
    ("reset-fail", 1, None),
    ("fenced-stored-epoch", 1, None),
    ("log-loss-refuse", 1, None),
    ("log-loss-unchecked", 1, None),
    ("log-loss-refuse-all", 1, None),
    ("acks-leader", 1, None),
    ("acks-all", 1, None),
    ("acks-all-min-isr-1", 1, None),
    ("acks-all-min-isr-1-clean", 1, None),
    ("blind-set", 1, None),
    ("set-if-newer", 1, None),
    ("dedup-offset-only", 1, None),
    ("broker-effect-first", 1, None),
    ("broker-commit-first", 1, None),
    ("broker-relaxed", 1, None),
];

/// The rows whose effects land in onceproof's own files (the output log, the email provider,
/// the index), which the harness reads directly: PROTOCOL.md lists them as not claimable.
const NOT_CLAIMABLE: [&str; 8] = [
    "txn-fenced",
    "txn-unfenced",
    "txn-read-uncommitted",
    "atomic-plus-email",
    "email-idempotency-key",
    "email-no-key",
    "dual-write",
    "outbox",
];

const PROTOCOL_ROWS: &str = "## The steps, row by row";
const NOT_CLAIMABLE_HEADING: &str = "### Rows you cannot claim";

/// The configuration explored for a claimable row: one group, two owners (a rebalance needs a
/// second), one partition, `commit_every` and `inflight` 1 (they cannot exceed one record), and
/// every fault budget 1: a crash, a rebalance, a pause, a lost acknowledgement and, on a plain
/// log, a retention and a log loss; on a replicated one (the acks rows) a leader failure and an
/// ISR shrink instead, as the harness can make no retention nor lost tail happen there (the
/// real replicated log refuses retention and loses records only by elections).
///
/// Why these are enough: a step kind is enabled by the row's rules and by which faults
/// happened, never by how many records or owners there are. With one record: `fetch` and every
/// write of a record's sequence (the record goes through each stage); the periodic rows'
/// `commit-offset` (the position reaches the log end); `fail-out-of-range`, `reset-offset` and
/// reset-silent's `commit-offset` (the record retained away before it is fetched);
/// `refuse-ahead` (the record applied, then the log loses it); `dead-letter` and skip-poison's
/// `commit-offset` (the poison record at offset 0); the fenced outcomes (a pause, or a
/// rebalance). When this test was written, the same exploration with two records
/// (`commit_every` and `inflight` 2, the poison record at offset 0) found exactly the same step
/// kinds for every row but retry-forever, which then lacks `refuse-ahead` (nothing gets past
/// its poison record at 0: hence its poison record second here); it took 19 minutes of a
/// debug build on a loaded machine, where this takes seconds.
fn explored(row: model::Strategy, records: u8, poison: Option<u8>) -> model::Config {
    use model::strategy::Replication;
    let replicated = match row.rules().replication {
        Replication::Single => 0,
        Replication::Replicated(_) => 1,
    };
    model::Config {
        groups: 1,
        owners: 2,
        partitions: 1,
        records,
        commit_every: 1,
        inflight: 1,
        crashes: 1,
        rebalances: 1,
        pauses: 1,
        ack_losses: 1,
        retentions: 1 - replicated,
        log_losses: 1 - replicated,
        leader_failures: replicated,
        isr_shrinks: replicated,
        poison,
        ..model::Config::new(row)
    }
}

/// A fast, deterministic hasher for the explored states (SipHash is most of a debug build's
/// time there); collisions only cost a comparison, the sets stay exact.
#[derive(Default)]
struct StateHasher(u64);

impl std::hash::Hasher for StateHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u8(&mut self, value: u8) {
        self.write_u64(u64::from(value));
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_usize(&mut self, value: usize) {
        self.write_u64(value as u64);
    }
}

/// Every state reachable in the model of `config`, exhaustively (depth first, each state's
/// symmetry class once: renaming owners and epochs changes no step's kind): the protocol
/// step kinds of the actions enabled in them (`conformance::harness::step_kind`), and how many
/// states there were.
fn step_kinds(config: &model::Config) -> (std::collections::BTreeSet<&'static str>, usize) {
    use stateright::{Model, Representative};
    use std::rc::Rc;
    let model = model::ConsumerModel::new(config.clone());
    let mut seen: std::collections::HashSet<Rc<model::State>, std::hash::BuildHasherDefault<StateHasher>> =
        Default::default();
    let mut pending = Vec::new();
    let mut next = model::State::initial(config);
    for state in model.init_states() {
        let state = Rc::new(state.representative());
        if seen.insert(state.clone()) {
            pending.push(state);
        }
    }
    let (mut kinds, mut actions) = (std::collections::BTreeSet::new(), Vec::new());
    while let Some(state) = pending.pop() {
        actions.clear();
        model.actions(&state, &mut actions);
        for &action in &actions {
            if let Some(kind) = conformance::harness::step_kind(&action) {
                kinds.insert(kind.name());
            }
            model.next_state_into(&state, action, &mut next);
            next.canonicalize();
            if !seen.contains(&next) {
                let state = Rc::new(next.clone());
                seen.insert(state.clone());
                pending.push(state);
            }
        }
    }
    (kinds, seen.len())
}

/// A row section of PROTOCOL.md: the rows its heading names and the steps its table names.
struct Section {
    rows: Vec<String>,
    steps: Vec<String>,
}

/// One row's exploration: its index in `CLAIMABLE`, the step kinds enabled, the states, the time.
struct Explored {
    index: usize,
    kinds: std::collections::BTreeSet<&'static str>,
    states: usize,
    took: std::time::Duration,
}

/// PROTOCOL.md's row sections (`### `ROW`, `ROW` ...` under `PROTOCOL_ROWS`): the rows each
/// heading names and the steps its table names (the first word of each name in backquotes in a
/// table line's first cell); and the rows the `NOT_CLAIMABLE_HEADING` section names.
fn protocol_sections(text: &str) -> (Vec<Section>, Vec<String>) {
    let quoted =
        |line: &str| -> Vec<String> { line.split('`').skip(1).step_by(2).map(String::from).collect::<Vec<_>>() };
    let start = text.find(&format!("\n{PROTOCOL_ROWS}\n")).expect("PROTOCOL.md has its row sections");
    let body = &text[start + 1 + PROTOCOL_ROWS.len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let (mut sections, mut unclaimable): (Vec<Section>, Vec<String>) = (Vec::new(), Vec::new());
    let mut in_unclaimable = false;
    for line in body.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            in_unclaimable = line == NOT_CLAIMABLE_HEADING;
            if heading.starts_with('`') {
                sections.push(Section { rows: quoted(heading), steps: Vec::new() });
            } else if !in_unclaimable {
                sections.push(Section { rows: Vec::new(), steps: Vec::new() });
            }
        } else if in_unclaimable {
            unclaimable.extend(quoted(line).into_iter().filter(|name| name.parse::<model::Strategy>().is_ok()));
        } else if let (Some(row), Some(Section { steps, .. })) = (line.strip_prefix("| `"), sections.last_mut()) {
            let cell = format!("`{}", row.split('|').next().unwrap_or(""));
            steps.extend(quoted(&cell).iter().map(|step| step.split_whitespace().next().unwrap_or("").to_string()));
        }
    }
    (sections.into_iter().filter(|section| !section.rows.is_empty()).collect(), unclaimable)
}

/// The rows, in one table: `CLAIMABLE` and `NOT_CLAIMABLE` together are `Strategy::ALL`, each
/// once; PROTOCOL.md gives every claimable row one section and lists the others as not
/// claimable. Then each claimable row's model is explored exhaustively (`explored`,
/// `step_kinds`): every step kind it enables must be named in its section, and every step a
/// section names must be enabled for one of its rows.
#[test]
fn every_step_the_model_asks_of_a_row_is_in_its_protocol_section() {
    use std::collections::BTreeSet;
    let started = Instant::now();
    let text = std::fs::read_to_string(repo_root().join("PROTOCOL.md")).expect("PROTOCOL.md");
    let named: Vec<&str> = CLAIMABLE.iter().map(|(row, _, _)| *row).chain(NOT_CLAIMABLE).collect();
    let all: Vec<&str> = model::Strategy::ALL.iter().map(|row| row.name()).collect();
    let mut sorted = named.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), named.len(), "a row is in CLAIMABLE or NOT_CLAIMABLE twice");
    let missing: Vec<&&str> = all.iter().filter(|row| !named.contains(row)).collect();
    assert!(missing.is_empty(), "rows in neither CLAIMABLE nor NOT_CLAIMABLE: {missing:?}");
    let (sections, unclaimable) = protocol_sections(&text);
    let mut listed = unclaimable.clone();
    listed.sort_unstable();
    let mut expected: Vec<&str> = NOT_CLAIMABLE.to_vec();
    expected.sort_unstable();
    assert_eq!(listed, expected, "PROTOCOL.md's '{NOT_CLAIMABLE_HEADING}' lists other rows");
    let section_of = |row: &str| {
        let of: Vec<usize> = (0..sections.len()).filter(|&i| sections[i].rows.iter().any(|r| r == row)).collect();
        assert_eq!(of.len(), 1, "PROTOCOL.md must give {row} one section under '{PROTOCOL_ROWS}', not {}", of.len());
        of[0]
    };
    for Section { rows, .. } in &sections {
        for row in rows {
            assert!(
                CLAIMABLE.iter().any(|(claimable, _, _)| claimable == row),
                "PROTOCOL.md has a section of {row}, which is no claimable row"
            );
        }
    }
    // Two explorations at a time: each is one thread's work.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let explored_rows: Vec<Explored> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(row, records, poison)) = CLAIMABLE.get(index) else { return done };
                        let config = explored(row.parse().expect("a row"), records, poison);
                        config.validate().unwrap_or_else(|error| panic!("{row}: {error}"));
                        let timer = Instant::now();
                        let (kinds, states) = step_kinds(&config);
                        done.push(Explored { index, kinds, states, took: timer.elapsed() });
                    }
                })
            })
            .collect();
        let mut all: Vec<_> = workers.into_iter().flat_map(|worker| worker.join().expect("an exploration")).collect();
        all.sort_by_key(|explored| explored.index);
        all
    });
    let mut failures = Vec::new();
    let mut enabled_in: Vec<BTreeSet<&str>> = vec![BTreeSet::new(); sections.len()];
    for Explored { index, kinds, states, took } in &explored_rows {
        let (row, records, poison) = CLAIMABLE[*index];
        let section = section_of(row);
        let config = explored(row.parse().expect("a row"), records, poison);
        println!("{row}: {states} states in {took:?}, steps {kinds:?}");
        for kind in kinds {
            if !sections[section].steps.iter().any(|step| step == kind) {
                failures.push(format!(
                    "the model asks {row} for `{kind}`, which PROTOCOL.md's section of {row} does not name ({})",
                    config.flags()
                ));
            }
        }
        enabled_in[section].extend(kinds.iter().copied());
    }
    for (Section { rows, steps }, enabled) in sections.iter().zip(&enabled_in) {
        for step in steps.iter().filter(|step| !enabled.contains(step.as_str())) {
            failures.push(format!(
                "PROTOCOL.md's section of {} names `{step}`, which the model never asks of {} at the explored bounds",
                rows.join(", "),
                if rows.len() == 1 { "it" } else { "them" }
            ));
        }
    }
    println!("protocol sections: {} rows explored in {:?}", CLAIMABLE.len(), started.elapsed());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// README is a user's guide: it fits in 400 lines, and its glossary and strategy list are the
/// model's own, so that a new row or property cannot be left out of them.
const README_LINES_MAX: usize = 400;

/// The lines of README's section `## heading`, up to the next `## `.
fn readme_section(readme: &str, heading: &str) -> Vec<String> {
    let start = readme.find(&format!("\n## {heading}\n")).unwrap_or_else(|| panic!("README has no '## {heading}'"));
    let rest = &readme[start + heading.len() + 5..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    rest[..end].lines().map(String::from).collect()
}

#[test]
fn readme_is_a_short_guide_whose_lists_are_the_models() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(lines <= README_LINES_MAX, "README.md has {lines} lines, more than {README_LINES_MAX}");

    // The strategies: one line each, under a bold heading naming its family.
    let mut listed: Vec<(String, String)> = Vec::new();
    let mut family = String::new();
    for line in readme_section(&readme, "Strategies") {
        if let Some(name) = line.strip_prefix("**").and_then(|l| l.strip_suffix("**")) {
            family = name.to_lowercase();
        } else if let Some(item) = line.strip_prefix("- `") {
            let name = item.split('`').next().expect("a closed code span");
            listed.push((family.clone(), name.to_string()));
        }
    }
    let expected: Vec<(String, String)> = (model::strategy::Family::ALL.iter())
        .flat_map(|&f| {
            let rows = model::Strategy::ALL.iter().filter(move |s| s.family() == f);
            rows.map(move |s| (f.name().to_lowercase(), s.to_string()))
        })
        .collect();
    assert_eq!(listed, expected, "README's strategies differ from the model's rows by family");

    // The glossary: every safety property in one row, in the model's order.
    let glossary: Vec<String> = (readme_section(&readme, "Glossary").iter())
        .filter_map(|l| l.strip_prefix("| `").and_then(|l| l.split('`').next()).map(String::from))
        .collect();
    assert_eq!(glossary, model::properties::SAFETY.to_vec(), "README's glossary differs from the safety properties");
}

/// README's two commands are CI's: `.ci/run` runs the main job as README writes it, runs
/// `scripts/setup.sh` before anything is built, and ends with README's test command, whose
/// script runs that set-up before `cargo test`, so that README cannot need more than CI installs.
#[test]
fn readmes_two_commands_are_what_ci_runs() {
    let read = |path: &str| std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let section = readme_section(&read("README.md"), "Install and the two commands");
    let commands: Vec<&str> = (section.iter())
        .skip_while(|line| line.trim_end() != "```sh")
        .skip(1)
        .take_while(|line| line.trim_end() != "```")
        .filter(|line| !line.starts_with('#'))
        .map(|line| line.split(" # ").next().expect("a command").trim())
        .collect();
    assert_eq!(
        commands,
        ["cargo run --release --locked -p model -- check", "bash scripts/test.sh"],
        "README's commands"
    );
    let ci = read(".ci/run");
    let ci: Vec<&str> = ci.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    let at = |command: &str| ci.iter().position(|line| *line == command);
    let setup = at("bash scripts/setup.sh").expect(".ci/run runs scripts/setup.sh");
    assert!(at("cargo fmt --all --check").is_some_and(|fmt| setup < fmt), ".ci/run sets up before it builds");
    assert!(at(commands[0]).is_some(), ".ci/run runs README's main job: {ci:#?}");
    // CI's last line is README's test command, with at most features turned on (the Kafka lane's
    // tests, in the same build).
    let last = ci.last().copied().unwrap_or_default();
    let features = last.strip_prefix(commands[1]).map(str::trim);
    assert!(
        features.is_some_and(|rest| rest.is_empty() || rest.starts_with("--features ") && !rest.contains(';')),
        ".ci/run ends with README's test command (features at most): {last}"
    );
    let test = read("scripts/test.sh");
    let setup = test.find("bash scripts/setup.sh").expect("scripts/test.sh runs scripts/setup.sh");
    let cargo = test.find("cargo test --workspace --locked --all-targets \"$@\"").expect("and then cargo test");
    assert!(setup < cargo, "scripts/test.sh sets up before cargo test");
}
