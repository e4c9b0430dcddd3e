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
    }
}

/// Everything the owner needs to know about a strategy: one row of `Strategy::rules`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    pub sequence: Sequence,
    pub guard: GuardKind,
    pub checkpoint: Checkpointing,
    pub poison: PoisonPolicy,
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
            Atomic, CommitThenEffect, DedupedThenCommit, EffectOnly, EffectRecordCommit, EffectThenCommit, Stamped,
            Transactional,
        };
        let (sequence, guard, checkpoint, poison) = match self {
            Strategy::CommitFirst => (CommitThenEffect, Blind, PerBatch, NotHandled),
            Strategy::EffectFirst => (EffectThenCommit, Blind, PerBatch, NotHandled),
            Strategy::PeriodicCommit => (EffectOnly, Blind, Periodic, NotHandled),
            Strategy::OffsetStamp => (Stamped, Blind, Periodic, NotHandled),
            Strategy::DedupSeparate => (EffectRecordCommit, Blind, PerBatch, NotHandled),
            Strategy::DedupAtomic => (DedupedThenCommit, Blind, PerBatch, NotHandled),
            Strategy::Atomic => (Atomic, Blind, PerBatch, NotHandled),
            Strategy::AtomicFenced => (Atomic, Fenced, PerBatch, NotHandled),
            Strategy::AtomicCas => (Atomic, Cas, PerBatch, NotHandled),
            Strategy::ParallelMax => (EffectOnly, Blind, Parallel(Max), NotHandled),
            Strategy::ParallelWatermark => (EffectOnly, Blind, Parallel(Watermark), NotHandled),
            Strategy::AtomicDlq => (Atomic, Fenced, PerBatch, DeadLetter),
            Strategy::SkipPoison => (Atomic, Fenced, PerBatch, Skip),
            Strategy::RetryForever => (Atomic, Fenced, PerBatch, RetryForever),
            Strategy::TxnFenced => (Transactional, Fenced, PerBatch, NotHandled),
            Strategy::TxnUnfenced => (Transactional, Blind, PerBatch, NotHandled),
        };
        Rules { sequence, guard, checkpoint, poison }
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
                matches!(self.sequence, Sequence::Atomic | Sequence::Transactional),
                "a fence needs the apply-atomic or the transactional sequence"
            ),
            GuardKind::Cas => {
                assert!(matches!(self.sequence, Sequence::Atomic), "a CAS needs the apply-atomic sequence")
            }
        }
        // A poison record fails inside `apply-atomic`, and its writes are fenced.
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
            | Sequence::Transactional => true,
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
    }

    /// The durable write a batch resting in `stage` waits for under these rules, or `None` when
    /// no batch ever rests in that stage under them (the owner treats that as a broken
    /// invariant). The stage a write leaves the batch in is the owner's bookkeeping.
    pub const fn next_write(self, stage: Stage) -> Option<BatchWrite> {
        use BatchWrite as W;
        use Sequence as S;
        match (self.sequence, stage) {
            (S::CommitThenEffect, Stage::Fetched) => Some(W::CommitOffset),
            (S::CommitThenEffect, Stage::Committed) => Some(W::ApplyEffect),
            (S::EffectThenCommit | S::EffectOnly | S::EffectRecordCommit, Stage::Fetched) => Some(W::ApplyEffect),
            (S::EffectThenCommit | S::DedupedThenCommit, Stage::EffectApplied) => Some(W::CommitOffset),
            (S::EffectRecordCommit, Stage::EffectApplied) => Some(W::InsertProcessed),
            (S::EffectRecordCommit, Stage::Recorded) => Some(W::CommitOffset),
            (S::Stamped, Stage::Fetched) => Some(W::ApplyStamped),
            (S::DedupedThenCommit, Stage::Fetched) => Some(W::ApplyDeduped),
            (S::Atomic, Stage::Fetched) => Some(W::ApplyAtomic),
            (S::Transactional, Stage::Fetched) => Some(W::ProduceOutput),
            (S::Transactional, Stage::Produced) => Some(W::CommitTxn),
            (S::Atomic, Stage::Exhausted) => match self.poison {
                PoisonPolicy::DeadLetter => Some(W::DeadLetter),
                // The trap: the checkpoint moves past the failing record with no trace of it.
                PoisonPolicy::Skip => Some(W::CommitOffset),
                // Retry-forever never gives up on a record; the others never fetch a poison one.
                PoisonPolicy::RetryForever | PoisonPolicy::NotHandled => None,
            },
            // Only commit-first commits before the effect.
            (
                S::EffectThenCommit
                | S::EffectOnly
                | S::EffectRecordCommit
                | S::Stamped
                | S::DedupedThenCommit
                | S::Atomic
                | S::Transactional,
                Stage::Committed,
            ) => None,
            // The effect write is the batch's last (commit-first: after its commit; the others
            // commit with the checkpointing or inside the transaction; the transactional
            // sequence's effect is its commit).
            (S::CommitThenEffect | S::EffectOnly | S::Stamped | S::Atomic | S::Transactional, Stage::EffectApplied) => {
                None
            }
            // Only dedup-separate records ids apart from the effect.
            (
                S::CommitThenEffect
                | S::EffectThenCommit
                | S::EffectOnly
                | S::Stamped
                | S::DedupedThenCommit
                | S::Atomic
                | S::Transactional,
                Stage::Recorded,
            ) => None,
            // Only a poison record is exhausted, and only in the atomic sequence.
            (
                S::CommitThenEffect
                | S::EffectThenCommit
                | S::EffectOnly
                | S::EffectRecordCommit
                | S::Stamped
                | S::DedupedThenCommit
                | S::Transactional,
                Stage::Exhausted,
            ) => None,
            // Only the transactional sequence produces output before its commit.
            (
                S::CommitThenEffect
                | S::EffectThenCommit
                | S::EffectOnly
                | S::EffectRecordCommit
                | S::Stamped
                | S::DedupedThenCommit
                | S::Atomic,
                Stage::Produced,
            ) => None,
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
            | BatchWrite::CommitTxn => start,
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

    /// Walking the sequence by its writes' usual outcomes gives spec.md §5's per-record writes.
    #[test]
    fn sequences_spell_the_spec_writes() {
        let expected: [(Strategy, &[StepKind]); 9] = [
            (Strategy::CommitFirst, &[StepKind::CommitOffset, StepKind::ApplyEffect]),
            (Strategy::EffectFirst, &[StepKind::ApplyEffect, StepKind::CommitOffset]),
            (Strategy::DedupSeparate, &[StepKind::ApplyEffect, StepKind::InsertProcessed, StepKind::CommitOffset]),
            (Strategy::DedupAtomic, &[StepKind::ApplyDeduped, StepKind::CommitOffset]),
            (Strategy::PeriodicCommit, &[StepKind::ApplyEffect]),
            (Strategy::OffsetStamp, &[StepKind::ApplyStamped]),
            (Strategy::AtomicFenced, &[StepKind::ApplyAtomic]),
            (Strategy::TxnFenced, &[StepKind::ProduceOutput, StepKind::CommitTxn]),
            (Strategy::TxnUnfenced, &[StepKind::ProduceOutput, StepKind::CommitTxn]),
        ];
        for (strategy, writes) in expected {
            let rules = strategy.rules();
            let mut stage = Stage::Fetched;
            let mut walked = Vec::new();
            while let Some(write) = rules.next_write(stage) {
                walked.push(write.kind());
                stage = match write {
                    BatchWrite::CommitOffset if stage == Stage::Fetched => Stage::Committed,
                    BatchWrite::ApplyEffect | BatchWrite::ApplyDeduped if stage == Stage::Fetched => {
                        Stage::EffectApplied
                    }
                    BatchWrite::InsertProcessed => Stage::Recorded,
                    BatchWrite::ProduceOutput => Stage::Produced,
                    // The write finished the batch.
                    BatchWrite::CommitOffset
                    | BatchWrite::ApplyEffect
                    | BatchWrite::ApplyDeduped
                    | BatchWrite::ApplyStamped
                    | BatchWrite::ApplyAtomic
                    | BatchWrite::DeadLetter
                    | BatchWrite::CommitTxn => break,
                };
            }
            assert_eq!(walked, writes, "{strategy}");
        }
    }
}
