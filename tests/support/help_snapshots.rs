//! The `--help` texts of a binary as snapshot tests, shared by the help tests of the three
//! binaries (each includes this file with `#[path]`): `BIN --help` and `BIN SUB --help` for
//! every subcommand the top-level help lists, each compared with its committed snapshot
//! `tests/help/BIN/SUB.txt` (the top-level help: `tests/help/BIN/BIN.txt`), and each with one
//! `Example:` whose command starts with the binary's name.
//!
//! `HELP_SNAPSHOTS=overwrite cargo test -p PACKAGE --test help` rewrites the snapshots (and
//! removes those of subcommands that are gone) instead of comparing.

use std::path::Path;
use std::process::Command;

/// The env var that makes the test rewrite the snapshots, and its value.
const OVERWRITE: (&str, &str) = ("HELP_SNAPSHOTS", "overwrite");

/// Lines of context around the first difference in a failure message.
const CONTEXT: usize = 3;

/// Checks every help text of the binary `bin` (at `exe`, of Cargo package `package`). `hidden`
/// names subcommands the top-level help does not list that have a snapshot too. Panics with
/// every difference, each with an excerpt, and the command that refreshes the snapshots.
///
/// `optional` names subcommands a Cargo feature adds: built with it, they and their own
/// subcommands are checked like the rest (`SUB.txt`, `SUB-NESTED.txt`); built without it,
/// their snapshots are kept, not reported as left over.
pub fn check_help_snapshots(package: &str, bin: &str, exe: &str, hidden: &[&str], optional: &[&str]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/help").join(bin);
    let overwrite = std::env::var(OVERWRITE.0).is_ok_and(|value| value == OVERWRITE.1);
    let top = help(exe, &[]);
    let listed = subcommands(&top);
    assert!(!listed.is_empty(), "`{bin} --help` lists no subcommand:\n{top}");
    // The top-level snapshot is the help of a build without the optional subcommands (README's),
    // so a build with them compares its help less their entries.
    // (snapshot name, the command that prints the text, the text)
    let mut helps = vec![(bin.to_string(), format!("{bin} --help"), without_entries(&top, optional))];
    for sub in listed.iter().map(String::as_str).chain(hidden.iter().copied()) {
        let text = help(exe, &[sub]);
        for nested in subcommands(&text) {
            let command = format!("{bin} {sub} {nested} --help");
            helps.push((format!("{sub}-{nested}"), command, help(exe, &[sub, &nested])));
        }
        helps.push((sub.to_string(), format!("{bin} {sub} --help"), text));
    }
    let absent: Vec<&str> = optional.iter().copied().filter(|name| !listed.iter().any(|s| s == name)).collect();
    let of_absent = |file: &str| {
        let stem = file.trim_end_matches(".txt");
        absent.iter().any(|name| stem == *name || stem.starts_with(&format!("{name}-")))
    };
    let mut failures = Vec::new();
    // Whether a snapshot differs, is missing or is left over (not an example's problem).
    let mut stale = false;
    for (name, command, text) in &helps {
        if let Err(problem) = one_example(bin, text) {
            failures.push(format!("`{command}`: {problem}"));
        }
        for option in undescribed(text) {
            failures.push(format!("`{command}`: {option} has no description"));
        }
        let path = dir.join(format!("{name}.txt"));
        let shown = format!("tests/help/{bin}/{name}.txt");
        if overwrite {
            std::fs::create_dir_all(&dir).expect("the snapshot directory can be made");
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(snapshot) if snapshot == *text => {}
            Ok(snapshot) => {
                stale = true;
                failures.push(format!("`{command}` differs from {shown}:\n{}", first_difference(&snapshot, text)))
            }
            Err(e) => {
                stale = true;
                failures.push(format!("`{command}` has no snapshot {shown}: {e}"))
            }
        }
    }
    // A snapshot whose subcommand is gone.
    let names: Vec<String> = helps.iter().map(|(name, _, _)| format!("{name}.txt")).collect();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        let file = path.file_name().and_then(|f| f.to_str()).unwrap_or_default().to_string();
        if names.contains(&file) || of_absent(&file) {
            continue;
        }
        if overwrite {
            std::fs::remove_file(&path).unwrap_or_else(|e| panic!("cannot remove {}: {e}", path.display()));
        } else {
            stale = true;
            failures.push(format!("tests/help/{bin}/{file} is the snapshot of no subcommand of `{bin}`"));
        }
    }
    let refresh = format!(
        "\n\nIf the new help is right, refresh the snapshots: {}={} cargo test -p {package} --test help",
        OVERWRITE.0, OVERWRITE.1
    );
    assert!(failures.is_empty(), "{}{}", failures.join("\n\n"), if stale { refresh.as_str() } else { "" });
}

/// `exe ARGS... --help`'s stdout: no colours, and the width fixed (clap reads `COLUMNS` only
/// with its `wrap_help` feature, which the workspace does not enable; this keeps the text the
/// same if it ever does).
fn help(exe: &str, args: &[&str]) -> String {
    let output = Command::new(exe)
        .args(args)
        .arg("--help")
        .env("COLUMNS", "100")
        .env("NO_COLOR", "1")
        .env_remove("CLICOLOR_FORCE")
        .output()
        .unwrap_or_else(|e| panic!("{exe} runs: {e}"));
    let text = String::from_utf8(output.stdout).expect("help is UTF-8");
    assert!(output.status.success(), "`{exe} {} --help` exits {}:\n{text}", args.join(" "), output.status);
    text
}

/// The subcommands in the `Commands:` section of a top-level help, without `help`: each line
/// indented by two spaces starts with one (a description's continuation lines are indented
/// further).
fn subcommands(top: &str) -> Vec<String> {
    top.lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.is_empty())
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// The options and arguments of a help text that have no description: an entry (`--flag
/// <VALUE>`, `-h, --help`, `<ARG>`) whose text after it, on its line or the next, is nothing
/// but a default or possible values.
fn undescribed(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let entry = (trimmed.starts_with("--") || trimmed.starts_with("-h,") || trimmed.starts_with('<'))
            && (2..=6).contains(&indent);
        if !entry {
            continue;
        }
        // The entry's own description: after two spaces on its line (the short help's
        // layout), or the next line, indented further (the long help's).
        let (name, same_line) = match trimmed.split_once("  ") {
            Some((name, rest)) => (name, rest.trim()),
            None => (trimmed.trim_end(), ""),
        };
        let next = lines.get(index + 1).map_or("", |next| next.trim());
        let next_indent = lines.get(index + 1).map_or(0, |next| next.len() - next.trim_start().len());
        let description = if same_line.is_empty() {
            if next_indent > indent {
                next
            } else {
                ""
            }
        } else {
            same_line
        };
        if description.is_empty() || description.starts_with('[') {
            found.push(name.trim().to_string());
        }
    }
    found
}

/// The help has exactly one `Example:` section, and its command starts with the binary's name.
fn one_example(bin: &str, text: &str) -> Result<(), String> {
    let sections = text.lines().filter(|line| *line == "Example:").count();
    if sections != 1 {
        return Err(format!("{sections} `Example:` sections, expected 1"));
    }
    let command = text.lines().skip_while(|line| *line != "Example:").nth(1).unwrap_or_default();
    if !command.trim_start().starts_with(&format!("{bin} ")) {
        return Err(format!("the example '{}' does not start with '{bin} '", command.trim()));
    }
    Ok(())
}

/// A diff-like excerpt around the first line where `snapshot` and `actual` differ: common lines
/// with two spaces, the snapshot's with `-`, the actual help's with `+`.
fn first_difference(snapshot: &str, actual: &str) -> String {
    let (old, new): (Vec<&str>, Vec<&str>) = (snapshot.lines().collect(), actual.lines().collect());
    let at = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    // The first line after the difference where both agree again, if any.
    let resync = (at..old.len())
        .flat_map(|i| (at..new.len()).map(move |j| (i, j)))
        .find(|&(i, j)| old[i] == new[j])
        .unwrap_or((old.len(), new.len()));
    let mut lines = Vec::new();
    for line in &old[at.saturating_sub(CONTEXT)..at] {
        lines.push(format!("   {line}"));
    }
    for line in &old[at..resync.0.min(at + 2 * CONTEXT + 1)] {
        lines.push(format!(" - {line}"));
    }
    for line in &new[at..resync.1.min(at + 2 * CONTEXT + 1)] {
        lines.push(format!(" + {line}"));
    }
    let after = old.iter().skip(resync.0).take(CONTEXT);
    for line in after {
        lines.push(format!("   {line}"));
    }
    if snapshot.ends_with('\n') != actual.ends_with('\n') {
        lines.push(" (the two differ in the final newline)".to_string());
    }
    format!("first difference at line {}:\n{}", at + 1, lines.join("\n"))
}

/// `BIN man DIR`'s pages against the committed ones in `docs/man/` (`BIN.1`, `BIN-SUB.1`), and
/// `BIN completions SHELL` for every shell: a script that names every subcommand the pages
/// document. `HELP_SNAPSHOTS=overwrite` rewrites the pages (and removes those of `BIN` that are
/// gone) instead of comparing.
///
/// `optional` as for `check_help_snapshots`: the pages of subcommands a feature adds are kept,
/// not reported as left over, when the binary was built without it.
pub fn check_man_pages_and_completions(package: &str, bin: &str, exe: &str, optional: &[&str]) {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/man");
    let made = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("man-{bin}"));
    let _ = std::fs::remove_dir_all(&made);
    let output = Command::new(exe).arg("man").arg(&made).output().unwrap_or_else(|e| panic!("{exe} runs: {e}"));
    assert!(
        output.status.success(),
        "`{bin} man` exits {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let overwrite = std::env::var(OVERWRITE.0).is_ok_and(|value| value == OVERWRITE.1);
    let page_of_bin = |name: &str| name == format!("{bin}.1") || name.starts_with(&format!("{bin}-"));
    let mut names: Vec<String> = std::fs::read_dir(&made)
        .expect("the pages were written")
        .map(|entry| entry.expect("an entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.contains(&format!("{bin}.1")), "`{bin} man` wrote no {bin}.1: {names:?}");
    let mut failures = Vec::new();
    for name in &names {
        let mut page = std::fs::read(made.join(name)).expect("a written page");
        if *name == format!("{bin}.1") {
            page = without_pages(&page, bin, optional);
        }
        if overwrite {
            std::fs::create_dir_all(&committed).expect("docs/man can be made");
            std::fs::write(committed.join(name), &page).expect("a page can be written");
        } else if std::fs::read(committed.join(name)).ok().as_deref() != Some(page.as_slice()) {
            failures.push(format!("docs/man/{name} is not what `{bin} man` writes"));
        }
    }
    for entry in std::fs::read_dir(&committed).into_iter().flatten() {
        let name = entry.expect("an entry").file_name().to_string_lossy().into_owned();
        let optional_page = optional.iter().any(|sub| {
            let stem = format!("{bin}-{sub}");
            name == format!("{stem}.1") || name.starts_with(&format!("{stem}-"))
        });
        // A page of a subcommand this build left out is kept.
        let left_out = optional_page && !optional.iter().any(|sub| names.contains(&format!("{bin}-{sub}.1")));
        if page_of_bin(&name) && !names.contains(&name) && !left_out {
            if overwrite {
                std::fs::remove_file(committed.join(&name)).expect("a stale page can be removed");
            } else {
                failures.push(format!("docs/man/{name} is the page of no command of `{bin}`"));
            }
        }
    }
    let subcommands: Vec<&str> =
        names.iter().filter_map(|n| n.strip_prefix(&format!("{bin}-"))).map(|n| n.trim_end_matches(".1")).collect();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let output = Command::new(exe).args(["completions", shell]).output().expect("it runs");
        let script = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "`{bin} completions {shell}` exits {}", output.status);
        for sub in &subcommands {
            if !script.contains(sub) {
                failures.push(format!("`{bin} completions {shell}` does not name `{sub}`"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n\nIf the new pages are right: {}={} cargo test -p {package} --test help",
        failures.join("\n"),
        OVERWRITE.0,
        OVERWRITE.1
    );
}

/// A top-level help without the `Commands:` entries of `names` (an entry is its line and the
/// continuation lines indented further).
fn without_entries(text: &str, names: &[&str]) -> String {
    let mut kept = Vec::new();
    let (mut in_commands, mut dropping) = (false, false);
    for line in text.split_inclusive('\n') {
        let content = line.trim_end_matches('\n');
        if content == "Commands:" {
            in_commands = true;
        } else if content.is_empty() {
            in_commands = false;
        }
        if in_commands && content.starts_with("  ") && !content.starts_with("   ") {
            dropping = names.contains(&content.split_whitespace().next().unwrap_or_default());
        } else if !in_commands || !content.starts_with("   ") {
            dropping = false;
        }
        if !dropping {
            kept.push(line);
        }
    }
    kept.concat()
}

/// A top-level man page without the `.TP` entries that name the pages `BIN-NAME(1)` of `names`.
fn without_pages(page: &[u8], bin: &str, names: &[&str]) -> Vec<u8> {
    let text = String::from_utf8_lossy(page);
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut kept = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        let entry = lines[at].trim_end() == ".TP"
            && lines.get(at + 1).is_some_and(|next| {
                names.iter().any(|name| next.trim_end() == format!("{bin}\\-{}(1)", name.replace('-', "\\-")))
            });
        if entry {
            at += 1;
            while at < lines.len() && lines[at].trim_end() != ".TP" && !lines[at].starts_with(".SH") {
                at += 1;
            }
            continue;
        }
        kept.push(lines[at]);
        at += 1;
    }
    kept.concat().into_bytes()
}
