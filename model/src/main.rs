//! The `model` command line: `check` verdicts against spec.md, `explore` in a browser, `bench`.

#[macro_use]
mod out;

mod bench;
mod bench_spin;
mod explore;
mod report;

use anyhow::Context;
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use model::check::{self, CheckOptions, CheckReport, Search};
use model::cli::{budget_in, count_not_any, count_of, GROWS_THE_LOG, MOVES_THE_START, NOT_LIFTED};
pub(crate) use model::cli::{count_in, NonNegative};
use model::config::{defaults, Budget, Lifted};
use model::strategy::Family;
use model::{Config, ConsumerModel, Strategy};
use stateright::Model;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "model",
    version,
    about = "Proves or refutes the delivery guarantees of log consumer strategies.",
    after_help = "Example:\n  model check --strategy atomic-fenced --groups 1 --records 2"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check one strategy, or every strategy against spec.md's expected verdict table.
    #[command(after_help = CHECK_EXAMPLE, after_long_help = check_long_help())]
    Check(CheckArgs),
    /// Serve stateright's web explorer for one strategy.
    #[command(after_help = "Example:\n  model explore --strategy effect-first --addr 127.0.0.1:3000")]
    Explore(ExploreArgs),
    /// Measure states, states per second and peak memory per strategy and search mode.
    #[command(after_help = "Example:\n  model bench --strategy atomic-fenced")]
    Bench(bench::BenchArgs),
    /// Print the shell completion script of `model` (bash, zsh, fish, elvish, powershell).
    #[command(after_help = "Example:\n  model completions bash > ~/.local/share/bash-completion/completions/model")]
    Completions(clidocs::CompletionsArgs),
    /// Write the man pages of `model` and of each of its commands into a directory.
    #[command(after_help = "Example:\n  model man ~/.local/share/man/man1")]
    Man(clidocs::ManArgs),
}

const CHECK_EXAMPLE: &str =
    "Example:\n  model check --strategy effect-first --groups 1 --records 2 --html /tmp/report.html";

/// `check --help`'s closing text: the rows by family, the exit codes, the example.
fn check_long_help() -> String {
    let mut text = String::from("Strategies (--strategy), by family (spec.md §5):\n");
    for family in Family::ALL {
        let names: Vec<&str> = Strategy::ALL.iter().filter(|s| s.family() == family).map(|s| s.name()).collect();
        let mut line = format!("  {}:", family.name());
        for name in names {
            // Lines of at most 100 columns; a continuation lines up under the first name.
            if line.len() + 1 + name.len() > 100 {
                text.push_str(&line);
                text.push('\n');
                line = " ".repeat(family.name().len() + 3);
            }
            line.push(' ');
            line.push_str(name);
        }
        text.push_str(&line);
        text.push('\n');
    }
    text.push_str(
        "\nExit codes:\n  \
         0  every verdict as expected (the whole table), or no safety property violated (one strategy),\n     \
         and every fault witness reached\n  \
         1  a verdict other than spec.md's, a fault witness not reached (a vacuous check), or a\n     \
         safety property violated (with --strategy)\n  \
         2  bad input (one line on stderr)\n  \
         3  the search did not finish (--timeout) and found no violation\n  \
         5  the output could not be written (a closed pipe); the work before it is done\n\n",
    );
    text.push_str(CHECK_EXAMPLE);
    text
}

/// The bounds of the model; every default is spec.md's default configuration.
#[derive(Args, Clone, Debug)]
struct Bounds {
    /// Consumer groups, each with its own effect and progress (default: 2; 1 for the rows
    /// where a second group adds nothing, spec.md §4).
    #[arg(long, allow_hyphen_values = true, value_parser = count_in::<u8>(0, u64::from(u8::MAX)))]
    groups: Option<u8>,
    /// Competing owner processes per group.
    #[arg(long, allow_hyphen_values = true, value_parser = count_in::<u8>(0, u64::from(u8::MAX)))]
    owners: Option<u8>,
    /// Partitions of the log (at most 2).
    #[arg(long, allow_hyphen_values = true, value_parser = count_in::<u8>(0, u64::from(u8::MAX)))]
    partitions: Option<u8>,
    /// Records appended to each partition.
    #[arg(long, allow_hyphen_values = true, value_parser = count_in::<u8>(0, u64::from(u8::MAX)))]
    records: Option<u8>,
    /// Owner crashes allowed in a run (all groups together), or `any`: every number of them
    /// (spec.md §7.1).
    #[arg(long, allow_hyphen_values = true, value_parser = budget_in())]
    crashes: Option<Budget>,
    /// Rebalances allowed in a run (all groups together), or `any`.
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
    /// Offset of a poison record in every partition, or `none` (default: 1 for atomic-dlq,
    /// skip-poison and retry-forever, none for the others).
    #[arg(long, allow_hyphen_values = true, value_parser = parse_poison)]
    poison: Option<Poison>,
    /// Failed attempts after which atomic-dlq dead-letters a poison record.
    #[arg(long, allow_hyphen_values = true, default_value_t = defaults::MAX_ATTEMPTS, value_parser = count_in::<u8>(0, u64::from(u8::MAX)))]
    max_attempts: u8,
    /// Appends whose acknowledgement may be lost, so the producer retries (default: 1 for the
    /// producer rows, 0 for the others).
    #[arg(long, allow_hyphen_values = true, value_parser = count_not_any(GROWS_THE_LOG))]
    ack_losses: Option<Budget>,
    /// Retention steps allowed in a run (default: 1 for the reset rows, 0 for the others).
    #[arg(long, allow_hyphen_values = true, value_parser = count_not_any(MOVES_THE_START))]
    retentions: Option<Budget>,
    /// Second incarnations allowed in a run: an owner started again while its earlier
    /// incarnation still runs (default: the row's, spec.md §4), or `any`: every number of
    /// them, with as many earlier incarnations alive at once as the row has paused slots
    /// (at least 1).
    #[arg(long, allow_hyphen_values = true, value_parser = budget_in())]
    pauses: Option<Budget>,
    /// Log losses allowed in a run: a partition loses acknowledged records from its tail
    /// (default: 1 for the log-loss rows, 0 for the others).
    #[arg(long, allow_hyphen_values = true, value_parser = count_not_any(GROWS_THE_LOG))]
    log_losses: Option<Budget>,
    /// Leader failures allowed in a run (the acks rows; default: theirs, 1).
    #[arg(long, allow_hyphen_values = true, value_parser = count_not_any(NOT_LIFTED))]
    leader_failures: Option<Budget>,
    /// ISR shrinks allowed in a run (the acks rows; default: theirs, 1).
    #[arg(long, allow_hyphen_values = true, value_parser = count_not_any(NOT_LIFTED))]
    isr_shrinks: Option<Budget>,
    /// Lift the crash, rebalance and pause budgets that are above 0 in each row's defaults:
    /// verdicts for every number of those faults (spec.md §7.1); the other budgets stay.
    #[arg(long)]
    unbounded: bool,
}

/// `--poison`: an offset, or none.
#[derive(Clone, Copy, Debug)]
struct Poison(Option<u8>);

fn parse_poison(text: &str) -> Result<Poison, String> {
    match text {
        "none" => Ok(Poison(None)),
        offset if offset.starts_with('-') && offset[1..].bytes().all(|b| b.is_ascii_digit()) && offset.len() > 1 => {
            Err(format!("--poison must be a non-negative integer or none, got {offset}"))
        }
        offset => {
            offset.parse().map(|o| Poison(Some(o))).map_err(|_| format!("'{offset}' is neither an offset nor none"))
        }
    }
}

impl Bounds {
    /// The configuration of `strategy` under these flags; an `any` or `--unbounded` this row
    /// cannot take is an error of one line.
    fn config(&self, strategy: Strategy) -> Result<Config, String> {
        let row = Config::new(strategy);
        self.contradiction()?;
        let (crashes, lift_crashes) = budget(self.crashes, row.crashes);
        let (rebalances, lift_rebalances) = budget(self.rebalances, row.rebalances);
        let (pauses, lift_pauses) = budget(self.pauses, row.pauses);
        let config = Config {
            strategy,
            groups: self.groups.unwrap_or(Config::new(strategy).groups),
            owners: self.owners.unwrap_or(Config::new(strategy).owners),
            partitions: self.partitions.unwrap_or(Config::new(strategy).partitions),
            records: self.records.unwrap_or(Config::new(strategy).records),
            crashes,
            rebalances,
            commit_every: self.commit_every,
            inflight: self.inflight,
            delta: self.delta,
            poison: self.poison.map_or(Config::new(strategy).poison, |Poison(offset)| offset),
            max_attempts: self.max_attempts,
            ack_losses: count_of(self.ack_losses).unwrap_or(Config::new(strategy).ack_losses),
            retentions: count_of(self.retentions).unwrap_or(Config::new(strategy).retentions),
            pauses,
            log_losses: count_of(self.log_losses).unwrap_or(Config::new(strategy).log_losses),
            leader_failures: count_of(self.leader_failures).unwrap_or(Config::new(strategy).leader_failures),
            isr_shrinks: count_of(self.isr_shrinks).unwrap_or(Config::new(strategy).isr_shrinks),
            lifted: Lifted { crashes: lift_crashes, rebalances: lift_rebalances, pauses: lift_pauses },
        };
        let config = match self.unbounded {
            // `--unbounded` checks one group unless `--groups` says otherwise.
            true => Config { groups: self.groups.unwrap_or(1), ..config.unbounded() },
            false => config,
        };
        if config.lifted.any() {
            model::abstraction::covers(strategy)
                .map_err(|why| format!("{strategy} takes no unbounded budget (any, --unbounded): {why}"))?;
        }
        Ok(config)
    }
}

impl Bounds {
    /// `--unbounded` beside a count of a budget it lifts: an error of one line whatever the
    /// row, so that over the table it is refused rather than every row left out for it.
    fn contradiction(&self) -> Result<(), String> {
        if !self.unbounded {
            return Ok(());
        }
        let explicit = [("--crashes", self.crashes), ("--rebalances", self.rebalances), ("--pauses", self.pauses)];
        match explicit.into_iter().find(|(_, budget)| matches!(budget, Some(Budget::Count(_)))) {
            Some((flag, Some(Budget::Count(count)))) => Err(format!(
                "--unbounded lifts {flag}, so {flag} {count} contradicts it: give one of them (or {flag} any)"
            )),
            _ => Ok(()),
        }
    }
}

/// A liftable budget's count and whether it is lifted (`config::lifted_count`); the row's
/// default when the flag is absent.
fn budget(flag: Option<Budget>, row_default: u8) -> (u8, bool) {
    model::config::lifted_count(flag.unwrap_or(Budget::Count(row_default)), row_default)
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum SearchArg {
    Bfs,
    Dfs,
    Simulation,
}

#[derive(Args)]
struct CheckArgs {
    /// The strategy to check; without it, every strategy is checked and compared with spec.md.
    #[arg(long, value_parser = parse_strategy)]
    strategy: Option<Strategy>,
    #[command(flatten)]
    bounds: Bounds,
    /// How the states are searched: `bfs` (breadth first) or `dfs` (depth first), both
    /// complete, or `simulation` (seeded random walks, `--seed`: incomplete, for bounds too
    /// large to search).
    #[arg(long, value_enum, default_value = "bfs")]
    search: SearchArg,
    /// Seed of the simulation's random walks.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0, value_parser = count_in::<u64>(0, u64::MAX))]
    seed: u64,
    /// Checker threads per strategy (1..=64).
    #[arg(long, allow_hyphen_values = true, default_value_t = 1, value_parser = count_in::<usize>(1, THREADS_MAX))]
    threads: usize,
    /// Strategies checked at once (1..=64; default: the number of cores).
    #[arg(long, allow_hyphen_values = true, value_parser = count_in::<usize>(1, THREADS_MAX))]
    jobs: Option<usize>,
    /// Stop after this many seconds (0 < SECONDS <= 604800); unfinished verdicts are
    /// `unknown` (simulation: default 10).
    #[arg(long, value_name = "SECONDS", allow_hyphen_values = true, value_parser = parse_seconds)]
    timeout: Option<Duration>,
    /// Symmetry reduction: one state per class of interchangeable owners (within a group),
    /// groups and epochs; counterexamples are mapped back to concrete actions (every search).
    /// On by default without `--strategy` (the whole table: the same verdicts, shortest
    /// lengths and witnesses, in half the time); off by default with it.
    #[arg(long, conflicts_with = "no_symmetry")]
    symmetry: bool,
    /// Explore the whole state space, not one state per class (`--wide`'s states and unique
    /// columns then count every state).
    #[arg(long)]
    no_symmetry: bool,
    /// Print one JSON document instead of the text report.
    #[arg(long)]
    json: bool,
    /// Print the verdict matrix, a column per safety property with the state counts and
    /// seconds of each row, instead of a summary line per row (wider than a terminal).
    #[arg(long, conflicts_with = "json")]
    wide: bool,
    /// Print the summary only: the bounds, a line per row, and the judgement; no
    /// counterexamples (`--traces` and `--html` still write them).
    #[arg(long, conflicts_with = "json")]
    quiet: bool,
    /// Write every counterexample as a trace file into this directory.
    #[arg(long)]
    traces: Option<PathBuf>,
    /// Also write one self-contained HTML report here: the verdict table and every
    /// violation's timeline with the failing step marked.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// The trace files' format: `json` (spec.md §8.2), or `itf`: each JSON trace and, beside
    /// it, the same run with every state in the Informal Trace Format (`.itf.json`).
    #[arg(long, value_enum, default_value = "json", requires = "traces")]
    format: TraceFormat,
}

/// `--format`: which files `--traces` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TraceFormat {
    /// The JSON trace only.
    Json,
    /// The JSON trace and its ITF beside it.
    Itf,
}

#[derive(Args)]
struct ExploreArgs {
    /// The strategy to explore (`model check --help` lists them).
    #[arg(long, value_parser = parse_strategy)]
    strategy: Strategy,
    #[command(flatten)]
    bounds: Bounds,
    /// Address to serve the explorer on.
    #[arg(long, default_value = "127.0.0.1:3000")]
    addr: String,
}

fn parse_strategy(text: &str) -> Result<Strategy, String> {
    text.parse()
}

/// The most checker threads, and strategies checked at once: far above the cores of the
/// machines this runs on, and low enough that a typo cannot spawn a million threads.
const THREADS_MAX: u64 = 64;
/// The longest `--timeout`: a week. (`Duration::from_secs_f64` panics on what does not fit,
/// and no check runs longer.)
pub const TIMEOUT_SECONDS_MAX: f64 = 7.0 * 24.0 * 3600.0;

/// `--timeout`: a finite number of seconds in `0 < SECONDS <= TIMEOUT_SECONDS_MAX`.
pub fn parse_seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text.parse().map_err(|_| format!("'{text}' is not a number of seconds"))?;
    // NaN fails both comparisons, and so does infinity the second.
    if !(seconds > 0.0 && seconds <= TIMEOUT_SECONDS_MAX) {
        return Err(format!("{text} is out of range: accepted values are 0 < SECONDS <= {TIMEOUT_SECONDS_MAX}"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Parses the command line; a usage error is one line on stderr and exit 2 (help and version
/// print as usual).
/// `model completions SHELL`: the script on stdout; `model man DIR`: a page per command.
fn run_completions(args: clidocs::CompletionsArgs) -> anyhow::Result<ExitCode> {
    let script = clidocs::completions(Cli::command(), "model", args.shell);
    out!("{script}")?;
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
/// (The consumer's and the conformance binary's `parse_cli` have the same function.)
fn one_line(text: &str) -> String {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("error: invalid arguments").trim_end();
    if !first.ends_with(':') {
        return first.to_string();
    }
    let listed: Vec<&str> = lines.map(str::trim).take_while(|line| !line.is_empty()).collect();
    format!("{first} {}", listed.join(", "))
}

fn main() -> ExitCode {
    let cli = parse_cli();
    let result = match cli.command {
        Command::Check(args) => run_check(args),
        Command::Explore(args) => run_explore(args),
        Command::Bench(args) => bench::run(args),
        Command::Completions(args) => run_completions(args),
        Command::Man(args) => run_man(args),
    };
    // Whatever is still buffered is written before the exit status is chosen.
    match result.and_then(|code| Ok(out::flush().map(|()| code)?)) {
        Ok(code) => code,
        Err(error) => match out::find(&error) {
            Some(output) => ExitCode::from(out::report(output)),
            None => {
                let _ = errln!("error: {error:#}");
                ExitCode::from(2)
            }
        },
    }
}

/// Why `--unbounded` leaves a row of the table out although the abstraction covers it.
const NOTHING_TO_LIFT: &str =
    "--unbounded lifts nothing here: its default budgets have no crash, rebalance or second incarnation";

fn run_check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let strategies: Vec<Strategy> = match args.strategy {
        Some(strategy) => vec![strategy],
        None => Strategy::ALL.to_vec(),
    };
    let table = args.strategy.is_none();
    args.bounds.contradiction().map_err(anyhow::Error::msg)?;
    let mut configs = Vec::new();
    let mut skipped = Vec::new();
    for &strategy in &strategies {
        match args.bounds.config(strategy) {
            Ok(config) => {
                // `--unbounded` over the table: a row with no crash, rebalance or pause budget
                // has nothing to lift, and its verdict is the bounded table's.
                if table && args.bounds.unbounded && !config.lifted.any() {
                    skipped.push((strategy, NOTHING_TO_LIFT.to_string()));
                    continue;
                }
                config.validate().map_err(anyhow::Error::msg)?;
                configs.push(config);
            }
            // Over the table, a row the abstraction does not cover is left out, said why.
            Err(why) if table => {
                let why = why.strip_prefix(strategy.name()).map_or(why.as_str(), str::trim_start).to_string();
                skipped.push((strategy, why));
            }
            Err(why) => anyhow::bail!(why),
        }
    }
    let lifted = configs.iter().any(|config| config.lifted.any());
    if lifted && matches!(args.search, SearchArg::Simulation) {
        anyhow::bail!(
            "any (or --unbounded) needs a complete search: --search simulation proves nothing (use bfs or dfs)"
        );
    }
    let options = check_options(&args)?;
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let jobs = args.jobs.unwrap_or(cores.min(THREADS_MAX as usize));
    let expected = report::Expected {
        bounded: model::expected::from_spec().map_err(|e| anyhow::anyhow!("spec.md: {e}"))?,
        unbounded: model::expected::unbounded_from_spec().map_err(|e| anyhow::anyhow!("spec.md: {e}"))?,
    };
    if let Some(dir) = &args.traces {
        report::prepare_traces_dir(dir)?;
    }
    if let Some(file) = &args.html {
        // Refused before the search, not after it: a report that cannot be written.
        report::check_writable_file("--html", file)?;
    }
    let reports = check_all(configs, &options, jobs);
    if let Some(dir) = &args.traces {
        for report in &reports {
            report::write_traces(dir, report, args.format)?;
        }
    }
    let outcome = report::judge(&reports, table.then_some(&expected), skipped);
    if let Some(file) = &args.html {
        report::write_atomically("--html", file, file, &report::html(&reports, &outcome))?;
        errln!("wrote {}", file.display())?;
    }
    if args.json {
        outln!("{}", report::json(&reports, &outcome))?;
    } else {
        let layout = report::Layout { width_chars: output_width_chars(), wide: args.wide, quiet: args.quiet };
        out!("{}", report::text(&reports, &outcome, layout))?;
    }
    Ok(ExitCode::from(outcome.exit_code))
}

/// The width of the text report. On a terminal: `COLUMNS` when it is a number (the user's
/// override), else the terminal's own width; else `report::WIDTH_DEFAULT_CHARS`, so that files,
/// pipes and tests see the same output whatever the terminal.
fn output_width_chars() -> usize {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return report::WIDTH_DEFAULT_CHARS;
    }
    let columns = std::env::var("COLUMNS").ok().and_then(|text| text.trim().parse::<usize>().ok());
    columns.filter(|&columns| columns > 0).or_else(terminal_columns).unwrap_or(report::WIDTH_DEFAULT_CHARS)
}

/// The width of the terminal on stdout, as the kernel knows it (shells seldom export `COLUMNS`).
fn terminal_columns() -> Option<usize> {
    let mut size = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ writes one `winsize` into `size`, which lives across the call.
    let answered = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    (answered && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// Checks each configuration, `jobs` of them at once; reports come back in input order, and
/// each check is deterministic on its own, so the result does not depend on `jobs`.
fn check_all(configs: Vec<Config>, options: &CheckOptions, jobs: usize) -> Vec<CheckReport> {
    // The order rows start in (reports stay in input order): the parallel rows, whose in-flight
    // windows make the largest state spaces, first, so that the small rows fill the other
    // jobs around them instead of leaving one job alone with a large row at the end.
    let mut order: Vec<usize> = (0..configs.len()).collect();
    order.sort_by_key(|&index| !configs[index].strategy.rules().is_parallel());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<CheckReport>>> = configs.iter().map(|_| Default::default()).collect();
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(configs.len()) {
            scope.spawn(|| loop {
                let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&index) = order.get(at) else { break };
                let config = &configs[index];
                let model = ConsumerModel::new(config.clone());
                let strategy = config.strategy;
                // Progress lines are best effort: a stderr that cannot be written does not stop
                // the check, whose verdicts go to stdout.
                let _ = errln!("checking {strategy} ({} properties)", model.properties().len());
                let report = check::run(&model, options, &mut |p| {
                    let _ = errln!(
                        "  {strategy}: {} states, {} unique, depth {}, {:.0} states/s",
                        p.states,
                        p.unique_states,
                        p.depth,
                        p.states as f64 / p.elapsed.as_secs_f64().max(1e-9)
                    );
                });
                *slots[index].lock().expect("no checker thread panics while holding a slot") = Some(report);
            });
        }
    });
    slots.into_iter().map(|slot| slot.into_inner().ok().flatten().expect("every configuration was checked")).collect()
}

fn check_options(args: &CheckArgs) -> anyhow::Result<CheckOptions> {
    let search = match args.search {
        SearchArg::Bfs => Search::Bfs,
        SearchArg::Dfs => Search::Dfs,
        SearchArg::Simulation => Search::Simulation,
    };
    let timeout = match (args.timeout, search) {
        (Some(timeout), _) => Some(timeout),
        // Random walks never finish on their own.
        (None, Search::Simulation) => Some(Duration::from_secs(10)),
        (None, _) => None,
    };
    // The table's default: symmetry is exact on every row (spec.md §7) and preserves every
    // verdict, shortest length and witness, and it halves the table's time (the parallel rows'
    // classes are a third of their states). A single strategy keeps the whole state space by
    // default, so that its counts are those of the model.
    let symmetry = args.symmetry || (args.strategy.is_none() && !args.no_symmetry);
    Ok(CheckOptions { search, threads: args.threads, seed: args.seed, timeout, symmetry })
}

fn run_explore(args: ExploreArgs) -> anyhow::Result<ExitCode> {
    let config = args.bounds.config(args.strategy).map_err(anyhow::Error::msg)?;
    config.validate().map_err(anyhow::Error::msg)?;
    let listener =
        std::net::TcpListener::bind(&args.addr).with_context(|| format!("cannot listen on {}", args.addr))?;
    drop(listener);
    explore::run(config, &args.addr)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::{one_line, parse_seconds};

    /// Clap's missing-argument error lists the arguments on the lines after its first; the
    /// one line keeps clap's words and names them.
    #[test]
    fn a_clap_error_becomes_one_line_naming_what_it_lists() {
        let cases = [
            (
                "error: the following required arguments were not provided:\n  --strategy <STRATEGY>\n\nUsage: \
                 model explore --strategy <STRATEGY>\n\nFor more information, try '--help'.\n",
                "error: the following required arguments were not provided: --strategy <STRATEGY>",
            ),
            (
                "error: the following required arguments were not provided:\n  --dir <DIR>\n  --group <GROUP>\n\n\
                 Usage: x\n",
                "error: the following required arguments were not provided: --dir <DIR>, --group <GROUP>",
            ),
            (
                "error: unexpected argument '--nope' found\n\n  tip: to pass '--nope' as a value, use '-- --nope'\n",
                "error: unexpected argument '--nope' found",
            ),
            ("", "error: invalid arguments"),
        ];
        for (text, line) in cases {
            assert_eq!(one_line(text), line);
        }
    }

    #[test]
    fn timeouts_are_positive_finite_and_at_most_a_week() {
        for text in ["1e300", "NaN", "nan", "inf", "-inf", "-1", "0", "-0", "604801", "ten", ""] {
            assert!(parse_seconds(text).is_err(), "{text}");
        }
        for (text, millis) in [("0.5", 500), ("10", 10_000), ("604800", 604_800_000)] {
            assert_eq!(parse_seconds(text).map(|d| d.as_millis()), Ok(millis), "{text}");
        }
    }
}
