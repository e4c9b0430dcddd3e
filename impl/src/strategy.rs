//! The consumer strategies (spec.md §5), the rules each one follows, and the steps an owner
//! takes, named as in the model.
//!
//! Each strategy has one home: its variant and CLI name in `strategies!` below, and its row of
//! `Strategy::rules`, the table of what it writes per batch (`Sequence`), how its transaction
//! guards itself (`GuardKind`), when it checkpoints (`Checkpointing`) and what it does with a
//! poison record (`PoisonPolicy`). The owner (`crate::owner`) reads only the rules, never the
//! strategy, so a new strategy is a new row, and a new kind of rule is a compile error at
//! every match that has to decide about it.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Defines a fieldless enum whose variants are listed once, each with its CLI name, and derives
/// from that one list `ALL` (every variant, in order: it cannot miss one), `name`, `from_name`
/// and `Display`. The serde name of a variant is its CLI name.
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        pub enum $enum:ident {
            $( $(#[$variant_meta:meta])* $variant:ident => $name:literal, )+
        }
    ) => {
        $(#[$meta])*
        pub enum $enum {
            $( $(#[$variant_meta])* #[serde(rename = $name)] $variant, )+
        }

        impl $enum {
            /// Every variant, in declaration order.
            pub const ALL: [$enum; [$($name),+].len()] = [$($enum::$variant),+];

            pub const fn name(self) -> &'static str {
                match self {
                    $( $enum::$variant => $name, )+
                }
            }

            /// The variant whose name is `text`.
            pub fn from_name(text: &str) -> Option<$enum> {
                $enum::ALL.into_iter().find(|variant| variant.name() == text)
            }
        }

        impl fmt::Display for $enum {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

/// `text` with every control character escaped (`\n`, `\u{7f}`, ...): an error message that
/// quotes input stays one line whatever the input held.
pub fn printable(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

named_enum! {
    /// How a consumer orders its durable writes for one record. The names are spec.md's; what
    /// each one does is its row of `Strategy::rules`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    pub enum Strategy {
        CommitFirst => "commit-first",
        EffectFirst => "effect-first",
        PeriodicCommit => "periodic-commit",
        OffsetStamp => "offset-stamp",
        DedupSeparate => "dedup-separate",
        DedupAtomic => "dedup-atomic",
        Atomic => "atomic",
        AtomicFenced => "atomic-fenced",
        AtomicCas => "atomic-cas",
        ParallelMax => "parallel-max",
        ParallelWatermark => "parallel-watermark",
        AtomicDlq => "atomic-dlq",
        SkipPoison => "skip-poison",
        RetryForever => "retry-forever",
        /// Read-process-write (spec.md §3.3, §10): per batch an output record in a transaction
        /// of the partition's transactional id, fenced by its producer epoch, then the commit.
        TxnFenced => "txn-fenced",
        /// The trap: the same transactions without producer identity (MiniKafka's transaction
        /// path): nothing is fenced and no take aborts an earlier epoch's transaction.
        TxnUnfenced => "txn-unfenced",
        /// The trap (spec.md §3.4): atomic-fenced, then the record's email sent after the
        /// store's commit: a crash between them loses the email.
        AtomicPlusEmail => "atomic-plus-email",
        /// The email first, carrying the record's identity (group, partition, offset) as its
        /// idempotency key, then atomic-fenced: the provider drops a repeat.
        EmailIdempotencyKey => "email-idempotency-key",
        /// The trap: the email first without a key, then atomic-fenced: a replay emails again.
        EmailNoKey => "email-no-key",
        /// The trap: `value := v(o) = o + 1` written blindly (`apply-effect`), then the commit:
        /// a replayed or zombie older set overwrites a newer value.
        BlindSet => "blind-set",
        /// `value := v(o)` with the offset stamp, only when newer (offset-stamp's guard);
        /// periodic checkpoints.
        SetIfNewer => "set-if-newer",
        /// The trap: dedup-atomic whose processed ids are keyed by the offset alone, so another
        /// partition's record at the same offset is skipped as a duplicate.
        DedupOffsetOnly => "dedup-offset-only",
        /// The trap: atomic-fenced with the record's fact, then a separate `write-index` of the
        /// fact to the index: a crash between them leaves the index without it for good.
        DualWrite => "dual-write",
        /// atomic-fenced with the fact and an outbox row in the same transaction; a relay
        /// (`consumer relay`) copies outbox rows to the index idempotently.
        Outbox => "outbox",
        /// effect-first with the offset committed as a Kafka broker stores it: the commit is
        /// refused unless the lease's epoch (the group's generation) is the stored one; the
        /// effect is not fenced.
        BrokerEffectFirst => "broker-effect-first",
        /// commit-first with the broker's fenced commit.
        BrokerCommitFirst => "broker-commit-first",
    }
}

/// Everything the owner needs to know about a strategy: one row of `Strategy::rules`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    pub sequence: Sequence,
    pub guard: GuardKind,
    /// What checks a separate `commit-offset` write.
    pub commit_fence: CommitFence,
    pub checkpoint: Checkpointing,
    pub poison: PoisonPolicy,
    /// What a record's effect does to its group's effect row.
    pub effect: EffectKind,
    /// What identifies a processed record (the dedup sequences).
    pub dedup_key: DedupKey,
}

/// What the effect of a record is (spec.md §3.4; the model's `EffectKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EffectKind {
    /// `total += delta`.
    Add,
    /// `value := v(o) = o + 1`: the record's own value replaces the previous one (the total
    /// stays as it is). A batch's set is its last record's.
    Set,
}

/// What identifies a processed record in the dedup table (spec.md §3.4; the model's
/// `DedupKey`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DedupKey {
    /// (partition, offset): one record of the group.
    PartitionOffset,
    /// The trap: the offset alone, shared by every partition (stored as partition 0's id, the
    /// model's `(0, o)`).
    OffsetOnly,
}

/// The durable writes a fetched batch goes through, in order (spec.md §5's "per-record
/// writes"; `--batch 1` is the model's record). `Rules::next_write` spells each one out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sequence {
    /// `commit-offset(end)`, then `apply-effect`.
    CommitThenEffect,
    /// `apply-effect`, then `commit-offset(end)`.
    EffectThenCommit,
    /// `apply-effect` only; the checkpointing commits (periodic or parallel).
    EffectOnly,
    /// `apply-effect` (skipped when the ids are processed), `insert-processed`, then
    /// `commit-offset(end)`: the dedup metadata apart from the effect.
    EffectRecordCommit,
    /// `apply-stamped` only (effect and stamp in one statement); the checkpointing commits.
    Stamped,
    /// `apply-deduped` (effect and ids in one transaction), then `commit-offset(end)`.
    DedupedThenCommit,
    /// `apply-atomic`: the effect and `next_offset := end` in one transaction, under the guard.
    /// A poison record's `apply-atomic` fails; the poison policy says what comes next.
    Atomic,
    /// Read-process-write: `produce-output` (the batch's output records appended to the output
    /// partition in the open transaction), then `commit-txn` (one store transaction: the
    /// effect, `next_offset := end` and the transaction committed; then its commit marker),
    /// both under the guard (`Fenced` or `Blind`).
    Transactional,
    /// `apply-atomic`, then `send-email` (the batch's emails, after the store's commit; stage
    /// `Stored` between them).
    AtomicThenEmail,
    /// `send-email` (with the records' identities as idempotency keys, or none), then
    /// `apply-atomic` (stage `Emailed` between them).
    EmailThenAtomic { key: bool },
    /// `apply-atomic` (the records' facts included), then a separate `write-index` of the facts
    /// to the index (stage `Stored` between them).
    AtomicThenIndex,
    /// `apply-atomic` with the facts and their outbox rows in the same transaction; the relay
    /// (`crate::external::Relay`), not the owner, copies outbox rows to the index.
    AtomicWithOutbox,
}

impl Sequence {
    /// The per-stage table of the sequence (the model's `Sequence::table`): for each stage a
    /// batch rests in, its next durable write. A stage absent from it is one no batch ever rests
    /// in under this sequence. (The poison stage `Exhausted` is the poison policy's.)
    pub const fn table(self) -> &'static [(Stage, BatchWrite)] {
        use BatchWrite as W;
        use Stage::{Committed, EffectApplied, Emailed, Fetched, Produced, Recorded, Stored};
        match self {
            Sequence::CommitThenEffect => &[(Fetched, W::CommitOffset), (Committed, W::ApplyEffect)],
            Sequence::EffectThenCommit => &[(Fetched, W::ApplyEffect), (EffectApplied, W::CommitOffset)],
            Sequence::EffectOnly => &[(Fetched, W::ApplyEffect)],
            Sequence::EffectRecordCommit => {
                &[(Fetched, W::ApplyEffect), (EffectApplied, W::InsertProcessed), (Recorded, W::CommitOffset)]
            }
            Sequence::Stamped => &[(Fetched, W::ApplyStamped)],
            Sequence::DedupedThenCommit => &[(Fetched, W::ApplyDeduped), (EffectApplied, W::CommitOffset)],
            Sequence::Atomic | Sequence::AtomicWithOutbox => &[(Fetched, W::ApplyAtomic)],
            Sequence::Transactional => &[(Fetched, W::ProduceOutput), (Produced, W::CommitTxn)],
            Sequence::AtomicThenEmail => &[(Fetched, W::ApplyAtomic), (Stored, W::SendEmail)],
            Sequence::EmailThenAtomic { .. } => &[(Fetched, W::SendEmail), (Emailed, W::ApplyAtomic)],
            Sequence::AtomicThenIndex => &[(Fetched, W::ApplyAtomic), (Stored, W::WriteIndex)],
        }
    }

    /// Whether the effect and the next offset are written by one transaction (`apply-atomic`).
    pub const fn is_atomic(self) -> bool {
        match self {
            Sequence::Atomic
            | Sequence::AtomicThenEmail
            | Sequence::EmailThenAtomic { .. }
            | Sequence::AtomicThenIndex
            | Sequence::AtomicWithOutbox => true,
            Sequence::CommitThenEffect
            | Sequence::EffectThenCommit
            | Sequence::EffectOnly
            | Sequence::EffectRecordCommit
            | Sequence::Stamped
            | Sequence::DedupedThenCommit
            | Sequence::Transactional => false,
        }
    }

    /// Whether the batch's email goes out, and with or without the records' identities as
    /// idempotency keys: `None` for the sequences that send none.
    pub const fn email_key(self) -> Option<bool> {
        match self {
            Sequence::AtomicThenEmail => Some(false),
            Sequence::EmailThenAtomic { key } => Some(key),
            Sequence::CommitThenEffect
            | Sequence::EffectThenCommit
            | Sequence::EffectOnly
            | Sequence::EffectRecordCommit
            | Sequence::Stamped
            | Sequence::DedupedThenCommit
            | Sequence::Atomic
            | Sequence::Transactional
            | Sequence::AtomicThenIndex
            | Sequence::AtomicWithOutbox => None,
        }
    }

    /// Whether the email goes out before the store's transaction (`apply-atomic` follows it).
    pub const fn is_email_first(self) -> bool {
        matches!(self, Sequence::EmailThenAtomic { .. })
    }

    /// Whether the owner writes to the index itself (`write-index`).
    pub const fn writes_index(self) -> bool {
        match self {
            Sequence::AtomicThenIndex => true,
            Sequence::CommitThenEffect
            | Sequence::EffectThenCommit
            | Sequence::EffectOnly
            | Sequence::EffectRecordCommit
            | Sequence::Stamped
            | Sequence::DedupedThenCommit
            | Sequence::Atomic
            | Sequence::Transactional
            | Sequence::AtomicThenEmail
            | Sequence::EmailThenAtomic { .. }
            | Sequence::AtomicWithOutbox => false,
        }
    }
}

/// What `apply-atomic` (or the transactional writes) checks before it writes (spec.md §5,
/// §3.3). The poison writes (the counted attempt, `dead-letter`) and `reset-offset` are fenced
/// whatever the strategy: the store takes the lease epoch for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardKind {
    /// Nothing: the next offset is written blindly (transactional: no producer identity, so
    /// nothing is fenced and a take aborts nothing).
    Blind,
    /// The lease epoch must equal the stored epoch, else the transaction aborts (`Fenced`)
    /// (transactional: the epoch is the producer epoch of the partition's transactional id, and
    /// every take aborts the open transactions of earlier epochs).
    Fenced,
    /// Compare-and-set on the stored next offset: records below it are skipped.
    Cas,
}

/// What a separate `commit-offset` write checks (the model's `CommitFence`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitFence {
    /// Nothing: the consumer's own offset row, written blindly.
    Blind,
    /// The broker's check, emulated in the store: the lease epoch (the group's generation) must
    /// equal the stored epoch, else the commit is refused (`Fenced`) and the owner drops the
    /// partition. Only the offset is checked; the effect is written apart, unfenced.
    Fenced,
}

/// When the checkpoint (`commit-offset`) is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checkpointing {
    /// With every batch: a write of its sequence, or inside its atomic transaction.
    PerBatch,
    /// Once `--commit-every` records are finished since the last checkpoint (required before
    /// the next fetch), or earlier when the owner has caught up with the log end.
    Periodic,
    /// Up to `--inflight` records at once, completed in any order; the commit target is
    /// computed from the completed offsets whenever it moves.
    Parallel(ParallelCommit),
}

/// The commit target of the parallel strategies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParallelCommit {
    /// The highest completed offset + 1: the trap, a single offset stands for a set.
    Max,
    /// The end of the contiguous completed prefix.
    Watermark,
}

/// What the owner does with a poison record, whose effect fails every time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoisonPolicy {
    /// Fetching one is an error (`BadPayload`): the strategy never meets a poison record.
    NotHandled,
    /// Count each failed attempt in the same transaction; after `--max-attempts` the record
    /// is exhausted and `dead-letter` moves it to the dead-letter table.
    DeadLetter,
    /// The trap: give up at the first failure, then `commit-offset` past it, leaving no trace.
    Skip,
    /// The trap: try again for ever; the partition is stuck.
    RetryForever,
}

impl Strategy {
    /// The per-strategy table: spec.md §5, one row per strategy.
    pub const fn rules(self) -> Rules {
        use Checkpointing::{Parallel, PerBatch, Periodic};
        use GuardKind::{Blind, Cas, Fenced};
        use ParallelCommit::{Max, Watermark};
        use PoisonPolicy::{DeadLetter, NotHandled, RetryForever, Skip};
        use Sequence::{
            Atomic, AtomicThenEmail, AtomicThenIndex, AtomicWithOutbox, CommitThenEffect, DedupedThenCommit,
            EffectOnly, EffectRecordCommit, EffectThenCommit, EmailThenAtomic, Stamped, Transactional,
        };
        match self {
            Strategy::CommitFirst => row(CommitThenEffect, Blind, PerBatch, NotHandled),
            Strategy::EffectFirst => row(EffectThenCommit, Blind, PerBatch, NotHandled),
            Strategy::PeriodicCommit => row(EffectOnly, Blind, Periodic, NotHandled),
            Strategy::OffsetStamp => row(Stamped, Blind, Periodic, NotHandled),
            Strategy::DedupSeparate => row(EffectRecordCommit, Blind, PerBatch, NotHandled),
            Strategy::DedupAtomic => row(DedupedThenCommit, Blind, PerBatch, NotHandled),
            Strategy::Atomic => row(Atomic, Blind, PerBatch, NotHandled),
            Strategy::AtomicFenced => row(Atomic, Fenced, PerBatch, NotHandled),
            Strategy::AtomicCas => row(Atomic, Cas, PerBatch, NotHandled),
            Strategy::ParallelMax => row(EffectOnly, Blind, Parallel(Max), NotHandled),
            Strategy::ParallelWatermark => row(EffectOnly, Blind, Parallel(Watermark), NotHandled),
            Strategy::AtomicDlq => row(Atomic, Fenced, PerBatch, DeadLetter),
            Strategy::SkipPoison => row(Atomic, Fenced, PerBatch, Skip),
            Strategy::RetryForever => row(Atomic, Fenced, PerBatch, RetryForever),
            Strategy::TxnFenced => row(Transactional, Fenced, PerBatch, NotHandled),
            Strategy::TxnUnfenced => row(Transactional, Blind, PerBatch, NotHandled),
            Strategy::AtomicPlusEmail => row(AtomicThenEmail, Fenced, PerBatch, NotHandled),
            Strategy::EmailIdempotencyKey => row(EmailThenAtomic { key: true }, Fenced, PerBatch, NotHandled),
            Strategy::EmailNoKey => row(EmailThenAtomic { key: false }, Fenced, PerBatch, NotHandled),
            Strategy::BlindSet => {
                Rules { effect: EffectKind::Set, ..row(EffectThenCommit, Blind, PerBatch, NotHandled) }
            }
            Strategy::SetIfNewer => Rules { effect: EffectKind::Set, ..row(Stamped, Blind, Periodic, NotHandled) },
            Strategy::DedupOffsetOnly => {
                Rules { dedup_key: DedupKey::OffsetOnly, ..row(DedupedThenCommit, Blind, PerBatch, NotHandled) }
            }
            Strategy::DualWrite => row(AtomicThenIndex, Fenced, PerBatch, NotHandled),
            Strategy::Outbox => row(AtomicWithOutbox, Fenced, PerBatch, NotHandled),
            Strategy::BrokerEffectFirst => {
                Rules { commit_fence: CommitFence::Fenced, ..row(EffectThenCommit, Blind, PerBatch, NotHandled) }
            }
            Strategy::BrokerCommitFirst => {
                Rules { commit_fence: CommitFence::Fenced, ..row(CommitThenEffect, Blind, PerBatch, NotHandled) }
            }
        }
    }
}

/// A row whose effect adds the delta and whose dedup ids (if any) name the record.
const fn row(sequence: Sequence, guard: GuardKind, checkpoint: Checkpointing, poison: PoisonPolicy) -> Rules {
    Rules {
        sequence,
        guard,
        commit_fence: CommitFence::Blind,
        checkpoint,
        poison,
        effect: EffectKind::Add,
        dedup_key: DedupKey::PartitionOffset,
    }
}

/// The table's invariants hold for every row, or the crate does not compile.
const _: () = {
    let mut index = 0;
    while index < Strategy::ALL.len() {
        Strategy::ALL[index].rules().check();
        index += 1;
    }
};

impl Rules {
    /// The invariants of a row, asserted at compile time for the whole table.
    const fn check(self) {
        // Only the atomic transaction reads a guard, and the transactional writes the fence.
        match self.guard {
            GuardKind::Blind => {}
            GuardKind::Fenced => assert!(
                self.sequence.is_atomic() || matches!(self.sequence, Sequence::Transactional),
                "a fence needs an apply-atomic or the transactional sequence"
            ),
            GuardKind::Cas => assert!(self.sequence.is_atomic(), "a CAS needs an apply-atomic sequence"),
        }
        // The broker's check is on a commit of the batch's own sequence.
        if let CommitFence::Fenced = self.commit_fence {
            assert!(
                matches!(self.sequence, Sequence::EffectThenCommit | Sequence::CommitThenEffect)
                    && matches!(self.checkpoint, Checkpointing::PerBatch),
                "a fenced commit needs a per-batch commit-offset in the sequence"
            );
        }
        // A poison record fails inside the plain `apply-atomic`, and its writes are fenced.
        if self.poison.is_handled() {
            assert!(matches!(self.sequence, Sequence::Atomic), "poison handling needs the apply-atomic sequence");
            assert!(matches!(self.guard, GuardKind::Fenced), "poison handling needs the fenced guard");
        }
        // A sequence without a commit of its own needs a checkpointing that commits, and the
        // other way round.
        let commits_per_batch = match self.sequence {
            Sequence::EffectOnly | Sequence::Stamped => false,
            Sequence::CommitThenEffect
            | Sequence::EffectThenCommit
            | Sequence::EffectRecordCommit
            | Sequence::DedupedThenCommit
            | Sequence::Atomic
            | Sequence::Transactional
            | Sequence::AtomicThenEmail
            | Sequence::EmailThenAtomic { .. }
            | Sequence::AtomicThenIndex
            | Sequence::AtomicWithOutbox => true,
        };
        let checkpoints_per_batch = match self.checkpoint {
            Checkpointing::PerBatch => true,
            Checkpointing::Periodic | Checkpointing::Parallel(_) => false,
        };
        assert!(commits_per_batch == checkpoints_per_batch, "per-batch checkpointing needs a commit in the sequence");
        // The parallel bookkeeping (completed offsets) follows one effect write per record.
        if self.checkpoint.is_parallel() {
            assert!(matches!(self.sequence, Sequence::EffectOnly), "parallel checkpointing needs apply-effect only");
        }
        // A set replaces a value: it is an effect write of its own (blind) or stamped.
        match self.effect {
            EffectKind::Add => {}
            EffectKind::Set => assert!(
                matches!(self.sequence, Sequence::EffectThenCommit | Sequence::Stamped),
                "a set is a blind apply-effect or a stamped one"
            ),
        }
        match self.dedup_key {
            DedupKey::PartitionOffset => {}
            DedupKey::OffsetOnly => assert!(
                matches!(self.sequence, Sequence::DedupedThenCommit),
                "only apply-deduped has a dedup key to scope"
            ),
        }
    }

    /// The durable write a batch resting in `stage` waits for under these rules, or `None` when
    /// no batch ever rests in that stage under them (the owner treats that as a broken
    /// invariant). The stage a write leaves the batch in is the owner's bookkeeping.
    pub fn next_write(self, stage: Stage) -> Option<BatchWrite> {
        match stage {
            Stage::Exhausted => match self.poison {
                PoisonPolicy::DeadLetter => Some(BatchWrite::DeadLetter),
                // The trap: the checkpoint moves past the failing record with no trace of it.
                PoisonPolicy::Skip => Some(BatchWrite::CommitOffset),
                // Retry-forever never gives up on a record; the others never fetch a poison one.
                PoisonPolicy::RetryForever | PoisonPolicy::NotHandled => None,
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
}

impl Checkpointing {
    /// Whether the owner holds several records at once and completes them in any order.
    pub const fn is_parallel(self) -> bool {
        match self {
            Checkpointing::Parallel(_) => true,
            Checkpointing::PerBatch | Checkpointing::Periodic => false,
        }
    }
}

impl PoisonPolicy {
    /// Whether the strategy fetches poison records at all (the others refuse them).
    pub const fn is_handled(self) -> bool {
        match self {
            PoisonPolicy::NotHandled => false,
            PoisonPolicy::DeadLetter | PoisonPolicy::Skip | PoisonPolicy::RetryForever => true,
        }
    }
}

impl FromStr for Strategy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Strategy::from_name(text).ok_or_else(|| {
            let names: Vec<&str> = Strategy::ALL.iter().map(|s| s.name()).collect();
            format!("unknown strategy '{}' (expected one of: {})", printable(text), names.join(", "))
        })
    }
}

/// Where a fetched batch is inside its strategy's sequence of writes (the model's `Stage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// No durable write yet.
    Fetched,
    /// Commit-first: the offset is committed, the effect pending.
    Committed,
    /// The effect (or dedup) transaction landed; the next write is pending.
    EffectApplied,
    /// Dedup-separate: the ids are inserted, the commit pending.
    Recorded,
    /// A poison record the owner gave up on: it is dead-lettered (atomic-dlq) or skipped next.
    Exhausted,
    /// Read-process-write: the batch's output records are in the open transaction of the
    /// output partition; `commit-txn` is next.
    Produced,
    /// atomic-plus-email, dual-write: `apply-atomic` committed the effect and the next offset
    /// (and the facts); the email (`send-email`) or the index write (`write-index`) is next.
    Stored,
    /// email-idempotency-key, email-no-key: the provider received the batch's emails;
    /// `apply-atomic` is next.
    Emailed,
}

/// A durable write a fetched batch waits for: what `Rules::next_write` names. Each is a step
/// kind; the lease's own steps (`fetch`, `reset-offset`, `fail-out-of-range`) are not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchWrite {
    ApplyEffect,
    InsertProcessed,
    CommitOffset,
    ApplyStamped,
    ApplyDeduped,
    ApplyAtomic,
    DeadLetter,
    ProduceOutput,
    CommitTxn,
    SendEmail,
    WriteIndex,
}

impl BatchWrite {
    pub const fn kind(self) -> StepKind {
        match self {
            BatchWrite::ApplyEffect => StepKind::ApplyEffect,
            BatchWrite::InsertProcessed => StepKind::InsertProcessed,
            BatchWrite::CommitOffset => StepKind::CommitOffset,
            BatchWrite::ApplyStamped => StepKind::ApplyStamped,
            BatchWrite::ApplyDeduped => StepKind::ApplyDeduped,
            BatchWrite::ApplyAtomic => StepKind::ApplyAtomic,
            BatchWrite::DeadLetter => StepKind::DeadLetter,
            BatchWrite::ProduceOutput => StepKind::ProduceOutput,
            BatchWrite::CommitTxn => StepKind::CommitTxn,
            BatchWrite::SendEmail => StepKind::SendEmail,
            BatchWrite::WriteIndex => StepKind::WriteIndex,
        }
    }

    /// The step for the batch `[start, end)` of `partition`: it names the batch's first record,
    /// but a commit names the next offset, past the batch.
    pub const fn step(self, partition: u32, start: u64, end: u64) -> Step {
        let offset = match self {
            BatchWrite::CommitOffset => end,
            BatchWrite::ApplyEffect
            | BatchWrite::InsertProcessed
            | BatchWrite::ApplyStamped
            | BatchWrite::ApplyDeduped
            | BatchWrite::ApplyAtomic
            | BatchWrite::DeadLetter
            | BatchWrite::ProduceOutput
            | BatchWrite::CommitTxn
            | BatchWrite::SendEmail
            | BatchWrite::WriteIndex => start,
        };
        Step { kind: self.kind(), partition, offset }
    }
}

named_enum! {
    /// What an owner does when retention removed the next record it would fetch: its lease has
    /// no record in flight and its position is below the log start (spec.md §3, §5, the reset
    /// rows).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum OutOfRange {
        /// `fail-out-of-range`: write nothing, stop working on the partition with an error.
        #[default]
        Fail => "fail",
        /// `reset-offset`: one fenced transaction recording the reset (from the stored next
        /// offset to the log start) and moving the next offset to the log start.
        Earliest => "earliest",
        /// Test only, hidden from `--help`: the trap the model refutes (the reset-silent row). A
        /// blind `commit-offset` of the log start jumps past the removed records and leaves no
        /// trace of them, so the property `reset-accounted` fails.
        EarliestSilent => "earliest-silent",
    }
}

impl FromStr for OutOfRange {
    type Err = String;

    /// Parses a policy name. The error lists only the documented names: `earliest-silent`
    /// exists for the tests that show the trap.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        OutOfRange::from_name(text)
            .ok_or_else(|| format!("unknown out-of-range policy '{}' (expected fail or earliest)", printable(text)))
    }
}

named_enum! {
    /// What a started owner's epoch is when it takes the partitions the store assigns to it
    /// (spec.md §3 `restart`, §10; the model's `StartPolicy`, spelled the same).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum StartPolicy {
        /// Every start claims a new epoch for the partitions it takes, in one transaction, so
        /// an earlier incarnation still running is a zombie its next fenced write finds out.
        #[default]
        ClaimEpoch => "claim",
        /// Test only (the hidden `--start-epoch stored`): the trap the model refutes (the
        /// fenced-stored-epoch row). The owner resumes at the stored epoch, the same as an
        /// earlier incarnation's, so two live incarnations are never fenced.
        StoredEpoch => "stored",
    }
}

impl FromStr for StartPolicy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        StartPolicy::from_name(text)
            .ok_or_else(|| format!("unknown start policy '{}' (expected claim or stored)", printable(text)))
    }
}

named_enum! {
    /// What an owner does when the log lost records its group had consumed (spec.md §10, log
    /// losses): the model's `LogCheck`, the hidden test-only `--log-check` flag.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum LogCheck {
        /// `refuse-ahead`: with nothing in flight, an owner whose group's stored next offset or
        /// own position is past the log end refuses the partition, writing nothing.
        #[default]
        RefuseAhead => "refuse-ahead",
        /// Test only, the trap: the owner compares nothing (the behaviour before the check),
        /// so records appended again below the group's checkpoint are skipped.
        Unchecked => "unchecked",
        /// Test only, the trap: the owner refuses whenever the partition is damaged, even
        /// when its group is behind the loss and nothing is at stake.
        RefuseAll => "refuse-all",
    }
}

impl FromStr for LogCheck {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        LogCheck::from_name(text).ok_or_else(|| {
            format!("unknown log check '{}' (expected refuse-ahead, unchecked or refuse-all)", printable(text))
        })
    }
}

named_enum! {
    /// The kind of an owner step: the model's owner actions, one durable write each (but
    /// `fetch`, `fail-out-of-range` and `refuse-ahead`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    pub enum StepKind {
        Fetch => "fetch",
        ApplyEffect => "apply-effect",
        InsertProcessed => "insert-processed",
        CommitOffset => "commit-offset",
        ApplyStamped => "apply-stamped",
        ApplyDeduped => "apply-deduped",
        ApplyAtomic => "apply-atomic",
        DeadLetter => "dead-letter",
        ResetOffset => "reset-offset",
        FailOutOfRange => "fail-out-of-range",
        RefuseAhead => "refuse-ahead",
        ProduceOutput => "produce-output",
        CommitTxn => "commit-txn",
        /// The batch's emails to the stand-in provider (`crate::external::EmailProvider`),
        /// outside the store's transaction.
        SendEmail => "send-email",
        /// dual-write: the batch's facts to the index (`crate::external::Index`), in a write of
        /// its own.
        WriteIndex => "write-index",
    }
}

named_enum! {
    /// The durable writes of an owner step whose transaction checks the lease's epoch first
    /// (a fence: `StoreError::Fenced`, nothing written, when a newer epoch was claimed), one
    /// kind per check, on both backends. The test-only `owner::Mutation::NoFence` removes one
    /// kind's check at a time, so that each can be shown to be witnessed. The take of a
    /// transactional partition is fenced too, but is no owner step: it runs inside the step
    /// that claimed the epoch it is fenced by, so no sequence of model steps finds it stale.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    pub enum FencedWrite {
        /// `apply-atomic` of a record whose effect applies, under the fenced guard.
        ApplyAtomic => "apply-atomic",
        /// `apply-atomic` of a poison record: the failed attempt (counted in `attempts` by
        /// atomic-dlq; skip-poison and retry-forever write nothing, but check the epoch first).
        Attempts => "attempts",
        /// `dead-letter` (atomic-dlq).
        DeadLetter => "dead-letter",
        /// `reset-offset` (`--on-out-of-range earliest`).
        ResetOffset => "reset-offset",
        /// `produce-output`'s output section (txn-fenced).
        ProduceOutput => "produce-output",
        /// `commit-txn`'s store transaction, the commit point (txn-fenced).
        CommitTxn => "commit-txn",
        /// `commit-offset` under the broker's check (broker-effect-first, broker-commit-first).
        CommitOffset => "commit-offset",
    }
}

named_enum! {
    /// What a downstream reader of the output partitions sees (spec.md §3.3, §10): the model's
    /// `Isolation`, spelled the same (`consumer read-output --isolation`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum Isolation {
        /// Up to the last stable offset (the first record of a transaction still open); the
        /// records of aborted transactions are skipped.
        #[default]
        ReadCommitted => "read-committed",
        /// Every data record, committed, open or aborted.
        ReadUncommitted => "read-uncommitted",
    }
}

impl FromStr for Isolation {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Isolation::from_name(text).ok_or_else(|| {
            format!("unknown isolation '{}' (expected read-committed or read-uncommitted)", printable(text))
        })
    }
}

impl FromStr for StepKind {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        StepKind::from_name(text).ok_or_else(|| {
            let names: Vec<&str> = StepKind::ALL.iter().map(|s| s.name()).collect();
            format!("unknown step '{}' (expected one of: {})", printable(text), names.join(", "))
        })
    }
}

/// One owner step on a partition. `offset` is the first record the step concerns (its batch
/// starts there); for `commit-offset` it is the next offset being committed, for
/// `reset-offset` the log start the reset moves to, for `fail-out-of-range` the lease
/// position that retention passed, and for `refuse-ahead` the lease position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Step {
    pub kind: StepKind,
    pub partition: u32,
    pub offset: u64,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.kind.name(), self.partition, self.offset)
    }
}

impl FromStr for Step {
    type Err = String;

    /// Parses `KIND PARTITION OFFSET`, the worker protocol's command form.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let [kind, partition, offset] = words[..] else {
            return Err(format!("expected 'STEP PARTITION OFFSET', got '{}'", printable(text)));
        };
        Ok(Step {
            kind: kind.parse()?,
            partition: partition
                .parse()
                .map_err(|_| format!("partition '{}' is not a number", printable(partition)))?,
            offset: offset.parse().map_err(|_| format!("offset '{}' is not a number", printable(offset)))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Rules::check` refuses each kind of invalid row with its own reason. The table is
    /// checked at compile time, where no test sees the check act; here each assertion fails on
    /// a row that breaks it (and only it), and every row of the table passes at run time too.
    #[test]
    fn the_table_check_refuses_each_kind_of_invalid_row() {
        let fenced = Strategy::AtomicFenced.rules();
        let dlq = Strategy::AtomicDlq.rules();
        let blind = |sequence, checkpoint| Rules { sequence, checkpoint, guard: GuardKind::Blind, ..fenced };
        let cases = [
            (
                "a fence needs an apply-atomic or the transactional sequence",
                Rules { sequence: Sequence::EffectThenCommit, ..fenced },
            ),
            (
                "a CAS needs an apply-atomic sequence",
                Rules { sequence: Sequence::Transactional, guard: GuardKind::Cas, ..fenced },
            ),
            ("poison handling needs the apply-atomic sequence", Rules { sequence: Sequence::AtomicThenIndex, ..dlq }),
            ("poison handling needs the fenced guard", Rules { guard: GuardKind::Cas, ..dlq }),
            (
                "per-batch checkpointing needs a commit in the sequence",
                blind(Sequence::EffectOnly, Checkpointing::PerBatch),
            ),
            (
                "parallel checkpointing needs apply-effect only",
                blind(Sequence::Stamped, Checkpointing::Parallel(ParallelCommit::Max)),
            ),
            ("a set is a blind apply-effect or a stamped one", Rules { effect: EffectKind::Set, ..fenced }),
            ("only apply-deduped has a dedup key to scope", Rules { dedup_key: DedupKey::OffsetOnly, ..fenced }),
        ];
        for strategy in Strategy::ALL {
            strategy.rules().check();
        }
        for (expected, rules) in cases {
            let panic = std::panic::catch_unwind(|| rules.check()).expect_err(expected);
            let message = panic
                .downcast_ref::<&str>()
                .map(|text| text.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            assert_eq!(message, expected, "{rules:?}");
        }
    }

    #[test]
    fn every_name_parses_back_to_its_variant_and_names_are_distinct() {
        for strategy in Strategy::ALL {
            assert_eq!(strategy.name().parse::<Strategy>(), Ok(strategy));
            assert_eq!(serde_json::to_string(&strategy).unwrap(), format!("\"{strategy}\""));
        }
        for kind in StepKind::ALL {
            assert_eq!(kind.name().parse::<StepKind>(), Ok(kind));
        }
        for policy in OutOfRange::ALL {
            assert_eq!(policy.name().parse::<OutOfRange>(), Ok(policy));
        }
        for policy in StartPolicy::ALL {
            assert_eq!(policy.name().parse::<StartPolicy>(), Ok(policy));
        }
        for check in LogCheck::ALL {
            assert_eq!(check.name().parse::<LogCheck>(), Ok(check));
        }
        for isolation in Isolation::ALL {
            assert_eq!(isolation.name().parse::<Isolation>(), Ok(isolation));
        }
        let names: std::collections::BTreeSet<&str> = Strategy::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(names.len(), Strategy::ALL.len(), "two strategies share a name");
    }

    /// Every strategy starts a fetched batch with a write, and an exhausted poison record has a
    /// next write exactly when the policy gives up on it (dead-letter, skip).
    #[test]
    fn every_sequence_starts_and_only_giving_up_exhausts() {
        for strategy in Strategy::ALL {
            let rules = strategy.rules();
            assert!(rules.next_write(Stage::Fetched).is_some(), "{strategy}: a fetched batch has no next write");
            let gives_up = match rules.poison {
                PoisonPolicy::DeadLetter | PoisonPolicy::Skip => true,
                PoisonPolicy::NotHandled | PoisonPolicy::RetryForever => false,
            };
            assert_eq!(rules.next_write(Stage::Exhausted).is_some(), gives_up, "{strategy}");
        }
    }

    /// Each sequence's table spells spec.md §5's per-record writes, in order, starting at a
    /// fetched batch, and names each stage once.
    #[test]
    fn sequences_spell_the_spec_writes() {
        use StepKind::{
            ApplyAtomic, ApplyDeduped, ApplyEffect, ApplyStamped, CommitOffset, CommitTxn, InsertProcessed,
            ProduceOutput, SendEmail, WriteIndex,
        };
        let expected: [(Strategy, &[StepKind]); 26] = [
            (Strategy::CommitFirst, &[CommitOffset, ApplyEffect]),
            (Strategy::EffectFirst, &[ApplyEffect, CommitOffset]),
            (Strategy::PeriodicCommit, &[ApplyEffect]),
            (Strategy::OffsetStamp, &[ApplyStamped]),
            (Strategy::DedupSeparate, &[ApplyEffect, InsertProcessed, CommitOffset]),
            (Strategy::DedupAtomic, &[ApplyDeduped, CommitOffset]),
            (Strategy::Atomic, &[ApplyAtomic]),
            (Strategy::AtomicFenced, &[ApplyAtomic]),
            (Strategy::AtomicCas, &[ApplyAtomic]),
            (Strategy::ParallelMax, &[ApplyEffect]),
            (Strategy::ParallelWatermark, &[ApplyEffect]),
            (Strategy::AtomicDlq, &[ApplyAtomic]),
            (Strategy::SkipPoison, &[ApplyAtomic]),
            (Strategy::RetryForever, &[ApplyAtomic]),
            (Strategy::TxnFenced, &[ProduceOutput, CommitTxn]),
            (Strategy::TxnUnfenced, &[ProduceOutput, CommitTxn]),
            (Strategy::AtomicPlusEmail, &[ApplyAtomic, SendEmail]),
            (Strategy::EmailIdempotencyKey, &[SendEmail, ApplyAtomic]),
            (Strategy::EmailNoKey, &[SendEmail, ApplyAtomic]),
            (Strategy::BlindSet, &[ApplyEffect, CommitOffset]),
            (Strategy::SetIfNewer, &[ApplyStamped]),
            (Strategy::DedupOffsetOnly, &[ApplyDeduped, CommitOffset]),
            (Strategy::DualWrite, &[ApplyAtomic, WriteIndex]),
            (Strategy::Outbox, &[ApplyAtomic]),
            (Strategy::BrokerEffectFirst, &[ApplyEffect, CommitOffset]),
            (Strategy::BrokerCommitFirst, &[CommitOffset, ApplyEffect]),
        ];
        assert_eq!(expected.map(|(strategy, _)| strategy), Strategy::ALL, "one expectation per row, in order");
        for (strategy, writes) in expected {
            let table = strategy.rules().sequence.table();
            let walked: Vec<StepKind> = table.iter().map(|(_, write)| write.kind()).collect();
            assert_eq!(walked, writes, "{strategy}");
            assert_eq!(table[0].0, Stage::Fetched, "{strategy}: the table starts at a fetched batch");
            for (index, (stage, write)) in table.iter().enumerate() {
                assert!(table[..index].iter().all(|(earlier, _)| earlier != stage), "{strategy}: {stage:?} twice");
                assert_eq!(strategy.rules().next_write(*stage), Some(*write), "{strategy}: {stage:?}");
            }
        }
    }

    /// The seeds' edge-case rows (spec.md §3.4) differ from their base row in one rule each.
    #[test]
    fn the_edge_rows_change_one_rule_of_their_base() {
        let differs = |row: Strategy, base: Strategy| {
            let (row, base) = (row.rules(), base.rules());
            [
                row.sequence != base.sequence,
                row.guard != base.guard,
                row.commit_fence != base.commit_fence,
                row.checkpoint != base.checkpoint,
                row.poison != base.poison,
                row.effect != base.effect,
                row.dedup_key != base.dedup_key,
            ]
            .iter()
            .filter(|&&d| d)
            .count()
        };
        for (row, base) in [
            (Strategy::AtomicPlusEmail, Strategy::AtomicFenced),
            (Strategy::EmailIdempotencyKey, Strategy::AtomicFenced),
            (Strategy::EmailNoKey, Strategy::AtomicFenced),
            (Strategy::BlindSet, Strategy::EffectFirst),
            (Strategy::SetIfNewer, Strategy::OffsetStamp),
            (Strategy::DedupOffsetOnly, Strategy::DedupAtomic),
            (Strategy::DualWrite, Strategy::AtomicFenced),
            (Strategy::Outbox, Strategy::AtomicFenced),
            (Strategy::BrokerEffectFirst, Strategy::EffectFirst),
            (Strategy::BrokerCommitFirst, Strategy::CommitFirst),
        ] {
            assert_eq!(differs(row, base), 1, "{row} against {base}");
        }
        assert_eq!(Strategy::EmailIdempotencyKey.rules().sequence.email_key(), Some(true));
        assert_eq!(Strategy::EmailNoKey.rules().sequence.email_key(), Some(false));
        assert_eq!(Strategy::AtomicPlusEmail.rules().sequence.email_key(), Some(false));
    }
}
