//! The harness: a fresh real system (log, store, owner processes) driven by model actions, and
//! the abstraction function that maps its concrete state back to a model `State`.

mod replicated;
mod rows;
mod transactional;

pub use replicated::is_unavailable;
pub use rows::{real_row, ProducerRetry, RealRow, ReplicaSettings};

use crate::driver::{self, Mode, OwnerHandle, OwnerSpec};
use crate::error::{Error, Unobservable};
use crate::killpoints::{Durability, Scope, Snapshot, Window};
use crate::observe::ObserveSpec;
use crate::protocol::{Launch, ProtocolStore};
use consumer::external::{EmailProvider, ExternalDir, Index, Relay};
use consumer::log::{encode_delta, Log, LogError, Producer, ReplicatedLog, Storage};
use consumer::owner::{Mutation, Outcome, Settings};
use consumer::protocol::ErrorCode;
use consumer::store::{Journal, Location, Store, StoreOptions};
use consumer::strategy::{StartPolicy, Step, StepKind};
use consumer::txn::OutputLog;
use model::collections::{SortedMap, SortedSet};
use model::state::{
    Ghost, Group, Lease, Owner, PartitionRow, ProducerState, Replicas, Stage, State, Store as ModelStore, Witness,
};
use model::strategy::{Coordinator, OutOfRangePolicy, Sequence};
use model::{Action, Config};
use replicated::{Answered, Replicated, Sent};
use std::path::{Path, PathBuf};
use transactional::Transactional;

/// How the real system is set up for a replay.
#[derive(Clone, Debug)]
pub struct Options {
    pub mode: Mode,
    /// Where each replay's fresh data directory is made (and removed afterwards).
    pub tmp_root: PathBuf,
    /// Protocol mode: the shell command that starts the consumer (`None`: this consumer's
    /// `serve`).
    pub command: Option<String>,
    /// Test only: run a deliberately broken consumer.
    pub mutation: Option<Mutation>,
    /// The executable serving worker processes (default: the conformance binary).
    pub worker_exe: Option<PathBuf>,
    /// Replay against PostgreSQL: a URL of the server's maintenance database (for example
    /// `postgres:///postgres?host=/run/postgresql`); each replay gets a fresh schema there.
    pub postgres: Option<String>,
    /// Protocol mode: how long to wait for one reply before the consumer is taken for frozen.
    pub reply_timeout_ms: u64,
    /// Trace every owner process and judge the store at each kill point inside its steps
    /// (`crate::killpoints`): on by default for a `--worker` consumer, off otherwise.
    pub inside_step: bool,
    /// With kill points inside steps: judge also the store a power cut leaves at each of them
    /// and after every step, from the syncs traced (`killpoints::Durability`).
    pub power_cuts: bool,
    /// With kill points inside steps, in protocol mode: race two incarnations of an owner
    /// inside each of its steps that change the store (`replay::Judge::races`).
    pub races: bool,
    /// Protocol mode: read the store by the consumer's own SQL (`--observe FILE`) instead of
    /// trusting its store role; the role's `observe`, where it has one, must agree.
    pub observe: Option<std::sync::Arc<ObserveSpec>>,
}

impl Options {
    /// Whether owners run traced with these options: kill points inside steps on, owners in
    /// processes, and a store in files (a PostgreSQL store has none to copy).
    pub fn traced(&self) -> bool {
        self.inside_step && self.postgres.is_none() && self.mode != Mode::InProcess
    }

    /// Whether power cuts are judged: traced, and not switched off.
    pub fn cuts_power(&self) -> bool {
        self.traced() && self.power_cuts
    }

    /// Data directories go to /dev/shm when it exists: a process crash keeps the page cache,
    /// so tmpfs gives the same crash semantics as a disk, minus the wait for fsync.
    pub fn new(mode: Mode) -> Options {
        let shm = Path::new("/dev/shm");
        let tmp_root = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        Options {
            mode,
            tmp_root,
            command: None,
            mutation: None,
            worker_exe: None,
            postgres: None,
            reply_timeout_ms: crate::protocol::REPLY_TIMEOUT_MS_DEFAULT,
            inside_step: false,
            power_cuts: true,
            races: true,
            observe: None,
        }
    }
}

/// A real system built for one trace's configuration.
pub struct Harness {
    config: Config,
    /// The real system's configuration for the model's strategy.
    row: RealRow,
    options: Options,
    /// The producer's writer of a plain log; the acks rows' reader of the replicated one (the
    /// consumer-visible records: the leader's, below the high watermark).
    log: Log,
    store: StoreSide,
    /// Protocol mode: the consumer's command and what every `init` says.
    launch: Option<Launch>,
    /// The acks rows: the replicated log, the producer on it and the brokers' steps.
    replicated: Option<Replicated>,
    /// The txn rows: the output log and the downstream reader.
    transactional: Option<Transactional>,
    /// The external systems beside the log (spec.md §3.4, §10), read by `observe` for every row:
    /// an email or a fact of a row that sends or writes none is a divergence like any other.
    provider: EmailProvider,
    index: Index,
    /// The outbox row: the relay (its own store connection, as `consumer relay` has).
    relay: Option<Relay>,
    /// Per group, the owner slots as the model numbers them: each owner's current
    /// incarnation, then the paused slots (`None`: crashed, or a free paused slot).
    owners: Vec<Vec<Option<Box<dyn OwnerHandle>>>>,
    /// Per group and paused slot, the owner that earlier incarnation runs as.
    paused_of: Vec<Vec<Option<u8>>>,
    /// The harness is the coordinator: per group and partition, the owner a forming
    /// rebalance moves it to until its sync (`Coordinator::Forming`; never set otherwise).
    forming: Vec<Vec<Option<u8>>>,
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
    /// Per partition, the delta of every record the harness appended (the model's view; the
    /// acks rows: the consumer-visible records last observed, kept while there is no leader).
    appended: Vec<Vec<i64>>,
    /// The last observed state, for the ghost bookkeeping of the next step.
    last: Option<State>,
    /// The `sometimes` witness bits the harness observed in the real system (spec.md §11),
    /// restricted to those the model's configuration reads (`witness_mask`).
    witnessed: u32,
    witness_mask: u32,
    /// What a power cut leaves of the store, followed from every owner's syncs (power cuts
    /// judged only).
    durability: Option<Durability>,
    /// Last, so that it is dropped last: every owner and connection using the directory and
    /// the schema has ended before they are removed.
    dir: ScratchDir,
}

/// The consumer's durable state: its store read directly (this consumer), or through the
/// store role of the open protocol (any consumer), whose `observe` is asked while `observes`
/// (it is not asked again once it replied `not-supported`: a consumer with an observation spec
/// need not implement it).
enum StoreSide {
    Direct(Box<Store>),
    Protocol { agent: Box<ProtocolStore>, observes: bool },
}

/// As `consumer init` does: the store, knowing the log's identity, and each group at epoch 1
/// owned by o0; the outbox row's relay, on its own store connection as `consumer relay` has.
fn direct_store(
    config: &Config,
    location: &Location,
    identity: consumer::log::LogIdentity,
    store_options: StoreOptions,
    external: &ExternalDir,
) -> Result<(Store, Option<Relay>), Error> {
    let mut store = Store::create_at(location, identity, store_options)?;
    let relay = match config.strategy.rules().sequence {
        Sequence::AtomicWithOutbox => {
            Some(Relay::new(Store::open_at(location, store_options)?, external.open_index()?))
        }
        Sequence::CommitThenEffect
        | Sequence::EffectThenCommit
        | Sequence::Effect
        | Sequence::EffectRecordCommit
        | Sequence::Stamped
        | Sequence::DedupedThenCommit
        | Sequence::Atomic
        | Sequence::Transactional
        | Sequence::AtomicThenEmail
        | Sequence::EmailThenAtomic { .. }
        | Sequence::AtomicThenIndex => None,
    };
    for group in 0..config.groups {
        store.ensure_group(&group_name(group), &owner_name(0))?;
    }
    Ok((store, relay))
}

/// Before any trace: the observation spec's queries run on a store the consumer's store role
/// has just set up for `config`'s groups (nothing else has run), so a query that fails or
/// returns the wrong shape is refused before the run, naming the query and the column.
pub fn check_observation(config: &Config, options: &Options) -> Result<(), Error> {
    let Some(spec) = &options.observe else { return Ok(()) };
    spec.require(config.strategy)?;
    let dir = ScratchDir::new(&options.tmp_root)?;
    let partitions = u32::from(config.partitions);
    let log_dir = driver::log_dir(&dir.path);
    Log::create(&log_dir, Log::identity_for_init(&log_dir, partitions)?)?;
    let launch = protocol_launch(config, &real_row(config.strategy), options, &dir.path)?;
    let mut agent = ProtocolStore::start(launch.clone())?;
    let groups: Vec<String> = (0..config.groups).map(group_name).collect();
    for group in &groups {
        agent.setup(group, &owner_name(0))?;
    }
    spec.observe(&launch.store, &dir.path.join("observed"), &groups, config.strategy, partitions)?;
    Ok(())
}

/// What a protocol consumer is started with: the command (this consumer's `serve` unless
/// `--worker` named another), an empty directory of its own for its store, and the row.
fn protocol_launch(config: &Config, row: &RealRow, options: &Options, dir: &Path) -> Result<Launch, Error> {
    if options.postgres.is_some() {
        return Err(Error::Unsupported("a protocol replay on PostgreSQL (the consumer owns its store)"));
    }
    if options.mutation.is_some() {
        return Err(Error::Unsupported("a mutation of a protocol consumer"));
    }
    let command = match &options.command {
        Some(command) => command.clone(),
        None => {
            let exe = match &options.worker_exe {
                Some(exe) => exe.clone(),
                None => driver::worker_executable().map_err(|source| Error::Worker {
                    group: "-".into(),
                    owner: "-".into(),
                    source,
                })?,
            };
            format!("{} serve", crate::protocol::shell_quote(&exe.to_string_lossy()))
        }
    };
    let store = dir.join("consumer");
    std::fs::create_dir_all(&store).map_err(Error::io(&store, "create"))?;
    let settings = Settings {
        commit_every: u64::from(config.commit_every),
        inflight: usize::from(config.inflight),
        batch: 1,
        max_attempts: u64::from(config.max_attempts),
        on_out_of_range: row.on_out_of_range,
        start: row.start,
        log_check: row.log_check,
        ..Settings::new(row.strategy)
    };
    let (partitions, row) = (u32::from(config.partitions), config.strategy.name().to_string());
    let (reply_timeout_ms, inside_step) = (options.reply_timeout_ms, options.inside_step);
    Ok(Launch { command, store, dir: dir.to_path_buf(), partitions, row, settings, reply_timeout_ms, inside_step })
}

pub fn group_name(group: u8) -> String {
    format!("g{group}")
}

pub fn owner_name(owner: u8) -> String {
    format!("o{owner}")
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

fn not_running(group: u8, owner: String) -> Error {
    Error::NotRunning { group: group_name(group), owner }
}

/// The step an owner's action sends, when it is one (`perform`'s owner steps): the model's
/// crash points are named by it.
pub fn step_kind(action: &Action) -> Option<StepKind> {
    use StepKind as Kind;
    match action {
        Action::Fetch { .. } => Some(Kind::Fetch),
        Action::ApplyEffect { .. } => Some(Kind::ApplyEffect),
        Action::InsertProcessed { .. } => Some(Kind::InsertProcessed),
        Action::CommitOffset { .. } => Some(Kind::CommitOffset),
        Action::ApplyStamped { .. } => Some(Kind::ApplyStamped),
        Action::ApplyDeduped { .. } => Some(Kind::ApplyDeduped),
        Action::ApplyAtomic { .. } => Some(Kind::ApplyAtomic),
        Action::DeadLetter { .. } => Some(Kind::DeadLetter),
        Action::ResetOffset { .. } => Some(Kind::ResetOffset),
        Action::FailOutOfRange { .. } => Some(Kind::FailOutOfRange),
        Action::RefuseAhead { .. } => Some(Kind::RefuseAhead),
        Action::ProduceOutput { .. } => Some(Kind::ProduceOutput),
        Action::CommitTxn { .. } => Some(Kind::CommitTxn),
        Action::SendEmail { .. } => Some(Kind::SendEmail),
        Action::WriteIndex { .. } => Some(Kind::WriteIndex),
        Action::Append { .. }
        | Action::AppendAckLost { .. }
        | Action::RetryAppend { .. }
        | Action::Crash { .. }
        | Action::Restart { .. }
        | Action::Rebalance { .. }
        | Action::Sync { .. }
        | Action::Pause { .. }
        | Action::LoseTail { .. }
        | Action::Retain { .. }
        | Action::Replicate { .. }
        | Action::Acknowledge { .. }
        | Action::ShrinkIsr { .. }
        | Action::FailLeader { .. }
        | Action::ReadOutput { .. }
        | Action::Relay { .. } => None,
    }
}

/// How many copies an owner was restarted on in this process: each copy's directory is named
/// by the count.
static RESTARTS_NAMED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// What reads a copy of the store: the harness's parts a reader needs, shared by the readers.
#[derive(Clone)]
struct CopyReader {
    dir: PathBuf,
    launch: Option<Launch>,
    observe: Option<std::sync::Arc<ObserveSpec>>,
    strategy: model::strategy::Strategy,
    groups: u8,
    partitions: u8,
}

impl CopyReader {
    fn read(&self, snapshot: &Snapshot, index: usize) -> Result<Vec<ModelStore>, Error> {
        let copy = self.write_copy(snapshot, &format!("kill-point-{index}"))?;
        let stores = self.stores_in(&copy);
        let _ = std::fs::remove_dir_all(&copy);
        stores
    }

    /// An owner started on a copy as a restart after a crash there would start it: its leases
    /// once its start has replied, and every group's store after that start.
    fn restart(&self, snapshot: &Snapshot, spec: &OwnerSpec, next: &[Step]) -> Result<Restarted, Error> {
        // A name never used before: a consumer that keys state kept outside its store by the
        // store's path must not find another restart's there.
        let fresh = RESTARTS_NAMED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let copy = self.write_copy(snapshot, &format!("restart-point-{fresh}"))?;
        let launch = self.launch.as_ref().ok_or(Error::Unsupported("a restart on a copy without a command"))?;
        let launch = Launch { store: copy.clone(), inside_step: false, ..launch.clone() };
        let spec = OwnerSpec { launch: Some(launch.clone()), inside_step: false, durability: None, ..spec.clone() };
        let restarted = crate::protocol::ProtocolOwner::spawn(&launch, &spec).and_then(|owner| {
            let mut owner: Box<dyn OwnerHandle> = Box::new(owner);
            let restarted = self.restart_in(&copy, &spec, &mut owner, next);
            owner.kill();
            restarted
        });
        let _ = std::fs::remove_dir_all(&copy);
        restarted
    }

    /// The restarted `owner`'s leases and, with a spec, the stores after its start; then what
    /// each of `next` leaves in turn, until one is refused (the refusal in words).
    fn restart_in(
        &self,
        copy: &Path,
        spec: &OwnerSpec,
        owner: &mut Box<dyn OwnerHandle>,
        next: &[Step],
    ) -> Result<Restarted, Error> {
        let leases = self.leases_of(spec, owner)?;
        // The store after the start is read by the consumer's SQL only: through the store role
        // it would cost a process per copy, and that role is trusted anyway.
        let stores = match self.observe {
            Some(_) => Some(self.stores_in(copy)?),
            None => None,
        };
        let next = match next.split_first() {
            None => None,
            Some((step, rest)) => Some(match owner.step(*step) {
                Err(error) => Err(error.to_string()),
                Ok(_) => Ok(Box::new(self.restart_in(copy, spec, owner, rest)?)),
            }),
        };
        Ok(Restarted { leases, stores, next })
    }

    /// An owner's leases by partition, in the model's terms.
    fn leases_of(&self, spec: &OwnerSpec, owner: &mut Box<dyn OwnerHandle>) -> Result<Vec<Option<Lease>>, Error> {
        let mut seen = vec![None; usize::from(self.partitions)];
        for (partition, lease) in owner.leases()? {
            let Some(slot) = seen.get_mut(partition as usize) else {
                let (group, owner) = (spec.group.clone(), spec.owner.clone());
                return Err(Unobservable::NoSuchPartition { group, owner, partition }.into());
            };
            *slot = Some(model_lease(&lease)?);
        }
        Ok(seen)
    }

    /// A fresh directory `name` beside the store holding the copy.
    fn write_copy(&self, snapshot: &Snapshot, name: &str) -> Result<PathBuf, Error> {
        let copy = self.dir.join(name);
        if copy.exists() {
            std::fs::remove_dir_all(&copy).map_err(Error::io(&copy, "remove"))?;
        }
        std::fs::create_dir(&copy).map_err(Error::io(&copy, "create"))?;
        snapshot.write_to(&copy).map_err(Error::io(&copy, "write a copy of the store into"))?;
        Ok(copy)
    }

    /// Every group's store as the directory `copy` holds it, read by a fresh reader.
    fn stores_in(&self, copy: &Path) -> Result<Vec<ModelStore>, Error> {
        let copy = copy.to_path_buf();
        let groups = 0..self.groups;
        let observed: Vec<consumer::protocol::Observed> = match (&self.launch, &self.observe) {
            // The consumer's own SQL on the copy: no process to start, and nothing trusted.
            (Some(_), Some(spec)) => {
                let names: Vec<String> = groups.map(group_name).collect();
                spec.observe_copy(&copy, &names, self.strategy, u32::from(self.partitions))?
            }
            (Some(launch), None) => {
                let launch = Launch { store: copy.clone(), inside_step: false, ..launch.clone() };
                let mut agent = ProtocolStore::start(launch)?;
                groups.map(|group| agent.observe(&group_name(group))).collect::<Result<_, _>>()?
            }
            (None, _) => {
                let options = StoreOptions { journal: Journal::Delete, ..StoreOptions::default() };
                let store = Store::open_at(&Location::Sqlite(driver::store_path(&copy)), options)?;
                let observed = groups.map(|group| consumer::protocol::observe(&store, &group_name(group)));
                observed.collect::<Result<_, _>>()?
            }
        };
        let stores = observed.into_iter().map(|observed| model_store(observed, self.partitions));
        Ok(stores.collect::<Result<_, _>>()?)
    }
}

/// Which incarnation a race holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RaceOrder {
    /// The first, inside its raced step, while the second starts (claiming) and runs its steps.
    FirstHeld,
    /// The second, inside its start (its claim), while the first runs its raced step.
    SecondHeld,
}

/// Two incarnations of one owner raced inside a step (`Racer::race`): the steps each is asked.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RacePlan {
    pub order: RaceOrder,
    /// The first incarnation's steps before the raced one (a fetch, say).
    pub first: Vec<Step>,
    /// The first's step the race is about.
    pub raced: Step,
    /// Transaction begins the held incarnation passes (in its raced step, or in its start)
    /// before it is held.
    pub begins_passed: u64,
    /// The second incarnation's steps after its start (`FirstHeld`: run while the first is
    /// held; none for `SecondHeld`).
    pub second: Vec<Step>,
}

/// What a race made (`Racer::race`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RaceOutcome {
    /// The raced step began fewer transactions than `begins_passed` + 1: it ran unheld.
    NotHeld,
    /// The second incarnation's start or one of its steps did not reply within
    /// `RACE_WAIT_MS` while the first was held (a lock the first holds): not a race.
    Blocked,
    /// A restarted incarnation refused a step the model's restart takes (the refusal in
    /// words): a restart that differs from the model's, which the restarts on copies judge.
    Refused(String),
    /// The race ran: every group's store after both, and what the first's raced step replied
    /// (its outcome's name, or its refusal in words).
    Raced { stores: Vec<ModelStore>, reply: String },
}

/// How long the second incarnation may wait while the first is held, per request.
const RACE_WAIT_MS: u64 = 5_000;

/// Races two incarnations of one owner on copies of the store (`Harness::racer`).
pub struct Racer {
    reader: CopyReader,
    spec: OwnerSpec,
}

impl Racer {
    /// On a copy of `snapshot` (the store before the step): the owner started on it (traced,
    /// a restart's start) and asked `plan.first`, then sent `plan.raced` with a hold armed at
    /// its transaction begin `plan.begins_passed`; once held, the owner started again on the
    /// same copy (a second incarnation, whose start claims) and asked `plan.second` to their
    /// end; then the first released and its reply read. The stores the copy then holds.
    /// `SecondHeld`: the first started untraced and asked `plan.first`; the second started
    /// traced with the hold armed before its `init`, held inside its start; meanwhile the first
    /// runs `plan.raced`; then the second is released and its start's reply read.
    pub fn race(&self, snapshot: &Snapshot, plan: &RacePlan) -> Result<RaceOutcome, Error> {
        let fresh = RESTARTS_NAMED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let copy = self.reader.write_copy(snapshot, &format!("race-{fresh}"))?;
        let raced = match plan.order {
            RaceOrder::FirstHeld => self.race_on(&copy, plan),
            RaceOrder::SecondHeld => self.race_start_held(&copy, plan),
        };
        let _ = std::fs::remove_dir_all(&copy);
        raced
    }

    fn race_start_held(&self, copy: &Path, plan: &RacePlan) -> Result<RaceOutcome, Error> {
        let launch = self.reader.launch.as_ref().ok_or(Error::Unsupported("a race on a copy without a command"))?;
        let plain =
            Launch { store: copy.to_path_buf(), inside_step: false, reply_timeout_ms: RACE_WAIT_MS, ..launch.clone() };
        let plain_spec =
            OwnerSpec { launch: Some(plain.clone()), inside_step: false, durability: None, ..self.spec.clone() };
        let mut first = crate::protocol::ProtocolOwner::spawn(&plain, &plain_spec)?;
        for step in &plan.first {
            if let Err(refused) = first.step(*step) {
                return Ok(RaceOutcome::Refused(refused.to_string()));
            }
        }
        let traced = Launch { store: copy.to_path_buf(), inside_step: true, ..launch.clone() };
        let traced_spec =
            OwnerSpec { launch: Some(traced.clone()), inside_step: true, durability: None, ..self.spec.clone() };
        let (mut second, sent) = crate::protocol::ProtocolOwner::spawn_held(&traced, &traced_spec, plan.begins_passed)?;
        let (wait, started) = (std::time::Duration::from_millis(2), std::time::Instant::now());
        let deadline = std::time::Duration::from_millis(launch.reply_timeout_ms);
        let held = loop {
            if second.traced().is_some_and(|tracer| tracer.held()) {
                break true;
            }
            if second.replied_within(wait) || started.elapsed() > deadline {
                break false;
            }
        };
        if !held {
            second.traced().expect("traced").disarm_hold();
            return match second.finish_start(sent) {
                Ok(()) => Ok(RaceOutcome::NotHeld),
                Err(refused) => Ok(RaceOutcome::Refused(refused.to_string())),
            };
        }
        let raced = first.step(plan.raced);
        second.traced().expect("traced").thaw();
        let started = second.finish_start(sent);
        let reply = match raced {
            Ok(outcome) => format!("'{outcome}'"),
            Err(Error::Protocol { source: crate::protocol::ProtocolError::Silent { .. }, .. }) => {
                return Ok(RaceOutcome::Blocked)
            }
            Err(error) => error.to_string(),
        };
        if let Err(refused) = started {
            return Ok(RaceOutcome::Refused(refused.to_string()));
        }
        drop((first, second));
        let stores = self.reader.stores_in(copy)?;
        Ok(RaceOutcome::Raced { stores, reply })
    }

    fn race_on(&self, copy: &Path, plan: &RacePlan) -> Result<RaceOutcome, Error> {
        let launch = self.reader.launch.as_ref().ok_or(Error::Unsupported("a race on a copy without a command"))?;
        let traced = Launch { store: copy.to_path_buf(), inside_step: true, ..launch.clone() };
        let spec = OwnerSpec { launch: Some(traced.clone()), inside_step: true, durability: None, ..self.spec.clone() };
        let mut first = crate::protocol::ProtocolOwner::spawn(&traced, &spec)?;
        for step in &plan.first {
            if let Err(refused) = first.step(*step) {
                return Ok(RaceOutcome::Refused(refused.to_string()));
            }
        }
        let tracer = first.traced().ok_or(Error::Unsupported("a race without the tracer"))?;
        tracer.arm_hold(plan.begins_passed);
        let sent = first.send_step(plan.raced)?;
        let (wait, started) = (std::time::Duration::from_millis(2), std::time::Instant::now());
        let deadline = std::time::Duration::from_millis(launch.reply_timeout_ms);
        let held = loop {
            if first.traced().is_some_and(|tracer| tracer.held()) {
                break true;
            }
            if first.replied_within(wait) || started.elapsed() > deadline {
                // A reply, or (past the reply wait) `finish_step` names the silence.
                break false;
            }
        };
        if !held {
            first.traced().expect("traced").disarm_hold();
            first.finish_step(sent)?;
            return Ok(RaceOutcome::NotHeld);
        }
        let plain =
            Launch { store: copy.to_path_buf(), inside_step: false, reply_timeout_ms: RACE_WAIT_MS, ..launch.clone() };
        let second_spec =
            OwnerSpec { launch: Some(plain.clone()), inside_step: false, durability: None, ..self.spec.clone() };
        let second = crate::protocol::ProtocolOwner::spawn(&plain, &second_spec).and_then(|mut second| {
            plan.second.iter().try_for_each(|step| second.step(*step).map(|_| ()))?;
            Ok(second)
        });
        first.traced().expect("traced").thaw();
        let reply = match first.finish_step(sent) {
            Ok(outcome) => format!("'{outcome}'"),
            Err(error) => error.to_string(),
        };
        match second {
            Ok(second) => drop(second),
            Err(Error::Protocol { source: crate::protocol::ProtocolError::Silent { .. }, .. }) => {
                return Ok(RaceOutcome::Blocked)
            }
            Err(refused) => return Ok(RaceOutcome::Refused(refused.to_string())),
        }
        drop(first);
        let stores = self.reader.stores_in(copy)?;
        Ok(RaceOutcome::Raced { stores, reply })
    }
}

/// Starts one owner on copies of the store (`Harness::restarter`).
pub struct Restarter {
    reader: CopyReader,
    spec: OwnerSpec,
}

impl Restarter {
    /// For each copy, the owner started on it as a restart after a crash there would start
    /// it, then asked `next` in order, `COPY_READERS_MAX` copies at a time.
    pub fn restart_all(&self, snapshots: &[Snapshot], next: &[Step]) -> Result<Vec<Restarted>, Error> {
        fan_out(snapshots.len(), |index| self.reader.restart(&snapshots[index], &self.spec, next))
    }
}

/// `job(0..count)`, `COPY_READERS_MAX` at a time (a copy's reader or restart is mostly a
/// process's start), the results in order; the first error is returned.
fn fan_out<T: Send>(count: usize, job: impl Fn(usize) -> Result<T, Error> + Sync) -> Result<Vec<T>, Error> {
    let workers_max = COPY_READERS_MAX.min(count).max(1);
    let job = &job;
    let mut results: Vec<Option<Result<T, Error>>> = (0..count).map(|_| None).collect();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..workers_max)
            .map(|first| {
                scope.spawn(move || {
                    (first..count).step_by(workers_max).map(|index| (index, job(index))).collect::<Vec<_>>()
                })
            })
            .collect();
        for worker in workers {
            for (index, result) in worker.join().expect("a copy's reader does not panic") {
                results[index] = Some(result);
            }
        }
    });
    results.into_iter().map(|result| result.expect("every copy read")).collect()
}

/// What an owner restarted on a copy of the store made of it (`Restarter::restart_all`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restarted {
    /// Per partition, the lease the restarted owner reports (`None`: not its partition).
    pub leases: Vec<Option<Lease>>,
    /// Every group's store after its start (a restart claims its epochs); read with an
    /// observation spec only (`None` otherwise).
    pub stores: Option<Vec<ModelStore>>,
    /// What the restarted owner's next step left (with the steps after it), or its refusal in
    /// words; `None` when no further step was asked.
    pub next: Option<Result<Box<Restarted>, String>>,
}

impl Restarted {
    /// Whether a real restart agrees with the model's: the same leases, and the same stores
    /// where the real one's were read, after the start and after the next step.
    pub fn agrees_with(&self, model: &Restarted) -> bool {
        let next = match (&self.next, &model.next) {
            (None, None) => true,
            (Some(Ok(real)), Some(Ok(model))) => real.agrees_with(model),
            (Some(_), _) | (None, Some(_)) => false,
        };
        self.leases == model.leases && (self.stores.is_none() || self.stores == model.stores) && next
    }
}

/// A step a restarted owner is asked, as the real owner is sent it, when it is one
/// that touches nothing but the store and the log: `action` is the model's, `state` the
/// model's state it is taken from (the log start and lease position the out-of-range steps
/// name). The steps that write outside the store (an output, an email, an index) are not
/// asked of an owner on a copy, whose world is the copy.
pub fn restart_step(action: &Action, state: &State) -> Option<Step> {
    use StepKind as Kind;
    let kind = step_kind(action)?;
    let (group, owner, partition) = action.lease_step()?;
    let position = || {
        let owners = &state.groups[usize::from(group)].owners;
        owners.get(usize::from(owner))?.leases[usize::from(partition)].as_ref().map(|lease| lease.position)
    };
    let offset = match kind {
        Kind::ProduceOutput | Kind::CommitTxn | Kind::SendEmail | Kind::WriteIndex => return None,
        Kind::Fetch => {
            let Action::Fetch { offset, .. } = *action else { return None };
            offset
        }
        Kind::ResetOffset => state.log_start[usize::from(partition)],
        Kind::FailOutOfRange | Kind::RefuseAhead => position()?,
        Kind::ApplyEffect
        | Kind::InsertProcessed
        | Kind::CommitOffset
        | Kind::ApplyStamped
        | Kind::ApplyDeduped
        | Kind::ApplyAtomic
        | Kind::DeadLetter => action.owner_write()?.value,
    };
    Some(Step { kind, partition: u32::from(partition), offset: u64::from(offset) })
}

/// How many copies of the store are read at once after a step (`Harness::observe_copies`):
/// twice the cores of the machines this runs on, since a reader mostly waits for its process.
const COPY_READERS_MAX: usize = 4;

/// The producer every harness appends as (idempotent appends; see `produce`).
const PRODUCER: Producer = Producer { id: 1, epoch: 1 };

/// The payload of a poison record: not an 8-byte delta, so its effect fails every time.
pub const POISON_PAYLOAD: &[u8] = b"poison";

impl Harness {
    /// Creates the data directory, the store and the log, and starts every owner alive in the
    /// model's initial state (owner 0 of each group holds every partition at epoch 1).
    pub fn new(config: &Config, options: &Options) -> Result<Harness, Error> {
        let row = real_row(config.strategy);
        let mut dir = ScratchDir::new(&options.tmp_root)?;
        let partitions = u32::from(config.partitions);
        let store_options = StoreOptions { journal: Journal::Delete, ..StoreOptions::default() };
        let location = match &options.postgres {
            Some(admin) => Location::Postgres(dir.create_schema(admin)?),
            None => Location::Sqlite(driver::store_path(&dir.path)),
        };
        // As `consumer init` does: the log (replicated for the acks rows), the output log
        // beside it, and the store knowing the log's identity.
        let log_dir = driver::log_dir(&dir.path);
        let identity = Log::identity_for_init(&log_dir, partitions)?;
        let (log, replicated) = match row.replication {
            None => {
                Log::create(&log_dir, identity)?;
                (Log::open_writer_with(&log_dir, identity, row.writer)?.0, None)
            }
            Some(settings) => {
                ReplicatedLog::create(&log_dir, identity, replicated::BROKERS)?;
                let opened = ReplicatedLog::open(&log_dir, identity)?;
                let opened =
                    opened.ok_or(Error::Unsupported("a replicated data directory that opens as a plain log"))?;
                let replicated = Replicated::new(opened, &log_dir, settings, usize::from(config.partitions));
                (Log::open_reader(&log_dir, identity)?, Some(replicated))
            }
        };
        let output = OutputLog::at(&Storage::Real, &log_dir, identity);
        output.create()?;
        let rules = config.strategy.rules();
        let transactional = if rules.sequence == Sequence::Transactional {
            Some(Transactional::new(&output, group_name(0), rules.isolation, partitions)?)
        } else {
            None
        };
        // As `consumer init` does: the external systems before the store.
        let external = ExternalDir::new(&dir.path);
        external.create()?;
        let (store, relay, launch) = match options.mode {
            Mode::Process | Mode::InProcess => {
                let (store, relay) = direct_store(config, &location, identity, store_options, &external)?;
                (StoreSide::Direct(Box::new(store)), relay, None)
            }
            Mode::Protocol => {
                let launch = protocol_launch(config, &row, options, &dir.path)?;
                let mut agent = ProtocolStore::start(launch.clone())?;
                for group in 0..config.groups {
                    agent.setup(&group_name(group), &owner_name(0))?;
                }
                (StoreSide::Protocol { agent: Box::new(agent), observes: true }, None, Some(launch))
            }
        };
        let ghost = State::initial(config).groups[0].ghost.clone();
        let mut harness = Harness {
            config: config.clone(),
            row,
            options: options.clone(),
            dir,
            log,
            store,
            replicated,
            transactional,
            provider: external.open_provider()?,
            index: external.open_index()?,
            relay,
            launch,
            owners: Vec::new(),
            ghosts: vec![ghost; usize::from(config.groups)],
            crashes_used: 0,
            rebalances_used: 0,
            pauses_used: 0,
            log_losses_used: 0,

            paused_of: vec![vec![None; usize::from(config.pauses)]; usize::from(config.groups)],
            forming: vec![vec![None; usize::from(config.partitions)]; usize::from(config.groups)],
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
            durability: None,
        };
        // The store as set up is taken as durable; from here on only what is synced is.
        if options.cuts_power() {
            let scope = harness.store_scope()?;
            let baseline = Durability::baseline(&scope).map_err(Error::io(&harness.dir.path, "copy the store in"))?;
            harness.durability = Some(baseline);
        }
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
            store: self.dir.database.as_ref().map(|(_, url, _)| url.clone()),
            worker_exe: self.options.worker_exe.clone(),
            dir: self.dir.path.clone(),
            group: group_name(group),
            owner: owner_name(owner),
            settings,
            launch: self.launch.clone(),
            inside_step: self.options.inside_step,
            durability: self.durability.clone(),
        }
    }

    /// Whether the owners run traced: kill points inside their steps are recorded (never for a
    /// PostgreSQL store, which has no file under a directory to copy, nor in process).
    pub fn traced(&self) -> bool {
        self.options.traced()
    }

    /// Arms a named crash point in a running owner (`STEP:WHEN[@OFFSET]`).
    pub fn arm(&mut self, group: u8, owner: u8, point: &str) -> Result<(), Error> {
        self.handle(group, owner)?.arm(point)
    }

    /// The files of the store: this consumer's `store.db` and its journal beside the log, or
    /// a protocol consumer's store directory.
    fn store_scope(&self) -> Result<Scope, Error> {
        match &self.launch {
            Some(launch) => Scope::directory(&launch.store).map_err(Error::io(&launch.store, "resolve")),
            None => Scope::files(&self.dir.path, "store.db").map_err(Error::io(&self.dir.path, "resolve")),
        }
    }

    /// Takes the store as it is now as durable (power cuts judged only): after a write that is
    /// not an owner's (the store role's or the harness's: the coordinator's claim, the relay).
    pub fn assume_durable(&self) -> Result<(), Error> {
        let Some(durability) = &self.durability else { return Ok(()) };
        durability.assume_durable().map_err(Error::io(&self.dir.path, "copy the store in"))
    }

    /// The store a power cut leaves now (power cuts judged only).
    pub fn power_cut(&self) -> Option<std::sync::Arc<Snapshot>> {
        self.durability.as_ref().map(Durability::cut)
    }

    /// A copy of this consumer's store files as they are now (process mode: `store.db` and its
    /// journal), for `observe_copies`.
    pub fn store_snapshot(&self) -> Result<Snapshot, Error> {
        let scope = Scope::files(&self.dir.path, "store.db").map_err(Error::io(&self.dir.path, "resolve"))?;
        Snapshot::take(&scope).map_err(Error::io(&self.dir.path, "copy the store in"))
    }

    /// The kill points inside the model steps since the last call (every owner's windows, in
    /// slot order: a step has one acting owner, so they are that step's).
    pub fn take_windows(&mut self) -> Vec<(u8, u8, Window)> {
        let mut windows = Vec::new();
        for (group, slots) in self.owners.iter_mut().enumerate() {
            for (slot, handle) in slots.iter_mut().enumerate() {
                let Some(handle) = handle else { continue };
                let at = |window| (narrow_index(group), narrow_index(slot), window);
                windows.extend(handle.take_windows().into_iter().map(at));
            }
        }
        windows
    }

    /// Whether a file outside the consumer's store is one of onceproof's own that owners write
    /// (spec.md §10): the email provider's and the index's databases beside the log, and the
    /// txn rows' output log (`output/`). Anything else an owner writes outside its
    /// store fails the trace (`replay::ReplayFailure::OutsideStore`).
    pub fn is_onceproof_file(&self, path: &Path) -> bool {
        let Ok(data) = self.dir.path.canonicalize() else { return false };
        let Ok(relative) = path.strip_prefix(&data) else { return false };
        let Some(first) = relative.components().next() else { return false };
        let first = first.as_os_str().to_string_lossy();
        let external = ["external.db", "index.db"].iter().any(|name| first.starts_with(name));
        external || (first == "output" && self.transactional.is_some())
    }

    /// Whether `slot` of a group is an owner's current incarnation (not a paused one's).
    pub fn is_current_slot(&self, slot: u8) -> bool {
        slot < self.config.owners
    }

    /// Every group's durable store as each copy taken at a kill point holds it, read by a fresh
    /// reader of the copy: the consumer's store role started on it (protocol mode), or this
    /// consumer's store opened on it. Opening the copy read-write lets a reader roll back the
    /// hot journal a kill inside a transaction left, as it would on the real store. The copies
    /// are read `COPY_READERS_MAX` at a time (a reader is mostly a process's start).
    pub fn observe_copies(&self, snapshots: &[&Snapshot]) -> Result<Vec<Vec<ModelStore>>, Error> {
        let reader = self.copy_reader();
        fan_out(snapshots.len(), |index| reader.read(snapshots[index], index))
    }

    /// Whether a kill inside an owner's step is also judged by restarting there: protocol mode,
    /// where the consumer's own start is what reads its restart position (this consumer's is
    /// conformance's own and replayed step by step already).
    pub fn restarts_copies(&self) -> bool {
        self.launch.is_some() && self.traced()
    }

    /// Whether an owner's steps are also raced against a second incarnation on copies
    /// (protocol mode, traced, `Options::races`).
    pub fn races_copies(&self) -> bool {
        self.restarts_copies() && self.options.races
    }

    /// Who reads a copy of the store, as text: what besides the copy the stores it shows
    /// depend on (the store role's start request but for the harness directory's paths, or the
    /// observation spec, and the groups and partitions read).
    pub fn reader_identity(&self) -> String {
        let launch = self.launch.as_ref().map(|launch| {
            let launch = Launch { store: PathBuf::new(), dir: PathBuf::new(), ..launch.clone() };
            format!("{} {:?}", launch.command, launch.store_request())
        });
        let spec = self.options.observe.as_ref().map(|spec| format!("{spec:?}"));
        let (groups, partitions, strategy) = (self.config.groups, self.config.partitions, self.config.strategy);
        format!("{launch:?} {spec:?} {groups} {partitions} {strategy:?}")
    }

    /// All the owner `owner` of `group` is told at its start but the harness directory's paths
    /// (the copy's and the log's), as text: what besides a copy a restart on it depends on.
    pub fn restart_request(&self, group: u8, owner: u8) -> String {
        let Some(launch) = &self.launch else { return String::new() };
        let spec = self.spec(group, owner);
        let launch = Launch { store: PathBuf::new(), dir: PathBuf::new(), ..launch.clone() };
        format!("{} {:?}", launch.command, launch.request(&spec))
    }

    /// What races two incarnations of the owner `owner` of `group` on copies of the store.
    pub fn racer(&self, group: u8, owner: u8) -> Racer {
        Racer { reader: self.copy_reader(), spec: self.spec(group, owner) }
    }

    /// A copy of the store as it is now (before a step a race starts from).
    pub fn store_copy(&self) -> Result<Snapshot, Error> {
        let scope = self.store_scope()?;
        Snapshot::take(&scope).map_err(Error::io(&self.dir.path, "copy the store in"))
    }

    /// What starts the owner `owner` of `group` (a current incarnation's slot) on copies of
    /// the store: owned, so the restarts can run on another thread while the replay goes on.
    pub fn restarter(&self, group: u8, owner: u8) -> Restarter {
        Restarter { reader: self.copy_reader(), spec: self.spec(group, owner) }
    }

    /// What of a copy besides the store its reader shows can change what a restart on it does:
    /// with an observation spec, every file but the database's (a restart on two copies that
    /// show the same store and hold the same other files is judged once); without one, all of
    /// it.
    pub fn restart_residue(&self, snapshot: &Snapshot) -> Snapshot {
        let Some(spec) = &self.options.observe else { return snapshot.clone() };
        let database = spec.database_files();
        let entries = snapshot.entries.iter().filter(|(path, _)| !database.contains(path));
        Snapshot { entries: entries.map(|(path, entry)| (path.clone(), entry.clone())).collect() }
    }

    fn copy_reader(&self) -> CopyReader {
        CopyReader {
            dir: self.dir.path.clone(),
            launch: self.launch.clone(),
            observe: self.options.observe.clone(),
            strategy: self.config.strategy,
            groups: self.config.groups,
            partitions: self.config.partitions,
        }
    }

    /// Performs one model action on the real system and returns the observed state after it.
    /// `Err`: the real system refused or failed a step the model took.
    pub fn apply(&mut self, action: &Action) -> Result<State, Error> {
        let before = match self.last.take() {
            Some(state) => state,
            None => self.observe()?,
        };
        // Like the model's, a state's witness bits are what the step into it showed.
        self.witnessed = 0;
        self.witness_before(&before, *action);
        self.perform(*action, &before)?;
        if let Some(group) = action.group() {
            self.free_idle_paused_slots(group)?;
        }
        let mut after = self.observe()?;
        let ahead = after.groups.iter().any(|group| {
            group.store.partitions.iter().zip(&after.log).any(|(row, log)| usize::from(row.next_offset) > log.len())
        });
        if ahead {
            self.witness(Witness::StoreAhead);
        }
        // Only a take of a partition writes an abort marker (spec.md §10, transactions).
        if transactional::aborts(&after.output) > transactional::aborts(&before.output) {
            self.witness(Witness::TxnAborted);
        }
        after.witnessed = self.witnessed;
        self.record_ghosts(&before, &after, action);
        for (group, ghost) in after.groups.iter_mut().zip(&self.ghosts) {
            group.ghost = ghost.clone();
        }
        self.last = Some(after.clone());
        Ok(after)
    }

    fn witness(&mut self, witness: Witness) {
        self.witnessed |= (1 << witness as u32) & self.witness_mask;
    }

    /// The witnesses a step shows by where it falls, classified on the observed state before
    /// it with the model's own definitions: a crash between two writes or after progress, a
    /// write by a stale owner, a fetch of an applied record, a completion overtaking a lower
    /// record, a blind commit to the log start, a leader failure that drops unread records. (What a step *did*, fenced, skipped,
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
        if let Action::FailLeader { partition } = action {
            if model::replication::drops_unread(&self.config, before, partition) {
                self.witness(Witness::UnreadTruncated);
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

    /// What the real system does for each model action (spec.md §11's table); `before` is the
    /// state observed before it.
    fn perform(&mut self, action: Action, before: &State) -> Result<(), Error> {
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
                let name = self.slot_name(group, owner);
                let handle = self.owners[usize::from(group)][usize::from(owner)].take();
                handle.ok_or_else(|| not_running(group, name))?.kill();
                self.after_kill()?;
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
            Action::Rebalance { group, partition, to_owner } => {
                self.rebalances_used += 1;
                match self.config.strategy.rules().coordinator {
                    Coordinator::Atomic => self.move_partition(group, partition, to_owner),
                    // The group begins forming: nothing changes in the store until the sync.
                    Coordinator::Forming => {
                        self.forming[usize::from(group)][usize::from(partition)] = Some(to_owner);
                        Ok(())
                    }
                }
            }
            Action::Sync { group, partition } => {
                let forming = self.forming[usize::from(group)][usize::from(partition)].take();
                let to_owner = forming.ok_or(Error::Unsupported("a sync of a group that is not forming"))?;
                self.move_partition(group, partition, to_owner)
            }
            Action::Pause { group, owner } => self.pause(group, owner),
            Action::LoseTail { partition, keep } => self.lose_tail(partition, keep),
            Action::RefuseAhead { group, owner, partition } => {
                let position = self.lease_position(group, owner, partition)?;
                self.owner_step(group, owner, Kind::RefuseAhead, partition, position)
            }
            Action::Retain { partition, before } => {
                if self.replicated.is_some() {
                    return Err(Error::Unsupported("retention of a replicated log (refused, spec.md §10)"));
                }
                self.log.retain_before(u32::from(partition), u64::from(before))?;
                self.retentions_used += 1;
                Ok(())
            }
            Action::Replicate { partition } => self.replicated_mut()?.replicate(partition),
            Action::Acknowledge { partition } => self.acknowledge(partition),
            Action::ShrinkIsr { partition } => {
                self.replicated_mut()?.shrink_isr(partition)?;
                self.witness(Witness::IsrShrunk);
                Ok(())
            }
            Action::FailLeader { partition } => {
                self.replicated_mut()?.fail_leader(partition)?;
                self.witness(Witness::LeaderFailed);
                Ok(())
            }
            Action::ProduceOutput { group, owner, partition, offset } => {
                self.owner_step(group, owner, Kind::ProduceOutput, partition, offset.into())
            }
            Action::CommitTxn { group, owner, partition, offset } => {
                self.owner_step(group, owner, Kind::CommitTxn, partition, offset.into())
            }
            Action::ReadOutput { partition } => {
                let entries = before.output.get(usize::from(partition)).map_or(&[][..], Vec::as_slice);
                let transactional = self.transactional.as_mut();
                let transactional =
                    transactional.ok_or(Error::Unsupported("a read of the output of a row without one"))?;
                transactional.read_output(partition, entries)
            }
            Action::SendEmail { group, owner, partition, offset } => {
                self.owner_step(group, owner, Kind::SendEmail, partition, offset.into())
            }
            Action::WriteIndex { group, owner, partition, offset } => {
                self.owner_step(group, owner, Kind::WriteIndex, partition, offset.into())
            }
            Action::Relay { group } => self.relay(group),
        }
    }

    /// The outbox's relay, one step (`consumer relay --once --group G`): the group's first
    /// outbox row copied to the index and deleted. The model enables it only on a row left in
    /// the outbox, so a relay finding none did not do the model's step.
    fn relay(&mut self, group: u8) -> Result<(), Error> {
        let relayed = match (&mut self.store, self.relay.as_mut()) {
            (StoreSide::Protocol { agent, .. }, _) => agent.relay(&group_name(group))?,
            (StoreSide::Direct(_), Some(relay)) => relay.relay_one(&group_name(group))?.is_some(),
            (StoreSide::Direct(_), None) => return Err(Error::Unsupported("a relay step of a row without an outbox")),
        };
        if relayed {
            Ok(())
        } else {
            Err(Error::Unsupported("a relay step on an empty outbox"))
        }
    }

    fn replicated_mut(&mut self) -> Result<&mut Replicated, Error> {
        self.replicated.as_mut().ok_or(Error::Unsupported("a replication step on a row with one plain log"))
    }

    /// The answer to the `acks=all` send in flight: acknowledged, or unacknowledged (to be
    /// retried), `NotEnoughReplicasAfterAppend` witnessed as the model does.
    fn acknowledge(&mut self, partition: u8) -> Result<(), Error> {
        match self.replicated_mut()?.acknowledge(partition)? {
            Answered::Acknowledged => {}
            Answered::Unacknowledged { send, refused } => {
                if refused {
                    self.witness(Witness::NotEnoughReplicas);
                }
                self.producer[usize::from(partition)].unacked = Some(send);
            }
        }
        Ok(())
    }

    /// The log of `partition` loses its records from `keep` on: the harness cuts the real file
    /// (fault injection), which needs the writer lock, so its writer closes and opens again
    /// after; a checked writer then finds the partition damaged, an unchecked one grows again.
    fn lose_tail(&mut self, partition: u8, keep: u8) -> Result<(), Error> {
        if self.replicated.is_some() {
            return Err(Error::Unsupported("a lost tail of a replicated log (its losses are elections)"));
        }
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
        let mut running =
            self.owners[g][usize::from(owner)].take().ok_or_else(|| not_running(group, owner_name(owner)))?;
        running.paused();
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
                self.after_kill()?;
                self.paused_of[g][paused] = None;
            }
        }
        Ok(())
    }

    /// The coordinator's rebalance: the store's claim, then the assignment to the new owner
    /// if it is running (the old owner is not told).
    /// The coordinator's move of a partition: the store's claim (a new epoch, the new owner),
    /// and the new owner, if running, told to take it.
    fn move_partition(&mut self, group: u8, partition: u8, to_owner: u8) -> Result<(), Error> {
        let (name, to) = (group_name(group), owner_name(to_owner));
        match &mut self.store {
            StoreSide::Direct(store) => {
                store.claim(&name, u32::from(partition), &to)?;
            }
            StoreSide::Protocol { agent, .. } => {
                agent.claim(&name, u32::from(partition), &to)?;
            }
        }
        // The coordinator's claim is not an owner's write: taken as durable (with all before
        // it, every owner step's own durability judged already) before the new owner's steps.
        self.assume_durable()?;
        if let Some(handle) = &mut self.owners[usize::from(group)][usize::from(to_owner)] {
            handle.assign(u32::from(partition))?;
        }
        Ok(())
    }

    /// The producer's steps, through the log's idempotent appends: each send gets the next
    /// sequence number; a retry repeats the lost one or takes a fresh one, as the row's
    /// `producer_retry` says (the log must then append nothing, or the record again).
    fn produce(&mut self, partition: u8, delta: i64, delivery: Delivery) -> Result<(), Error> {
        if self.replicated.is_some() {
            return self.produce_replicated(partition, delta, delivery);
        }
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

    /// The producer's steps on a replicated log (spec.md §3.2): a new send or the retry of the
    /// unacknowledged one goes to the leader (`replicated::Replicated::send`); a refused one
    /// (`NotEnoughReplicas`) is not consumed, as in the model. The ghost of the records is the
    /// consumer-visible log, followed by `observe`.
    fn produce_replicated(&mut self, partition: u8, delta: i64, delivery: Delivery) -> Result<(), Error> {
        let p = usize::from(partition);
        let send = match delivery {
            Delivery::Acknowledged | Delivery::AckLost => self.producer[p].sent,
            Delivery::Retry => {
                self.witness(Witness::AppendRetried);
                self.producer[p].unacked.ok_or(Error::NothingToRetry { partition })?
            }
        };
        let answered = delivery != Delivery::AckLost;
        match self.replicated_mut()?.send(partition, send, encode_delta(delta), answered)? {
            Sent::Appended => {}
            Sent::Refused => {
                self.witness(Witness::NotEnoughReplicas);
                return Ok(());
            }
        }
        let producer = &mut self.producer[p];
        match delivery {
            Delivery::Retry => producer.unacked = None,
            Delivery::Acknowledged => producer.sent += 1,
            Delivery::AckLost => {
                producer.sent += 1;
                producer.unacked = Some(send);
                self.ack_losses_used += 1;
            }
        }
        Ok(())
    }

    fn fresh_sequence(&mut self, partition: usize) -> u32 {
        let sequence = self.next_sequence[partition];
        self.next_sequence[partition] += 1;
        sequence
    }

    /// Protocol mode: after a kill the store is read by a fresh process of the store role, which
    /// cannot remember what the killed one did not make durable.
    fn after_kill(&mut self) -> Result<(), Error> {
        match &mut self.store {
            StoreSide::Direct(_) => Ok(()),
            StoreSide::Protocol { agent, .. } => agent.restart(),
        }
    }

    fn handle(&mut self, group: u8, owner: u8) -> Result<&mut Box<dyn OwnerHandle>, Error> {
        let name = self.slot_name(group, owner);
        self.owners[usize::from(group)][usize::from(owner)].as_mut().ok_or_else(|| not_running(group, name))
    }

    /// The owner a model slot runs as, spelled as spec.md §2.2 does: `o1`, or `o0'` for the
    /// earlier incarnation of o0 a paused slot holds.
    fn slot_name(&self, group: u8, owner: u8) -> String {
        let paused = self.paused_index(owner).and_then(|index| self.paused_of[usize::from(group)][index]);
        paused.map_or_else(|| owner_name(owner), |of| format!("{}'", owner_name(of)))
    }

    /// The position of a running owner's lease, which a `fail-out-of-range` step names.
    fn lease_position(&mut self, group: u8, owner: u8, partition: u8) -> Result<u64, Error> {
        let leases = self.handle(group, owner)?.leases()?;
        let lease = leases.get(&u32::from(partition)).ok_or_else(|| Error::NoLease {
            group: group_name(group),
            owner: self.slot_name(group, owner),
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
            // A commit the store took while the harness, as the coordinator, is forming the
            // group: the old generation's, still current.
            Outcome::Committed if self.forming[usize::from(group)][usize::from(partition)].is_some() => {
                self.witness(Witness::CommitWhileForming);
            }
            // What these did shows in the store, the leases, the provider's inbox and the index,
            // observed after the step (an email or an index write is no application: the
            // model's ghost counts the store's effect only).
            Outcome::Fetched { .. }
            | Outcome::Recorded
            | Outcome::Committed
            | Outcome::Produced { .. }
            | Outcome::Emailed { .. }
            | Outcome::Indexed { .. }
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

    /// The abstraction function: the real log, store and owners' reported leases (and the
    /// replicas, the output log and its reader, for the rows that have them) as a model
    /// `State`. Ghost history and witness bits are the harness's own observations.
    pub fn observe(&mut self) -> Result<State, Error> {
        let partitions = u32::from(self.config.partitions);
        let replicas = match &self.replicated {
            Some(replicated) => (0..partitions).map(|p| replicated.observe(p)).collect::<Result<Vec<_>, _>>()?,
            None => Vec::new(),
        };
        let (mut log, mut log_start, mut damaged) = (Vec::new(), Vec::new(), Vec::new());
        for partition in 0..partitions {
            let seen = match replicas.get(partition as usize) {
                Some(replicas) => self.observe_visible(partition, replicas)?,
                None => self.observe_plain(partition)?,
            };
            log.push(seen.deltas);
            log_start.push(seen.start);
            damaged.push(seen.damaged);
        }
        let (output, reader) = match &mut self.transactional {
            Some(transactional) => {
                let output = transactional.observe()?;
                if transactional.read_aborted(&output) {
                    self.ghosts[0].read_aborted = true;
                }
                (output, transactional.positions())
            }
            None => (Vec::new(), Vec::new()),
        };
        let mut groups = Vec::new();
        let stores = self.observe_stores()?;
        for (group, store) in (0..self.config.groups).zip(stores) {
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
            let (inbox, index) = self.observe_externals(group)?;
            let forming = self.forming[usize::from(group)].clone();
            groups.push(Group { store, inbox, index, owners, paused, forming, ghost });
        }
        let (leader_failures_used, isr_shrinks_used) =
            self.replicated.as_ref().map_or((0, 0), |r| (r.leader_failures_used, r.isr_shrinks_used));
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
            leader_failures_used,
            isr_shrinks_used,
            replicas,
            output,
            reader,
            damaged,
            witnessed: self.witnessed,
        })
    }

    /// A plain log's partition: its records (those below the retained start as the harness
    /// appended them), start and damage.
    fn observe_plain(&mut self, partition: u32) -> Result<PartitionSeen, Error> {
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
        for record in self.log.read_range(partition, start..end)? {
            deltas.push(self.delta_of(partition, &record)?);
        }
        let damaged = self.log.damaged(partition)?;
        Ok(PartitionSeen { deltas, start: narrow(start, "log start")?, damaged })
    }

    /// A replicated partition's consumer-visible log: what the harness's reader reads (the
    /// leader's records below the high watermark), its sends those of the leader's replica at
    /// the same offsets. The ghost follows it as `model::replication::sync_visible` defines it
    /// (`account_visible`). Without a leader nothing can be read, and the model keeps the last
    /// visible log: so does the harness. (A replicated log is never retained nor damaged here:
    /// the harness refuses both steps on one.)
    fn observe_visible(&mut self, partition: u32, replicas: &Replicas) -> Result<PartitionSeen, Error> {
        let p = partition as usize;
        let unchanged = PartitionSeen { deltas: self.appended[p].clone(), start: 0, damaged: false };
        let view = match self.log.view(partition) {
            Ok(view) => view,
            Err(error) if replicated::is_unavailable(&error) => return Ok(unchanged),
            Err(error) => return Err(error.into()),
        };
        let mut deltas = Vec::new();
        for record in self.log.read_range(partition, view.start..view.end)? {
            deltas.push(self.delta_of(partition, &record)?);
        }
        let leader = replicas.leader.map(usize::from);
        let visible = leader.and_then(|leader| replicas.logs[leader].get(..deltas.len()));
        let sends = visible.ok_or(Unobservable::Visible { partition, end: view.end })?.to_vec();
        model::replication::account_visible(self.ghosts.iter_mut(), p, &self.sends[p], &sends, self.config.delta);
        self.sends[p] = sends;
        self.appended[p] = deltas.clone();
        Ok(PartitionSeen { deltas, start: narrow(view.start, "log start")?, damaged: view.damage.is_some() })
    }

    /// The delta a record stands for. A poison record stands for the model's record at that
    /// offset, whose delta the model never applies.
    fn delta_of(&self, partition: u32, record: &consumer::log::Record) -> Result<i64, Unobservable> {
        match consumer::log::decode_delta(&record.payload) {
            Some(delta) => Ok(delta),
            None if record.payload == POISON_PAYLOAD => Ok(self.config.delta),
            None => Err(Unobservable::UnknownPayload { partition, offset: record.offset }),
        }
    }

    /// Every group's store, through the same abstraction as the open protocol's store role
    /// (`consumer::protocol::observe`): every row of the group, attempts included. With an
    /// observation spec, the consumer's database by its SQL (one copy for all groups), and the
    /// store role's report, where it gives one, compared with it.
    fn observe_stores(&mut self) -> Result<Vec<ModelStore>, Error> {
        let partitions = self.config.partitions;
        let names: Vec<String> = (0..self.config.groups).map(group_name).collect();
        let (agent, observes) = match &mut self.store {
            StoreSide::Direct(store) => {
                let read = |name: &String| Ok(model_store(consumer::protocol::observe(store, name)?, partitions)?);
                return names.iter().map(read).collect();
            }
            StoreSide::Protocol { agent, observes } => (agent, observes),
        };
        let Some(spec) = &self.options.observe else {
            return names.iter().map(|name| Ok(model_store(agent.observe(name)?, partitions)?)).collect();
        };
        let store_dir = self.launch.as_ref().map(|launch| launch.store.clone()).expect("a protocol store has a launch");
        let scratch = self.dir.path.join("observed");
        let held = spec.observe(&store_dir, &scratch, &names, self.config.strategy, u32::from(partitions))?;
        let held: Vec<ModelStore> =
            held.into_iter().map(|observed| model_store(observed, partitions)).collect::<Result<_, _>>()?;
        for (name, held) in names.iter().zip(&held) {
            if !*observes {
                break;
            }
            match agent.observe(name) {
                Ok(reported) => {
                    let reported = model_store(reported, partitions)?;
                    if reported != *held {
                        let (role, database) = store_differences(&reported, held);
                        return Err(Error::RoleDisagrees { group: name.clone(), role, database });
                    }
                }
                Err(Error::Protocol { source, .. }) if source.code() == Some(ErrorCode::NotSupported) => {
                    *observes = false;
                }
                Err(error) => return Err(error),
            }
        }
        Ok(held)
    }

    /// A group's records in the external systems: the provider's inbox, the times each record's
    /// email was delivered (a request dropped for its key is no delivery), and the index's facts.
    /// The model counts a delivery 0, 1 or "more than once" (2, saturating), so a count above
    /// 2 is observed as 2: the property `external-exactly-once` reads no more.
    fn observe_externals(&self, group: u8) -> Result<(Inbox, SortedSet<(u8, u8)>), Error> {
        let name = group_name(group);
        let mut inbox = SortedMap::new();
        for request in self.provider.received(Some(&name))?.into_iter().filter(|r| r.delivered) {
            let record = (narrow(request.partition, "partition")?, narrow(request.offset, "offset")?);
            let count: &mut u8 = inbox.get_or_insert(record, 0);
            *count = count.saturating_add(1).min(INBOX_COUNT_MAX);
        }
        let index = fact_set(self.index.facts(Some(&name))?)?;
        Ok((inbox, index))
    }

    fn observe_owner(&mut self, group: u8, owner: u8) -> Result<Owner, Error> {
        let partitions = usize::from(self.config.partitions);
        let name = self.slot_name(group, owner);
        let Some(handle) = &mut self.owners[usize::from(group)][usize::from(owner)] else {
            return Ok(Owner::free_slot(partitions));
        };
        let mut leases = vec![None; partitions];
        for (partition, lease) in handle.leases()? {
            let Some(slot) = leases.get_mut(partition as usize) else {
                let group = group_name(group);
                return Err(Unobservable::NoSuchPartition { group, owner: name, partition }.into());
            };
            *slot = Some(model_lease(&lease)?);
        }
        Ok(Owner { alive: true, leases, incarnation_of: None })
    }
}

/// An observed store (a protocol consumer's, or this consumer's read directly) as the model's:
/// a partition row missing or extra is unobservable (the model has exactly one per partition).
fn model_store(observed: consumer::protocol::Observed, partitions: u8) -> Result<ModelStore, Unobservable> {
    if observed.partitions.len() != usize::from(partitions) {
        return Err(Unobservable::PartitionRows { rows: observed.partitions.len(), partitions });
    }
    let mut rows = Vec::new();
    for row in &observed.partitions {
        rows.push(PartitionRow {
            next_offset: narrow(row.next_offset, "next offset")?,
            epoch: narrow(row.epoch, "epoch")?,
            owner: parse_owner(&row.owner)?,
            stamp: row.stamp.map(|stamp| narrow(stamp, "stamp")).transpose()?,
        });
    }
    let pair = |p: &consumer::protocol::Processed| Ok((narrow(p.partition, "partition")?, narrow(p.offset, "offset")?));
    let counted = |a: &consumer::protocol::Attempts| {
        Ok((narrow(a.partition, "partition")?, narrow(a.offset, "offset")?, narrow(a.attempts, "attempts")?))
    };
    let mut attempts = SortedMap::new();
    for a in &observed.attempts {
        let (partition, offset, count) = counted(a)?;
        attempts.insert((partition, offset), count);
    }
    let resets = observed
        .resets
        .iter()
        .map(|r| Ok((narrow(r.partition, "partition")?, narrow(r.from, "offset")?, narrow(r.to, "offset")?)));
    Ok(ModelStore {
        total: observed.total,
        partitions: rows,
        processed: observed.processed.iter().map(pair).collect::<Result<SortedSet<_>, Unobservable>>()?,
        attempts,
        dead_letters: observed.dead_letters.iter().map(counted).collect::<Result<SortedSet<_>, Unobservable>>()?,
        resets: resets.collect::<Result<SortedSet<_>, Unobservable>>()?,
        value: observed.value.map(|value| narrow(value, "value")).transpose()?,
        facts: observed.facts.iter().map(pair).collect::<Result<SortedSet<_>, Unobservable>>()?,
        outbox: observed.outbox.iter().map(pair).collect::<Result<SortedSet<_>, Unobservable>>()?,
    })
}

/// Where two stores of a group differ, in a few words each: (`total 5, p0 epoch 2`, `total
/// 10, p0 epoch 3`).
fn store_differences(one: &ModelStore, other: &ModelStore) -> (String, String) {
    let mut fields: Vec<(String, String, String)> = Vec::new();
    let mut field = |name: String, a: String, b: String| {
        if a != b {
            fields.push((name, a, b));
        }
    };
    field("total".into(), one.total.to_string(), other.total.to_string());
    for (p, (a, b)) in one.partitions.iter().zip(&other.partitions).enumerate() {
        field(format!("p{p} next offset"), a.next_offset.to_string(), b.next_offset.to_string());
        field(format!("p{p} epoch"), a.epoch.to_string(), b.epoch.to_string());
        field(format!("p{p} owner"), format!("o{}", a.owner), format!("o{}", b.owner));
        field(format!("p{p} stamp"), format!("{:?}", a.stamp), format!("{:?}", b.stamp));
    }
    field("processed".into(), format!("{:?}", one.processed), format!("{:?}", other.processed));
    field("attempts".into(), format!("{:?}", one.attempts), format!("{:?}", other.attempts));
    field("dead letters".into(), format!("{:?}", one.dead_letters), format!("{:?}", other.dead_letters));
    field("resets".into(), format!("{:?}", one.resets), format!("{:?}", other.resets));
    field("value".into(), format!("{:?}", one.value), format!("{:?}", other.value));
    field("facts".into(), format!("{:?}", one.facts), format!("{:?}", other.facts));
    field("outbox".into(), format!("{:?}", one.outbox), format!("{:?}", other.outbox));
    let side = |pick: fn(&(String, String, String)) -> &String| {
        fields.iter().map(|f| format!("{} {}", f.0, pick(f))).collect::<Vec<_>>().join(", ")
    };
    (side(|f| &f.1), side(|f| &f.2))
}

/// An owner's lease (in the protocol's terms: batch 1) as the model's.
fn model_lease(lease: &consumer::protocol::Lease) -> Result<Lease, Unobservable> {
    let mut records = SortedMap::new();
    for record in &lease.records {
        let stage = match record.stage {
            consumer::owner::Stage::Fetched => Stage::Fetched,
            consumer::owner::Stage::Committed => Stage::Committed,
            consumer::owner::Stage::EffectApplied => Stage::EffectApplied,
            consumer::owner::Stage::Recorded => Stage::Recorded,
            consumer::owner::Stage::Exhausted => Stage::Exhausted,
            consumer::owner::Stage::Produced => Stage::Produced,
            consumer::owner::Stage::Stored => Stage::Stored,
            consumer::owner::Stage::Emailed => Stage::Emailed,
        };
        records.insert(narrow(record.offset, "offset")?, stage);
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

/// A group's inbox as the model's: per (partition, offset), the times its email was delivered.
type Inbox = SortedMap<(u8, u8), u8>;

/// The model's count of a record's deliveries saturates here: "more than once" (spec.md §3.4).
const INBOX_COUNT_MAX: u8 = 2;

/// Facts (of the store, its outbox or the index) as the model's (partition, offset) pairs.
fn fact_set(facts: Vec<consumer::store::Fact>) -> Result<SortedSet<(u8, u8)>, Unobservable> {
    facts.into_iter().map(|fact| Ok((narrow(fact.partition, "partition")?, narrow(fact.offset, "offset")?))).collect()
}

/// One partition of the observed log: its records' deltas, its retained start, its damage.
struct PartitionSeen {
    deltas: Vec<i64>,
    start: u8,
    damaged: bool,
}

/// A group's or slot's index as the model numbers it (both are bounded far below 256).
fn narrow_index(index: usize) -> u8 {
    u8::try_from(index).expect("groups and owner slots are bounded below 256")
}

pub(crate) fn narrow<T: TryInto<u8> + Into<i128> + Copy>(value: T, what: &'static str) -> Result<u8, Unobservable> {
    value.try_into().map_err(|_| Unobservable::TooWide { what, value: value.into() })
}

fn parse_owner(name: &str) -> Result<u8, Unobservable> {
    name.strip_prefix('o')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| Unobservable::OwnerName { name: name.to_string() })
}

/// A fresh, uniquely named data directory (and PostgreSQL schema, when replaying against a
/// server), removed when dropped.
struct ScratchDir {
    path: PathBuf,
    /// The admin URL, the store's URL and the schema's name.
    database: Option<(String, String, String)>,
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

    /// Creates a schema named after the directory in the database behind `admin` and returns
    /// the store's URL: the admin URL whose connections search that schema only. A schema per
    /// replay, not a database: `CREATE DATABASE` copies a template and checkpoints, and made a
    /// corpus replay on PostgreSQL several times slower.
    fn create_schema(&mut self, admin: &str) -> Result<String, Error> {
        let name = self.path.file_name().and_then(|n| n.to_str()).expect("a plain name").replace('-', "_");
        let url = schema_url(admin, &name)?;
        let mut client = postgres::Client::connect(admin, postgres::NoTls).map_err(Error::PostgresConnect)?;
        let sql = format!("CREATE SCHEMA {name}");
        client.batch_execute(&sql).map_err(|source| Error::Postgres { sql, source })?;
        self.database = Some((admin.to_string(), url.clone(), name));
        Ok(url)
    }
}

/// `admin` with a connection option that makes `schema` the only schema searched (and the one
/// tables are created in): `postgres://auth/db?query&options=-csearch_path%3Dschema`.
fn schema_url(admin: &str, schema: &str) -> Result<String, Error> {
    if !admin.contains("://") {
        return Err(Error::PostgresUrl);
    }
    let separator = if admin.contains('?') { '&' } else { '?' };
    Ok(format!("{admin}{separator}options=-csearch_path%3D{schema}"))
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        if let Some((admin, _, name)) = &self.database {
            if let Ok(mut client) = postgres::Client::connect(admin, postgres::NoTls) {
                let _ = client.batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"));
            }
        }
    }
}
