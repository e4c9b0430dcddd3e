//! The rows of spec.md's verdict table: every strategy and, in one table (`Strategy::rules`),
//! what its owners write per stage of a record, what guards those writes, how it checkpoints,
//! what it does with a poison record or a retained-away offset, and how its producer retries.
//!
//! This is the one home of a strategy in the model. The transition relation (`step.rs`) and the
//! properties (`properties.rs`) read the rules and match on their enums exhaustively, so a new
//! strategy is one variant in `strategies!` and one entry in `rules`; a new *mechanism* is a new
//! variant of one of the enums below, and the compiler then names every place that must decide
//! what it does.

use crate::state::Stage;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// Declares `Strategy`, its CLI names and `Strategy::ALL` from one list, so that `ALL` cannot
/// miss a variant and a name lives next to its variant.
macro_rules! strategies {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// A row of spec.md's verdict table: a consumer strategy, or a producer, retention or
        /// fault configuration of one. The names are the CLI names.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Strategy {
            $($(#[$doc])* $variant,)*
        }

        impl Strategy {
            /// Every row, in the order of spec.md's table.
            pub const ALL: [Strategy; [$($name,)*].len()] = [$(Strategy::$variant,)*];

            pub fn name(self) -> &'static str {
                match self {
                    $(Strategy::$variant => $name,)*
                }
            }
        }
    };
}

strategies! {
    /// Commit the next offset, then apply the effect: at-most-once.
    CommitFirst => "commit-first",
    /// Apply the effect, then commit: at-least-once.
    EffectFirst => "effect-first",
    /// Apply effects, commit every `commit_every` records: a replay window.
    PeriodicCommit => "periodic-commit",
    /// Set-if-newer: the effect and the offset stamp in one statement; periodic checkpoints.
    OffsetStamp => "offset-stamp",
    /// The trap: dedup metadata written apart from the effect.
    DedupSeparate => "dedup-separate",
    /// Effect and processed id in one transaction, then the commit.
    DedupAtomic => "dedup-atomic",
    /// Effect and next offset in one transaction, the offset written blindly.
    Atomic => "atomic",
    /// As atomic, the transaction checks the owner's epoch first.
    AtomicFenced => "atomic-fenced",
    /// As atomic, the transaction compares with the stored next offset.
    AtomicCas => "atomic-cas",
    /// The trap: parallel completions, the highest one committed.
    ParallelMax => "parallel-max",
    /// Parallel completions, the contiguous prefix committed.
    ParallelWatermark => "parallel-watermark",
    /// atomic-fenced with failed attempts counted and a dead-letter table.
    AtomicDlq => "atomic-dlq",
    /// The trap: a poison record skipped by a blind commit.
    SkipPoison => "skip-poison",
    /// The trap: a poison record retried for ever.
    RetryForever => "retry-forever",
    /// atomic-fenced consumers; the producer retries a lost acknowledgement idempotently.
    ProducerIdempotent => "producer-idempotent",
    /// The trap: the producer retries under a new sequence.
    ProducerNewSequence => "producer-new-sequence",
    /// atomic-fenced; retention past the checkpoint is a recorded reset.
    ResetEarliest => "reset-earliest",
    /// The trap: retention past the checkpoint is a blind jump.
    ResetSilent => "reset-silent",
    /// atomic-fenced; retention past the checkpoint stops the owner.
    ResetFail => "reset-fail",
    /// The trap: atomic-fenced whose owners resume at the stored epoch when they start, so a
    /// second live incarnation of an owner is never fenced.
    FencedStoredEpoch => "fenced-stored-epoch",
    /// atomic-fenced on a log that knows its acknowledged end: after a loss, appends are
    /// refused and an owner whose group is ahead of the log refuses to go on.
    LogLossRefuse => "log-loss-refuse",
    /// The trap: a log that grows again after losing its tail, read by a consumer that never
    /// compares its checkpoint with the log: the new records below the checkpoint are skipped.
    LogLossUnchecked => "log-loss-unchecked",
    /// The trap: a consumer that refuses whenever the log lost records, even when its group is
    /// behind the loss and nothing of its own is at stake.
    LogLossRefuseAll => "log-loss-refuse-all",
    /// A replicated partition whose producer is acknowledged by the leader alone (`acks=1`).
    AcksLeader => "acks-leader",
    /// `acks=all` with `min.insync.replicas` 2, clean elections only.
    AcksAll => "acks-all",
    /// The trap: `acks=all` with `min.insync.replicas` 1 and unclean elections.
    AcksAllMinIsr1 => "acks-all-min-isr-1",
    /// `acks=all` with `min.insync.replicas` 1, clean elections only: unavailable, not lossy.
    AcksAllMinIsr1Clean => "acks-all-min-isr-1-clean",
    /// Read-process-write in transactions fenced by the producer epoch, read committed.
    TxnFenced => "txn-fenced",
    /// The trap: transactions without producer identity (MiniKafka's), read committed.
    TxnUnfenced => "txn-unfenced",
    /// The trap: fenced transactions, read by a `read_uncommitted` downstream consumer.
    TxnReadUncommitted => "txn-read-uncommitted",
    /// The trap: atomic-fenced, then an email sent after the store's commit.
    AtomicPlusEmail => "atomic-plus-email",
    /// The email first, with the record's identity as its idempotency key, then atomic-fenced.
    EmailIdempotencyKey => "email-idempotency-key",
    /// The trap: the email first, without a key, then atomic-fenced.
    EmailNoKey => "email-no-key",
    /// The trap: `value := v(o)` written blindly, then the commit.
    BlindSet => "blind-set",
    /// `value := v(o)` with the offset stamp, only when newer.
    SetIfNewer => "set-if-newer",
    /// The trap: dedup-atomic with processed ids keyed by the offset alone.
    DedupOffsetOnly => "dedup-offset-only",
    /// The trap: atomic-fenced, then the same fact written to an index separately.
    DualWrite => "dual-write",
    /// atomic-fenced with an outbox row in the same transaction, relayed to the index.
    Outbox => "outbox",
    /// effect-first with the offset committed to a Kafka broker, whose generation check refuses
    /// a stale owner's commit; nothing fences the effect.
    BrokerEffectFirst => "broker-effect-first",
    /// commit-first with the offset committed to a Kafka broker, fenced by its generation check.
    BrokerCommitFirst => "broker-commit-first",
    /// broker-effect-first on a coordinator whose rebalance forms the group first: until the
    /// new owner is assigned, the old generation stays current and its commits land.
    BrokerRelaxed => "broker-relaxed",
}

/// The durable writes of one record after its fetch, in order (the checkpoint of the periodic
/// and parallel strategies is not per record: see `Checkpointing`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sequence {
    /// `commit-offset(o+1)`, then `apply-effect(o)`.
    CommitThenEffect,
    /// `apply-effect(o)`, then `commit-offset(o+1)`.
    EffectThenCommit,
    /// `apply-effect(o)` alone; the checkpoint follows its own rule.
    Effect,
    /// `apply-effect(o)` unless processed, `insert-processed(o)`, `commit-offset(o+1)`.
    EffectRecordCommit,
    /// `apply-stamped(o)` alone; the checkpoint follows its own rule.
    Stamped,
    /// `apply-deduped(o)`, then `commit-offset(o+1)`.
    DedupedThenCommit,
    /// `apply-atomic(o)`: effect and `next_offset := o+1` in one transaction.
    Atomic,
    /// Read-process-write: `produce-output(o)` (a data record of the open transaction), then
    /// `commit-txn(o)` (the commit marker and `next_offset := o+1` together).
    Transactional,
    /// `apply-atomic(o)`, then `send-email(o)`: the email follows the store's commit.
    AtomicThenEmail,
    /// `send-email(o)` (with or without the record's identity as an idempotency key), then
    /// `apply-atomic(o)`.
    EmailThenAtomic { key: bool },
    /// `apply-atomic(o)` (its fact included), then a separate `write-index(o)`.
    AtomicThenIndex,
    /// `apply-atomic(o)` with the fact and an outbox row in the same transaction; a relay
    /// copies outbox rows to the index.
    AtomicWithOutbox,
}

/// A durable write of an owner: one transaction (spec.md §3, the actions marked *write*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    ApplyEffect,
    InsertProcessed,
    /// In a record's sequence, always `commit-offset(o+1)`.
    CommitOffset,
    ApplyStamped,
    ApplyDeduped,
    ApplyAtomic,
    DeadLetter,
    ResetOffset,
    ProduceOutput,
    CommitTxn,
    SendEmail,
    WriteIndex,
}

/// What guards the transactional writes (`apply-atomic`, `dead-letter`, `reset-offset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// Written blindly, whoever the owner is.
    Blind,
    /// The transaction checks the owner's epoch first and aborts (`Fenced`) when it is stale.
    Fenced,
    /// The transaction reads the stored next offset and skips a record below it.
    Cas,
}

/// What checks a separate `commit-offset` write (the transactional writes have `Guard`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitFence {
    /// Written blindly, whoever the owner is: the consumer's own offset table.
    Blind,
    /// A Kafka broker's offset commit: refused unless the owner's epoch (the group's generation)
    /// is the current one, and the owner, told, drops the partition. The effect, written
    /// elsewhere, is not fenced.
    Generation,
}

/// How the group coordinator moves a partition (a `rebalance`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coordinator {
    /// At once: the epoch moves and the new owner takes the partition in the same step.
    Atomic,
    /// In two steps, as a Kafka broker's coordinator: the `rebalance` begins the group's
    /// forming (nothing changes in the offset store, and the old owner's generation stays
    /// current, so its commits land); `sync` ends it: the epoch moves and the new owner takes
    /// the partition at the offset committed by then.
    Forming,
}

/// When the owner stores its checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checkpointing {
    /// Inside the record's sequence (a `commit-offset` step or the atomic transaction).
    PerRecord,
    /// `commit-offset(position)` once `commit_every` records are finished (required before the
    /// next fetch), or earlier when the owner has caught up with the log end.
    Periodic,
    /// Up to `inflight` records in any order; commit the highest completion + 1.
    ParallelMax,
    /// Up to `inflight` records in any order; commit the end of the contiguous completed prefix.
    ParallelWatermark,
}

/// What the owner does when a poison record's effect fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoisonPolicy {
    /// The strategy meets no poison record (`--poison` is refused for it).
    Unhandled,
    /// Count failed attempts in the failing transaction; after `max_attempts`, dead-letter the
    /// record and commit past it in one transaction.
    DeadLetter,
    /// The trap: give up at once and commit past it blindly.
    Skip,
    /// The trap: try again for ever.
    RetryForever,
}

/// What the owner does when retention removed the next record it would fetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutOfRangePolicy {
    /// `fail-out-of-range`: stop working on the partition (`--on-out-of-range fail`).
    Fail,
    /// `reset-offset`: one fenced transaction recording the reset and moving the checkpoint.
    Earliest,
    /// The trap: a blind `commit-offset(log start)`.
    Silent,
}

/// How the producer retries an append whose acknowledgement was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProducerRetry {
    /// The same (producer id, epoch, sequence): the log recognises it and appends nothing.
    SameSequence,
    /// The trap: a new sequence, so the log appends the send again.
    NewSequence,
}

/// What an owner's epoch is when it starts (or restarts) and takes the partitions the store
/// assigns to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartPolicy {
    /// Every start claims a new epoch for the partitions it takes (one transaction per start),
    /// so an earlier incarnation still running is a zombie its next fenced write finds out.
    ClaimEpoch,
    /// The trap: the owner resumes at the stored epoch, the same as its earlier incarnation's.
    StoredEpoch,
}

/// How an owner treats a log that lost acknowledged records (spec.md §3.1, log losses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogCheck {
    /// The log knows its acknowledged end: after a loss it refuses appends, and an owner whose
    /// group (or own position) is ahead of the log refuses to go on, writing nothing.
    RefuseAhead,
    /// The trap: the log grows again at its new end and the owner compares nothing.
    Unchecked,
    /// The trap: as `RefuseAhead`, but the owner also refuses when its group is behind the loss.
    RefuseAll,
}

/// How a partition is stored: one log, or replicated on two brokers (spec.md §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replication {
    /// One log (every row but the acks rows).
    Single,
    /// Two replicas, a leader and a follower, with the producer's acknowledgement mode.
    Replicated(ReplicaRules),
}

/// The producer's acknowledgement mode and the broker settings of a replicated partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaRules {
    pub acks: Acks,
    /// `min.insync.replicas`: the ISR size below which an `acks=all` append is refused.
    pub min_insync: u8,
    /// Whether an out-of-sync follower may be promoted when no ISR member is left.
    pub unclean: bool,
}

/// When the producer's append is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acks {
    /// `acks=1`: after the leader's own append.
    Leader,
    /// `acks=all`: once every ISR member has the record (the high watermark covers it).
    All,
}

/// What the effect of a record is (spec.md §3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EffectKind {
    /// `total += delta`.
    Add,
    /// `value := v(o) = o + 1`: the record's own value replaces the previous one.
    Set,
}

/// What identifies a processed record in the dedup table (spec.md §3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DedupKey {
    /// (partition, offset): one record.
    PartitionOffset,
    /// The trap: the offset alone, shared by every partition.
    OffsetOnly,
}

/// What a downstream reader of a transactional output sees (spec.md §3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// Up to the last stable offset, aborted records skipped.
    ReadCommitted,
    /// Every data record, aborted or not.
    ReadUncommitted,
}

/// The row's default bounds where they differ from spec.md §4's (the fault budgets of the
/// mechanism it is about, and smaller bounds where more add nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowDefaults {
    /// The offset of the poison record in every partition.
    pub poison: Option<u8>,
    pub ack_losses: u8,
    pub retentions: u8,
    pub log_losses: u8,
    /// Second live incarnations (`--pauses`).
    pub pauses: u8,
    pub groups: u8,
    pub owners: u8,
    pub partitions: u8,
    pub records: u8,
    pub crashes: u8,
    pub rebalances: u8,
    pub leader_failures: u8,
    pub isr_shrinks: u8,
}

/// One row's entry in the strategy table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    pub sequence: Sequence,
    pub guard: Guard,
    pub commit_fence: CommitFence,
    pub coordinator: Coordinator,
    pub checkpoint: Checkpointing,
    pub poison: PoisonPolicy,
    pub out_of_range: OutOfRangePolicy,
    pub producer: ProducerRetry,
    pub start: StartPolicy,
    pub log_check: LogCheck,
    pub replication: Replication,
    /// The downstream reader's isolation (the txn rows; read committed elsewhere, unused).
    pub isolation: Isolation,
    pub effect: EffectKind,
    pub dedup_key: DedupKey,
    pub defaults: RowDefaults,
}

/// The rows whose claims stand on who may write (a fence, a CAS, a stamp, a dedup id) meet a
/// second live incarnation of an owner by default. A second group, alike, would multiply its
/// states twentyfold and show nothing a pause does not: these rows check one group.
const PAUSED: RowDefaults = RowDefaults { pauses: 1, groups: 1, ..TWO_GROUPS };

/// The rows where every cell a second incarnation could break is already violated by a
/// rebalance's zombie (no-duplicate, monotonic-checkpoint, fenced-writes) and the cells that
/// hold are not about who writes (contiguous-prefix, group-isolation) keep two groups and no
/// pause; `model/tests/verdicts.rs` checks that a pause changes none of their verdicts.
const TWO_GROUPS: RowDefaults = RowDefaults {
    poison: None,
    ack_losses: 0,
    retentions: 0,
    log_losses: 0,
    pauses: 0,
    groups: crate::config::defaults::GROUPS,
    owners: crate::config::defaults::OWNERS,
    partitions: crate::config::defaults::PARTITIONS,
    records: crate::config::defaults::RECORDS,
    crashes: crate::config::defaults::CRASHES,
    rebalances: crate::config::defaults::REBALANCES,
    leader_failures: 0,
    isr_shrinks: 0,
};

/// The acks rows test the producer and the brokers: one consumer that never crashes, two
/// records, one leader failure and one ISR shrink.
const REPLICATED: RowDefaults =
    RowDefaults { owners: 1, records: 2, crashes: 0, rebalances: 0, leader_failures: 1, isr_shrinks: 1, ..PAUSED_NONE };

/// One group, no pause: the base of the rows about one mechanism apart from owners.
const PAUSED_NONE: RowDefaults = RowDefaults { pauses: 0, groups: 1, ..TWO_GROUPS };

/// dedup-offset-only: two partitions (offset 0 of each is a different record), one group,
/// no pause.
const TWO_PARTITIONS: RowDefaults = RowDefaults { partitions: 2, records: 2, ..PAUSED_NONE };

/// The txn rows: one owner whose second incarnation (a pause) is the zombie instance of its
/// transactional id, a crash, two records.
const TRANSACTIONAL: RowDefaults = RowDefaults { owners: 1, records: 2, rebalances: 0, ..PAUSED };

/// A plain consumer: per-record checkpoints, no poison, `--on-out-of-range fail`, an
/// idempotent producer, no extra faults by default.
const fn consumer(sequence: Sequence, guard: Guard, checkpoint: Checkpointing) -> Rules {
    Rules {
        sequence,
        guard,
        commit_fence: CommitFence::Blind,
        coordinator: Coordinator::Atomic,
        checkpoint,
        poison: PoisonPolicy::Unhandled,
        out_of_range: OutOfRangePolicy::Fail,
        producer: ProducerRetry::SameSequence,
        start: StartPolicy::ClaimEpoch,
        log_check: LogCheck::RefuseAhead,
        replication: Replication::Single,
        isolation: Isolation::ReadCommitted,
        effect: EffectKind::Add,
        dedup_key: DedupKey::PartitionOffset,
        defaults: TWO_GROUPS,
    }
}

/// An acks row: atomic-fenced consumers of a replicated partition.
const fn replicated(acks: Acks, min_insync: u8, unclean: bool) -> Rules {
    let replication = Replication::Replicated(ReplicaRules { acks, min_insync, unclean });
    Rules { replication, defaults: REPLICATED, ..ATOMIC_FENCED }
}

/// txn-fenced: read-process-write in transactions fenced by the producer epoch.
const TXN: Rules =
    Rules { defaults: TRANSACTIONAL, ..consumer(Sequence::Transactional, Guard::Fenced, Checkpointing::PerRecord) };

/// A row that meets a second live incarnation by default (`PAUSED`).
const fn paused(rules: Rules) -> Rules {
    Rules { defaults: PAUSED, ..rules }
}

/// atomic-fenced: the consumer of the poison, producer and retention rows.
const ATOMIC_FENCED: Rules = paused(consumer(Sequence::Atomic, Guard::Fenced, Checkpointing::PerRecord));

impl Strategy {
    /// The strategy table: one entry per row.
    pub const fn rules(self) -> Rules {
        use Checkpointing::*;
        use Sequence::*;
        let poison = RowDefaults { poison: Some(1), ..PAUSED };
        let ack_loss = RowDefaults { ack_losses: 1, ..PAUSED };
        let retention = RowDefaults { retentions: 1, ..PAUSED };
        let log_loss = RowDefaults { log_losses: 1, ..PAUSED };
        match self {
            Strategy::CommitFirst => consumer(CommitThenEffect, Guard::Blind, PerRecord),
            Strategy::EffectFirst => consumer(EffectThenCommit, Guard::Blind, PerRecord),
            Strategy::PeriodicCommit => consumer(Effect, Guard::Blind, Periodic),
            Strategy::OffsetStamp => paused(consumer(Stamped, Guard::Blind, Periodic)),
            Strategy::DedupSeparate => consumer(EffectRecordCommit, Guard::Blind, PerRecord),
            Strategy::DedupAtomic => paused(consumer(DedupedThenCommit, Guard::Blind, PerRecord)),
            Strategy::Atomic => consumer(Atomic, Guard::Blind, PerRecord),
            Strategy::AtomicFenced => ATOMIC_FENCED,
            Strategy::AtomicCas => paused(consumer(Atomic, Guard::Cas, PerRecord)),
            Strategy::ParallelMax => consumer(Effect, Guard::Blind, ParallelMax),
            Strategy::ParallelWatermark => consumer(Effect, Guard::Blind, ParallelWatermark),
            Strategy::AtomicDlq => Rules { poison: PoisonPolicy::DeadLetter, defaults: poison, ..ATOMIC_FENCED },
            Strategy::SkipPoison => Rules { poison: PoisonPolicy::Skip, defaults: poison, ..ATOMIC_FENCED },
            Strategy::RetryForever => Rules { poison: PoisonPolicy::RetryForever, defaults: poison, ..ATOMIC_FENCED },
            Strategy::ProducerIdempotent => Rules { defaults: ack_loss, ..ATOMIC_FENCED },
            Strategy::ProducerNewSequence => {
                Rules { producer: ProducerRetry::NewSequence, defaults: ack_loss, ..ATOMIC_FENCED }
            }
            Strategy::ResetEarliest => {
                Rules { out_of_range: OutOfRangePolicy::Earliest, defaults: retention, ..ATOMIC_FENCED }
            }
            Strategy::ResetSilent => {
                Rules { out_of_range: OutOfRangePolicy::Silent, defaults: retention, ..ATOMIC_FENCED }
            }
            Strategy::ResetFail => Rules { defaults: retention, ..ATOMIC_FENCED },
            Strategy::FencedStoredEpoch => Rules { start: StartPolicy::StoredEpoch, ..ATOMIC_FENCED },
            Strategy::LogLossRefuse => Rules { defaults: log_loss, ..ATOMIC_FENCED },
            Strategy::LogLossUnchecked => Rules { log_check: LogCheck::Unchecked, defaults: log_loss, ..ATOMIC_FENCED },
            Strategy::LogLossRefuseAll => Rules { log_check: LogCheck::RefuseAll, defaults: log_loss, ..ATOMIC_FENCED },
            Strategy::AcksLeader => replicated(Acks::Leader, 1, false),
            Strategy::AcksAll => replicated(Acks::All, 2, false),
            Strategy::AcksAllMinIsr1 => replicated(Acks::All, 1, true),
            Strategy::AcksAllMinIsr1Clean => replicated(Acks::All, 1, false),
            Strategy::TxnFenced => TXN,
            Strategy::TxnUnfenced => Rules { guard: Guard::Blind, ..TXN },
            Strategy::TxnReadUncommitted => Rules { isolation: Isolation::ReadUncommitted, ..TXN },
            Strategy::AtomicPlusEmail => Rules { sequence: AtomicThenEmail, ..ATOMIC_FENCED },
            Strategy::EmailIdempotencyKey => Rules { sequence: EmailThenAtomic { key: true }, ..ATOMIC_FENCED },
            Strategy::EmailNoKey => Rules { sequence: EmailThenAtomic { key: false }, ..ATOMIC_FENCED },
            Strategy::BlindSet => Rules {
                effect: EffectKind::Set,
                defaults: PAUSED,
                ..consumer(EffectThenCommit, Guard::Blind, PerRecord)
            },
            Strategy::SetIfNewer => {
                Rules { effect: EffectKind::Set, defaults: PAUSED, ..consumer(Stamped, Guard::Blind, Periodic) }
            }
            Strategy::DedupOffsetOnly => Rules {
                dedup_key: DedupKey::OffsetOnly,
                defaults: TWO_PARTITIONS,
                ..consumer(DedupedThenCommit, Guard::Blind, PerRecord)
            },
            Strategy::DualWrite => Rules { sequence: AtomicThenIndex, ..ATOMIC_FENCED },
            Strategy::Outbox => Rules { sequence: AtomicWithOutbox, ..ATOMIC_FENCED },
            Strategy::BrokerEffectFirst => {
                Rules { commit_fence: CommitFence::Generation, ..consumer(EffectThenCommit, Guard::Blind, PerRecord) }
            }
            Strategy::BrokerCommitFirst => {
                Rules { commit_fence: CommitFence::Generation, ..consumer(CommitThenEffect, Guard::Blind, PerRecord) }
            }
            Strategy::BrokerRelaxed => Rules {
                commit_fence: CommitFence::Generation,
                coordinator: Coordinator::Forming,
                ..consumer(EffectThenCommit, Guard::Blind, PerRecord)
            },
        }
    }

    /// Strategies that meet poison records.
    pub fn handles_poison(self) -> bool {
        self.rules().poison != PoisonPolicy::Unhandled
    }
}

impl Sequence {
    /// The per-stage table of the sequence: for each stage a record rests in, the next durable
    /// write. A stage absent from it is one no record ever rests in under this sequence.
    pub const fn table(self) -> &'static [(Stage, Write)] {
        use Stage::{Committed, EffectApplied, Emailed, Fetched, Produced, Recorded, Stored};
        match self {
            Sequence::CommitThenEffect => &[(Fetched, Write::CommitOffset), (Committed, Write::ApplyEffect)],
            Sequence::EffectThenCommit => &[(Fetched, Write::ApplyEffect), (EffectApplied, Write::CommitOffset)],
            Sequence::Effect => &[(Fetched, Write::ApplyEffect)],
            Sequence::EffectRecordCommit => &[
                (Fetched, Write::ApplyEffect),
                (EffectApplied, Write::InsertProcessed),
                (Recorded, Write::CommitOffset),
            ],
            Sequence::Stamped => &[(Fetched, Write::ApplyStamped)],
            Sequence::DedupedThenCommit => &[(Fetched, Write::ApplyDeduped), (EffectApplied, Write::CommitOffset)],
            Sequence::Atomic | Sequence::AtomicWithOutbox => &[(Fetched, Write::ApplyAtomic)],
            Sequence::Transactional => &[(Fetched, Write::ProduceOutput), (Produced, Write::CommitTxn)],
            Sequence::AtomicThenEmail => &[(Fetched, Write::ApplyAtomic), (Stored, Write::SendEmail)],
            Sequence::EmailThenAtomic { .. } => &[(Fetched, Write::SendEmail), (Emailed, Write::ApplyAtomic)],
            Sequence::AtomicThenIndex => &[(Fetched, Write::ApplyAtomic), (Stored, Write::WriteIndex)],
        }
    }

    /// Whether the effect and the next offset are written by one transaction (`apply-atomic`).
    pub fn is_atomic(self) -> bool {
        match self {
            Sequence::Atomic
            | Sequence::AtomicWithOutbox
            | Sequence::AtomicThenEmail
            | Sequence::EmailThenAtomic { .. }
            | Sequence::AtomicThenIndex => true,
            Sequence::CommitThenEffect
            | Sequence::EffectThenCommit
            | Sequence::Effect
            | Sequence::EffectRecordCommit
            | Sequence::Stamped
            | Sequence::DedupedThenCommit
            | Sequence::Transactional => false,
        }
    }
}

impl Rules {
    /// The next durable write of a record resting in `stage`, or `None` when no record ever
    /// rests in that stage under these rules (a broken invariant if a lease holds one).
    pub fn next_write(&self, stage: Stage) -> Option<Write> {
        match stage {
            Stage::Exhausted => match self.poison {
                PoisonPolicy::DeadLetter => Some(Write::DeadLetter),
                PoisonPolicy::Skip => Some(Write::CommitOffset),
                PoisonPolicy::RetryForever | PoisonPolicy::Unhandled => None,
            },
            Stage::Fetched
            | Stage::Committed
            | Stage::EffectApplied
            | Stage::Recorded
            | Stage::Produced
            | Stage::Stored
            | Stage::Emailed => self.sequence.table().iter().find(|(at, _)| *at == stage).map(|&(_, write)| write),
        }
    }

    /// Whether a record's whole work is one transaction (no crash can fall between its writes).
    pub fn is_single_write(&self) -> bool {
        self.sequence.table().len() == 1 && self.sequence.is_atomic()
    }

    /// Whether the store recognises a redelivered record and skips its effect.
    pub fn skips_duplicates(&self) -> bool {
        let by_sequence = match self.sequence {
            Sequence::Stamped | Sequence::EffectRecordCommit | Sequence::DedupedThenCommit => true,
            Sequence::CommitThenEffect
            | Sequence::EffectThenCommit
            | Sequence::Effect
            | Sequence::Atomic
            | Sequence::Transactional
            | Sequence::AtomicThenEmail
            | Sequence::EmailThenAtomic { .. }
            | Sequence::AtomicThenIndex
            | Sequence::AtomicWithOutbox => false,
        };
        by_sequence || self.guard == Guard::Cas
    }

    /// Whether some write of the row checks the owner's epoch: a stale owner is told, and drops
    /// the partition (the `Fenced` guard of the transactions, or the broker's commit check).
    pub fn fences_stale_owners(&self) -> bool {
        let guarded = match self.guard {
            Guard::Fenced => true,
            Guard::Blind | Guard::Cas => false,
        };
        let commit_checked = match self.commit_fence {
            CommitFence::Generation => true,
            CommitFence::Blind => false,
        };
        guarded || commit_checked
    }

    /// Whether the owner holds several records and completes them in any order.
    pub fn is_parallel(&self) -> bool {
        match self.checkpoint {
            Checkpointing::ParallelMax | Checkpointing::ParallelWatermark => true,
            Checkpointing::PerRecord | Checkpointing::Periodic => false,
        }
    }

    /// The combinations the transition relation implements; every entry of the table must be
    /// one (checked by a test over `Strategy::ALL`).
    pub fn is_coherent(&self) -> bool {
        let checkpoint_fits = match self.checkpoint {
            Checkpointing::PerRecord => !matches!(self.sequence, Sequence::Effect | Sequence::Stamped),
            Checkpointing::Periodic => matches!(self.sequence, Sequence::Effect | Sequence::Stamped),
            Checkpointing::ParallelMax | Checkpointing::ParallelWatermark => self.sequence == Sequence::Effect,
        };
        // Guards live in transactions (the atomic and the read-process-write sequences); poison
        // handling only in the plain atomic one, fenced.
        let atomic = self.sequence.is_atomic();
        let guard_fits = self.guard == Guard::Blind
            || atomic
            || (self.sequence == Sequence::Transactional && self.guard == Guard::Fenced);
        let poison_fits = self.poison == PoisonPolicy::Unhandled
            || (self.sequence == Sequence::Atomic && self.guard == Guard::Fenced);
        let reset_fits = self.out_of_range != OutOfRangePolicy::Earliest || self.guard == Guard::Fenced;
        // A set replaces a value: it is an effect write of its own (blind) or stamped.
        let set_fits =
            self.effect == EffectKind::Add || matches!(self.sequence, Sequence::EffectThenCommit | Sequence::Stamped);
        let dedup_fits = self.dedup_key == DedupKey::PartitionOffset || self.sequence == Sequence::DedupedThenCommit;
        // The broker's check is on a commit of the record's own sequence, per record.
        let commit_fence_fits = self.commit_fence == CommitFence::Blind
            || (self.checkpoint == Checkpointing::PerRecord
                && self.sequence.table().iter().any(|&(_, write)| write == Write::CommitOffset));
        // The forming coordinator is the broker's: its rows commit to the broker, and take no
        // transactional partition (a take is the txn rows').
        let coordinator_fits = self.coordinator == Coordinator::Atomic
            || (self.commit_fence == CommitFence::Generation && self.sequence != Sequence::Transactional);
        checkpoint_fits
            && guard_fits
            && poison_fits
            && reset_fits
            && set_fits
            && dedup_fits
            && commit_fence_fits
            && coordinator_fits
    }
}

/// The families of rows, by what they are about: the order README and `check --help` list them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Family {
    /// How a consumer orders its effect and its progress, and guards them.
    Core,
    /// A record whose effect fails every time.
    Poison,
    /// The producer's retry of a lost acknowledgement.
    Producer,
    /// Retention past a group's checkpoint.
    Retention,
    /// A log that lost acknowledged records.
    LogLoss,
    /// A replicated partition's acknowledgements and elections.
    Replication,
    /// Read-process-write transactions.
    Transactions,
    /// Effects outside the store: emails, sets, dedup scope, a second store.
    External,
    /// The offset committed to a Kafka broker, with its generation check.
    Broker,
}

impl Family {
    /// Every family, in listing order.
    pub const ALL: [Family; 9] = [
        Family::Core,
        Family::Poison,
        Family::Producer,
        Family::Retention,
        Family::LogLoss,
        Family::Replication,
        Family::Transactions,
        Family::External,
        Family::Broker,
    ];

    /// The family's name in a listing.
    pub fn name(self) -> &'static str {
        match self {
            Family::Core => "core",
            Family::Poison => "poison records",
            Family::Producer => "producer",
            Family::Retention => "retention",
            Family::LogLoss => "log loss",
            Family::Replication => "replication",
            Family::Transactions => "transactions",
            Family::External => "external effects",
            Family::Broker => "Kafka broker",
        }
    }
}

impl Strategy {
    /// The family a row belongs to.
    pub fn family(self) -> Family {
        match self {
            Strategy::CommitFirst
            | Strategy::EffectFirst
            | Strategy::PeriodicCommit
            | Strategy::OffsetStamp
            | Strategy::DedupSeparate
            | Strategy::DedupAtomic
            | Strategy::Atomic
            | Strategy::AtomicFenced
            | Strategy::AtomicCas
            | Strategy::ParallelMax
            | Strategy::ParallelWatermark
            | Strategy::FencedStoredEpoch => Family::Core,
            Strategy::AtomicDlq | Strategy::SkipPoison | Strategy::RetryForever => Family::Poison,
            Strategy::ProducerIdempotent | Strategy::ProducerNewSequence => Family::Producer,
            Strategy::ResetEarliest | Strategy::ResetSilent | Strategy::ResetFail => Family::Retention,
            Strategy::LogLossRefuse | Strategy::LogLossUnchecked | Strategy::LogLossRefuseAll => Family::LogLoss,
            Strategy::AcksLeader | Strategy::AcksAll | Strategy::AcksAllMinIsr1 | Strategy::AcksAllMinIsr1Clean => {
                Family::Replication
            }
            Strategy::TxnFenced | Strategy::TxnUnfenced | Strategy::TxnReadUncommitted => Family::Transactions,
            Strategy::AtomicPlusEmail
            | Strategy::EmailIdempotencyKey
            | Strategy::EmailNoKey
            | Strategy::BlindSet
            | Strategy::SetIfNewer
            | Strategy::DedupOffsetOnly
            | Strategy::DualWrite
            | Strategy::Outbox => Family::External,
            Strategy::BrokerEffectFirst | Strategy::BrokerCommitFirst | Strategy::BrokerRelaxed => Family::Broker,
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Strategy::ALL.iter().copied().find(|s| s.name() == text).ok_or_else(|| {
            let names: Vec<&str> = Strategy::ALL.iter().map(|s| s.name()).collect();
            format!("unknown strategy '{text}' (expected one of: {})", names.join(", "))
        })
    }
}

/// Serialised by name, so that traces and JSON reports spell strategies as the CLI does.
impl Serialize for Strategy {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Strategy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_of_the_table_is_a_combination_the_model_implements() {
        for strategy in Strategy::ALL {
            assert!(strategy.rules().is_coherent(), "{strategy}: {:?}", strategy.rules());
        }
    }

    /// Every family has a row, and listing the rows by family (`check --help`) names each row
    /// once: `family` is an exhaustive match, so a new row has one.
    #[test]
    fn every_family_has_rows_and_every_row_one_family() {
        let listed: Vec<Strategy> =
            Family::ALL.iter().flat_map(|&f| Strategy::ALL.into_iter().filter(move |s| s.family() == f)).collect();
        assert_eq!(listed.len(), Strategy::ALL.len());
        for family in Family::ALL {
            assert!(Strategy::ALL.iter().any(|s| s.family() == family), "{family:?} has no row");
        }
    }

    #[test]
    fn names_round_trip_and_are_unique() {
        for strategy in Strategy::ALL {
            assert_eq!(strategy.name().parse::<Strategy>(), Ok(strategy));
            let json = serde_json::to_string(&strategy).unwrap();
            assert_eq!(json, format!("\"{}\"", strategy.name()));
            assert_eq!(serde_json::from_str::<Strategy>(&json).unwrap(), strategy);
        }
        let names: std::collections::BTreeSet<_> = Strategy::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(names.len(), Strategy::ALL.len());
    }

    #[test]
    fn every_stage_a_sequence_reaches_has_a_next_write() {
        // The stages each sequence leaves a record in after a write (poison stages aside).
        for strategy in Strategy::ALL {
            let rules = strategy.rules();
            assert!(rules.next_write(Stage::Fetched).is_some(), "{strategy}: nothing follows a fetch");
            if rules.poison == PoisonPolicy::DeadLetter || rules.poison == PoisonPolicy::Skip {
                assert!(rules.next_write(Stage::Exhausted).is_some(), "{strategy}: an exhausted record is stuck");
            }
        }
    }
}
