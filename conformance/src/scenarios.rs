//! The mission's scenarios written as traces: the four SQLite crash outcomes, two independent
//! groups, the periodic-commit replay of 49/39 (110 vs 100), and the zombie owner; the
//! delivery lab's schedules: the acks=1 loss after failover and its acks=all
//! counterpart, the exact retry after `NotEnoughReplicasAfterAppend`, and a zombie
//! transactional producer fenced or, without producer identity, duplicating output; and the
//! counterexamples of spec.md §3.4's traps run against the rows that defend against them.

use model::check::Verdict;
use model::trace::Trace;
use model::{Action, Config, Strategy};

/// Builds a trace action by action, with the model's vocabulary.
struct Script {
    config: Config,
    actions: Vec<Action>,
}

impl Script {
    fn new(strategy: Strategy, edit: impl FnOnce(&mut Config)) -> Script {
        let mut config = Config::new(strategy);
        edit(&mut config);
        // The default interval and window cannot exceed a smaller log.
        config.commit_every = config.commit_every.min(config.records);
        config.inflight = config.inflight.min(config.records);
        Script { config, actions: Vec::new() }
    }

    fn push(&mut self, action: Action) -> &mut Script {
        self.actions.push(action);
        self
    }

    fn append(&mut self, count: u8) -> &mut Script {
        for _ in 0..count {
            let delta = self.config.delta;
            self.push(Action::Append { partition: 0, delta });
        }
        self
    }

    fn trace(&self, property: &str, verdict: Verdict, description: &str) -> Trace {
        Trace::new(self.config.clone(), Some(property), Some(verdict), description.to_string(), self.actions.clone())
    }
}

fn fetch(group: u8, owner: u8, offset: u8) -> Action {
    Action::Fetch { group, owner, partition: 0, offset }
}

fn apply_effect(group: u8, owner: u8, offset: u8) -> Action {
    Action::ApplyEffect { group, owner, partition: 0, offset }
}

fn apply_stamped(group: u8, owner: u8, offset: u8) -> Action {
    Action::ApplyStamped { group, owner, partition: 0, offset }
}

fn atomic(group: u8, owner: u8, offset: u8) -> Action {
    Action::ApplyAtomic { group, owner, partition: 0, offset }
}

fn crash(group: u8, owner: u8) -> Action {
    Action::Crash { group, owner }
}

fn restart(group: u8, owner: u8) -> Action {
    Action::Restart { group, owner }
}

/// One group, one owner, one record of +5, one crash: the mission's SQLite cases.
fn single(strategy: Strategy) -> Script {
    Script::new(strategy, |c| {
        c.groups = 1;
        c.owners = 1;
        c.records = 1;
        c.crashes = 1;
        c.rebalances = 0;
    })
}

/// Every scenario, by file name (without `.json`).
pub fn all() -> Vec<(String, Trace)> {
    let mut scenarios = sqlite_cases();
    scenarios.extend(replay_window_cases());
    scenarios.extend(zombie_cases());
    scenarios.push(("scenario--two-groups-independent".to_string(), two_groups()));
    scenarios.extend(mechanism_cases());
    scenarios.extend(lab_cases());
    scenarios.extend(defence_cases());
    scenarios.extend(broker_cases());
    scenarios
}

/// The broker rows' rebalance with a record applied and not committed, on both coordinators:
/// the exact one refuses the old owner's commit and the new owner applies the record again;
/// the forming one lands it while the group forms, and the new owner, assigned at the sync
/// after the old one's session ended (a crash), starts past it. One group, as the Kafka lane
/// replays them.
fn broker_cases() -> Vec<(String, Trace)> {
    let one_group = |c: &mut Config| c.groups = 1;
    let commit = |owner, next_offset| Action::CommitOffset { group: 0, owner, partition: 0, next_offset };
    let rebalance = Action::Rebalance { group: 0, partition: 0, to_owner: 1 };
    let mut exact = Script::new(Strategy::BrokerEffectFirst, one_group);
    exact.append(2).push(fetch(0, 0, 0)).push(apply_effect(0, 0, 0)).push(commit(0, 1));
    exact.push(fetch(0, 0, 1)).push(apply_effect(0, 0, 1)).push(rebalance).push(commit(0, 2));
    exact.push(fetch(0, 1, 1)).push(apply_effect(0, 1, 1)).push(commit(1, 2));
    let mut relaxed = Script::new(Strategy::BrokerRelaxed, one_group);
    relaxed.append(2).push(fetch(0, 0, 0)).push(apply_effect(0, 0, 0)).push(commit(0, 1));
    relaxed.push(fetch(0, 0, 1)).push(apply_effect(0, 0, 1)).push(rebalance).push(commit(0, 2));
    relaxed.push(crash(0, 0)).push(Action::Sync { group: 0, partition: 0 });
    relaxed.append(1).push(fetch(0, 1, 2)).push(apply_effect(0, 1, 2)).push(commit(1, 3));
    vec![
        (
            "scenario--broker-refuses-the-old-commit".to_string(),
            exact.trace(
                "no-duplicate",
                Verdict::Violated,
                "a rebalance between o0's effect of offset 1 and its commit: the broker refuses the commit \
                 (generation) and o1 applies offset 1 again (total 15 for 10)",
            ),
        ),
        (
            "scenario--broker-relaxed-lands-the-old-commit".to_string(),
            relaxed.trace(
                "no-duplicate",
                Verdict::Holds,
                "the same rebalance on a forming coordinator: o0's commit of 2 lands while the group forms \
                 (commit-while-forming), o0 crashes, the group forms and o1 starts at offset 2: each record \
                 once",
            ),
        ),
    ]
}

/// The poison, producer and retention mechanisms, each across a crash or a retry: the dead-letter count survives a
/// crash, an idempotent retry appends nothing, and a reset after retention is recorded.
fn mechanism_cases() -> Vec<(String, Trace)> {
    let one_owner = |c: &mut Config| {
        c.groups = 1;
        c.owners = 1;
        c.rebalances = 0;
    };
    let mut dlq = Script::new(Strategy::AtomicDlq, |c| {
        one_owner(c);
        c.records = 3;
    });
    dlq.append(3).push(fetch(0, 0, 0)).push(atomic(0, 0, 0)).push(fetch(0, 0, 1)).push(atomic(0, 0, 1));
    dlq.push(crash(0, 0)).push(restart(0, 0)).push(fetch(0, 0, 1)).push(atomic(0, 0, 1));
    dlq.push(Action::DeadLetter { group: 0, owner: 0, partition: 0, offset: 1 })
        .push(fetch(0, 0, 2))
        .push(atomic(0, 0, 2));
    let mut retry = Script::new(Strategy::ProducerIdempotent, |c| {
        one_owner(c);
        c.records = 2;
        c.crashes = 0;
    });
    retry.push(Action::AppendAckLost { partition: 0, delta: 5 }).push(Action::RetryAppend { partition: 0, delta: 5 });
    retry.append(1).push(fetch(0, 0, 0)).push(atomic(0, 0, 0)).push(fetch(0, 0, 1)).push(atomic(0, 0, 1));
    let mut reset = Script::new(Strategy::ResetEarliest, |c| {
        one_owner(c);
        c.records = 3;
    });
    reset.append(3).push(fetch(0, 0, 0)).push(atomic(0, 0, 0)).push(crash(0, 0));
    reset.push(Action::Retain { partition: 0, before: 2 }).push(restart(0, 0));
    reset.push(Action::ResetOffset { group: 0, owner: 0, partition: 0 }).push(fetch(0, 0, 2)).push(atomic(0, 0, 2));
    vec![
        (
            "scenario--dlq-attempts-survive-a-crash".to_string(),
            dlq.trace(
                "bounded-retries",
                Verdict::Holds,
                "one failed attempt, a crash, one more: the durable count reaches 2 and the record is \
                 dead-lettered, never tried a third time",
            ),
        ),
        (
            "scenario--idempotent-retry-after-lost-ack".to_string(),
            retry.trace(
                "no-duplicate-append",
                Verdict::Holds,
                "the append lands but its ack is lost; the retry repeats the sequence and the log appends nothing",
            ),
        ),
        (
            "scenario--reset-after-retention".to_string(),
            reset.trace(
                "reset-accounted",
                Verdict::Holds,
                "offset 0 applied, crash, retention moves the start to 2: the restart records the reset 1 -> 2 \
                 and applies offset 2",
            ),
        ),
    ]
}

fn sqlite_cases() -> Vec<(String, Trace)> {
    let (g, o) = (0, 0);
    let mut skip = single(Strategy::CommitFirst);
    skip.append(1).push(fetch(g, o, 0));
    skip.push(Action::CommitOffset { group: g, owner: o, partition: 0, next_offset: 1 })
        .push(crash(g, o))
        .push(restart(g, o));
    let effect = apply_effect(g, o, 0);
    let mut replay = single(Strategy::EffectFirst);
    replay.append(1).push(fetch(g, o, 0)).push(effect).push(crash(g, o)).push(restart(g, o));
    replay.push(fetch(g, o, 0)).push(effect).push(Action::CommitOffset {
        group: g,
        owner: o,
        partition: 0,
        next_offset: 1,
    });
    let mut before_commit = single(Strategy::Atomic);
    before_commit
        .append(1)
        .push(fetch(g, o, 0))
        .push(crash(g, o))
        .push(restart(g, o))
        .push(fetch(g, o, 0))
        .push(atomic(g, o, 0));
    let mut after_commit = single(Strategy::Atomic);
    after_commit.append(1).push(fetch(g, o, 0)).push(atomic(g, o, 0)).push(crash(g, o)).push(restart(g, o));
    vec![
        (
            "scenario--sqlite-commit-first-skip".to_string(),
            skip.trace(
                "contiguous-prefix",
                Verdict::Violated,
                "commit next offset 1, crash before the effect: reopens at (total, next) = (0, 1) and the \
                 restart skips offset 0",
            ),
        ),
        (
            "scenario--sqlite-effect-first-replay".to_string(),
            replay.trace(
                "no-duplicate",
                Verdict::Violated,
                "apply +5, crash before committing: reopens at (5, 0), the replay ends at (10, 1)",
            ),
        ),
        (
            "scenario--sqlite-atomic-crash-before-commit".to_string(),
            before_commit.trace(
                "effectively-once",
                Verdict::Holds,
                "the transaction never committed: reopens at (0, 0), the restart ends at (5, 1)",
            ),
        ),
        (
            "scenario--sqlite-atomic-crash-after-commit".to_string(),
            after_commit.trace(
                "effectively-once",
                Verdict::Holds,
                "the transaction committed: reopens at (5, 1), the restart has nothing to do",
            ),
        ),
    ]
}

/// 100 records of +1, a checkpoint every 10, a crash after applying offset 49 with the
/// checkpoint at next offset 40; the restart replays 40..49. `apply` is the strategy's effect
/// write for an offset.
fn replay_window(strategy: Strategy, apply: fn(u8) -> Action) -> Script {
    let mut script = Script::new(strategy, |c| {
        c.groups = 1;
        c.owners = 1;
        c.records = 100;
        c.commit_every = 10;
        c.crashes = 1;
        c.rebalances = 0;
        c.delta = 1;
    });
    script.append(100);
    // Consumes `offsets`, checkpointing every 10 records, except right before the crash.
    let consume = |script: &mut Script, offsets: std::ops::Range<u8>, crash_after: Option<u8>| {
        for offset in offsets {
            script.push(Action::Fetch { group: 0, owner: 0, partition: 0, offset });
            script.push(apply(offset));
            if (offset + 1) % 10 == 0 && Some(offset) != crash_after {
                script.push(Action::CommitOffset { group: 0, owner: 0, partition: 0, next_offset: offset + 1 });
            }
        }
    };
    consume(&mut script, 0..50, Some(49));
    script.push(crash(0, 0)).push(restart(0, 0));
    consume(&mut script, 40..100, None);
    script
}

fn replay_window_cases() -> Vec<(String, Trace)> {
    vec![
        (
            "scenario--periodic-commit-replay-49-39".to_string(),
            replay_window(Strategy::PeriodicCommit, |offset| apply_effect(0, 0, offset)).trace(
                "no-duplicate",
                Verdict::Violated,
                "applied through 49, checkpoint at 39: the replay of 40..49 ends at 110, not 100",
            ),
        ),
        (
            "scenario--offset-stamp-replay-49-39".to_string(),
            replay_window(Strategy::OffsetStamp, |offset| apply_stamped(0, 0, offset)).trace(
                "no-duplicate",
                Verdict::Holds,
                "the same crash: the stamp (49) rejects the replay of 40..49, the total is exactly 100",
            ),
        ),
    ]
}

/// Owner 0 fetches offset 0, the partition moves to owner 1 (epoch 2), which applies it; then
/// the zombie applies it too.
fn zombie(strategy: Strategy) -> Script {
    let mut script = Script::new(strategy, |c| {
        c.groups = 1;
        c.records = 1;
        c.crashes = 0;
    });
    script.append(1).push(fetch(0, 0, 0)).push(Action::Rebalance { group: 0, partition: 0, to_owner: 1 });
    script.push(fetch(0, 1, 0)).push(atomic(0, 1, 0)).push(atomic(0, 0, 0));
    script
}

fn zombie_cases() -> Vec<(String, Trace)> {
    vec![
        (
            "scenario--zombie-atomic".to_string(),
            zombie(Strategy::Atomic).trace(
                "no-duplicate",
                Verdict::Violated,
                "a zombie (epoch 1) applies offset 0 after the new owner (epoch 2) did: counted twice",
            ),
        ),
        (
            "scenario--zombie-atomic-fenced".to_string(),
            zombie(Strategy::AtomicFenced).trace(
                "fenced-writes",
                Verdict::Holds,
                "the zombie's transaction finds epoch 2 and aborts (Fenced): counted once",
            ),
        ),
        (
            "scenario--zombie-atomic-cas".to_string(),
            zombie(Strategy::AtomicCas).trace(
                "no-duplicate",
                Verdict::Holds,
                "the zombie's transaction reads next offset 1 and skips offset 0: counted once",
            ),
        ),
    ]
}

/// Group 0 consumes both records with a crash in between; group 1 consumes one. Neither
/// changes the other's total or checkpoint.
fn two_groups() -> Trace {
    let mut script = Script::new(Strategy::Atomic, |c| {
        c.owners = 1;
        c.records = 2;
        c.rebalances = 0;
    });
    script.append(2);
    script.push(fetch(0, 0, 0)).push(atomic(0, 0, 0)).push(crash(0, 0)).push(restart(0, 0));
    script.push(fetch(0, 0, 1)).push(atomic(0, 0, 1));
    script.push(fetch(1, 0, 0)).push(atomic(1, 0, 0));
    script.trace(
        "group-isolation",
        Verdict::Holds,
        "g0 consumes everything across a crash, g1 one record: separate totals and checkpoints",
    )
}

/// The delivery lab's schedules (seed 001), each on the row it is about.
fn lab_cases() -> Vec<(String, Trace)> {
    use Action::{Acknowledge, FailLeader, Replicate, RetryAppend, ShrinkIsr};
    let p0 = 0;
    let append = Action::Append { partition: p0, delta: 5 };
    let mut loss = Script::new(Strategy::AcksLeader, |_| {});
    loss.push(append).push(FailLeader { partition: p0 });
    let mut kept = Script::new(Strategy::AcksAll, |_| {});
    kept.push(append).push(Replicate { partition: p0 }).push(Acknowledge { partition: p0 });
    kept.push(FailLeader { partition: p0 }).push(fetch(0, 0, 0)).push(atomic(0, 0, 0));
    let mut retry = Script::new(Strategy::AcksAll, |_| {});
    retry.push(append).push(ShrinkIsr { partition: p0 }).push(Acknowledge { partition: p0 });
    retry.push(Replicate { partition: p0 }).push(RetryAppend { partition: p0, delta: 5 });
    retry.push(Acknowledge { partition: p0 }).push(fetch(0, 0, 0)).push(atomic(0, 0, 0));
    // An owner holding two partitions goes on with p1 when p0 has no leader (the consumer
    // used to fail every step once one partition was unavailable; the walks found it).
    let p1 = 1;
    let mut unavailable = Script::new(Strategy::AcksAllMinIsr1Clean, |c| c.partitions = 2);
    unavailable.push(append).push(ShrinkIsr { partition: p0 }).push(FailLeader { partition: p0 });
    unavailable.push(Action::Append { partition: p1, delta: 5 }).push(Replicate { partition: p1 });
    unavailable.push(Acknowledge { partition: p1 }).push(Action::Fetch {
        group: 0,
        owner: 0,
        partition: p1,
        offset: 0,
    });
    unavailable.push(Action::ApplyAtomic { group: 0, owner: 0, partition: p1, offset: 0 });
    let produce = |owner| Action::ProduceOutput { group: 0, owner, partition: p0, offset: 0 };
    let commit = |owner| Action::CommitTxn { group: 0, owner, partition: p0, offset: 0 };
    let zombie_txn = |strategy| {
        let mut script = Script::new(strategy, |c| {
            c.groups = 1;
            c.owners = 1;
            c.records = 1;
            c.pauses = 1;
        });
        // The instance running as owner 0 is started again: its earlier incarnation (slot 1)
        // has produced offset 0's output and commits after its successor did.
        script.append(1).push(fetch(0, 0, 0)).push(produce(0)).push(Action::Pause { group: 0, owner: 0 });
        script.push(fetch(0, 0, 0)).push(produce(0)).push(commit(0)).push(commit(1));
        script
    };
    vec![
        (
            "scenario--acks-1-loss-after-failover".to_string(),
            loss.trace(
                "no-acked-loss",
                Verdict::Violated,
                "acks=1: the leader acknowledges offset 0 and fails before the follower fetched it; the promoted \
                 follower's log ends at 0 (acknowledged offset 0, records after failover 0)",
            ),
        ),
        (
            "scenario--acks-all-kept-after-failover".to_string(),
            kept.trace(
                "no-acked-loss",
                Verdict::Holds,
                "acks=all: offset 0 is acknowledged once the follower has it; the leader fails, the follower is \
                 promoted with it, and the consumer applies it",
            ),
        ),
        (
            "scenario--acks-all-exact-retry".to_string(),
            retry.trace(
                "no-acked-loss",
                Verdict::Holds,
                "acks=all, min.insync.replicas 2: the follower leaves the ISR after the append, so the answer is \
                 NotEnoughReplicasAfterAppend; the follower catches up and rejoins, and the exact retry (same \
                 producer fields) appends nothing and is acknowledged: offset 0 once",
            ),
        ),
        (
            "scenario--acks-unavailable-partition-others-go-on".to_string(),
            unavailable.trace(
                "committed-read",
                Verdict::Holds,
                "p0's follower leaves the ISR and its leader fails: no clean election, p0 has no leader; the owner \
                 of both partitions goes on with p1",
            ),
        ),
        (
            "scenario--zombie-transaction-fenced".to_string(),
            zombie_txn(Strategy::TxnFenced).trace(
                "output-exactly-once",
                Verdict::Holds,
                "the new instance's take aborts the earlier incarnation's open transaction; its commit is fenced: \
                 one committed output for input 0",
            ),
        ),
        (
            "scenario--zombie-transaction-unfenced".to_string(),
            zombie_txn(Strategy::TxnUnfenced).trace(
                "output-exactly-once",
                Verdict::Violated,
                "no producer identity (MiniKafka): nothing is aborted or fenced, and both incarnations commit an \
                 output for input 0",
            ),
        ),
    ]
}

/// Spec.md §3.4's traps, each counterexample's steps run against the row that defends against
/// it: the model says the property holds there, and the real defence must show it (a repeated
/// email dropped for its key, an older set skipped by the stamp, p1's record applied under its
/// own id, the relay copying the fact a crash left unindexed). The corpus's witnesses of these
/// rows need none of these steps, so without them no corpus trace would exercise the defences.
fn defence_cases() -> Vec<(String, Trace)> {
    let email = |owner| Action::SendEmail { group: 0, owner, partition: 0, offset: 0 };
    let mut keyed = Script::new(Strategy::EmailIdempotencyKey, |_| {});
    keyed.append(1).push(fetch(0, 0, 0)).push(email(0)).push(Action::Pause { group: 0, owner: 0 });
    keyed.push(fetch(0, 0, 0)).push(email(0));
    let mut newer = Script::new(Strategy::SetIfNewer, |_| {});
    newer.append(2).push(fetch(0, 0, 0)).push(Action::Pause { group: 0, owner: 0 });
    newer.push(fetch(0, 0, 0)).push(apply_stamped(0, 0, 0)).push(fetch(0, 0, 1)).push(apply_stamped(0, 0, 1));
    newer.push(apply_stamped(0, 2, 0));
    let mut scoped = Script::new(Strategy::DedupAtomic, |c| {
        c.groups = 1;
        c.partitions = 2;
    });
    scoped.push(Action::Append { partition: 0, delta: 5 }).push(Action::Append { partition: 1, delta: 5 });
    for partition in 0..2 {
        scoped.push(Action::Fetch { group: 0, owner: 0, partition, offset: 0 });
        scoped.push(Action::ApplyDeduped { group: 0, owner: 0, partition, offset: 0 });
    }
    scoped.push(Action::CommitOffset { group: 0, owner: 0, partition: 1, next_offset: 1 });
    let mut outbox = Script::new(Strategy::Outbox, |_| {});
    outbox.append(1).push(fetch(0, 0, 0)).push(atomic(0, 0, 0)).push(crash(0, 0));
    outbox.push(Action::Relay { group: 0 });
    vec![
        (
            "scenario--email-key-drops-the-repeat".to_string(),
            keyed.trace(
                "external-exactly-once",
                Verdict::Holds,
                "email-no-key's counterexample with the key: the second incarnation emails record 0 again \
                 and the provider drops the repeat (delivered once)",
            ),
        ),
        (
            "scenario--set-if-newer-skips-the-older-set".to_string(),
            newer.trace(
                "latest-wins",
                Verdict::Holds,
                "blind-set's zombie with the stamp: the earlier incarnation's set of offset 0 after its \
                 successor set offset 1 is skipped (the value stays 2)",
            ),
        ),
        (
            "scenario--dedup-atomic-keys-by-partition".to_string(),
            scoped.trace(
                "no-silent-skip",
                Verdict::Holds,
                "dedup-offset-only's counterexample keyed by (partition, offset): p1's record 0 is applied, \
                 not skipped as p0's",
            ),
        ),
        (
            "scenario--outbox-relays-after-a-crash".to_string(),
            outbox.trace(
                "stores-agree",
                Verdict::Holds,
                "dual-write's crash after the store's commit, with the outbox: the relay copies the fact the \
                 owner never indexed",
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    /// Every scenario is a run of the model that ends with the verdict it records, so
    /// `regenerate` writes it (the check `regenerate` makes, without writing anything).
    #[test]
    fn every_scenario_replays_in_the_model_with_its_verdict() {
        for (name, trace) in super::all() {
            crate::corpus::check_in_model(&trace).unwrap_or_else(|error| panic!("{name}: {error}"));
        }
    }
}
