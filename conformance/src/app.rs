//! `conformance kafka app`: a user's unmodified Kafka consumer application, run free on a
//! broker in this process and judged from its own database.
//!
//! The run, in order:
//! 1. the observation spec is read (`total`, and `applied` to name ids), the run directory
//!    made (`store/` for the application's database, `logs/` for every incarnation's output);
//! 2. a broker starts (nisshi-broker, in process), the topic is created, and the seeded plan
//!    (`schedule`) gives the records and the faults;
//! 3. the first chunk of records is produced and the instances start; the run waits until each
//!    is connected, the spec reads the database, and something was consumed (bad input
//!    otherwise, one line naming the instance and what it printed last);
//! 4. each fault, with the next chunk produced: a kill right after the instance's k-th write or
//!    sync under the store (the tracer, free-running), the instance started again after a
//!    drawn delay; or a rebalance (an instance added, or one removed: SIGKILLed and not started
//!    again, its partitions moving when its session times out);
//! 5. the drain: no more faults, until the group's committed offsets or the database have
//!    every record and stay unchanged for `SETTLE` (bounded by `--time`);
//! 6. every instance stopped and reaped, the database read once more, and judged (`judge`).
//!
//! Assumed, not tested: the application keeps its database under the store directory and
//! writes it with system calls (a write through a shared mapping counts at the next `msync`);
//! a kill is a SIGKILL, which keeps the page cache (power loss is another matter).

pub mod history;
pub mod instances;
pub mod judge;
mod postgres;
mod reruns;
pub mod schedule;
pub mod shrink;
pub mod windows;

use crate::killpoints::Strike;
use crate::observe::{self, AppObserved, ObserveError, ObserveSpec};
use instances::{Contract, Instance, Owners, StartError};
use judge::{Judgement, Kill, ProtocolStrike, Tried, Verdict};
use kafka_lane::broker::Broker;
use kafka_lane::client::Clients;
use kafka_lane::error::LaneError;
use kafka_lane::proxy::{ProtocolFault, Proxy};
use schedule::{Counts, Fault, Plan, Schedule};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// How long an armed kill waits for the instance's store calls before it is taken back.
const STRIKE_WAIT: Duration = Duration::from_secs(10);
/// How long the end state must stay unchanged to count as drained.
const SETTLE: Duration = Duration::from_secs(3);
/// How often the run looks at the store, the group and the instances.
const POLL: Duration = Duration::from_millis(100);
/// How long a zombie is held past four session timeouts waiting for its partitions to move.
const ZOMBIE_WAIT: Duration = Duration::from_secs(10);
/// How long a resumed zombie's writes are watched for before it syncs again.
const ZOMBIE_WATCH: Duration = Duration::from_secs(10);
/// How often the run looks for an instance connected to the broker around the proxy.
const DIRECT_CHECK: Duration = Duration::from_millis(250);
/// The bounds of the run's counts.
pub const RECORDS_MAX: u32 = 100_000;
pub const INSTANCES_MAX: u32 = 16;
pub const FAULTS_MAX: u32 = 1_000;

/// `conformance kafka app`'s options.
#[derive(clap::Args, Clone, Debug)]
pub struct AppArgs {
    /// The observation spec (TOML): how to read the group's total (`total`) and, to name each
    /// record skipped or applied twice, the ids applied in order (`applied`) from your database.
    #[arg(long, value_name = "FILE")]
    pub observe: PathBuf,
    /// Records produced, ids 1..=N, value `{"id":ID,"delta":D}`, key the id.
    #[arg(long, default_value_t = 300, value_parser = model::cli::count_in::<u32>(1, u64::from(RECORDS_MAX)))]
    pub records: u32,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 2, value_parser = model::cli::count_in::<u32>(1, 64))]
    pub partitions: u32,
    /// Instances of the command running at first (and at the drain).
    #[arg(long, default_value_t = 2, value_parser = model::cli::count_in::<u32>(1, u64::from(INSTANCES_MAX)))]
    pub instances: u32,
    /// SIGKILLs, each right after the instance's k-th write or sync under the store (k drawn).
    #[arg(long, default_value_t = 6, value_parser = model::cli::count_in::<u32>(0, u64::from(FAULTS_MAX)))]
    pub kills: u32,
    /// Rebalances by churn: instances added and removed (SIGKILL, not restarted), alternately.
    #[arg(long, default_value_t = 2, value_parser = model::cli::count_in::<u32>(0, u64::from(FAULTS_MAX)))]
    pub churn: u32,
    /// Protocol faults at an instance's OffsetCommit, the kinds in turn: killed when it arrives
    /// at the proxy, killed right after its response, its connection closed right after it went on.
    #[arg(long, default_value_t = 3, value_parser = model::cli::count_in::<u32>(0, u64::from(FAULTS_MAX)))]
    pub protocol_faults: u32,
    /// Zombies: an instance frozen (every thread) right after its k-th write or sync under the
    /// store, held until the protocol history shows its partitions assigned to another member,
    /// then resumed; its writes after that are named.
    #[arg(long, default_value_t = 2, value_parser = model::cli::count_in::<u32>(0, u64::from(FAULTS_MAX)))]
    pub zombies: u32,
    /// The seed of the plan: records' deltas and the faults (the processes' timing is theirs).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seconds the drain may take once the faults stop; past it the run is not established.
    #[arg(long, value_name = "SECONDS", default_value_t = 120, value_parser = model::cli::count_in::<u64>(1, 86_400))]
    pub time: u64,
    /// The group's session timeout given to the instances (ms): a killed instance's partitions
    /// move after it.
    #[arg(long, default_value_t = 2_000, value_parser = model::cli::count_in::<u32>(1_000, 60_000))]
    pub session_timeout_ms: u32,
    /// Seconds every instance has to connect to the broker, and then to apply or commit a first
    /// record (in a database the spec reads).
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = model::cli::count_in::<u64>(1, 3_600))]
    pub start_timeout: u64,
    /// The run's directory: the store (your database) and every incarnation's output; it must
    /// not exist or be empty (default: a new one under the temporary directory). Kept after
    /// the run, removed when the run is interrupted.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The topic the records go to (ONCEPROOF_TOPIC).
    #[arg(long, default_value = "onceproof-app")]
    pub topic: String,
    /// The consumer group the instances join (ONCEPROOF_GROUP).
    #[arg(long, default_value = "onceproof-app")]
    pub group: String,
    /// A PostgreSQL server (a postgres:// URL of a role that may CREATE DATABASE): the run
    /// creates a database of its own there, tells the instances its URL
    /// (ONCEPROOF_DATABASE_URL), and reads it with the spec's queries (`store = "postgres"`).
    /// Its writes go to the server, not to files: only the proxy's faults and churn are tried.
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
    /// Run this schedule file again instead of drawing one (the records, the instances at the
    /// start and the faults: a run's DIR/schedule.toml, or a shrink's DIR/shrunk.toml), `--runs`
    /// times, and say in how many the anomaly came back.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["records", "partitions", "instances", "kills", "churn", "protocol_faults", "zombies", "seed"])]
    pub schedule: Option<PathBuf>,
    /// With --schedule: how many times to run it (each in DIR/runs/N).
    #[arg(long, default_value_t = 3, requires = "schedule", value_parser = model::cli::count_in::<u32>(1, 100))]
    pub runs: u32,
    /// On an anomaly, at most this many smaller schedules are tried (each a run in
    /// DIR/shrink/N) to drop the faults it does not need; 0: no shrink.
    #[arg(long, default_value_t = 8, value_parser = model::cli::count_in::<u32>(0, 1_000))]
    pub shrink_candidates: u32,
    /// How many times a smaller schedule is run before it counts as not bringing the anomaly
    /// back (processes' timing differs from run to run).
    #[arg(long, default_value_t = 2, value_parser = model::cli::count_in::<u32>(1, 20))]
    pub shrink_tries: u32,
    /// Measurement only (scripts/kafka-app-bench.sh): the instances reach the broker itself,
    /// with no proxy, no protocol history, no protocol fault and no zombie.
    #[arg(long, hide = true)]
    pub without_proxy: bool,
    /// Your application: the program and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Whether a history event is an OffsetCommit request.
fn is_commit(event: &kafka_lane::proxy::Event) -> bool {
    matches!(&event.what, kafka_lane::proxy::What::Request { said: kafka_lane::proxy::wire::Said::Commit { .. }, .. })
}

/// Why a run stopped before its verdict.
#[derive(Debug)]
pub enum AppError {
    /// A command line, a directory or a spec the run cannot use.
    Usage(String),
    /// An instance that could not start, ended on its own, never connected or never consumed.
    Instance {
        instance: String,
        problem: String,
    },
    Observe(ObserveError),
    Lane(LaneError),
    Io {
        what: String,
        error: std::io::Error,
    },
    /// SIGINT or SIGTERM: every instance and the broker were stopped, the directory removed.
    Interrupted(i32),
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppError::Usage(text) => write!(f, "{text}"),
            AppError::Instance { instance, problem } => write!(f, "instance {instance}: {problem}"),
            AppError::Observe(error) => write!(f, "{error}"),
            AppError::Lane(error) => write!(f, "{error}"),
            AppError::Io { what, error } => write!(f, "{what}: {error}"),
            AppError::Interrupted(signal) => write!(f, "interrupted by signal {signal}"),
        }
    }
}

impl std::error::Error for AppError {}

impl From<LaneError> for AppError {
    fn from(error: LaneError) -> AppError {
        AppError::Lane(error)
    }
}

impl From<ObserveError> for AppError {
    fn from(error: ObserveError) -> AppError {
        AppError::Observe(error)
    }
}

impl From<StartError> for AppError {
    fn from(error: StartError) -> AppError {
        let problem = format!("cannot start '{}': {}", error.program, error.error);
        AppError::Instance { instance: error.instance, problem }
    }
}

/// The signal that interrupted the run (0: none), set by the handler `catch_interrupts` installs.
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    INTERRUPTED.store(signal, Ordering::SeqCst);
}

/// Makes SIGINT and SIGTERM stop the run at its next look (`POLL`) instead of killing this
/// process with the instances and the broker left to the kernel.
pub fn catch_interrupts() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(signal, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t);
        }
    }
}

fn check_interrupt() -> Result<(), AppError> {
    match INTERRUPTED.load(Ordering::SeqCst) {
        0 => Ok(()),
        signal => Err(AppError::Interrupted(signal)),
    }
}

/// Sleeps `wait`, looking for an interrupt every `POLL`.
fn pause(wait: Duration) -> Result<(), AppError> {
    let started = Instant::now();
    while started.elapsed() < wait {
        check_interrupt()?;
        std::thread::sleep(POLL.min(wait.saturating_sub(started.elapsed())));
    }
    check_interrupt()
}

/// One incarnation of an instance, and where its output is.
#[derive(Clone, Debug)]
pub struct Started {
    pub label: String,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
}

/// The run's outcome: the verdict, the anomalies' kinds, what was tried, where things are.
pub struct AppReport {
    pub verdict: Verdict,
    pub kinds: Vec<judge::Anomaly>,
    pub tried: Tried,
    pub dir: PathBuf,
    pub started: Vec<Started>,
    /// How the verdict was reached: by the ids applied, or by the total alone.
    pub by_id: bool,
    pub timing: Timing,
    /// What the protocol history showed: its counts, and the broker's own doings.
    pub history: Vec<String>,
    /// The windows: struck, reachable or not.
    pub windows: Vec<String>,
    /// What a shrink or a schedule's runs found.
    pub afterword: Vec<String>,
}

/// How long the run took, and how long its instances took to have every record applied or
/// committed (from the first instance's start to the drain's end state, faults included).
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub run_s: f64,
    pub consumed_s: Option<f64>,
}

impl AppReport {
    /// The report's closing lines: the anomalies, the model's row for each kind, what was
    /// tried, where the outputs are, and the verdict last.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Verdict::Anomaly(found) = &self.verdict {
            lines.extend(found.iter().cloned());
            for kind in &self.kinds {
                let (row, why) = kind.row();
                lines.push(format!(
                    "the model has this anomaly as a counterexample in row {row} ({why}): model check --strategy {row}"
                ));
            }
        }
        lines.extend(self.history.iter().cloned());
        lines.extend(judge::tried_lines(&self.tried));
        lines.extend(self.windows.iter().cloned());
        lines.extend(self.afterword.iter().cloned());
        let logs = self.dir.join("logs");
        lines.push(format!(
            "output: {} incarnations, each in {}/NAME.INCARNATION.out and .err (first {}, last {})",
            self.started.len(),
            logs.display(),
            self.started.first().map_or("-", |s| s.label.as_str()),
            self.started.last().map_or("-", |s| s.label.as_str()),
        ));
        lines.push(match self.timing.consumed_s {
            Some(seconds) => format!(
                "timing: every record applied or committed {seconds:.1} s after the first instance started ({:.0} records/s, faults included); the run took {:.1} s",
                self.tried.records as f64 / seconds.max(0.001),
                self.timing.run_s
            ),
            None => format!("timing: the run took {:.1} s; the drain did not finish", self.timing.run_s),
        });
        let how = if self.by_id { "by id" } else { "by total (the spec reads no ids)" };
        let records = self.tried.records;
        lines.push(match &self.verdict {
            Verdict::NoAnomaly => format!("NO ANOMALY: each of the {records} records applied exactly once, {how}"),
            Verdict::Anomaly(_) => {
                format!("ANOMALY: not every one of the {records} records applied exactly once, {how}")
            }
            Verdict::NotEstablished(why) => format!("NOT ESTABLISHED: {why}"),
        });
        lines
    }
}

/// The run's state: the broker, the client, the instances running and the counts.
struct Run<'a> {
    args: &'a AppArgs,
    spec: ObserveSpec,
    contract: Contract,
    logs: PathBuf,
    scratch: PathBuf,
    clients: Option<Clients>,
    broker: Option<Broker>,
    /// Between every instance and the broker; its kill callback reads `owners`.
    proxy: Option<Proxy>,
    owners: Owners,
    /// Instances seen connected to the broker itself, not through the proxy, and when the run
    /// last looked.
    direct: Vec<String>,
    direct_checked: Option<Instant>,
    /// Labels the proxy killed, not yet matched with their strike.
    proxy_killed: Vec<String>,
    /// The protocol history judged, once the run is over, and its partitions' moves.
    history: history::Findings,
    moves: history::Moves,
    /// The most instances running at once, and the windows counted at the end.
    instances_max: u32,
    windows: Vec<windows::Window>,
    running: Vec<Instance>,
    /// Every incarnation's name and output files, for the report.
    started: Vec<Started>,
    next_instance: u32,
    plan: Plan,
    tried: Tried,
    /// When the run began, when its first instance started, and when the drain's end state
    /// was first reached (the last change before it settled).
    began: Instant,
    first_start: Option<Instant>,
    settled: Option<Instant>,
    say: &'a mut dyn FnMut(&str) -> std::io::Result<()>,
}

/// Runs `args.command`'s instances and judges their database. Progress lines go to `say`.
pub fn run(args: &AppArgs, say: &mut dyn FnMut(&str) -> std::io::Result<()>) -> Result<AppReport, AppError> {
    let spec = ObserveSpec::load(&args.observe)?;
    spec.require_app()?;
    let mut command = std::process::Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    if crate::protocol::missing_program(&command).is_some() {
        let problem = instances::StartProblem::NotFound;
        return Err(AppError::Instance {
            instance: "app-1 (incarnation 1)".into(),
            problem: format!("cannot start '{}': {problem}", args.command[0]),
        });
    }
    crate::killpoints::supported().map_err(|error| AppError::Usage(format!("kill points: {error}")))?;
    match (spec.store, &args.postgres) {
        (observe::Store::Sqlite, None) | (observe::Store::Postgres, Some(_)) => {}
        (observe::Store::Sqlite, Some(_)) => {
            let problem = format!(
                "--postgres: the spec {} reads a SQLite file (give it store = \"postgres\")",
                args.observe.display()
            );
            return Err(AppError::Usage(problem));
        }
        (observe::Store::Postgres, None) => {
            let problem = format!(
                "the spec {} reads a PostgreSQL store: give the server with --postgres URL",
                args.observe.display()
            );
            return Err(AppError::Usage(problem));
        }
    }
    if args.without_proxy && (args.protocol_faults > 0 || args.zombies > 0) {
        let problem =
            "--without-proxy: protocol faults and zombies need the proxy (give --protocol-faults 0 --zombies 0)";
        return Err(AppError::Usage(problem.to_string()));
    }
    let schedule = match &args.schedule {
        Some(path) => Schedule::load(path).map_err(AppError::Usage)?,
        None => drawn(args),
    };
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("onceproof-app-{}", std::process::id())),
    };
    prepare(&dir)?;
    let outcome = match args.schedule {
        None => reruns::run_and_shrink(args, &schedule, &dir, say),
        Some(_) => reruns::run_again(args, &schedule, &dir, say),
    };
    if let Err(AppError::Interrupted(_)) = outcome {
        let _ = std::fs::remove_dir_all(&dir);
    }
    outcome
}

/// The schedule the options draw from their seed.
fn drawn(args: &AppArgs) -> Schedule {
    let counts = Counts { kills: args.kills, churn: args.churn, protocol: args.protocol_faults, zombies: args.zombies };
    let plan = schedule::plan(args.seed, args.records, args.partitions, counts);
    Schedule {
        version: schedule::SCHEDULE_VERSION,
        seed: args.seed,
        records: args.records,
        partitions: args.partitions,
        instances: args.instances,
        faults: plan.faults,
    }
}

/// Refuses a directory that holds anything; makes it and its parts.
pub(crate) fn prepare(dir: &Path) -> Result<(), AppError> {
    if let Ok(mut entries) = std::fs::read_dir(dir) {
        if entries.next().is_some() {
            return Err(AppError::Usage(format!(
                "--dir {}: not empty (a run's directory starts empty)",
                dir.display()
            )));
        }
    }
    for part in ["store", "logs", "scratch"] {
        std::fs::create_dir_all(dir.join(part))
            .map_err(|error| AppError::Io { what: format!("cannot make {}", dir.join(part).display()), error })?;
    }
    Ok(())
}

pub(crate) fn run_in(
    args: &AppArgs,
    spec: ObserveSpec,
    dir: &Path,
    plan: Plan,
    say: &mut dyn FnMut(&str) -> std::io::Result<()>,
) -> Result<AppReport, AppError> {
    let store = dir.join("store").canonicalize().map_err(|error| AppError::Io { what: "the store".into(), error })?;
    let broker = Broker::start("127.0.0.1:0".parse::<SocketAddr>().expect("a literal address"))?;
    let clients = Clients::connect(&broker.bootstrap())?;
    clients.create_topic(&args.topic, i32::try_from(args.partitions).expect("at most 64"))?;
    let owners = Owners::default();
    let proxy = match args.without_proxy {
        true => None,
        false => Some(
            Proxy::start(broker.address(), owners.hooks())
                .map_err(|error| AppError::Io { what: "the proxy's listener".into(), error })?,
        ),
    };
    let database = match &args.postgres {
        None => None,
        Some(url) => Some(postgres::create(url).map_err(AppError::Usage)?),
    };
    let contract = Contract {
        bootstrap: proxy.as_ref().map_or_else(|| broker.address(), Proxy::address).to_string(),
        topic: args.topic.clone(),
        group: args.group.clone(),
        session_timeout_ms: args.session_timeout_ms,
        heartbeat_interval_ms: args.session_timeout_ms / 5,
        store,
        database_url: database.as_ref().map(|database| database.url.clone()),
    };
    let tried = Tried { records: plan.records.len(), partitions: args.partitions, ..Tried::default() };
    let mut run = Run {
        args,
        spec,
        contract,
        logs: dir.join("logs"),
        scratch: dir.join("scratch"),
        clients: Some(clients),
        broker: Some(broker),
        proxy,
        owners,
        direct: Vec::new(),
        direct_checked: None,
        proxy_killed: Vec::new(),
        history: history::Findings::default(),
        moves: history::Moves::default(),
        instances_max: 0,
        windows: Vec::new(),
        running: Vec::new(),
        started: Vec::new(),
        next_instance: 1,
        plan,
        tried,
        began: Instant::now(),
        first_start: None,
        settled: None,
        say,
    };
    let outcome = run.go(dir);
    run.shut_down();
    let (verdict, kinds) = outcome?;
    let by_id = run.spec.has_applied();
    let timing = Timing {
        run_s: run.began.elapsed().as_secs_f64(),
        consumed_s: run.first_start.zip(run.settled).map(|(first, settled)| (settled - first).as_secs_f64()),
    };
    let mut history = vec![run.history.line(&dir.join("history.jsonl"))];
    if args.without_proxy {
        history = vec!["no proxy (--without-proxy): no protocol history".to_string()];
    } else if run.direct.is_empty() {
        history.push(format!(
            "no instance was seen connected to the broker around the proxy (looked every {} ms)",
            DIRECT_CHECK.as_millis()
        ));
    }
    history.extend(run.history.stale_accepted.iter().cloned());
    if !args.without_proxy {
        history.push(run.moves.line());
    }
    let started = run.started;
    let windows = windows::lines(&run.windows);
    let tried = run.tried;
    let dir = dir.to_path_buf();
    Ok(AppReport { verdict, kinds, tried, dir, started, by_id, timing, history, windows, afterword: Vec::new() })
}

impl Run<'_> {
    fn say(&mut self, line: String) -> Result<(), AppError> {
        (self.say)(&line).map_err(|error| AppError::Io { what: "cannot write to standard output".into(), error })
    }

    fn go(&mut self, dir: &Path) -> Result<(Verdict, Vec<judge::Anomaly>), AppError> {
        let broker = self.broker.as_ref().map_or_else(String::new, Broker::bootstrap);
        let line = format!(
            "broker at {broker} (nisshi-broker 0.6.0, in this process), the instances' bootstrap its proxy at {}; topic {} with {} partitions; group {}; run directory {}",
            self.contract.bootstrap,
            self.args.topic,
            self.args.partitions,
            self.args.group,
            dir.display()
        );
        self.say(line)?;
        if let Some(url) = &self.contract.database_url {
            self.say(format!("the store: a PostgreSQL database made for this run and kept after it, {url}"))?;
        }
        self.produce_chunk(0)?;
        for _ in 0..self.args.instances {
            self.add_instance(false)?;
        }
        self.tried.instances_first = self.args.instances;
        self.await_start()?;
        let faults = self.plan.faults.clone();
        for (index, fault) in faults.into_iter().enumerate() {
            self.restart_strays()?;
            match fault {
                Fault::Kill { .. } | Fault::Zombie { .. } if self.contract.database_url.is_some() => {
                    self.produce_chunk(index + 1)?;
                    self.tried.not_traced += 1;
                    self.say(format!(
                        "fault {}: not tried ({}): a PostgreSQL store's writes go to its server, not to files the tracer sees",
                        index + 1,
                        if matches!(fault, Fault::Kill { .. }) { "a kill at the store's writes" } else { "a zombie, frozen as it begins a transaction" }
                    ))?;
                    pause(Duration::from_secs(1))?;
                }
                Fault::Kill { after_calls, syncs_only, restart_ms } => {
                    self.kill(after_calls, syncs_only, restart_ms, index + 1)?;
                }
                Fault::Churn { add, pick, gap_ms } => {
                    self.produce_chunk(index + 1)?;
                    self.churn(add, pick, gap_ms)?;
                }
                Fault::Protocol { fault, restart_ms } => self.protocol_fault(fault, restart_ms, index + 1)?,
                Fault::Zombie { after_calls, syncs_only, transactions_passed } => {
                    self.zombie((after_calls, syncs_only, transactions_passed), index + 1)?;
                }
            }
        }
        self.restart_strays()?;
        while self.running.len() < self.args.instances as usize {
            self.add_instance(true)?;
        }
        let drained = self.drain()?;
        self.stop_all()?;
        let end = self.observe()?;
        let events = self.proxy.as_ref().map(Proxy::history).unwrap_or_default();
        self.history = history::judge(&events);
        self.moves = history::moves(&events);
        let path = dir.join("history.jsonl");
        history::write(&events, &path)
            .map_err(|error| AppError::Io { what: format!("cannot write {}", path.display()), error })?;
        if let Some(why) = drained {
            return Ok((Verdict::NotEstablished(why), Vec::new()));
        }
        let dropped = self.proxy.as_ref().map_or(0, Proxy::history_dropped);
        if dropped > 0 {
            let why = format!(
                "the protocol history reached its bound of {} events and left {dropped} out: judged from it, the run would miss them",
                kafka_lane::proxy::HISTORY_EVENTS_MAX
            );
            return Ok((Verdict::NotEstablished(why), Vec::new()));
        }
        if let Some(why) = self.proxy.as_ref().and_then(Proxy::broken) {
            let why = format!("the proxy could not forward a response as it must ({why}): the run is not judged");
            return Ok((Verdict::NotEstablished(why), Vec::new()));
        }
        if !self.direct.is_empty() {
            let why = format!(
                "{} connected to the broker around the proxy: the protocol history misses its requests",
                self.direct.join(", ")
            );
            return Ok((Verdict::NotEstablished(why), Vec::new()));
        }
        let Judgement { verdict, mut kinds } =
            judge::judge(&self.plan.records, end.total, end.applied.as_deref(), &self.tried.kills);
        let verdict = match verdict {
            Verdict::NoAnomaly if !self.history.backwards.is_empty() => {
                Verdict::Anomaly(self.history.backwards.clone())
            }
            Verdict::Anomaly(mut found) => {
                found.extend(self.history.backwards.iter().cloned());
                Verdict::Anomaly(found)
            }
            other => other,
        };
        if !self.history.backwards.is_empty() {
            kinds.push(judge::Anomaly::Backwards);
        }
        if kinds.contains(&judge::Anomaly::Duplicate) && self.tried.zombies.iter().any(judge::Zombie::wrote_as_zombie) {
            // Only zombies could have applied a record twice when no process was killed.
            let killed = !self.tried.kills.is_empty()
                || self.tried.protocol.iter().any(|strike| strike.fault != ProtocolFault::CloseAfterCommitSent);
            if !killed {
                kinds.retain(|kind| *kind != judge::Anomaly::Duplicate);
            }
            kinds.push(judge::Anomaly::ZombieWrite);
        }
        let seen = windows::Seen {
            commits: self.history.commits,
            syncs: self.owners.sync_calls(),
            instances_max: self.instances_max,
            proxied: self.proxy.is_some(),
            moved: self.moves.moved,
            moved_in_flight: self.moves.in_flight.len(),
        };
        self.windows = windows::count(&self.tried, seen);
        let unstruck = windows::unstruck(&self.windows);
        if verdict == Verdict::NoAnomaly && !unstruck.is_empty() {
            let why = format!(
                "no anomaly, but windows this application reaches were never struck ({}): its defence there is untested",
                unstruck.join("; ")
            );
            return Ok((Verdict::NotEstablished(why), kinds));
        }
        let tried_any =
            !self.tried.kills.is_empty() || !self.tried.protocol.is_empty() || !self.tried.zombies.is_empty();
        if !tried_any && verdict == Verdict::NoAnomaly {
            let why =
                "no kill struck between two of the store's writes and no protocol fault at a commit: nothing was tried"
                    .to_string();
            return Ok((Verdict::NotEstablished(why), kinds));
        }
        Ok((verdict, kinds))
    }

    fn clients(&mut self) -> &mut Clients {
        self.clients.as_mut().expect("the clients live until the run shuts down")
    }

    fn produce_chunk(&mut self, index: usize) -> Result<(), AppError> {
        let range = self.plan.chunks[index].clone();
        let records: Vec<(i32, String, String)> = self.plan.records[range]
            .iter()
            .map(|record| (i32::try_from(record.partition).expect("at most 64"), record.id.to_string(), record.value()))
            .collect();
        if records.is_empty() {
            return Ok(());
        }
        let topic = self.args.topic.clone();
        self.clients().produce_keyed(&topic, &records)?;
        Ok(())
    }

    /// Starts a new instance; `rebalance`: one added to a running group (counted as churn).
    fn add_instance(&mut self, rebalance: bool) -> Result<(), AppError> {
        let name = format!("app-{}", self.next_instance);
        self.next_instance += 1;
        self.start(&name, 1)?;
        if rebalance {
            self.tried.added += 1;
        }
        Ok(())
    }

    fn start(&mut self, name: &str, incarnation: u32) -> Result<(), AppError> {
        let instance = Instance::start(&self.args.command, &self.contract, name, incarnation, &self.logs)?;
        self.first_start.get_or_insert_with(Instant::now);
        let label = instance.label();
        self.owners.add(label.clone(), instance.killer());
        self.started.push(Started { label, stdout: instance.stdout.clone(), stderr: instance.stderr.clone() });
        self.tried.instances_started += 1;
        self.running.push(instance);
        self.instances_max = self.instances_max.max(u32::try_from(self.running.len()).unwrap_or(u32::MAX));
        Ok(())
    }

    /// Fails naming an instance that ended by itself (the contract: run until SIGTERM).
    fn check_instances(&mut self) -> Result<(), AppError> {
        check_interrupt()?;
        self.check_direct();
        // The ended ones first, then the proxy's kills: the proxy notes a kill before it
        // strikes, so every process its kill ended is among the labels taken after.
        let ended: Vec<usize> =
            (0..self.running.len()).filter(|&i| self.running[i].ended_on_its_own().is_some()).collect();
        for label in self.owners.take_killed() {
            if let Some(instance) = self.running.iter_mut().find(|instance| instance.label() == label) {
                instance.killed_by_proxy();
            }
            self.proxy_killed.push(label);
        }
        for index in ended {
            let instance = &mut self.running[index];
            if let Some(status) = instance.ended_on_its_own() {
                let problem =
                    format!("ended on its own ({status}), where it should run until stopped; {}", instance.last_line());
                return Err(AppError::Instance { instance: instance.label(), problem });
            }
        }
        Ok(())
    }

    /// Notes every instance connected to the broker's own port (every `DIRECT_CHECK` at most):
    /// the proxy rewrites every broker address it forwards, so one means a way around it.
    fn check_direct(&mut self) {
        if self.proxy.is_none() || self.direct_checked.is_some_and(|at| at.elapsed() < DIRECT_CHECK) {
            return;
        }
        self.direct_checked = Some(Instant::now());
        let port = self.broker.as_ref().map_or(0, |broker| broker.address().port());
        for instance in &self.running {
            if instance.connected_to(port) && !self.direct.contains(&instance.label()) {
                self.direct.push(instance.label());
            }
        }
    }

    /// Waits for every instance's connection, a database the spec reads, and a first record
    /// applied or committed.
    fn await_start(&mut self) -> Result<(), AppError> {
        let port = self.port();
        let wait = Duration::from_secs(self.args.start_timeout);
        let started = Instant::now();
        loop {
            self.check_instances()?;
            let waiting = self.running.iter().find(|instance| !instance.connected_to(port));
            match waiting {
                None => break,
                Some(instance) if started.elapsed() > wait => {
                    let problem = format!(
                        "never connected to the broker at {} in {} s; {}",
                        self.contract.bootstrap,
                        wait.as_secs(),
                        instance.last_line()
                    );
                    return Err(AppError::Instance { instance: instance.label(), problem });
                }
                Some(_) => std::thread::sleep(POLL),
            }
        }
        let started = Instant::now();
        loop {
            self.check_instances()?;
            let observed = self.read_store();
            let committed = self.committed()?;
            let consumed = match &observed {
                Ok(seen) => seen.total != 0 || seen.applied.as_ref().is_some_and(|ids| !ids.is_empty()),
                Err(_) => false,
            };
            if consumed || (observed.is_ok() && committed.iter().any(|next| next.is_some_and(|n| n > 0))) {
                let line = format!("{} instances connected and consuming", self.running.len());
                return self.say(line);
            }
            if started.elapsed() > wait {
                let database = self.spec.database_path(&self.contract.store);
                let (instance, last) =
                    self.running.first().map_or_else(Default::default, |first| (first.label(), first.last_line()));
                return Err(match observed {
                    Err(_) if self.contract.database_url.is_none() && !database.exists() => {
                        let problem = format!(
                            "never consumed: its database {} was never created in {} s; {last}",
                            database.display(),
                            wait.as_secs()
                        );
                        AppError::Instance { instance, problem }
                    }
                    Err(error) => AppError::Observe(error),
                    Ok(_) => {
                        let problem = format!(
                            "never consumed: no record applied in its database and no offset committed in {} s; {last}",
                            wait.as_secs()
                        );
                        AppError::Instance { instance, problem }
                    }
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// The group's committed next offset per partition.
    fn committed(&mut self) -> Result<Vec<Option<u64>>, AppError> {
        let (topic, group) = (self.args.topic.clone(), self.args.group.clone());
        (0..self.args.partitions)
            .map(|partition| {
                let partition = i32::try_from(partition).expect("at most 64");
                self.clients().committed(&topic, &group, partition).map_err(AppError::from)
            })
            .collect()
    }

    fn observe(&self) -> Result<AppObserved, AppError> {
        Ok(self.read_store()?)
    }

    /// The application's store read with the spec's queries: a copy of the SQLite files, or
    /// the run's PostgreSQL database.
    fn read_store(&self) -> Result<AppObserved, ObserveError> {
        match &self.contract.database_url {
            None => self.spec.observe_app(&self.contract.store, &self.scratch, &self.args.group),
            Some(url) => self.spec.observe_app_postgres(url, &self.args.group),
        }
    }

    /// One kill: armed on every instance connected to the broker (each past its start), the
    /// chunk produced, and the first to reach its `after_calls`-th store call (or sync) is
    /// killed; the others are disarmed (one that struck at the same moment is killed too).
    /// Each killed instance is started again after `restart_ms`.
    fn kill(&mut self, after_calls: u64, syncs_only: bool, restart_ms: u64, chunk: usize) -> Result<(), AppError> {
        let port = self.port();
        let mut armed: Vec<usize> = (0..self.running.len()).filter(|&i| self.running[i].connected_to(port)).collect();
        if armed.is_empty() {
            armed = (0..self.running.len()).collect();
        }
        for &index in &armed {
            self.running[index].arm(after_calls, syncs_only);
        }
        self.produce_chunk(chunk)?;
        let started = Instant::now();
        let mut struck: Vec<(usize, Strike)> = Vec::new();
        while struck.is_empty() && started.elapsed() <= STRIKE_WAIT {
            self.check_instances()?;
            struck = armed.iter().filter_map(|&index| self.running[index].struck().map(|s| (index, s))).collect();
            std::thread::sleep(Duration::from_millis(5));
        }
        for &index in &armed {
            if !self.running[index].disarm() && !struck.iter().any(|(i, _)| *i == index) {
                if let Some(strike) = self.running[index].struck() {
                    struck.push((index, strike));
                }
            }
        }
        if struck.is_empty() {
            self.tried.kills_missed += 1;
            let counted = if syncs_only { "syncs" } else { "writes or syncs" };
            let line = format!(
                "a kill armed on {} after {after_calls} {counted} under the store did not strike in {} s (too few writes)",
                if armed.len() == 1 { "1 instance".to_string() } else { format!("{} instances", armed.len()) },
                STRIKE_WAIT.as_secs()
            );
            return self.say(line);
        }
        struck.sort_by_key(|(index, _)| std::cmp::Reverse(*index));
        let mut killed = Vec::new();
        for (index, strike) in struck {
            let instance = self.running.remove(index);
            instance.wait_ended(instances::STOP_WAIT);
            killed.push((instance, strike));
        }
        let seen = self.observe().ok();
        let committed = self.committed()?;
        for (instance, strike) in &killed {
            let kill = Kill {
                instance: instance.name.clone(),
                incarnation: instance.incarnation,
                strike: strike.clone(),
                applied_rows: seen.as_ref().and_then(|seen| seen.applied.as_ref().map(Vec::len)),
                applied_ids: seen.as_ref().and_then(|seen| {
                    seen.applied.as_ref().map(|ids| ids.iter().collect::<std::collections::BTreeSet<_>>().len())
                }),
                committed: committed.clone(),
            };
            let line = format!("kill {}: {} {}", self.tried.kills.len() + 1, instance.label(), kill.strike);
            self.tried.kills.push(kill);
            self.say(line)?;
        }
        pause(Duration::from_millis(restart_ms))?;
        for (instance, _) in killed {
            self.start(&instance.name, instance.incarnation + 1)?;
            self.tried.restarts += 1;
        }
        Ok(())
    }

    /// One protocol fault: armed on the proxy, the chunk produced, struck at the next
    /// OffsetCommit of any instance; a killed instance is started again after `restart_ms`.
    fn protocol_fault(&mut self, fault: ProtocolFault, restart_ms: u64, chunk: usize) -> Result<(), AppError> {
        let running_s = self.first_start.map_or(0, |first| first.elapsed().as_secs());
        let commits = self.proxy().history().iter().filter(|event| is_commit(event)).count();
        if commits == 0 && running_s >= STRIKE_WAIT.as_secs() {
            // An application that keeps its offsets elsewhere sends none: the fault's window
            // is not reachable, and waiting for it would only slow the run.
            self.tried.protocol_missed += 1;
            self.produce_chunk(chunk)?;
            let line = format!(
                "a protocol fault ({}) not tried: no OffsetCommit in the {running_s} s the instances ran (the application commits no offsets to the group)",
                judge::fault_name(fault)
            );
            return self.say(line);
        }
        self.proxy().arm(fault);
        self.produce_chunk(chunk)?;
        let started = Instant::now();
        let mut strike = None;
        while strike.is_none() && started.elapsed() <= STRIKE_WAIT {
            self.check_instances()?;
            strike = self.proxy().struck();
            std::thread::sleep(Duration::from_millis(5));
        }
        if strike.is_none() && !self.proxy().disarm() {
            // Taken by a commit whose response is still on its way (the kill after it).
            let taken = Instant::now();
            while strike.is_none() && taken.elapsed() <= STRIKE_WAIT {
                self.check_instances()?;
                strike = self.proxy().struck();
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let Some(strike) = strike else {
            self.tried.protocol_missed += 1;
            let line = format!(
                "a protocol fault ({}) met no OffsetCommit in {} s",
                judge::fault_name(fault),
                STRIKE_WAIT.as_secs()
            );
            return self.say(line);
        };
        self.check_instances()?;
        let label = strike.owner.clone().unwrap_or_else(|| format!("the client on port {}", strike.peer_port));
        let killed = match fault {
            ProtocolFault::KillAtCommit | ProtocolFault::KillAfterCommitAnswer => {
                self.proxy_killed.retain(|killed| *killed != label);
                let index = self.running.iter().position(|instance| instance.label() == label);
                index.map(|index| self.running.remove(index))
            }
            ProtocolFault::CloseAfterCommitSent => None,
        };
        if let Some(instance) = &killed {
            instance.wait_ended(instances::STOP_WAIT);
        }
        let committed = self.committed()?;
        let line = format!("protocol fault {}: {label} {}", self.tried.protocol.len() + 1, fault.describe());
        let at_ms = strike.at_ms;
        self.tried.protocol.push(ProtocolStrike { fault, instance: label, at_ms, committed });
        self.say(line)?;
        if let Some(instance) = killed {
            pause(Duration::from_millis(restart_ms))?;
            self.start(&instance.name, instance.incarnation + 1)?;
            self.tried.restarts += 1;
        }
        Ok(())
    }

    /// One zombie: a freeze armed on every instance connected to the proxy, the chunk
    /// produced; the first to reach its `after_calls`-th store call (or sync) is frozen, every
    /// thread held, until the protocol history shows one of its partitions synced to another
    /// member in a newer generation (at most `ZOMBIE_WAIT`); then it is resumed and its writes
    /// under the store are watched until it syncs again (at most `ZOMBIE_WATCH`).
    fn zombie(
        &mut self,
        (after_calls, syncs_only, transactions_passed): (u64, bool, u64),
        chunk: usize,
    ) -> Result<(), AppError> {
        let port = self.port();
        let armed: Vec<usize> = (0..self.running.len()).filter(|&i| self.running[i].connected_to(port)).collect();
        for &index in &armed {
            self.running[index].arm_freeze(after_calls, syncs_only, transactions_passed);
        }
        self.produce_chunk(chunk)?;
        let started = Instant::now();
        let mut frozen = None;
        while frozen.is_none() && started.elapsed() <= STRIKE_WAIT {
            self.check_instances()?;
            frozen = armed.iter().copied().find(|&index| self.running[index].frozen());
            std::thread::sleep(Duration::from_millis(5));
        }
        for &index in &armed {
            if !self.running[index].disarm() && Some(index) != frozen && self.running[index].frozen() {
                self.running[index].thaw(); // froze at the same moment: let it go, one zombie at a time
            }
        }
        let Some(index) = frozen.or_else(|| armed.iter().copied().find(|&index| self.running[index].frozen())) else {
            self.tried.zombies_missed += 1;
            let line =
                format!("a zombie armed after {after_calls} store calls did not strike in {} s", STRIKE_WAIT.as_secs());
            return self.say(line);
        };
        let label = self.running[index].label();
        let strike = self.running[index].freeze_strike().expect("a frozen instance struck");
        let frozen_ms = self.proxy().now_ms();
        let holding = history::membership(&self.proxy().history(), &label).unwrap_or_default();
        let passed = match transactions_passed {
            0 => String::new(),
            1 => " and 1 transaction begun".to_string(),
            begun => format!(" and {begun} transactions begun"),
        };
        self.say(format!(
            "zombie {}: {label} frozen {strike}{passed}, held until its partitions move",
            self.tried.zombies.len() + 1
        ))?;
        let wait = Duration::from_millis(u64::from(self.args.session_timeout_ms) * 4) + ZOMBIE_WAIT;
        let waited = Instant::now();
        let mut reassigned = None;
        while reassigned.is_none() && waited.elapsed() <= wait {
            self.check_instances()?;
            reassigned = history::reassigned(&self.proxy().history(), &label, &holding);
            std::thread::sleep(POLL);
        }
        self.running[index].watch_store_calls();
        self.running[index].thaw();
        let resumed_ms = self.proxy().now_ms();
        let watched = Instant::now();
        let mut rejoined_ms = None;
        while rejoined_ms.is_none() && watched.elapsed() <= ZOMBIE_WATCH {
            self.check_instances()?;
            rejoined_ms = history::rejoined(&self.proxy().history(), &label, resumed_ms);
            std::thread::sleep(POLL);
        }
        // Each write's time on the history's clock; those before it synced again are a
        // zombie's (after, it is a member again).
        let now_ms = self.proxy().now_ms();
        let writes: Vec<u64> = (self.running[index].take_watched().iter())
            .map(|at| now_ms.saturating_sub(u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX)))
            .filter(|ms| rejoined_ms.is_none_or(|rejoined| *ms < rejoined))
            .collect();
        let (writes_after, first_write_ms) = (writes.len() as u64, writes.first().copied());
        let zombie = judge::Zombie {
            instance: label,
            strike,
            frozen_ms,
            holding: holding.partitions,
            reassigned,
            resumed_ms,
            writes_after,
            first_write_ms,
            rejoined_ms,
        };
        let line = format!("zombie {}: {}", self.tried.zombies.len() + 1, zombie.outcome());
        self.tried.zombies.push(zombie);
        self.say(line)
    }

    /// Starts again an instance the proxy killed after its fault's wait ended (its commit's
    /// response came back later than the wait): counted as a restart, not as a fault.
    fn restart_strays(&mut self) -> Result<(), AppError> {
        self.check_instances()?;
        for label in std::mem::take(&mut self.proxy_killed) {
            let Some(index) = self.running.iter().position(|instance| instance.label() == label) else { continue };
            let instance = self.running.remove(index);
            instance.wait_ended(instances::STOP_WAIT);
            self.say(format!("{label} was killed by the proxy after its fault's wait; started again"))?;
            self.start(&instance.name, instance.incarnation + 1)?;
            self.tried.restarts += 1;
        }
        Ok(())
    }

    fn proxy(&self) -> &Proxy {
        self.proxy.as_ref().expect("the proxy lives until the run shuts down")
    }

    /// The broker's port, to find the instances' connections.
    fn port(&self) -> u16 {
        self.contract.bootstrap.rsplit_once(':').and_then(|(_, port)| port.parse().ok()).unwrap_or(0)
    }

    fn churn(&mut self, add: bool, pick: u64, gap_ms: u64) -> Result<(), AppError> {
        if add || self.running.len() <= 1 {
            self.add_instance(true)?;
            let line = format!("rebalance: {} added", self.running.last().expect("just added").label());
            self.say(line)?;
        } else {
            // Removed with SIGKILL, not SIGTERM: nisshi-broker 0.6.0 strands a group whose leader
            // leaves (LeaveGroup) while the group forms (it keeps the departed member as leader,
            // and the group never forms again), while a member whose session ends is evicted
            // with its leadership. The polite leave is left for the run's end.
            let index = usize::try_from(pick % self.running.len() as u64).expect("an index");
            let mut instance = self.running.remove(index);
            instance.kill();
            self.tried.removed += 1;
            self.say(format!("rebalance: {} removed (SIGKILL, not started again)", instance.label()))?;
        }
        pause(Duration::from_millis(gap_ms))
    }

    /// Waits until every record is committed or in the database and the state stays put for
    /// `SETTLE`; returns why not when `--time` runs out.
    fn drain(&mut self) -> Result<Option<String>, AppError> {
        let ends = self.log_ends();
        let expected: i64 = self.plan.records.iter().map(|record| record.delta).sum();
        let started = Instant::now();
        let mut last: Option<(AppObserved, Vec<Option<u64>>)> = None;
        let mut steady_since = Instant::now();
        loop {
            self.check_instances()?;
            let seen = self.observe().ok();
            let committed = self.committed()?;
            let all_committed = committed.iter().zip(&ends).all(|(next, end)| *next == Some(*end));
            let complete = seen.as_ref().is_some_and(|seen| match &seen.applied {
                Some(ids) => {
                    let distinct: std::collections::BTreeSet<&i64> = ids.iter().collect();
                    distinct.len() >= self.plan.records.len()
                }
                None => seen.total == expected,
            });
            let now = seen.map(|seen| (seen, committed.clone()));
            if now != last {
                steady_since = Instant::now();
                last = now;
            }
            if (all_committed || complete) && steady_since.elapsed() >= SETTLE {
                self.settled = Some(steady_since);
                let line = format!("drained in {:.1} s", started.elapsed().as_secs_f64());
                self.say(line)?;
                return Ok(None);
            }
            if started.elapsed() > Duration::from_secs(self.args.time) {
                let committed_text: Vec<String> = committed
                    .iter()
                    .zip(&ends)
                    .enumerate()
                    .map(|(p, (next, end))| format!("{p}:{}/{end}", next.map_or("-".to_string(), |n| n.to_string())))
                    .collect();
                return Ok(Some(format!(
                    "the drain did not finish in {} s: the group committed {} (next/end per partition), and the database {}",
                    self.args.time,
                    committed_text.join(" "),
                    if complete { "has every record but kept changing" } else { "lacks records" }
                )));
            }
            std::thread::sleep(POLL * 2);
        }
    }

    /// Each partition's end offset: how many records it was given.
    fn log_ends(&self) -> Vec<u64> {
        (0..self.args.partitions)
            .map(|partition| self.plan.records.iter().filter(|record| record.partition == partition).count() as u64)
            .collect()
    }

    fn stop_all(&mut self) -> Result<(), AppError> {
        while let Some(mut instance) = self.running.pop() {
            instance.stop();
        }
        Ok(())
    }

    /// Kills what still runs and stops the broker; the client is leaked (librdkafka's shutdown
    /// can hang, docs/kafka-lane.md).
    fn shut_down(&mut self) {
        for instance in &mut self.running {
            instance.kill();
        }
        self.running.clear();
        if let Some(mut proxy) = self.proxy.take() {
            proxy.stop();
        }
        if let Some(clients) = self.clients.take() {
            clients.leak();
        }
        if let Some(broker) = self.broker.take() {
            let _ = broker.stop();
        }
    }
}
