//! The `conformance` command line: replay trace files, generate and replay model paths,
//! regenerate the corpus, and (hidden) serve the consumer's worker mode for child processes.

use anyhow::bail;
use clap::{Args, Parser, Subcommand, ValueEnum};
use conformance::batch::{self, Generated};
use conformance::corpus;
use conformance::driver::{self, Mode};
use conformance::generate;
use conformance::harness::Options;
use conformance::replay::replay;
use consumer::crash::CrashPlan;
use consumer::log::Log;
use consumer::owner::{Mutation, Owner, Settings};
use consumer::store::{Store, StoreOptions};
use model::config::defaults;
use model::trace::Trace;
use model::{Config, ConsumerModel, Strategy};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(name = "conformance", version, about = "Replays model traces against the real consumer, step by step.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay trace files (or directories of them) against fresh real systems.
    Replay(ReplayArgs),
    /// Generate model paths (to a depth, or seeded random walks) and replay each.
    Test(TestArgs),
    /// Rewrite a corpus directory: the default check's counterexamples and the scenarios.
    Regenerate(RegenerateArgs),
    /// Serve one owner over stdin/stdout (the consumer's worker mode), for process replays.
    #[command(hide = true)]
    Worker(WorkerArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    Process,
    InProcess,
}

#[derive(Args, Clone)]
struct RunArgs {
    /// Owners as child processes (crash = SIGKILL) or in this process.
    #[arg(long, value_enum, default_value = "process")]
    mode: ModeArg,
    /// Where fresh data directories are made (default: /dev/shm when present).
    #[arg(long)]
    tmp: Option<PathBuf>,
    /// Test only: replay against a deliberately broken consumer (no-fence, no-cas).
    #[arg(long, hide = true)]
    mutation: Option<Mutation>,
    /// Use PostgreSQL: the URL of a server's maintenance database; each trace gets a fresh
    /// database there (default: SQLite).
    #[arg(long)]
    postgres: Option<String>,
}

impl RunArgs {
    fn options(&self) -> anyhow::Result<Options> {
        let mode = match self.mode {
            ModeArg::Process => Mode::Process,
            ModeArg::InProcess => Mode::InProcess,
        };
        let mut options = Options { mutation: self.mutation, postgres: self.postgres.clone(), ..Options::new(mode) };
        if let Some(tmp) = &self.tmp {
            if !tmp.is_dir() {
                bail!("--tmp {} is not a directory", tmp.display());
            }
            options.tmp_root = tmp.clone();
        }
        Ok(options)
    }
}

#[derive(Args)]
struct ReplayArgs {
    /// Trace files or directories of them.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args)]
struct TestArgs {
    #[arg(long)]
    strategy: Strategy,
    /// Consumer groups (default: the row's, as in `model check`).
    #[arg(long)]
    groups: Option<u8>,
    #[arg(long, default_value_t = defaults::OWNERS)]
    owners: u8,
    #[arg(long, default_value_t = defaults::PARTITIONS)]
    partitions: u8,
    #[arg(long, default_value_t = defaults::RECORDS)]
    records: u8,
    #[arg(long, default_value_t = defaults::CRASHES)]
    crashes: u8,
    #[arg(long, default_value_t = defaults::REBALANCES)]
    rebalances: u8,
    #[arg(long, default_value_t = defaults::COMMIT_EVERY)]
    commit_every: u8,
    #[arg(long, default_value_t = defaults::INFLIGHT)]
    inflight: u8,
    #[arg(long, default_value_t = defaults::DELTA, allow_hyphen_values = true)]
    delta: i64,
    /// Offset of the poison record, or `none` (default: the row's, as in `model check`).
    #[arg(long)]
    poison: Option<String>,
    #[arg(long, default_value_t = defaults::MAX_ATTEMPTS)]
    max_attempts: u8,
    /// Lost acknowledgements (default: the row's).
    #[arg(long)]
    ack_losses: Option<u8>,
    /// Retention steps (default: the row's).
    #[arg(long)]
    retentions: Option<u8>,
    /// Second incarnations of an owner (default: the row's).
    #[arg(long)]
    pauses: Option<u8>,
    /// Log losses (default: the row's).
    #[arg(long)]
    log_losses: Option<u8>,
    /// Replay every model path of this many steps (and shorter ones that end).
    #[arg(long, conflicts_with = "walks")]
    depth: Option<usize>,
    /// Replay this many seeded random walks.
    #[arg(long, requires = "seed")]
    walks: Option<usize>,
    #[arg(long)]
    seed: Option<u64>,
    /// Longest walk, and most paths taken at a depth.
    #[arg(long, default_value_t = 60)]
    steps_max: usize,
    #[arg(long, default_value_t = 100_000)]
    paths_max: usize,
    /// Where divergent traces are saved.
    #[arg(long, default_value = "conformance-divergences")]
    out: PathBuf,
    #[command(flatten)]
    run: RunArgs,
}

impl TestArgs {
    /// The model configuration these flags name (the same flags as `model check`).
    fn config(&self) -> anyhow::Result<Config> {
        let row = Config::new(self.strategy);
        let poison = match self.poison.as_deref() {
            None => row.poison,
            Some("none") => None,
            Some(offset) => {
                Some(offset.parse().map_err(|_| anyhow::anyhow!("--poison '{offset}' is neither an offset nor none"))?)
            }
        };
        Ok(Config {
            groups: self.groups.unwrap_or(row.groups),
            owners: self.owners,
            partitions: self.partitions,
            records: self.records,
            crashes: self.crashes,
            rebalances: self.rebalances,
            commit_every: self.commit_every,
            inflight: self.inflight,
            delta: self.delta,
            poison,
            max_attempts: self.max_attempts,
            ack_losses: self.ack_losses.unwrap_or(row.ack_losses),
            retentions: self.retentions.unwrap_or(row.retentions),
            pauses: self.pauses.unwrap_or(row.pauses),
            log_losses: self.log_losses.unwrap_or(row.log_losses),
            ..row
        })
    }
}

#[derive(Args)]
struct RegenerateArgs {
    /// The corpus directory, normally tests/traces.
    dir: PathBuf,
}

#[derive(Args)]
struct WorkerArgs {
    #[arg(long)]
    dir: PathBuf,
    /// A PostgreSQL store's URL (default: the SQLite file in --dir).
    #[arg(long)]
    store: Option<String>,
    #[arg(long)]
    group: String,
    #[arg(long)]
    owner: String,
    #[arg(long)]
    strategy: consumer::strategy::Strategy,
    #[arg(long, default_value_t = 2)]
    commit_every: u64,
    #[arg(long, default_value_t = 2)]
    inflight: usize,
    #[arg(long, default_value_t = 2)]
    max_attempts: u64,
    #[arg(long, default_value = "fail")]
    on_out_of_range: consumer::strategy::OutOfRange,
    #[arg(long, default_value = "claim")]
    start_epoch: consumer::strategy::StartPolicy,
    #[arg(long, default_value = "refuse-ahead")]
    log_check: consumer::strategy::LogCheck,
    #[arg(long)]
    mutation: Option<Mutation>,
}

/// Parses the command line; a usage error is one line on stderr and exit 2.
fn parse_cli() -> Cli {
    Cli::try_parse().unwrap_or_else(|error| {
        if !error.use_stderr() {
            error.exit();
        }
        eprintln!("{}", error.to_string().lines().next().unwrap_or("error: invalid arguments"));
        std::process::exit(2)
    })
}

fn main() -> ExitCode {
    let result = match parse_cli().command {
        Command::Replay(args) => run_replay(args),
        Command::Test(args) => run_test(args),
        Command::Regenerate(args) => run_regenerate(args),
        Command::Worker(args) => run_worker(args),
    };
    // `{}`, not `{:#}`: the library's errors, like the consumer's, already include their
    // causes in one line.
    result.unwrap_or_else(|error| {
        eprintln!("error: {error}");
        ExitCode::from(2)
    })
}

/// Exit 0 when every trace conforms, 1 on any divergence, 2 when a file cannot be read.
fn run_replay(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let options = args.run.options()?;
    let files = corpus::expand(&args.paths)?;
    let traces: Vec<(PathBuf, Trace)> =
        files.into_iter().map(|path| corpus::load(&path).map(|t| (path, t))).collect::<Result<_, _>>()?;
    let started = Instant::now();
    let (mut failures, mut steps) = (0, 0);
    for (path, trace) in &traces {
        match replay(trace, &options) {
            Ok(report) => {
                steps += report.steps;
                let violated: Vec<&str> = report.violated.iter().filter(|(_, v)| *v).map(|(n, _)| n.as_str()).collect();
                let violated = if violated.is_empty() { "none".to_string() } else { violated.join(", ") };
                println!("conforms  {} ({} steps; violated in both: {violated})", path.display(), report.steps);
                if let Some(evidence) = report.evidence {
                    println!("          real store: {evidence}");
                }
            }
            Err(failure) => {
                failures += 1;
                println!(
                    "DIVERGES  {}\n{failure}\nreproduce: {}",
                    path.display(),
                    corpus::reproduce_command(path, &options)
                );
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{} passed, {failures} failed ({steps} steps in {seconds:.2} s: {:.1} traces/s, {:.0} steps/s)",
        traces.len() - failures,
        traces.len() as f64 / seconds.max(1e-9),
        steps as f64 / seconds.max(1e-9)
    );
    Ok(ExitCode::from(u8::from(failures > 0)))
}

fn run_test(args: TestArgs) -> anyhow::Result<ExitCode> {
    let config = args.config()?;
    config.validate().map_err(anyhow::Error::msg)?;
    let options = args.run.options()?;
    let model = ConsumerModel::new(config.clone());
    let paths = match (args.depth, args.walks, args.seed) {
        (Some(depth), None, _) => {
            let (paths, cut) = generate::paths_to_depth(&model, depth, args.paths_max);
            let note = if cut { format!(" (stopped at --paths-max {})", args.paths_max) } else { String::new() };
            Generated::Paths { paths, what: format!("every path to depth {depth}{note}") }
        }
        (None, Some(walks), Some(seed)) => {
            Generated::Walks { walks: generate::walks(&model, walks, seed, args.steps_max), seed }
        }
        _ => bail!("give either --depth D or --walks N --seed SEED"),
    };
    let summary =
        batch::replay_generated(&config, &paths, &options, &args.out, args.steps_max, &mut |line| println!("{line}"))?;
    println!("{summary}");
    Ok(ExitCode::from(u8::from(summary.divergences > 0)))
}

fn run_regenerate(args: RegenerateArgs) -> anyhow::Result<ExitCode> {
    let written = corpus::regenerate(&args.dir, &mut |line| eprintln!("{line}"))?;
    println!("wrote {written} traces to {}", args.dir.display());
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
