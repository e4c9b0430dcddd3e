//! The consumer strategies (spec.md §5) and the steps an owner takes, named as in the model.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How a consumer orders its durable writes for one record. The names are spec.md's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    CommitFirst,
    EffectFirst,
    PeriodicCommit,
    OffsetStamp,
    DedupSeparate,
    DedupAtomic,
    Atomic,
    AtomicFenced,
    AtomicCas,
    ParallelMax,
    ParallelWatermark,
    AtomicDlq,
    SkipPoison,
    RetryForever,
}

impl Strategy {
    pub const ALL: [Strategy; 14] = [
        Strategy::CommitFirst,
        Strategy::EffectFirst,
        Strategy::PeriodicCommit,
        Strategy::OffsetStamp,
        Strategy::DedupSeparate,
        Strategy::DedupAtomic,
        Strategy::Atomic,
        Strategy::AtomicFenced,
        Strategy::AtomicCas,
        Strategy::ParallelMax,
        Strategy::ParallelWatermark,
        Strategy::AtomicDlq,
        Strategy::SkipPoison,
        Strategy::RetryForever,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::CommitFirst => "commit-first",
            Strategy::EffectFirst => "effect-first",
            Strategy::PeriodicCommit => "periodic-commit",
            Strategy::OffsetStamp => "offset-stamp",
            Strategy::DedupSeparate => "dedup-separate",
            Strategy::DedupAtomic => "dedup-atomic",
            Strategy::Atomic => "atomic",
            Strategy::AtomicFenced => "atomic-fenced",
            Strategy::AtomicCas => "atomic-cas",
            Strategy::ParallelMax => "parallel-max",
            Strategy::ParallelWatermark => "parallel-watermark",
            Strategy::AtomicDlq => "atomic-dlq",
            Strategy::SkipPoison => "skip-poison",
            Strategy::RetryForever => "retry-forever",
        }
    }

    /// Strategies that meet poison records: atomic-fenced, plus what they do when an effect
    /// fails (dead-letter after `max_attempts`, skip it, or retry it for ever).
    pub fn handles_poison(self) -> bool {
        matches!(self, Strategy::AtomicDlq | Strategy::SkipPoison | Strategy::RetryForever)
    }

    /// Strategies whose transactions check the owner's epoch first.
    pub fn is_fenced(self) -> bool {
        self == Strategy::AtomicFenced || self.handles_poison()
    }

    /// Strategies whose whole per-batch work is one transaction (effect and next offset).
    pub fn is_single_write(self) -> bool {
        matches!(self, Strategy::Atomic | Strategy::AtomicFenced | Strategy::AtomicCas) || self.handles_poison()
    }

    pub fn is_periodic(self) -> bool {
        matches!(self, Strategy::PeriodicCommit | Strategy::OffsetStamp)
    }

    pub fn is_parallel(self) -> bool {
        matches!(self, Strategy::ParallelMax | Strategy::ParallelWatermark)
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

/// What an owner does when retention removed the next record it would fetch: its lease has no
/// record in flight and its position is below the log start (spec.md §3, §5, the reset rows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutOfRange {
    /// `fail-out-of-range`: write nothing, stop working on the partition with an error.
    #[default]
    Fail,
    /// `reset-offset`: one fenced transaction recording the reset (from the stored next offset
    /// to the log start) and moving the next offset to the log start.
    Earliest,
    /// Test only, hidden from `--help`: the trap the model refutes (the reset-silent row). A
    /// blind `commit-offset` of the log start jumps past the removed records and leaves no
    /// trace of them, so the property `reset-accounted` fails.
    EarliestSilent,
}

impl OutOfRange {
    pub const ALL: [OutOfRange; 3] = [OutOfRange::Fail, OutOfRange::Earliest, OutOfRange::EarliestSilent];

    pub fn name(self) -> &'static str {
        match self {
            OutOfRange::Fail => "fail",
            OutOfRange::Earliest => "earliest",
            OutOfRange::EarliestSilent => "earliest-silent",
        }
    }
}

impl fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OutOfRange {
    type Err = String;

    /// Parses a policy name. The error lists only the documented names: `earliest-silent`
    /// exists for the tests that show the trap.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        OutOfRange::ALL
            .iter()
            .copied()
            .find(|policy| policy.name() == text)
            .ok_or_else(|| format!("unknown out-of-range policy '{text}' (expected fail or earliest)"))
    }
}

/// The kind of an owner step: the model's owner actions, one durable write each (but `fetch`
/// and `fail-out-of-range`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepKind {
    Fetch,
    ApplyEffect,
    InsertProcessed,
    CommitOffset,
    ApplyStamped,
    ApplyDeduped,
    ApplyAtomic,
    DeadLetter,
    ResetOffset,
    FailOutOfRange,
}

impl StepKind {
    pub const ALL: [StepKind; 10] = [
        StepKind::Fetch,
        StepKind::ApplyEffect,
        StepKind::InsertProcessed,
        StepKind::CommitOffset,
        StepKind::ApplyStamped,
        StepKind::ApplyDeduped,
        StepKind::ApplyAtomic,
        StepKind::DeadLetter,
        StepKind::ResetOffset,
        StepKind::FailOutOfRange,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StepKind::Fetch => "fetch",
            StepKind::ApplyEffect => "apply-effect",
            StepKind::InsertProcessed => "insert-processed",
            StepKind::CommitOffset => "commit-offset",
            StepKind::ApplyStamped => "apply-stamped",
            StepKind::ApplyDeduped => "apply-deduped",
            StepKind::ApplyAtomic => "apply-atomic",
            StepKind::DeadLetter => "dead-letter",
            StepKind::ResetOffset => "reset-offset",
            StepKind::FailOutOfRange => "fail-out-of-range",
        }
    }
}

impl FromStr for StepKind {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        StepKind::ALL.iter().copied().find(|s| s.name() == text).ok_or_else(|| {
            let names: Vec<&str> = StepKind::ALL.iter().map(|s| s.name()).collect();
            format!("unknown step '{text}' (expected one of: {})", names.join(", "))
        })
    }
}

/// One owner step on a partition. `offset` is the first record the step concerns (its batch
/// starts there); for `commit-offset` it is the next offset being committed, for
/// `reset-offset` the log start the reset moves to, and for `fail-out-of-range` the lease
/// position that retention passed.
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
            return Err(format!("expected 'STEP PARTITION OFFSET', got '{text}'"));
        };
        Ok(Step {
            kind: kind.parse()?,
            partition: partition.parse().map_err(|_| format!("partition '{partition}' is not a number"))?,
            offset: offset.parse().map_err(|_| format!("offset '{offset}' is not a number"))?,
        })
    }
}
