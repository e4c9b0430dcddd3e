//! The harness: a fresh real system (log, store, owner processes) driven by model actions, and
//! the abstraction function that maps its concrete state back to a model `State`.

use crate::driver::{self, Mode, OwnerHandle, OwnerSpec};
use consumer::log::{encode_delta, Log, Producer};
use consumer::owner::{Mutation, Outcome, Settings};
use consumer::store::{Journal, Location, Store, StoreOptions};
use consumer::strategy::{OutOfRange, Step, StepKind, Strategy as RealStrategy};
use model::state::{Ghost, Group, Lease, Owner, PartitionRow, ProducerState, Stage, State, Store as ModelStore};
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
    options: Options,
    dir: ScratchDir,
    log: Log,
    store: Store,
    /// Per group and owner, the running owner (`None`: crashed).
    owners: Vec<Vec<Option<Box<dyn OwnerHandle>>>>,
    /// Ghost history as observed in the real system (never copied from the model).
    ghosts: Vec<Ghost>,
    crashes_used: u8,
    rebalances_used: u8,
    retentions_used: u8,
    /// The harness is the producer: its per-partition state, the logical send of every record
    /// it appended (ghost), and the next sequence number of its idempotent appends.
    producer: Vec<ProducerState>,
    sends: Vec<Vec<u8>>,
    next_sequence: Vec<u32>,
    unacked_sequence: Vec<Option<u32>>,
    ack_losses_used: u8,
    /// Per partition, the delta of every record the harness appended (the model's view).
    appended: Vec<Vec<i64>>,
    /// The last observed state, for the ghost bookkeeping of the next step.
    last: Option<State>,
}

pub fn group_name(group: u8) -> String {
    format!("g{group}")
}

pub fn owner_name(owner: u8) -> String {
    format!("o{owner}")
}

/// The consumer strategy of a model row, as the consumer names it (the crates spell the names
/// independently); the producer and retention rows run atomic-fenced consumers.
pub fn real_strategy(strategy: model::Strategy) -> RealStrategy {
    strategy.consumer().name().parse().expect("the consumer implements every consumer strategy of the model")
}

/// The producer every harness appends as (idempotent appends; see `produce`).
const PRODUCER: Producer = Producer { id: 1, epoch: 1 };

/// The payload of a poison record: not an 8-byte delta, so its effect fails every time.
pub const POISON_PAYLOAD: &[u8] = b"poison";

impl Harness {
    /// Creates the data directory, the store and the log, and starts every owner alive in the
    /// model's initial state (owner 0 of each group holds every partition at epoch 1).
    pub fn new(config: &Config, options: &Options) -> Result<Harness, String> {
        let mut dir = ScratchDir::new(&options.tmp_root)?;
        let partitions = u32::from(config.partitions);
        let store_options = StoreOptions { journal: Journal::Delete, ..StoreOptions::default() };
        let location = match &options.postgres {
            Some(admin) => Location::Postgres(dir.create_database(admin)?),
            None => Location::Sqlite(driver::store_path(&dir.path)),
        };
        let mut store = Store::create_at(&location, partitions, store_options).map_err(|e| e.to_string())?;
        let (log, _) = Log::open_writer(&driver::log_dir(&dir.path), partitions).map_err(|e| e.to_string())?;
        for group in 0..config.groups {
            store.ensure_group(&group_name(group), &owner_name(0)).map_err(|e| e.to_string())?;
        }
        let ghost = State::initial(config).groups[0].ghost.clone();
        let mut harness = Harness {
            config: config.clone(),
            options: options.clone(),
            dir,
            log,
            store,
            owners: Vec::new(),
            ghosts: vec![ghost; usize::from(config.groups)],
            crashes_used: 0,
            rebalances_used: 0,
            retentions_used: 0,
            producer: vec![ProducerState { sent: 0, unacked: None }; usize::from(config.partitions)],
            sends: vec![Vec::new(); usize::from(config.partitions)],
            next_sequence: vec![0; usize::from(config.partitions)],
            unacked_sequence: vec![None; usize::from(config.partitions)],
            ack_losses_used: 0,
            appended: vec![Vec::new(); usize::from(config.partitions)],
            last: None,
        };
        for group in 0..config.groups {
            let mut row = Vec::new();
            for owner in 0..config.owners {
                row.push(Some(driver::start(options.mode, &harness.spec(group, owner))?));
            }
            harness.owners.push(row);
        }
        Ok(harness)
    }

    fn spec(&self, group: u8, owner: u8) -> OwnerSpec {
        let settings = Settings {
            commit_every: u64::from(self.config.commit_every),
            inflight: usize::from(self.config.inflight),
            batch: 1,
            mutation: self.options.mutation,
            max_attempts: u64::from(self.config.max_attempts),
            on_out_of_range: match self.config.strategy {
                model::Strategy::ResetEarliest => OutOfRange::Earliest,
                model::Strategy::ResetSilent => OutOfRange::EarliestSilent,
                _ => OutOfRange::Fail,
            },
            ..Settings::new(real_strategy(self.config.strategy))
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
    /// `witnessed` (the model's `sometimes` bits) is not observable and is copied through.
    /// `Err` is a one-line reason: the real system refused or failed a step the model took.
    pub fn apply(&mut self, action: &Action, witnessed: u16) -> Result<State, String> {
        let before = match self.last.take() {
            Some(state) => state,
            None => self.observe(witnessed)?,
        };
        match *action {
            Action::Append { .. } | Action::AppendAckLost { .. } | Action::RetryAppend { .. } => {
                self.produce(action)?
            }
            Action::Crash { group, owner } => {
                let handle =
                    self.owners[usize::from(group)][usize::from(owner)].take().ok_or("the owner is not running")?;
                handle.kill();
                self.crashes_used += 1;
            }
            Action::Restart { group, owner } => {
                let handle = driver::start(self.options.mode, &self.spec(group, owner))?;
                self.owners[usize::from(group)][usize::from(owner)] = Some(handle);
            }
            Action::Rebalance { group, partition, to_owner } => {
                self.store
                    .claim(&group_name(group), u32::from(partition), &owner_name(to_owner))
                    .map_err(|e| e.to_string())?;
                self.rebalances_used += 1;
                if let Some(handle) = &mut self.owners[usize::from(group)][usize::from(to_owner)] {
                    handle.assign(u32::from(partition))?;
                }
            }
            Action::Retain { partition, before } => {
                self.log.retain_before(u32::from(partition), u64::from(before)).map_err(|e| e.to_string())?;
                self.retentions_used += 1;
            }
            owner_step => self.owner_step(owner_step)?,
        }
        let mut after = self.observe(witnessed)?;
        self.record_ghosts(&before, &after, action);
        for (group, ghost) in after.groups.iter_mut().zip(&self.ghosts) {
            group.ghost = ghost.clone();
        }
        self.last = Some(after.clone());
        Ok(after)
    }

    /// The producer's steps, through the log's idempotent appends: each send gets the next
    /// sequence number; an idempotent retry repeats the lost one (the log must recognise it and
    /// append nothing), a new-sequence retry takes a fresh number (the log appends it again).
    fn produce(&mut self, action: &Action) -> Result<(), String> {
        let (partition, delta) = match *action {
            Action::Append { partition, delta }
            | Action::AppendAckLost { partition, delta }
            | Action::RetryAppend { partition, delta } => (usize::from(partition), delta),
            _ => unreachable!("only producer steps"),
        };
        let offset = self.log.end(partition as u32).map_err(|e| e.to_string())?;
        let poison =
            self.config.strategy.handles_poison() && self.config.poison.is_some_and(|p| u64::from(p) == offset);
        let payload = if poison { POISON_PAYLOAD.to_vec() } else { encode_delta(delta) };
        let retry = matches!(action, Action::RetryAppend { .. });
        let send = if retry {
            self.producer[partition].unacked.take().ok_or("no unacknowledged send to retry")?
        } else {
            let send = self.producer[partition].sent;
            self.producer[partition].sent += 1;
            send
        };
        let sequence = match (retry, self.config.strategy) {
            (true, model::Strategy::ProducerIdempotent) => {
                self.unacked_sequence[partition].take().ok_or("no sequence to retry")?
            }
            _ => {
                let sequence = self.next_sequence[partition];
                self.next_sequence[partition] += 1;
                sequence
            }
        };
        let appended =
            self.log.append_idempotent(partition as u32, PRODUCER, sequence, &[payload]).map_err(|e| e.to_string())?;
        if !appended.duplicate {
            self.sends[partition].push(send);
            self.appended[partition].push(delta);
        }
        if matches!(action, Action::AppendAckLost { .. }) {
            self.producer[partition].unacked = Some(send);
            self.unacked_sequence[partition] = Some(sequence);
            self.ack_losses_used += 1;
        }
        Ok(())
    }

    /// Sends an owner step; an applied record is counted in the observed ghost history.
    fn owner_step(&mut self, action: Action) -> Result<(), String> {
        let (group, owner, partition) = action.lease_step().expect("an owner step");
        let step = match action {
            // The out-of-range steps name the log start and the owner's position, which the
            // model's actions leave implicit.
            Action::ResetOffset { .. } => {
                let start = self.log.start(u32::from(partition)).map_err(|e| e.to_string())?;
                Step { kind: StepKind::ResetOffset, partition: u32::from(partition), offset: start }
            }
            Action::FailOutOfRange { .. } => {
                let handle =
                    self.owners[usize::from(group)][usize::from(owner)].as_mut().ok_or("the owner is not running")?;
                let position = handle
                    .leases()?
                    .get(&u32::from(partition))
                    .map(|l| l.position)
                    .ok_or("the owner holds no lease there")?;
                Step { kind: StepKind::FailOutOfRange, partition: u32::from(partition), offset: position }
            }
            _ => real_step(&action),
        };
        let handle = self.owners[usize::from(group)][usize::from(owner)].as_mut().ok_or("the owner is not running")?;
        match handle.step(step)? {
            Outcome::Applied { applied, .. } => {
                let offset = usize::try_from(step.offset).expect("offsets are 8-bit in traces");
                let count = &mut self.ghosts[usize::from(group)].applied[usize::from(partition)][offset];
                *count += u8::try_from(applied).expect("a batch-1 step applies at most one record");
            }
            Outcome::Failed { .. } => {
                // A failed effect attempt on a poison record, capped as the model caps it.
                let failures = &mut self.ghosts[usize::from(group)].failures[usize::from(partition)];
                *failures = (*failures + 1).min(self.config.max_attempts + 1);
            }
            _ => {}
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
            let (g, o, p) = (usize::from(group), usize::from(owner), usize::from(partition));
            let stored_epoch = before.groups[g].store.partitions[p].epoch;
            let stale = before.groups[g].owners[o].leases[p].as_ref().is_some_and(|lease| lease.epoch != stored_epoch);
            if stale && before.groups[g].store != after.groups[g].store {
                self.ghosts[g].stale_write_landed = true;
            }
        }
    }

    /// The abstraction function: the real log, store and owners' reported leases as a model
    /// `State`. Ghost history is the harness's own observation; `witnessed` is copied.
    pub fn observe(&mut self, witnessed: u16) -> Result<State, String> {
        let mut log = Vec::new();
        for partition in 0..u32::from(self.config.partitions) {
            let (start, end) = (
                self.log.start(partition).map_err(|e| e.to_string())?,
                self.log.end(partition).map_err(|e| e.to_string())?,
            );
            // Records below the retained start cannot be read any more (that is the point of
            // retention); the model still lists them, so they come from what the harness, as
            // the producer, appended. Everything readable is read back from the log.
            let retained = usize::try_from(start).expect("small offsets");
            let mut deltas = self.appended[partition as usize]
                .get(..retained)
                .ok_or("the log start is past what was appended")?
                .to_vec();
            for offset in start..end {
                let record = self.log.read(partition, offset).map_err(|e| e.to_string())?;
                // A poison record stands for the model's record at that offset, whose delta
                // the model never applies.
                let delta = match consumer::log::decode_delta(&record.payload) {
                    Some(delta) => delta,
                    None if record.payload == POISON_PAYLOAD => self.config.delta,
                    None => {
                        return Err(format!("record {offset} of partition {partition} is neither a delta nor poison"))
                    }
                };
                deltas.push(delta);
            }
            log.push(deltas);
        }
        let mut groups = Vec::new();
        for group in 0..self.config.groups {
            let store = self.observe_store(group)?;
            let mut owners = Vec::new();
            for owner in 0..usize::from(self.config.owners) {
                owners.push(self.observe_owner(group, owner)?);
            }
            groups.push(Group { store, owners, ghost: self.ghosts[usize::from(group)].clone() });
        }
        let mut log_start = Vec::new();
        for partition in 0..u32::from(self.config.partitions) {
            log_start.push(narrow(self.log.start(partition).map_err(|e| e.to_string())?, "log start")?);
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
            witnessed,
        })
    }

    fn observe_store(&mut self, group: u8) -> Result<ModelStore, String> {
        let name = group_name(group);
        let total = self.store.total(&name).map_err(|e| e.to_string())?;
        let mut partitions = Vec::new();
        for partition in 0..u32::from(self.config.partitions) {
            let row = self.store.progress(&name, partition).map_err(|e| e.to_string())?;
            partitions.push(PartitionRow {
                next_offset: narrow(row.next_offset, "next offset")?,
                epoch: narrow(row.epoch, "epoch")?,
                owner: parse_owner(&row.owner)?,
                stamp: row.stamp.map(|stamp| narrow(stamp, "stamp")).transpose()?,
            });
        }
        let processed = self
            .store
            .processed(&name)
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|(p, o)| Ok((narrow(p, "partition")?, narrow(o, "offset")?)))
            .collect::<Result<BTreeSet<_>, String>>()?;
        let mut attempts = BTreeMap::new();
        for partition in 0..u32::from(self.config.partitions) {
            let end = self.log.end(partition).map_err(|e| e.to_string())?;
            for offset in 0..end {
                let count = self.store.attempts(&name, partition, offset).map_err(|e| e.to_string())?;
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
            .dead_letters(Some(&name))
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|d| {
                Ok((narrow(d.partition, "partition")?, narrow(d.offset, "offset")?, narrow(d.attempts, "attempts")?))
            })
            .collect::<Result<BTreeSet<_>, String>>()?;
        let resets = self
            .store
            .resets(Some(&name))
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|r| Ok((narrow(r.partition, "partition")?, narrow(r.from, "offset")?, narrow(r.to, "offset")?)))
            .collect::<Result<BTreeSet<_>, String>>()?;
        Ok(ModelStore { total, partitions, processed, attempts, dead_letters, resets })
    }

    fn observe_owner(&mut self, group: u8, owner: usize) -> Result<Owner, String> {
        let partitions = usize::from(self.config.partitions);
        let Some(handle) = &mut self.owners[usize::from(group)][owner] else {
            return Ok(Owner { alive: false, leases: vec![None; partitions] });
        };
        let mut leases = vec![None; partitions];
        for (partition, lease) in handle.leases()? {
            let slot = leases.get_mut(partition as usize).ok_or("a worker reports a partition that does not exist")?;
            *slot = Some(model_lease(&lease)?);
        }
        Ok(Owner { alive: true, leases })
    }
}

/// A consumer lease as the model's: batch-1 records keyed by offset with their stage.
fn model_lease(lease: &consumer::owner::Lease) -> Result<Lease, String> {
    let mut records = BTreeMap::new();
    for (&offset, record) in &lease.records {
        if record.end != offset + 1 {
            return Err(format!("a worker holds a batch {offset}..{}, traces use batch 1", record.end));
        }
        let stage = match record.stage {
            consumer::owner::Stage::Fetched => Stage::Fetched,
            consumer::owner::Stage::Committed => Stage::Committed,
            consumer::owner::Stage::EffectApplied => Stage::EffectApplied,
            consumer::owner::Stage::Recorded => Stage::Recorded,
            consumer::owner::Stage::Exhausted => Stage::Exhausted,
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

fn narrow<T: TryInto<u8> + Copy + std::fmt::Display>(value: T, what: &str) -> Result<u8, String> {
    value.try_into().map_err(|_| format!("{what} {value} does not fit the model's 8 bits"))
}

fn parse_owner(name: &str) -> Result<u8, String> {
    name.strip_prefix('o')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("owner '{name}' is not one of the model's o0, o1, ..."))
}

/// The consumer step for a model owner action (batch 1: the offset is the record's).
pub fn real_step(action: &Action) -> Step {
    let (kind, offset) = match *action {
        Action::Fetch { offset, .. } => (StepKind::Fetch, offset),
        Action::ApplyEffect { offset, .. } => (StepKind::ApplyEffect, offset),
        Action::InsertProcessed { offset, .. } => (StepKind::InsertProcessed, offset),
        Action::CommitOffset { next_offset, .. } => (StepKind::CommitOffset, next_offset),
        Action::ApplyStamped { offset, .. } => (StepKind::ApplyStamped, offset),
        Action::ApplyDeduped { offset, .. } => (StepKind::ApplyDeduped, offset),
        Action::ApplyAtomic { offset, .. } => (StepKind::ApplyAtomic, offset),
        Action::DeadLetter { offset, .. } => (StepKind::DeadLetter, offset),
        other => unreachable!("{other} is not an owner step"),
    };
    let (_, _, partition) = action.lease_step().expect("an owner step");
    Step { kind, partition: u32::from(partition), offset: u64::from(offset) }
}

/// A fresh, uniquely named data directory (and PostgreSQL database, when replaying against
/// one), removed when dropped.
struct ScratchDir {
    path: PathBuf,
    /// The admin URL and the database's own URL.
    database: Option<(String, String)>,
}

impl ScratchDir {
    fn new(root: &Path) -> Result<ScratchDir, String> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!("onceproof-conformance-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = root.join(name);
        std::fs::create_dir_all(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(ScratchDir { path, database: None })
    }

    /// Creates a database named after the directory on the server behind `admin` and returns
    /// its URL (the admin URL with the database name replaced).
    fn create_database(&mut self, admin: &str) -> Result<String, String> {
        let name = self.path.file_name().and_then(|n| n.to_str()).expect("a plain name").replace('-', "_");
        let mut client =
            postgres::Client::connect(admin, postgres::NoTls).map_err(|e| format!("cannot reach PostgreSQL: {e}"))?;
        client.batch_execute(&format!("CREATE DATABASE {name}")).map_err(|e| format!("CREATE DATABASE {name}: {e}"))?;
        let url = database_url(admin, &name)?;
        self.database = Some((admin.to_string(), url.clone()));
        Ok(url)
    }
}

/// `admin` with its database name replaced by `name`: `postgres://auth/db?query`.
fn database_url(admin: &str, name: &str) -> Result<String, String> {
    let (head, query) = admin.split_once('?').map_or((admin, None), |(h, q)| (h, Some(q)));
    let authority_end = head.find("://").map(|i| i + 3).ok_or("the PostgreSQL URL has no scheme")?;
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
