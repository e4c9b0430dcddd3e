//! Bounds of one model-checking run and the consumer strategies, with their validation.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How a consumer orders its durable writes for one record. The names are the CLI names.
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
    ProducerIdempotent,
    ProducerNewSequence,
    ResetEarliest,
    ResetSilent,
    ResetFail,
}

impl Strategy {
    pub const ALL: [Strategy; 19] = [
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
        Strategy::ProducerIdempotent,
        Strategy::ProducerNewSequence,
        Strategy::ResetEarliest,
        Strategy::ResetSilent,
        Strategy::ResetFail,
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
            Strategy::ProducerIdempotent => "producer-idempotent",
            Strategy::ProducerNewSequence => "producer-new-sequence",
            Strategy::ResetEarliest => "reset-earliest",
            Strategy::ResetSilent => "reset-silent",
            Strategy::ResetFail => "reset-fail",
        }
    }

    /// The producer rows test the producer: their consumers run atomic-fenced.
    pub fn is_producer(self) -> bool {
        matches!(self, Strategy::ProducerIdempotent | Strategy::ProducerNewSequence)
    }

    /// The retention rows: atomic-fenced consumers meeting a log start past their checkpoint,
    /// with the policy `--on-out-of-range earliest` (recorded), a silent jump (the trap), or
    /// `fail`.
    pub fn is_retention(self) -> bool {
        matches!(self, Strategy::ResetEarliest | Strategy::ResetSilent | Strategy::ResetFail)
    }

    /// The consumer behaviour of a row: itself, or atomic-fenced for the producer and
    /// retention rows.
    pub fn consumer(self) -> Strategy {
        if self.is_producer() || self.is_retention() {
            Strategy::AtomicFenced
        } else {
            self
        }
    }

    /// Strategies whose whole per-record work is one transaction (effect and next offset).
    pub fn is_single_write(self) -> bool {
        matches!(self.consumer(), Strategy::Atomic | Strategy::AtomicFenced | Strategy::AtomicCas)
            || self.handles_poison()
    }

    /// Strategies that meet poison records: atomic-fenced, plus what they do when an effect
    /// fails (dead-letter after `max_attempts`, skip it, or retry it for ever).
    pub fn handles_poison(self) -> bool {
        matches!(self, Strategy::AtomicDlq | Strategy::SkipPoison | Strategy::RetryForever)
    }

    /// Strategies whose transactions check the owner's epoch first.
    pub fn is_fenced(self) -> bool {
        self.consumer() == Strategy::AtomicFenced || self.handles_poison()
    }

    /// Strategies that checkpoint every `commit_every` records instead of after each one.
    pub fn is_periodic(self) -> bool {
        matches!(self, Strategy::PeriodicCommit | Strategy::OffsetStamp)
    }

    /// Strategies that hold up to `inflight` records and complete them in any order.
    pub fn is_parallel(self) -> bool {
        matches!(self, Strategy::ParallelMax | Strategy::ParallelWatermark)
    }

    /// Strategies whose store recognises and skips a record it has already applied.
    pub fn skips_duplicates(self) -> bool {
        matches!(self, Strategy::OffsetStamp | Strategy::DedupSeparate | Strategy::DedupAtomic | Strategy::AtomicCas)
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

/// The bounds of one run. Every field is a CLI flag of `model check` and `model explore`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Config {
    pub strategy: Strategy,
    /// Consumer groups reading the same log, each with its own effect and progress.
    pub groups: u8,
    /// Competing owner processes per group.
    pub owners: u8,
    pub partitions: u8,
    /// Records the producer appends to each partition.
    pub records: u8,
    /// Owner crashes allowed in the whole run (all groups together).
    pub crashes: u8,
    /// Rebalances allowed in the whole run (all groups together).
    pub rebalances: u8,
    /// Checkpoint interval of `periodic-commit` and `offset-stamp`, in records.
    pub commit_every: u8,
    /// Records one owner may hold at once in the parallel strategies.
    pub inflight: u8,
    /// The value each appended record adds to a group's total.
    pub delta: i64,
    /// The offset (in every partition) of a poison record, whose effect fails every time.
    #[serde(default)]
    pub poison: Option<u8>,
    /// Failed attempts after which atomic-dlq dead-letters a poison record.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u8,
    /// Appends whose acknowledgement may be lost (the producer then retries).
    #[serde(default)]
    pub ack_losses: u8,
    /// Retention steps (the log start moves forward) allowed in a run.
    #[serde(default)]
    pub retentions: u8,
}

/// The largest bounds accepted. Past them the state space no longer fits in memory on the
/// 2-core, 24 GiB machines this project targets (it grows exponentially in each bound).
pub const GROUPS_MAX: u8 = 3;
pub const OWNERS_MAX: u8 = 3;
pub const PARTITIONS_MAX: u8 = 2;
pub const RECORDS_MAX: u8 = 8;
/// Crashes and rebalances share one limit.
pub const CRASHES_MAX: u8 = 4;
pub const REBALANCES_MAX: u8 = CRASHES_MAX;

fn default_max_attempts() -> u8 {
    2
}

/// Upper bounds of a configuration, per use.
struct Limits {
    groups: u8,
    owners: u8,
    records: u8,
    faults: u8,
}

const SEARCH_LIMITS: Limits =
    Limits { groups: GROUPS_MAX, owners: OWNERS_MAX, records: RECORDS_MAX, faults: CRASHES_MAX };
const REPLAY_LIMITS: Limits = Limits { groups: 8, owners: 8, records: 250, faults: 250 };

impl Config {
    pub fn new(strategy: Strategy) -> Config {
        Config {
            strategy,
            groups: 2,
            owners: 2,
            partitions: 1,
            records: 3,
            crashes: 1,
            rebalances: 1,
            commit_every: 2,
            inflight: 2,
            delta: 5,
            // Only the poison strategies meet a poison record by default (spec.md §4).
            poison: strategy.handles_poison().then_some(1),
            max_attempts: 2,
            // Only the producer rows lose an acknowledgement by default.
            ack_losses: u8::from(strategy.is_producer()),
            // Only the retention rows see the log start move by default.
            retentions: u8::from(strategy.is_retention()),
        }
    }

    /// True when every bound has its default value (the configuration of spec.md's table).
    pub fn has_default_bounds(&self) -> bool {
        *self == Config::new(self.strategy)
    }

    /// Checks every bound for a search; the error is one line naming the flag and the range.
    pub fn validate(&self) -> Result<(), String> {
        self.validate_within(&SEARCH_LIMITS, " (larger state spaces do not fit in memory)")
    }

    /// Checks the bounds of a trace file. A trace is replayed, not explored, so only the width
    /// of an offset limits it (the mission's 100-record scenarios are traces).
    pub fn validate_for_replay(&self) -> Result<(), String> {
        self.validate_within(&REPLAY_LIMITS, " (offsets and counters are 8-bit)")
    }

    fn validate_within(&self, limits: &Limits, too_big: &str) -> Result<(), String> {
        const PER_RECORDS: &str = " (at most --records)";
        const TOO_BIG: &str = "";
        let ranges: [(&str, u8, u8, u8, &str); 8] = [
            ("--groups", self.groups, 1, limits.groups, too_big),
            ("--owners", self.owners, 1, limits.owners, too_big),
            ("--partitions", self.partitions, 1, PARTITIONS_MAX, TOO_BIG),
            ("--records", self.records, 1, limits.records, too_big),
            ("--crashes", self.crashes, 0, limits.faults, too_big),
            ("--rebalances", self.rebalances, 0, limits.faults, too_big),
            ("--commit-every", self.commit_every, 1, self.records.max(1), PER_RECORDS),
            ("--inflight", self.inflight, 1, self.records.max(1), PER_RECORDS),
        ];
        for (flag, value, low, high, why) in ranges {
            if value < low || value > high {
                let why = if value > high { why } else { "" };
                return Err(format!("{flag} {value} is out of range: accepted values are {low}..={high}{why}"));
            }
        }
        if let Some(poison) = self.poison {
            if poison >= self.records {
                return Err(format!(
                    "--poison {poison} is out of range: the poison record must be below --records {}",
                    self.records
                ));
            }
        }
        if self.retentions > 2 {
            return Err(format!(
                "--retentions {} is out of range: accepted values are 0..=2{too_big}",
                self.retentions
            ));
        }
        if self.ack_losses > 2 {
            return Err(format!(
                "--ack-losses {} is out of range: accepted values are 0..=2{too_big}",
                self.ack_losses
            ));
        }
        if self.max_attempts == 0 || self.max_attempts > 3 {
            return Err(format!(
                "--max-attempts {} is out of range: accepted values are 1..=3{too_big}",
                self.max_attempts
            ));
        }
        if self.delta == 0 {
            return Err("--delta 0 would make every effect invisible in the total".to_string());
        }
        Ok(())
    }

    /// The bounds as CLI flags, so that every report can print the command that reproduces it.
    pub fn flags(&self) -> String {
        format!(
            "--strategy {} --groups {} --owners {} --partitions {} --records {} --crashes {} \
             --rebalances {} --commit-every {} --inflight {} --delta {} --poison {} --max-attempts {} --ack-losses {} --retentions {}",
            self.strategy,
            self.groups,
            self.owners,
            self.partitions,
            self.records,
            self.crashes,
            self.rebalances,
            self.commit_every,
            self.inflight,
            self.delta,
            self.poison.map_or("none".to_string(), |p| p.to_string()),
            self.max_attempts,
            self.ack_losses,
            self.retentions
        )
    }
}
