//! The properties of spec.md as predicates on a state, and which apply to a configuration.

use crate::action::{Action, Actor};
use crate::config::Config;
use crate::state::{Offset, Stage, State, Witness};
use crate::strategy::{
    Acks, Coordinator, EffectKind, Guard, LogCheck, OutOfRangePolicy, PoisonPolicy, Replication, Sequence, StartPolicy,
};
use crate::ConsumerModel;
use stateright::{Expectation, Property};

/// The safety properties, in the order of spec.md's verdict table.
pub const SAFETY: [&str; 18] = [
    "no-duplicate",
    "contiguous-prefix",
    "effectively-once",
    "monotonic-checkpoint",
    "group-isolation",
    "fenced-writes",
    "no-silent-skip",
    "bounded-retries",
    "no-duplicate-append",
    "reset-accounted",
    "refusal-justified",
    "no-acked-loss",
    "committed-read",
    "output-exactly-once",
    "no-aborted-read",
    "external-exactly-once",
    "latest-wins",
    "stores-agree",
];

/// What a property is for (spec.md §6): a safety claim, or one of the two kinds of `sometimes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// `always`: violated by a counterexample, or holds.
    Safety,
    /// `sometimes`: a configured fault struck where it matters (or the run got where it must).
    /// A complete search that never reaches one proves nothing, so the check fails.
    FaultWitness,
    /// `sometimes`: an outcome worth seeing (a replay, a fenced zombie, a skipped duplicate).
    /// Reported as observed or not; never a failure, since preventing it may be the point.
    Observation,
}

/// The `sometimes` properties and their role, in the order `properties_for` lists them.
pub const SOMETIMES: [(&str, Role); 24] = [
    ("out-of-range", Role::FaultWitness),
    ("reset-recorded", Role::Observation),
    ("append-retried", Role::FaultWitness),
    ("log-end", Role::FaultWitness),
    ("poison-failed", Role::FaultWitness),
    ("dead-lettered", Role::Observation),
    ("groups-diverge", Role::FaultWitness),
    ("crash-after-write", Role::FaultWitness),
    ("crash-mid-record", Role::FaultWitness),
    ("zombie-write", Role::FaultWitness),
    ("commit-while-forming", Role::FaultWitness),
    ("replay", Role::Observation),
    ("duplicate-skipped", Role::Observation),
    ("zombie-fenced", Role::Observation),
    ("out-of-order", Role::FaultWitness),
    ("paused-write", Role::FaultWitness),
    ("store-ahead", Role::FaultWitness),
    ("refused", Role::Observation),
    ("paused-fenced", Role::Observation),
    ("leader-failed", Role::FaultWitness),
    ("isr-shrunk", Role::FaultWitness),
    ("not-enough-replicas", Role::Observation),
    ("unread-truncated", Role::Observation),
    ("txn-aborted", Role::FaultWitness),
];

/// The role of a property by name; every property `properties_for` builds has one.
pub fn role_of(name: &str) -> Role {
    if SAFETY.contains(&name) {
        return Role::Safety;
    }
    match SOMETIMES.iter().find(|(sometimes, _)| *sometimes == name) {
        Some(&(_, role)) => role,
        None => panic!("property '{name}' is in neither SAFETY nor SOMETIMES"),
    }
}

/// No record's effect was applied more than once in any group.
pub fn no_duplicate(state: &State) -> bool {
    state.groups.iter().all(|group| group.ghost.applied.iter().flatten().all(|&count| count <= 1))
}

/// Every offset below each committed checkpoint was applied (no skip, no gap) or is still held,
/// unapplied, in the memory of a live owner that will apply it next. The second case is the
/// window commit-first opens on purpose between its two writes; a crash in it turns it into a
/// skip, which is what this property reports.
pub fn contiguous_prefix(state: &State) -> bool {
    state.groups.iter().all(|group| {
        group.store.partitions.iter().zip(&group.ghost.applied).enumerate().all(|(partition, (row, applied))| {
            (0..below_checkpoint(state, partition, row.next_offset))
                .all(|offset| applied[usize::from(offset)] >= 1 || is_held_unapplied(group, partition, offset))
        })
    })
}

/// Every offset below each checkpoint was applied exactly once, or is in the dead-letter table
/// (never applied), or is held unapplied by a live owner (commit-first's window, as in
/// `contiguous_prefix`): nothing passes the checkpoint unaccounted for.
pub fn no_silent_skip(state: &State) -> bool {
    state.groups.iter().all(|group| {
        group.store.partitions.iter().zip(&group.ghost.applied).enumerate().all(|(partition, (row, applied))| {
            let p = partition as u8;
            (0..below_checkpoint(state, partition, row.next_offset)).all(|offset| {
                let count = applied[usize::from(offset)];
                let dead = group.store.is_dead_lettered(p, offset);
                let accounted =
                    dead || group.store.is_reset_over(p, offset) || is_held_unapplied(group, partition, offset);
                (count == 1 && !dead) || (count == 0 && accounted)
            })
        })
    })
}

/// Every offset below each checkpoint that was never applied and is not dead-lettered (nor
/// held unapplied) lies inside a recorded reset: retention never skips silently.
pub fn reset_accounted(state: &State) -> bool {
    state.groups.iter().all(|group| {
        group.store.partitions.iter().zip(&group.ghost.applied).enumerate().all(|(partition, (row, applied))| {
            let p = partition as u8;
            (0..below_checkpoint(state, partition, row.next_offset)).all(|offset| {
                applied[usize::from(offset)] >= 1
                    || group.store.is_dead_lettered(p, offset)
                    || is_held_unapplied(group, partition, offset)
                    || group.store.is_reset_over(p, offset)
            })
        })
    })
}

/// The offsets below a checkpoint that the log holds. A checkpoint past the end of the log
/// (the log lost records) is not a skip by itself; passing records the log appends again at
/// those offsets is.
fn below_checkpoint(state: &State, partition: usize, next_offset: Offset) -> Offset {
    next_offset.min(state.log[partition].len() as Offset)
}

/// Every refusal to go on happened while the refusing owner's group (or its own position) was
/// ahead of the log: a consumer that refuses when nothing of its own is at stake fails this.
pub fn refusal_justified(state: &State) -> bool {
    state.groups.iter().all(|group| !group.ghost.unjustified_refusal)
}

/// Every acknowledged send is in the current leader's log (when there is a leader).
pub fn no_acked_loss(state: &State) -> bool {
    state.replicas.iter().all(|replicas| {
        let Some(leader) = replicas.leader else { return true };
        let log = &replicas.logs[usize::from(leader)];
        (0..16u8).filter(|send| replicas.acked & (1 << send) != 0).all(|send| log.contains(&send))
    })
}

/// No group applied a record that has since left the leader's log at its offset.
pub fn committed_read(state: &State) -> bool {
    state.groups.iter().all(|group| !group.ghost.read_truncated)
}

/// The downstream reader never read a record of an aborted transaction.
pub fn no_aborted_read(state: &State) -> bool {
    state.groups.iter().all(|group| !group.ghost.read_aborted)
}

/// No poison record's effect was attempted more than `max_attempts` times.
pub fn bounded_retries(model: &ConsumerModel, state: &State) -> bool {
    let max = model.config.max_attempts;
    state.groups.iter().all(|group| group.ghost.failures.iter().all(|&failures| failures <= max))
}

/// Whether a live owner of the group holds `offset` fetched and not yet applied.
pub(crate) fn is_held_unapplied(group: &crate::state::Group, partition: usize, offset: u8) -> bool {
    group.slots().any(|(_, owner)| {
        owner.alive
            && owner.leases[partition]
                .as_ref()
                .is_some_and(|lease| lease.records.get(&offset).is_some_and(|stage| stage.is_before_effect()))
    })
}

/// No committed checkpoint is below the highest one ever stored for its group and partition.
pub fn monotonic_checkpoint(state: &State) -> bool {
    state.groups.iter().all(|group| {
        group.store.partitions.iter().zip(&group.ghost.high_water).all(|(row, &high)| row.next_offset >= high)
    })
}

/// No step of one group changed another group's store, and each total is exactly the sum of
/// the group's own applications (every record carries the configured delta; applications of
/// records a log lost and appended again at the same offset are in `lost_sum`).
pub fn group_isolation(model: &ConsumerModel, state: &State) -> bool {
    let delta = model.config.delta;
    // The set rows replace a value instead of adding to the total: only foreign writes count.
    let adds = model.config.strategy.rules().effect == EffectKind::Add;
    state.groups.iter().all(|group| {
        let applications: i64 = group.ghost.applied.iter().flatten().map(|&count| i64::from(count)).sum();
        // `DELTA_MAX` keeps this within `i64` for every configuration `Config::validate` accepts.
        let own = delta.checked_mul(applications).and_then(|sum| sum.checked_add(group.ghost.lost_sum));
        let own =
            own.unwrap_or_else(|| panic!("group-isolation's sum overflowed i64: |delta| <= DELTA_MAX prevents it"));
        let sum_holds = !adds || group.store.total == own;
        !group.ghost.foreign_write && sum_holds
    })
}

/// Every record below a group's next offset reached the email provider exactly once, and no
/// record more than once. A committed record whose email is next for a live owner (stage
/// `stored`: atomic-plus-email's window between the commit and the email) is not missing yet.
pub fn external_exactly_once(state: &State) -> bool {
    state.groups.iter().all(|group| {
        let pending = |p: usize, o: Offset| {
            group.slots().any(|(_, owner)| {
                owner.alive
                    && owner.leases[p].as_ref().is_some_and(|lease| lease.records.get(&o) == Some(&Stage::Stored))
            })
        };
        let committed_once = group.store.partitions.iter().enumerate().all(|(p, row)| {
            (0..row.next_offset).all(|o| group.inbox.get(&(p as u8, o)).copied() == Some(1) || pending(p, o))
        });
        committed_once && group.inbox.values().all(|&count| count <= 1)
    })
}

/// The stored value is that of the highest offset the group applied (`v(o) = o + 1`).
pub fn latest_wins(state: &State) -> bool {
    state.groups.iter().all(|group| {
        let highest = group
            .ghost
            .applied
            .iter()
            .flat_map(|applied| applied.iter().enumerate().filter(|(_, &count)| count > 0).map(|(o, _)| o as u8));
        group.store.value == highest.max().map(|o| o + 1)
    })
}

/// In a quiescent state (no owner, restart or relay step enabled), the index holds exactly the
/// store's facts. A crash or a second incarnation is a fault, not work left to do: it does not
/// make a state busy, so that quiescence does not depend on the fault budgets left (with `any`,
/// spec.md §7.1, a crash is always possible).
pub fn stores_agree(model: &ConsumerModel, state: &State) -> bool {
    let mut enabled = Vec::new();
    crate::step::enabled_actions(&model.config, state, &mut enabled);
    let busy = enabled.iter().any(|action| match action.actor() {
        Actor::Owner { .. } => !matches!(action, Action::Crash { .. } | Action::Pause { .. }),
        Actor::Coordinator => matches!(action, Action::Relay { .. }),
        Actor::Producer => false,
    });
    busy || state.groups.iter().all(|group| group.index == group.store.facts)
}

/// No durable write by an owner whose epoch was stale landed.
pub fn fenced_writes(state: &State) -> bool {
    state.groups.iter().all(|group| !group.ghost.stale_write_landed)
}

/// Every group committed every record of every partition.
pub fn log_end(model: &ConsumerModel, state: &State) -> bool {
    let records = model.config.records;
    let all_sent = state.producer.iter().all(|p| p.sent == records && p.unacked.is_none());
    all_sent
        && state.groups.iter().all(|group| {
            group.store.partitions.iter().zip(&state.log).all(|(row, log)| usize::from(row.next_offset) == log.len())
        })
}

/// Every logical send of the producer appears at most once in its partition's log.
pub fn no_duplicate_append(state: &State) -> bool {
    state.sends.iter().all(|sends| {
        let mut seen = std::collections::BTreeSet::new();
        sends.iter().all(|send| seen.insert(*send))
    })
}

/// Two groups hold different checkpoints (next offset or stamp): they progress independently.
/// Which owner a row names and its epoch are left out: owners are interchangeable within a
/// group and epochs count a group's takes (symmetry renames both per group, spec.md §7), so
/// neither compares across groups.
pub fn groups_diverge(state: &State) -> bool {
    let progress = |group: &crate::state::Group| -> Vec<_> {
        group.store.partitions.iter().map(|row| (row.next_offset, row.stamp)).collect()
    };
    state.groups.windows(2).any(|pair| progress(&pair[0]) != progress(&pair[1]))
}

/// The properties checked for `config`: every safety property, plus the `sometimes`
/// properties whose situation the configuration can produce (a crash witness needs a crash
/// budget, a zombie witness a rebalance and a second owner, and so on), so that none is
/// vacuous and none is unreachable by construction.
pub fn properties_for(config: &Config) -> Vec<Property<ConsumerModel>> {
    let mut properties = vec![
        Property::always("no-duplicate", |_, s: &State| no_duplicate(s)),
        Property::always("contiguous-prefix", |_, s: &State| contiguous_prefix(s)),
        Property::always("effectively-once", |_, s: &State| no_duplicate(s) && contiguous_prefix(s)),
        Property::always("monotonic-checkpoint", |_, s: &State| monotonic_checkpoint(s)),
        Property::always("group-isolation", group_isolation),
        Property::always("fenced-writes", |_, s: &State| fenced_writes(s)),
        Property::always("no-silent-skip", |_, s: &State| no_silent_skip(s)),
    ];
    let strategy = config.strategy;
    let rules = strategy.rules();
    // `Config::validate` refuses a poison record for a strategy that does not handle it.
    let poisoned = config.poison.is_some();
    if config.poison.is_some() {
        properties.push(Property::always("bounded-retries", bounded_retries));
    }
    if config.retentions > 0 {
        properties.push(Property::always("reset-accounted", |_, s: &State| reset_accounted(s)));
        properties.push(Property::sometimes("out-of-range", |_, s: &State| s.has_witnessed(Witness::OutOfRange)));
        if rules.out_of_range == OutOfRangePolicy::Earliest {
            properties
                .push(Property::sometimes("reset-recorded", |_, s: &State| s.has_witnessed(Witness::ResetRecorded)));
        }
    }
    if config.log_losses > 0 {
        properties.push(Property::always("refusal-justified", |_, s: &State| refusal_justified(s)));
        properties.push(Property::sometimes("store-ahead", |_, s: &State| s.has_witnessed(Witness::StoreAhead)));
        match rules.log_check {
            LogCheck::RefuseAhead | LogCheck::RefuseAll => {
                properties.push(Property::sometimes("refused", |_, s: &State| s.has_witnessed(Witness::Refused)));
            }
            LogCheck::Unchecked => {}
        }
    }
    if let Replication::Replicated(replica_rules) = rules.replication {
        properties.push(Property::always("no-acked-loss", |_, s: &State| no_acked_loss(s)));
        properties.push(Property::always("committed-read", |_, s: &State| committed_read(s)));
        if config.leader_failures > 0 {
            properties
                .push(Property::sometimes("leader-failed", |_, s: &State| s.has_witnessed(Witness::LeaderFailed)));
        }
        if config.isr_shrinks > 0 {
            properties.push(Property::sometimes("isr-shrunk", |_, s: &State| s.has_witnessed(Witness::IsrShrunk)));
        }
        // Too few in-sync replicas is possible only where more than the leader is required.
        let requires_followers = replica_rules.acks == Acks::All && replica_rules.min_insync > 1;
        if requires_followers && (config.isr_shrinks > 0 || config.leader_failures > 0) {
            let refused = |_: &ConsumerModel, s: &State| s.has_witnessed(Witness::NotEnoughReplicas);
            properties.push(Property::sometimes("not-enough-replicas", refused));
        }
        // The consumers' defence: they read below the high watermark, so what an election
        // drops above it was never read (committed-read).
        if config.leader_failures > 0 {
            let unread = |_: &ConsumerModel, s: &State| s.has_witnessed(Witness::UnreadTruncated);
            properties.push(Property::sometimes("unread-truncated", unread));
        }
    }
    if rules.sequence == Sequence::Transactional {
        properties.push(Property::always("output-exactly-once", |_, s: &State| crate::txn::output_exactly_once(s)));
        properties.push(Property::always("no-aborted-read", |_, s: &State| no_aborted_read(s)));
        if rules.guard == Guard::Fenced && (config.crashes > 0 || config.pauses > 0 || config.rebalances > 0) {
            properties.push(Property::sometimes("txn-aborted", |_, s: &State| s.has_witnessed(Witness::TxnAborted)));
        }
    }
    match rules.sequence {
        Sequence::AtomicThenEmail | Sequence::EmailThenAtomic { .. } => {
            properties.push(Property::always("external-exactly-once", |_, s: &State| external_exactly_once(s)));
        }
        Sequence::AtomicThenIndex | Sequence::AtomicWithOutbox => {
            properties.push(Property::always("stores-agree", stores_agree));
        }
        Sequence::CommitThenEffect
        | Sequence::EffectThenCommit
        | Sequence::Effect
        | Sequence::EffectRecordCommit
        | Sequence::Stamped
        | Sequence::DedupedThenCommit
        | Sequence::Atomic
        | Sequence::Transactional => {}
    }
    if rules.effect == EffectKind::Set {
        properties.push(Property::always("latest-wins", |_, s: &State| latest_wins(s)));
    }
    if config.ack_losses > 0 {
        properties.push(Property::always("no-duplicate-append", |_, s: &State| no_duplicate_append(s)));
        properties.push(Property::sometimes("append-retried", |_, s: &State| s.has_witnessed(Witness::AppendRetried)));
    }
    // retry-forever never gets past its poison record: the end of the log is not reachable,
    // and bounded-retries reports why.
    if !(poisoned && rules.poison == PoisonPolicy::RetryForever) {
        properties.push(Property::sometimes("log-end", log_end));
    }
    if poisoned {
        properties.push(Property::sometimes("poison-failed", |_, s: &State| s.has_witnessed(Witness::PoisonFailed)));
    }
    if poisoned && rules.poison == PoisonPolicy::DeadLetter {
        properties.push(Property::sometimes("dead-lettered", |_, s: &State| s.has_witnessed(Witness::DeadLettered)));
    }
    // A stale owner: one a rebalance replaced, or an earlier incarnation once its successor
    // claimed a new epoch. (Resuming at the stored epoch, the trap, makes no one stale.)
    let claims = match rules.start {
        StartPolicy::ClaimEpoch => true,
        StartPolicy::StoredEpoch => false,
    };
    let zombies_possible = (config.rebalances > 0 && config.owners > 1) || (config.pauses > 0 && claims);
    let redelivery_possible = config.crashes > 0 || zombies_possible || config.pauses > 0;
    if config.groups > 1 {
        properties.push(Property::sometimes("groups-diverge", |_, s: &State| groups_diverge(s)));
    }
    if config.crashes > 0 {
        properties
            .push(Property::sometimes("crash-after-write", |_, s: &State| s.has_witnessed(Witness::CrashAfterWrite)));
        if !rules.is_single_write() {
            properties
                .push(Property::sometimes("crash-mid-record", |_, s: &State| s.has_witnessed(Witness::CrashMidRecord)));
        }
    }
    if zombies_possible {
        properties.push(Property::sometimes("zombie-write", |_, s: &State| s.has_witnessed(Witness::ZombieWrite)));
    }
    // The forming coordinator's window struck: the old owner committed while its group formed.
    if rules.coordinator == Coordinator::Forming && config.rebalances > 0 && config.owners > 1 {
        let forming = |_: &ConsumerModel, s: &State| s.has_witnessed(Witness::CommitWhileForming);
        properties.push(Property::sometimes("commit-while-forming", forming));
    }
    if redelivery_possible {
        properties.push(Property::sometimes("replay", |_, s: &State| s.has_witnessed(Witness::Replay)));
    }
    if rules.skips_duplicates() && redelivery_possible {
        properties
            .push(Property::sometimes("duplicate-skipped", |_, s: &State| s.has_witnessed(Witness::DuplicateSkipped)));
    }
    if rules.fences_stale_owners() && zombies_possible {
        properties.push(Property::sometimes("zombie-fenced", |_, s: &State| s.has_witnessed(Witness::ZombieFenced)));
    }
    if config.pauses > 0 {
        properties.push(Property::sometimes("paused-write", |_, s: &State| s.has_witnessed(Witness::PausedWrite)));
        if rules.fences_stale_owners() && claims {
            let fenced = |_: &ConsumerModel, s: &State| s.has_witnessed(Witness::PausedFenced);
            properties.push(Property::sometimes("paused-fenced", fenced));
        }
    }
    if rules.is_parallel() && config.inflight > 1 && config.records > 1 {
        properties.push(Property::sometimes("out-of-order", |_, s: &State| s.has_witnessed(Witness::OutOfOrder)));
    }
    properties
}

/// Whether a property is a safety (`always`) property.
pub fn is_safety(property: &Property<ConsumerModel>) -> bool {
    property.expectation == Expectation::Always
}

/// Whether the property's discovery condition holds in `state`: a violation for `always`, the
/// situation for `sometimes`.
pub fn is_discovery(model: &ConsumerModel, property: &Property<ConsumerModel>, state: &State) -> bool {
    let satisfied = (property.condition)(model, state);
    match property.expectation {
        Expectation::Always | Expectation::Eventually => !satisfied,
        Expectation::Sometimes => satisfied,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Strategy;

    #[test]
    fn every_property_of_every_row_has_a_role() {
        for strategy in Strategy::ALL {
            for property in properties_for(&Config::new(strategy)) {
                let role = role_of(property.name);
                assert_eq!(role == Role::Safety, is_safety(&property), "{strategy} / {}", property.name);
            }
        }
    }
}
