//! The PostgreSQL backend (`--store postgres://...`) as child processes against a private test
//! cluster: the four crash outcomes, every strategy, concurrent atomic-cas owners, zombies,
//! dead letters and recorded resets. Each test skips, printing why, only when no PostgreSQL
//! server binary exists; with `CI` set it fails instead.

mod common;

use common::{describe, pg, stderr, stdout, DataDir, GroupState, CRASHED, FAILED, FENCED};
use std::process::{Child, Output, Stdio};

/// A fresh data directory whose store is a fresh database of the test cluster, holding `count`
/// records of `delta` in partition 0; `None` when the test is skipped.
fn pg_dir(case: &str, delta: i64, count: u64) -> Option<DataDir> {
    let url = pg::database()?;
    let dir = DataDir::postgres(case, 1, &url);
    if count > 0 {
        dir.append(case, 0, delta, count);
    }
    Some(dir)
}

/// One crash scenario: `records` records of `delta`, one `consume` that crashes at `crash`,
/// then a restart of the same owner with the same strategy.
struct CrashCase {
    name: &'static str,
    strategy: &'static str,
    records: u64,
    delta: i64,
    crash: &'static str,
    /// (total, next_offset) read right after the crash.
    after_crash: GroupState,
    /// (total, next_offset) after the restart consumed the log to its end.
    after_restart: GroupState,
}

fn run_crash_case(case: &CrashCase) -> Option<()> {
    let name = case.name;
    let dir = pg_dir(name, case.delta, case.records)?;
    dir.consume(name, &["--group", "g", "--strategy", case.strategy, "--crash-at", case.crash], CRASHED);
    // The crashed process's connection closed without COMMIT, so the server rolled back
    // whatever its open transaction had written.
    assert_eq!(dir.state(name, "g"), case.after_crash, "case '{name}': (total, next_offset) after the crash");
    dir.consume(name, &["--group", "g", "--strategy", case.strategy], 0);
    assert_eq!(dir.state(name, "g"), case.after_restart, "case '{name}': (total, next_offset) after the restart");
    Some(())
}

/// The mission's four outcomes on one record (offset 0, delta +5) from total 0 and next offset
/// 0, on PostgreSQL: a skip, a replay, a rolled-back transaction and a committed one; and two
/// more on three records.
#[test]
fn the_four_crash_outcomes_on_postgres() {
    let cases = [
        CrashCase {
            name: "commit-first crashes before its effect: the restart skips the record",
            strategy: "commit-first",
            records: 1,
            delta: 5,
            crash: "apply-effect:before@0",
            after_crash: (0, 1),
            after_restart: (0, 1),
        },
        CrashCase {
            name: "effect-first crashes before its commit: the restart replays the record",
            strategy: "effect-first",
            records: 1,
            delta: 5,
            crash: "commit-offset:before@1",
            after_crash: (5, 0),
            after_restart: (10, 1),
        },
        CrashCase {
            name: "atomic dies inside its transaction: nothing of it survives",
            strategy: "atomic",
            records: 1,
            delta: 5,
            crash: "apply-atomic:inside@0",
            after_crash: (0, 0),
            after_restart: (5, 1),
        },
        CrashCase {
            name: "atomic dies after its commit: effect and offset both survive",
            strategy: "atomic",
            records: 1,
            delta: 5,
            crash: "apply-atomic:after@0",
            after_crash: (5, 1),
            after_restart: (5, 1),
        },
        CrashCase {
            name: "commit-first dies inside its commit of offset 1: nothing is lost or doubled",
            strategy: "commit-first",
            records: 3,
            delta: 5,
            crash: "commit-offset:inside@1",
            after_crash: (0, 0),
            after_restart: (15, 3),
        },
        CrashCase {
            name: "atomic-fenced dies inside its transaction of offset 1: record 0 stays, 1 is redone",
            strategy: "atomic-fenced",
            records: 3,
            delta: 5,
            crash: "apply-atomic:inside@1",
            after_crash: (5, 1),
            after_restart: (15, 3),
        },
    ];
    for case in &cases {
        if run_crash_case(case).is_none() {
            return;
        }
    }
}

/// Every strategy (`Strategy::ALL`, so a new one cannot be missed) consumes six records of +1
/// to the end on both backends, the outbox row's relay copies its rows to the index, and both
/// stores end in the same state: the same total, value, progress rows, processed ids, dead
/// letters, resets, emails and index, as `status --json` reports them.
#[test]
fn every_strategy_ends_in_the_same_state_on_both_backends() {
    use consumer::strategy::Strategy;
    for strategy in Strategy::ALL {
        let name = strategy.name();
        let case = format!("{name} to the end");
        let Some(postgres) = pg_dir(&case, 1, 6) else { return };
        let sqlite = DataDir::with_records(&case, 1, 6);
        for dir in [&postgres, &sqlite] {
            dir.consume(&case, &["--group", "g", "--strategy", name], 0);
            if strategy == Strategy::Outbox {
                let output = dir.run("relay", &["--group", "g"]);
                assert_eq!(output.status.code(), Some(0), "case '{case}': relay\n{}", describe(&output));
            }
        }
        let (on_postgres, on_sqlite) = (postgres.group(&case, "g"), sqlite.group(&case, "g"));
        assert_eq!(on_postgres, on_sqlite, "case '{case}': the PostgreSQL store differs from the SQLite one");
        // The set rows keep v(5) = 6 as their value; every other row adds.
        let counted = if on_postgres["value"].is_null() { &on_postgres["total"] } else { &on_postgres["value"] };
        assert_eq!(counted, 6, "case '{case}': every record counted once: {on_postgres}");
    }
}

/// Starts `copies` identical `consume` processes before waiting for any.
fn consume_concurrently(dir: &DataDir, args: &[&str], copies: usize) -> Vec<Output> {
    let children: Vec<Child> = (0..copies)
        .map(|_| {
            dir.command("consume", args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the consumer binary starts")
        })
        .collect();
    children.into_iter().map(|child| child.wait_with_output().expect("reap a consumer")).collect()
}

/// Three atomic-cas owners with the same name and epoch apply the same batches at once; the
/// `SELECT ... FOR UPDATE` on the progress row serialises their transactions, so every record
/// counts exactly once whatever the interleaving.
#[test]
fn three_atomic_cas_processes_at_once_count_every_record_once() {
    for round in 0..3 {
        let case = format!("atomic-cas, three concurrent copies, round {round}");
        let Some(dir) = pg_dir(&case, 1, 300) else { return };
        let outputs = consume_concurrently(&dir, &["--group", "g", "--strategy", "atomic-cas", "--batch", "100"], 3);
        for output in &outputs {
            assert_eq!(output.status.code(), Some(0), "case '{case}'\n{}", describe(output));
        }
        assert_eq!(dir.state(&case, "g"), (300, 300), "case '{case}': every record exactly once");
    }
}

/// A rebalance (`claim`) races a running atomic-fenced `consume` of o0, and o1 starts as soon
/// as the claim returns. The claim's update waits for o0's lock on the progress row, and o0's
/// next transaction reads the new epoch under its own lock, so wherever the claim lands o0
/// writes nothing after it: every record counts exactly once, and o0 ends with 0 or 4 (fenced).
/// o1's start claims an epoch after the rebalance's, and o0's start one before it if it came
/// first: the epoch ends at 3 or 4.
#[test]
fn a_rebalance_racing_a_fenced_consumer_never_double_counts_on_postgres() {
    for round in 0..3 {
        let case = format!("atomic-fenced consume racing a claim, round {round}");
        let Some(dir) = pg_dir(&case, 1, 200) else { return };
        // The group exists first, so o0 is its initial owner whatever runs first.
        dir.consume(&case, &["--group", "g", "--owner", "nobody", "--strategy", "atomic-fenced"], 0);
        let spawn = |owner: &str| {
            dir.command("consume", &["--group", "g", "--owner", owner, "--strategy", "atomic-fenced"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the consumer binary starts")
        };
        let old_owner = spawn("o0");
        dir.claim(&case, "g", 0, "o1");
        let new_owner = spawn("o1");
        let old = old_owner.wait_with_output().expect("reap o0");
        let new = new_owner.wait_with_output().expect("reap o1");
        assert_eq!(new.status.code(), Some(0), "case '{case}': o1\n{}", describe(&new));
        assert!(
            matches!(old.status.code(), Some(0) | Some(FENCED)),
            "case '{case}': o0 must end with 0 or 4 (fenced)\n{}",
            describe(&old)
        );
        assert_eq!(dir.state(&case, "g"), (200, 200), "case '{case}': every record exactly once");
        let row = dir.progress(&case, "g");
        assert!(
            matches!(row["epoch"].as_i64(), Some(3 | 4)) && row["owner"] == "o1",
            "case '{case}': o1 holds the partition at epoch 3 or 4: {row}"
        );
    }
}

/// One zombie scenario on three records of +5: o0 starts (claiming epoch 2) and fetches record
/// 0, the partition is claimed for o1 (epoch 3), o1 consumes the log (its start claims epoch
/// 4), then o0 applies its stale record.
struct ZombieCase {
    strategy: &'static str,
    /// The worker's reply to the zombie's `apply-atomic 0 0`.
    reply: &'static str,
    /// (total, next_offset) after the zombie's write.
    after: GroupState,
}

fn run_zombie_case(case: &ZombieCase) -> Option<()> {
    let name = format!("{} zombie after a rebalance", case.strategy);
    let name = name.as_str();
    let dir = pg_dir(name, 5, 3)?;
    let mut zombie = dir.worker(name, "g", "o0", case.strategy);
    zombie.expect("fetch 0 0", "ok fetched 1");
    dir.claim(name, "g", 0, "o1");
    dir.consume(name, &["--group", "g", "--owner", "o1", "--strategy", case.strategy], 0);
    assert_eq!(dir.state(name, "g"), (15, 3), "case '{name}': o1 consumed the log");
    zombie.expect("apply-atomic 0 0", case.reply);
    zombie.quit();
    assert_eq!(dir.state(name, "g"), case.after, "case '{name}': (total, next_offset) after the zombie's write");
    let row = dir.progress(name, "g");
    assert_eq!(
        (row["epoch"].as_i64(), row["owner"].as_str()),
        (Some(4), Some("o1")),
        "case '{name}': the claim stays: {row}"
    );
    Some(())
}

/// Blind atomic lands the zombie's stale record (counted twice, checkpoint moved back to 1);
/// atomic-fenced reads the epoch inside its transaction and aborts; atomic-cas skips it.
#[test]
fn a_zombie_owner_writes_after_a_rebalance_on_postgres() {
    let cases = [
        ZombieCase { strategy: "atomic", reply: "ok applied 1 skipped 0", after: (20, 1) },
        ZombieCase { strategy: "atomic-fenced", reply: "ok fenced 2 4", after: (15, 3) },
        ZombieCase { strategy: "atomic-cas", reply: "ok applied 0 skipped 1", after: (15, 3) },
    ];
    for case in &cases {
        if run_zombie_case(case).is_none() {
            return;
        }
    }
}

/// An atomic-fenced owner that committed record 0 at epoch 2 (its start's claim) and crashed
/// restarts as a worker (epoch 3), fetches record 1, loses the partition to o1 (epoch 4) and
/// is fenced: nothing of it lands, and o1 finishes.
#[test]
fn a_zombie_fenced_mid_log_lands_nothing_on_postgres() {
    let case = "atomic-fenced consume fenced by a claim between two transactions";
    let Some(dir) = pg_dir(case, 5, 3) else { return };
    dir.consume(case, &["--group", "g", "--strategy", "atomic-fenced", "--crash-at", "apply-atomic:after@0"], CRASHED);
    let mut zombie = dir.worker(case, "g", "o0", "atomic-fenced");
    zombie.expect("fetch 0 1", "ok fetched 1");
    dir.claim(case, "g", 0, "o1");
    zombie.expect("apply-atomic 0 1", "ok fenced 3 4");
    zombie.quit();
    assert_eq!(dir.state(case, "g"), (5, 1), "case '{case}': nothing of the zombie landed");
    let output = dir.consume(case, &["--group", "g", "--owner", "o1", "--strategy", "atomic-fenced"], 0);
    assert!(stdout(&output).contains("group g total 15"), "case '{case}': o1 finishes the log\n{}", describe(&output));
}

/// atomic-dlq counts the poison record's failed attempts in the store and dead-letters it
/// after `--max-attempts`; the operator's redrive applies it once and refuses a second time.
#[test]
fn atomic_dlq_dead_letters_a_poison_record_on_postgres() {
    let case = "atomic-dlq on +5, poison, +5";
    let Some(dir) = pg_dir(case, 5, 1) else { return };
    let output = dir.run("append-poison", &["--partition", "0"]);
    common::expect_code(case, "append-poison", &output, 0);
    dir.append(case, 0, 5, 1);
    let output = dir.consume(case, &["--group", "g", "--strategy", "atomic-dlq"], 0);
    assert!(
        stdout(&output).contains("dead-lettered: partition 0 offset 1 after 2 failed attempt(s)"),
        "case '{case}': consume reports the dead letter\n{}",
        describe(&output)
    );
    assert_eq!(dir.state(case, "g"), (10, 3), "case '{case}': the rest of the log is consumed");
    let output = dir.run("dead-letters", &["--group", "g"]);
    common::expect_code(case, "dead-letters", &output, 0);
    assert_eq!(
        stdout(&output),
        "group g partition 0 offset 1: 2 attempt(s), error: payload is not an 8-byte delta\n",
        "case '{case}': the dead-letter table"
    );
    let redrive = ["--group", "g", "--partition", "0", "--offset", "1", "--delta", "7"];
    let output = dir.run("redrive", &redrive);
    common::expect_code(case, "redrive", &output, 0);
    assert_eq!(dir.state(case, "g"), (17, 3), "case '{case}': the redrive applied the corrected delta");
    let output = dir.run("redrive", &redrive);
    common::expect_code(case, "a second redrive", &output, FAILED);
    assert_eq!(
        stderr(&output),
        "error: no dead letter for group g partition 0 offset 1\n",
        "case '{case}': the refusal"
    );
    assert_eq!(dir.state(case, "g"), (17, 3), "case '{case}': the refused redrive wrote nothing");
}

/// Retention moves the log start past the position: the default policy fails and writes
/// nothing; `earliest` records the reset and consumes the rest.
#[test]
fn earliest_records_a_reset_on_postgres() {
    let case = "retention to 3 of five records of +1";
    let Some(dir) = pg_dir(case, 1, 5) else { return };
    let output = dir.run("retain", &["--partition", "0", "--before", "3"]);
    common::expect_code(case, "retain", &output, 0);
    dir.consume(case, &["--group", "g", "--strategy", "atomic-fenced"], FAILED);
    assert_eq!(dir.state(case, "g"), (0, 0), "case '{case}': fail wrote nothing");
    let output =
        dir.consume(case, &["--group", "g", "--strategy", "atomic-fenced", "--on-out-of-range", "earliest"], 0);
    let expected = "reset: partition 0 from offset 0 to the log start 3 (retention removed the records in between)";
    assert!(stdout(&output).contains(expected), "case '{case}': consume reports the reset\n{}", describe(&output));
    assert_eq!(dir.state(case, "g"), (2, 5), "case '{case}': offsets 3 and 4 consumed");
    let output = dir.run("resets", &[]);
    common::expect_code(case, "resets", &output, 0);
    assert_eq!(stdout(&output), "group g partition 0: reset from offset 0 to 3\n", "case '{case}': the reset table");
}

/// `init` refuses a database that holds the store already, before it creates anything in its
/// data directory, and `status` names the target without a password; a database nobody
/// initialised is refused with the command to run.
#[test]
fn init_refuses_an_initialised_database_and_errors_name_the_target() {
    let case = "init twice on one database";
    let Some(dir) = pg_dir(case, 1, 0) else { return };
    let url = dir.store.clone().expect("a PostgreSQL data directory has a URL");
    let again = DataDir::uninitialised(case);
    let output = again.run("init", &["--store", &url]);
    common::expect_code(case, "a second init", &output, FAILED);
    assert!(stderr(&output).contains("is already initialised"), "case '{case}': the refusal\n{}", describe(&output));
    // Refused by the check before the logs are made (not by the store's own create, last):
    // the directory `init` made for its lock is left empty.
    let left: Vec<_> = std::fs::read_dir(&again.path)
        .unwrap_or_else(|e| panic!("case '{case}': cannot list {}: {e}", again.path.display()))
        .map(|entry| entry.expect("a directory entry").file_name())
        .collect();
    assert!(left.is_empty(), "case '{case}': the refused init created {left:?}");
    let output = dir.run("status", &[]);
    common::expect_code(case, "status", &output, 0);
    assert!(
        stdout(&output).starts_with("store postgres://postgres@"),
        "case '{case}': status names the target\n{}",
        describe(&output)
    );

    let case = "a database nobody initialised";
    let Some(url) = pg::database() else { return };
    let dir = DataDir::uninitialised(case);
    let with_password = url.replace("user=postgres", "user=postgres&password=hunter2");
    let output = dir.run("status", &["--store", &with_password]);
    common::expect_code(case, "status", &output, FAILED);
    let error = stderr(&output);
    assert!(
        error.contains("is not initialised (run `consumer init --store URL`)"),
        "case '{case}': the refusal\n{}",
        describe(&output)
    );
    assert!(!error.contains("hunter2"), "case '{case}': the error must not show the password\n{}", describe(&output));
}
