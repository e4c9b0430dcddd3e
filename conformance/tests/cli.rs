//! The `conformance` command line: exit codes for conforming, divergent and unreadable input,
//! and generated tests.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "../../tests/support/readme_bad_input.rs"]
mod readme_bad_input;
use readme_bad_input::readme_bad_input_rows;

fn conformance(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_conformance")).args(args).output().expect("the conformance binary runs")
}

fn corpus(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces").join(name).display().to_string()
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// A reproduce line names the binary that ran: `cargo run -p conformance --` under cargo, the
/// program as invoked otherwise (an installed `conformance`).
#[test]
fn a_reproduce_line_runs_the_binary_that_printed_it() {
    let fenced = corpus("scenario--zombie-atomic-fenced.json");
    let binary = env!("CARGO_BIN_EXE_conformance");
    let output = Command::new(binary)
        .args(["replay", "--mutation", "no-fence", &fenced])
        .env_remove("CARGO_PKG_NAME")
        .output()
        .expect("the conformance binary runs");
    let text = String::from_utf8_lossy(&output.stdout);
    let expected = format!("reproduce: {binary} replay --mode process --mutation no-fence:apply-atomic {fenced}");
    assert!(text.contains(&expected), "expected '{expected}' in:\n{text}");
}

#[test]
fn replay_exit_codes() {
    let fenced = corpus("scenario--zombie-atomic-fenced.json");
    let dir = scratch("cli-replay");
    let wrong_version = dir.join("wrong-version.json");
    std::fs::write(&wrong_version, r#"{"format":"onceproof-trace","version":2}"#).expect("write");
    let not_json = dir.join("not-json.json");
    std::fs::write(&not_json, "{ nope").expect("write");
    let (wrong_version, not_json) = (wrong_version.display().to_string(), not_json.display().to_string());
    let (duplicate, older_set) = (corpus("atomic--no-duplicate.json"), corpus("blind-set--latest-wins.json"));
    // The ITF of a corpus trace, as `model check --traces DIR --format itf` writes it.
    let trace = conformance::corpus::load(Path::new(&duplicate)).expect("a corpus trace");
    let itf = dir.join("atomic--no-duplicate.itf.json");
    std::fs::write(&itf, model::itf::to_json(&trace).expect("the trace replays")).expect("write");
    let itf = itf.display().to_string();
    // (case, arguments, exit code, a line the output must contain)
    let table: [(&str, Vec<&str>, i32, &str); 9] = [
        ("conforms", vec!["replay", &fenced], 0, "1 passed, 0 failed"),
        // The real store's evidence in its own terms: a total, or a set row's value.
        ("evidence, total", vec!["replay", &duplicate], 0, "g0: total 10 (each applied record once would be 5)"),
        ("evidence, value", vec!["replay", &older_set], 0, "g0: value 1 (the highest applied offset's would be 2)"),
        (
            "diverges",
            vec!["replay", "--mutation", "no-fence", &fenced],
            1,
            "reproduce: cargo run -p conformance -- replay --mode process --mutation no-fence",
        ),
        // The summary counts the steps that ran, the divergent one included (step 6).
        ("diverges, steps run", vec!["replay", "--mutation", "no-fence", &fenced], 1, "0 passed, 1 failed (6 steps in"),
        (
            "an ITF trace",
            vec!["replay", &itf],
            2,
            "an ITF trace (the Informal Trace Format, written for Apalache and Quint), not a onceproof-trace: \
             replay the trace written beside it, atomic--no-duplicate.json",
        ),
        ("wrong version", vec!["replay", &wrong_version], 2, "trace format version 2 is not supported"),
        ("not json", vec!["replay", &not_json], 2, "not a valid trace"),
        ("missing file", vec!["replay", "/no/such/trace.json"], 2, "no such file or directory"),
    ];
    for (case, args, code, needle) in table {
        let output = conformance(&args);
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert_eq!(output.status.code(), Some(code), "{case}: {text}");
        assert!(text.contains(needle), "{case}: expected '{needle}' in:\n{text}");
        if code == 2 {
            assert_eq!(String::from_utf8_lossy(&output.stderr).lines().count(), 1, "{case}: one error line:\n{text}");
        }
    }
}

#[test]
fn generated_walks_and_depths_conform() {
    let out = scratch("cli-generated");
    let out = out.display().to_string();
    for args in [
        vec![
            "test",
            "--strategy",
            "atomic-fenced",
            "--walks",
            "20",
            "--seed",
            "7",
            "--mode",
            "in-process",
            "--out",
            &out,
        ],
        vec![
            "test",
            "--strategy",
            "dedup-separate",
            "--groups",
            "1",
            "--depth",
            "4",
            "--mode",
            "process",
            "--out",
            &out,
        ],
    ] {
        let output = conformance(&args);
        let text = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(0), "{args:?}:\n{text}{}", String::from_utf8_lossy(&output.stderr));
        assert!(text.contains(" 0 failed"), "{args:?}:\n{text}");
    }
}

/// `replay --json`: one document, its schema's fields (spec.md §11), for a conforming and a
/// divergent replay, and the exit code in it the process's.
#[test]
fn replay_json_is_one_document_with_the_schema_fields() {
    let fenced = corpus("scenario--zombie-atomic-fenced.json");
    for (mutation, code, verdict, steps) in [(None, 0, "conforms", 6), (Some("no-fence"), 1, "diverges", 6)] {
        let mut args = vec!["replay", "--json"];
        args.extend(mutation.map(|m| ["--mutation", m]).iter().flatten());
        args.push(&fenced);
        let output = conformance(&args);
        let document: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!("{args:?}: not one JSON document ({e}): {}", String::from_utf8_lossy(&output.stdout))
        });
        assert_eq!(output.status.code(), Some(code), "{args:?}");
        assert_eq!(document["format"], json!("onceproof-conformance"));
        assert_eq!(document["version"], json!(1));
        assert_eq!(document["exit_code"], json!(code));
        assert_eq!(document["traces"][0]["verdict"], json!(verdict), "{document}");
        assert_eq!(document["traces"][0]["steps"], json!(steps), "{document}");
        assert_eq!(document["steps"], json!(steps));
        if code == 1 {
            assert_eq!(document["traces"][0]["at"], json!("step 6"));
            assert!(document["traces"][0]["reproduce"].as_str().is_some_and(|r| r.contains("--mutation no-fence")));
        }
    }
}

/// `test --json` (spec.md §11): stdout is exactly one JSON document, one line, while what is
/// generated and each divergence go to stderr; its totals are the ones the lines print, its
/// exit code the process's (0, 3 for paths cut at `--paths-max`, 1 under a planted bug), and a
/// divergence names its step, its saved trace and the commands that bring it back.
#[test]
fn test_json_is_one_document_with_the_totals_of_the_lines() {
    let out = scratch("cli-test-json");
    let out = out.display().to_string();
    // The first path's verdict, steps and, for a divergence, its step.
    type First = (&'static str, u64, Option<&'static str>);
    let cases: [(&[&str], i32, First); 3] = [
        (&["--strategy", "atomic-fenced", "--walks", "3", "--seed", "3"], 0, ("conforms", 15, None)),
        (&["--strategy", "atomic", "--depth", "3", "--paths-max", "2"], 3, ("conforms", 3, None)),
        (
            &["--strategy", "atomic-fenced", "--walks", "1", "--seed", "3", "--mutation", "no-fence"],
            1,
            ("diverges", 9, Some("step 9")),
        ),
    ];
    for (flags, code, (verdict, steps, at)) in cases {
        let args = [&["test"][..], flags, &["--mode", "in-process", "--out", &out]].concat();
        let lines = conformance(&args);
        let lines_out = String::from_utf8_lossy(&lines.stdout);
        let output = conformance(&[&args[..], &["--json"]].concat());
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(stdout.lines().count(), 1, "{args:?}: not one line:\n{stdout}");
        let document: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not one JSON document ({e}):\n{stdout}"));
        assert_eq!((lines.status.code(), output.status.code()), (Some(code), Some(code)), "{args:?}:\n{lines_out}");
        assert!(String::from_utf8_lossy(&output.stderr).contains(flags[1]), "{args:?}: no progress on stderr");
        assert_eq!(document["format"], json!("onceproof-conformance"));
        assert_eq!(document["version"], json!(1));
        assert_eq!(document["command"], json!("test"));
        assert_eq!(document["exit_code"], json!(code));
        let totals = lines_out.lines().find(|line| line.contains(" passed, ")).expect("the summary line");
        // `P passed, F failed (S steps in ...`: its first three numbers.
        let numbers: Vec<&str> = totals.split(|c: char| !c.is_ascii_digit()).filter(|n| !n.is_empty()).collect();
        for (field, number) in [("passed", 0), ("failed", 1), ("steps", 2)] {
            assert_eq!(document[field].to_string(), numbers[number], "{args:?}: {field} in {document} vs {totals}");
        }
        let first = &document["traces"][0];
        assert_eq!((&first["verdict"], &first["steps"]), (&json!(verdict), &json!(steps)), "{document}");
        let Some(at) = at else { continue };
        assert_eq!(first["at"], json!(at), "{document}");
        assert!(first["detail"].as_str().is_some_and(|d| d.contains("| consumer")), "{document}");
        assert!(first["reproduce"].as_str().is_some_and(|r| r.contains("--mutation no-fence")), "{document}");
        assert!(first["regenerate"].as_str().is_some_and(|r| r.contains("--walks 1 --seed 3")), "{document}");
        let saved = first["path"].as_str().expect("the saved trace");
        conformance::corpus::load(Path::new(saved)).unwrap_or_else(|e| panic!("{saved}: {e}"));
    }
}

/// A divergent generated path is saved under a name no earlier run's file has: the same
/// divergent walk twice into one directory leaves two files, each a trace that replays.
#[test]
fn a_saved_divergence_never_replaces_an_earlier_one() {
    let out = scratch("cli-saved-divergences");
    let dir = out.display().to_string();
    let args =
        ["test", "--strategy", "atomic-fenced", "--walks", "1", "--seed", "3", "--mutation", "no-fence", "--out", &dir];
    let mut saved = Vec::new();
    for run in 0..2 {
        let output = conformance(&args);
        let text = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(1), "run {run}: {text}");
        let line =
            text.lines().find(|line| line.contains(", saved as ")).unwrap_or_else(|| panic!("run {run}: {text}"));
        saved.push(line.split(", saved as ").nth(1).expect("a path").to_string());
    }
    assert_ne!(saved[0], saved[1], "the second run replaced the first's file");
    for path in &saved {
        conformance::corpus::load(Path::new(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}

/// `test` with `any` (spec.md §7.1): walks of the abstraction, each replayed in the faults it
/// uses, conform (exit 0); `any` where the abstraction does not reach is one line and exit 2:
/// a budget that is kept exact, and a transactional row whose epochs cannot be renamed.
#[test]
fn any_budgets_conform_and_are_refused_where_they_do_not_apply() {
    let out = scratch("cli-any");
    let out = out.display().to_string();
    let lifted = ["--crashes", "any", "--rebalances", "any", "--pauses", "any"];
    let walks = ["--walks", "20", "--seed", "1", "--mode", "in-process", "--out", &out];
    let args =
        [&["test", "--strategy", "atomic-fenced", "--groups", "1", "--records", "2"], &lifted[..], &walks].concat();
    let output = conformance(&args);
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{args:?}:\n{text}{}", String::from_utf8_lossy(&output.stderr));
    assert!(text.contains("20 passed, 0 failed"), "{args:?}:\n{text}");
    let refused: [(&[&str], &str); 6] = [
        (&["--ack-losses", "any"], "--ack-losses any is refused: every one appends a record once more"),
        (&["--log-losses", "any"], "--log-losses any is refused: every one appends a record once more"),
        (&["--retentions", "any"], "--retentions any is refused: retention is kept exact"),
        (&["--leader-failures", "any"], "--leader-failures any is refused: only --crashes, --rebalances and --pauses"),
        (&["--isr-shrinks", "any"], "--isr-shrinks any is refused: only --crashes, --rebalances and --pauses"),
        (
            &["--strategy", "txn-fenced", "--crashes", "any"],
            "txn-fenced takes no unbounded budget (any): its output partitions keep producer epochs",
        ),
    ];
    for (flags, expected) in refused {
        let strategy: &[&str] = if flags.contains(&"--strategy") { &[] } else { &["--strategy", "atomic"] };
        let args = [&["test"], strategy, flags, &["--walks", "1", "--seed", "1", "--out", &out]].concat();
        let output = conformance(&args);
        let errors = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {errors}");
        assert_eq!(output.stdout, b"", "{args:?}");
        assert_eq!(errors.lines().count(), 1, "{args:?}: {errors}");
        assert!(errors.starts_with(&format!("error: {expected}")), "{args:?}: '{errors}' is not '{expected}'");
    }
}

/// `test --depth` whose paths were cut at `--paths-max` replayed only some of them: an
/// incomplete search (exit 3), which says so; all of them replayed: exit 0.
#[test]
fn paths_cut_at_paths_max_are_an_incomplete_test() {
    let out = scratch("cli-paths-max");
    let out = out.display().to_string();
    let args = ["test", "--strategy", "atomic-fenced", "--groups", "1", "--depth", "3", "--mode", "in-process"];
    for (paths_max, code, cut) in [("2", 3, true), ("100000", 0, false)] {
        let output = conformance(&[&args[..], &["--paths-max", paths_max, "--out", &out]].concat());
        let text = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(code), "--paths-max {paths_max}:\n{text}");
        let first = text.lines().next().unwrap_or_default();
        let tool = format!("onceproof-conformance {0} (model: onceproof-model {0})", env!("CARGO_PKG_VERSION"));
        assert_eq!(first, tool, "the first line names the tools");
        assert_eq!(text.contains("stopped at --paths-max 2: not every path was replayed"), cut, "{text}");
        if cut {
            assert!(text.contains("2 passed, 0 failed"), "{text}");
        }
    }
}

/// The hidden worker serves the consumer and exits as it does: 4 when the owner refuses to
/// start on a log that lost acknowledged records (here: the whole log directory).
#[test]
fn a_worker_refusing_a_lost_log_exits_4() {
    let dir = scratch("cli-worker-refusal");
    let log_dir = conformance::driver::log_dir(&dir);
    let identity = consumer::log::Log::init(&log_dir, 1).expect("a log");
    let location = consumer::store::Location::Sqlite(conformance::driver::store_path(&dir));
    let mut store = consumer::store::Store::create_at(&location, identity, Default::default()).expect("a store");
    store.ensure_group("g0", "o0").expect("a group");
    drop(store);
    std::fs::remove_dir_all(&log_dir).expect("the log directory is removed");
    let dir = dir.display().to_string();
    let args = ["worker", "--dir", &dir, "--group", "g0", "--owner", "o0", "--strategy", "atomic-fenced"];
    let output = Command::new(env!("CARGO_BIN_EXE_conformance"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the worker runs");
    let errors = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{errors}");
    assert_eq!(errors.lines().count(), 1, "{errors}");
}

/// The trace files the bad-input table of docs/errors.md names: one valid trace (atomic, one group, two
/// owners, two records; an append and a fetch), each with the one change its name says.
fn bad_trace_files() -> Vec<(&'static str, Vec<u8>)> {
    let base = json!({
        "format": "onceproof-trace", "version": 1, "tool": "onceproof-model 0.1.0",
        "config": {"strategy": "atomic", "groups": 1, "owners": 2, "partitions": 1, "records": 2, "crashes": 1,
                   "rebalances": 1, "commit_every": 2, "inflight": 2, "delta": 5, "poison": null, "max_attempts": 2,
                   "ack_losses": 0, "retentions": 0, "pauses": 0, "log_losses": 0},
        "property": null, "verdict": null, "description": "an append and a fetch",
        "actions": [{"kind": "append", "partition": 0, "delta": 5},
                    {"kind": "fetch", "group": 0, "owner": 0, "partition": 0, "offset": 0}]
    });
    let edit = |change: fn(&mut Value)| {
        let mut value = base.clone();
        change(&mut value);
        value.to_string().into_bytes()
    };
    vec![
        ("valid.json", edit(|_| {})),
        ("action-field.json", edit(|v| v["actions"][0]["colour"] = json!("red"))),
        ("config-field.json", edit(|v| v["config"]["colour"] = json!("red"))),
        ("no-such-property.json", edit(|v| v["property"] = json!("no-such-property"))),
        ("group-9.json", edit(|v| v["actions"][1]["group"] = json!(9))),
        ("owner-9.json", edit(|v| v["actions"][1]["owner"] = json!(9))),
        ("partition-9.json", edit(|v| v["actions"][0]["partition"] = json!(9))),
        (
            "rebalance-to-current-owner.json",
            edit(|v| v["actions"][1] = json!({"kind": "rebalance", "group": 0, "partition": 0, "to_owner": 0})),
        ),
        ("groups-9.json", edit(|v| v["config"]["groups"] = json!(9))),
        ("crashes-200.json", edit(|v| v["config"]["crashes"] = json!(200))),
        ("delta-max.json", edit(|v| v["config"]["delta"] = json!(i64::MAX))),
        (
            "version-2.json",
            edit(|v| {
                v["version"] = json!(2);
                v["tool"] = json!("onceproof-model 2.0.0");
            }),
        ),
        ("not-json.json", b"{ nope".to_vec()),
        ("not-utf8.json", b"{\"format\": \"\xff\"}".to_vec()),
    ]
}

/// Every `conformance` row of the bad-input table of docs/errors.md, as a child process in a directory
/// holding the trace files it names: the row's exit code, the row's line and nothing else on
/// stderr, nothing on stdout. Every file is named by a row, and the unedited one conforms.
#[test]
fn every_bad_input_row_of_the_readme_gets_its_one_line() {
    let dir = scratch("cli-bad-input");
    let files = bad_trace_files();
    for (name, bytes) in &files {
        std::fs::write(dir.join(name), bytes).expect("write a trace file");
    }
    let rows = readme_bad_input_rows("conformance");
    assert!(rows.len() >= files.len() + 5, "the bad-input table of docs/errors.md has {} conformance rows", rows.len());
    for (name, _) in files.iter().filter(|(name, _)| *name != "valid.json") {
        assert!(
            rows.iter().any(|row| row.command.iter().any(|arg| arg == name)),
            "no row of docs/errors.md replays {name}"
        );
    }
    for row in rows {
        let output = Command::new(env!("CARGO_BIN_EXE_conformance"))
            .args(&row.command[1..])
            .current_dir(&dir)
            .output()
            .expect("the conformance binary runs");
        let command = row.command.join(" ");
        let errors = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(row.exit), "{command}: {errors}");
        assert_eq!(errors, format!("{}\n", row.line), "{command}");
        assert_eq!(String::from_utf8_lossy(&output.stdout), "", "{command}");
    }
    let valid = Command::new(env!("CARGO_BIN_EXE_conformance"))
        .args(["replay", "--mode", "in-process", "valid.json"])
        .current_dir(&dir)
        .output()
        .expect("the conformance binary runs");
    assert_eq!(valid.status.code(), Some(0), "{}", String::from_utf8_lossy(&valid.stdout));
}

/// An empty `--worker` (which the table of docs/errors.md, split on blanks, cannot spell) is refused before
/// anything starts.
#[test]
fn an_empty_worker_command_is_refused() {
    for command in ["", "  "] {
        let output = conformance(&["replay", "--worker", command, "--strategy", "atomic", "no-such.json"]);
        assert_eq!(output.status.code(), Some(2), "--worker {command:?}");
        let errors = String::from_utf8_lossy(&output.stderr);
        assert_eq!(errors, "error: --worker is empty: give the command that starts your consumer\n");
    }
}

#[test]
fn version_names_the_package_version() {
    let output = conformance(&["--version"]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), format!("conformance {}", env!("CARGO_PKG_VERSION")));
}

/// `regenerate DIR` refuses, in one line and before any checking, a `DIR` that exists and is not
/// a directory (a regular file, a device), and leaves it as it was.
#[test]
fn regenerate_refuses_an_output_path_that_is_not_a_directory() {
    let dir = scratch("cli-regenerate-outputs");
    let file = dir.join("a-file");
    std::fs::write(&file, "kept").expect("write");
    let file = file.display().to_string();
    // (the directory given, exit code, the one line on stderr)
    let table = [
        (file.as_str(), 2, format!("error: `regenerate {file}`: {file} exists and is not a directory; refused")),
        ("/dev/null", 2, "error: `regenerate /dev/null`: /dev/null exists and is not a directory; refused".to_string()),
    ];
    for (given, code, line) in table {
        let output = conformance(&["regenerate", given]);
        let errors = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{given}: {errors}");
        assert_eq!(errors.trim_end(), line, "{given}");
        assert!(output.stdout.is_empty(), "{given}");
    }
    assert_eq!(std::fs::read_to_string(&file).expect("the file"), "kept");
}
