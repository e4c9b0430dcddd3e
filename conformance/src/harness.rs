//! The harness: a fresh real system (log, store, owner processes) driven by model actions, and
//! the abstraction function that maps its concrete state back to a model `State`.

use crate::driver::{self, Mode, OwnerHandle, OwnerSpec};
use crate::error::{Error, Unobservable};
use consumer::log::{encode_delta, Log, Producer};
use consumer::log::{LogError, WriterMode};
use consumer::owner::{Mutation, Outcome, Settings};
use consumer::store::{Journal, Location, Store, StoreOptions};
use consumer::strategy::{LogCheck, OutOfRange, StartPolicy, Step, StepKind, Strategy as RealStrategy};
use model::state::{
    Ghost, Group, Lease, Owner, PartitionRow, ProducerState, Stage, State, Store as ModelStore, Witness,
};
use model::strategy::OutOfRangePolicy;
use model::{Action, Config};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// How the real system is set up for a replay.
#[derive(Clone, Debug)]
pub struct Options {
    pub mode: Mode,
    /// Where each replay's fresh data directory is made (and removed afterwards).
    pub tmp_root: PathBuf,
    /// Test only: run a deliberately broken consumer.
    pub mutation: Option<Mutation>,
    /// The executable serving worker processes (default: the conformance binary).
    pub worker_exe: Option<PathBuf>,
    /// Replay against PostgreSQL: a URL of the server's maintenance database (for example
    /// `postgres:///postgres?host=/run/postgresql`); each replay gets a fresh database there.
    pub postgres: Option<String>,
}

impl Options {
    /// Data directories go to /dev/shm when it exists: a process crash keeps the page cache,
    /// so tmpfs gives the same crash semantics as a disk, minus the wait for fsync.
    pub fn new(mode: Mode) -> Options {
        let shm = Path::new("/dev/shm");
        let tmp_root = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        Options { mode, tmp_root, mutation: None, worker_exe: None, postgres: None }
    }
}

/// A real system built for one trace's configuration.
pub struct Harness {
    config: Config,
    /// The real system's configuration for the model's strategy.
    row: RealRow,
    options: Options,
    dir: ScratchDir,
    log: Log,
    store: Store,
    /// Per group, the owner slots as the model numbers them: each owner's current
    /// incarnation, then the paused slots (`None`: crashed, or a free paused slot).
    owners: Vec<Vec<Option<Box<dyn OwnerHandle>>>>,
    /// Per group and paused slot, the owner that earlier incarnation runs as.
    paused_of: Vec<Vec<Option<u8>>>,
    /// Ghost history as observed in the real system (never copied from the model).
    ghosts: Vec<Ghost>,
    crashes_used: u8,
    rebalances_used: u8,
    retentions_used: u8,
    pauses_used: u8,
    log_losses_used: u8,

    /// The harness is the producer: its per-partition state, the logical send of every record
    /// it appended (ghost), and the next sequence number of its idempotent appends.
    producer: Vec<ProducerState>,
    sends: Vec<Vec<u8>>,
    next_sequence: Vec<u32>,
    unacked_sequence: Vec<Option<u32>>,
    /// Per partition, whether the unacknowledged send's record was lost with a tail.
    unacked_lost: Vec<bool>,
    ack_losses_used: u8,
    /// Per partition, the delta of every record the harness appended (the model's view).
    appended: Vec<Vec<i64>>,
    /// The last observed state, for the ghost bookkeeping of the next step.
    last: Option<State>,
    /// The `sometimes` witness bits the harness observed in the real system (spec.md §11),
    /// restricted to those the model's configuration reads (`witness_mask`).
    witnessed: u16,
    witness_mask: u16,
}

pub fn group_name(group: u8) -> String {
    format!("g{group}")
}

pub fn owner_name(owner: u8) -> String {
    format!("o{owner}")
}

/// How the harness, as the producer, retries an append whose acknowledgement was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProducerRetry {
    /// The retry repeats the lost send's sequence number: the log recognises it, appends nothing.
    SameSequence,
    /// The retry takes a fresh sequence number: the log appends the record again.
    NewSequence,
}

/// The real system's configuration for one model row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RealRow {
    /// The consumer strategy every owner runs.
    pub strategy: RealStrategy,
    /// What an owner does when retention removed the next record it would fetch.
    pub on_out_of_range: OutOfRange,
    /// How the harness, as the producer, retries a send whose acknowledgement was lost.
    pub producer_retry: ProducerRetry,
    /// The epoch an owner takes when it (re)starts.
    pub start: StartPolicy,
    /// When an owner refuses a log that lost records.
    pub log_check: LogCheck,
    /// How the harness's log writer treats a lost tail: refuse appends (it knows its
    /// acknowledged end), or grow again at the new end (the trap).
    pub writer: WriterMode,
}

/// The real system for each model row, one arm per model strategy and no catch-all: a new
/// model strategy does not compile until it is mapped here. The crates spell the strategies
/// independently; the producer and retention rows run atomic-fenced consumers and differ in
/// the producer's retries and the out-of-range policy. (Only the producer rows lose acks by
/// default; every other row's producer is idempotent, as the model's rules say.)
pub fn real_row(strategy: model::Strategy) -> RealRow {
    use model::Strategy as Model;
    use OutOfRange::{Earliest, EarliestSilent, Fail};
    use ProducerRetry::{NewSequence, SameSequence};
    use RealStrategy as Real;
    let row = |strategy, on_out_of_range, producer_retry| RealRow {
        strategy,
        on_out_of_range,
        producer_retry,
        start: StartPolicy::ClaimEpoch,
        log_check: LogCheck::RefuseAhead,
        writer: WriterMode::Checked,
    };
    match strategy {
        Model::CommitFirst => row(Real::CommitFirst, Fail, SameSequence),
        Model::EffectFirst => row(Real::EffectFirst, Fail, SameSequence),
        Model::PeriodicCommit => row(Real::PeriodicCommit, Fail, SameSequence),
        Model::OffsetStamp => row(Real::OffsetStamp, Fail, SameSequence),
        Model::DedupSeparate => row(Real::DedupSeparate, Fail, SameSequence),
        Model::DedupAtomic => row(Real::DedupAtomic, Fail, SameSequence),
        Model::Atomic => row(Real::Atomic, Fail, SameSequence),
        Model::AtomicFenced => row(Real::AtomicFenced, Fail, SameSequence),
        Model::AtomicCas => row(Real::AtomicCas, Fail, SameSequence),
        Model::ParallelMax => row(Real::ParallelMax, Fail, SameSequence),
        Model::ParallelWatermark => row(Real::ParallelWatermark, Fail, SameSequence),
        Model::AtomicDlq => row(Real::AtomicDlq, Fail, SameSequence),
        Model::SkipPoison => row(Real::SkipPoison, Fail, SameSequence),
        Model::RetryForever => row(Real::RetryForever, Fail, SameSequence),
        Model::ProducerIdempotent => row(Real::AtomicFenced, Fail, SameSequence),
        Model::ProducerNewSequence => row(Real::AtomicFenced, Fail, NewSequence),
        Model::ResetEarliest => row(Real::AtomicFenced, Earliest, SameSequence),
        Model::ResetSilent => row(Real::AtomicFenced, EarliestSilent, SameSequence),
        Model::ResetFail => row(Real::AtomicFenced, Fail, SameSequence),
        Model::FencedStoredEpoch => {
            RealRow { start: StartPolicy::StoredEpoch, ..row(Real::AtomicFenced, Fail, SameSequence) }
        }
        Model::LogLossRefuse => row(Real::AtomicFenced, Fail, SameSequence),
        Model::LogLossUnchecked => RealRow {
            log_check: LogCheck::Unchecked,
            writer: WriterMode::Unchecked,
            ..row(Real::AtomicFenced, Fail, SameSequence)
        },
        Model::LogLossRefuseAll => {
            RealRow { log_check: LogCheck::RefuseAll, ..row(Real::AtomicFenced, Fail, SameSequence) }
        }
    }
}

/// One send of the producer, as the model's producer actions distinguish them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Delivery {
    Acknowledged,
    /// The append lands but its acknowledgement is lost: the send stays unacknowledged.
    AckLost,
    /// The unacknowledged send again.
    Retry,
}

fn not_running(group: u8, owner: u8) -> Error {
    Error::NotRunning { group: group_name(group), owner: owner_name(owner) }
}

/// The producer every harness appends as (idempotent appends; see `produce`).
const PRODUCER: Producer = Producer { id: 1, epoch: 1 };

/// The payload of a poison record: not an 8-byte delta, so its effect fails every time.
pub const POISON_PAYLOAD: &[u8] = b"poison";

impl Harness {
    /// Creates the data directory, the store and the log, and starts every owner alive in the
    /// model's initial state (owner 0 of each group holds every partition at epoch 1).
    pub fn new(config: &Config, options: &Options) -> Result<Harness, Error> {
        let mut dir = ScratchDir::new(&options.tmp_root)?;
        let partitions = u32::from(config.partitions);
        let store_options = StoreOptions { journal: Journal::Delete, ..StoreOptions::default() };
        let location = match &options.postgres {
            Some(admin) => Location::Postgres(dir.create_database(admin)?),
            None => Location::Sqlite(driver::store_path(&dir.path)),
        };
        let log_dir = driver::log_dir(&dir.path);
        let identity = Log::init(&log_dir, partitions)?;
        let mut store = Store::create_at(&location, identity, store_options)?;
        let (log, _) = Log::open_writer_with(&log_dir, identity, real_row(config.strategy).writer)?;
        for group in 0..config.groups {
            store.ensure_group(&group_name(group), &owner_name(0))?;
        }
        let ghost = State::initial(config).groups[0].ghost.clone();
        let mut harness = Harness {
            config: config.clone(),
            row: real_row(config.strategy),
            options: options.clone(),
            dir,
            log,
            store,
            owners: Vec::new(),
            ghosts: vec![ghost; usize::from(config.groups)],
            crashes_used: 0,
            rebalances_used: 0,
            pauses_used: 0,
            log_losses_used: 0,

            paused_of: vec![vec![None; usize::from(config.pauses)]; usize::from(config.groups)],
            retentions_used: 0,
            producer: vec![ProducerState { sent: 0, unacked: None }; usize::from(config.partitions)],
            sends: vec![Vec::new(); usize::from(config.partitions)],
            next_sequence: vec![0; usize::from(config.partitions)],
            unacked_sequence: vec![None; usize::from(config.partitions)],
            unacked_lost: vec![false; usize::from(config.partitions)],
            ack_losses_used: 0,
            appended: vec![Vec::new(); usize::from(config.partitions)],
            last: None,
            witnessed: 0,
            witness_mask: model::ConsumerModel::new(config.clone()).witness_mask(),
        };
        for group in 0..config.groups {
            let mut row = Vec::new();
            for owner in 0..config.owners {
                let spec = harness.spec_at(group, owner, StartPolicy::StoredEpoch);
                row.push(Some(driver::start(options.mode, &spec)?));
            }
            row.extend((0..config.pauses).map(|_| None));
            harness.owners.push(row);
        }
        Ok(harness)
    }

    /// An owner started by a restart or a pause: it takes its epoch as the row's rules say.
    fn spec(&self, group: u8, owner: u8) -> OwnerSpec {
        self.spec_at(group, owner, self.row.start)
    }

    /// The model's initial state is the one after each group's first start: owner 0 holds its
    /// partitions at epoch 1, the epoch `ensure_group` stored. So the initial owners start at
    /// the stored epoch; every later start claims (or not) as the row says.
    fn spec_at(&self, group: u8, owner: u8, start: StartPolicy) -> OwnerSpec {
        let settings = Settings {
            start,
            log_check: self.row.log_check,
            commit_every: u64::from(self.config.commit_every),
            inflight: usize::from(self.config.inflight),
            batch: 1,
            mutation: self.options.mutation,
            max_attempts: u64::from(self.config.max_attempts),
            on_out_of_range: self.row.on_out_of_range,
            ..Settings::new(self.row.strategy)
        };
        OwnerSpec {
            store: self.dir.database.as_ref().map(|(_, url)| url.clone()),
            worker_exe: self.options.worker_exe.clone(),
            dir: self.dir.path.clone(),
            group: group_name(group),
            owner: owner_name(owner),
            settings,
        }
    }

    /// Performs one model action on the real system and returns the observed state after it.
    /// `Err`: the real system refused or failed a step the model took.
    pub fn apply(&mut self, action: &Action) -> Result<State, Error> {
        let before = match self.last.take() {
            Some(state) => state,
            None => self.observe()?,
        };
        self.witness_before(&before, *action);
        self.perform(*action)?;
        if let Some(group) = action.group() {
            self.free_idle_paused_slots(group)?;
        }
        let mut after = self.observe()?;
        let ahead = after.groups.iter().any(|group| {
            group.store.partitions.iter().zip(&after.log).any(|(row, log)| usize::from(row.next_offset) > log.len())
        });
        if ahead {
            self.witness(Witness::StoreAhead);
            after.witnessed = self.witnessed;
        }
        self.record_ghosts(&before, &after, action);
        for (group, ghost) in after.groups.iter_mut().zip(&self.ghosts) {
            group.ghost = ghost.clone();
        }
        self.last = Some(after.clone());
        Ok(after)
    }

    fn witness(&mut self, witness: Witness) {
        self.witnessed |= (1 << witness as u16) & self.witness_mask;
    }

    /// The witnesses a step shows by where it falls, classified on the observed state before
    /// it with the model's own definitions: a crash between two writes or after progress, a
    /// write by a stale owner, a fetch of an applied record, a completion overtaking a lower
    /// record, a blind commit to the log start. (What a step *did*, fenced, skipped,
    /// dead-lettered, reset, failed, is witnessed from the real outcome in `owner_step`.)
    fn witness_before(&mut self, before: &State, action: Action) {
        let rules = self.config.strategy.rules();
        if let Action::Crash { group, owner } = action {
            let (mid_record, after_write) = model::step::crash_witnesses(&self.config, before, group, owner);
            if mid_record {
                self.witness(Witness::CrashMidRecord);
            }
            if after_write {
                self.witness(Witness::CrashAfterWrite);
            }
        }
        let Some((group, owner, partition)) = action.lease_step() else { return };
        let (g, p) = (usize::from(group), usize::from(partition));
        let Some(lease) = before.lease(group, owner, partition) else { return };
        if action.is_owner_write() && lease.epoch != before.groups[g].store.partitions[p].epoch {
            self.witness(Witness::ZombieWrite);
        }
        if action.is_owner_write() && before.groups[g].slot(owner).incarnation_of.is_some() {
            self.witness(Witness::PausedWrite);
        }
        if let Action::RefuseAhead { .. } = action {
            // Justified only when the group's checkpoint or the owner's position is past the
            // end of the log, as the model's `refusal-justified` says.
            let end = before.log[p].len();
            let stored = before.groups[g].store.partitions[p].next_offset;
            if usize::from(stored.max(lease.position)) <= end {
                self.ghosts[g].unjustified_refusal = true;
            }
        }
        if let Action::Fetch { offset, .. } = action {
            if before.groups[g].ghost.applied[p][usize::from(offset)] > 0 {
                self.witness(Witness::Replay);
            }
        }
        if let Action::ApplyEffect { offset, .. } = action {
            if rules.is_parallel() && lease.records.keys().any(|&pending| pending < offset) {
                self.witness(Witness::OutOfOrder);
            }
        }
        if let Action::CommitOffset { next_offset, .. } = action {
            if rules.out_of_range == OutOfRangePolicy::Silent && before.log_start[p] == next_offset {
                self.witness(Witness::OutOfRange);
            }
        }
    }

    /// What the real system does for each model action (spec.md §11's table).
    fn perform(&mut self, action: Action) -> Result<(), Error> {
        use StepKind as Kind;
        match action {
            Action::Append { partition, delta } => self.produce(partition, delta, Delivery::Acknowledged),
            Action::AppendAckLost { partition, delta } => self.produce(partition, delta, Delivery::AckLost),
            Action::RetryAppend { partition, delta } => self.produce(partition, delta, Delivery::Retry),
            Action::Fetch { group, owner, partition, offset } => {
                self.owner_step(group, owner, Kind::Fetch, partition, offset.into())
            }
            Action::ApplyEffect { group, owner, partition, offset } => {
                self.owner_step(group, owner, Kind::ApplyEffect, partition, offset.into())
            }
            Action::InsertProcessed { group, owner, partition, offset } => {
                self.owner_step(group, owner, Kind::InsertProcessed, partition, offset.into())
            }
            Action::CommitOffset { group, owner, partition, next_offset } => {
                self.owner_step(group, owner, Kind::CommitOffset, partition, next_offset.into())
            }
            Action::ApplyStamped { group, owner, partition, offset } => {
                self.owner_step(group, owner, Kind::ApplyStamped, partition, offset.into())
            }
            Action::ApplyDeduped { group, owner, partition, offset } => {
                self.owner_step(group, owner, Kind::ApplyDeduped, partition, offset.into())
            }
            Action::ApplyAtomic { group, owner, partition, offset } => {
                self.owner_step(group, owner, Kind::ApplyAtomic, partition, offset.into())
            }
            Action::DeadLetter { group, owner, partition, offset } => {
                self.owner_step(group, owner, Kind::DeadLetter, partition, offset.into())
            }
            // The out-of-range steps name the log start and the owner's position, which the
            // model's actions leave implicit.
            Action::ResetOffset { group, owner, partition } => {
                let start = self.log.start(u32::from(partition))?;
                self.owner_step(group, owner, Kind::ResetOffset, partition, start)
            }
            Action::FailOutOfRange { group, owner, partition } => {
                let position = self.lease_position(group, owner, partition)?;
                self.owner_step(group, owner, Kind::FailOutOfRange, partition, position)
            }
            Action::Crash { group, owner } => {
                let handle = self.owners[usize::from(group)][usize::from(owner)].take();
                handle.ok_or_else(|| not_running(group, owner))?.kill();
                if let Some(paused) = self.paused_index(owner) {
                    self.paused_of[usize::from(group)][paused] = None;
                }
                self.crashes_used += 1;
                Ok(())
            }
            Action::Restart { group, owner } => {
                let handle = driver::start(self.options.mode, &self.spec(group, owner))?;
                self.owners[usize::from(group)][usize::from(owner)] = Some(handle);
                Ok(())
            }
            Action::Rebalance { group, partition, to_owner } => self.rebalance(group, partition, to_owner),
            Action::Pause { group, owner } => self.pause(group, owner),
            Action::LoseTail { partition, keep } => self.lose_tail(partition, keep),
            Action::RefuseAhead { group, owner, partition } => {
                let position = self.lease_position(group, owner, partition)?;
                self.owner_step(group, owner, Kind::RefuseAhead, partition, position)
            }
            Action::Retain { partition, before } => {
                self.log.retain_before(u32::from(partition), u64::from(before))?;
                self.retentions_used += 1;
                Ok(())
            }
        }
    }

    /// The log of `partition` loses its records from `keep` on: the harness cuts the real file
    /// (fault injection), which needs the writer lock, so its writer closes and opens again
    /// after; a checked writer then finds the partition damaged, an unchecked one grows again.
    fn lose_tail(&mut self, partition: u8, keep: u8) -> Result<(), Error> {
        let log_dir = driver::log_dir(&self.dir.path);
        let identity = self.log.identity();
        self.log = Log::open_reader(&log_dir, identity)?;
        retry_locked(|| consumer::log::fault::lose_tail(&log_dir, u32::from(partition), u64::from(keep)))?;
        self.log = retry_locked(|| Log::open_writer_with(&log_dir, identity, self.row.writer))?.0;
        let p = usize::from(partition);
        self.appended[p].truncate(usize::from(keep));
        self.sends[p].truncate(usize::from(keep));
        self.log_losses_used += 1;
        // Every record of the partition took the next sequence number, so a log that grows again
        // after the loss expects `keep` next; an unacknowledged send the loss took is resent.
        self.next_sequence[p] = u32::from(keep);
        if self.unacked_sequence[p].is_some_and(|sequence| sequence >= u32::from(keep)) {
            self.unacked_sequence[p] = None;
            self.unacked_lost[p] = true;
        }
        Ok(())
    }

    /// The paused slot a model owner index names, if it names one.
    fn paused_index(&self, owner: u8) -> Option<usize> {
        usize::from(owner).checked_sub(usize::from(self.config.owners))
    }

    /// A second incarnation of `owner` starts while the running one goes on: the running
    /// process moves to the first free paused slot (as the model's `pause` does) and a new one
    /// starts, as after a crash.
    fn pause(&mut self, group: u8, owner: u8) -> Result<(), Error> {
        let g = usize::from(group);
        let free = self.paused_of[g]
            .iter()
            .position(Option::is_none)
            .ok_or(Error::Unsupported("a pause with no free paused slot"))?;
        let running = self.owners[g][usize::from(owner)].take().ok_or_else(|| not_running(group, owner))?;
        self.owners[g][usize::from(self.config.owners) + free] = Some(running);
        self.paused_of[g][free] = Some(owner);
        self.pauses_used += 1;
        let handle = driver::start(self.options.mode, &self.spec(group, owner))?;
        self.owners[g][usize::from(owner)] = Some(handle);
        Ok(())
    }

    /// A paused incarnation that holds no lease any more can do nothing: the model frees its
    /// slot, and so does the harness (ending its process).
    fn free_idle_paused_slots(&mut self, group: u8) -> Result<(), Error> {
        let g = usize::from(group);
        for paused in 0..self.paused_of[g].len() {
            let slot = usize::from(self.config.owners) + paused;
            let idle = match &mut self.owners[g][slot] {
                Some(handle) => handle.leases()?.is_empty(),
                None => false,
            };
            if idle {
                self.owners[g][slot].take().expect("an idle slot runs").kill();
                self.paused_of[g][paused] = None;
            }
        }
        Ok(())
    }

    /// The coordinator's rebalance: the store's claim, then the assignment to the new owner
    /// if it is running (the old owner is not told).
    fn rebalance(&mut self, group: u8, partition: u8, to_owner: u8) -> Result<(), Error> {
        self.store.claim(&group_name(group), u32::from(partition), &owner_name(to_owner))?;
        self.rebalances_used += 1;
        if let Some(handle) = &mut self.owners[usize::from(group)][usize::from(to_owner)] {
            handle.assign(u32::from(partition))?;
        }
        Ok(())
    }

    /// The producer's steps, through the log's idempotent appends: each send gets the next
    /// sequence number; a retry repeats the lost one or takes a fresh one, as the row's
    /// `producer_retry` says (the log must then append nothing, or the record again).
    fn produce(&mut self, partition: u8, delta: i64, delivery: Delivery) -> Result<(), Error> {
        let p = usize::from(partition);
        let offset = self.log.end(u32::from(partition))?;
        let poison =
            self.config.strategy.handles_poison() && self.config.poison.is_some_and(|at| u64::from(at) == offset);
        let payload = if poison { POISON_PAYLOAD.to_vec() } else { encode_delta(delta) };
        let (send, sequence) = match delivery {
            Delivery::Acknowledged | Delivery::AckLost => {
                let send = self.producer[p].sent;
                self.producer[p].sent += 1;
                (send, self.fresh_sequence(p))
            }
            Delivery::Retry => {
                let send = self.producer[p].unacked.take().ok_or(Error::NothingToRetry { partition })?;
                self.witness(Witness::AppendRetried);
                let sequence = match self.row.producer_retry {
                    // A retry of a send the log lost (a log that grew again after losing its
                    // tail) is a new append with the sequence the log expects.
                    ProducerRetry::SameSequence if self.unacked_lost[p] => {
                        self.unacked_lost[p] = false;
                        self.fresh_sequence(p)
                    }
                    ProducerRetry::SameSequence => {
                        self.unacked_sequence[p].take().ok_or(Error::NothingToRetry { partition })?
                    }
                    ProducerRetry::NewSequence => self.fresh_sequence(p),
                };
                (send, sequence)
            }
        };
        let appended = self.log.append_idempotent(u32::from(partition), PRODUCER, sequence, &[payload])?;
        if !appended.duplicate {
            // A log that lost its tail and grows again reuses offsets: the applications of the
            // lost record move to `lost_sum`, as in the model, so the new record counts afresh.
            let reused = self.appended[p].len();
            for ghost in &mut self.ghosts {
                let applied = &mut ghost.applied[p][reused];
                ghost.lost_sum = model::step::lost_sum(ghost.lost_sum, delta, *applied);
                *applied = 0;
            }
            self.sends[p].push(send);
            self.appended[p].push(delta);
        }
        if delivery == Delivery::AckLost {
            self.producer[p].unacked = Some(send);
            self.unacked_sequence[p] = Some(sequence);
            self.ack_losses_used += 1;
        }
        Ok(())
    }

    fn fresh_sequence(&mut self, partition: usize) -> u32 {
        let sequence = self.next_sequence[partition];
        self.next_sequence[partition] += 1;
        sequence
    }

    fn handle(&mut self, group: u8, owner: u8) -> Result<&mut Box<dyn OwnerHandle>, Error> {
        self.owners[usize::from(group)][usize::from(owner)].as_mut().ok_or_else(|| not_running(group, owner))
    }

    /// The position of a running owner's lease, which a `fail-out-of-range` step names.
    fn lease_position(&mut self, group: u8, owner: u8, partition: u8) -> Result<u64, Error> {
        let leases = self.handle(group, owner)?.leases()?;
        let lease = leases.get(&u32::from(partition)).ok_or_else(|| Error::NoLease {
            group: group_name(group),
            owner: owner_name(owner),
            partition: u32::from(partition),
        })?;
        Ok(lease.position)
    }

    /// Sends an owner step (batch 1); an applied record or a failed attempt is counted in the
    /// observed ghost history.
    fn owner_step(&mut self, group: u8, owner: u8, kind: StepKind, partition: u8, offset: u64) -> Result<(), Error> {
        let step = Step { kind, partition: u32::from(partition), offset };
        match self.handle(group, owner)?.step(step)? {
            Outcome::Applied { applied, skipped } => {
                let offset = usize::try_from(offset).expect("offsets are 8-bit in traces");
                let count = &mut self.ghosts[usize::from(group)].applied[usize::from(partition)][offset];
                // The replay limits keep a record's applications within 8 bits in the model
                // (`APPLICATIONS_MAX`); a real system that applies it more diverges, so a count
                // past them is reported, never wrapped.
                let total = u16::from(*count) + u16::from(narrow(applied, "applied count")?);
                *count = narrow(total, "applied count")?;
                if skipped > 0 {
                    self.witness(Witness::DuplicateSkipped);
                }
            }
            Outcome::Failed { .. } => {
                // A failed effect attempt on a poison record, capped as the model caps it.
                let failures = &mut self.ghosts[usize::from(group)].failures[usize::from(partition)];
                *failures = (*failures + 1).min(self.config.max_attempts + 1);
                self.witness(Witness::PoisonFailed);
            }
            Outcome::Fenced { .. } => {
                self.witness(Witness::ZombieFenced);
                if usize::from(owner) >= usize::from(self.config.owners) {
                    self.witness(Witness::PausedFenced);
                }
            }
            Outcome::DeadLettered { .. } => self.witness(Witness::DeadLettered),
            Outcome::Reset { .. } => {
                self.witness(Witness::OutOfRange);
                self.witness(Witness::ResetRecorded);
            }
            Outcome::OutOfRange { .. } => self.witness(Witness::OutOfRange),
            Outcome::Refused { .. } => self.witness(Witness::Refused),
            // What these did shows in the store and the leases, observed after the step.
            Outcome::Fetched { .. }
            | Outcome::Recorded
            | Outcome::Committed
            | Outcome::Produced { .. }
            | Outcome::Exhausted => {}
        }
        Ok(())
    }

    /// The rest of the ghost history, from what the step changed in the real store: the
    /// checkpoint high-water marks, a stale owner's write landing, a write into another group.
    fn record_ghosts(&mut self, before: &State, after: &State, action: &Action) {
        for (ghost, group) in self.ghosts.iter_mut().zip(&after.groups) {
            for (high, row) in ghost.high_water.iter_mut().zip(&group.store.partitions) {
                *high = (*high).max(row.next_offset);
            }
        }
        let Some(acting) = action.group().map(usize::from) else { return };
        for (g, ghost) in self.ghosts.iter_mut().enumerate() {
            if g != acting && before.groups[g].store != after.groups[g].store {
                ghost.foreign_write = true;
            }
        }
        if let Some((group, owner, partition)) = action.lease_step().filter(|_| action.is_owner_write()) {
            let (g, p) = (usize::from(group), usize::from(partition));
            let stored_epoch = before.groups[g].store.partitions[p].epoch;
            let stale =
                before.groups[g].slot(owner).leases[p].as_ref().is_some_and(|lease| lease.epoch != stored_epoch);
            if stale && before.groups[g].store != after.groups[g].store {
                self.ghosts[g].stale_write_landed = true;
            }
        }
    }

    /// The abstraction function: the real log, store and owners' reported leases as a model
    /// `State`. Ghost history and witness bits are the harness's own observations.
    pub fn observe(&mut self) -> Result<State, Error> {
        let mut log = Vec::new();
        for partition in 0..u32::from(self.config.partitions) {
            let (start, end) = (self.log.start(partition)?, self.log.end(partition)?);
            // Records below the retained start cannot be read any more (that is the point of
            // retention); the model still lists them, so they come from what the harness, as
            // the producer, appended. Everything readable is read back from the log.
            let retained = usize::try_from(start).expect("small offsets");
            let appended = &self.appended[partition as usize];
            let mut deltas = appended
                .get(..retained)
                .ok_or(Unobservable::LogStartPastAppended { partition, start, appended: appended.len() })?
                .to_vec();
            for offset in start..end {
                let record = self.log.read(partition, offset)?;
                // A poison record stands for the model's record at that offset, whose delta
                // the model never applies.
                let delta = match consumer::log::decode_delta(&record.payload) {
                    Some(delta) => delta,
                    None if record.payload == POISON_PAYLOAD => self.config.delta,
                    None => return Err(Unobservable::UnknownPayload { partition, offset }.into()),
                };
                deltas.push(delta);
            }
            log.push(deltas);
        }
        let mut groups = Vec::new();
        for group in 0..self.config.groups {
            let store = self.observe_store(group)?;
            let mut owners = Vec::new();
            for owner in 0..self.config.owners {
                owners.push(self.observe_owner(group, owner)?);
            }
            let mut paused = Vec::new();
            for index in 0..self.config.pauses {
                let mut slot = self.observe_owner(group, self.config.owners + index)?;
                slot.incarnation_of = self.paused_of[usize::from(group)][usize::from(index)];
                paused.push(slot);
            }
            let ghost = self.ghosts[usize::from(group)].clone();
            groups.push(Group { store, owners, paused, ghost });
        }
        let mut log_start = Vec::new();
        let mut damaged = Vec::new();
        for partition in 0..u32::from(self.config.partitions) {
            log_start.push(narrow(self.log.start(partition)?, "log start")?);
            damaged.push(self.log.damaged(partition)?);
        }
        Ok(State {
            log,
            sends: self.sends.clone(),
            producer: self.producer.clone(),
            ack_losses_used: self.ack_losses_used,
            log_start,
            retentions_used: self.retentions_used,
            groups,
            crashes_used: self.crashes_used,
            rebalances_used: self.rebalances_used,
            pauses_used: self.pauses_used,
            log_losses_used: self.log_losses_used,
            damaged,
            witnessed: self.witnessed,
        })
    }

    fn observe_store(&mut self, group: u8) -> Result<ModelStore, Error> {
        let name = group_name(group);
        let total = self.store.total(&name)?;
        let mut partitions = Vec::new();
        for partition in 0..u32::from(self.config.partitions) {
            let row = self.store.progress(&name, partition)?;
            partitions.push(PartitionRow {
                next_offset: narrow(row.next_offset, "next offset")?,
                epoch: narrow(row.epoch, "epoch")?,
                owner: parse_owner(&row.owner)?,
                stamp: row.stamp.map(|stamp| narrow(stamp, "stamp")).transpose()?,
            });
        }
        let processed = self
            .store
            .processed(&name)?
            .into_iter()
            .map(|(p, o)| Ok((narrow(p, "partition")?, narrow(o, "offset")?)))
            .collect::<Result<BTreeSet<_>, Unobservable>>()?;
        let mut attempts = BTreeMap::new();
        for partition in 0..u32::from(self.config.partitions) {
            let end = self.log.end(partition)?;
            for offset in 0..end {
                let count = self.store.attempts(&name, partition, offset)?;
                if count > 0 {
                    attempts.insert(
                        (narrow(partition, "partition")?, narrow(offset, "offset")?),
                        narrow(count, "attempts")?,
                    );
                }
            }
        }
        let dead_letters = self
            .store
            .dead_letters(Some(&name))?
            .into_iter()
            .map(|d| {
                Ok((narrow(d.partition, "partition")?, narrow(d.offset, "offset")?, narrow(d.attempts, "attempts")?))
            })
            .collect::<Result<BTreeSet<_>, Unobservable>>()?;
        let resets = self
            .store
            .resets(Some(&name))?
            .into_iter()
            .map(|r| Ok((narrow(r.partition, "partition")?, narrow(r.from, "offset")?, narrow(r.to, "offset")?)))
            .collect::<Result<BTreeSet<_>, Unobservable>>()?;
        Ok(ModelStore { total, partitions, processed, attempts, dead_letters, resets })
    }

    fn observe_owner(&mut self, group: u8, owner: u8) -> Result<Owner, Error> {
        let partitions = usize::from(self.config.partitions);
        let Some(handle) = &mut self.owners[usize::from(group)][usize::from(owner)] else {
            return Ok(Owner::free_slot(partitions));
        };
        let (group, owner) = (group_name(group), owner_name(owner));
        let mut leases = vec![None; partitions];
        for (partition, lease) in handle.leases()? {
            let Some(slot) = leases.get_mut(partition as usize) else {
                return Err(Unobservable::NoSuchPartition { group, owner, partition }.into());
            };
            *slot = Some(model_lease(&lease, &group, &owner)?);
        }
        Ok(Owner { alive: true, leases, incarnation_of: None })
    }
}

/// A consumer lease as the model's: batch-1 records keyed by offset with their stage.
fn model_lease(lease: &consumer::owner::Lease, group: &str, owner: &str) -> Result<Lease, Unobservable> {
    let mut records = BTreeMap::new();
    for (&offset, record) in &lease.records {
        if record.end != offset + 1 {
            let (group, owner) = (group.to_string(), owner.to_string());
            return Err(Unobservable::Batch { group, owner, offset, end: record.end });
        }
        let stage = match record.stage {
            consumer::owner::Stage::Fetched => Stage::Fetched,
            consumer::owner::Stage::Committed => Stage::Committed,
            consumer::owner::Stage::EffectApplied => Stage::EffectApplied,
            consumer::owner::Stage::Recorded => Stage::Recorded,
            consumer::owner::Stage::Exhausted => Stage::Exhausted,
            // The transactional strategies (issue 13) run on no model row of this model yet.
            consumer::owner::Stage::Produced => {
                let (group, owner) = (group.to_string(), owner.to_string());
                return Err(Unobservable::Stage { group, owner, offset, stage: "produced" });
            }
        };
        records.insert(narrow(offset, "offset")?, stage);
    }
    Ok(Lease {
        epoch: narrow(lease.epoch, "epoch")?,
        position: narrow(lease.position, "position")?,
        checkpoint: narrow(lease.checkpoint, "checkpoint")?,
        records,
        done: lease.done.iter().map(|&offset| narrow(offset, "offset")).collect::<Result<_, _>>()?,
    })
}

/// Takes the log's writer lock again right after the harness released it. The harness is the
/// only writer of its directory, but a lock it just released can look held for a moment: a
/// process another replay of this process (tests replay on several threads) is starting holds
/// a copy of every open descriptor from its fork until its exec closes them, and the log's
/// lock is a non-blocking `flock`. So `Locked` is retried, every 10 ms for at most a second.
fn retry_locked<T>(mut take: impl FnMut() -> Result<T, LogError>) -> Result<T, LogError> {
    const ATTEMPTS: u32 = 100;
    for _ in 1..ATTEMPTS {
        match take() {
            Err(LogError::Locked { .. }) => std::thread::sleep(std::time::Duration::from_millis(10)),
            other => return other,
        }
    }
    take()
}

fn narrow<T: TryInto<u8> + Into<i128> + Copy>(value: T, what: &'static str) -> Result<u8, Unobservable> {
    value.try_into().map_err(|_| Unobservable::TooWide { what, value: value.into() })
}

fn parse_owner(name: &str) -> Result<u8, Unobservable> {
    name.strip_prefix('o')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| Unobservable::OwnerName { name: name.to_string() })
}

/// A fresh, uniquely named data directory (and PostgreSQL database, when replaying against
/// one), removed when dropped.
struct ScratchDir {
    path: PathBuf,
    /// The admin URL and the database's own URL.
    database: Option<(String, String)>,
}

impl ScratchDir {
    fn new(root: &Path) -> Result<ScratchDir, Error> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!("onceproof-conformance-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = root.join(name);
        std::fs::create_dir_all(&path).map_err(Error::io(&path, "create"))?;
        Ok(ScratchDir { path, database: None })
    }

    /// Creates a database named after the directory on the server behind `admin` and returns
    /// its URL (the admin URL with the database name replaced).
    fn create_database(&mut self, admin: &str) -> Result<String, Error> {
        let name = self.path.file_name().and_then(|n| n.to_str()).expect("a plain name").replace('-', "_");
        let mut client = postgres::Client::connect(admin, postgres::NoTls).map_err(Error::PostgresConnect)?;
        let sql = format!("CREATE DATABASE {name}");
        client.batch_execute(&sql).map_err(|source| Error::Postgres { sql, source })?;
        let url = database_url(admin, &name)?;
        self.database = Some((admin.to_string(), url.clone()));
        Ok(url)
    }
}

/// `admin` with its database name replaced by `name`: `postgres://auth/db?query`.
fn database_url(admin: &str, name: &str) -> Result<String, Error> {
    let (head, query) = admin.split_once('?').map_or((admin, None), |(h, q)| (h, Some(q)));
    let authority_end = head.find("://").map(|i| i + 3).ok_or(Error::PostgresUrl)?;
    let path_start = head[authority_end..].find('/').map_or(head.len(), |i| authority_end + i);
    let mut url = format!("{}/{name}", &head[..path_start]);
    if let Some(query) = query {
        url.push('?');
        url.push_str(query);
    }
    Ok(url)
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        if let Some((admin, url)) = &self.database {
            let name = url.rsplit('/').next().unwrap_or("").split('?').next().unwrap_or("").to_string();
            if let Ok(mut client) = postgres::Client::connect(admin, postgres::NoTls) {
                let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{real_row, ProducerRetry};
    use consumer::log::WriterMode;
    use consumer::strategy::{LogCheck, OutOfRange, StartPolicy};
    use model::Strategy;

    /// Every model row's real system follows the model's own rules for that row (the crates
    /// spell them independently): the out-of-range policy and the producer's retry mode, and a
    /// consumer strategy of the row's own name, or atomic-fenced for the rows that only add a
    /// producer or retention behaviour to it.
    #[test]
    fn every_model_row_runs_the_real_system_its_rules_describe() {
        use model::strategy::{OutOfRangePolicy, ProducerRetry as ModelRetry};
        for strategy in Strategy::ALL {
            let (row, rules) = (real_row(strategy), strategy.rules());
            let policy = match rules.out_of_range {
                OutOfRangePolicy::Fail => OutOfRange::Fail,
                OutOfRangePolicy::Earliest => OutOfRange::Earliest,
                OutOfRangePolicy::Silent => OutOfRange::EarliestSilent,
            };
            let retry = match rules.producer {
                ModelRetry::SameSequence => ProducerRetry::SameSequence,
                ModelRetry::NewSequence => ProducerRetry::NewSequence,
            };
            assert_eq!((row.on_out_of_range, row.producer_retry), (policy, retry), "{strategy}");
            let start = match rules.start {
                model::strategy::StartPolicy::ClaimEpoch => StartPolicy::ClaimEpoch,
                model::strategy::StartPolicy::StoredEpoch => StartPolicy::StoredEpoch,
            };
            assert_eq!(row.start, start, "{strategy}");
            let (check, writer) = match rules.log_check {
                model::strategy::LogCheck::RefuseAhead => (LogCheck::RefuseAhead, WriterMode::Checked),
                model::strategy::LogCheck::Unchecked => (LogCheck::Unchecked, WriterMode::Unchecked),
                model::strategy::LogCheck::RefuseAll => (LogCheck::RefuseAll, WriterMode::Checked),
            };
            assert_eq!((row.log_check, row.writer), (check, writer), "{strategy}");
            let own_name = strategy.name().parse::<consumer::strategy::Strategy>().is_ok();
            let expected = if own_name { strategy.name() } else { "atomic-fenced" };
            assert_eq!(row.strategy.name(), expected, "the consumer of {strategy}");
            if !own_name {
                let fenced = Strategy::AtomicFenced.rules();
                let same = (rules.sequence, rules.guard, rules.checkpoint, rules.poison)
                    == (fenced.sequence, fenced.guard, fenced.checkpoint, fenced.poison);
                assert!(same, "{strategy} runs atomic-fenced consumers, so its consumer rules are atomic-fenced's");
            }
        }
    }
}
