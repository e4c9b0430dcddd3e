//! Crash-point scenarios of the real consumer as child processes: each crashes `consume` at a
//! named point (exit 9), reopens the store, restarts, and checks the effect and checkpoint; and
//! the journal mode (rollback journal or WAL) the store runs in, which decides what a crash leaves.

mod common;

use common::{DataDir, GroupState, CRASHED};

/// One crash scenario: a fresh log of `records` records of `delta`, one `consume` that crashes
/// at `crash`, then a restart of the same owner with the same strategy.
struct CrashCase {
    name: &'static str,
    strategy: &'static str,
    records: u64,
    delta: i64,
    /// Flags besides the strategy and the crash point, for both runs.
    extra: &'static [&'static str],
    crash: &'static str,
    /// Whether the crash left SQLite's rollback journal behind (it died inside a transaction).
    journal_left: bool,
    /// (total, next_offset) when the store is reopened right after the crash.
    after_crash: GroupState,
    /// (total, next_offset) after the restart consumed the log to its end.
    after_restart: GroupState,
}

/// Runs one case in a fresh data directory and checks every state it promises.
fn run_crash_case(case: &CrashCase) {
    let name = case.name;
    let dir = DataDir::with_records(name, case.delta, case.records);
    let mut crashing = vec!["--group", "g", "--strategy", case.strategy, "--crash-at", case.crash];
    crashing.extend_from_slice(case.extra);
    dir.consume(name, &crashing, CRASHED);

    // In DELETE mode a COMMIT removes the journal, so one left behind proves the process died
    // with its transaction open; checked before anything reopens the store.
    assert_eq!(
        dir.journal_path().exists(),
        case.journal_left,
        "case '{name}': a rollback journal should be left exactly when the crash was inside a transaction"
    );
    assert_eq!(
        dir.state(name, "g"),
        case.after_crash,
        "case '{name}': (total, next_offset) on reopening after the crash"
    );

    let mut restart = vec!["--group", "g", "--strategy", case.strategy];
    restart.extend_from_slice(case.extra);
    dir.consume(name, &restart, 0);
    assert_eq!(dir.state(name, "g"), case.after_restart, "case '{name}': (total, next_offset) after the restart");
    assert!(!dir.journal_path().exists(), "case '{name}': no rollback journal should outlive the restart's commits");
}

/// The mission's four SQLite outcomes on one record (offset 0, delta +5) from total 0 and next
/// offset 0: a skip, a replay, a rolled-back transaction and a committed one.
#[test]
fn the_four_sqlite_crash_outcomes_of_one_record() {
    let cases = [
        CrashCase {
            name: "commit-first crashes before its effect: the restart skips the record",
            strategy: "commit-first",
            records: 1,
            delta: 5,
            extra: &[],
            crash: "apply-effect:before@0",
            journal_left: false,
            after_crash: (0, 1),
            after_restart: (0, 1),
        },
        CrashCase {
            name: "effect-first crashes before its commit: the restart replays the record",
            strategy: "effect-first",
            records: 1,
            delta: 5,
            extra: &[],
            crash: "commit-offset:before@1",
            journal_left: false,
            after_crash: (5, 0),
            after_restart: (10, 1),
        },
        CrashCase {
            name: "atomic dies inside its transaction: nothing of it survives",
            strategy: "atomic",
            records: 1,
            delta: 5,
            extra: &[],
            crash: "apply-atomic:inside@0",
            journal_left: true,
            after_crash: (0, 0),
            after_restart: (5, 1),
        },
        CrashCase {
            name: "atomic dies after its commit: effect and offset both survive",
            strategy: "atomic",
            records: 1,
            delta: 5,
            extra: &[],
            crash: "apply-atomic:after@0",
            journal_left: false,
            after_crash: (5, 1),
            after_restart: (5, 1),
        },
    ];
    for case in &cases {
        run_crash_case(case);
    }
}

/// Process-before-commit is at-least-once (a crash replays), commit-before-process is
/// at-most-once (a crash skips), shown on three records so the rest of the log still flows.
#[test]
fn process_then_commit_replays_and_commit_then_process_skips() {
    let cases = [
        CrashCase {
            name: "effect-first crashes after the effect of offset 0: record 0 is applied twice",
            strategy: "effect-first",
            records: 3,
            delta: 5,
            extra: &[],
            crash: "apply-effect:after@0",
            journal_left: false,
            after_crash: (5, 0),
            after_restart: (20, 3),
        },
        CrashCase {
            name: "commit-first crashes after committing offset 1: record 0 is never applied",
            strategy: "commit-first",
            records: 3,
            delta: 5,
            extra: &[],
            crash: "commit-offset:after@1",
            journal_left: false,
            after_crash: (0, 1),
            after_restart: (10, 3),
        },
        CrashCase {
            name: "commit-first dies inside its commit of offset 1: nothing is lost or doubled",
            strategy: "commit-first",
            records: 3,
            delta: 5,
            extra: &[],
            crash: "commit-offset:inside@1",
            journal_left: true,
            after_crash: (0, 0),
            after_restart: (15, 3),
        },
        CrashCase {
            name: "dedup-separate crashes between the effect and the id insert: applied twice",
            strategy: "dedup-separate",
            records: 3,
            delta: 5,
            extra: &[],
            crash: "insert-processed:before@0",
            journal_left: false,
            after_crash: (5, 0),
            after_restart: (20, 3),
        },
        CrashCase {
            name: "dedup-separate dies inside its id insert of offset 1: the insert rolls back, record 1 applied twice",
            strategy: "dedup-separate",
            records: 3,
            delta: 5,
            extra: &[],
            crash: "insert-processed:inside@1",
            journal_left: true,
            after_crash: (10, 1),
            after_restart: (20, 3),
        },
        CrashCase {
            name: "dedup-atomic crashes before its commit: the redelivery is recognised",
            strategy: "dedup-atomic",
            records: 3,
            delta: 5,
            extra: &[],
            crash: "commit-offset:before@1",
            journal_left: false,
            after_crash: (5, 0),
            after_restart: (15, 3),
        },
    ];
    for case in &cases {
        run_crash_case(case);
    }
}

/// 100 records of +1 checkpointed every 10: a crash after applying offset 49 leaves the
/// checkpoint at 40, so the restart redelivers 40..=49. Periodic-commit applies them again;
/// offset-stamp's set-if-newer stamp rejects them.
#[test]
fn the_replay_window_of_periodic_checkpoints() {
    let cases = [
        CrashCase {
            name: "periodic-commit replays the window: 110 instead of 100",
            strategy: "periodic-commit",
            records: 100,
            delta: 1,
            extra: &["--commit-every", "10"],
            crash: "apply-effect:after@49",
            journal_left: false,
            after_crash: (50, 40),
            after_restart: (110, 100),
        },
        CrashCase {
            name: "offset-stamp skips the window: exactly 100",
            strategy: "offset-stamp",
            records: 100,
            delta: 1,
            extra: &["--commit-every", "10"],
            crash: "apply-stamped:after@49",
            journal_left: false,
            after_crash: (50, 40),
            after_restart: (100, 100),
        },
    ];
    for case in &cases {
        run_crash_case(case);
    }
}

/// Offset-stamp's guard is the stamp, so it must be the highest applied offset both at the
/// crash and after the restart skipped the redelivered window.
#[test]
fn offset_stamp_keeps_the_highest_applied_offset_across_the_replay() {
    let case = "offset-stamp stamp across a crash at 49";
    let dir = DataDir::with_records(case, 1, 100);
    let args = ["--group", "g", "--strategy", "offset-stamp", "--commit-every", "10"];
    let mut crashing = args.to_vec();
    crashing.extend_from_slice(&["--crash-at", "apply-stamped:after@49"]);
    dir.consume(case, &crashing, CRASHED);
    assert_eq!(dir.progress(case, "g")["stamp"], 49, "case '{case}': the stamp after the crash");
    dir.consume(case, &args, 0);
    assert_eq!(dir.progress(case, "g")["stamp"], 99, "case '{case}': the stamp after the restart");
}

/// A strategy run for the isolation test, optionally crashing at the first step of a kind.
struct IsolationCase {
    strategy: &'static str,
    crash: Option<&'static str>,
}

/// Consumes the log as group `writer` (crash, then restart) and asserts that the other group's
/// entire status object (total, every progress row, processed ids) did not change.
fn consume_beside(dir: &DataDir, case: &str, writer: &str, other: &str, run: &IsolationCase) {
    let before = dir.group(case, other);
    let args = ["--group", writer, "--strategy", run.strategy];
    if let Some(point) = run.crash {
        let mut crashing = args.to_vec();
        crashing.extend_from_slice(&["--crash-at", point]);
        dir.consume(case, &crashing, CRASHED);
        assert_eq!(dir.group(case, other), before, "case '{case}': {writer}'s crash changed group {other}");
    }
    dir.consume(case, &args, 0);
    assert_eq!(dir.group(case, other), before, "case '{case}': {writer}'s consumption changed group {other}");
}

/// Two groups read the same log independently: whatever one group does, crash included,
/// never touches the other group's effect or checkpoint (spec.md §6.1 group-isolation).
#[test]
fn two_groups_on_one_log_never_touch_each_other() {
    let runs = [
        IsolationCase { strategy: "commit-first", crash: None },
        IsolationCase { strategy: "commit-first", crash: Some("apply-effect:before") },
        IsolationCase { strategy: "effect-first", crash: Some("commit-offset:before") },
        IsolationCase { strategy: "periodic-commit", crash: Some("apply-effect:after") },
        IsolationCase { strategy: "offset-stamp", crash: Some("apply-stamped:after") },
        IsolationCase { strategy: "dedup-separate", crash: Some("insert-processed:before") },
        IsolationCase { strategy: "dedup-atomic", crash: Some("commit-offset:before") },
        IsolationCase { strategy: "atomic", crash: None },
        IsolationCase { strategy: "atomic", crash: Some("apply-atomic:inside") },
        IsolationCase { strategy: "atomic-fenced", crash: Some("apply-atomic:after") },
        IsolationCase { strategy: "atomic-cas", crash: Some("apply-atomic:inside") },
        IsolationCase { strategy: "parallel-max", crash: Some("apply-effect:after") },
        IsolationCase { strategy: "parallel-watermark", crash: Some("commit-offset:before") },
    ];
    for run in &runs {
        let case = format!("isolation: {} crashing at {}", run.strategy, run.crash.unwrap_or("nothing"));
        let dir = DataDir::with_records(&case, 5, 3);
        // Group B first reaches the end with an exact strategy, so it has state to lose.
        dir.consume(&case, &["--group", "B", "--strategy", "atomic-fenced"], 0);
        assert_eq!(dir.state(&case, "B"), (15, 3), "case '{case}': group B's own run");

        consume_beside(&dir, &case, "A", "B", run);
        assert_eq!(dir.state(&case, "A").1, 3, "case '{case}': group A's restart should reach the log end");

        // And the other way round: B consumes new records (with the same crash) beside A.
        dir.append(&case, 0, 5, 3);
        consume_beside(&dir, &case, "B", "A", run);
        assert_eq!(dir.state(&case, "B").1, 6, "case '{case}': group B's restart should reach the log end");
    }
}

/// The journal mode `init --journal` names is the one the store runs in: its COMMITs' crash
/// behaviour (a rollback journal or a WAL) depends on it, and the documented figures are per mode.
/// WAL is recorded in the database file itself, so a fresh connection reads the mode the store
/// set, after `init` and after a `consume` reopened the store.
#[test]
fn the_store_runs_in_the_journal_mode_init_names() {
    let rows: [(&[&str], &str); 3] =
        [(&[], "delete"), (&["--journal", "delete"], "delete"), (&["--journal", "wal"], "wal")];
    for (args, expected) in rows {
        let case = format!("init {}", args.join(" "));
        let dir = DataDir::uninitialised(&case);
        common::expect_code(&case, "init", &dir.run("init", args), 0);
        let mode = || {
            let conn = rusqlite::Connection::open(dir.store_path()).expect("the store opens");
            conn.pragma_query_value(None, "journal_mode", |row| row.get::<_, String>(0)).expect("journal_mode reads")
        };
        assert_eq!(mode(), expected, "case '{case}': after init");
        dir.append(&case, 0, 5, 2);
        dir.consume(&case, &["--group", "g", "--strategy", "atomic-fenced"], 0);
        assert_eq!(dir.state(&case, "g"), (10, 2), "case '{case}': consumed");
        assert_eq!(mode(), expected, "case '{case}': after consume");
    }
}
