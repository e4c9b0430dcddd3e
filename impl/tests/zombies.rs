//! Zombies and real kills through the worker protocol: an owner that keeps running after a
//! rebalance, and owners SIGKILLed between their durable writes, then restarted.

mod common;

use common::{DataDir, GroupState};

/// One zombie scenario on three records of +5: o0 starts (claiming epoch 2) and fetches record
/// 0, the partition is claimed for o1 (epoch 3), o1 optionally consumes the log (its start
/// claims epoch 4), then o0 applies its stale batch.
struct ZombieCase {
    strategy: &'static str,
    /// Whether o1 consumes the log before the zombie writes.
    new_owner_consumes: bool,
    /// The worker's reply to the zombie's `apply-atomic 0 0`.
    reply: &'static str,
    /// (total, next_offset) after the zombie's write.
    after: GroupState,
}

fn run_zombie_case(case: &ZombieCase) {
    let name = format!("{} zombie, new owner consumed first: {}", case.strategy, case.new_owner_consumes);
    let name = name.as_str();
    let dir = DataDir::with_records(name, 5, 3);
    let mut zombie = dir.worker(name, "g", "o0", case.strategy);
    zombie.expect("fetch 0 0", "ok fetched 1");
    dir.claim(name, "g", 0, "o1");
    let row = dir.progress(name, "g");
    assert_eq!(
        (row["epoch"].as_i64(), row["owner"].as_str()),
        (Some(3), Some("o1")),
        "case '{name}': the claim (after o0's start claimed epoch 2): {row}"
    );
    if case.new_owner_consumes {
        dir.consume(name, &["--group", "g", "--owner", "o1", "--strategy", case.strategy], 0);
        assert_eq!(dir.state(name, "g"), (15, 3), "case '{name}': o1 consumed the log");
    }

    zombie.expect("apply-atomic 0 0", case.reply);
    let fenced = case.reply.starts_with("ok fenced");
    // A fenced owner drops the partition; any other keeps believing it owns it.
    let state = zombie.state();
    let holds_partition = state["leases"].get("0").is_some();
    assert_eq!(holds_partition, !fenced, "case '{name}': whether the zombie still holds partition 0: {state}");
    zombie.quit();
    assert_eq!(dir.state(name, "g"), case.after, "case '{name}': (total, next_offset) after the zombie's write");

    // Restarted, o0 learns from the store that it lost the partition.
    let output = dir.consume(name, &["--group", "g", "--owner", "o0", "--strategy", case.strategy], 0);
    assert!(
        common::stdout(&output).contains("o0 owns no partition of group g; nothing to do"),
        "case '{name}': the restarted o0 should own nothing\n{}",
        common::describe(&output)
    );
    assert_eq!(dir.state(name, "g"), case.after, "case '{name}': the restarted o0 must write nothing");
}

/// Atomic writes the zombie's stale batch blindly (record 0 counted twice, checkpoint moved back
/// to 1); atomic-fenced aborts it; atomic-cas skips it when the new owner moved on, and applies
/// it (correctly, but unfenced) when the record is still exactly at the stored offset.
#[test]
fn a_zombie_owner_writes_after_a_rebalance() {
    let cases = [
        ZombieCase { strategy: "atomic", new_owner_consumes: true, reply: "ok applied 1 skipped 0", after: (20, 1) },
        ZombieCase { strategy: "atomic-fenced", new_owner_consumes: true, reply: "ok fenced 2 4", after: (15, 3) },
        ZombieCase { strategy: "atomic-fenced", new_owner_consumes: false, reply: "ok fenced 2 3", after: (0, 0) },
        ZombieCase {
            strategy: "atomic-cas",
            new_owner_consumes: true,
            reply: "ok applied 0 skipped 1",
            after: (15, 3),
        },
        ZombieCase {
            strategy: "atomic-cas",
            new_owner_consumes: false,
            reply: "ok applied 1 skipped 0",
            after: (5, 1),
        },
    ];
    for case in &cases {
        run_zombie_case(case);
    }
}

/// One SIGKILL scenario on three records of +5: a worker sends `commands` (each must succeed),
/// is killed, and a `consume` restart of the same owner finishes the log.
struct KillCase {
    name: &'static str,
    strategy: &'static str,
    commands: &'static [&'static str],
    /// (total, next_offset) right after the kill.
    after_kill: GroupState,
    /// (total, next_offset) after the restart.
    after_restart: GroupState,
}

fn run_kill_case(case: &KillCase) {
    let name = case.name;
    let dir = DataDir::with_records(name, 5, 3);
    let mut worker = dir.worker(name, "g", "o0", case.strategy);
    for command in case.commands {
        let reply = worker.send(command);
        assert!(reply.starts_with("ok "), "case '{name}': '{command}' should succeed, got '{reply}'");
    }
    worker.kill();
    assert_eq!(dir.state(name, "g"), case.after_kill, "case '{name}': (total, next_offset) after SIGKILL");
    dir.consume(name, &["--group", "g", "--strategy", case.strategy], 0);
    assert_eq!(dir.state(name, "g"), case.after_restart, "case '{name}': (total, next_offset) after the restart");
}

/// A SIGKILL loses only volatile state: the restart resumes at the committed checkpoint, so
/// what happens to the killed record is exactly what the strategy's write order implies.
#[test]
fn sigkilled_owners_recover_from_the_committed_checkpoint() {
    let cases = [
        KillCase {
            name: "effect-first killed after fetch: nothing was written, nothing is lost",
            strategy: "effect-first",
            commands: &["fetch 0 0"],
            after_kill: (0, 0),
            after_restart: (15, 3),
        },
        KillCase {
            name: "effect-first killed after the effect: record 0 is replayed",
            strategy: "effect-first",
            commands: &["fetch 0 0", "apply-effect 0 0"],
            after_kill: (5, 0),
            after_restart: (20, 3),
        },
        KillCase {
            name: "commit-first killed after the commit: record 0 is skipped",
            strategy: "commit-first",
            commands: &["fetch 0 0", "commit-offset 0 1"],
            after_kill: (0, 1),
            after_restart: (10, 3),
        },
        KillCase {
            name: "dedup-separate killed between the effect and the id: record 0 is replayed",
            strategy: "dedup-separate",
            commands: &["fetch 0 0", "apply-effect 0 0"],
            after_kill: (5, 0),
            after_restart: (20, 3),
        },
        KillCase {
            name: "dedup-atomic killed before its commit: the redelivery is recognised",
            strategy: "dedup-atomic",
            commands: &["fetch 0 0", "apply-deduped 0 0"],
            after_kill: (5, 0),
            after_restart: (15, 3),
        },
        KillCase {
            name: "atomic killed after fetch: nothing was written, nothing is lost",
            strategy: "atomic",
            commands: &["fetch 0 0"],
            after_kill: (0, 0),
            after_restart: (15, 3),
        },
        KillCase {
            name: "atomic killed after its transaction: no duplicate",
            strategy: "atomic",
            commands: &["fetch 0 0", "apply-atomic 0 0"],
            after_kill: (5, 1),
            after_restart: (15, 3),
        },
        KillCase {
            name: "offset-stamp killed before its checkpoint: the stamp skips record 0",
            strategy: "offset-stamp",
            commands: &["fetch 0 0", "apply-stamped 0 0"],
            after_kill: (5, 0),
            after_restart: (15, 3),
        },
    ];
    for case in &cases {
        run_kill_case(case);
    }
}

/// A crash point armed over the protocol ends the worker inside its transaction (exit 9); the
/// next worker for the same owner starts from the checkpoint the aborted write never moved.
#[test]
fn a_worker_crashed_inside_its_transaction_restarts_clean() {
    let case = "atomic worker armed at apply-atomic:inside";
    let dir = DataDir::with_records(case, 5, 3);
    let mut worker = dir.worker(case, "g", "o0", "atomic");
    worker.expect("fetch 0 0", "ok fetched 1");
    worker.expect("apply-atomic 0 0", "ok applied 1 skipped 0");
    worker.expect("arm apply-atomic:inside", "ok armed");
    worker.expect("fetch 0 1", "ok fetched 1");
    worker.send_expecting_exit("apply-atomic 0 1", common::CRASHED);
    assert_eq!(dir.state(case, "g"), (5, 1), "case '{case}': only record 0's transaction committed");

    let mut restarted = dir.worker(case, "g", "o0", "atomic");
    let lease = restarted.state()["leases"]["0"].clone();
    assert_eq!(
        (lease["position"].as_u64(), lease["checkpoint"].as_u64()),
        (Some(1), Some(1)),
        "case '{case}': the restart resumes at 1: {lease}"
    );
    restarted.expect("fetch 0 1", "ok fetched 1");
    restarted.expect("apply-atomic 0 1", "ok applied 1 skipped 0");
    restarted.quit();
    assert_eq!(dir.state(case, "g"), (10, 2), "case '{case}': record 1 applied once after the restart");
}
