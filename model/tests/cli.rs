//! The `model` command line, run as a process: exit codes, output, trace files and input errors.

use model::check::{self, Verdict};
use model::trace::Trace;
use model::{Action, ConsumerModel};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "../../tests/support/readme_bad_input.rs"]
mod readme_bad_input;
use readme_bad_input::readme_bad_input_rows;

/// The bounds every run here uses: small enough for the debug binary to check all strategies
/// in about a second. The default bounds take minutes in debug mode.
const SMALL: [&str; 4] = ["--groups", "1", "--records", "2"];

/// Runs the debug binary Cargo built for these tests: `model check ARGS...`.
fn model_check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_model")).arg("check").args(args).output().expect("the model binary runs")
}

fn small_check(extra: &[&str]) -> Output {
    model_check(&[extra, &SMALL[..]].concat())
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("stderr is UTF-8")
}

/// A scratch directory under Cargo's per-target temporary directory, removed when dropped.
/// The process id in its name keeps concurrent test runs apart.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new(name: &str) -> ScratchDir {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-{name}-{}", std::process::id()));
        // A leftover from a run that was killed before its cleanup must not leak into this one.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("the scratch directory can be created");
        ScratchDir(path)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The properties `atomic` violates at the small bounds (see verdicts.rs for the full table).
const ATOMIC_VIOLATIONS: [&str; 5] =
    ["no-duplicate", "effectively-once", "monotonic-checkpoint", "fenced-writes", "no-silent-skip"];

/// Asserts that `actions` replay through the small `atomic` model into a violation of `property`.
fn assert_atomic_counterexample(property: &str, actions: &[Action]) {
    let model =
        ConsumerModel::new(model::Config { groups: 1, records: 2, ..model::Config::new(model::Strategy::Atomic) });
    let states = check::replay(&model, actions).unwrap_or_else(|e| panic!("{property}: {e}"));
    let checked = check::property_named(&model, property).expect("a property of atomic");
    assert!(check::is_discovery(&model, &checked, states.last().expect("replay yields states")), "{property}");
}

#[test]
fn a_strategy_that_keeps_every_guarantee_exits_0() {
    let output = small_check(&["--strategy", "atomic-fenced"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}{}", stderr(&output));
    // The summary's row, with its indented continuation lines.
    let row: String = text
        .lines()
        .skip_while(|line| !line.starts_with("atomic-fenced "))
        .take_while(|line| line.starts_with("atomic-fenced ") || line.starts_with("    "))
        .collect::<Vec<_>>()
        .join(" ");
    // All seven safety properties checked for it hold, so the row names seven after `holds:`
    // (the poison, producer and retention properties are not checked: not named) and no violation.
    let holds = row.split_once("holds: ").and_then(|(_, rest)| rest.split(" | ").next()).expect("a holds list");
    assert_eq!(holds.split(", ").count(), 7, "{row}");
    assert!(!text.contains("VIOLATED"), "{text}");
}

#[test]
fn a_violation_exits_1_with_a_numbered_counterexample() {
    let output = small_check(&["--strategy", "atomic"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}{}", stderr(&output));
    let heading = "atomic violates no-duplicate in ";
    let start = text.find(heading).unwrap_or_else(|| panic!("no '{heading}' in:\n{text}"));
    let mut lines = text[start..].lines();
    let first = lines.next().expect("the heading line");
    let steps: usize =
        first[heading.len()..].trim_end_matches(" steps:").parse().expect("the heading gives a step count");
    // The heading's count is the number of numbered steps printed under it, 1 to N in order.
    let numbers: Vec<usize> = lines
        .map_while(|line| line.trim_start().split_once(". ").and_then(|(number, _)| number.parse().ok()))
        .collect();
    assert_eq!(numbers, (1..=steps).collect::<Vec<_>>(), "{text}");
    assert!(text.contains("FAILED: a safety property is violated"), "{text}");
}

#[test]
fn json_output_carries_every_violation_with_its_actions() {
    let output = small_check(&["--json", "--strategy", "atomic"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let document: Value = serde_json::from_str(&stdout(&output)).expect("stdout is one JSON document");
    assert_eq!((document["ok"].as_bool(), document["exit_code"].as_u64()), (Some(false), Some(1)));
    let tool = format!("onceproof-model {}", env!("CARGO_PKG_VERSION"));
    assert_eq!((document["format"].as_str(), document["version"].as_u64()), (Some("onceproof-check"), Some(1)));
    assert_eq!(document["tool"].as_str(), Some(tool.as_str()));
    let properties = document["reports"][0]["properties"].as_array().expect("reports[0].properties is an array");
    let violated: Vec<&Value> = properties.iter().filter(|p| p["verdict"] == "violated").collect();
    let names: Vec<&str> = violated.iter().map(|p| p["name"].as_str().expect("a property name")).collect();
    assert_eq!(names, ATOMIC_VIOLATIONS);
    for property in violated {
        let name = property["name"].as_str().expect("a property name");
        let actions: Vec<Action> =
            serde_json::from_value(property["actions"].clone()).expect("actions are action values");
        assert!(!actions.is_empty(), "{name}");
        assert_atomic_counterexample(name, &actions);
    }
}

/// The reports of `--json` read back as the library's own `CheckReport`, which refuses
/// unknown fields: the output and the reader agree on every field.
#[test]
fn json_reports_read_back_as_check_reports() {
    let output = small_check(&["--json", "--strategy", "atomic-fenced"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let document: Value = serde_json::from_str(&stdout(&output)).expect("stdout is one JSON document");
    let reports: Vec<check::CheckReport> =
        serde_json::from_value(document["reports"].clone()).expect("reports read back as CheckReports");
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].config.strategy, model::Strategy::AtomicFenced);
    let mut report = document["reports"][0].clone();
    report["colour"] = serde_json::json!("red");
    let error = serde_json::from_value::<check::CheckReport>(report).expect_err("an unknown field");
    assert!(error.to_string().contains("unknown field `colour`"), "{error}");
}

#[test]
fn version_names_the_package_version() {
    let output = Command::new(env!("CARGO_BIN_EXE_model")).arg("--version").output().expect("the model binary runs");
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(stdout(&output).trim(), format!("model {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn traces_are_written_one_file_per_violation_and_replay() {
    let dir = ScratchDir::new("traces");
    let traces = dir.0.join("nested").join("traces");
    let traces_arg = traces.to_str().expect("the scratch path is UTF-8");
    let output = small_check(&["--strategy", "atomic", "--traces", traces_arg]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let mut files: Vec<String> = std::fs::read_dir(&traces)
        .expect("the traces directory was created")
        .map(|entry| entry.expect("a directory entry").file_name().into_string().expect("a UTF-8 file name"))
        .collect();
    files.sort();
    // Only the trace files are there: in particular, the writability probe was removed.
    let mut expected: Vec<String> = ATOMIC_VIOLATIONS.iter().map(|p| format!("atomic--{p}.json")).collect();
    expected.sort();
    assert_eq!(files, expected);
    let text = std::fs::read_to_string(traces.join("atomic--no-duplicate.json")).expect("the trace is readable");
    let trace = Trace::from_json(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((trace.property.as_deref(), trace.verdict), (Some("no-duplicate"), Some(Verdict::Violated)));
    assert_eq!((trace.config.groups, trace.config.records), (1, 2));
    assert_eq!(trace.tool, Some(format!("onceproof-model {}", env!("CARGO_PKG_VERSION"))));
    assert_atomic_counterexample("no-duplicate", &trace.actions);
}

/// The one var of an ITF state this test reads (the `itf` crate skips the others).
#[derive(serde::Deserialize)]
struct ActionTaken {
    #[serde(rename = "mbt::actionTaken")]
    kind: String,
}

/// `--format itf` writes beside each JSON trace its ITF, which the `itf` crate reads: the
/// initial state and one per action, the actions' kinds in `mbt::actionTaken`.
#[test]
fn itf_traces_are_written_beside_the_json_ones_and_parse() {
    let dir = ScratchDir::new("itf");
    let traces_arg = dir.0.to_str().expect("the scratch path is UTF-8");
    let output = small_check(&["--strategy", "effect-first", "--traces", traces_arg, "--format", "itf"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let mut files: Vec<String> = std::fs::read_dir(&dir.0)
        .expect("the traces directory exists")
        .map(|entry| entry.expect("a directory entry").file_name().into_string().expect("a UTF-8 file name"))
        .collect();
    files.sort();
    let (itf_files, json_files): (Vec<String>, Vec<String>) =
        files.into_iter().partition(|name| name.ends_with(".itf.json"));
    assert_eq!(json_files.len(), 5, "{json_files:?}");
    let expected: Vec<String> = json_files.iter().map(|name| name.replace(".json", ".itf.json")).collect();
    assert_eq!(itf_files, expected);
    for (json_file, itf_file) in json_files.iter().zip(&itf_files) {
        let read = |name: &str| std::fs::read_to_string(dir.0.join(name)).expect("the trace is readable");
        let trace = Trace::from_json(&read(json_file)).unwrap_or_else(|e| panic!("{json_file}: {e}"));
        let itf = itf::trace_from_str::<ActionTaken>(&read(itf_file)).unwrap_or_else(|e| panic!("{itf_file}: {e}"));
        assert_eq!(itf.meta.source.as_deref(), Some(json_file.as_str()));
        let kinds: Vec<String> = itf.states.into_iter().map(|state| state.value.kind).collect();
        let kind =
            |action: &Action| serde_json::to_value(action).expect("an action")["kind"].as_str().map(String::from);
        let mut expected = vec!["init".to_string()];
        expected.extend(trace.actions.iter().map(|action| kind(action).expect("a kind")));
        assert_eq!(kinds, expected, "{itf_file}");
    }
}

#[test]
fn bad_input_exits_2_with_an_error_line_and_no_output() {
    let dir = ScratchDir::new("bad-input");
    let file = dir.0.join("a-file");
    std::fs::write(&file, "not a directory").expect("the scratch file can be written");
    let under_file = file.join("traces");
    let under_file = under_file.to_str().expect("the scratch path is UTF-8");
    let html_under_file = format!("{}/report.html", file.display());
    let scratch = dir.0.to_str().expect("the scratch path is UTF-8");
    // (arguments, text the first stderr line must contain). Clap's errors and the model's own
    // are both exactly one line (clap's usage hint is dropped).
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--strategy", "exactly-once", "--groups", "1", "--records", "2"], "unknown strategy 'exactly-once'"),
        (vec!["--groups", "1", "--records", "0"], "--records 0 is out of range: accepted values are 1..=8"),
        (vec!["--groups", "1", "--records", "50"], "--records 50 is out of range"),
        (vec!["--groups", "1", "--records", "300"], "300 is not in 0..=255"),
        (vec!["--groups", "1", "--records", "2", "--partitions", "3"], "--partitions 3 is out of range"),
        (vec!["--groups", "1", "--records", "2", "--commit-every", "3"], "--commit-every 3 is out of range"),
        (vec!["--groups", "1", "--records", "2", "--delta", "0"], "--delta 0"),
        (
            vec!["--groups", "1", "--records", "2", "--delta", "-1000000000001"],
            "--delta -1000000000001 is out of range",
        ),
        (vec!["--groups", "1", "--records", "2", "--threads", "0"], "'--threads <THREADS>': 0 is not in 1..=64"),
        (vec!["--groups", "1", "--records", "2", "--jobs", "0"], "'--jobs <JOBS>': 0 is not in 1..=64"),
        // `-1` after a space reaches the value parser too (hyphen values are allowed).
        (vec!["--groups", "1", "--records", "2", "--timeout", "-1"], "-1 is out of range"),
        (
            vec!["--groups", "1", "--records", "2", "--timeout=-1"],
            "-1 is out of range: accepted values are 0 < SECONDS",
        ),
        (
            vec!["--groups", "1", "--records", "2", "--timeout", "0"],
            "0 is out of range: accepted values are 0 < SECONDS",
        ),
        (vec!["--groups", "1", "--records", "2", "--timeout", "soon"], "'soon' is not a number of seconds"),
        (vec!["--groups", "1", "--records", "2", "--traces", under_file], "cannot create traces directory"),
        (vec!["--groups", "1", "--records", "2", "--html", &html_under_file], "/a-file does not exist"),
        (vec!["--groups", "1", "--records", "2", "--html", scratch], "exists and is not a regular file; refused"),
    ];
    for (args, expected) in cases {
        let output = model_check(&args);
        let errors = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {errors}");
        assert_eq!(stdout(&output), "", "{args:?}");
        let first = errors.lines().next().unwrap_or_default();
        assert!(first.starts_with("error: "), "{args:?}: {errors}");
        assert!(first.contains(expected), "{args:?}: '{first}' lacks '{expected}'");
        assert_eq!(errors.lines().count(), 1, "{args:?}: {errors}");
    }
}

/// `any` and `--unbounded` where they would prove nothing or do not apply: one line naming why,
/// exit 2, nothing on stdout, and no search run (over the table too: a contradiction of the
/// flags is refused, not every row left out for it).
#[test]
fn any_is_refused_in_one_line_where_it_does_not_apply() {
    let cases: [(&[&str], &str); 6] = [
        (&["--unbounded", "--crashes", "2"], "--unbounded lifts --crashes, so --crashes 2 contradicts it"),
        (&["--strategy", "atomic", "--unbounded", "--pauses", "1"], "--unbounded lifts --pauses, so --pauses 1"),
        (&["--crashes", "any", "--search", "simulation"], "any (or --unbounded) needs a complete search"),
        (
            &["--strategy", "txn-fenced", "--crashes", "any"],
            "txn-fenced takes no unbounded budget (any, --unbounded): its output partitions keep producer epochs",
        ),
        (&["--retentions", "any"], "--retentions any is refused: retention is kept exact"),
        (&["--ack-losses", "any"], "--ack-losses any is refused: every one appends a record once more"),
    ];
    for (args, expected) in cases {
        let output = model_check(args);
        let errors = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {errors}");
        assert_eq!(stdout(&output), "", "{args:?}");
        assert_eq!(errors.lines().count(), 1, "{args:?}: {errors}");
        assert!(errors.starts_with(&format!("error: {expected}")), "{args:?}: '{errors}' is not '{expected}'");
    }
}

/// `--html` writes one self-contained page: the verdict table with a colour class per cell,
/// each violation's timeline with the failing step marked and its numbered steps, and nothing
/// fetched from elsewhere.
#[test]
fn the_html_report_is_one_self_contained_page() {
    let dir = ScratchDir::new("html");
    let file = dir.0.join("report.html");
    let output = small_check(&["--strategy", "atomic", "--html", file.to_str().expect("UTF-8")]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let page = std::fs::read_to_string(&file).expect("the report is written");
    assert!(page.starts_with("<!doctype html>") && page.ends_with("</html>\n"));
    for violated in ATOMIC_VIOLATIONS {
        assert!(page.contains(&format!("<td class='violated'><a href='#atomic--{violated}'>")), "{violated}");
        assert!(page.contains(&format!("<h2 id='atomic--{violated}'>atomic violates {violated} in ")), "{violated}");
        assert!(page.contains(&format!("class='violation' data-property='{violated}'")), "{violated}: not marked");
    }
    assert!(page.contains("<td class='holds'>holds</td>"));
    assert_eq!(page.matches("<svg").count(), ATOMIC_VIOLATIONS.len());
    // No external asset: the only URL is the SVG namespace.
    let urls = page.matches("http").count();
    assert_eq!(urls, page.matches("http://www.w3.org/2000/svg").count(), "an external reference");
    assert!(!page.contains(" src="), "an external reference");
    // The temporary file was renamed: the report is the directory's only entry.
    let entries: Vec<_> =
        std::fs::read_dir(&dir.0).expect("the scratch directory").flatten().map(|e| e.file_name()).collect();
    assert_eq!(entries, ["report.html"], "a temporary file was left behind");
}

#[test]
fn a_simulation_finds_only_real_violations_of_atomic() {
    // Random walks prove nothing, and how many run in a second depends on the machine, but
    // atomic's violations are four steps deep and thousands of walks run in that second even in
    // debug mode, so one is found on every run in practice. What holds whatever the timing is that every
    // violation the simulation reports is one the exhaustive search confirms.
    let output = small_check(&["--strategy", "atomic", "--search", "simulation", "--timeout", "1", "--seed", "7"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}{}", stderr(&output));
    let reported: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("atomic violates "))
        .map(|rest| rest.split(' ').next().expect("a property name"))
        .collect();
    assert!(!reported.is_empty(), "{text}");
    for property in reported {
        assert!(ATOMIC_VIOLATIONS.contains(&property), "the simulation reports {property}, which atomic keeps");
    }
}

#[test]
fn all_strategies_at_other_bounds_are_not_compared_with_spec_md() {
    let output = model_check(&SMALL);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}{}", stderr(&output));
    assert!(
        text.contains("compared with nothing: spec.md's tables are for the default bounds and for --unbounded only"),
        "{text}"
    );
    for strategy in model::Strategy::ALL {
        assert!(text.lines().any(|line| line.starts_with(&format!("{strategy} "))), "no table row for {strategy}");
    }
}

/// Rows start in another order than they are reported in (the parallel rows first), and
/// several run at once: the report, timings and memory aside, is the same for any `--jobs`.
#[test]
fn the_report_does_not_depend_on_the_number_of_jobs() {
    fn without_measurements(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                map.retain(|key, _| !key.ends_with("seconds") && !key.contains("rss"));
                map.values_mut().for_each(without_measurements);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(without_measurements),
            _ => {}
        }
    }
    let report = |jobs: &str| {
        let output = small_check(&["--json", "--jobs", jobs]);
        assert_eq!(output.status.code(), Some(0), "--jobs {jobs}: {}", stderr(&output));
        let mut value: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("the report is JSON");
        without_measurements(&mut value);
        value
    };
    assert_eq!(report("1"), report("3"));
}

#[test]
fn an_unfinished_search_that_finds_nothing_is_inconclusive() {
    // A simulation never completes, so for a strategy that keeps every guarantee it can neither
    // prove nor refute anything: exit 3, for one strategy and for all of them.
    let single = small_check(&["--strategy", "atomic-fenced", "--search", "simulation", "--timeout", "1"]);
    assert_eq!(single.status.code(), Some(3), "{}{}", stdout(&single), stderr(&single));
    assert!(stdout(&single).contains("INCONCLUSIVE"), "{}", stdout(&single));
    let all = model_check(&["--groups", "1", "--records", "2", "--search", "simulation", "--timeout", "1"]);
    assert_eq!(all.status.code(), Some(3), "{}{}", stdout(&all), stderr(&all));
}

/// Crash-only runs of the strategies that prevent replays: a replay (or a skipped duplicate)
/// is what they prevent, so not observing one is the good outcome and never fails the check;
/// every fault witness (the crash after a write, the log end, ...) must still be reached.
#[test]
fn safe_crash_only_runs_exit_0_with_their_unobserved_outcomes_reported() {
    let cases: [(&str, &str); 3] =
        [("atomic", "replay"), ("atomic-fenced", "replay"), ("atomic-cas", "replay, duplicate-skipped")];
    for (strategy, not_observed) in cases {
        let output = model_check(&["--strategy", strategy, "--crashes", "2", "--rebalances", "0", "--pauses", "0"]);
        let text = stdout(&output);
        assert_eq!(output.status.code(), Some(0), "{strategy}: {text}{}", stderr(&output));
        assert!(text.contains(&format!("{strategy}: not observed: {not_observed}")), "{strategy}: {text}");
        assert!(text.contains("OK: every verdict as expected, every fault witness reached"), "{text}");
        assert!(!text.contains("MISMATCH"), "{text}");
    }
}

/// Every `model` row of the bad-input table of docs/errors.md, as a child process: the row's exit code, the
/// row's line and nothing else on stderr, nothing on stdout.
#[test]
fn every_bad_input_row_of_the_readme_gets_its_one_line() {
    let rows = readme_bad_input_rows("model");
    assert!(rows.len() >= 10, "the bad-input table of docs/errors.md has {} model rows", rows.len());
    for row in rows {
        let output =
            Command::new(env!("CARGO_BIN_EXE_model")).args(&row.command[1..]).output().expect("the model binary runs");
        let command = row.command.join(" ");
        assert_eq!(output.status.code(), Some(row.exit), "{command}: {}", stderr(&output));
        assert_eq!(stderr(&output), format!("{}\n", row.line), "{command}");
        assert_eq!(stdout(&output), "", "{command}");
    }
}

/// An output path that exists and is not a regular file is refused in one line (exit 2), and
/// left as it was: a device, a directory or a FIFO as `--html` (refused before the search), a
/// regular file as `--traces`, and a trace file's name taken by a directory inside `--traces`.
#[test]
fn output_paths_that_are_not_regular_files_are_refused() {
    let scratch = ScratchDir::new("outputs");
    let fifo = scratch.0.join("fifo");
    let c_path = std::ffi::CString::new(fifo.to_str().expect("UTF-8")).expect("no NUL");
    // SAFETY: mkfifo(3) on a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo {}", fifo.display());
    let file = scratch.0.join("a-file");
    std::fs::write(&file, "kept").expect("a regular file");
    let traces = scratch.0.join("traces");
    let taken = traces.join("atomic--no-duplicate.json");
    std::fs::create_dir_all(&taken).expect("a directory where a trace file goes");
    let (dir, fifo, file, traces, taken) = (
        scratch.0.to_str().expect("UTF-8"),
        fifo.to_str().expect("UTF-8"),
        file.to_str().expect("UTF-8"),
        traces.to_str().expect("UTF-8"),
        taken.to_str().expect("UTF-8"),
    );
    // (flag, its value, the line on stderr)
    let cases = [
        ("--html", "/dev/full", "`--html /dev/full`: /dev/full exists and is not a regular file; refused".to_string()),
        ("--html", dir, format!("`--html {dir}`: {dir} exists and is not a regular file; refused")),
        ("--html", fifo, format!("`--html {fifo}`: {fifo} exists and is not a regular file; refused")),
        ("--traces", file, format!("`--traces {file}`: {file} exists and is not a directory; refused")),
        ("--traces", traces, format!("`--traces {traces}`: {taken} exists and is not a regular file; refused")),
    ];
    for (flag, value, line) in cases {
        let output = small_check(&["--strategy", "atomic", flag, value]);
        let errors = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{flag} {value}: {errors}");
        assert_eq!(stdout(&output), "", "{flag} {value}");
        // `--traces` names each trace it wrote before the refusal; the refusal is the last line.
        assert_eq!(errors.lines().last(), Some(format!("error: {line}").as_str()), "{flag} {value}: {errors}");
        if flag == "--html" {
            assert_eq!(errors.lines().count(), 1, "{flag} {value}: refused before the search: {errors}");
        }
    }
    // Each is left as it was.
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata("/dev/full").expect("/dev/full").file_type().is_char_device());
    assert!(std::fs::metadata(fifo).expect("the FIFO").file_type().is_fifo());
    assert_eq!(std::fs::read_to_string(file).expect("the file"), "kept");
    assert!(std::fs::metadata(taken).expect("the directory").is_dir());
    assert_eq!(std::fs::read_dir(taken).expect("the directory").count(), 0);
    let partial = std::fs::read_dir(traces)
        .expect("traces")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".partial"))
        .count();
    assert_eq!(partial, 0, "a temporary trace file was left behind");
}
