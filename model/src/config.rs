//! Bounds of one model-checking run and the consumer strategies, with their validation.

pub use crate::strategy::Strategy;
use crate::strategy::{Replication, Sequence};
use serde::{Deserialize, Serialize};

/// The bounds of one run. Every field is a CLI flag of `model check` and `model explore`.
/// Traces carry it as their `config`: a field this build does not know is an error, never
/// silently dropped (spec.md §8.2).
///
/// `crashes`, `rebalances` and `pauses` are written `"any"` when `lifted` lifts them (spec.md
/// §7.1): the serde form is `ConfigFile`, where each is a `Budget`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "ConfigFile", into = "ConfigFile")]
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
    /// Second incarnations allowed in a run (all groups together): an owner is started again
    /// while its earlier incarnation still runs (a paused process presumed dead, a supervisor's
    /// restart, an operator's second copy). Absent from traces written before it existed: 0.
    #[serde(default)]
    pub pauses: u8,
    /// Log losses allowed in a run: a partition loses its tail of acknowledged records (a
    /// truncated or deleted file), so the store may be ahead of the log.
    #[serde(default)]
    pub log_losses: u8,
    /// Leader failures allowed in a run (replicated rows, spec.md §3.2).
    #[serde(default)]
    pub leader_failures: u8,
    /// ISR shrinks allowed in a run (replicated rows).
    #[serde(default)]
    pub isr_shrinks: u8,
    /// The fault budgets lifted (`any`): their counters are dropped and the search runs on the
    /// abstraction of spec.md §7.1 (`abstraction.rs`). A lifted field above keeps a count of at
    /// least 1, so that what depends on the fault being possible (its witnesses) still sees
    /// it; for `pauses` that count is the paused slots, the earlier incarnations alive at once.
    pub lifted: Lifted,
}

/// Which of the three liftable budgets are `any`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Lifted {
    pub crashes: bool,
    pub rebalances: bool,
    pub pauses: bool,
}

impl Lifted {
    pub const NONE: Lifted = Lifted { crashes: false, rebalances: false, pauses: false };

    pub fn any(self) -> bool {
        self.crashes || self.rebalances || self.pauses
    }
}

/// One liftable fault budget as a file writes it: a count, or `"any"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    Count(u8),
    Any,
}

impl Budget {
    /// The one spelling of a lifted budget, in flags, JSON, trace files and ITF.
    pub const ANY: &'static str = "any";

    fn of(count: u8, lifted: bool) -> Budget {
        if lifted {
            Budget::Any
        } else {
            Budget::Count(count)
        }
    }
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Budget::Count(count) => write!(f, "{count}"),
            Budget::Any => f.write_str(Budget::ANY),
        }
    }
}

impl Serialize for Budget {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Budget::Count(count) => serializer.serialize_u8(*count),
            Budget::Any => serializer.serialize_str(Budget::ANY),
        }
    }
}

impl<'de> Deserialize<'de> for Budget {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Budget, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Budget;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a count (0..=255) or \"any\"")
            }
            fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Budget, E> {
                u8::try_from(value).map(Budget::Count).map_err(|_| E::custom(format!("{value} is above 255")))
            }
            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Budget, E> {
                match value {
                    Budget::ANY => Ok(Budget::Any),
                    other => Err(E::custom(format!("'{other}' is neither a count nor \"any\""))),
                }
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// `Config` as files write it: the same fields, the three liftable budgets as `Budget`s.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    strategy: Strategy,
    groups: u8,
    owners: u8,
    partitions: u8,
    records: u8,
    crashes: Budget,
    rebalances: Budget,
    commit_every: u8,
    inflight: u8,
    delta: i64,
    #[serde(default)]
    poison: Option<u8>,
    #[serde(default = "default_max_attempts")]
    max_attempts: u8,
    #[serde(default)]
    ack_losses: u8,
    #[serde(default)]
    retentions: u8,
    #[serde(default = "no_pauses")]
    pauses: Budget,
    #[serde(default)]
    log_losses: u8,
    #[serde(default)]
    leader_failures: u8,
    #[serde(default)]
    isr_shrinks: u8,
}

fn no_pauses() -> Budget {
    Budget::Count(0)
}

impl From<Config> for ConfigFile {
    fn from(config: Config) -> ConfigFile {
        let Config {
            strategy,
            groups,
            owners,
            partitions,
            records,
            crashes,
            rebalances,
            commit_every,
            inflight,
            delta,
            poison,
            max_attempts,
            ack_losses,
            retentions,
            pauses,
            log_losses,
            leader_failures,
            isr_shrinks,
            lifted,
        } = config;
        ConfigFile {
            strategy,
            groups,
            owners,
            partitions,
            records,
            crashes: Budget::of(crashes, lifted.crashes),
            rebalances: Budget::of(rebalances, lifted.rebalances),
            commit_every,
            inflight,
            delta,
            poison,
            max_attempts,
            ack_losses,
            retentions,
            pauses: Budget::of(pauses, lifted.pauses),
            log_losses,
            leader_failures,
            isr_shrinks,
        }
    }
}

impl TryFrom<ConfigFile> for Config {
    type Error = String;

    fn try_from(file: ConfigFile) -> Result<Config, String> {
        let ConfigFile {
            strategy,
            groups,
            owners,
            partitions,
            records,
            crashes,
            rebalances,
            commit_every,
            inflight,
            delta,
            poison,
            max_attempts,
            ack_losses,
            retentions,
            pauses,
            log_losses,
            leader_failures,
            isr_shrinks,
        } = file;
        let row = strategy.rules().defaults;
        let (crashes, lifted_crashes) = lifted_count(crashes, row.crashes);
        let (rebalances, lifted_rebalances) = lifted_count(rebalances, row.rebalances);
        let (pauses, lifted_pauses) = lifted_count(pauses, row.pauses);
        Ok(Config {
            strategy,
            groups,
            owners,
            partitions,
            records,
            crashes,
            rebalances,
            commit_every,
            inflight,
            delta,
            poison,
            max_attempts,
            ack_losses,
            retentions,
            pauses,
            log_losses,
            leader_failures,
            isr_shrinks,
            lifted: Lifted { crashes: lifted_crashes, rebalances: lifted_rebalances, pauses: lifted_pauses },
        })
    }
}

/// The in-memory count of a budget (`Config::lifted`): a lifted one keeps the row's default,
/// at least 1 (for `pauses`, the paused slots).
pub fn lifted_count(budget: Budget, row_default: u8) -> (u8, bool) {
    match budget {
        Budget::Count(count) => (count, false),
        Budget::Any => (row_default.max(1), true),
    }
}

/// spec.md §4's default bounds: the only place they are written in this crate (the CLI's
/// defaults and `Config::new` read them). The per-row fault budgets are in `Strategy::rules`.
pub mod defaults {
    pub const GROUPS: u8 = 2;
    pub const OWNERS: u8 = 2;
    pub const PARTITIONS: u8 = 1;
    pub const RECORDS: u8 = 3;
    pub const CRASHES: u8 = 1;
    pub const REBALANCES: u8 = 1;
    pub const COMMIT_EVERY: u8 = 2;
    pub const INFLIGHT: u8 = 2;
    pub const DELTA: i64 = 5;
    pub const MAX_ATTEMPTS: u8 = 2;
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
/// The other fault budgets (retentions, lost acknowledgements, pauses, log losses).
pub const BUDGET_MAX: u8 = 2;

fn default_max_attempts() -> u8 {
    defaults::MAX_ATTEMPTS
}

/// The largest `--records` of a trace: offsets are 8-bit, and a log holds at most `records +
/// ack_losses` records (a retry may append once more per lost acknowledgement).
pub const REPLAY_RECORDS_MAX: u8 = 250;
/// The largest crash and rebalance budgets of a trace. Every start (a restart after a crash, a
/// pause's second incarnation) claims an epoch and every rebalance bumps one, so an epoch is at
/// most `1 + crashes + rebalances + pauses`; every application of a record needs a lease of its
/// own (a lease never applies an offset twice), and leases come from the same starts and
/// rebalances, so a record is applied at most as many times. Both are 8-bit: this keeps them
/// at or below 255.
pub const REPLAY_FAULTS_MAX: u8 = (u8::MAX - 1 - BUDGET_MAX) / 2;
/// The most applications of one record a trace can reach (see `REPLAY_FAULTS_MAX`).
pub const APPLICATIONS_MAX: u8 = 1 + 2 * REPLAY_FAULTS_MAX + BUDGET_MAX;

/// The largest `|--delta|`. A group's total is `delta` times the applications of every record
/// ever appended (`group-isolation`): at most `PARTITIONS_MAX * (REPLAY_RECORDS_MAX +
/// BUDGET_MAX)` records, each applied at most `APPLICATIONS_MAX` times, so with this bound no
/// reachable total, nor the sum the harness and `group-isolation` compute, leaves `i64` (the
/// assertion below checks the product at compile time). 10^12 leaves room to spare and is far
/// above any delta a test needs.
pub const DELTA_MAX: i64 = 1_000_000_000_000;
const _: () = {
    let records = PARTITIONS_MAX as i128 * (REPLAY_RECORDS_MAX as i128 + BUDGET_MAX as i128);
    let largest_total = DELTA_MAX as i128 * records * APPLICATIONS_MAX as i128;
    assert!(largest_total <= i64::MAX as i128, "DELTA_MAX lets a total overflow i64");
};

/// Upper bounds of a configuration, per use, and why each is where it is.
struct Limits {
    groups: u8,
    owners: u8,
    records: u8,
    faults: u8,
    /// Why groups and owners stop where they do.
    why_owners: &'static str,
    why_records: &'static str,
    why_faults: &'static str,
}

const STATE_SPACE: &str = " (larger state spaces do not fit in memory)";
const SEARCH_LIMITS: Limits = Limits {
    groups: GROUPS_MAX,
    owners: OWNERS_MAX,
    records: RECORDS_MAX,
    faults: CRASHES_MAX,
    why_owners: STATE_SPACE,
    why_records: STATE_SPACE,
    why_faults: STATE_SPACE,
};
/// A trace is replayed, not explored, so only the width of the model's 8-bit counters limits
/// its records and faults (the mission's 100-record scenarios are traces); its groups and
/// owners are those `model check` accepts (the harness starts a process per owner).
const REPLAY_LIMITS: Limits = Limits {
    groups: GROUPS_MAX,
    owners: OWNERS_MAX,
    records: REPLAY_RECORDS_MAX,
    faults: REPLAY_FAULTS_MAX,
    why_owners: " (as in model check)",
    why_records: " (offsets are 8-bit)",
    why_faults: " (epochs and application counts are 8-bit)",
};

impl Config {
    pub const fn new(strategy: Strategy) -> Config {
        let row = strategy.rules().defaults;
        Config {
            strategy,
            groups: row.groups,
            owners: row.owners,
            partitions: row.partitions,
            records: row.records,
            crashes: row.crashes,
            rebalances: row.rebalances,
            commit_every: defaults::COMMIT_EVERY,
            inflight: defaults::INFLIGHT,
            delta: defaults::DELTA,
            // Poison records, lost acknowledgements and retention are each on by default only
            // in the rows about them (spec.md §4).
            poison: row.poison,
            max_attempts: defaults::MAX_ATTEMPTS,
            ack_losses: row.ack_losses,
            retentions: row.retentions,
            pauses: row.pauses,
            log_losses: row.log_losses,
            leader_failures: row.leader_failures,
            isr_shrinks: row.isr_shrinks,
            lifted: Lifted::NONE,
        }
    }

    /// This configuration with every liftable budget that is above 0 in the row's defaults
    /// lifted (`--unbounded`); the others as they are. One group: the groups share only the log,
    /// and a second multiplies the abstract states (effect-first: 8.0 M unique states and 42 s
    /// with two groups, 11,465 with one; spec.md §7.1); `--groups` still overrides it.
    pub fn unbounded(&self) -> Config {
        let row = self.strategy.rules().defaults;
        Config {
            groups: 1,
            lifted: Lifted { crashes: row.crashes > 0, rebalances: row.rebalances > 0, pauses: row.pauses > 0 },
            crashes: if row.crashes > 0 { row.crashes.max(1) } else { self.crashes },
            rebalances: if row.rebalances > 0 { row.rebalances.max(1) } else { self.rebalances },
            pauses: if row.pauses > 0 { row.pauses.max(1) } else { self.pauses },
            ..self.clone()
        }
    }

    /// The ordinary configuration a path of this one runs in: each lifted budget replaced by
    /// the faults of that kind `actions` use (at least the count kept in memory, so that the
    /// paused slots and the witnesses stay), nothing lifted. The path replays in it step for
    /// step (spec.md §7.1: a path of the abstraction is a path of the concrete system).
    pub fn concretised<'a>(&self, actions: impl IntoIterator<Item = &'a crate::action::Action>) -> Config {
        use crate::action::Action;
        let (mut crashes, mut rebalances, mut pauses) = (0u32, 0u32, 0u32);
        for action in actions {
            crashes += u32::from(matches!(action, Action::Crash { .. }));
            rebalances += u32::from(matches!(action, Action::Rebalance { .. }));
            pauses += u32::from(matches!(action, Action::Pause { .. }));
        }
        let count = |used: u32, kept: u8, lifted: bool| match lifted {
            true => u8::try_from(used).unwrap_or(u8::MAX).max(kept),
            false => kept,
        };
        Config {
            crashes: count(crashes, self.crashes, self.lifted.crashes),
            rebalances: count(rebalances, self.rebalances, self.lifted.rebalances),
            pauses: count(pauses, self.pauses, self.lifted.pauses),
            lifted: Lifted::NONE,
            ..self.clone()
        }
    }

    /// The crash budget as files and flags write it (a count, or `any`).
    pub fn crashes_budget(&self) -> Budget {
        Budget::of(self.crashes, self.lifted.crashes)
    }

    pub fn rebalances_budget(&self) -> Budget {
        Budget::of(self.rebalances, self.lifted.rebalances)
    }

    pub fn pauses_budget(&self) -> Budget {
        Budget::of(self.pauses, self.lifted.pauses)
    }

    /// Whether the search may still take one more crash, rebalance or pause.
    pub fn allows_crash(&self, used: u8) -> bool {
        self.lifted.crashes || used < self.crashes
    }

    pub fn allows_rebalance(&self, used: u8) -> bool {
        self.lifted.rebalances || used < self.rebalances
    }

    pub fn allows_pause(&self, used: u8) -> bool {
        self.lifted.pauses || used < self.pauses
    }

    /// True when every bound has its default value (the configuration of spec.md's table).
    pub fn has_default_bounds(&self) -> bool {
        *self == Config::new(self.strategy)
    }

    /// Checks every bound for a search; the error is one line naming the flag and the range.
    pub fn validate(&self) -> Result<(), String> {
        self.validate_within(&SEARCH_LIMITS)
    }

    /// Checks the bounds of a trace file (`REPLAY_LIMITS`).
    pub fn validate_for_replay(&self) -> Result<(), String> {
        self.validate_within(&REPLAY_LIMITS)
    }

    fn validate_within(&self, limits: &Limits) -> Result<(), String> {
        if self.lifted.any() {
            crate::abstraction::covers(self.strategy)
                .map_err(|why| format!("{} takes no unbounded budget (any, --unbounded): {why}", self.strategy))?;
        }
        const PER_RECORDS: &str = " (at most --records)";
        const TOO_BIG: &str = "";
        let ranges: [(&str, u8, u8, u8, &str); 8] = [
            ("--groups", self.groups, 1, limits.groups, limits.why_owners),
            ("--owners", self.owners, 1, limits.owners, limits.why_owners),
            ("--partitions", self.partitions, 1, PARTITIONS_MAX, TOO_BIG),
            ("--records", self.records, 1, limits.records, limits.why_records),
            ("--crashes", self.crashes, 0, limits.faults, limits.why_faults),
            ("--rebalances", self.rebalances, 0, limits.faults, limits.why_faults),
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
            if !self.strategy.handles_poison() {
                let meeting: Vec<&str> =
                    Strategy::ALL.iter().filter(|s| s.handles_poison()).map(|s| s.name()).collect();
                return Err(format!(
                    "--poison {poison} does not apply to {}: only {} meet poison records (use --poison none)",
                    self.strategy,
                    meeting.join(", ")
                ));
            }
            if poison >= self.records {
                return Err(format!(
                    "--poison {poison} is out of range: the poison record must be below --records {}",
                    self.records
                ));
            }
        }
        let budgets: [(&str, u8); 6] = [
            ("--retentions", self.retentions),
            ("--ack-losses", self.ack_losses),
            ("--pauses", self.pauses),
            ("--log-losses", self.log_losses),
            ("--leader-failures", self.leader_failures),
            ("--isr-shrinks", self.isr_shrinks),
        ];
        for (flag, value) in budgets {
            if value > BUDGET_MAX {
                let why = limits.why_faults;
                return Err(format!("{flag} {value} is out of range: accepted values are 0..={BUDGET_MAX}{why}"));
            }
        }
        let replicated = match self.strategy.rules().replication {
            Replication::Single => false,
            Replication::Replicated(_) => true,
        };
        if !replicated && (self.leader_failures > 0 || self.isr_shrinks > 0) {
            return Err(format!(
                "--leader-failures and --isr-shrinks apply to the replicated (acks) rows, not to {}",
                self.strategy
            ));
        }
        let transactional = self.strategy.rules().sequence == Sequence::Transactional;
        if transactional && self.groups != 1 {
            return Err(format!(
                "--groups {} is out of range for {}: the transactional rows have one group, whose \
                 transactions write the output partition",
                self.groups, self.strategy
            ));
        }
        if self.max_attempts == 0 || self.max_attempts > 3 {
            return Err(format!("--max-attempts {} is out of range: accepted values are 1..=3", self.max_attempts));
        }
        if self.delta == 0 {
            return Err("--delta 0 would make every effect invisible in the total".to_string());
        }
        if self.delta.unsigned_abs() > DELTA_MAX.unsigned_abs() {
            return Err(format!(
                "--delta {} is out of range: accepted values are -{DELTA_MAX}..={DELTA_MAX} except 0 \
                 (a larger delta could overflow a total)",
                self.delta
            ));
        }
        Ok(())
    }

    /// The bounds as CLI flags, so that every report can print the command that reproduces it.
    pub fn flags(&self) -> String {
        format!(
            "--strategy {} --groups {} --owners {} --partitions {} --records {} --crashes {} \
             --rebalances {} --commit-every {} --inflight {} --delta {} --poison {} --max-attempts {} \
             --ack-losses {} --retentions {} --pauses {} --log-losses {} --leader-failures {} --isr-shrinks {}",
            self.strategy,
            self.groups,
            self.owners,
            self.partitions,
            self.records,
            Budget::of(self.crashes, self.lifted.crashes),
            Budget::of(self.rebalances, self.lifted.rebalances),
            self.commit_every,
            self.inflight,
            self.delta,
            self.poison.map_or("none".to_string(), |p| p.to_string()),
            self.max_attempts,
            self.ack_losses,
            self.retentions,
            Budget::of(self.pauses, self.lifted.pauses),
            self.log_losses,
            self.leader_failures,
            self.isr_shrinks
        )
    }
}
