//! The harness: a fresh real system (log, store, owner processes) driven by model actions, and
//! the abstraction function that maps its concrete state back to a model `State`.

use crate::driver::{self, Mode, OwnerHandle, OwnerSpec};
use consumer::log::{encode_delta, Log};
use consumer::owner::{Mutation, Outcome, Settings};
use consumer::store::{Journal, Store, StoreOptions};
use consumer::strategy::{Step, StepKind, Strategy as RealStrategy};
use model::state::{Ghost, Group, Lease, Owner, PartitionRow, Stage, State, Store as ModelStore};
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
}

impl Options {
    /// Data directories go to /dev/shm when it exists: a process crash keeps the page cache,
    /// so tmpfs gives the same crash semantics as a disk, minus the wait for fsync.
    pub fn new(mode: Mode) -> Options {
        let shm = Path::new("/dev/shm");
        let tmp_root = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        Options { mode, tmp_root, mutation: None, worker_exe: None }
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
    /// The last observed state, for the ghost bookkeeping of the next step.
    last: Option<State>,
}

pub fn group_name(group: u8) -> String {
    format!("g{group}")
}

pub fn owner_name(owner: u8) -> String {
    format!("o{owner}")
}

/// The model's strategy as the consumer names it (the crates spell the names independently).
pub fn real_strategy(strategy: model::Strategy) -> RealStrategy {
    strategy.name().parse().expect("the consumer implements every strategy of the model")
}

impl Harness {
    /// Creates the data directory, the store and the log, and starts every owner alive in the
    /// model's initial state (owner 0 of each group holds every partition at epoch 1).
    pub fn new(config: &Config, options: &Options) -> Result<Harness, String> {
        let dir = ScratchDir::new(&options.tmp_root)?;
        let partitions = u32::from(config.partitions);
        let store_options = StoreOptions { journal: Journal::Delete, ..StoreOptions::default() };
        let mut store = Store::create(&driver::store_path(&dir.path), partitions, store_options).map_err(|e| e.to_string())?;
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
            strategy: real_strategy(self.config.strategy),
            commit_every: u64::from(self.config.commit_every),
            inflight: usize::from(self.config.inflight),
            batch: 1,
            mutation: self.options.mutation,
        };
        OwnerSpec {
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
            Action::Append { partition, delta } => {
                self.log.append(u32::from(partition), &encode_delta(delta)).map_err(|e| e.to_string())?;
            }
            Action::Crash { group, owner } => {
                let handle = self.owners[usize::from(group)][usize::from(owner)].take().ok_or("the owner is not running")?;
                handle.kill();
                self.crashes_used += 1;
            }
            Action::Restart { group, owner } => {
                let handle = driver::start(self.options.mode, &self.spec(group, owner))?;
                self.owners[usize::from(group)][usize::from(owner)] = Some(handle);
            }
            Action::Rebalance { group, partition, to_owner } => {
                self.store.claim(&group_name(group), u32::from(partition), &owner_name(to_owner)).map_err(|e| e.to_string())?;
                self.rebalances_used += 1;
                if let Some(handle) = &mut self.owners[usize::from(group)][usize::from(to_owner)] {
                    handle.assign(u32::from(partition))?;
                }
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

    /// Sends an owner step; an applied record is counted in the observed ghost history.
    fn owner_step(&mut self, action: Action) -> Result<(), String> {
        let (group, owner, partition) = action.lease_step().expect("an owner step");
        let step = real_step(&action);
        let handle = self.owners[usize::from(group)][usize::from(owner)].as_mut().ok_or("the owner is not running")?;
        if let Outcome::Applied { applied, .. } = handle.step(step)? {
            let offset = usize::try_from(step.offset).expect("offsets are 8-bit in traces");
            let count = &mut self.ghosts[usize::from(group)].applied[usize::from(partition)][offset];
            *count += u8::try_from(applied).expect("a batch-1 step applies at most one record");
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
            let end = self.log.end(partition).map_err(|e| e.to_string())?;
            let mut deltas = Vec::new();
            for offset in 0..end {
                let record = self.log.read(partition, offset).map_err(|e| e.to_string())?;
                deltas.push(consumer::log::decode_delta(&record.payload).ok_or("a record is not an 8-byte delta")?);
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
        Ok(State { log, groups, crashes_used: self.crashes_used, rebalances_used: self.rebalances_used, witnessed })
    }

    fn observe_store(&self, group: u8) -> Result<ModelStore, String> {
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
        Ok(ModelStore { total, partitions, processed })
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
    name.strip_prefix('o').and_then(|n| n.parse().ok()).ok_or_else(|| format!("owner '{name}' is not one of the model's o0, o1, ..."))
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
        other => unreachable!("{other} is not an owner step"),
    };
    let (_, _, partition) = action.lease_step().expect("an owner step");
    Step { kind, partition: u32::from(partition), offset: u64::from(offset) }
}

/// A fresh, uniquely named data directory, removed when dropped.
struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    fn new(root: &Path) -> Result<ScratchDir, String> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!("onceproof-conformance-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = root.join(name);
        std::fs::create_dir_all(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(ScratchDir { path })
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
