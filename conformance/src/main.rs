//! The `conformance` command line: replay trace files, generate and replay model paths,
//! regenerate the corpus, and (hidden) serve the consumer's worker mode for child processes.

#[macro_use]
mod out;
mod document;

use anyhow::bail;
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use conformance::batch::{self, Generated};
use conformance::corpus;
use conformance::driver::{self, Mode};
use conformance::harness::Options;
use conformance::replay::{replay_shared, CopyCache, Inside};
use consumer::crash::CrashPlan;
use consumer::log::{Log, LogError};
use consumer::owner::{Mutation, Owner, OwnerError, Settings};
use consumer::store::{Store, StoreOptions};
pub(crate) use model::cli::count_in;
use model::cli::{budget_in, count_not_any, count_of, GROWS_THE_LOG, MOVES_THE_START, NOT_LIFTED};
use model::config::{defaults, Budget, Lifted};
use model::trace::Trace;
use model::{Config, Strategy};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "conformance",
    version,
    about = "Replays model traces against the real consumer, step by step.",
    after_help = "Example:\n  conformance test --strategy atomic --depth 4 --mode in-process"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay trace files (or directories of them) against fresh real systems.
    #[command(
        after_help = "Example:\n  conformance replay --worker 'python3 examples/python/atomic_fenced.py' --strategy atomic-fenced tests/traces"
    )]
    Replay(ReplayArgs),
    /// Generate model paths (to a depth, or seeded random walks) and replay each.
    #[command(
        after_help = "Example:\n  conformance test --strategy dedup-separate --walks 100 --seed 42 --mode in-process"
    )]
    Test(TestArgs),
    /// Rewrite a corpus directory: the default check's counterexamples and the scenarios.
    #[command(after_help = "Example:\n  conformance regenerate /tmp/traces")]
    Regenerate(RegenerateArgs),
    /// Keep traces as regression tests in the corpus's kept traces (tests/traces/kept/), which
    /// `replay tests/traces` and `cargo test` replay in every mode and `regenerate` never
    /// touches.
    #[command(after_help = "Example:\n  conformance keep /tmp/found/atomic-fenced--path-0.json --name zombie-lands")]
    Keep(KeepArgs),
    /// Serve one owner over stdin/stdout (the consumer's worker mode), for process replays.
    #[command(
        hide = true,
        after_help = "Example:\n  conformance worker --dir /tmp/demo --group g --owner o0 --strategy atomic-fenced"
    )]
    Worker(WorkerArgs),
    /// Trace this consumer's worker processes and check every kill point inside a step against
    /// the named crash points around it (maintainers: docs/inside-step.md).
    #[command(hide = true, after_help = "Example:\n  conformance cross-check tests/traces")]
    CrossCheck(CrossCheckArgs),
    /// Serve the open owner protocol (PROTOCOL.md) on stdin/stdout: this consumer, for
    /// `--mode protocol` without `--worker`.
    #[command(hide = true, after_help = "Example:\n  conformance serve < requests.ndjson")]
    Serve,
    /// Print the shell completion script of `conformance` (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Example:\n  conformance completions bash > ~/.local/share/bash-completion/completions/conformance"
    )]
    Completions(clidocs::CompletionsArgs),
    /// Write the man pages of `conformance` and of each of its commands into a directory.
    #[command(after_help = "Example:\n  conformance man ~/.local/share/man/man1")]
    Man(clidocs::ManArgs),
    /// The Kafka-protocol lane (built with `--features kafka`): traces replayed on an
    /// in-process broker through a real Kafka client.
    #[cfg(feature = "kafka")]
    #[command(subcommand, after_help = "Example:\n  conformance kafka replay tests/traces/kafka")]
    Kafka(KafkaCommand),
}

#[cfg(feature = "kafka")]
#[derive(Subcommand)]
enum KafkaCommand {
    /// Replay atomic-fenced, effect-first and commit-first traces on a broker in this process,
    /// each step through the client and the group coordinator; other rows are left out, named.
    #[command(after_help = "Example:\n  conformance kafka replay tests/traces/kafka")]
    Replay {
        /// Trace files or directories of them.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Where the traces' stores go (a new temporary directory by default; kept on a
        /// divergence).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// One owner process of the lane, driven by `kafka replay`.
    #[command(hide = true)]
    Owner(kafka_lane::owner::OwnerCli),
    /// Run your unmodified Kafka consumer application: its instances on a broker in this
    /// process, killed right after their writes and syncs under the store directory, restarted,
    /// added and stopped; then judge from its database whether every record was applied once
    /// (docs/your-kafka-consumer.md). Exit 0 no anomaly, 1 an anomaly, 2 bad input, 6 not
    /// established (no kill struck, or the drain did not finish), 128 + N on signal N.
    #[cfg(target_os = "linux")]
    #[command(
        after_help = "Example:\n  conformance kafka app --observe examples/kafka/app.observe.toml -- python3 examples/kafka/atomic_fenced.py"
    )]
    App(conformance::app::AppArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    Process,
    InProcess,
    /// Any consumer speaking PROTOCOL.md: `--worker` (default: this consumer's `serve`).
    Protocol,
}

#[derive(Args, Clone)]
struct RunArgs {
    /// Owners as child processes (crash = SIGKILL), in this process, or as processes of any
    /// consumer speaking the open protocol (PROTOCOL.md).
    #[arg(long, value_enum, default_value = "process")]
    mode: ModeArg,
    /// The shell command that starts your consumer, speaking PROTOCOL.md on stdin/stdout
    /// (implies --mode protocol); it runs from the current directory.
    #[arg(long, value_name = "CMD", conflicts_with_all = ["postgres", "mutation"])]
    worker: Option<String>,
    /// Protocol mode only: how long to wait for one reply, in milliseconds (default 30000);
    /// past it the consumer is taken for frozen, killed, and the trace fails naming the request.
    #[arg(long, allow_hyphen_values = true, value_name = "MS", value_parser = count_in::<u64>(1, u64::MAX))]
    reply_timeout_ms: Option<u64>,
    /// Where fresh data directories are made (default: /dev/shm when present).
    #[arg(long)]
    tmp: Option<PathBuf>,
    /// Test only: replay against a deliberately broken consumer (no-fence:WRITE, one fence left
    /// out; no-cas; no-email-key).
    #[arg(long, hide = true)]
    mutation: Option<Mutation>,
    /// Use PostgreSQL: the URL of a server's database; each trace gets a fresh schema there,
    /// dropped after it (default: SQLite).
    #[arg(long)]
    postgres: Option<String>,
    /// Kill points inside steps: trace each owner process (ptrace, Linux) and check the store a
    /// SIGKILL after each of its writes under the store directory leaves (default: on with
    /// --worker or --mode protocol, off in process mode; not in process).
    #[arg(long, value_name = "on|off")]
    inside_step: Option<Switch>,
    /// Power cuts at the kill points and after every step: the store as the consumer's traced
    /// syncs made it durable, every change not synced lost (a file's content once the file
    /// is synced, a file made, renamed or removed once its directory is) (default: on with
    /// kill points inside steps).
    #[arg(long, value_name = "on|off")]
    power_cuts: Option<Switch>,
    /// Races inside steps (protocol mode, with kill points): each owner step that changes the
    /// store also run on a copy held at each of its transactions' begins while a second
    /// incarnation of the owner claims and runs its steps; the store after must be the
    /// model's, the first's write fenced (default: on with kill points inside steps).
    #[arg(long, value_name = "on|off")]
    races: Option<Switch>,
    /// Protocol mode only: read your consumer's SQLite store by the SQL in FILE (an observation
    /// spec, PROTOCOL.md "Observing the store"), from a copy, instead of trusting its store
    /// role; a store role that also answers observe must agree with it.
    #[arg(long, value_name = "FILE")]
    observe: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Switch {
    On,
    Off,
}

impl RunArgs {
    fn options(&self) -> anyhow::Result<Options> {
        let mode = match (self.mode, &self.worker) {
            (ModeArg::Protocol, _) | (ModeArg::Process, Some(_)) => Mode::Protocol,
            (ModeArg::Process, None) => Mode::Process,
            (ModeArg::InProcess, None) => Mode::InProcess,
            (ModeArg::InProcess, Some(_)) => bail!("--worker runs processes: it cannot be used with --mode in-process"),
        };
        if self.reply_timeout_ms.is_some() && !matches!(mode, Mode::Protocol) {
            bail!("--reply-timeout-ms applies to protocol mode only (--worker or --mode protocol)");
        }
        if self.worker.as_deref().is_some_and(|command| command.trim().is_empty()) {
            bail!("--worker is empty: give the command that starts your consumer");
        }
        let inside_step = match (self.inside_step, mode) {
            (Some(Switch::On), Mode::InProcess) => {
                bail!("--inside-step on kills processes: it cannot be used with --mode in-process")
            }
            (Some(Switch::On), Mode::Process) if self.postgres.is_some() => {
                bail!("--inside-step on copies the store's files: it cannot be used with --postgres")
            }
            (Some(switch), _) => switch == Switch::On,
            (None, Mode::Protocol) => true,
            (None, Mode::Process | Mode::InProcess) => false,
        };
        let power_cuts = match (self.power_cuts, inside_step) {
            (Some(Switch::On), false) => bail!(
                "--power-cuts on needs kill points inside steps (--inside-step on): a cut's store is followed from the traced syncs"
            ),
            (Some(switch), _) => switch == Switch::On,
            (None, traced) => traced,
        };
        let races = match (self.races, inside_step, mode) {
            (Some(Switch::On), false, _) => {
                bail!("--races on needs kill points inside steps (--inside-step on): a race holds a traced owner")
            }
            (Some(Switch::On), true, Mode::Process | Mode::InProcess) => {
                bail!("--races on applies to protocol mode only (--worker or --mode protocol)")
            }
            (Some(switch), _, _) => switch == Switch::On,
            (None, traced, _) => traced,
        };
        let mut options = Options {
            inside_step,
            power_cuts,
            races,
            mutation: self.mutation,
            postgres: self.postgres.clone(),
            command: self.worker.clone(),
            reply_timeout_ms: self.reply_timeout_ms.unwrap_or(conformance::protocol::REPLY_TIMEOUT_MS_DEFAULT),
            ..Options::new(mode)
        };
        if let Some(tmp) = &self.tmp {
            if !tmp.is_dir() {
                bail!("--tmp {} is not a directory", tmp.display());
            }
            options.tmp_root = tmp.clone();
        }
        if let Some(path) = &self.observe {
            if mode != Mode::Protocol {
                bail!("--observe applies to protocol mode only (--worker or --mode protocol): otherwise the harness reads this consumer's store directly");
            }
            options.observe = Some(std::sync::Arc::new(conformance::observe::ObserveSpec::load(path)?));
        }
        Ok(options)
    }
}

#[derive(Args)]
struct ReplayArgs {
    /// Trace files or directories of them.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Replay only the traces of this model row: the strategy your consumer claims (required
    /// with --worker, which adds the traces of rows your consumer serves alike where they bring
    /// a step or fault the row's lack; the summary counts the traces and names what none had).
    #[arg(long, value_name = "ROW")]
    strategy: Option<Strategy>,
    /// Print one JSON document (spec.md §11, "JSON output") instead of the lines.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args)]
struct TestArgs {
    /// The model row whose paths are generated and replayed (`model check --help` lists them).
    #[arg(long)]
    strategy: Strategy,
    /// Consumer groups (default: the row's, as in `model check`; so are the bounds below
    /// without a default of their own).
    #[arg(long, allow_hyphen_values = true, value_parser = count_in::<u8>(0, u64::from(u8::MAX)))]
    groups: Option<u8>,
    /// Competing owners per group (default: the row's).
    #[arg(long, allow_hyphen_values = true, value_parser = count_in::<u8>(0, u64::from(u8::MAX)))]
    owners: Option<u8>,
    /// Partitions (default: the row's; dedup-offset-only has two).
    #[arg(long, allow_hyphen_values = true, value_parser = count_in::<u8>(0, u64::from(u8::MAX)))]
    partitions: Option<u8>,
    /// Records appended per partition (default: the row's).
    #[arg(long, allow_hyphen_values = true, value_parser = count_in::<u8>(0, u64::from(u8::MAX)))]
    records: Option<u8>,
    /// Owner crashes in a run (default: the row's), or `any`: every number of them, as in
    /// `model check` (spec.md §7.1); each path replays in the budgets it uses.
    #[arg(long, allow_hyphen_values = true, value_parser = budget_in())]
    crashes: Option<Budget>,
    /// Rebalances in a run (default: the row's), or `any`.
    #[arg(long, allow_hyphen_values = true, value_parser = budget_in())]
    rebalances: Option<Budget>,
    /// Checkpoint interval of periodic-commit and offset-stamp, in records.
    #[arg(long, allow_hyphen_values = true, default_value_t = defaults::COMMIT_EVERY, value_parser = count_in::<u8>(0, u64::from(u8::MAX)))]
    commit_every: u8,
    /// Records one owner may hold at once (parallel strategies).
    #[arg(long, allow_hyphen_values = true, default_value_t = defaults::INFLIGHT, value_parser = count_in::<u8>(0, u64::from(u8::MAX)))]
    inflight: u8,
    /// The value each record adds to a group's total.
    #[arg(long, default_value_t = defaults::DELTA, allow_hyphen_values = true)]
    delta: i64,
    /// Offset of the poison record, or `none` (default: the row's, as in `model check`).
    #[arg(long, allow_hyphen_values = true)]
    poison: Option<String>,
    /// Failed attempts after which atomic-dlq dead-letters a poison record.
    #[arg(long, allow_hyphen_values = true, default_value_t = defaults::MAX_ATTEMPTS, value_parser = count_in::<u8>(0, u64::from(u8::MAX)))]
    max_attempts: u8,
    /// Lost acknowledgements (default: the row's).
    #[arg(long, allow_hyphen_values = true, value_parser = count_not_any(GROWS_THE_LOG))]
    ack_losses: Option<Budget>,
    /// Retention steps (default: the row's).
    #[arg(long, allow_hyphen_values = true, value_parser = count_not_any(MOVES_THE_START))]
    retentions: Option<Budget>,
    /// Second incarnations of an owner (default: the row's), or `any`: every number of them,
    /// with as many earlier incarnations alive at once as the row has paused slots (at least 1).
    #[arg(long, allow_hyphen_values = true, value_parser = budget_in())]
    pauses: Option<Budget>,
    /// Log losses (default: the row's).
    #[arg(long, allow_hyphen_values = true, value_parser = count_not_any(GROWS_THE_LOG))]
    log_losses: Option<Budget>,
    /// Leader failures of a replicated partition (the acks rows; default: the row's).
    #[arg(long, allow_hyphen_values = true, value_parser = count_not_any(NOT_LIFTED))]
    leader_failures: Option<Budget>,
    /// ISR shrinks of a replicated partition (the acks rows; default: the row's).
    #[arg(long, allow_hyphen_values = true, value_parser = count_not_any(NOT_LIFTED))]
    isr_shrinks: Option<Budget>,
    /// Replay every model path of this many steps (and shorter ones that end), 1..=200.
    #[arg(long, allow_hyphen_values = true, conflicts_with = "walks", value_parser = count_in::<usize>(1, DEPTH_MAX))]
    depth: Option<usize>,
    /// Replay this many seeded random walks, 1..=1000000 (each generated and replayed in turn).
    #[arg(long, allow_hyphen_values = true, requires = "seed", value_parser = count_in::<usize>(1, WALKS_MAX))]
    walks: Option<usize>,
    /// Seed of the first walk (walk i uses seed + i): the same seed, the same walks.
    #[arg(long, allow_hyphen_values = true, value_parser = count_in::<u64>(0, u64::MAX))]
    seed: Option<u64>,
    /// Longest walk, 1..=10000 steps.
    #[arg(long, allow_hyphen_values = true, default_value_t = 60, value_parser = count_in::<usize>(1, STEPS_MAX))]
    steps_max: usize,
    /// Most paths replayed at a depth, 1..=10000000; past it the test is incomplete (exit 3).
    #[arg(long, allow_hyphen_values = true, default_value_t = 100_000, value_parser = count_in::<usize>(1, PATHS_MAX))]
    paths_max: usize,
    /// Where divergent traces are saved.
    #[arg(long, default_value = "conformance-divergences")]
    out: PathBuf,
    /// Print one JSON document (spec.md §11, "JSON output") instead of the lines; what is
    /// generated and each divergence go to stderr as lines.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    run: RunArgs,
}

impl TestArgs {
    /// The model configuration these flags name (the same flags as `model check`, and the same
    /// defaults: the row's, `Config::new`).
    fn config(&self) -> anyhow::Result<Config> {
        let row = Config::new(self.strategy);
        let poison = match self.poison.as_deref() {
            None => row.poison,
            Some("none") => None,
            Some(offset)
                if offset.starts_with('-') && offset.len() > 1 && offset[1..].bytes().all(|b| b.is_ascii_digit()) =>
            {
                bail!("--poison must be a non-negative integer or none, got {offset}")
            }
            Some(offset) => {
                Some(offset.parse().map_err(|_| anyhow::anyhow!("--poison '{offset}' is neither an offset nor none"))?)
            }
        };
        let budget = |flag: Option<Budget>, row_default: u8| {
            model::config::lifted_count(flag.unwrap_or(Budget::Count(row_default)), row_default)
        };
        let (crashes, lift_crashes) = budget(self.crashes, row.crashes);
        let (rebalances, lift_rebalances) = budget(self.rebalances, row.rebalances);
        let (pauses, lift_pauses) = budget(self.pauses, row.pauses);
        let config = Config {
            groups: self.groups.unwrap_or(row.groups),
            owners: self.owners.unwrap_or(row.owners),
            partitions: self.partitions.unwrap_or(row.partitions),
            records: self.records.unwrap_or(row.records),
            crashes,
            rebalances,
            commit_every: self.commit_every,
            inflight: self.inflight,
            delta: self.delta,
            poison,
            max_attempts: self.max_attempts,
            ack_losses: count_of(self.ack_losses).unwrap_or(row.ack_losses),
            retentions: count_of(self.retentions).unwrap_or(row.retentions),
            pauses,
            log_losses: count_of(self.log_losses).unwrap_or(row.log_losses),
            leader_failures: count_of(self.leader_failures).unwrap_or(row.leader_failures),
            isr_shrinks: count_of(self.isr_shrinks).unwrap_or(row.isr_shrinks),
            lifted: Lifted { crashes: lift_crashes, rebalances: lift_rebalances, pauses: lift_pauses },
            ..row
        };
        if config.lifted.any() {
            model::abstraction::covers(self.strategy)
                .map_err(|why| anyhow::anyhow!("{} takes no unbounded budget (any): {why}", self.strategy))?;
        }
        Ok(config)
    }
}

#[derive(Args)]
struct CrossCheckArgs {
    /// Trace files or directories of them.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Where fresh data directories are made (default: /dev/shm when present).
    #[arg(long)]
    tmp: Option<PathBuf>,
}

#[derive(Args)]
struct KeepArgs {
    /// The trace files to keep (each must be a run of the model).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The name to keep the one trace under (`.json` is added); without it, each file's own.
    #[arg(long)]
    name: Option<String>,
    /// The directory of kept traces.
    #[arg(long, default_value = "tests/traces/kept")]
    dir: PathBuf,
}

#[derive(Args)]
struct RegenerateArgs {
    /// The corpus directory, normally tests/traces.
    dir: PathBuf,
}

#[derive(Args)]
struct WorkerArgs {
    /// The data directory: the log and, without --store, the SQLite store.
    #[arg(long)]
    dir: PathBuf,
    /// A PostgreSQL store's URL (default: the SQLite file in --dir).
    #[arg(long)]
    store: Option<String>,
    /// The consumer group the owner belongs to.
    #[arg(long)]
    group: String,
    /// The owner's name (`o0`, `o1`, ...).
    #[arg(long)]
    owner: String,
    /// The consumer strategy the owner runs.
    #[arg(long)]
    strategy: consumer::strategy::Strategy,
    /// Checkpoint interval of the periodic strategies, in records.
    #[arg(long, allow_hyphen_values = true, default_value_t = 2, value_parser = count_in::<u64>(0, u64::MAX))]
    commit_every: u64,
    /// Records the owner may hold at once (parallel strategies).
    #[arg(long, allow_hyphen_values = true, default_value_t = 2, value_parser = count_in::<usize>(0, u64::MAX))]
    inflight: usize,
    /// Failed attempts after which atomic-dlq dead-letters a poison record.
    #[arg(long, allow_hyphen_values = true, default_value_t = 2, value_parser = count_in::<u64>(0, u64::MAX))]
    max_attempts: u64,
    /// What the owner does when retention removed its next record.
    #[arg(long, default_value = "fail")]
    on_out_of_range: consumer::strategy::OutOfRange,
    /// The epoch a start takes: a new one it claims, or (the trap) the stored one.
    #[arg(long, default_value = "claim")]
    start_epoch: consumer::strategy::StartPolicy,
    /// When the owner refuses a log that lost records.
    #[arg(long, default_value = "refuse-ahead")]
    log_check: consumer::strategy::LogCheck,
    /// Test only: a deliberately broken consumer (`no-fence:WRITE`, `no-cas`, `no-email-key`).
    #[arg(long)]
    mutation: Option<Mutation>,
}

/// This tool and its version, first on the output of `replay` and `test` (with the model's, whose
/// traces it replays).
const TOOL: &str = concat!("onceproof-conformance ", env!("CARGO_PKG_VERSION"));

/// Bounds of `test`'s counts. Paths and walks are generated and replayed one at a time, so
/// these bound the time a typo can ask for, not memory: a walk holds at most `STEPS_MAX` steps,
/// and the recursion over paths to a depth is at most `DEPTH_MAX` frames deep.
const DEPTH_MAX: u64 = 200;
const WALKS_MAX: u64 = 1_000_000;
const STEPS_MAX: u64 = 10_000;
const PATHS_MAX: u64 = 10_000_000;

/// Parses the command line; a usage error is one line on stderr and exit 2.
/// `conformance completions SHELL`: the script on stdout; `conformance man DIR`: a page per command.
fn run_completions(args: clidocs::CompletionsArgs) -> anyhow::Result<ExitCode> {
    let script = clidocs::completions(Cli::command(), "conformance", args.shell);
    outln!("{}", script.trim_end())?;
    Ok(ExitCode::SUCCESS)
}

fn run_man(args: clidocs::ManArgs) -> anyhow::Result<ExitCode> {
    outln!("{}", clidocs::man(Cli::command(), &args.dir)?)?;
    Ok(ExitCode::SUCCESS)
}

fn parse_cli() -> Cli {
    Cli::try_parse().unwrap_or_else(|error| {
        if !error.use_stderr() {
            error.exit();
        }
        let _ = errln!("{}", one_line(&error.to_string()));
        std::process::exit(2)
    })
}

/// A clap error as one line. Clap's message is its first line, except when that line ends
/// with a colon: then what it introduces (the missing arguments, one per indented line)
/// follows, and is joined onto it. The usage and the hint after the blank line are dropped.
/// (The model's and the consumer's `parse_cli` have the same function.)
fn one_line(text: &str) -> String {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("error: invalid arguments").trim_end();
    if !first.ends_with(':') {
        return first.to_string();
    }
    let listed: Vec<&str> = lines.map(str::trim).take_while(|line| !line.is_empty()).collect();
    format!("{first} {}", listed.join(", "))
}

/// Exit codes (docs/errors.md "Exit codes"): 0 every trace conforms; 1 a divergence, or a scenario
/// that does not hold in the model; 2 bad input (one line); 3 a test whose paths were cut at
/// `--paths-max`. The hidden `worker` serves the consumer, and exits as it does: 4 when the
/// owner refuses to start to protect data; 5 the output could not be written
/// (`out::OUTPUT_EXIT_CODE`).
const DIVERGED: u8 = 1;
const BAD_INPUT: u8 = 2;
const INCOMPLETE: u8 = 3;
const REFUSED: u8 = 4;
/// `kafka app`: the run could not judge (no kill struck, or the drain did not finish).
#[cfg(all(feature = "kafka", target_os = "linux"))]
const NOT_ESTABLISHED: u8 = 6;

fn main() -> ExitCode {
    let result = match parse_cli().command {
        Command::Replay(args) => run_replay(args),
        Command::Test(args) => run_test(args),
        Command::Regenerate(args) => run_regenerate(args),
        Command::Keep(args) => run_keep(args),
        Command::CrossCheck(args) => run_cross_check(args),
        Command::Worker(args) => run_worker(args),
        Command::Serve => run_serve(),
        Command::Completions(args) => run_completions(args),
        Command::Man(args) => run_man(args),
        #[cfg(feature = "kafka")]
        Command::Kafka(command) => run_kafka(command),
    };
    // `{}`, not `{:#}`: the library's errors, like the consumer's, already include their
    // causes in one line.
    // Whatever is still buffered is written before the exit status is chosen.
    result.and_then(|code| Ok(out::flush().map(|()| code)?)).unwrap_or_else(|error| match out::find(&error) {
        Some(output) => ExitCode::from(out::report(output)),
        None => {
            let _ = errln!("error: {error}");
            ExitCode::from(exit_code(&error))
        }
    })
}

/// The exit code of a command that failed with `error`.
fn exit_code(error: &anyhow::Error) -> u8 {
    let code = |cause: &(dyn std::error::Error + 'static)| {
        if let Some(error) = cause.downcast_ref::<conformance::Error>() {
            return matches!(error, conformance::Error::Scenario { .. }).then_some(DIVERGED);
        }
        let refusal = cause.downcast_ref::<LogError>().is_some_and(LogError::is_refusal)
            || cause.downcast_ref::<OwnerError>().is_some_and(OwnerError::is_refusal);
        refusal.then_some(REFUSED)
    };
    error.chain().find_map(code).unwrap_or(BAD_INPUT)
}

/// The format version of the `replay --json` and `test --json` document (spec.md §11): a new field keeps it, a
/// changed or removed one moves it.
const CONFORMANCE_JSON_VERSION: u32 = 1;

/// Exit 0 when every trace conforms, 1 on any divergence, 2 when a file cannot be read (or
/// `--strategy` selects none).
fn run_replay(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let options = args.run.options()?;
    if args.run.worker.is_some() && args.strategy.is_none() {
        bail!("--worker needs --strategy ROW: the model row your consumer claims (its traces are replayed)");
    }
    let files = corpus::expand_with_kept(&args.paths)?;
    let traces: Vec<(PathBuf, Trace)> =
        files.into_iter().map(|path| corpus::load(&path).map(|t| (path, t))).collect::<Result<_, _>>()?;
    let found = traces.len();
    // A consumer's claim replays, besides the row's traces, those of the rows it serves alike
    // where they bring a kind of step or fault the row's lack (`coverage`).
    let claim_of = args.strategy.filter(|_| args.run.worker.is_some());
    let selection = match claim_of {
        Some(row) => conformance::coverage::select(row, traces),
        None => {
            let traces: Vec<(PathBuf, Trace)> = traces
                .into_iter()
                .filter(|(_, trace)| args.strategy.is_none_or(|row| trace.config.strategy == row))
                .collect();
            let own = traces.len();
            conformance::coverage::Selection { traces, own, added: Vec::new(), missing: Vec::new() }
        }
    };
    let traces = &selection.traces;
    if let Some(row) = args.strategy.filter(|_| selection.own == 0) {
        bail!("no trace of {row} among the {found} given");
    }
    preflight(&options)?;
    check_observations(traces.iter().map(|(_, trace)| &trace.config), &options)?;
    // With --json nothing but the one document goes to stdout.
    let text = !args.json;
    if text {
        outln!("{TOOL} (model: {})", model::TOOL)?;
    }
    if let Some(row) = args.strategy.filter(|_| text) {
        let added = selection.added.iter().map(|(other, n)| format!("{n} of {other}")).collect::<Vec<_>>();
        let added = match added.is_empty() {
            true => String::new(),
            false => format!(" and, for the steps and faults they add, {} (rows it serves alike)", added.join(", ")),
        };
        let left = found - traces.len();
        outln!("replaying the {} traces of {row}{added} ({left} of other rows left out)", selection.own)?;
    }
    let started = Instant::now();
    let (mut failures, mut steps, mut inside) = (Vec::new(), 0, Inside::default());
    let mut restarts = CopyCache::default();
    let mut records = Vec::with_capacity(traces.len());
    for (path, trace) in traces {
        match replay_shared(trace, &options, &mut inside, &mut restarts) {
            Ok(report) => {
                steps += report.steps;
                let violated: Vec<&str> = report.violated.iter().filter(|(_, v)| *v).map(|(n, _)| n.as_str()).collect();
                records.push(json!({
                    "path": path.display().to_string(),
                    "verdict": "conforms",
                    "steps": report.steps,
                    "violated_in_both": violated,
                }));
                if !text {
                    continue;
                }
                let violated = if violated.is_empty() { "none".to_string() } else { violated.join(", ") };
                outln!("conforms  {} ({} steps; violated in both: {violated})", path.display(), report.steps)?;
                if let Some(evidence) = report.evidence {
                    outln!("          real store: {evidence}")?;
                }
                for step in &report.unseen_writes {
                    outln!(
                        "          no kill point inside {step}: the model's store changed, no file under the store \
                         directory did"
                    )?;
                }
            }
            Err(failure) => {
                let run = failure.steps_run(trace.actions.len());
                steps += run;
                let reproduce = corpus::reproduce_command(path, &options);
                records.push(json!({
                    "path": path.display().to_string(),
                    "verdict": "diverges",
                    "steps": run,
                    "at": failure.place(),
                    "detail": failure.to_string(),
                    "reproduce": reproduce,
                }));
                if text {
                    outln!("DIVERGES  {}\n{failure}\nreproduce: {reproduce}", path.display())?;
                }
                failures.push(format!("{} ({})", path.display(), failure.place()));
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    // Some owner steps changed the model's store with no traced write while others showed
    // theirs: writes the tracer cannot see (a memory map) and so never split; the claim is not
    // certified. A store with no traced write at all is a database server, and the summary says
    // that no kill inside a step was tried.
    let unseen = inside.writes_unseen > 0 && inside.found > 0;
    let code = if failures.is_empty() && !unseen { 0 } else { DIVERGED };
    let tried = tried_summary(&options, &inside);
    let claim = args.strategy.map(|row| claim_summary(row, &selection, &failures, &inside));
    if !text {
        let mut document = document_head("replay");
        document["traces"] = json!(records);
        document["passed"] = json!(traces.len() - failures.len());
        document["failed"] = json!(failures.len());
        document["steps"] = json!(steps);
        document["seconds"] = json!(seconds);
        document["claim"] = json!(claim);
        document["tried"] = json!(tried);
        document["exit_code"] = json!(code);
        outln!("{document}")?;
        return Ok(ExitCode::from(code));
    }
    outln!(
        "{} passed, {} failed ({steps} steps in {seconds:.2} s: {:.1} traces/s, {:.0} steps/s)",
        traces.len() - failures.len(),
        failures.len(),
        traces.len() as f64 / seconds.max(1e-9),
        steps as f64 / seconds.max(1e-9)
    )?;
    match claim {
        Some(claim) => outln!("{claim}; {tried}")?,
        None => outln!("summary: {tried}")?,
    }
    Ok(ExitCode::from(code))
}

/// What a replay tried besides the model's steps, and what it trusted: the kill points inside
/// steps, and how the store was read.
fn tried_summary(options: &Options, inside: &Inside) -> String {
    let traced = options.traced();
    let kills = match (options.mode, traced) {
        (Mode::InProcess, _) => {
            "kill points inside steps: none in process (a crash drops the owner between steps)".into()
        }
        (Mode::Process, false) => {
            "kill points inside steps: not tried (--inside-step on traces the worker processes)".into()
        }
        (Mode::Protocol | Mode::Process, _) => inside.summary(traced),
    };
    let cuts = match (options.mode, traced, &options.postgres) {
        (_, _, Some(_)) => "power cuts: not tried: a PostgreSQL store is trusted for durability".to_string(),
        (Mode::InProcess, _, None) | (Mode::Process | Mode::Protocol, false, None) => {
            "power cuts: not tried (they need kill points inside steps)".to_string()
        }
        (Mode::Process | Mode::Protocol, true, None) => inside.power_summary(options.power_cuts),
    };
    // Races need a consumer restarted on copies: protocol mode (this consumer's own are
    // replayed step by step already).
    let cuts = match (options.mode, traced) {
        (Mode::Protocol, true) => format!("{cuts}; {}", inside.race_summary(options.races)),
        (Mode::Protocol, false) => format!("{cuts}; owners raced inside steps: not tried (they need kill points)"),
        (Mode::Process | Mode::InProcess, _) => cuts,
    };
    let store = match (options.mode, &options.observe) {
        (Mode::Protocol, Some(spec)) => format!(
            "store observed by its SQL ({}), on a copy; a store role that answers observe must agree",
            spec.path.display()
        ),
        (Mode::Protocol, None) => {
            "store role trusted: the store is read through its observe, assumed to report what the store holds \
             (--observe FILE reads it by its SQL)"
                .to_string()
        }
        (Mode::Process | Mode::InProcess, _) => "store read directly by the harness".to_string(),
    };
    format!("{kills}; {cuts}; {store}")
}

/// Before any trace: the observation spec's queries, run on a store freshly set up for each
/// distinct row and shape of `configs` (a query that fails or returns the wrong shape is bad
/// input, one line, not a divergence of every trace).
fn check_observations<'a>(configs: impl Iterator<Item = &'a model::Config>, options: &Options) -> anyhow::Result<()> {
    if options.observe.is_none() {
        return Ok(());
    }
    let mut checked = std::collections::BTreeSet::new();
    for config in configs {
        if checked.insert((config.strategy.name(), config.groups, config.partitions)) {
            conformance::harness::check_observation(config, options)?;
        }
    }
    Ok(())
}

/// Before any trace: a `--worker` command that cannot start, ends at once or cannot be traced
/// is bad input, said in one line (exit 2), not a divergence of every trace.
fn preflight(options: &Options) -> anyhow::Result<()> {
    let Some(command) = options.command.as_deref() else { return Ok(()) };
    conformance::protocol::preflight(command, options).map_err(|error| {
        use conformance::protocol::ProtocolError;
        let hint = match &error {
            ProtocolError::Trace { .. } => {
                "; rerun with --inside-step off to replay without kill points inside steps (the summary then says so)"
            }
            ProtocolError::Spawn { .. } => "; check the command",
            ProtocolError::Ended { .. } | ProtocolError::Write { .. } | ProtocolError::Read { .. } => {
                "; it must keep running and answer init (PROTOCOL.md)"
            }
            ProtocolError::Silent { .. }
            | ProtocolError::Unreadable { .. }
            | ProtocolError::Unexpected { .. }
            | ProtocolError::Refused { .. } => "",
        };
        anyhow::anyhow!("--worker: {error}{hint}")
    })
}

/// The summary of a replay of one row's traces: on how many traces the consumer's claim holds
/// and what they left out, or why it is not certified (`failures`: each failed trace and its
/// place; steps whose writes the tracer did not see).
fn claim_summary(
    row: Strategy,
    selection: &conformance::coverage::Selection,
    failures: &[String],
    inside: &Inside,
) -> String {
    let traces = selection.traces.len();
    let conform = traces - failures.len();
    let missing = match selection.missing.as_slice() {
        [] => String::new(),
        kinds => format!("; not tried, as no replayed trace has it: {}", kinds.join(", ")),
    };
    match failures {
        [] if inside.writes_unseen > 0 && inside.found > 0 => format!(
            "summary: {traces} traces, {conform} conform; claimed strategy {row} NOT CERTIFIED for this consumer: {} \
             owner steps changed the model's store with no write the tracer saw (through a memory map?), so no \
             kill inside them was tried",
            inside.writes_unseen
        ),
        [] => {
            let replayed = if traces == 1 { "the 1 trace replayed".to_string() } else { format!("the {traces} traces replayed") };
            format!("summary: {traces} traces, {conform} conform; claimed strategy {row} holds for this consumer on {replayed}{missing}")
        }
        [first, ..] => format!(
            "summary: {traces} traces, {conform} conform; claimed strategy {row} diverges for this consumer on {}, first at {first}",
            failures.len()
        ),
    }
}

fn run_test(args: TestArgs) -> anyhow::Result<ExitCode> {
    let config = args.config()?;
    config.validate().map_err(anyhow::Error::msg)?;
    let options = args.run.options()?;
    let generated = match (args.depth, args.walks, args.seed) {
        (Some(depth), None, _) => Generated::Paths { depth, paths_max: args.paths_max },
        (None, Some(count), Some(seed)) => Generated::Walks { count, seed, steps_max: args.steps_max },
        _ => bail!("give either --depth D or --walks N --seed SEED"),
    };
    preflight(&options)?;
    check_observations(std::iter::once(&config), &options)?;
    if args.json {
        return run_test_json(&config, generated, &options, &args.out);
    }
    outln!("{TOOL} (model: {})", model::TOOL)?;
    let mut lines = out::Lines::default();
    let summary = batch::replay_generated(&config, generated, &options, &args.out, &mut |line| lines.print(line))?;
    lines.finish()?;
    outln!("{summary}")?;
    outln!("summary: {}", tried_summary(&options, &summary.inside))?;
    Ok(ExitCode::from(test_exit_code(&summary)))
}

/// The fields every conformance JSON document starts with (spec.md §11): what it is, which
/// version of the format, the tool that wrote it and the command that ran.
fn document_head(command: &str) -> serde_json::Value {
    json!({
        "format": "onceproof-conformance",
        "version": CONFORMANCE_JSON_VERSION,
        "tool": TOOL,
        "command": command,
    })
}

/// 0 when every path conforms, 1 on a divergence, 3 when none diverged but the paths were cut.
fn test_exit_code(summary: &batch::Summary) -> u8 {
    match (summary.divergences, summary.cut) {
        (0, None) => 0,
        (0, Some(_)) => INCOMPLETE,
        _ => DIVERGED,
    }
}

/// `test --json`: the document is written path by path (`document::Stream`), and the lines
/// the batch reports (what it generates, each divergence) go to stderr, so that stdout holds
/// the one document. A divergence that cannot be saved under `--out` still ends the document,
/// with the totals so far and the error, before the error's line and exit 2.
fn run_test_json(
    config: &Config,
    generated: Generated,
    options: &Options,
    out: &std::path::Path,
) -> anyhow::Result<ExitCode> {
    let mut head = document_head("test");
    head["strategy"] = json!(config.strategy.name());
    head["generated"] = generated_json(generated);
    let mut document = document::Stream::start(&head)?;
    let started = Instant::now();
    let mut totals = Totals::default();
    let result = batch::replay_generated_each(
        config,
        generated,
        options,
        out,
        // Progress is best effort: a stderr that cannot be written does not stop the run.
        &mut |line| {
            let _ = errln!("{line}");
        },
        &mut |outcome| {
            totals.add(outcome);
            document.trace(&path_record(outcome));
        },
    );
    let seconds = started.elapsed().as_secs_f64();
    match result {
        Ok(summary) => {
            let code = test_exit_code(&summary);
            let tried = tried_summary(options, &summary.inside);
            document.finish(&totals.tail(seconds, summary.cut, Some(tried), None, code))?;
            Ok(ExitCode::from(code))
        }
        Err(error) => {
            let error = anyhow::Error::from(error);
            let tail = totals.tail(seconds, None, None, Some(error.to_string()), exit_code(&error));
            document.finish(&tail)?;
            Err(error)
        }
    }
}

/// The counts of the paths replayed so far, as the document's totals.
#[derive(Default)]
struct Totals {
    passed: usize,
    failed: usize,
    steps: usize,
}

impl Totals {
    fn add(&mut self, outcome: &batch::PathOutcome) {
        match outcome.verdict {
            batch::PathVerdict::Conforms { .. } => self.passed += 1,
            batch::PathVerdict::Diverges(_) => self.failed += 1,
        }
        self.steps += outcome.steps;
    }

    /// The fields after `traces`: `tried` is `None` when the run stopped on `error`.
    fn tail(
        &self,
        seconds: f64,
        cut: Option<usize>,
        tried: Option<String>,
        error: Option<String>,
        code: u8,
    ) -> serde_json::Value {
        let mut tail = json!({
            "passed": self.passed,
            "failed": self.failed,
            "steps": self.steps,
            "seconds": seconds,
            "cut": cut,
            "tried": tried,
            "exit_code": code,
        });
        if let Some(error) = error {
            tail["error"] = json!(error);
        }
        tail
    }
}

/// How `test` generates its paths, as the flags that chose it.
fn generated_json(generated: Generated) -> serde_json::Value {
    match generated {
        Generated::Paths { depth, paths_max } => json!({"depth": depth, "paths_max": paths_max}),
        Generated::Walks { count, seed, steps_max } => json!({"walks": count, "seed": seed, "steps_max": steps_max}),
    }
}

/// One generated path in `test --json`'s `traces`: `path` is the file a divergence was saved
/// to (a conforming path is saved nowhere), `seed` the walk's own (`null` at a depth).
fn path_record(outcome: &batch::PathOutcome) -> serde_json::Value {
    let (index, seed, steps) = (outcome.index, outcome.seed, outcome.steps);
    match &outcome.verdict {
        batch::PathVerdict::Conforms { violated_in_both } => json!({
            "index": index,
            "seed": seed,
            "path": null,
            "verdict": "conforms",
            "steps": steps,
            "violated_in_both": violated_in_both,
        }),
        batch::PathVerdict::Diverges(divergence) => json!({
            "index": index,
            "seed": seed,
            "path": divergence.saved.display().to_string(),
            "verdict": "diverges",
            "steps": steps,
            "at": divergence.at,
            "detail": divergence.detail,
            "reproduce": divergence.reproduce,
            "regenerate": divergence.regenerate,
        }),
    }
}

/// Exit 0 when no kill point shows a store its named crash points do not, 1 on a finding.
fn run_cross_check(args: CrossCheckArgs) -> anyhow::Result<ExitCode> {
    let mut options = Options { inside_step: true, ..Options::new(Mode::Process) };
    if let Some(tmp) = &args.tmp {
        if !tmp.is_dir() {
            bail!("--tmp {} is not a directory", tmp.display());
        }
        options.tmp_root = tmp.clone();
    }
    let files = corpus::expand(&args.paths)?;
    let traces: Vec<(String, Trace)> = files
        .into_iter()
        .map(|path| corpus::load(&path).map(|trace| (path.display().to_string(), trace)))
        .collect::<Result<_, _>>()?;
    outln!("{TOOL} (model: {})", model::TOOL)?;
    let started = Instant::now();
    let mut lines = out::Lines::default();
    let checked = conformance::crosscheck::cross_check_all(&traces, &options, &mut |line| lines.print(line))?;
    lines.finish()?;
    for finding in &checked.findings {
        outln!("FINDING  {finding}")?;
    }
    outln!(
        "cross-check: {} traces, {} steps with kill points, {} kill points between {} named crash points \
         ({} armed off the step's path), {} findings, {:.1} s",
        traces.len(),
        checked.steps,
        checked.kill_points,
        checked.named,
        checked.not_reached,
        checked.findings.len(),
        started.elapsed().as_secs_f64()
    )?;
    Ok(ExitCode::from(if checked.findings.is_empty() { 0 } else { DIVERGED }))
}

/// `keep`: every file is checked before any is copied, so a bad one keeps none.
fn run_keep(args: KeepArgs) -> anyhow::Result<ExitCode> {
    if args.name.is_some() && args.files.len() > 1 {
        bail!("--name names one trace, and {} are given", args.files.len());
    }
    for file in &args.files {
        corpus::load(file)?;
    }
    for file in &args.files {
        match corpus::keep(file, &args.dir, args.name.as_deref())? {
            corpus::Kept::Copied(path) => outln!("kept {} as {}", file.display(), path.display())?,
            corpus::Kept::Already(path) => outln!("{} is kept already as {}", file.display(), path.display())?,
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn run_regenerate(args: RegenerateArgs) -> anyhow::Result<ExitCode> {
    // Progress lines are best effort: a stderr that cannot be written does not stop the run.
    let written = corpus::regenerate(&args.dir, &mut |line| {
        let _ = errln!("{line}");
    })?;
    outln!("wrote {written} traces to {}", args.dir.display())?;
    Ok(ExitCode::SUCCESS)
}

fn run_worker(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let location = match &args.store {
        Some(url) => consumer::store::Location::parse(url),
        None => consumer::store::Location::Sqlite(driver::store_path(&args.dir)),
    };
    let store = Store::open_at(&location, StoreOptions::default())?;
    let log = Log::open_reader(&driver::log_dir(&args.dir), store.log_identity())?;
    let settings = Settings {
        commit_every: args.commit_every,
        inflight: args.inflight,
        batch: 1,
        mutation: args.mutation,
        max_attempts: args.max_attempts,
        on_out_of_range: args.on_out_of_range,
        start: args.start_epoch,
        log_check: args.log_check,
        ..Settings::new(args.strategy)
    };
    let mut owner = Owner::start(store, log, &args.group, &args.owner, settings, CrashPlan::none())?;
    consumer::worker::serve(&mut owner, std::io::stdin().lock(), std::io::stdout().lock())
        .map_err(|e| anyhow::anyhow!("worker stdin/stdout: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

/// Exit 0 after `quit` or at the end of input, 2 when `init` could not be served.
#[cfg(feature = "kafka")]
fn run_kafka(command: KafkaCommand) -> anyhow::Result<ExitCode> {
    use conformance::kafka::{LaneSession, LaneVerdict};
    let (paths, dir) = match command {
        KafkaCommand::Owner(cli) => {
            kafka_lane::owner::main(cli)?;
            return Ok(ExitCode::SUCCESS);
        }
        KafkaCommand::Replay { paths, dir } => (paths, dir),
        #[cfg(target_os = "linux")]
        KafkaCommand::App(args) => return run_app(&args),
    };
    let files = corpus::expand(&paths)?;
    let temporary = dir.is_none();
    let dir = dir.unwrap_or_else(|| std::env::temp_dir().join(format!("onceproof-kafka-{}", std::process::id())));
    let mut session = LaneSession::start(&std::env::current_exe()?, &["kafka"], &dir)?;
    outln!("broker at {} (nisshi-broker 0.6.0, in this process); client rdkafka 0.39.0", session.bootstrap())?;
    let (mut conforming, mut fenced, mut left_out, mut diverged) = (0, 0, 0, 0);
    for file in &files {
        let trace = corpus::load(file)?;
        let report = session.replay(&trace)?;
        let what = match &report.verdict {
            LaneVerdict::Conforms => {
                conforming += 1;
                "conforms".to_string()
            }
            LaneVerdict::BrokerFenced { step, detail } => {
                fenced += 1;
                format!("broker-fenced at step {step}: {detail}")
            }
            LaneVerdict::LeftOut { step, reason } => {
                left_out += 1;
                format!("left out at step {step}: {reason}")
            }
            LaneVerdict::Diverged { step, detail } => {
                diverged += 1;
                format!("DIVERGED at step {step}: {detail}")
            }
        };
        let name = file.display();
        outln!("{name}: {what} ({} steps in {:.1} s)", report.steps_run, report.seconds)?;
    }
    session.stop()?;
    outln!(
        "{conforming} conform, {fenced} broker-fenced, {left_out} left out, {diverged} diverged ({} traces)",
        files.len()
    )?;
    if temporary && diverged == 0 {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(if diverged == 0 { ExitCode::SUCCESS } else { ExitCode::from(DIVERGED) })
}

/// `kafka app`: 0 no anomaly, 1 an anomaly, 6 not established, 128 + N when signal N
/// interrupted it (every instance and the broker stopped, the run's directory removed).
#[cfg(all(feature = "kafka", target_os = "linux"))]
fn run_app(args: &conformance::app::AppArgs) -> anyhow::Result<ExitCode> {
    use conformance::app::{judge::Verdict, AppError};
    conformance::app::catch_interrupts();
    let mut failed_output = None;
    let mut say = |line: &str| {
        outln!("{line}").and_then(|()| out::flush()).map_err(|error| {
            let text = error.to_string();
            failed_output = Some(error);
            std::io::Error::other(text)
        })
    };
    let outcome = conformance::app::run(args, &mut say);
    if let Some(error) = failed_output {
        return Err(error.into());
    }
    let report = match outcome {
        Ok(report) => report,
        Err(AppError::Interrupted(signal)) => {
            errln!(
                "interrupted by signal {signal}: every instance and the broker stopped, the run's directory removed"
            )?;
            return Ok(ExitCode::from(128 + u8::try_from(signal).unwrap_or(0)));
        }
        Err(error) => return Err(error.into()),
    };
    for line in report.lines() {
        outln!("{line}")?;
    }
    Ok(ExitCode::from(match report.verdict {
        Verdict::NoAnomaly => 0,
        Verdict::Anomaly(_) => DIVERGED,
        Verdict::NotEstablished(_) => NOT_ESTABLISHED,
    }))
}

fn run_serve() -> anyhow::Result<ExitCode> {
    let stdin = std::io::stdin();
    match consumer::protocol::serve(stdin.lock(), std::io::stdout().lock())
        .map_err(|e| anyhow::anyhow!("protocol stdin/stdout: {e}"))?
    {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(text) => bail!("init: {text}"),
    }
}

#[cfg(test)]
mod tests {
    use super::one_line;

    /// Clap's missing-argument error lists the arguments on the lines after its first; the
    /// one line keeps clap's words and names them.
    #[test]
    fn a_clap_error_becomes_one_line_naming_what_it_lists() {
        let cases = [
            (
                "error: the following required arguments were not provided:\n  <PATHS>...\n\nUsage: conformance \
                 replay <PATHS>...\n\nFor more information, try '--help'.\n",
                "error: the following required arguments were not provided: <PATHS>...",
            ),
            (
                "error: the following required arguments were not provided:\n  --dir <DIR>\n  --group <GROUP>\n\n\
                 Usage: x\n",
                "error: the following required arguments were not provided: --dir <DIR>, --group <GROUP>",
            ),
            (
                "error: invalid value '0' for '--walks <WALKS>': 0 is not in 1..=1000000\n\nFor more information, \
              try '--help'.\n",
                "error: invalid value '0' for '--walks <WALKS>': 0 is not in 1..=1000000",
            ),
            ("", "error: invalid arguments"),
        ];
        for (text, line) in cases {
            assert_eq!(one_line(text), line);
        }
    }

    /// A claim's summary: counted, never "every"; not certified when some owner steps changed
    /// the store with no traced write while others showed theirs; a store with no traced write
    /// at all (a database server) may hold, the kill points' part of the summary saying so.
    #[test]
    fn a_claim_summary_counts_its_traces_and_never_certifies_unseen_writes() {
        use conformance::coverage::Selection;
        use conformance::replay::Inside;
        let selection =
            Selection { traces: Vec::new(), own: 0, added: Vec::new(), missing: vec!["a second partition".into()] };
        let row = model::Strategy::AtomicFenced;
        let cases = [
            (
                Inside { found: 5, ..Inside::default() },
                "holds for this consumer on the 0 traces replayed; not tried, as no replayed trace has it: a second partition",
            ),
            (
                Inside { found: 5, writes_unseen: 2, ..Inside::default() },
                "NOT CERTIFIED for this consumer: 2 owner steps",
            ),
            (Inside { found: 0, writes_unseen: 2, ..Inside::default() }, "holds for this consumer on the 0 traces replayed"),
        ];
        for (inside, expected) in cases {
            let summary = super::claim_summary(row, &selection, &[], &inside);
            assert!(summary.contains(expected), "{inside:?}: {summary}");
        }
    }
}
