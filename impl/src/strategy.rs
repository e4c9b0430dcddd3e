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
}

impl Strategy {
    pub const ALL: [Strategy; 11] = [
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
        }
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

/// The kind of an owner step: the model's owner actions, one durable write each (but `fetch`).
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
}

impl StepKind {
    pub const ALL: [StepKind; 7] = [
        StepKind::Fetch,
        StepKind::ApplyEffect,
        StepKind::InsertProcessed,
        StepKind::CommitOffset,
        StepKind::ApplyStamped,
        StepKind::ApplyDeduped,
        StepKind::ApplyAtomic,
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
/// starts there); for `commit-offset` it is the next offset being committed.
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
