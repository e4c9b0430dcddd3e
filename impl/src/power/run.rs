//! One power-cut run: a producer and an owner on a fresh simulated disk and SQLite store, the
//! power cut at the run's point, the reboot and its checks (see `mod.rs`).

use super::{is_exact, keeps_edge_guarantee, LogPoint, Point, PowerError};
use crate::crash::{CrashPlan, CrashPoint, Crashed, When};
use crate::external::{ExternalDir, Relay};
use crate::log::{
    encode_delta, Appended, Cut, Log, LogError, LogIdentity, PartitionView, Producer, SimDisk, SplitMix64, Storage,
    TailRepair, WriterMode,
};
use crate::owner::{check_log, OnFenced, Owner, OwnerError, Settings, FIRST_OWNER};
use crate::store::{set_value, Fact, Store, StoreOptions};
use crate::strategy::{EffectKind, Isolation, LogCheck, Sequence, Step, StepKind, Strategy};
use crate::txn::{OutputLog, OutputReader};
use std::collections::BTreeMap;
use std::ops::Range;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

const GROUP: &str = "g";
/// The producer's batches, and their records each.
pub(super) const BATCHES: u64 = 6;
const BATCH_RECORDS: u64 = 3;
const RECORDS: u64 = BATCHES * BATCH_RECORDS;
/// The log's points fall in this batch's append or retention; the owner's at the record
/// nearest `MID_RECORD`.
const MID_BATCH: u64 = BATCHES / 2;
const MID_RECORD: u64 = MID_BATCH * BATCH_RECORDS;
/// The owner's fetch size, apart from the producer's so that batches do not line up.
const OWNER_BATCH: usize = 2;
/// At most this many owner steps between the producer's halt and the cut.
pub(super) const STEPS_AFTER_HALT_MAX: u64 = 6;
const PRODUCER: Producer = Producer { id: 1, epoch: 1 };
/// The simulated disk's root: no real file is made there.
const ROOT: &str = "/sim";

/// One run: a strategy, the point where the power goes, and the run's seed.
#[derive(Clone, Copy, Debug)]
pub(super) struct Case {
    pub(super) strategy: Strategy,
    pub(super) point: Point,
    pub(super) seed: u64,
    pub(super) writer_mode: WriterMode,
}

/// What one run found; `violations` are broken guarantees (refusals included, except in the
/// damage classes' runs, `refusals_allowed`, which count them).
#[derive(Debug, Default)]
pub(super) struct Outcome {
    pub(super) refused: bool,
    /// The first refusal's one-line message.
    pub(super) refusal: Option<String>,
    /// Whether the log's own open refused partition 0 (the writer's or a reader's, or its
    /// damage): the acknowledged records it lacks are then not lost silently. A group's check
    /// that refuses later (the group ahead of the log) does not count: the log had already
    /// dropped the records without a word.
    pub(super) log_refused: bool,
    /// The damage classes' runs: a refusal is counted, not a violation.
    pub(super) refusals_allowed: bool,
    /// Records of the interrupted append (never acknowledged) that the reopened log lacks.
    pub(super) lost_unacked: u64,
    pub(super) acked_lost: u64,
    /// Acknowledged records at or past the start that the reopened log holds byte for byte.
    pub(super) acked_kept: u64,
    /// Retries of batches the reopened log held, answered as duplicates.
    pub(super) deduplicated: u64,
    /// A strategy that is not exact ended with another total or output (not a violation).
    pub(super) inexact: bool,
    pub(super) cut: Cut,
    pub(super) violations: Vec<String>,
}

impl Outcome {
    pub(super) fn violation(&mut self, what: String) {
        self.violations.push(what);
    }

    fn refuse(&mut self, why: String) {
        self.refused = true;
        if !self.refusals_allowed {
            self.violations.push(format!("a refusal ({why})"));
        }
        self.refusal.get_or_insert(why);
    }

    /// A refusal by the log's own open of partition 0.
    fn log_refuse(&mut self, why: String) {
        self.log_refused = true;
        self.refuse(why);
    }

    /// Acknowledged records the reopened log lacks with no refusal of the log's open naming
    /// the partition.
    pub(super) fn silently_lost(&self) -> u64 {
        if self.log_refused {
            0
        } else {
            self.acked_lost
        }
    }
}

fn delta(offset: u64) -> i64 {
    offset as i64 + 1
}

fn payload(offset: u64) -> Vec<u8> {
    encode_delta(delta(offset))
}

fn batch_offsets(batch: u64) -> Range<u64> {
    batch * BATCH_RECORDS..(batch + 1) * BATCH_RECORDS
}

fn settings(strategy: Strategy) -> Settings {
    Settings { batch: OWNER_BATCH, ..Settings::new(strategy) }
}

/// The simulated disk with the log, and the SQLite store in its own directory under `work`.
pub(super) struct World {
    pub(super) disk: SimDisk,
    pub(super) storage: Storage,
    pub(super) log_dir: PathBuf,
    dir: PathBuf,
    store_path: PathBuf,
    identity: LogIdentity,
}

impl World {
    pub(super) fn new(work: &Path, seed: u64) -> Result<World, PowerError> {
        let dir = work.join(format!("run-{seed:016x}"));
        std::fs::create_dir(&dir).map_err(|source| PowerError::Io { path: dir.clone(), source })?;
        let disk = SimDisk::new(Path::new(ROOT));
        let storage = Storage::Simulated(disk.clone());
        let log_dir = Path::new(ROOT).join("log");
        let identity = LogIdentity { id: seed | 1, partitions: 1 };
        Log::create_on(&storage, &log_dir, identity)?;
        OutputLog::at(&storage, &log_dir, identity).create()?;
        let store_path = dir.join("store.db");
        Store::create(&store_path, identity, StoreOptions::default())?;
        // The email provider and the index are real files beside the store: SQLite with
        // `synchronous=FULL`, relied on as the store is.
        ExternalDir::new(&dir).create()?;
        Ok(World { disk, storage, log_dir, dir, store_path, identity })
    }

    pub(super) fn remove(self) -> Result<(), PowerError> {
        std::fs::remove_dir_all(&self.dir).map_err(|source| PowerError::Io { path: self.dir.clone(), source })
    }

    pub(super) fn writer(&self, mode: WriterMode) -> Result<(Log, Vec<TailRepair>), LogError> {
        Log::open_writer_on(&self.storage, &self.log_dir, self.identity, mode)
    }

    fn reader(&self) -> Result<Log, LogError> {
        Log::open_reader_on(&self.storage, &self.log_dir, self.identity)
    }

    pub(super) fn owner(&self, strategy: Strategy, crash: CrashPlan) -> Result<Owner, PowerError> {
        let store = Store::open(&self.store_path, StoreOptions::default())?;
        self.start(strategy, store, self.reader()?, crash)
    }

    /// Starts the group's owner on `store` and `log`, with the external systems of the run's
    /// directory.
    fn start(&self, strategy: Strategy, store: Store, log: Log, crash: CrashPlan) -> Result<Owner, PowerError> {
        let external = ExternalDir::new(&self.dir);
        Ok(Owner::start_in(store, (log, &external), GROUP, FIRST_OWNER, settings(strategy), crash)?)
    }

    /// The partition file's length as the disk holds it now.
    fn log_len(&self) -> Result<u64, PowerError> {
        let path = self.log_dir.join("partition-0.log");
        self.disk.len(&path).map_err(|source| PowerError::Io { path, source })
    }

    /// Arms the halt of `point` on the producer's next operation it names.
    pub(super) fn halt_at(&self, point: LogPoint) {
        self.disk.halt_at(point.halt(&self.log_dir));
    }
}

/// The producer: the writer, and what it was told is acknowledged.
pub(super) struct Writer {
    pub(super) log: Log,
    pub(super) acked: BTreeMap<u64, Vec<u8>>,
    pub(super) batches_acked: u64,
}

impl Writer {
    /// Appends `batch` idempotently; its offsets are the batch's, or the run is broken.
    pub(super) fn append(&mut self, batch: u64) -> Result<Appended, LogError> {
        let payloads: Vec<Vec<u8>> = batch_offsets(batch).map(payload).collect();
        let sequence = u32::try_from(batch * BATCH_RECORDS).expect("a run holds few records");
        let appended = self.log.append_idempotent(0, PRODUCER, sequence, &payloads)?;
        self.acked.extend(appended.offsets.clone().zip(payloads));
        self.batches_acked = batch + 1;
        Ok(appended)
    }
}

/// What happened before the power went.
#[derive(Default)]
pub(super) struct Before {
    pub(super) acked: BTreeMap<u64, Vec<u8>>,
    pub(super) batches_acked: u64,
    /// The batch whose append the power interrupted.
    pub(super) interrupted: Option<u64>,
    /// The start the last completed retention made durable.
    start: u64,
    /// The start before and after the retention the power interrupted.
    retention: Option<(u64, u64)>,
    reached: bool,
    /// The owner's steps (all of them in a run that reaches no point).
    steps: Vec<Step>,
}

/// The owner's crash points of `strategy`, from a run without a cut, then the log's points.
pub(super) fn points(strategy: Strategy, writer_mode: WriterMode, work: &Path) -> Result<Vec<Point>, PowerError> {
    let world = World::new(work, u64::MAX - strategy as u64)?;
    let before = before_cut(&world, strategy, writer_mode, None, &mut SplitMix64::new(0))?;
    world.remove()?;
    let mut points = Vec::new();
    for kind in StepKind::ALL {
        let taken = before.steps.iter().filter(|step| step.kind == kind);
        let Some(step) = taken.min_by_key(|step| step.offset.abs_diff(MID_RECORD)) else { continue };
        points.extend(
            When::around(kind).iter().map(|&when| Point::Owner(CrashPoint { kind, when, offset: Some(step.offset) })),
        );
    }
    points.extend(LogPoint::ALL.map(Point::Log));
    Ok(points)
}

/// One run, its violations in the outcome (a failure of the system under test is one too).
pub(super) fn run(case: &Case, work: &Path) -> Result<Outcome, PowerError> {
    let world = World::new(work, case.seed)?;
    let mut rng = SplitMix64::new(case.seed);
    let mut outcome = Outcome::default();
    if let Err(error) = cut_and_check(&world, case, &mut rng, &mut outcome) {
        outcome.violation(format!("the run failed: {error}"));
    }
    world.remove()?;
    Ok(outcome)
}

fn cut_and_check(world: &World, case: &Case, rng: &mut SplitMix64, outcome: &mut Outcome) -> Result<(), PowerError> {
    let before = before_cut(world, case.strategy, case.writer_mode, Some(case.point), rng)?;
    if !before.reached {
        outcome.violation("the point was never reached".into());
    }
    // Every process died with the power: `before_cut` dropped the producer and the owner.
    outcome.cut = world.disk.power_cut(rng.next_u64());
    after_cut(world, case, &before, outcome)
}

/// The producer appends its batches, the owner consumes after each, and the producer retains
/// what the group committed, until `point` (none: to the end).
fn before_cut(
    world: &World,
    strategy: Strategy,
    writer_mode: WriterMode,
    point: Option<Point>,
    rng: &mut SplitMix64,
) -> Result<Before, PowerError> {
    let (log, _) = world.writer(writer_mode)?;
    let mut writer = Writer { log, acked: BTreeMap::new(), batches_acked: 0 };
    let crash = match point {
        Some(Point::Owner(point)) => CrashPlan::in_process(vec![point]),
        Some(Point::Log(_)) | None => CrashPlan::none(),
    };
    let mut owner = world.owner(strategy, crash)?;
    let mut before = Before::default();
    let log_point = |kind| match point {
        Some(Point::Log(log_point)) if log_point.kind() == kind => Some(log_point),
        Some(Point::Log(_) | Point::Owner(_)) | None => None,
    };
    for batch in 0..BATCHES {
        let append_halt = log_point(super::PointKind::Append).filter(|_| batch == MID_BATCH);
        if append(world, &mut writer, &mut owner, batch, append_halt, rng, &mut before)? {
            break;
        }
        if owner_run(&mut owner, &mut before.steps)? {
            before.reached = true;
            cut_mid_append(world, &mut writer, batch + 1, rng, &mut before)?;
            break;
        }
        let retention_halt = log_point(super::PointKind::Retention).filter(|_| batch == MID_BATCH);
        if retain(world, &mut writer, &mut owner, retention_halt, rng, &mut before)? {
            break;
        }
    }
    (before.acked, before.batches_acked) = (writer.acked, writer.batches_acked);
    Ok(before)
}

/// The producer's append of `batch`, halted at `halt` if given; true when it was.
fn append(
    world: &World,
    writer: &mut Writer,
    owner: &mut Owner,
    batch: u64,
    halt: Option<LogPoint>,
    rng: &mut SplitMix64,
    before: &mut Before,
) -> Result<bool, PowerError> {
    if let Some(point) = halt {
        world.halt_at(point);
    }
    match writer.append(batch) {
        Ok(_) => Ok(false),
        Err(error) => {
            before.interrupted = Some(batch);
            after_halt(world, error, owner, rng, before).map(|()| true)
        }
    }
}

/// The producer's retention up to what the group committed, halted at `halt` if given; true
/// when it was.
fn retain(
    world: &World,
    writer: &mut Writer,
    owner: &mut Owner,
    halt: Option<LogPoint>,
    rng: &mut SplitMix64,
    before: &mut Before,
) -> Result<bool, PowerError> {
    let to = owner.store().progress(GROUP, 0)?.next_offset;
    let from = writer.log.start(0)?;
    if let Some(point) = halt {
        world.halt_at(point);
        before.retention = Some((from, to));
    }
    match writer.log.retain_before(0, to) {
        Ok(start) => {
            before.start = start;
            Ok(false)
        }
        Err(error) => after_halt(world, error, owner, rng, before).map(|()| true),
    }
}

/// The producer stopped at the armed halt (any other error fails the run): the owner, which
/// the power has not reached yet, goes on for a seeded number of steps.
fn after_halt(
    world: &World,
    error: LogError,
    owner: &mut Owner,
    rng: &mut SplitMix64,
    before: &mut Before,
) -> Result<(), PowerError> {
    if !world.disk.halted() {
        return Err(error.into());
    }
    before.reached = true;
    for _ in 0..rng.below(STEPS_AFTER_HALT_MAX + 1) {
        let Some(&step) = owner.enabled_steps()?.first() else { break };
        owner.perform(step)?;
        before.steps.push(step);
    }
    Ok(())
}

/// The owner's crash point was hit: the producer is then cut in the middle of its next
/// append, at a seeded point of it (if a batch is left).
fn cut_mid_append(
    world: &World,
    writer: &mut Writer,
    batch: u64,
    rng: &mut SplitMix64,
    before: &mut Before,
) -> Result<(), PowerError> {
    let point = LogPoint::APPEND[rng.below(LogPoint::APPEND.len() as u64) as usize];
    if batch >= BATCHES {
        return Ok(());
    }
    world.halt_at(point);
    match writer.append(batch) {
        Ok(_) => Ok(()),
        Err(_) if world.disk.halted() => {
            before.interrupted = Some(batch);
            Ok(())
        }
        Err(error) => Err(error.into()),
    }
}

/// Runs the owner to the end; true when its crash point was hit (the owner is then a dead
/// process: its open transaction was rolled back as the unwinding dropped it).
fn owner_run(owner: &mut Owner, steps: &mut Vec<Step>) -> Result<bool, PowerError> {
    match panic::catch_unwind(AssertUnwindSafe(|| owner.run_to_end(OnFenced::Stop))) {
        Ok(taken) => {
            steps.extend(taken?.into_iter().map(|(step, _)| step));
            Ok(false)
        }
        Err(payload) if payload.is::<Crashed>() => Ok(true),
        Err(payload) => panic::resume_unwind(payload),
    }
}

/// The reboot: the store and the log reopen, and the checks (a) to (d) of `mod.rs`.
pub(super) fn after_cut(world: &World, case: &Case, before: &Before, outcome: &mut Outcome) -> Result<(), PowerError> {
    let store = Store::open(&world.store_path, StoreOptions::default())?;
    let cut_len = world.log_len()?;
    let (writer, repairs) = match world.writer(case.writer_mode) {
        Ok(opened) => opened,
        Err(error) if refuses(&error) => {
            outcome.log_refuse(format!("the writer's reopen: {error}"));
            return check_records(world, before, outcome).map(|_| ());
        }
        Err(error) => return Err(error.into()),
    };
    let dropped: u64 = repairs.iter().map(|repair| repair.dropped_bytes).sum();
    let reopened_len = world.log_len()?;
    if reopened_len > cut_len || cut_len - reopened_len != dropped {
        let what = format!("the reopen took the file from {cut_len} to {reopened_len} bytes and reported {dropped}");
        outcome.violation(what);
    }
    let Some((mut reader, view)) = check_records(world, before, outcome)? else { return Ok(()) };
    check_start(view.start, before, outcome);
    match check_log(&store, &mut reader, GROUP, LogCheck::RefuseAhead) {
        Ok(_) => {}
        Err(error @ OwnerError::Refused { .. }) => outcome.refuse(format!("the group's check: {error}")),
        Err(error) => return Err(error.into()),
    }
    if outcome.refused {
        return Ok(());
    }
    let writer = Writer { log: writer, acked: BTreeMap::new(), batches_acked: before.batches_acked };
    finish(world, case, writer, (store, reader), outcome)
}

/// (a): every acknowledged record at or past the start is in the log, byte for byte; counts
/// the interrupted batch's records the log lost. A damaged partition is a refusal.
fn check_records(
    world: &World,
    before: &Before,
    outcome: &mut Outcome,
) -> Result<Option<(Log, PartitionView)>, PowerError> {
    let mut reader = match world.reader() {
        Ok(reader) => reader,
        Err(error) if refuses(&error) => {
            outcome.log_refuse(format!("a reader's open: {error}"));
            outcome.acked_lost += before.acked.len() as u64;
            return Ok(None);
        }
        Err(error) => return Err(error.into()),
    };
    let view = reader.view(0)?;
    if let Some(damage) = &view.damage {
        outcome.log_refuse(format!("partition 0 is damaged at offset {}: {}", damage.offset, damage.reason));
    }
    for (&offset, expected) in before.acked.range(view.start..) {
        let found = if offset < view.end { Some(reader.read(0, offset)?.payload) } else { None };
        let intact = found.as_ref() == Some(expected);
        outcome.acked_lost += u64::from(!intact);
        outcome.acked_kept += u64::from(intact);
    }
    if outcome.acked_lost > 0 && !(outcome.refusals_allowed && outcome.log_refused) {
        let silently = if outcome.log_refused { "" } else { " silently" };
        outcome.violation(format!("{} acknowledged record(s){silently} lost", outcome.acked_lost));
    }
    for offset in before.interrupted.map_or(0..0, batch_offsets) {
        if offset >= view.end {
            outcome.lost_unacked += 1;
        } else if reader.read(0, offset)?.payload != payload(offset) {
            outcome.violation(format!("unacknowledged record {offset} survived with other bytes"));
        }
    }
    Ok(Some((reader, view)))
}

/// Whether the log's open refused (rather than failed): a refusal of `LogError::is_refusal`, or
/// a file whose header is not this log format's (a flipped header byte).
fn refuses(error: &LogError) -> bool {
    error.is_refusal() || matches!(error, LogError::BadHeader { .. } | LogError::FormatVersion { .. })
}

/// A completed retention survives; an interrupted one leaves the old start or the new one.
fn check_start(start: u64, before: &Before, outcome: &mut Outcome) {
    let allowed = match before.retention {
        Some((from, to)) => start == from || start == to,
        None => start == before.start,
    };
    if !allowed {
        outcome
            .violation(format!("the start is {start}, after {:?} (last durable {})", before.retention, before.start));
    }
}

/// (d): the producer retries its unacknowledged batches and sends the rest, the owner
/// restarts and runs to the end, and the log and the group hold every record once.
fn finish(
    world: &World,
    case: &Case,
    mut writer: Writer,
    (store, reader): (Store, Log),
    outcome: &mut Outcome,
) -> Result<(), PowerError> {
    // A batch the reopened log holds whole (acknowledged, or kept past an acknowledgement
    // record that lagged) is answered as a duplicate; any other lands anew, once.
    let kept_end = writer.log.end(0)?;
    for batch in writer.batches_acked..BATCHES {
        let Appended { offsets, duplicate } = writer.append(batch)?;
        if offsets != batch_offsets(batch) {
            outcome.violation(format!("batch {batch} landed at offsets {offsets:?} after the reboot"));
            return Ok(());
        }
        if duplicate != (offsets.end <= kept_end) {
            let what = if duplicate { "answered as a duplicate" } else { "appended again" };
            outcome.violation(format!("batch {batch}'s retry was {what}, the reopened log ending at {kept_end}"));
        }
        outcome.deduplicated += u64::from(duplicate);
    }
    drop(writer);
    let mut owner = world.start(case.strategy, store, reader, CrashPlan::none())?;
    if let Err(error) = owner.run_to_end(OnFenced::Stop) {
        outcome.violation(format!("the restarted owner did not finish: {error}"));
        return Ok(());
    }
    if case.strategy.rules().sequence == Sequence::AtomicWithOutbox {
        relay_all(world)?;
    }
    check_final(world, case, &owner, outcome)
}

/// The outbox's relay drains the group's outbox into the index (a step per row, bounded).
fn relay_all(world: &World) -> Result<(), PowerError> {
    let store = Store::open(&world.store_path, StoreOptions::default())?;
    let mut relay = Relay::new(store, ExternalDir::new(&world.dir).open_index()?);
    for _ in 0..=RECORDS {
        if relay.relay_one(GROUP)?.is_none() {
            return Ok(());
        }
    }
    Err(PowerError::BadConfig(format!("the outbox held more than {RECORDS} rows")))
}

/// Every record once in the log, the group committed to its end, and the exact total.
fn check_final(world: &World, case: &Case, owner: &Owner, outcome: &mut Outcome) -> Result<(), PowerError> {
    let mut reader = world.reader()?;
    let view = reader.view(0)?;
    let records = reader.read_range(0, view.start..view.end)?;
    let intact = records.iter().all(|record| record.payload == payload(record.offset));
    if view.end != RECORDS || !intact {
        outcome.violation(format!("the log ends at {} of {RECORDS} records (intact: {intact})", view.end));
    }
    let committed = owner.store().progress(GROUP, 0)?.next_offset;
    if committed != RECORDS {
        outcome.violation(format!("the group committed {committed} of {RECORDS} records"));
    }
    let effect_exact = check_effect(owner, case.strategy)?;
    if let Some(problem) = effect_exact.as_ref().err().filter(|_| is_exact(case.strategy)) {
        outcome.violation(problem.clone());
    }
    let output_exact = check_output(world, case.strategy)?;
    if let Some(problem) = output_exact.as_ref().err().filter(|_| is_exact(case.strategy)) {
        outcome.violation(problem.clone());
    }
    let edge_exact = check_edges(world, case.strategy, owner.store())?;
    if let Some(problem) = edge_exact.as_ref().err().filter(|_| keeps_edge_guarantee(case.strategy)) {
        outcome.violation(problem.clone());
    }
    outcome.inexact = effect_exact.is_err() || output_exact.is_err() || edge_exact.is_err();
    Ok(())
}

/// The group's effect: the sum of the records' deltas (an adding effect), or the last record's
/// value (a set: latest wins once the owner finished alone). `Err` says what differs.
fn check_effect(owner: &Owner, strategy: Strategy) -> Result<Result<(), String>, PowerError> {
    Ok(match strategy.rules().effect {
        EffectKind::Add => {
            let (total, expected) = (owner.store().total(GROUP)?, (0..RECORDS).map(delta).sum::<i64>());
            if total == expected {
                Ok(())
            } else {
                Err(format!("total {total}, not the sum {expected} of the records"))
            }
        }
        EffectKind::Set => {
            let (value, expected) = (owner.store().value(GROUP)?, set_value(RECORDS - 1));
            if value == Some(expected) {
                Ok(())
            } else {
                Err(format!("value {value:?}, not the last record's {expected}"))
            }
        }
    })
}

/// The external systems of spec.md §3.4 after the restarted owner (and the outbox's relay)
/// finished: every record's email delivered once (the email sequences); the index holding
/// exactly the store's facts, one per record (dual-write, outbox). `Err` says what differs;
/// the other sequences have none.
fn check_edges(world: &World, strategy: Strategy, store: &Store) -> Result<Result<(), String>, PowerError> {
    let sequence = strategy.rules().sequence;
    let external = ExternalDir::new(&world.dir);
    if sequence.email_key().is_some() {
        let provider = external.open_provider()?;
        let mut counts = Vec::new();
        for offset in 0..RECORDS {
            counts.push(provider.deliveries(GROUP, 0, offset)?);
        }
        if counts.iter().any(|&count| count != 1) {
            return Ok(Err(format!("emails delivered per record {counts:?}, not once each")));
        }
    }
    let dual = match sequence {
        Sequence::AtomicThenIndex | Sequence::AtomicWithOutbox => true,
        Sequence::CommitThenEffect
        | Sequence::EffectThenCommit
        | Sequence::EffectOnly
        | Sequence::EffectRecordCommit
        | Sequence::Stamped
        | Sequence::DedupedThenCommit
        | Sequence::Atomic
        | Sequence::Transactional
        | Sequence::AtomicThenEmail
        | Sequence::EmailThenAtomic { .. } => false,
    };
    if dual {
        let expected: Vec<Fact> =
            (0..RECORDS).map(|offset| Fact { group: GROUP.to_string(), partition: 0, offset }).collect();
        let (facts, indexed) = (store.facts(Some(GROUP))?, external.open_index()?.facts(Some(GROUP))?);
        if facts != expected || indexed != expected {
            let (facts, indexed) = (facts.len(), indexed.len());
            return Ok(Err(format!("{facts} facts in the store, {indexed} in the index, of {RECORDS} records")));
        }
    }
    Ok(Ok(()))
}

/// The transactional sequence's output: a read_committed reader of the reopened output log
/// reads every input record's output once, in order, with its delta, and stops at the end
/// (nothing left open). `Err` says what differs; the other sequences have no output.
fn check_output(world: &World, strategy: Strategy) -> Result<Result<(), String>, PowerError> {
    match strategy.rules().sequence {
        Sequence::Transactional => {}
        Sequence::CommitThenEffect
        | Sequence::EffectThenCommit
        | Sequence::EffectOnly
        | Sequence::EffectRecordCommit
        | Sequence::Stamped
        | Sequence::DedupedThenCommit
        | Sequence::Atomic
        | Sequence::AtomicThenEmail
        | Sequence::EmailThenAtomic { .. }
        | Sequence::AtomicThenIndex
        | Sequence::AtomicWithOutbox => return Ok(Ok(())),
    }
    let output = OutputLog::at(&world.storage, &world.log_dir, world.identity);
    let mut reader = OutputReader::open(&output, 0, Isolation::ReadCommitted)?;
    let (records, caught) = reader.read_all()?;
    let read: Vec<(u64, i64)> = records.iter().map(|record| (record.input_offset, record.delta)).collect();
    let expected: Vec<(u64, i64)> = (0..RECORDS).map(|offset| (offset, delta(offset))).collect();
    if read != expected || caught.lso != caught.end {
        return Ok(Err(format!("read_committed output {read:?} (LSO {}, end {})", caught.lso, caught.end)));
    }
    Ok(Ok(()))
}
