//! Power-cut runs (`consumer power-cuts`, spec.md §10 "Power loss"): for every strategy and
//! every crash point, a producer appends batches to a log on the simulated disk
//! ([`SimDisk`]) while an owner consumes them into a real SQLite store, the power goes at that
//! point, everything is reopened as after a reboot, and the run checks that
//!
//! - (a) every acknowledged record is in the reopened log, byte for byte;
//! - (b) every byte the reopen cut was reported (`TailRepair`), and a lost record was never
//!   acknowledged;
//! - (c) nothing refuses (a damaged partition, a group ahead of its log), which only a loss of
//!   acknowledged records may justify; refusals are counted;
//! - (d) the owner restarts and finishes, the producer's retries leave every record in the log
//!   once, and for the exact strategies (one guarded atomic transaction; these runs hold no
//!   poison record) the group's total is the sum of the records.
//!
//! Points: the owner's `STEP:WHEN@OFFSET` for every step kind the strategy takes, at the record
//! nearest the middle of the run (the store "crashes" as a process does: its open transaction
//! is dropped, and SQLite's `synchronous=FULL` keeps every committed one, which is relied on,
//! not simulated; the producer is then cut in the middle of its next append, at a seeded
//! [`LogPoint`]); and the log's own points inside an append and inside retention's start-file
//! replacement, where the producer halts while the owner goes on for a few seeded steps
//! before the cut. Everything runs in this process; a run is deterministic for its seed.
//!
//! Then the damage classes (`damage.rs`): a flipped byte in the newest acknowledgement slot, a
//! torn slot write, a flipped header byte, each put on the disk on purpose before the cut; the
//! same checks, with a refusal counted rather than a violation, and no acknowledged record
//! lost without a refusal naming its partition.
//!
//! Files: this one (configuration, points, the loop over them, the errors), `run.rs` (one
//! run), `damage.rs` (the damage classes), `report.rs` (the tallies and their tables),
//! `replication.rs` (the cuts during the
//! replication steps of a replicated log, with their own schedule, checks and table).

pub mod damage;
pub mod replication;
mod report;
mod run;
pub mod store_cut;

pub use damage::{DamageClass, DAMAGE_STRATEGIES};
pub use report::{DamageTally, Report, Tally};

use crate::crash::CrashPoint;
use crate::log::{Halt, LogError, ReplicationError, SimOp, SplitMix64, WriterMode};
use crate::owner::OwnerError;
use crate::store::StoreError;
use crate::strategy::{EffectKind, GuardKind, Sequence, Strategy};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// What the power-cut runs cover.
#[derive(Clone, Debug)]
pub struct Config {
    pub seed: u64,
    /// Runs per point, each with its own seed.
    pub runs: u64,
    pub strategies: Vec<Strategy>,
    /// The producer's writer: `Checked`, or a deliberately broken one in tests.
    pub writer_mode: WriterMode,
    /// The damage classes to run (`damage.rs`), for `damage::strategies(&strategies)`.
    pub damage_classes: Vec<DamageClass>,
}

/// Bounds of `Config::runs`.
pub const RUNS_MAX: u64 = 1000;

/// A crash point's family, one row of the table per strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PointKind {
    /// The owner's `STEP:WHEN`: the store crashes there, the log loses power mid-append.
    Owner,
    /// Inside an append.
    Append,
    /// Inside retention's replacement of the start file.
    Retention,
}

/// The log's own crash points: where the producer is when the power goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogPoint {
    /// The append wrote its frames, not synced yet.
    DataWritten,
    /// The frames synced, the acknowledgement slot not written.
    DataSynced,
    /// The acknowledgement slot written, not synced.
    AckWritten,
    /// The acknowledgement slot synced, the append not returned.
    AckSynced,
    /// Retention wrote the temp start file, not synced.
    TempWritten,
    /// The temp start file synced, not renamed.
    TempSynced,
    /// Renamed over the start file, the directory not synced.
    Renamed,
    /// The directory synced, `retain_before` not returned.
    DirSynced,
}

impl LogPoint {
    pub const ALL: [LogPoint; 8] = [
        LogPoint::DataWritten,
        LogPoint::DataSynced,
        LogPoint::AckWritten,
        LogPoint::AckSynced,
        LogPoint::TempWritten,
        LogPoint::TempSynced,
        LogPoint::Renamed,
        LogPoint::DirSynced,
    ];
    /// The points inside an append, for the producer an owner point cuts mid-append.
    pub const APPEND: [LogPoint; 4] =
        [LogPoint::DataWritten, LogPoint::DataSynced, LogPoint::AckWritten, LogPoint::AckSynced];

    pub fn name(self) -> &'static str {
        match self {
            LogPoint::DataWritten => "append:data-written",
            LogPoint::DataSynced => "append:data-synced",
            LogPoint::AckWritten => "append:ack-written",
            LogPoint::AckSynced => "append:ack-synced",
            LogPoint::TempWritten => "retention:temp-written",
            LogPoint::TempSynced => "retention:temp-synced",
            LogPoint::Renamed => "retention:renamed",
            LogPoint::DirSynced => "retention:dir-synced",
        }
    }

    pub fn kind(self) -> PointKind {
        match self {
            LogPoint::DataWritten | LogPoint::DataSynced | LogPoint::AckWritten | LogPoint::AckSynced => {
                PointKind::Append
            }
            LogPoint::TempWritten | LogPoint::TempSynced | LogPoint::Renamed | LogPoint::DirSynced => {
                PointKind::Retention
            }
        }
    }

    /// The disk operation of partition 0's files in `log_dir` that this point stops before
    /// (or after).
    fn halt(self, log_dir: &Path) -> Halt {
        let file = |extension: &str| log_dir.join(format!("partition-0.{extension}"));
        let (op, path, after) = match self {
            LogPoint::DataWritten => (SimOp::Sync, file("log"), false),
            LogPoint::DataSynced => (SimOp::Write, file("ack"), false),
            LogPoint::AckWritten => (SimOp::Sync, file("ack"), false),
            LogPoint::AckSynced => (SimOp::Sync, file("ack"), true),
            LogPoint::TempWritten => (SimOp::Sync, file("start.tmp"), false),
            LogPoint::TempSynced => (SimOp::Rename, file("start"), false),
            LogPoint::Renamed => (SimOp::SyncDir, log_dir.to_path_buf(), false),
            LogPoint::DirSynced => (SimOp::SyncDir, log_dir.to_path_buf(), true),
        };
        Halt { op, path, after }
    }
}

/// Where the power goes in one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    Owner(CrashPoint),
    Log(LogPoint),
}

impl Point {
    pub fn kind(self) -> PointKind {
        match self {
            Point::Owner(_) => PointKind::Owner,
            Point::Log(point) => point.kind(),
        }
    }
}

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Point::Owner(point) => write!(f, "{point}"),
            Point::Log(point) => f.write_str(point.name()),
        }
    }
}

/// Whether a strategy's total must be exact after a crash: one guarded atomic transaction
/// (`apply-atomic`, or the transactional sequence's `commit-txn`).
pub fn is_exact(strategy: Strategy) -> bool {
    let rules = strategy.rules();
    let guarded = match rules.guard {
        GuardKind::Fenced | GuardKind::Cas => true,
        GuardKind::Blind => false,
    };
    let atomic = rules.sequence.is_atomic() || rules.sequence == Sequence::Transactional;
    guarded && atomic
}

/// Whether a strategy's guarantee of spec.md §3.4 must hold after a crash, as the model
/// verifies it: every email delivered once (an email keyed by the record's identity, sent
/// before the commit), the latest value (a stamped set), the index holding the store's facts
/// (the outbox, once relayed). Its traps (atomic-plus-email, email-no-key, blind-set,
/// dual-write) may end otherwise, as their verdicts predict.
pub fn keeps_edge_guarantee(strategy: Strategy) -> bool {
    let rules = strategy.rules();
    match rules.sequence {
        Sequence::EmailThenAtomic { key } => key,
        Sequence::AtomicWithOutbox => true,
        Sequence::Stamped => rules.effect == EffectKind::Set,
        Sequence::AtomicThenEmail
        | Sequence::AtomicThenIndex
        | Sequence::CommitThenEffect
        | Sequence::EffectThenCommit
        | Sequence::EffectOnly
        | Sequence::EffectRecordCommit
        | Sequence::DedupedThenCommit
        | Sequence::Atomic
        | Sequence::Transactional => false,
    }
}

/// A failure of the runs themselves (not of the system under test, whose failures are the
/// report's violations).
#[derive(Debug)]
pub enum PowerError {
    Io {
        path: PathBuf,
        source: io::Error,
    },
    Log(LogError),
    Store(StoreError),
    Owner(OwnerError),
    Replication(ReplicationError),
    Txn(crate::txn::TxnError),
    External(crate::external::ExternalError),
    /// `Config` out of its bounds.
    BadConfig(String),
}

impl fmt::Display for PowerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PowerError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            PowerError::Log(error) => write!(f, "{error}"),
            PowerError::Store(error) => write!(f, "{error}"),
            PowerError::Owner(error) => write!(f, "{error}"),
            PowerError::Replication(error) => write!(f, "{error}"),
            PowerError::Txn(error) => write!(f, "{error}"),
            PowerError::External(error) => write!(f, "{error}"),
            PowerError::BadConfig(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for PowerError {}

impl From<LogError> for PowerError {
    fn from(error: LogError) -> Self {
        PowerError::Log(error)
    }
}

impl From<StoreError> for PowerError {
    fn from(error: StoreError) -> Self {
        PowerError::Store(error)
    }
}

impl From<crate::txn::TxnError> for PowerError {
    fn from(error: crate::txn::TxnError) -> Self {
        PowerError::Txn(error)
    }
}

impl From<crate::external::ExternalError> for PowerError {
    fn from(error: crate::external::ExternalError) -> Self {
        PowerError::External(error)
    }
}

impl From<OwnerError> for PowerError {
    fn from(error: OwnerError) -> Self {
        PowerError::Owner(error)
    }
}

/// A seed for one run, mixed from the configuration's seed and the run's coordinates.
fn mix(seed: u64, parts: &[u64]) -> u64 {
    parts.iter().fold(seed, |acc, &part| SplitMix64::new(acc ^ part).next_u64())
}

/// Runs every point of every strategy of `config` `config.runs` times, in `work` (a directory
/// for the runs' SQLite stores, each removed after its run). Deterministic for the config.
pub fn run(config: &Config, work: &Path) -> Result<Report, PowerError> {
    check_config(config)?;
    let mut report = Report::default();
    for &strategy in &config.strategies {
        let points = run::points(strategy, config.writer_mode, work)?;
        for (index, &point) in (0u64..).zip(&points) {
            report.add_point(strategy, point.kind());
            for run_index in 0..config.runs {
                let seed = mix(config.seed, &[strategy as u64, index, run_index]);
                let case = run::Case { strategy, point, seed, writer_mode: config.writer_mode };
                let outcome = run::run(&case, work)?;
                report.add_run(&case, outcome);
            }
        }
    }
    run_damage_into(config, work, &mut report)?;
    Ok(report)
}

/// The damage classes of `config` alone (`damage.rs`): a report whose only rows are theirs.
pub fn run_damage(config: &Config, work: &Path) -> Result<Report, PowerError> {
    check_config(config)?;
    let mut report = Report::default();
    run_damage_into(config, work, &mut report)?;
    Ok(report)
}

fn check_config(config: &Config) -> Result<(), PowerError> {
    if config.runs == 0 || config.runs > RUNS_MAX || config.strategies.is_empty() {
        return Err(PowerError::BadConfig(format!("runs must be in 1..={RUNS_MAX}, with a strategy at least")));
    }
    Ok(())
}

/// Runs `config.damage_classes` for `damage::strategies(&config.strategies)` into `report`.
fn run_damage_into(config: &Config, work: &Path, report: &mut Report) -> Result<(), PowerError> {
    report.damage_strategies = damage::strategies(&config.strategies);
    let cases = damage::cases(config.seed, config.runs, &report.damage_strategies, config.writer_mode);
    for damage in cases.into_iter().filter(|damage| config.damage_classes.contains(&damage.class)) {
        let outcome = damage::run(&damage, work)?;
        report.add_damage_run(&damage, outcome);
    }
    Ok(())
}
