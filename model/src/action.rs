//! The action vocabulary: one variant per operation of the real consumer; traces carry these values.

use crate::state::Offset;
use crate::strategy::Write;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One step of the system. Owner steps name the owner and partition they act on and the offset
/// (or next offset) they concern, so a trace is readable and replayable without indices. The
/// outcome of a step (applied, skipped, fenced) is not part of the action: it follows from the
/// state, exactly as the real consumer's outcome follows from its database.
///
/// In a trace, a field its `kind` does not have is an error. (Serde honours
/// `deny_unknown_fields` on the variants of an internally tagged enum in the version this builds
/// with; `model/tests/traces.rs` checks it, because older versions ignored it.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Action {
    /// The producer appends a record (its next logical send); the append is durable and acked.
    Append { partition: u8, delta: i64 },
    /// As `append`, but the acknowledgement is lost: the producer does not know it landed.
    AppendAckLost { partition: u8, delta: i64 },
    /// The producer retries the send whose acknowledgement was lost: an idempotent producer
    /// repeats its (producer id, epoch, sequence) and the log recognises it; a producer that
    /// retries with a new sequence appends it again.
    RetryAppend { partition: u8, delta: i64 },
    /// An owner reads the record at its position into memory (no durable write).
    Fetch { group: u8, owner: u8, partition: u8, offset: Offset },
    /// A separate effect write: `total += delta` (dedup-separate: unless the id is processed).
    ApplyEffect { group: u8, owner: u8, partition: u8, offset: Offset },
    /// dedup-separate: a separate write recording the record's id as processed.
    InsertProcessed { group: u8, owner: u8, partition: u8, offset: Offset },
    /// A separate progress write: the committed next offset becomes `next_offset`.
    CommitOffset { group: u8, owner: u8, partition: u8, next_offset: Offset },
    /// offset-stamp: one write adding the delta and stamping the offset, only if strictly newer.
    ApplyStamped { group: u8, owner: u8, partition: u8, offset: Offset },
    /// dedup-atomic: one transaction adding the delta and inserting the id, unless present.
    ApplyDeduped { group: u8, owner: u8, partition: u8, offset: Offset },
    /// atomic, atomic-fenced, atomic-cas: one transaction with the effect and the next offset.
    ApplyAtomic { group: u8, owner: u8, partition: u8, offset: Offset },
    /// atomic-dlq: one transaction moving an exhausted poison record to the dead-letter table
    /// and the next offset past it (fenced).
    DeadLetter { group: u8, owner: u8, partition: u8, offset: Offset },
    /// Retention: the log start of a partition moves forward to `before`.
    Retain { partition: u8, before: Offset },
    /// `--on-out-of-range earliest`: one fenced transaction recording the reset (from the stored
    /// next offset to the log start) and moving the next offset to the log start.
    ResetOffset { group: u8, owner: u8, partition: u8 },
    /// `--on-out-of-range fail`: the owner stops working on the partition with an error.
    FailOutOfRange { group: u8, owner: u8, partition: u8 },
    /// The owner process dies: its volatile state is lost, the log and store are kept.
    Crash { group: u8, owner: u8 },
    /// A crashed owner starts again and reloads its partitions from the committed checkpoint.
    Restart { group: u8, owner: u8 },
    /// The coordinator moves a partition to another owner and bumps its epoch; the old owner
    /// is not told.
    Rebalance { group: u8, partition: u8, to_owner: u8 },
    /// A forming coordinator's second step (the broker rows' `Coordinator::Forming`): the group
    /// formed, so the partition's epoch + 1 and its owner the one the rebalance named, who (if
    /// running) takes it at the offset committed by now.
    Sync { group: u8, partition: u8 },
    /// Owner `owner` is started again while its current incarnation still runs (a paused
    /// process presumed dead, a supervisor's restart, an operator's second copy): the running
    /// one moves to a paused slot and keeps its leases; the new one starts as after a crash.
    Pause { group: u8, owner: u8 },
    /// The log of `partition` loses its acknowledged records from `keep` on (a truncated or
    /// deleted file): the store may now be ahead of the log.
    LoseTail { partition: u8, keep: Offset },
    /// The owner finds its group's checkpoint (or its own position) ahead of the log and
    /// refuses to go on with the partition: no write.
    RefuseAhead { group: u8, owner: u8, partition: u8 },
    /// Replicated rows: the follower fetches the leader's next record.
    Replicate { partition: u8 },
    /// Replicated rows, `acks=all`: the producer's in-flight append is answered.
    Acknowledge { partition: u8 },
    /// Replicated rows: the lagging follower leaves the ISR.
    ShrinkIsr { partition: u8 },
    /// Replicated rows: the leader fails and a new one is elected (or none).
    FailLeader { partition: u8 },
    /// Transactional rows: the output record of `offset` joins the owner's open transaction.
    ProduceOutput { group: u8, owner: u8, partition: u8, offset: Offset },
    /// Transactional rows: one transaction with the commit marker and the next offset.
    CommitTxn { group: u8, owner: u8, partition: u8, offset: Offset },
    /// Transactional rows: the downstream reader reads the output partition's next entry.
    ReadOutput { partition: u8 },
    /// The email of `offset` is sent to the provider (outside the store's transaction).
    SendEmail { group: u8, owner: u8, partition: u8, offset: Offset },
    /// dual-write: the fact of `offset` is written to the index (a second store), apart.
    WriteIndex { group: u8, owner: u8, partition: u8, offset: Offset },
    /// outbox: the relay copies the oldest outbox row of the group to the index.
    Relay { group: u8 },
}

/// Which groups an action may change (`Action::groups_changed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupsChanged {
    None,
    One(u8),
    All,
}

impl GroupsChanged {
    /// Whether group `g` may have changed.
    pub fn includes(self, g: usize) -> bool {
        match self {
            GroupsChanged::None => false,
            GroupsChanged::One(group) => usize::from(group) == g,
            GroupsChanged::All => true,
        }
    }
}

impl Action {
    /// The group that acts (an owner's step, a crash, a rebalance): `None` for the producer,
    /// the log and the brokers. An append may still change every group's ghost
    /// (`groups_changed`).
    pub fn group(&self) -> Option<u8> {
        match *self {
            Action::Append { .. }
            | Action::AppendAckLost { .. }
            | Action::RetryAppend { .. }
            | Action::Retain { .. }
            | Action::LoseTail { .. }
            | Action::Replicate { .. }
            | Action::Acknowledge { .. }
            | Action::ShrinkIsr { .. }
            | Action::FailLeader { .. }
            | Action::ReadOutput { .. } => None,
            Action::Fetch { group, .. }
            | Action::SendEmail { group, .. }
            | Action::WriteIndex { group, .. }
            | Action::Relay { group }
            | Action::ProduceOutput { group, .. }
            | Action::CommitTxn { group, .. }
            | Action::Pause { group, .. }
            | Action::RefuseAhead { group, .. }
            | Action::ApplyEffect { group, .. }
            | Action::InsertProcessed { group, .. }
            | Action::CommitOffset { group, .. }
            | Action::ApplyStamped { group, .. }
            | Action::ApplyDeduped { group, .. }
            | Action::ApplyAtomic { group, .. }
            | Action::DeadLetter { group, .. }
            | Action::ResetOffset { group, .. }
            | Action::FailOutOfRange { group, .. }
            | Action::Crash { group, .. }
            | Action::Restart { group, .. }
            | Action::Rebalance { group, .. }
            | Action::Sync { group, .. } => Some(group),
        }
    }

    /// Which groups the action may change: the acting group's (`group`), none, or, for an
    /// append or a broker's step, every group's ghost (a log that lost its tail and grows again
    /// moves the lost record's applications to each group's `lost_sum`). The checker takes the other groups
    /// from the parent without comparing them; debug builds assert it, and
    /// `search::tests::actions_change_only_what_they_say` walks every row.
    pub fn groups_changed(&self) -> GroupsChanged {
        match self.group() {
            Some(group) => GroupsChanged::One(group),
            // Retention and log loss change the log only (a lost record's applications move
            // when the log grows again). Any other step outside the groups, including one
            // added later, may change them all: the safe side.
            None if matches!(self, Action::Retain { .. } | Action::LoseTail { .. }) => GroupsChanged::None,
            // Appends, the brokers' steps (a replicated partition's consumer-visible log moves
            // with its high watermark and leader) and the downstream reader (`read_aborted` is
            // per group).
            None => GroupsChanged::All,
        }
    }

    /// Whether the action may change the shared, outside-the-groups parts of the state (the
    /// log, the producers, retention, replicas, the output partitions: `State::shared_eq`);
    /// every other action changes at most the groups, the fault counters and the witness bits.
    /// The checker compares the shared parts with the parent's only after such an action;
    /// debug builds assert the others leave them alone, and
    /// `search::tests::actions_change_only_what_they_say` walks every row.
    pub fn may_change_shared(&self) -> bool {
        // The owners' steps that touch only their group's store and their own state (a crash
        // and a fetch included). Every other step may change the shared parts, including a
        // step added later: the safe side. Restart, rebalance and pause take a partition,
        // which aborts its open transactions (`txn::take_partition`), and the transactional
        // writes append to the output partition.
        let local = matches!(
            self,
            Action::Fetch { .. }
                | Action::FailOutOfRange { .. }
                | Action::Crash { .. }
                | Action::RefuseAhead { .. }
                | Action::Relay { .. }
                | Action::ApplyEffect { .. }
                | Action::InsertProcessed { .. }
                | Action::CommitOffset { .. }
                | Action::ApplyStamped { .. }
                | Action::ApplyDeduped { .. }
                | Action::ApplyAtomic { .. }
                | Action::DeadLetter { .. }
                | Action::ResetOffset { .. }
                | Action::SendEmail { .. }
                | Action::WriteIndex { .. }
        );
        !local
    }

    /// The partition the action names, if it names one.
    pub fn partition(&self) -> Option<u8> {
        match *self {
            Action::Crash { .. } | Action::Restart { .. } | Action::Pause { .. } | Action::Relay { .. } => None,
            Action::Replicate { partition }
            | Action::Acknowledge { partition }
            | Action::ShrinkIsr { partition }
            | Action::FailLeader { partition }
            | Action::ReadOutput { partition }
            | Action::ProduceOutput { partition, .. }
            | Action::CommitTxn { partition, .. }
            | Action::SendEmail { partition, .. }
            | Action::WriteIndex { partition, .. }
            | Action::Append { partition, .. }
            | Action::AppendAckLost { partition, .. }
            | Action::RetryAppend { partition, .. }
            | Action::Retain { partition, .. }
            | Action::LoseTail { partition, .. }
            | Action::Rebalance { partition, .. }
            | Action::Sync { partition, .. }
            | Action::Fetch { partition, .. }
            | Action::RefuseAhead { partition, .. }
            | Action::FailOutOfRange { partition, .. }
            | Action::ApplyEffect { partition, .. }
            | Action::InsertProcessed { partition, .. }
            | Action::CommitOffset { partition, .. }
            | Action::ApplyStamped { partition, .. }
            | Action::ApplyDeduped { partition, .. }
            | Action::ApplyAtomic { partition, .. }
            | Action::DeadLetter { partition, .. }
            | Action::ResetOffset { partition, .. } => Some(partition),
        }
    }

    /// Who takes the step.
    pub fn actor(&self) -> Actor {
        match *self {
            Action::Append { .. }
            | Action::AppendAckLost { .. }
            | Action::RetryAppend { .. }
            | Action::Acknowledge { .. }
            | Action::ReadOutput { .. } => Actor::Producer,
            Action::Retain { .. }
            | Action::Rebalance { .. }
            | Action::Sync { .. }
            | Action::LoseTail { .. }
            | Action::Replicate { .. }
            | Action::ShrinkIsr { .. }
            | Action::FailLeader { .. }
            | Action::Relay { .. } => Actor::Coordinator,
            Action::Crash { group, owner } | Action::Restart { group, owner } | Action::Pause { group, owner } => {
                Actor::Owner { group, owner }
            }
            Action::Fetch { group, owner, .. }
            | Action::RefuseAhead { group, owner, .. }
            | Action::ProduceOutput { group, owner, .. }
            | Action::CommitTxn { group, owner, .. }
            | Action::SendEmail { group, owner, .. }
            | Action::WriteIndex { group, owner, .. }
            | Action::FailOutOfRange { group, owner, .. }
            | Action::ApplyEffect { group, owner, .. }
            | Action::InsertProcessed { group, owner, .. }
            | Action::CommitOffset { group, owner, .. }
            | Action::ApplyStamped { group, owner, .. }
            | Action::ApplyDeduped { group, owner, .. }
            | Action::ApplyAtomic { group, owner, .. }
            | Action::DeadLetter { group, owner, .. }
            | Action::ResetOffset { group, owner, .. } => Actor::Owner { group, owner },
        }
    }

    /// The (group, owner, partition) of an owner step that works on a lease.
    pub fn lease_step(&self) -> Option<(u8, u8, u8)> {
        match *self {
            Action::Fetch { group, owner, partition, .. }
            | Action::FailOutOfRange { group, owner, partition }
            | Action::RefuseAhead { group, owner, partition } => Some((group, owner, partition)),
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
            | Action::WriteIndex { .. } => self.owner_write().map(|write| write.lease),
            Action::Append { .. }
            | Action::AppendAckLost { .. }
            | Action::RetryAppend { .. }
            | Action::Retain { .. }
            | Action::Crash { .. }
            | Action::Restart { .. }
            | Action::Rebalance { .. }
            | Action::Sync { .. }
            | Action::Pause { .. }
            | Action::LoseTail { .. }
            | Action::Replicate { .. }
            | Action::Acknowledge { .. }
            | Action::ShrinkIsr { .. }
            | Action::FailLeader { .. }
            | Action::ReadOutput { .. }
            | Action::Relay { .. } => None,
        }
    }

    /// The durable write an owner attempts with this action, if it is one.
    pub fn owner_write(&self) -> Option<OwnerWrite> {
        let write =
            |write, group, owner, partition, value| Some(OwnerWrite { write, lease: (group, owner, partition), value });
        match *self {
            Action::ApplyEffect { group, owner, partition, offset } => {
                write(Write::ApplyEffect, group, owner, partition, offset)
            }
            Action::InsertProcessed { group, owner, partition, offset } => {
                write(Write::InsertProcessed, group, owner, partition, offset)
            }
            Action::CommitOffset { group, owner, partition, next_offset } => {
                write(Write::CommitOffset, group, owner, partition, next_offset)
            }
            Action::ApplyStamped { group, owner, partition, offset } => {
                write(Write::ApplyStamped, group, owner, partition, offset)
            }
            Action::ApplyDeduped { group, owner, partition, offset } => {
                write(Write::ApplyDeduped, group, owner, partition, offset)
            }
            Action::ApplyAtomic { group, owner, partition, offset } => {
                write(Write::ApplyAtomic, group, owner, partition, offset)
            }
            Action::DeadLetter { group, owner, partition, offset } => {
                write(Write::DeadLetter, group, owner, partition, offset)
            }
            Action::ProduceOutput { group, owner, partition, offset } => {
                write(Write::ProduceOutput, group, owner, partition, offset)
            }
            Action::CommitTxn { group, owner, partition, offset } => {
                write(Write::CommitTxn, group, owner, partition, offset)
            }
            Action::SendEmail { group, owner, partition, offset } => {
                write(Write::SendEmail, group, owner, partition, offset)
            }
            Action::WriteIndex { group, owner, partition, offset } => {
                write(Write::WriteIndex, group, owner, partition, offset)
            }
            // The reset's target is the log start, which the state holds.
            Action::ResetOffset { group, owner, partition } => write(Write::ResetOffset, group, owner, partition, 0),
            Action::Append { .. }
            | Action::AppendAckLost { .. }
            | Action::RetryAppend { .. }
            | Action::Retain { .. }
            | Action::Fetch { .. }
            | Action::FailOutOfRange { .. }
            | Action::Crash { .. }
            | Action::Restart { .. }
            | Action::Rebalance { .. }
            | Action::Sync { .. }
            | Action::Pause { .. }
            | Action::LoseTail { .. }
            | Action::RefuseAhead { .. }
            | Action::Replicate { .. }
            | Action::Acknowledge { .. }
            | Action::ShrinkIsr { .. }
            | Action::FailLeader { .. }
            | Action::ReadOutput { .. }
            | Action::Relay { .. } => None,
        }
    }

    /// The action of an owner's durable write: the inverse of `owner_write`.
    pub fn of_write(write: OwnerWrite) -> Action {
        let (group, owner, partition) = write.lease;
        let offset = write.value;
        match write.write {
            Write::ApplyEffect => Action::ApplyEffect { group, owner, partition, offset },
            Write::InsertProcessed => Action::InsertProcessed { group, owner, partition, offset },
            Write::CommitOffset => Action::CommitOffset { group, owner, partition, next_offset: offset },
            Write::ApplyStamped => Action::ApplyStamped { group, owner, partition, offset },
            Write::ApplyDeduped => Action::ApplyDeduped { group, owner, partition, offset },
            Write::ApplyAtomic => Action::ApplyAtomic { group, owner, partition, offset },
            Write::DeadLetter => Action::DeadLetter { group, owner, partition, offset },
            Write::ResetOffset => Action::ResetOffset { group, owner, partition },
            Write::ProduceOutput => Action::ProduceOutput { group, owner, partition, offset },
            Write::CommitTxn => Action::CommitTxn { group, owner, partition, offset },
            Write::SendEmail => Action::SendEmail { group, owner, partition, offset },
            Write::WriteIndex => Action::WriteIndex { group, owner, partition, offset },
        }
    }

    /// Whether the action attempts a durable write on behalf of an owner.
    pub fn is_owner_write(&self) -> bool {
        self.owner_write().is_some()
    }
}

/// Who takes a step: the producer, the coordinator (rebalances, retention) or an owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Actor {
    Producer,
    Coordinator,
    Owner { group: u8, owner: u8 },
}

/// An owner's durable write with its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerWrite {
    pub write: Write,
    /// (group, owner, partition).
    pub lease: (u8, u8, u8),
    /// The offset the write concerns; for `commit-offset` the next offset it stores; 0 for
    /// `reset-offset`, whose target (the log start) is in the state.
    pub value: Offset,
}

/// An action in words with its acting owner named as given (`Action::named`).
pub struct Named<'a> {
    action: &'a Action,
    who: &'a str,
}

impl fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.action.write_words(f, self.who)
    }
}

impl Action {
    /// The action in words with its acting owner named `who`. `Display` names the owner by its
    /// slot (`gG/oO`), which for a paused slot is its number, not the owner it runs as; with
    /// the state at hand, `view::action_text` names an earlier incarnation as spec.md §2.2
    /// spells it (`gG/oO'`).
    pub fn named<'a>(&'a self, who: &'a str) -> Named<'a> {
        Named { action: self, who }
    }

    fn write_words(&self, f: &mut fmt::Formatter<'_>, who: &str) -> fmt::Result {
        match *self {
            Action::Append { partition, delta } => write!(f, "append (+{delta}) to p{partition}"),
            Action::AppendAckLost { partition, delta } => write!(f, "append (+{delta}) to p{partition}, ack lost"),
            Action::RetryAppend { partition, delta } => {
                write!(f, "retry the unacknowledged append (+{delta}) to p{partition}")
            }
            Action::Fetch { partition, offset, .. } => {
                write!(f, "{who} fetches p{partition} offset {offset}")
            }
            Action::ApplyEffect { partition, offset, .. } => {
                write!(f, "{who} applies the effect of p{partition} offset {offset}")
            }
            Action::InsertProcessed { partition, offset, .. } => {
                write!(f, "{who} records p{partition} offset {offset} as processed")
            }
            Action::CommitOffset { partition, next_offset, .. } => {
                write!(f, "{who} commits p{partition} next offset {next_offset}")
            }
            Action::ApplyStamped { partition, offset, .. } => {
                write!(f, "{who} applies p{partition} offset {offset} if newer than the stamp")
            }
            Action::ApplyDeduped { partition, offset, .. } => {
                write!(f, "{who} applies p{partition} offset {offset} with its id, unless processed")
            }
            Action::ApplyAtomic { partition, offset, .. } => {
                write!(f, "{who} applies p{partition} offset {offset} and its next offset in one transaction")
            }
            Action::DeadLetter { partition, offset, .. } => {
                write!(f, "{who} dead-letters p{partition} offset {offset} and commits past it")
            }
            Action::Retain { partition, before } => write!(f, "retention moves the start of p{partition} to {before}"),
            Action::ResetOffset { partition, .. } => {
                write!(f, "{who} records a reset of p{partition} to the log start")
            }
            Action::FailOutOfRange { partition, .. } => {
                write!(f, "{who} stops on p{partition}: its offset is below the log start")
            }
            Action::Crash { .. } => write!(f, "{who} crashes"),
            Action::Restart { .. } => write!(f, "{who} restarts"),
            Action::Rebalance { group, partition, to_owner } => {
                write!(f, "rebalance g{group} p{partition} to o{to_owner}")
            }
            Action::Sync { group, partition } => {
                write!(f, "g{group} forms: p{partition} goes to the owner its rebalance named")
            }
            Action::Pause { .. } => {
                write!(f, "{who} is started again while its current incarnation still runs")
            }
            Action::LoseTail { partition, keep } => {
                write!(f, "the log of p{partition} loses its records from offset {keep} on")
            }
            Action::RefuseAhead { partition, .. } => {
                write!(f, "{who} refuses p{partition}: its checkpoint is ahead of the log")
            }
            Action::Replicate { partition } => write!(f, "the follower of p{partition} fetches from the leader"),
            Action::Acknowledge { partition } => write!(f, "the producer's append to p{partition} is answered"),
            Action::ShrinkIsr { partition } => write!(f, "the lagging follower of p{partition} leaves the ISR"),
            Action::FailLeader { partition } => write!(f, "the leader of p{partition} fails"),
            Action::ProduceOutput { partition, offset, .. } => {
                write!(f, "{who} produces the output of p{partition} offset {offset} in its transaction")
            }
            Action::CommitTxn { partition, offset, .. } => {
                write!(f, "{who} commits its transaction with p{partition} next offset {}", offset + 1)
            }
            Action::ReadOutput { partition } => write!(f, "the downstream reader reads output p{partition}"),
            Action::SendEmail { partition, offset, .. } => {
                write!(f, "{who} sends the email of p{partition} offset {offset}")
            }
            Action::WriteIndex { partition, offset, .. } => {
                write!(f, "{who} writes the fact of p{partition} offset {offset} to the index")
            }
            Action::Relay { group } => write!(f, "the relay of g{group} copies its oldest outbox row to the index"),
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.actor() {
            Actor::Owner { group, owner } => self.write_words(f, &format!("g{group}/o{owner}")),
            Actor::Producer | Actor::Coordinator => self.write_words(f, ""),
        }
    }
}
