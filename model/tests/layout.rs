//! `model check`'s text report as a reader meets it: the default summary fits 120 columns off
//! a terminal, `--wide` is the verdict matrix, `--quiet` has no counterexample, every
//! counterexample ends with where and why it fails, and `--html` shows each row's bounds in
//! boxes that scroll rather than widen the page.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The width of the report when stdout is not a terminal (a pipe here).
const WIDTH_CHARS: usize = 120;

/// Runs the debug binary Cargo built for these tests: `model check ARGS...`.
fn model_check(args: &[&str]) -> (Option<i32>, String) {
    let output: Output =
        Command::new(env!("CARGO_BIN_EXE_model")).arg("check").args(args).output().expect("the model binary runs");
    (output.status.code(), String::from_utf8(output.stdout).expect("stdout is UTF-8"))
}

/// The cases, each small enough for the debug binary: the whole table at one group and two
/// records (every row, every counterexample), and single rows whose steps and bounds are long.
const CASES: &[&[&str]] = &[
    &["--groups", "1", "--records", "2"],
    &["--strategy", "skip-poison", "--groups", "1", "--records", "2"],
    &["--strategy", "atomic", "--groups", "1", "--records", "2", "--pauses", "any"],
    &["--strategy", "atomic", "--groups", "1", "--records", "2", "--crashes", "any", "--rebalances", "any"],
];

#[test]
fn no_line_of_the_default_report_is_wider_than_120_columns() {
    for args in CASES {
        let (_, text) = model_check(args);
        assert!(text.lines().count() > 5, "{args:?}: {text}");
        for line in text.lines() {
            assert!(line.chars().count() <= WIDTH_CHARS, "{args:?}: {} columns: {line}", line.chars().count());
        }
        let last = text.lines().last().expect("a last line");
        assert!(["OK", "FAILED", "INCONCLUSIVE"].iter().any(|word| last.starts_with(word)), "{args:?}: {last}");
        assert!(text.contains("--traces DIR") && text.contains("--html FILE"), "{args:?}: no hint: {text}");
    }
}

/// Each row of the summary names what it violates, with the steps, and what holds.
#[test]
fn the_summary_names_what_each_row_violates_and_keeps() {
    let (code, text) = model_check(&["--strategy", "atomic", "--groups", "1", "--records", "2"]);
    assert_eq!(code, Some(1), "{text}");
    let row: String = text
        .lines()
        .skip_while(|line| !line.starts_with("atomic "))
        .take_while(|line| line.starts_with("atomic ") || line.starts_with("    "))
        .collect::<Vec<_>>()
        .join(" ");
    for part in ["VIOLATED: no-duplicate (6),", "holds: contiguous-prefix, group-isolation", "witnesses 3/3"] {
        assert!(row.contains(part), "{part} not in: {row}");
    }
    // The poison, producer and other rows' properties are not checked for atomic: not named.
    assert!(!row.contains("bounded-retries"), "{row}");
}

#[test]
fn wide_prints_the_verdict_matrix() {
    let (code, text) = model_check(&["--wide", "--groups", "1", "--records", "2"]);
    assert_eq!(code, Some(0), "{text}");
    let header = text.lines().find(|line| line.starts_with("strategy ")).expect("the matrix header");
    for column in ["no-duplicate", "contiguous-prefix", "witnesses", "observed", "states", "unique", "seconds"] {
        assert!(header.split_whitespace().any(|cell| cell == column), "{column} not in: {header}");
    }
    assert!(text.lines().any(|line| line.starts_with("--------")), "no rule under the header: {text}");
    let (_, summary) = model_check(&["--groups", "1", "--records", "2"]);
    assert!(!summary.lines().any(|line| line.starts_with("--------")), "the default is not the matrix: {summary}");
}

#[test]
fn quiet_prints_no_counterexample() {
    let (code, text) = model_check(&["--quiet", "--strategy", "atomic", "--groups", "1", "--records", "2"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(!text.contains(" violates "), "{text}");
    assert!(!text.contains("violated at step"), "{text}");
    assert!(text.contains("VIOLATED: no-duplicate"), "{text}");
    let last_two: Vec<&str> = text.lines().rev().take(2).collect();
    assert_eq!(
        last_two,
        [
            "FAILED: a safety property is violated",
            "compared with nothing (single strategy: exit 1 when a safety \
                                                  property is violated)"
        ]
    );
}

/// Every "ROW violates PROP in N steps:" block is its N numbered steps, then the line saying
/// at which step and why PROP fails, in the words of the timelines (`view::first_violation`).
#[test]
fn every_counterexample_ends_with_its_reason() {
    let (_, text) = model_check(&["--groups", "1", "--records", "2"]);
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = 0;
    for (index, heading) in lines.iter().enumerate().filter(|(_, line)| line.contains(" violates ")) {
        let steps: usize = heading
            .rsplit_once(" in ")
            .and_then(|(_, rest)| rest.split(' ').next())
            .and_then(|count| count.parse().ok())
            .unwrap_or_else(|| panic!("a step count in: {heading}"));
        // Step lines, each perhaps wrapped onto lines indented under its text.
        let mut at = index + 1;
        let mut numbered = 0;
        while at < lines.len()
            && (lines[at].starts_with("      ") || lines[at].trim_start().starts_with(&format!("{}. ", numbered + 1)))
        {
            if !lines[at].starts_with("      ") {
                numbered += 1;
            }
            at += 1;
        }
        assert_eq!(numbered, steps, "{heading}");
        let reason = lines.get(at).copied().unwrap_or_default();
        let prefix = format!("  violated at step {steps}: ");
        assert!(reason.starts_with(&prefix) && reason.len() > prefix.len(), "{heading}: then '{reason}'");
        blocks += 1;
    }
    assert!(blocks > 50, "the table at these bounds has many counterexamples, found {blocks}");
}

/// A scratch file under Cargo's per-target temporary directory, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn the_html_report_shows_each_rows_bounds_and_scrolls_in_boxes() {
    let file = Scratch(Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("layout-{}.html", std::process::id())));
    let path = file.0.to_str().expect("a UTF-8 path");
    let (_, text) = model_check(&["--groups", "1", "--records", "2", "--quiet", "--html", path]);
    let page = std::fs::read_to_string(&file.0).unwrap_or_else(|_| panic!("no report written: {text}"));
    // The matrix and the bounds table each scroll inside a box; the timelines scale down to
    // the page's width instead, and the page is narrower than a 1280 px window.
    assert_eq!(page.matches("<div class='box' style='overflow-x:auto'>").count(), 2);
    let timelines = page.matches("<svg").count();
    assert!(timelines > 50, "{timelines} timelines");
    assert_eq!(page.matches(" width='100%' style='max-width:").count(), timelines);
    assert!(page.contains("max-width:1200px"), "the page's width");
    // A row per strategy in the bounds table, with its own budgets: atomic-dlq's poison.
    let bounds = &page[page.find("<table class='bounds'>").expect("the bounds table")..];
    for strategy in model::Strategy::ALL {
        assert!(bounds.contains(&format!("<tr><td>{strategy}</td>")), "{strategy}");
    }
    for header in ["groups", "records", "crashes", "rebalances", "pauses", "poison", "isr-shrinks"] {
        assert!(bounds.contains(&format!("<th>{header}</th>")), "{header}");
    }
    assert!(bounds.contains("<tr><td>atomic-dlq</td>"), "atomic-dlq");
    let dlq = &bounds[bounds.find("<tr><td>atomic-dlq</td>").expect("atomic-dlq")..];
    assert!(dlq[..dlq.find("</tr>").expect("a row end")].contains("<td class='differs'>1</td>"), "{dlq}");
    // Each violation says where and why it fails, as its timeline does.
    assert_eq!(page.matches("<p class='reason'>violated at step ").count(), timelines);
    assert!(page.contains("applied twice: total 5 -&gt; 10") || page.contains("applied twice: total 5 -> 10"));
}

/// On a terminal the report fits the terminal's own width, asked of the kernel: `script` (from
/// util-linux, in every Debian) runs the check on a pseudo-terminal set to 72 columns, with
/// `COLUMNS` removed so that only the terminal can say it.
#[test]
fn on_a_terminal_no_line_is_wider_than_the_terminal() {
    const TERMINAL_CHARS: usize = 72;
    let command = format!(
        "stty cols {TERMINAL_CHARS} && exec {} check --strategy skip-poison --groups 1 --records 2",
        env!("CARGO_BIN_EXE_model")
    );
    let output = Command::new("script")
        .args(["--quiet", "--return", "--command", &command, "/dev/null"])
        .env_remove("COLUMNS")
        .output()
        .expect("script (util-linux) runs");
    let text = String::from_utf8(output.stdout).expect("UTF-8").replace('\r', "");
    assert!(text.lines().count() > 5, "{text}");
    assert!(text.lines().any(|line| line.chars().count() > TERMINAL_CHARS - 12), "nothing near the width: {text}");
    for line in text.lines() {
        assert!(line.chars().count() <= TERMINAL_CHARS, "{} columns: {line}", line.chars().count());
    }
    assert!(text.lines().last().is_some_and(|last| last.starts_with("FAILED")), "{text}");
}
