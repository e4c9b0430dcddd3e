//! One owner process of a consumer group: its volatile leases, the steps its strategy allows,
//! and each step's durable write, exactly as the model's owner (spec.md §3, §5).

use crate::crash::{CrashPlan, When};
use crate::log::{decode_delta, Log, LogError};
use crate::store::{Guard, Item, Store, StoreError};
use crate::strategy::{Step, StepKind, Strategy};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// How the owner runs its strategy.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Settings {
    pub strategy: Strategy,
    /// Checkpoint interval of periodic-commit and offset-stamp, in records.
    pub commit_every: u64,
    /// Records one owner may hold at once in the parallel strategies.
    pub inflight: usize,
    /// Records fetched (and written) together by the serial strategies; 1 is the model's case.
    pub batch: usize,
    /// Test only: a deliberately broken variant, to show that conformance can fail.
    pub mutation: Option<Mutation>,
}

/// Deliberate bugs in the real code path, selected only by tests (the hidden `--mutation`
/// flag), so that the conformance harness can be shown to detect a broken consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mutation {
    /// atomic-fenced's transaction does not check the epoch.
    NoFence,
    /// atomic-cas's transaction does not compare with the stored next offset.
    NoCas,
}

impl std::str::FromStr for Mutation {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "no-fence" => Ok(Mutation::NoFence),
            "no-cas" => Ok(Mutation::NoCas),
            other => Err(format!("unknown mutation '{other}' (expected no-fence or no-cas)")),
        }
    }
}

impl Settings {
    pub fn new(strategy: Strategy) -> Settings {
        Settings { strategy, commit_every: 2, inflight: 2, batch: 1, mutation: None }
    }
}

/// Where a fetched batch is inside its strategy's sequence of writes (the model's `Stage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    Fetched,
    Committed,
    EffectApplied,
    Recorded,
}

/// A fetched, unfinished batch of records `[offset, end)` with their deltas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    pub end: u64,
    pub stage: Stage,
    pub deltas: Vec<i64>,
}

/// The owner's in-memory view of one partition it believes it owns (the model's `Lease`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub epoch: i64,
    pub position: u64,
    pub checkpoint: u64,
    pub records: BTreeMap<u64, InFlight>,
    pub done: BTreeSet<u64>,
}

impl Lease {
    fn fresh(epoch: i64, next_offset: u64) -> Lease {
        Lease { epoch, position: next_offset, checkpoint: next_offset, records: BTreeMap::new(), done: BTreeSet::new() }
    }

    /// Records fetched since the checkpoint and finished (no longer in flight).
    fn finished(&self) -> u64 {
        let in_flight: u64 = self.records.iter().map(|(offset, record)| record.end - offset).sum();
        self.position - self.checkpoint - in_flight
    }
}

/// What a step did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum Outcome {
    Fetched { count: u64 },
    /// The effect write ran: how many records it applied and how many it recognised as done.
    Applied { applied: u64, skipped: u64 },
    Recorded,
    Committed,
    /// The fenced transaction aborted: the owner's epoch is stale; it dropped the partition.
    Fenced { held: i64, current: i64 },
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Fetched { count } => write!(f, "fetched {count}"),
            Outcome::Applied { applied, skipped } => write!(f, "applied {applied} skipped {skipped}"),
            Outcome::Recorded => write!(f, "recorded"),
            Outcome::Committed => write!(f, "committed"),
            Outcome::Fenced { held, current } => write!(f, "fenced {held} {current}"),
        }
    }
}

#[derive(Debug)]
pub enum OwnerError {
    Store(StoreError),
    Log(LogError),
    /// The step is not what the strategy allows now (the worker protocol's guard).
    NotEnabled { step: Step, enabled: Vec<Step> },
    /// A record's payload is not an 8-byte delta.
    BadPayload { partition: u32, offset: u64 },
}

impl fmt::Display for OwnerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OwnerError::Store(error) => write!(f, "{error}"),
            OwnerError::Log(error) => write!(f, "{error}"),
            OwnerError::NotEnabled { step, enabled } => {
                let enabled: Vec<String> = enabled.iter().map(Step::to_string).collect();
                write!(f, "step '{step}' is not enabled (enabled: {})", if enabled.is_empty() { "none".to_string() } else { enabled.join(", ") })
            }
            OwnerError::BadPayload { partition, offset } => {
                write!(f, "record {offset} of partition {partition} is not an 8-byte delta")
            }
        }
    }
}

impl std::error::Error for OwnerError {}

impl From<StoreError> for OwnerError {
    fn from(error: StoreError) -> Self {
        OwnerError::Store(error)
    }
}

impl From<LogError> for OwnerError {
    fn from(error: LogError) -> Self {
        OwnerError::Log(error)
    }
}

pub struct Owner {
    store: Store,
    log: Log,
    group: String,
    name: String,
    settings: Settings,
    leases: BTreeMap<u32, Lease>,
    /// The last log end seen per partition (see `log_end`).
    log_ends: BTreeMap<u32, u64>,
    crash: CrashPlan,
}

/// Serialisable view of an owner's volatile state (the worker's `state` reply).
#[derive(Clone, Debug, Serialize)]
pub struct OwnerState<'a> {
    pub group: &'a str,
    pub owner: &'a str,
    pub strategy: Strategy,
    pub leases: &'a BTreeMap<u32, Lease>,
}

impl Owner {
    /// Starts (or restarts) an owner: the coordinator hands it, at the current epoch, every
    /// partition the store assigns to it, and it resumes each from the committed checkpoint.
    pub fn start(mut store: Store, log: Log, group: &str, name: &str, settings: Settings, crash: CrashPlan) -> Result<Owner, OwnerError> {
        store.ensure_group(group, "o0")?;
        let mut leases = BTreeMap::new();
        for partition in 0..store.partitions() {
            let row = store.progress(group, partition)?;
            if row.owner == name {
                leases.insert(partition, Lease::fresh(row.epoch, row.next_offset));
            }
        }
        let log_ends = BTreeMap::new();
        Ok(Owner { store, log, group: group.to_string(), name: name.to_string(), settings, leases, log_ends, crash })
    }

    pub fn state(&self) -> OwnerState<'_> {
        OwnerState { group: &self.group, owner: &self.name, strategy: self.settings.strategy, leases: &self.leases }
    }

    /// The coordinator's assignment: after a rebalance names this owner in the store, the
    /// owner takes the partition at the new epoch from the committed checkpoint (replacing any
    /// stale lease it held). Returns the epoch, or `None` when the store names another owner.
    pub fn assign(&mut self, partition: u32) -> Result<Option<i64>, OwnerError> {
        let row = self.store.progress(&self.group, partition)?;
        if row.owner != self.name {
            return Ok(None);
        }
        self.leases.insert(partition, Lease::fresh(row.epoch, row.next_offset));
        Ok(Some(row.epoch))
    }

    /// Arms one more crash point (the worker's `arm` command).
    pub fn arm(&mut self, point: crate::crash::CrashPoint) {
        self.crash.arm(point);
    }

    pub fn leases(&self) -> &BTreeMap<u32, Lease> {
        &self.leases
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The steps the strategy allows now, in a fixed order (by partition).
    pub fn enabled_steps(&mut self) -> Result<Vec<Step>, OwnerError> {
        let mut steps = Vec::new();
        let positions: Vec<(u32, u64)> = self.leases.iter().map(|(&p, lease)| (p, lease.position)).collect();
        for (partition, position) in positions {
            let log_end = self.log_end(partition, position)?;
            lease_steps(&self.settings, partition, &self.leases[&partition], log_end, &mut steps);
        }
        Ok(steps)
    }

    /// The log end of a partition, as far as `position` needs it: the end only grows, so the
    /// last one seen is asked again (a refresh reads files) only once the owner has caught up.
    fn log_end(&mut self, partition: u32, position: u64) -> Result<u64, OwnerError> {
        let known = self.log_ends.get(&partition).copied().unwrap_or(0);
        if position < known {
            return Ok(known);
        }
        let end = self.log.end(partition)?;
        self.log_ends.insert(partition, end);
        Ok(end)
    }

    /// Performs one step if the strategy allows it now; each step but `fetch` is one durable
    /// write. Crash points named in the plan end the process before, inside or after it.
    pub fn perform(&mut self, step: Step) -> Result<Outcome, OwnerError> {
        let enabled = self.enabled_steps()?;
        if !enabled.contains(&step) {
            return Err(OwnerError::NotEnabled { step, enabled });
        }
        self.perform_enabled(step)
    }

    /// Performs a step already known to be enabled.
    fn perform_enabled(&mut self, step: Step) -> Result<Outcome, OwnerError> {
        let span = self.step_span(step);
        self.crash.at(step.kind, When::Before, span.clone());
        let outcome = match step.kind {
            StepKind::Fetch => self.fetch(step.partition),
            StepKind::CommitOffset => self.commit_offset(step.partition, step.offset),
            StepKind::InsertProcessed => self.insert_processed(step.partition, step.offset),
            _ => self.apply(step),
        }?;
        self.crash.at(step.kind, When::After, span);
        Ok(outcome)
    }

    /// The offsets a step concerns, for matching crash points.
    fn step_span(&self, step: Step) -> std::ops::Range<u64> {
        let lease = &self.leases[&step.partition];
        match step.kind {
            StepKind::Fetch => step.offset..step.offset + 1,
            StepKind::CommitOffset => step.offset..step.offset + 1,
            _ => step.offset..lease.records.get(&step.offset).map_or(step.offset + 1, |record| record.end),
        }
    }

    /// Runs the strategy until nothing is enabled (every owned partition caught up and
    /// committed) and returns the steps taken. The parallel strategies work in windows: fetch
    /// until `inflight` records are pending, then complete them highest first (the order in
    /// which parallel-max's trap shows), committing whenever the target moves.
    pub fn run_to_end(&mut self) -> Result<Vec<(Step, Outcome)>, OwnerError> {
        let mut taken = Vec::new();
        let mut draining = false;
        loop {
            let steps = self.enabled_steps()?;
            let kind_of = |kind| steps.iter().find(|s| s.kind == kind);
            let choice = if self.settings.strategy.is_parallel() {
                let fetch = kind_of(StepKind::Fetch).filter(|_| !draining);
                let highest = steps.iter().rfind(|s| s.kind == StepKind::ApplyEffect);
                kind_of(StepKind::CommitOffset).or(fetch).or(highest)
            } else {
                steps.first()
            };
            let Some(&step) = choice else { return Ok(taken) };
            draining |= step.kind == StepKind::ApplyEffect;
            let outcome = self.perform_enabled(step)?;
            taken.push((step, outcome));
            // A window is drained once nothing is pending; then the next one is fetched.
            if self.leases.values().all(|lease| lease.records.is_empty()) {
                draining = false;
            }
        }
    }

    fn lease_mut(&mut self, partition: u32) -> &mut Lease {
        self.leases.get_mut(&partition).expect("an enabled step has its lease")
    }

    fn fetch(&mut self, partition: u32) -> Result<Outcome, OwnerError> {
        let lease = &self.leases[&partition];
        let (position, count) = (lease.position, fetch_count(&self.settings, lease, self.log.end(partition)?));
        let mut deltas = Vec::with_capacity(count as usize);
        for offset in position..position + count {
            let record = self.log.read(partition, offset)?;
            deltas.push(decode_delta(&record.payload).ok_or(OwnerError::BadPayload { partition, offset })?);
        }
        let lease = self.lease_mut(partition);
        lease.records.insert(position, InFlight { end: position + count, stage: Stage::Fetched, deltas });
        lease.position = position + count;
        Ok(Outcome::Fetched { count })
    }

    fn items(&self, partition: u32, offset: u64) -> Vec<Item> {
        let record = &self.leases[&partition].records[&offset];
        record.deltas.iter().enumerate().map(|(i, &delta)| Item { offset: offset + i as u64, delta }).collect()
    }

    /// The effect writes: apply-effect, apply-stamped, apply-deduped, apply-atomic.
    fn apply(&mut self, step: Step) -> Result<Outcome, OwnerError> {
        let (partition, offset) = (step.partition, step.offset);
        let items = self.items(partition, offset);
        let (group, strategy, epoch) = (self.group.clone(), self.settings.strategy, self.leases[&partition].epoch);
        let crash = self.crash.clone();
        let span = offset..offset + items.len() as u64;
        let mut inside = || crash.at(step.kind, When::Inside, span.clone());
        let result = match step.kind {
            StepKind::ApplyEffect => {
                let unless_processed = strategy == Strategy::DedupSeparate;
                self.store.add_effect(&group, partition, &items, unless_processed, &mut inside)
            }
            StepKind::ApplyStamped => self.store.apply_stamped(&group, partition, &items, &mut inside),
            StepKind::ApplyDeduped => self.store.apply_deduped(&group, partition, &items, &mut inside),
            StepKind::ApplyAtomic => {
                let mutation = self.settings.mutation;
                let guard = match strategy {
                    Strategy::AtomicFenced if mutation != Some(Mutation::NoFence) => Guard::Fenced { epoch },
                    Strategy::AtomicCas if mutation != Some(Mutation::NoCas) => Guard::Cas,
                    _ => Guard::Blind,
                };
                self.store.apply_atomic(&group, partition, &items, guard, &mut inside)
            }
            other => unreachable!("{} is not an effect write", other.name()),
        };
        let applied = match result {
            Ok(applied) => applied,
            Err(StoreError::Fenced { held, current, .. }) => {
                // The abort tells the zombie it lost the partition: it stops working on it.
                self.leases.remove(&partition);
                return Ok(Outcome::Fenced { held, current });
            }
            Err(error) => return Err(error.into()),
        };
        self.after_effect(step, &applied);
        let applied_count = applied.iter().filter(|&&a| a).count() as u64;
        Ok(Outcome::Applied { applied: applied_count, skipped: applied.len() as u64 - applied_count })
    }

    /// Moves the batch to its next stage after its effect write (the model's bookkeeping).
    fn after_effect(&mut self, step: Step, applied: &[bool]) {
        let strategy = self.settings.strategy;
        let lease = self.lease_mut(step.partition);
        let offset = step.offset;
        let end = lease.records[&offset].end;
        match (strategy, step.kind) {
            (Strategy::EffectFirst | Strategy::DedupAtomic, _) => lease.records.get_mut(&offset).expect("in flight").stage = Stage::EffectApplied,
            (Strategy::DedupSeparate, _) => {
                // Ids found processed mean effect and id both landed before: only the commit is left.
                let all_processed = applied.iter().all(|&a| !a);
                lease.records.get_mut(&offset).expect("in flight").stage = if all_processed { Stage::Recorded } else { Stage::EffectApplied };
            }
            (Strategy::ParallelMax | Strategy::ParallelWatermark, _) => {
                lease.records.remove(&offset);
                if offset >= lease.checkpoint {
                    lease.done.insert(offset);
                }
                if strategy == Strategy::ParallelMax {
                    let highest = lease.done.last().copied();
                    lease.done.retain(|&done| Some(done) == highest);
                }
            }
            (Strategy::Atomic | Strategy::AtomicFenced | Strategy::AtomicCas, _) => {
                lease.records.remove(&offset);
                if applied.iter().any(|&a| a) {
                    lease.checkpoint = end;
                }
            }
            _ => {
                lease.records.remove(&offset);
            }
        }
    }

    fn insert_processed(&mut self, partition: u32, offset: u64) -> Result<Outcome, OwnerError> {
        let offsets: Vec<u64> = self.items(partition, offset).iter().map(|item| item.offset).collect();
        let crash = self.crash.clone();
        let span = offset..offset + offsets.len() as u64;
        let mut inside = || crash.at(StepKind::InsertProcessed, When::Inside, span.clone());
        self.store.insert_processed(&self.group, partition, &offsets, &mut inside)?;
        self.lease_mut(partition).records.get_mut(&offset).expect("in flight").stage = Stage::Recorded;
        Ok(Outcome::Recorded)
    }

    fn commit_offset(&mut self, partition: u32, next_offset: u64) -> Result<Outcome, OwnerError> {
        let crash = self.crash.clone();
        let mut inside = || crash.at(StepKind::CommitOffset, When::Inside, next_offset..next_offset + 1);
        self.store.commit_offset(&self.group, partition, next_offset, &mut inside)?;
        let strategy = self.settings.strategy;
        let lease = self.lease_mut(partition);
        lease.checkpoint = next_offset;
        match strategy {
            // Commit-first commits before the effect: the batch stays in flight until applied.
            Strategy::CommitFirst => {
                let (_, record) = lease.records.iter_mut().next().expect("commit-first commits a fetched batch");
                record.stage = Stage::Committed;
            }
            Strategy::ParallelMax | Strategy::ParallelWatermark => lease.done.retain(|&offset| offset >= next_offset),
            Strategy::PeriodicCommit | Strategy::OffsetStamp => {}
            _ => {
                let first = *lease.records.keys().next().expect("the committed batch is in flight");
                lease.records.remove(&first);
            }
        }
        Ok(Outcome::Committed)
    }
}

/// How many records the next fetch takes: one for the parallel strategies; otherwise up to
/// `batch`, within the log and (periodic strategies) within the checkpoint interval.
fn fetch_count(settings: &Settings, lease: &Lease, log_end: u64) -> u64 {
    let available = log_end - lease.position;
    if settings.strategy.is_parallel() {
        return 1;
    }
    let mut count = available.min(settings.batch as u64);
    if settings.strategy.is_periodic() {
        count = count.min(settings.commit_every - lease.finished());
    }
    count
}

/// The model's `lease_actions`: the steps one lease allows under the strategy.
fn lease_steps(settings: &Settings, partition: u32, lease: &Lease, log_end: u64, steps: &mut Vec<Step>) {
    let step = |kind, offset| Step { kind, partition, offset };
    let strategy = settings.strategy;
    if strategy.is_parallel() {
        if let Some(next_offset) = parallel_commit_target(strategy, lease) {
            steps.push(step(StepKind::CommitOffset, next_offset));
            return;
        }
        if lease.position < log_end && lease.records.len() < settings.inflight {
            steps.push(step(StepKind::Fetch, lease.position));
        }
        steps.extend(lease.records.keys().map(|&offset| step(StepKind::ApplyEffect, offset)));
        return;
    }
    let Some((&offset, record)) = lease.records.iter().next() else {
        let finished = lease.finished();
        if strategy.is_periodic() {
            if finished > 0 && (finished >= settings.commit_every || lease.position == log_end) {
                steps.push(step(StepKind::CommitOffset, lease.position));
            }
            if finished < settings.commit_every && lease.position < log_end {
                steps.push(step(StepKind::Fetch, lease.position));
            }
        } else if lease.position < log_end {
            steps.push(step(StepKind::Fetch, lease.position));
        }
        return;
    };
    let kind = match (strategy, record.stage) {
        (Strategy::CommitFirst, Stage::Fetched) => return steps.push(step(StepKind::CommitOffset, record.end)),
        (Strategy::CommitFirst, Stage::Committed) => StepKind::ApplyEffect,
        (Strategy::EffectFirst | Strategy::PeriodicCommit | Strategy::DedupSeparate, Stage::Fetched) => StepKind::ApplyEffect,
        (Strategy::EffectFirst | Strategy::DedupAtomic, Stage::EffectApplied) => {
            return steps.push(step(StepKind::CommitOffset, record.end))
        }
        (Strategy::DedupSeparate, Stage::EffectApplied) => StepKind::InsertProcessed,
        (Strategy::DedupSeparate, Stage::Recorded) => return steps.push(step(StepKind::CommitOffset, record.end)),
        (Strategy::OffsetStamp, Stage::Fetched) => StepKind::ApplyStamped,
        (Strategy::DedupAtomic, Stage::Fetched) => StepKind::ApplyDeduped,
        (Strategy::Atomic | Strategy::AtomicFenced | Strategy::AtomicCas, Stage::Fetched) => StepKind::ApplyAtomic,
        (strategy, stage) => unreachable!("{strategy} never leaves a batch in stage {stage:?}"),
    };
    steps.push(step(kind, offset));
}

/// The model's `parallel_commit_target`: highest completion + 1 (parallel-max) or the end of
/// the contiguous completed prefix (parallel-watermark), when above the checkpoint.
fn parallel_commit_target(strategy: Strategy, lease: &Lease) -> Option<u64> {
    let target = match strategy {
        Strategy::ParallelMax => lease.done.iter().next_back().map_or(lease.checkpoint, |&max| max + 1),
        _ => {
            let mut next = lease.checkpoint;
            while lease.done.contains(&next) {
                next += 1;
            }
            next
        }
    };
    (target > lease.checkpoint).then_some(target)
}
