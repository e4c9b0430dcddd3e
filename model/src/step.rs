//! Which actions are enabled in a state, and what each one does: the transition relation.

use crate::action::{Action, OwnerWrite};
use crate::config::{Config, PARTITIONS_MAX};
use crate::state::{Lease, Offset, Stage, State, Store, Witness};
use crate::strategy::{
    Checkpointing, CommitFence, Coordinator, DedupKey, EffectKind, Guard, LogCheck, OutOfRangePolicy, PoisonPolicy,
    ProducerRetry, Sequence, StartPolicy, Write,
};
use crate::{replication, txn};

/// Appends every action enabled in `state`, in a fixed order (log, owners, coordinator).
pub fn enabled_actions(config: &Config, state: &State, actions: &mut Vec<Action>) {
    for (partition, producer) in state.producer.iter().enumerate() {
        let (partition, delta) = (partition as u8, config.delta);
        // A log that knows its acknowledged end refuses appends once it lost some of them; a
        // replicated partition takes none without a leader or while a send is in flight.
        let refused = state.damaged[usize::from(partition)] || !replication::accepts_sends(state, partition.into());
        if refused {
            continue;
        }
        if producer.unacked.is_some() {
            actions.push(Action::RetryAppend { partition, delta });
        } else if producer.sent < config.records {
            actions.push(Action::Append { partition, delta });
            if state.ack_losses_used < config.ack_losses {
                actions.push(Action::AppendAckLost { partition, delta });
            }
        }
    }
    for (g, group) in state.groups.iter().enumerate() {
        let g = g as u8;
        let free_paused_slot = group.paused.iter().any(|slot| slot.incarnation_of.is_none());
        for (o, owner) in group.slots() {
            let current = usize::from(o) < group.owners.len();
            if !owner.alive {
                // A dead current owner can be started again; a dead paused slot is free.
                if current {
                    actions.push(Action::Restart { group: g, owner: o });
                }
                continue;
            }
            for (p, lease) in owner.leases.iter().enumerate() {
                if let Some(lease) = lease {
                    let log = LogView {
                        start: state.log_start[p],
                        end: state.log[p].len() as Offset,
                        damaged: state.damaged[p],
                        stored_next: group.store.partitions[p].next_offset,
                        available: state.replicas.get(p).is_none_or(|r| r.leader.is_some()),
                    };
                    lease_actions(config, lease, log, (g, o, p as u8), actions);
                }
            }
            // Only an owner holding a partition has anything to lose; crashing or pausing an
            // idle standby would only add states.
            let holds = owner.leases.iter().any(Option::is_some);
            if config.allows_crash(state.crashes_used) && holds {
                actions.push(Action::Crash { group: g, owner: o });
            }
            if current && holds && free_paused_slot && config.allows_pause(state.pauses_used) {
                actions.push(Action::Pause { group: g, owner: o });
            }
        }
    }
    if state.retentions_used < config.retentions {
        // A damaged log refuses every change (appends, retention) until it is repaired.
        for (partition, log) in state.log.iter().enumerate().filter(|&(p, _)| !state.damaged[p]) {
            for before in state.log_start[partition] + 1..=log.len() as Offset {
                actions.push(Action::Retain { partition: partition as u8, before });
            }
        }
    }
    if state.log_losses_used < config.log_losses {
        for (partition, log) in state.log.iter().enumerate() {
            for keep in state.log_start[partition]..log.len() as Offset {
                actions.push(Action::LoseTail { partition: partition as u8, keep });
            }
        }
    }
    replication::enabled_actions(config, state, actions);
    txn::enabled_actions(config, state, actions);
    for (g, group) in state.groups.iter().enumerate() {
        if !group.store.outbox.is_empty() {
            actions.push(Action::Relay { group: g as u8 });
        }
    }
    // A forming group's rebalance ends with its sync; it begins no other meanwhile.
    for (g, group) in state.groups.iter().enumerate() {
        for (p, _) in group.forming.iter().enumerate().filter(|(_, to)| to.is_some()) {
            actions.push(Action::Sync { group: g as u8, partition: p as u8 });
        }
    }
    if config.allows_rebalance(state.rebalances_used) {
        for (g, group) in state.groups.iter().enumerate().filter(|(_, group)| group.forming.iter().all(Option::is_none))
        {
            for (p, row) in group.store.partitions.iter().enumerate() {
                for to_owner in (0..config.owners).filter(|&o| o != row.owner) {
                    actions.push(Action::Rebalance { group: g as u8, partition: p as u8, to_owner });
                }
            }
        }
    }
}

/// What an owner sees of one partition's log and of its group's checkpoint there.
#[derive(Clone, Copy, Debug)]
struct LogView {
    start: Offset,
    end: Offset,
    /// The log lost acknowledged records (only a log that knows its acknowledged end says so).
    damaged: bool,
    /// The group's stored next offset.
    stored_next: Offset,
    /// A replicated partition has a leader (else nothing can be read).
    available: bool,
}

/// The owner steps a lease allows under the configured strategy (its `Rules`).
fn lease_actions(
    config: &Config,
    lease: &Lease,
    log: LogView,
    (group, owner, partition): (u8, u8, u8),
    actions: &mut Vec<Action>,
) {
    let rules = config.strategy.rules();
    let (log_start, log_end) = (log.start, log.end);
    let fetch = Action::Fetch { group, owner, partition, offset: lease.position };
    let commit = |next_offset| Action::CommitOffset { group, owner, partition, next_offset };
    if let Some(next_offset) = parallel_commit_target(rules.checkpoint, lease) {
        // A parallel owner commits as soon as a completion moves its commit target, before it
        // fetches or completes anything else; other owners, groups and faults still interleave.
        actions.push(commit(next_offset));
        return;
    }
    if lease.records.is_empty() && refuses(rules.log_check, lease, log) {
        actions.push(Action::RefuseAhead { group, owner, partition });
        return;
    }
    if lease.records.is_empty() && lease.position < log_start {
        // The next record was retained away: the out-of-range policy decides.
        actions.push(match rules.out_of_range {
            OutOfRangePolicy::Fail => Action::FailOutOfRange { group, owner, partition },
            OutOfRangePolicy::Earliest => Action::ResetOffset { group, owner, partition },
            OutOfRangePolicy::Silent => commit(log_start),
        });
        return;
    }
    // Records fetched before a retention are still completed; nothing is fetched below the start,
    // nor from a replicated partition without a leader.
    let can_fetch = log.available && log_start <= lease.position && lease.position < log_end;
    match rules.checkpoint {
        Checkpointing::ParallelMax | Checkpointing::ParallelWatermark => {
            if can_fetch && lease.records.len() < usize::from(config.inflight) {
                actions.push(fetch);
            }
            for &offset in lease.records.keys() {
                actions.push(Action::ApplyEffect { group, owner, partition, offset });
            }
            return;
        }
        Checkpointing::PerRecord | Checkpointing::Periodic => {}
    }
    let Some((&offset, &stage)) = lease.records.iter().next() else {
        // No record in flight: fetch the next one, or checkpoint first (periodic strategies).
        let finished = lease.position - lease.checkpoint;
        let room = match rules.checkpoint {
            Checkpointing::Periodic => {
                if finished > 0 && (finished >= config.commit_every || lease.position == log_end) {
                    actions.push(commit(lease.position));
                }
                finished < config.commit_every
            }
            Checkpointing::PerRecord | Checkpointing::ParallelMax | Checkpointing::ParallelWatermark => true,
        };
        if room && can_fetch {
            actions.push(fetch);
        }
        return;
    };
    let write = rules.next_write(stage).unwrap_or_else(|| {
        panic!("{}: a record rests in stage {stage:?}, which the strategy never leaves one in", config.strategy)
    });
    // In a record's sequence a commit stores the offset after it.
    let value = if write == Write::CommitOffset { offset + 1 } else { offset };
    actions.push(Action::of_write(OwnerWrite { write, lease: (group, owner, partition), value }));
}

/// Whether the group's checkpoint or the owner's own position is past the end of the log: the
/// log lost records the group had already read.
fn is_ahead(lease: &Lease, log: LogView) -> bool {
    log.stored_next > log.end || lease.position > log.end
}

/// Whether an owner with nothing in flight refuses to go on with the partition.
fn refuses(check: LogCheck, lease: &Lease, log: LogView) -> bool {
    match check {
        LogCheck::RefuseAhead => is_ahead(lease, log),
        LogCheck::RefuseAll => log.damaged,
        LogCheck::Unchecked => false,
    }
}

/// The next offset a parallel owner would commit now, if it is above its last checkpoint.
/// `parallel-max` takes the highest completed offset + 1 (the trap: lower records may still be
/// pending); `parallel-watermark` takes the end of the contiguous completed prefix. `None` for
/// the serial strategies.
pub fn parallel_commit_target(checkpoint: Checkpointing, lease: &Lease) -> Option<Offset> {
    let target = match checkpoint {
        Checkpointing::ParallelMax => lease.done.iter().next_back().map_or(lease.checkpoint, |&max| max + 1),
        Checkpointing::ParallelWatermark => {
            let mut next = lease.checkpoint;
            while lease.done.contains(&next) {
                next += 1;
            }
            next
        }
        Checkpointing::PerRecord | Checkpointing::Periodic => return None,
    };
    (target > lease.checkpoint).then_some(target)
}

/// Applies `action` to a copy of `state`.
pub fn next_state(config: &Config, state: &State, action: Action) -> State {
    let mut next = state.clone();
    apply(config, state, action, &mut next);
    next
}

/// Writes the successor of `state` by `action` into `next`, reusing its buffers: once they
/// have grown, a successor allocates nothing (`collections.rs`). The checker's hot path.
pub fn next_state_into(config: &Config, state: &State, action: Action, next: &mut State) {
    next.clone_from(state);
    apply(config, state, action, next);
}

/// Applies `action` to `next`, which must equal `state` (a copy of it). Dispatches to one
/// helper per kind of step. The checker calls it directly on a state it restores after each
/// successor (only the parts a step changed), which saves cloning the whole state.
pub fn apply(config: &Config, state: &State, action: Action, next: &mut State) {
    apply_concrete(config, state, action, next);
    // A lifted budget: the successor is its abstract state (spec.md §7.1), last, so that every
    // rule ran on what the concrete system holds.
    if config.lifted.any() {
        crate::abstraction::abstract_in_place(config, next);
    }
}

/// `apply` without the abstraction: the concrete system C of spec.md §7.1, whose counters,
/// epochs, counts and totals grow without bound when a budget is lifted. Only
/// `model/tests/abstraction.rs` calls it directly, to check that α commutes with it.
pub fn apply_concrete(config: &Config, state: &State, action: Action, next: &mut State) {
    // A state's witness bits are the situations the step into it reached (`State::witnessed`).
    next.witnessed = 0;
    match action {
        Action::Append { partition, delta } => produce(config, next, Send::Acked, partition, delta),
        Action::AppendAckLost { partition, delta } => produce(config, next, Send::AckLost, partition, delta),
        Action::RetryAppend { partition, delta } => produce(config, next, Send::Retry, partition, delta),
        Action::Fetch { group, owner, partition, offset } => fetch(next, (group, owner, partition), offset),
        Action::Retain { partition, before } => {
            next.log_start[usize::from(partition)] = before;
            next.retentions_used += 1;
        }
        Action::FailOutOfRange { group, owner, partition } => {
            next.witness(Witness::OutOfRange);
            next.groups[usize::from(group)].slot_mut(owner).leases[usize::from(partition)] = None;
        }
        Action::Crash { group, owner } => crash(config, next, group, owner),
        Action::Restart { group, owner } => restart(config, next, group, owner),
        Action::Rebalance { group, partition, to_owner } => rebalance(config, next, group, partition, to_owner),
        Action::Sync { group, partition } => sync(config, next, group, partition),
        Action::Pause { group, owner } => pause(config, next, group, owner),
        Action::LoseTail { partition, keep } => lose_tail(config, next, partition, keep),
        Action::RefuseAhead { group, owner, partition } => refuse_ahead(next, (group, owner, partition)),
        Action::Replicate { partition } => replication::replicate(config, next, partition),
        Action::Acknowledge { partition } => replication::acknowledge(config, next, partition),
        Action::ShrinkIsr { partition } => replication::shrink_isr(config, next, partition),
        Action::FailLeader { partition } => replication::fail_leader(config, next, partition),
        Action::ReadOutput { partition } => txn::read_output(config, next, partition),
        Action::Relay { group } => relay(next, group),
        Action::ApplyEffect { .. }
        | Action::InsertProcessed { .. }
        | Action::CommitOffset { .. }
        | Action::ApplyStamped { .. }
        | Action::ApplyDeduped { .. }
        | Action::ApplyAtomic { .. }
        | Action::DeadLetter { .. }
        | Action::ResetOffset { .. }
        | Action::ProduceOutput { .. }
        | Action::CommitTxn { .. }
        | Action::SendEmail { .. }
        | Action::WriteIndex { .. } => {
            let write = action.owner_write().expect("every owner write action has its operands");
            owner_write(config, &state.groups[usize::from(write.lease.0)].store, next, write);
        }
    }
    if let Some(acting) = action.group() {
        record_foreign_writes(state, next, acting);
        free_idle_paused_slots(&mut next.groups[usize::from(acting)]);
    }
    let ahead = next.groups.iter().any(|group| {
        group.store.partitions.iter().zip(&next.log).any(|(row, log)| usize::from(row.next_offset) > log.len())
    });
    if ahead {
        next.witness(Witness::StoreAhead);
    }
}

/// A paused incarnation that holds no lease any more (fenced, refused, out of range) can do
/// nothing: its slot is freed, so that equal futures are equal states.
fn free_idle_paused_slots(group: &mut crate::state::Group) {
    for slot in &mut group.paused {
        if slot.alive && slot.leases.iter().all(Option::is_none) {
            slot.free();
        }
    }
}

/// The owner is started again while its current incarnation runs on: that one moves, leases
/// and all, to a free paused slot (it still runs as the same owner); the new incarnation
/// starts as a restart does.
fn pause(config: &Config, state: &mut State, group: u8, owner: u8) {
    state.pauses_used += 1;
    let group_state = &mut state.groups[usize::from(group)];
    let slot = group_state.paused.iter().position(|slot| slot.incarnation_of.is_none());
    let slot = slot.expect("a pause needs a free paused slot");
    let earlier = &mut group_state.paused[slot];
    earlier.clone_from(&group_state.owners[usize::from(owner)]);
    earlier.incarnation_of = Some(owner);
    group_state.owners[usize::from(owner)].free();
    restart(config, state, group, owner);
}

/// The log of `partition` loses its records from `keep` on. A log that knows its acknowledged
/// end marks itself damaged (and refuses appends); one that does not grows again at `keep`.
fn lose_tail(config: &Config, state: &mut State, partition: u8, keep: Offset) {
    state.log_losses_used += 1;
    let p = usize::from(partition);
    state.log[p].truncate(usize::from(keep));
    state.sends[p].truncate(usize::from(keep));
    match config.strategy.rules().log_check {
        LogCheck::RefuseAhead | LogCheck::RefuseAll => state.damaged[p] = true,
        LogCheck::Unchecked => {}
    }
}

/// The owner stops working on the partition without writing anything. The refusal is
/// justified when its group's checkpoint or its own position is past the end of the log.
fn refuse_ahead(state: &mut State, (group, owner, partition): (u8, u8, u8)) {
    let p = usize::from(partition);
    let end = state.log[p].len() as Offset;
    let stored_next = state.groups[usize::from(group)].store.partitions[p].next_offset;
    let lease = state.lease(group, owner, partition).expect("a refusal needs the lease");
    let log = LogView { start: state.log_start[p], end, damaged: state.damaged[p], stored_next, available: true };
    if !is_ahead(lease, log) {
        state.groups[usize::from(group)].ghost.unjustified_refusal = true;
    }
    state.witness(Witness::Refused);
    state.groups[usize::from(group)].slot_mut(owner).leases[p] = None;
}

/// The producer's three ways of sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Send {
    /// A new send, durable and acknowledged.
    Acked,
    /// A new send, durable, whose acknowledgement is lost.
    AckLost,
    /// The retry of the send whose acknowledgement was lost.
    Retry,
}

/// The producer's steps. Every send carries its logical id in the ghost `sends`.
fn produce(config: &Config, state: &mut State, kind: Send, partition: u8, delta: i64) {
    let partition = usize::from(partition);
    if replication::rules(config).is_some() {
        return produce_replicated(config, state, kind, partition);
    }
    let producer = &mut state.producer[partition];
    let send = match kind {
        Send::Retry => {
            let send = producer.unacked.take().expect("a retry has an unacknowledged send");
            state.witness(Witness::AppendRetried);
            // The log recognises the exact retry and returns the original offsets, unless it
            // lost the original (a log that grew again after losing its tail): then the retry
            // is a new append.
            let recognised = state.sends[partition].contains(&send);
            match config.strategy.rules().producer {
                ProducerRetry::SameSequence if recognised => return,
                ProducerRetry::SameSequence | ProducerRetry::NewSequence => send,
            }
        }
        Send::Acked | Send::AckLost => {
            let send = producer.sent;
            producer.sent += 1;
            if kind == Send::AckLost {
                producer.unacked = Some(send);
                state.ack_losses_used += 1;
            }
            send
        }
    };
    // A log that lost its tail and grows again reuses offsets: the applications of the lost
    // record at this offset move to `lost_sum`, so that the new record counts afresh.
    let offset = state.log[partition].len();
    for group in &mut state.groups {
        let applied = &mut group.ghost.applied[partition][offset];
        group.ghost.lost_sum = lost_sum(group.ghost.lost_sum, delta, *applied);
        *applied = 0;
    }
    state.log[partition].push(delta);
    state.sends[partition].push(send);
}

/// The producer's steps on a replicated partition (spec.md §3.2): the send goes to the leader;
/// `acks=all` may refuse it (`NotEnoughReplicas`: nothing consumed, retried later).
fn produce_replicated(config: &Config, state: &mut State, kind: Send, partition: usize) {
    match kind {
        Send::Retry => {
            let send = state.producer[partition].unacked.take().expect("a retry has an unacknowledged send");
            state.witness(Witness::AppendRetried);
            let recognised = replication::leader_holds(state, partition, send);
            if !replication::append(config, state, partition, send, recognised) {
                state.producer[partition].unacked = Some(send);
            }
        }
        Send::Acked | Send::AckLost => {
            let send = state.producer[partition].sent;
            if !replication::append(config, state, partition, send, false) {
                return;
            }
            state.producer[partition].sent += 1;
            if kind == Send::AckLost {
                // The answer never reaches the producer: it retries the send.
                let replicas = &mut state.replicas[partition];
                replicas.acked &= !(1 << send);
                replicas.in_flight = None;
                state.producer[partition].unacked = Some(send);
                state.ack_losses_used += 1;
            }
        }
    }
}

/// `lost_sum + delta * applied`, which `DELTA_MAX` keeps within `i64`; the harness computes its
/// observed ghost with the same function.
pub fn lost_sum(lost_sum: i64, delta: i64, applied: u8) -> i64 {
    delta
        .checked_mul(i64::from(applied))
        .and_then(|lost| lost_sum.checked_add(lost))
        .unwrap_or_else(|| panic!("the sum of lost applications overflowed i64: |delta| <= DELTA_MAX prevents it"))
}

fn fetch(state: &mut State, (group, owner, partition): (u8, u8, u8), offset: Offset) {
    if state.groups[usize::from(group)].ghost.applied[usize::from(partition)][usize::from(offset)] > 0 {
        state.witness(Witness::Replay);
    }
    let lease = lease_mut(state, group, owner, partition);
    assert_eq!(lease.position, offset, "fetch must read the record at the owner's position");
    lease.records.insert(offset, Stage::Fetched);
    lease.position = offset + 1;
}

fn crash(config: &Config, state: &mut State, group: u8, owner: u8) {
    let (mid_record, after_write) = crash_witnesses(config, state, group, owner);
    if mid_record {
        state.witness(Witness::CrashMidRecord);
    }
    if after_write {
        state.witness(Witness::CrashAfterWrite);
    }
    // A crashed owner is down with no lease; a crashed paused incarnation is gone, and its
    // slot is free again: both are a free slot.
    state.groups[usize::from(group)].slot_mut(owner).free();
    state.crashes_used += 1;
}

/// Where a crash of `owner` in `state` falls: (between two durable writes of a record, on a
/// partition with durable progress behind it). The conformance harness classifies the real
/// crashes it makes with the same definition, on the state it observes.
pub fn crash_witnesses(config: &Config, state: &State, group: u8, owner: u8) -> (bool, bool) {
    let group_state = &state.groups[usize::from(group)];
    let leases = &group_state.slot(owner).leases;
    let mid_record = leases.iter().flatten().any(|lease| is_mid_record(config, lease));
    // After a write: the crash falls on a partition with durable progress behind it, so the
    // restart has a checkpoint to resume from rather than the beginning of the log.
    let after_write =
        leases.iter().zip(&group_state.store.partitions).any(|(lease, row)| lease.is_some() && row.next_offset > 0);
    (mid_record, after_write)
}

/// Whether a crash now falls between two durable writes of a record: a record past its first
/// write, or records applied but not yet covered by a checkpoint.
fn is_mid_record(config: &Config, lease: &Lease) -> bool {
    let past_first_write = lease.records.values().any(|&stage| stage != Stage::Fetched);
    let applied_uncommitted = match config.strategy.rules().checkpoint {
        Checkpointing::ParallelMax | Checkpointing::ParallelWatermark => !lease.done.is_empty(),
        Checkpointing::Periodic => lease.position - lease.checkpoint > lease.records.len() as Offset,
        Checkpointing::PerRecord => false,
    };
    past_first_write || applied_uncommitted
}

fn restart(config: &Config, state: &mut State, group: u8, owner: u8) {
    let group_state = &mut state.groups[usize::from(group)];
    let owner_state = &mut group_state.owners[usize::from(owner)];
    owner_state.alive = true;
    // At most one take per partition (`PARTITIONS_MAX`), kept inline: no allocation.
    let mut taken: smallvec::SmallVec<[(u8, u8); PARTITIONS_MAX as usize]> = smallvec::SmallVec::new();
    for (partition, row) in group_state.store.partitions.iter_mut().enumerate() {
        // The coordinator hands the started owner its assignment; it resumes from the
        // committed checkpoint, at a new epoch it claims (so that an earlier incarnation still
        // running is a zombie), or at the stored one (the trap).
        if row.owner == owner {
            match config.strategy.rules().start {
                StartPolicy::ClaimEpoch => row.epoch += 1,
                StartPolicy::StoredEpoch => {}
            }
            owner_state.leases[partition] = Some(Lease::fresh(row.epoch, row.next_offset));
            taken.push((partition as u8, row.epoch));
        }
    }
    // Taking a partition initialises its transactional id (the txn rows).
    for (partition, epoch) in taken {
        txn::take_partition(config, state, partition, epoch);
    }
}

fn rebalance(config: &Config, state: &mut State, group: u8, partition: u8, to_owner: u8) {
    state.rebalances_used += 1;
    match config.strategy.rules().coordinator {
        Coordinator::Atomic => move_partition(config, state, group, partition, to_owner),
        // The group begins forming: nothing moves until its sync.
        Coordinator::Forming => state.groups[usize::from(group)].forming[usize::from(partition)] = Some(to_owner),
    }
}

/// A forming group's sync: the partition moves to the owner its rebalance named.
fn sync(config: &Config, state: &mut State, group: u8, partition: u8) {
    let forming = &mut state.groups[usize::from(group)].forming[usize::from(partition)];
    let to_owner = forming.take().expect("a sync is enabled only while its group forms");
    move_partition(config, state, group, partition, to_owner);
}

/// The coordinator's move of a partition: a new epoch, the new owner recorded, and its lease
/// at the committed offset if it runs.
fn move_partition(config: &Config, state: &mut State, group: u8, partition: u8, to_owner: u8) {
    let group = &mut state.groups[usize::from(group)];
    let row = &mut group.store.partitions[usize::from(partition)];
    row.epoch += 1;
    row.owner = to_owner;
    let (epoch, lease) = (row.epoch, Lease::fresh(row.epoch, row.next_offset));
    // The old owner is not told: its lease stays as it is, a zombie. A crashed new owner
    // picks the partition up when it restarts.
    let new_owner = &mut group.owners[usize::from(to_owner)];
    if new_owner.alive {
        new_owner.leases[usize::from(partition)] = Some(lease);
        txn::take_partition(config, state, partition, epoch);
    }
}

/// Every durable write an owner attempts: effect, dedup row, checkpoint, or a transaction.
/// `store_before` is the group's store before the step (the parent state's).
fn owner_write(config: &Config, store_before: &Store, state: &mut State, write: OwnerWrite) {
    let (group, owner, partition) = write.lease;
    let lease = (group, owner, partition);
    let stored_epoch = state.groups[usize::from(group)].store.partitions[usize::from(partition)].epoch;
    let stale = lease_mut(state, group, owner, partition).epoch != stored_epoch;
    if stale {
        state.witness(Witness::ZombieWrite);
    }
    if state.groups[usize::from(group)].slot(owner).incarnation_of.is_some() {
        state.witness(Witness::PausedWrite);
    }
    let value = write.value;
    match write.write {
        Write::ApplyEffect => apply_effect(config, state, lease, value),
        Write::InsertProcessed => insert_processed(state, lease, value),
        Write::CommitOffset => commit_offset(config, state, lease, value, stale),
        Write::ApplyStamped => apply_stamped(config, state, lease, value),
        Write::ApplyDeduped => apply_deduped(config, state, lease, value),
        Write::ApplyAtomic => apply_atomic(config, state, lease, value, stale),
        Write::DeadLetter => dead_letter(config, state, lease, value, stale),
        Write::ResetOffset => reset_offset(config, state, lease, stale),
        Write::ProduceOutput => produce_output(config, state, lease, value, stale),
        Write::CommitTxn => commit_txn(config, state, lease, value, stale),
        Write::SendEmail => send_email(config, state, lease, value),
        Write::WriteIndex => write_index(state, lease, value),
    }
    // A write lands when it changes the store; a skipped, fenced or same-value write does not.
    if stale && state.groups[usize::from(group)].store != *store_before {
        state.groups[usize::from(group)].ghost.stale_write_landed = true;
    }
}

/// Read-process-write's first write: the output record joins the owner's open transaction,
/// unless the producer epoch is stale and the row fences.
fn produce_output(config: &Config, state: &mut State, lease: (u8, u8, u8), offset: Offset, stale: bool) {
    let (group, owner, partition) = lease;
    if is_fenced_out(config, stale) {
        fence(state, lease);
        return;
    }
    let epoch = lease_mut(state, group, owner, partition).epoch;
    txn::produce_output(state, partition, offset, epoch);
    lease_mut(state, group, owner, partition).records.insert(offset, Stage::Produced);
}

/// Read-process-write's commit: one transaction with the commit marker, the input's next
/// offset and the effect (the committed output: spec.md §3.3).
fn commit_txn(config: &Config, state: &mut State, lease: (u8, u8, u8), offset: Offset, stale: bool) {
    let (group, owner, partition) = lease;
    if is_fenced_out(config, stale) {
        fence(state, lease);
        return;
    }
    let epoch = lease_mut(state, group, owner, partition).epoch;
    txn::commit(state, partition, offset, epoch);
    add_effect(config, state, group, partition, offset);
    store_checkpoint(state, group, partition, offset + 1);
    let lease = lease_mut(state, group, owner, partition);
    lease.records.remove(&offset);
    lease.checkpoint = offset + 1;
}

/// Whether the strategy's guard aborts this transaction: a fenced write by a stale owner.
fn is_fenced_out(config: &Config, stale: bool) -> bool {
    match config.strategy.rules().guard {
        Guard::Fenced => stale,
        Guard::Blind | Guard::Cas => false,
    }
}

/// Adds the record's delta to the group's total and counts the application in the ghost.
fn add_effect(config: &Config, state: &mut State, group: u8, partition: u8, offset: Offset) {
    // The owner applies the record it holds in memory: the log may have lost it since the fetch.
    let delta = config.delta;
    if let Some(&logged) = state.log[usize::from(partition)].get(usize::from(offset)) {
        assert_eq!(logged, delta, "every record carries the configured delta");
    }
    let group = &mut state.groups[usize::from(group)];
    match config.strategy.rules().effect {
        // `Config::validate` bounds the delta and the fault budgets so that neither can overflow
        // (`DELTA_MAX`, `APPLICATIONS_MAX`); a wrapped total would be a silent lie.
        EffectKind::Add => {
            let total = group.store.total.checked_add(delta);
            group.store.total =
                total.unwrap_or_else(|| panic!("a total overflowed i64: |delta| <= DELTA_MAX prevents it"));
        }
        // The record's own value replaces the stored one (spec.md §3.4): v(o) = o + 1.
        EffectKind::Set => group.store.value = Some(offset + 1),
    }
    let applied = &mut group.ghost.applied[usize::from(partition)][usize::from(offset)];
    *applied = applied.checked_add(1).unwrap_or_else(|| {
        panic!("a record was applied more than 255 times: the fault budgets' limits prevent it (APPLICATIONS_MAX)")
    });
}

fn apply_effect(config: &Config, state: &mut State, (group, owner, partition): (u8, u8, u8), offset: Offset) {
    let rules = config.strategy.rules();
    let already_processed = rules.sequence == Sequence::EffectRecordCommit
        && state.groups[usize::from(group)].store.processed.contains(&(partition, offset));
    if already_processed {
        state.witness(Witness::DuplicateSkipped);
    } else {
        add_effect(config, state, group, partition, offset);
    }
    let lease = lease_mut(state, group, owner, partition);
    let parallel = match rules.sequence {
        Sequence::CommitThenEffect => {
            lease.records.remove(&offset);
            return;
        }
        Sequence::EffectThenCommit => {
            lease.records.insert(offset, Stage::EffectApplied);
            return;
        }
        Sequence::EffectRecordCommit => {
            // A processed id means the effect and its id both landed before: only the commit is left.
            lease.records.insert(offset, if already_processed { Stage::Recorded } else { Stage::EffectApplied });
            return;
        }
        Sequence::Effect => match rules.checkpoint {
            Checkpointing::Periodic => {
                lease.records.remove(&offset);
                return;
            }
            Checkpointing::ParallelMax => true,
            Checkpointing::ParallelWatermark => false,
            Checkpointing::PerRecord => panic!("{}: a lone effect needs a checkpoint rule", config.strategy),
        },
        Sequence::Stamped
        | Sequence::DedupedThenCommit
        | Sequence::Atomic
        | Sequence::Transactional
        | Sequence::AtomicThenEmail
        | Sequence::EmailThenAtomic { .. }
        | Sequence::AtomicThenIndex
        | Sequence::AtomicWithOutbox => {
            panic!("{}: its effect is never a separate apply-effect write", config.strategy)
        }
    };
    lease.records.remove(&offset);
    let out_of_order = lease.records.keys().any(|&pending| pending < offset);
    // Keep only what the commit target depends on, so equal futures are equal states:
    // completions below the checkpoint are already covered, and parallel-max needs nothing but
    // the highest completion.
    if offset >= lease.checkpoint {
        lease.done.insert(offset);
    }
    if parallel {
        let highest = lease.done.last().copied();
        lease.done.retain(|&done| Some(done) == highest);
    }
    if out_of_order {
        state.witness(Witness::OutOfOrder);
    }
}

fn insert_processed(state: &mut State, (group, owner, partition): (u8, u8, u8), offset: Offset) {
    state.groups[usize::from(group)].store.processed.insert((partition, offset));
    lease_mut(state, group, owner, partition).records.insert(offset, Stage::Recorded);
}

/// A separate progress write. Written blindly, or (the broker rows) refused when the owner's
/// epoch is stale: the owner, told, drops the partition, as a fenced transaction's owner does.
fn commit_offset(
    config: &Config,
    state: &mut State,
    (group, owner, partition): (u8, u8, u8),
    next_offset: Offset,
    stale: bool,
) {
    let rules = config.strategy.rules();
    match rules.commit_fence {
        CommitFence::Generation if stale => {
            fence(state, (group, owner, partition));
            return;
        }
        CommitFence::Generation | CommitFence::Blind => {}
    }
    // The old generation is still current while its group forms: the commit lands, and the
    // new owner will start from it.
    if state.groups[usize::from(group)].forming[usize::from(partition)].is_some() {
        state.witness(Witness::CommitWhileForming);
    }
    store_checkpoint(state, group, partition, next_offset);
    if state.log_start[usize::from(partition)] == next_offset && rules.out_of_range == OutOfRangePolicy::Silent {
        state.witness(Witness::OutOfRange);
    }
    let lease = lease_mut(state, group, owner, partition);
    lease.checkpoint = next_offset;
    // A jump past retained records moves the position with the checkpoint.
    lease.position = lease.position.max(next_offset);
    match rules.checkpoint {
        Checkpointing::ParallelMax | Checkpointing::ParallelWatermark => {
            lease.done.retain(|&offset| offset >= next_offset);
        }
        Checkpointing::Periodic => {}
        Checkpointing::PerRecord => match rules.sequence {
            // Commit-first commits before the effect: the record stays in flight until applied.
            Sequence::CommitThenEffect => {
                lease.records.insert(next_offset - 1, Stage::Committed);
            }
            Sequence::EffectThenCommit
            | Sequence::Effect
            | Sequence::EffectRecordCommit
            | Sequence::Stamped
            | Sequence::DedupedThenCommit
            | Sequence::Atomic
            | Sequence::Transactional
            | Sequence::AtomicThenEmail
            | Sequence::EmailThenAtomic { .. }
            | Sequence::AtomicThenIndex
            | Sequence::AtomicWithOutbox => {
                lease.records.remove(&(next_offset - 1));
            }
        },
    }
}

/// Writes a group's committed next offset and tracks its high-water mark in the ghost.
fn store_checkpoint(state: &mut State, group: u8, partition: u8, next_offset: Offset) {
    let group = &mut state.groups[usize::from(group)];
    group.store.partitions[usize::from(partition)].next_offset = next_offset;
    let high_water = &mut group.ghost.high_water[usize::from(partition)];
    *high_water = (*high_water).max(next_offset);
}

fn apply_stamped(config: &Config, state: &mut State, (group, owner, partition): (u8, u8, u8), offset: Offset) {
    let stamp = state.groups[usize::from(group)].store.partitions[usize::from(partition)].stamp;
    let newer = stamp.is_none_or(|stamp| offset > stamp);
    if newer {
        add_effect(config, state, group, partition, offset);
        state.groups[usize::from(group)].store.partitions[usize::from(partition)].stamp = Some(offset);
    } else {
        state.witness(Witness::DuplicateSkipped);
    }
    lease_mut(state, group, owner, partition).records.remove(&offset);
}

fn apply_deduped(config: &Config, state: &mut State, (group, owner, partition): (u8, u8, u8), offset: Offset) {
    // The processed id: (partition, offset), or (the trap) the offset alone, as partition 0's.
    let key = match config.strategy.rules().dedup_key {
        DedupKey::PartitionOffset => (partition, offset),
        DedupKey::OffsetOnly => (0, offset),
    };
    let fresh = state.groups[usize::from(group)].store.processed.insert(key);
    if fresh {
        add_effect(config, state, group, partition, offset);
    } else {
        state.witness(Witness::DuplicateSkipped);
    }
    lease_mut(state, group, owner, partition).records.insert(offset, Stage::EffectApplied);
}

/// The fenced transaction aborted: the owner, told its epoch is stale, drops the partition.
fn fence(state: &mut State, (group, owner, partition): (u8, u8, u8)) {
    state.witness(Witness::ZombieFenced);
    if state.groups[usize::from(group)].slot(owner).incarnation_of.is_some() {
        state.witness(Witness::PausedFenced);
    }
    state.groups[usize::from(group)].slot_mut(owner).leases[usize::from(partition)] = None;
}

/// A poison record's transaction: its effect fails. atomic-dlq counts the failed attempt in the
/// same transaction (and, once `max_attempts` are counted, makes no further attempt: the record
/// is exhausted and dead-lettered next); skip-poison gives up at once; retry-forever retries.
fn poison_attempt(config: &Config, state: &mut State, (group, owner, partition): (u8, u8, u8), offset: Offset) {
    let key = (partition, offset);
    let exhausted = match config.strategy.rules().poison {
        PoisonPolicy::DeadLetter => {
            let attempts = &mut state.groups[usize::from(group)].store.attempts;
            let counted = attempts.get(&key).copied().unwrap_or(0);
            if counted < config.max_attempts {
                attempts.insert(key, counted + 1);
                record_failure(config, state, group, partition);
            }
            counted + 1 >= config.max_attempts
        }
        PoisonPolicy::Skip => {
            record_failure(config, state, group, partition);
            true
        }
        PoisonPolicy::RetryForever => {
            record_failure(config, state, group, partition);
            false
        }
        PoisonPolicy::Unhandled => panic!("{} meets no poison record (Config::validate)", config.strategy),
    };
    let stage = if exhausted { Stage::Exhausted } else { Stage::Fetched };
    lease_mut(state, group, owner, partition).records.insert(offset, stage);
}

/// Counts a failed effect in the ghost, capped one past `max_attempts` so that endless retries
/// end in a finite state space (the cap is all `bounded-retries` needs to see).
fn record_failure(config: &Config, state: &mut State, group: u8, partition: u8) {
    state.witness(Witness::PoisonFailed);
    let failures = &mut state.groups[usize::from(group)].ghost.failures[usize::from(partition)];
    *failures = (*failures + 1).min(config.max_attempts + 1);
}

/// `--on-out-of-range earliest`: one fenced transaction recording the reset (from the stored
/// next offset to the log start) and moving the next offset there.
fn reset_offset(config: &Config, state: &mut State, (group, owner, partition): (u8, u8, u8), stale: bool) {
    if is_fenced_out(config, stale) {
        fence(state, (group, owner, partition));
        return;
    }
    let start = state.log_start[usize::from(partition)];
    let from = state.groups[usize::from(group)].store.partitions[usize::from(partition)].next_offset;
    state.groups[usize::from(group)].store.resets.insert((partition, from, start));
    store_checkpoint(state, group, partition, start);
    state.witness(Witness::OutOfRange);
    state.witness(Witness::ResetRecorded);
    let lease = lease_mut(state, group, owner, partition);
    lease.position = start;
    lease.checkpoint = start;
}

/// atomic-dlq: one fenced transaction inserting the exhausted record into the dead-letter table
/// (with its attempt count) and moving the checkpoint past it.
fn dead_letter(
    config: &Config,
    state: &mut State,
    (group, owner, partition): (u8, u8, u8),
    offset: Offset,
    stale: bool,
) {
    if is_fenced_out(config, stale) {
        fence(state, (group, owner, partition));
        return;
    }
    let store = &mut state.groups[usize::from(group)].store;
    let attempts = store.attempts.get(&(partition, offset)).copied().unwrap_or(0);
    store.dead_letters.insert((partition, offset, attempts));
    store_checkpoint(state, group, partition, offset + 1);
    state.witness(Witness::DeadLettered);
    let lease = lease_mut(state, group, owner, partition);
    lease.records.remove(&offset);
    lease.checkpoint = offset + 1;
}

/// One transaction with the effect and the next offset. `atomic` writes the offset blindly;
/// `atomic-fenced` first checks the epoch and aborts when stale, and the owner, told, drops the
/// partition; `atomic-cas` reads the stored next offset and skips a record below it.
fn apply_atomic(
    config: &Config,
    state: &mut State,
    (group, owner, partition): (u8, u8, u8),
    offset: Offset,
    stale: bool,
) {
    let rules = config.strategy.rules();
    if is_fenced_out(config, stale) {
        fence(state, (group, owner, partition));
        return;
    }
    if config.poison == Some(offset) {
        poison_attempt(config, state, (group, owner, partition), offset);
        return;
    }
    let stored = state.groups[usize::from(group)].store.partitions[usize::from(partition)].next_offset;
    match rules.guard {
        Guard::Cas => {
            assert!(offset <= stored, "an atomic-cas owner never runs ahead of the stored offset it serialises on");
            if offset < stored {
                state.witness(Witness::DuplicateSkipped);
                lease_mut(state, group, owner, partition).records.remove(&offset);
                return;
            }
        }
        Guard::Blind | Guard::Fenced => {}
    }
    add_effect(config, state, group, partition, offset);
    store_checkpoint(state, group, partition, offset + 1);
    let store = &mut state.groups[usize::from(group)].store;
    let after = match rules.sequence {
        // The fact goes with the effect; the index is written apart, next.
        Sequence::AtomicThenIndex => {
            store.facts.insert((partition, offset));
            Some(Stage::Stored)
        }
        // The fact and its outbox row go with the effect, in the same transaction.
        Sequence::AtomicWithOutbox => {
            store.facts.insert((partition, offset));
            store.outbox.insert((partition, offset));
            None
        }
        // The email follows the store's commit.
        Sequence::AtomicThenEmail => Some(Stage::Stored),
        Sequence::Atomic | Sequence::EmailThenAtomic { .. } => None,
        Sequence::CommitThenEffect
        | Sequence::EffectThenCommit
        | Sequence::Effect
        | Sequence::EffectRecordCommit
        | Sequence::Stamped
        | Sequence::DedupedThenCommit
        | Sequence::Transactional => panic!("{}: apply-atomic is no write of its sequence", config.strategy),
    };
    let lease = lease_mut(state, group, owner, partition);
    match after {
        Some(stage) => lease.records.insert(offset, stage),
        None => lease.records.remove(&offset),
    };
    lease.checkpoint = offset + 1;
}

/// Sends the record's email to the provider (outside the store's transaction): with the
/// record's identity as its idempotency key the provider drops a repeat; without, it counts.
fn send_email(config: &Config, state: &mut State, lease: (u8, u8, u8), offset: Offset) {
    let (group, owner, partition) = lease;
    let rules = config.strategy.rules();
    let inbox = &mut state.groups[usize::from(group)].inbox;
    let received = inbox.get_or_insert((partition, offset), 0);
    let keyed = match rules.sequence {
        Sequence::EmailThenAtomic { key } => key,
        Sequence::AtomicThenEmail => false,
        Sequence::CommitThenEffect
        | Sequence::EffectThenCommit
        | Sequence::Effect
        | Sequence::EffectRecordCommit
        | Sequence::Stamped
        | Sequence::DedupedThenCommit
        | Sequence::Atomic
        | Sequence::Transactional
        | Sequence::AtomicThenIndex
        | Sequence::AtomicWithOutbox => panic!("{}: sends no email", config.strategy),
    };
    if !(keyed && *received > 0) {
        *received = received.saturating_add(1).min(2);
    }
    let lease = lease_mut(state, group, owner, partition);
    if email_before_commit(rules.sequence) {
        lease.records.insert(offset, Stage::Emailed);
    } else {
        lease.records.remove(&offset);
    }
}

/// Whether the email goes before the store's transaction (then `apply-atomic` follows).
fn email_before_commit(sequence: Sequence) -> bool {
    matches!(sequence, Sequence::EmailThenAtomic { .. })
}

/// dual-write: the record's fact is written to the index, in a write of its own.
fn write_index(state: &mut State, (group, owner, partition): (u8, u8, u8), offset: Offset) {
    state.groups[usize::from(group)].index.insert((partition, offset));
    lease_mut(state, group, owner, partition).records.remove(&offset);
}

/// outbox: the relay copies the oldest outbox row to the index (an idempotent insert) and
/// deletes it; a crash of the relay between the two would only copy it again.
fn relay(state: &mut State, group: u8) {
    let group = &mut state.groups[usize::from(group)];
    let row = group.store.outbox.pop_first().expect("the relay runs on a row");
    group.index.insert(row);
}

/// Group isolation, checked on every step: if the acting group's step changed another group's
/// store, the victim's ghost records it. Stores are compared whole, so any stray write shows.
fn record_foreign_writes(before: &State, after: &mut State, acting: u8) {
    for (g, group) in after.groups.iter_mut().enumerate() {
        if g != usize::from(acting) && group.store != before.groups[g].store {
            group.ghost.foreign_write = true;
        }
    }
}

fn lease_mut(state: &mut State, group: u8, owner: u8, partition: u8) -> &mut Lease {
    state.groups[usize::from(group)].slot_mut(owner).leases[usize::from(partition)]
        .as_mut()
        .expect("an owner step needs the owner's lease on the partition")
}
