//! Retention past a consumer's position as child processes: the `--on-out-of-range` policies
//! (fail, earliest with a recorded reset, and the hidden silent trap), crashes around the reset
//! transaction, the worker protocol's `reset-offset` and `fail-out-of-range`, and the same
//! policy under every strategy.

mod common;

use common::{describe, stderr, stdout, DataDir, GroupState, CRASHED, FAILED};

/// The records every scenario starts from: five records of +1 in partition 0.
const RECORDS: u64 = 5;

/// The one error line of `consume` when retention removed offset 0 and the log starts at 3.
const OUT_OF_RANGE_AT_0: &str = "error: partition 0: offset 0 is below the log start 3 (retention removed it); \
                                 use --on-out-of-range earliest to skip to the start with a recorded reset\n";

/// A single-partition data directory holding five records of +1.
fn data_dir(case: &str) -> DataDir {
    DataDir::with_records(case, 1, RECORDS)
}

/// Moves the start of partition 0 to `before` (`consumer retain`).
fn retain(case: &str, dir: &DataDir, before: u64) {
    let output = dir.run("retain", &["--partition", "0", "--before", &before.to_string()]);
    common::expect_code(case, &format!("retain --before {before}"), &output, 0);
}

/// The reset table of group `g` as (from, to), from `consumer resets --json`, checking every
/// row's group and partition on the way.
fn resets(case: &str, dir: &DataDir) -> Vec<(u64, u64)> {
    let output = dir.run("resets", &["--group", "g", "--json"]);
    common::expect_code(case, "resets --json", &output, 0);
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("case '{case}': resets --json is not JSON: {e}\n{}", describe(&output)));
    let rows = rows["resets"].as_array().unwrap_or_else(|| panic!("case '{case}': resets --json has no array: {rows}"));
    rows.iter()
        .map(|row| {
            assert_eq!(row["group"], "g", "case '{case}': a reset of another group: {row}");
            assert_eq!(row["partition"], 0, "case '{case}': a reset of another partition: {row}");
            let from = row["from"].as_u64().unwrap_or_else(|| panic!("case '{case}': no from in {row}"));
            let to = row["to"].as_u64().unwrap_or_else(|| panic!("case '{case}': no to in {row}"));
            (from, to)
        })
        .collect()
}

/// Checks (total, next_offset) and the reset table of group `g`, and that `status --json`
/// lists the same resets.
fn check(case: &str, when: &str, dir: &DataDir, state: GroupState, expected: &[(u64, u64)]) {
    assert_eq!(dir.state(case, "g"), state, "case '{case}': (total, next_offset) {when}");
    assert_eq!(resets(case, dir), expected, "case '{case}': the reset table {when}");
    let group = dir.group(case, "g");
    let listed: Vec<(u64, u64)> = group["resets"]
        .as_array()
        .unwrap_or_else(|| panic!("case '{case}': status has no resets list {when}: {group}"))
        .iter()
        .map(|row| (row["from"].as_u64().unwrap_or(u64::MAX), row["to"].as_u64().unwrap_or(u64::MAX)))
        .collect();
    assert_eq!(listed, expected, "case '{case}': the resets status --json lists {when}: {group}");
}

/// One `consume` after retention moved the start to 3, before anything was consumed.
struct PolicyCase {
    name: &'static str,
    /// The `--on-out-of-range` value, or none for the default.
    policy: Option<&'static str>,
    code: i32,
    /// The whole of stderr when the run fails.
    error: Option<&'static str>,
    /// (total, next_offset) afterwards.
    after: GroupState,
    /// The reset table afterwards: (from, to).
    resets: &'static [(u64, u64)],
}

/// The policies on the model's reset rows: fail stops and changes nothing, earliest skips to
/// the start with a recorded reset, and the silent jump skips the same records leaving no
/// trace of them (the trap `reset-accounted` refutes).
#[test]
fn each_policy_meets_retention_past_the_position_its_own_way() {
    let cases = [
        PolicyCase {
            name: "the default policy fails with one line and writes nothing",
            policy: None,
            code: FAILED,
            error: Some(OUT_OF_RANGE_AT_0),
            after: (0, 0),
            resets: &[],
        },
        PolicyCase {
            name: "fail, named, is the default's behaviour",
            policy: Some("fail"),
            code: FAILED,
            error: Some(OUT_OF_RANGE_AT_0),
            after: (0, 0),
            resets: &[],
        },
        PolicyCase {
            name: "earliest records the reset 0 -> 3 and consumes offsets 3 and 4",
            policy: Some("earliest"),
            code: 0,
            error: None,
            after: (2, 5),
            resets: &[(0, 3)],
        },
        PolicyCase {
            name: "earliest-silent skips offsets 0..3 with no reset row (the trap)",
            policy: Some("earliest-silent"),
            code: 0,
            error: None,
            after: (2, 5),
            resets: &[],
        },
    ];
    for case in &cases {
        let name = case.name;
        let dir = data_dir(name);
        retain(name, &dir, 3);
        let mut args = vec!["--group", "g", "--strategy", "atomic-fenced"];
        if let Some(policy) = case.policy {
            args.extend(["--on-out-of-range", policy]);
        }
        let output = dir.consume(name, &args, case.code);
        if let Some(error) = case.error {
            assert_eq!(stderr(&output), error, "case '{name}': the one error line\n{}", describe(&output));
        }
        check(name, "after the run", &dir, case.after, case.resets);
    }
}

/// The reset is reported by `consume` and by the text forms of `resets` and `status`.
#[test]
fn a_reset_is_reported_in_every_text_form() {
    let case = "earliest after retention to 3, reported";
    let dir = data_dir(case);
    retain(case, &dir, 3);
    let output =
        dir.consume(case, &["--group", "g", "--strategy", "atomic-fenced", "--on-out-of-range", "earliest"], 0);
    let expected = "reset: partition 0 from offset 0 to the log start 3 (retention removed the records in between)";
    assert!(stdout(&output).contains(expected), "case '{case}': consume reports the reset\n{}", describe(&output));
    let output = dir.run("resets", &[]);
    common::expect_code(case, "resets", &output, 0);
    assert_eq!(stdout(&output), "group g partition 0: reset from offset 0 to 3\n", "case '{case}': the resets listing");
    let output = dir.run("status", &[]);
    common::expect_code(case, "status", &output, 0);
    assert!(
        stdout(&output).contains("group g: total 2, processed ids 0, dead letters 0, resets 1"),
        "case '{case}': status counts the reset\n{}",
        describe(&output)
    );
    let other = "a store without resets";
    let dir = data_dir(other);
    let output = dir.run("resets", &[]);
    common::expect_code(other, "resets", &output, 0);
    assert_eq!(stdout(&output), "no resets\n", "case '{other}': the empty listing");
}

/// A first run that crashes, with retention before or after it, and a restart with
/// `--on-out-of-range earliest`.
struct CrashCase {
    name: &'static str,
    /// The log start set before the first run, if any.
    retain_first: Option<u64>,
    /// The first run's crash point.
    crash: &'static str,
    /// The log start set after the crash, if any.
    retain_after: Option<u64>,
    /// Whether the crash left SQLite's rollback journal behind (it died inside a transaction).
    journal_left: bool,
    /// (total, next_offset) and the reset table after the crash (and retention).
    after_crash: (GroupState, &'static [(u64, u64)]),
    /// The same after the restart.
    after_restart: (GroupState, &'static [(u64, u64)]),
}

/// The reset is one transaction: a crash before or inside it leaves nothing of it (the restart
/// resets once), a crash after it leaves it whole (the restart does not reset again), and a
/// reset after partial consumption starts from the committed checkpoint.
#[test]
fn the_reset_survives_crashes_exactly() {
    let cases = [
        CrashCase {
            name: "a crash before the reset transaction",
            retain_first: Some(3),
            crash: "reset-offset:before",
            retain_after: None,
            journal_left: false,
            after_crash: ((0, 0), &[]),
            after_restart: ((2, 5), &[(0, 3)]),
        },
        CrashCase {
            name: "a crash inside the reset transaction rolls it back",
            retain_first: Some(3),
            crash: "reset-offset:inside",
            retain_after: None,
            journal_left: true,
            after_crash: ((0, 0), &[]),
            after_restart: ((2, 5), &[(0, 3)]),
        },
        CrashCase {
            name: "a crash inside the reset transaction, named by its log start",
            retain_first: Some(3),
            crash: "reset-offset:inside@3",
            retain_after: None,
            journal_left: true,
            after_crash: ((0, 0), &[]),
            after_restart: ((2, 5), &[(0, 3)]),
        },
        CrashCase {
            name: "a crash after the reset keeps it, and the restart does not reset again",
            retain_first: Some(3),
            crash: "reset-offset:after",
            retain_after: None,
            journal_left: false,
            after_crash: ((0, 3), &[(0, 3)]),
            after_restart: ((2, 5), &[(0, 3)]),
        },
        CrashCase {
            name: "retention to 4 after two records were consumed resets from the checkpoint 2",
            retain_first: None,
            crash: "apply-atomic:after@1",
            retain_after: Some(4),
            journal_left: false,
            after_crash: ((2, 2), &[]),
            after_restart: ((3, 5), &[(2, 4)]),
        },
    ];
    for case in &cases {
        let name = case.name;
        let dir = data_dir(name);
        if let Some(before) = case.retain_first {
            retain(name, &dir, before);
        }
        let policy = ["--on-out-of-range", "earliest"];
        let mut args = vec!["--group", "g", "--strategy", "atomic-fenced", "--crash-at", case.crash];
        args.extend(policy);
        dir.consume(name, &args, CRASHED);
        assert_eq!(
            dir.journal_path().exists(),
            case.journal_left,
            "case '{name}': a rollback journal should be left exactly when the crash was inside a transaction"
        );
        if let Some(before) = case.retain_after {
            retain(name, &dir, before);
        }
        let (state, table) = case.after_crash;
        check(name, "after the crash", &dir, state, table);
        let mut args = vec!["--group", "g", "--strategy", "atomic-fenced"];
        args.extend(policy);
        dir.consume(name, &args, 0);
        let (state, table) = case.after_restart;
        check(name, "after the restart", &dir, state, table);
    }
}

/// One line of a worker script.
#[derive(Clone, Copy, Debug)]
enum Line {
    /// A command and its exact reply.
    Send(&'static str, &'static str),
    /// Retention (`consumer retain`) moves the start of partition 0 to this offset.
    Retain(u64),
    /// A rebalance (`consumer claim`) of partition 0 to this owner, outside the worker.
    Claim(&'static str),
    /// The worker's `state` holds partition 0 at this (position, checkpoint).
    Lease(u64, u64),
    /// The worker's `state` no longer holds partition 0.
    Dropped,
}

/// One worker session of o0 of group `g` on the five records.
struct WorkerCase {
    name: &'static str,
    strategy: &'static str,
    /// Flags besides the group, owner and strategy.
    extra: &'static [&'static str],
    script: &'static [Line],
    /// (total, next_offset) and the reset table at the end.
    after: (GroupState, &'static [(u64, u64)]),
}

/// The protocol's replies to the out-of-range steps follow the model step by step: the only
/// step enabled is the policy's, a zombie's reset is fenced, and records fetched before the
/// retention are completed before the policy applies.
#[test]
fn the_worker_replies_to_out_of_range_steps() {
    use Line::{Claim, Dropped, Lease, Retain, Send};
    const EARLIEST: &[&str] = &["--on-out-of-range", "earliest"];
    let cases = [
        WorkerCase {
            name: "fail: only fail-out-of-range is enabled; it drops the partition",
            strategy: "atomic-fenced",
            extra: &[],
            script: &[
                Retain(3),
                Send("fetch 0 0", "err step 'fetch 0 0' is not enabled (enabled: fail-out-of-range 0 0)"),
                Send("fail-out-of-range 0 0", "ok out-of-range 0 3"),
                Dropped,
                Send("fetch 0 3", "err step 'fetch 0 3' is not enabled (enabled: none)"),
            ],
            after: ((0, 0), &[]),
        },
        WorkerCase {
            name: "earliest: reset-offset to the log start, then the records from there",
            strategy: "atomic-fenced",
            extra: EARLIEST,
            script: &[
                Retain(3),
                Send("fetch 0 0", "err step 'fetch 0 0' is not enabled (enabled: reset-offset 0 3)"),
                Send("reset-offset 0 2", "err step 'reset-offset 0 2' is not enabled (enabled: reset-offset 0 3)"),
                Send("reset-offset 0 3", "ok reset 0 3"),
                Lease(3, 3),
                Send("fetch 0 3", "ok fetched 1"),
                Send("apply-atomic 0 3", "ok applied 1 skipped 0"),
            ],
            after: ((1, 4), &[(0, 3)]),
        },
        WorkerCase {
            name: "earliest zombie: the reset after a claim to o1 is fenced and writes nothing",
            strategy: "atomic-fenced",
            extra: EARLIEST,
            script: &[Retain(3), Claim("o1"), Send("reset-offset 0 3", "ok fenced 2 3"), Dropped],
            after: ((0, 0), &[]),
        },
        WorkerCase {
            name: "earliest: a record fetched before retention is applied, then the reset starts from its commit",
            strategy: "atomic-fenced",
            extra: EARLIEST,
            script: &[
                Send("fetch 0 0", "ok fetched 1"),
                Retain(3),
                Send("apply-atomic 0 0", "ok applied 1 skipped 0"),
                Send("reset-offset 0 3", "ok reset 1 3"),
                Send("fetch 0 3", "ok fetched 1"),
            ],
            after: ((1, 3), &[(1, 3)]),
        },
        WorkerCase {
            name: "earliest under effect-first: the in-flight record is applied and committed first",
            strategy: "effect-first",
            extra: EARLIEST,
            script: &[
                Send("fetch 0 0", "ok fetched 1"),
                Retain(3),
                Send("apply-effect 0 0", "ok applied 1 skipped 0"),
                Send("reset-offset 0 3", "err step 'reset-offset 0 3' is not enabled (enabled: commit-offset 0 1)"),
                Send("commit-offset 0 1", "ok committed"),
                Send("reset-offset 0 3", "ok reset 1 3"),
            ],
            after: ((1, 3), &[(1, 3)]),
        },
        WorkerCase {
            name: "earliest under parallel-watermark: pending records complete and commit, no fetch below the start",
            strategy: "parallel-watermark",
            extra: EARLIEST,
            script: &[
                Send("fetch 0 0", "ok fetched 1"),
                Retain(3),
                Send("fetch 0 1", "err step 'fetch 0 1' is not enabled (enabled: apply-effect 0 0)"),
                Send("apply-effect 0 0", "ok applied 1 skipped 0"),
                Send("commit-offset 0 1", "ok committed"),
                Send("reset-offset 0 3", "ok reset 1 3"),
                Lease(3, 3),
            ],
            after: ((1, 3), &[(1, 3)]),
        },
        WorkerCase {
            name: "earliest-silent: a blind commit of the log start, the position jumps with it",
            strategy: "atomic-fenced",
            extra: &["--on-out-of-range", "earliest-silent"],
            script: &[
                Retain(3),
                Send("fetch 0 0", "err step 'fetch 0 0' is not enabled (enabled: commit-offset 0 3)"),
                Send("commit-offset 0 3", "ok committed"),
                Lease(3, 3),
                Send("fetch 0 3", "ok fetched 1"),
            ],
            after: ((0, 3), &[]),
        },
    ];
    for case in &cases {
        let name = case.name;
        let dir = data_dir(name);
        let mut worker = dir.worker_with(name, "g", "o0", case.strategy, case.extra);
        for line in case.script {
            match *line {
                Send(command, reply) => worker.expect(command, reply),
                Retain(before) => retain(name, &dir, before),
                Claim(owner) => dir.claim(name, "g", 0, owner),
                Lease(position, checkpoint) => {
                    let state = worker.state();
                    let lease = &state["leases"]["0"];
                    assert_eq!(lease["position"], position, "case '{name}': the lease position: {state}");
                    assert_eq!(lease["checkpoint"], checkpoint, "case '{name}': the lease checkpoint: {state}");
                }
                Dropped => {
                    let state = worker.state();
                    assert!(
                        state["leases"].get("0").is_none(),
                        "case '{name}': the owner should drop partition 0: {state}"
                    );
                }
            }
        }
        worker.quit();
        let (state, table) = case.after;
        check(name, "at the end", &dir, state, table);
    }
}

/// Every strategy the consumer runs, with the flags it needs on this log.
const STRATEGIES: &[&str] = &[
    "commit-first",
    "effect-first",
    "periodic-commit",
    "offset-stamp",
    "dedup-separate",
    "dedup-atomic",
    "atomic",
    "atomic-fenced",
    "atomic-cas",
    "parallel-max",
    "parallel-watermark",
    "atomic-dlq",
    "skip-poison",
    "retry-forever",
];

/// The policy does not depend on the strategy (spec.md §3: every strategy fails where the
/// reset rows do): under each one, fail stops with the same error and earliest records the
/// same reset and consumes the rest.
#[test]
fn every_strategy_follows_the_out_of_range_policy() {
    for strategy in STRATEGIES {
        let name = format!("{strategy} with --on-out-of-range fail");
        let name = name.as_str();
        let dir = data_dir(name);
        retain(name, &dir, 3);
        let output = dir.consume(name, &["--group", "g", "--strategy", strategy, "--on-out-of-range", "fail"], FAILED);
        assert_eq!(stderr(&output), OUT_OF_RANGE_AT_0, "case '{name}': the one error line\n{}", describe(&output));
        check(name, "after the run", &dir, (0, 0), &[]);

        let name = format!("{strategy} with --on-out-of-range earliest");
        let name = name.as_str();
        let dir = data_dir(name);
        retain(name, &dir, 3);
        dir.consume(name, &["--group", "g", "--strategy", strategy, "--on-out-of-range", "earliest"], 0);
        check(name, "after the run", &dir, (2, 5), &[(0, 3)]);
    }
}

/// The policy flag accepts fail and earliest; the silent trap is accepted but not offered.
#[test]
fn the_policy_flag_documents_only_fail_and_earliest() {
    let case = "--on-out-of-range flag";
    let dir = data_dir(case);
    let output =
        dir.consume(case, &["--group", "g", "--strategy", "atomic-fenced", "--on-out-of-range", "latest"], FAILED);
    let text = stderr(&output);
    assert_eq!(text.lines().count(), 1, "case '{case}': a bad policy is one error line\n{}", describe(&output));
    assert!(
        text.contains("unknown out-of-range policy 'latest' (expected fail or earliest)"),
        "case '{case}': the error names the accepted policies\n{}",
        describe(&output)
    );
    for subcommand in ["consume", "worker"] {
        let output = dir.command(subcommand, &["--help"]).output().expect("the consumer binary starts");
        common::expect_code(case, &format!("{subcommand} --help"), &output, 0);
        let help = stdout(&output);
        assert!(
            help.contains("--on-out-of-range <fail|earliest>"),
            "case '{case}': {subcommand} --help shows the flag\n{help}"
        );
        assert!(!help.contains("silent"), "case '{case}': {subcommand} --help hides the silent trap\n{help}");
    }
}

/// The reset table is schema version 3: a version-2 store is refused with one line rather than
/// read without it.
#[test]
fn a_version_2_store_is_refused() {
    let case = "a store at schema version 2";
    let dir = data_dir(case);
    let conn =
        rusqlite::Connection::open(dir.store_path()).unwrap_or_else(|e| panic!("case '{case}': open the store: {e}"));
    conn.pragma_update(None, "user_version", 2).unwrap_or_else(|e| panic!("case '{case}': set user_version: {e}"));
    drop(conn);
    for (subcommand, args) in
        [("status", &[][..]), ("resets", &[][..]), ("consume", &["--group", "g", "--strategy", "atomic-fenced"][..])]
    {
        let output = dir.run(subcommand, args);
        common::expect_code(case, subcommand, &output, FAILED);
        let expected = format!(
            "error: database {} has schema version 2, this build reads version {}\n",
            dir.store_path().display(),
            consumer::store::SCHEMA_VERSION
        );
        assert_eq!(
            stderr(&output),
            expected,
            "case '{case}': {subcommand} refuses the store in one line\n{}",
            describe(&output)
        );
    }
}
