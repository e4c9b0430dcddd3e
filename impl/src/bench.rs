//! `consumer bench`: consumed records per second per strategy, batch size and journal mode,
//! each set against the raw fsync rate of the same disk measured in the same run.

use anyhow::{bail, Context};
use clap::Args;
use consumer::crash::CrashPlan;
use consumer::log::{encode_delta, Log};
use consumer::owner::{OnFenced, Outcome, Owner, Settings, FIRST_OWNER};
use consumer::store::{Journal, Store, StoreOptions};
use consumer::strategy::{EffectKind, Step, StepKind, Strategy};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct BenchArgs {
    /// Journal modes to measure (with the store's synchronous level: EXTRA in DELETE mode,
    /// FULL in WAL mode): delete, wal or both.
    #[arg(long, default_value = "both")]
    journal: String,
    /// A strategy to measure; repeat the flag for several. Default: every strategy.
    #[arg(long = "strategy")]
    strategies: Vec<String>,
    /// Records consumed per measurement at batch 1 (1..=10000000).
    #[arg(long, allow_hyphen_values = true, default_value_t = 1000, value_parser = crate::count_in::<u64>(1, MAX_RECORDS))]
    records_batch1: u64,
    /// Records consumed per measurement at batch 100 (1..=10000000).
    #[arg(long, allow_hyphen_values = true, default_value_t = 20000, value_parser = crate::count_in::<u64>(1, MAX_RECORDS))]
    records_batch100: u64,
    /// Measurements per case; the median is reported (1..=100).
    #[arg(long, allow_hyphen_values = true, default_value_t = 3, value_parser = crate::count_in::<usize>(1, MAX_REPEAT as u64))]
    repeat: usize,
    /// Where the scratch data directories and the fsync probe file are made (and removed).
    #[arg(long, default_value = "target/bench-consumer")]
    dir: PathBuf,
    /// Measure the log's appends instead of the consumer: appends per second with and without
    /// the acknowledgement record, one-record appends and batches, against the fsync rate.
    #[arg(long)]
    log_appends: bool,
    /// Appends per measurement of --log-appends (1..=10000000).
    #[arg(long, allow_hyphen_values = true, default_value_t = 1000, value_parser = crate::count_in::<u64>(1, MAX_RECORDS))]
    appends: u64,
}

/// Checkpoint interval of the periodic strategies, fixed so that runs compare.
const COMMIT_EVERY: u64 = 10;
/// Records one parallel owner may hold at once: the consumer's default.
const INFLIGHT: usize = Settings::INFLIGHT_DEFAULT;
/// The two batch sizes compared.
const BATCHES: [usize; 2] = [1, 100];
/// More records than this would hold the payloads of a whole run in memory for no gain.
const MAX_RECORDS: u64 = 10_000_000;
const MAX_REPEAT: usize = 100;
/// How long one sample of the fsync rate runs.
pub(crate) const FSYNC_SAMPLE: Duration = Duration::from_millis(500);
const GROUP: &str = "bench";
/// The target: a batch-1 record may cost at most 1.5 times one fsync.
const TARGET_FACTOR: f64 = 1.5;

/// The validated arguments.
struct Plan {
    journals: Vec<Journal>,
    strategies: Vec<Strategy>,
    records_batch1: u64,
    records_batch100: u64,
    repeat: usize,
    dir: PathBuf,
}

/// One measured configuration.
#[derive(Clone, Copy)]
struct Case {
    journal: Journal,
    batch: usize,
    strategy: Strategy,
    records: u64,
}

/// What one case measured over all its repeats.
struct Measured {
    case: Case,
    seconds: Vec<f64>,
    /// Durable writes (steps other than fetch) per record; the same in every repeat.
    writes_per_record: f64,
}

impl Measured {
    fn median_seconds(&self) -> f64 {
        median(&self.seconds)
    }

    fn records_per_second(&self) -> f64 {
        self.case.records as f64 / self.median_seconds()
    }
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    outln!("{}", crate::TOOL)?;
    if args.log_appends {
        let (appends, repeat) = (args.appends, args.repeat);
        if appends == 0 || appends > MAX_RECORDS || repeat == 0 || repeat > MAX_REPEAT {
            bail!("--appends must be in 1..={MAX_RECORDS} and --repeat in 1..={MAX_REPEAT}");
        }
        std::fs::create_dir_all(&args.dir).with_context(|| format!("cannot create {}", args.dir.display()))?;
        return crate::bench_log::run(&args.dir, appends, repeat);
    }
    let plan = plan(args)?;
    std::fs::create_dir_all(&plan.dir).with_context(|| format!("cannot create {}", plan.dir.display()))?;
    let cases = cases(&plan);
    // The fsync rate is sampled before and after the cases, so that a disk whose speed drifts
    // during the run shows it instead of skewing every ratio silently.
    let mut fsync_rates = fsync_samples(&plan.dir, plan.repeat)?;
    let measured = measure_all(&plan, &cases)?;
    fsync_rates.extend(fsync_samples(&plan.dir, plan.repeat)?);
    let fsync_rate = median(&fsync_rates);
    print_table(&measured, fsync_rate)?;
    print_fsync_line(&fsync_rates, fsync_rate, plan.repeat)?;
    print_batch_ratios(&measured)?;
    print_summary(&measured, fsync_rate)?;
    if plan.journals.contains(&Journal::Wal) && plan.strategies.contains(&Strategy::Atomic) {
        print_paired_target(&plan)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Validates the flags; every bad value is a one-line error.
fn plan(args: BenchArgs) -> anyhow::Result<Plan> {
    let journals = match args.journal.as_str() {
        "delete" => vec![Journal::Delete],
        "wal" => vec![Journal::Wal],
        "both" => vec![Journal::Delete, Journal::Wal],
        other => bail!("--journal '{other}' is not one of: delete, wal, both"),
    };
    let mut strategies = Vec::new();
    for text in &args.strategies {
        let strategy: Strategy = text.parse().map_err(|message: String| anyhow::anyhow!("--strategy: {message}"))?;
        if !strategies.contains(&strategy) {
            strategies.push(strategy);
        }
    }
    if strategies.is_empty() {
        strategies = Strategy::ALL.to_vec();
    }
    for (flag, records) in [("--records-batch1", args.records_batch1), ("--records-batch100", args.records_batch100)] {
        if records == 0 || records > MAX_RECORDS {
            bail!("{flag} {records} is out of range: accepted values are 1..={MAX_RECORDS}");
        }
    }
    if args.repeat == 0 || args.repeat > MAX_REPEAT {
        bail!("--repeat {} is out of range: accepted values are 1..={MAX_REPEAT}", args.repeat);
    }
    let (records_batch1, records_batch100, repeat, dir) =
        (args.records_batch1, args.records_batch100, args.repeat, args.dir.clone());
    Ok(Plan { journals, strategies, records_batch1, records_batch100, repeat, dir })
}

/// Every (journal, batch, strategy) to measure. The parallel strategies fetch one record at a
/// time whatever the batch, so they are measured at batch 1 only.
fn cases(plan: &Plan) -> Vec<Case> {
    let mut cases = Vec::new();
    for &journal in &plan.journals {
        for batch in BATCHES {
            let records = if batch == 1 { plan.records_batch1 } else { plan.records_batch100 };
            for &strategy in &plan.strategies {
                if batch == 1 || !strategy.rules().checkpoint.is_parallel() {
                    cases.push(Case { journal, batch, strategy, records });
                }
            }
        }
    }
    cases
}

/// Runs every case `repeat` times, round by round, so that slow phases of a shared machine
/// fall on every case alike rather than on whichever case happened to run then.
fn measure_all(plan: &Plan, cases: &[Case]) -> anyhow::Result<Vec<Measured>> {
    let mut measured: Vec<Measured> =
        cases.iter().map(|&case| Measured { case, seconds: Vec::new(), writes_per_record: 0.0 }).collect();
    for round in 1..=plan.repeat {
        let started = Instant::now();
        err!("round {round}/{}: {} measurements ... ", plan.repeat, cases.len())?;
        for entry in &mut measured {
            let (seconds, writes_per_record) = measure(&plan.dir, entry.case)?;
            entry.seconds.push(seconds);
            entry.writes_per_record = writes_per_record;
        }
        errln!("{:.1} s", started.elapsed().as_secs_f64())?;
    }
    Ok(measured)
}

/// One measurement in a fresh data directory: the log is filled and the store created
/// untimed, then only the owner's start and its run to the end of the log are timed.
/// Returns the seconds taken and the durable writes per record.
fn measure(dir: &Path, case: Case) -> anyhow::Result<(f64, f64)> {
    let scratch = Scratch::new(dir)?;
    let label = format!("{} batch {} {}", journal_name(case.journal), case.batch, case.strategy);
    let (store, log) = prepare(&scratch.path, case).with_context(|| format!("{label}: preparing the data"))?;
    let settings =
        Settings { batch: case.batch, commit_every: COMMIT_EVERY, inflight: INFLIGHT, ..Settings::new(case.strategy) };
    let started = Instant::now();
    let mut owner = Owner::start(store, log, GROUP, FIRST_OWNER, settings, CrashPlan::none())
        .with_context(|| format!("{label}: start"))?;
    let steps = owner.run_to_end(OnFenced::Stop).with_context(|| format!("{label}: run_to_end"))?;
    let seconds = started.elapsed().as_secs_f64();
    check(&owner, &steps, case.records).with_context(|| format!("{label}: wrong result"))?;
    let writes = steps.iter().filter(|(step, _)| step.kind != StepKind::Fetch).count();
    Ok((seconds, writes as f64 / case.records as f64))
}

/// Creates the store and appends the case's records of delta +1 (one fsync for all), then
/// hands back the store and a reader of the log, as a consumer process would open them.
fn prepare(path: &Path, case: Case) -> anyhow::Result<(Store, Log)> {
    let options = StoreOptions { journal: case.journal, ..StoreOptions::default() };
    let log_dir = path.join("log");
    let identity = Log::init(&log_dir, 1)?;
    consumer::txn::OutputLog::at(&consumer::log::Storage::Real, &log_dir, identity).create()?;
    consumer::external::ExternalDir::new(path).create()?;
    let store = Store::create(&path.join("store.db"), identity, options)?;
    {
        // The writer is dropped before the reader opens, releasing its lock as `append` does.
        let (mut writer, _) = Log::open_writer(&log_dir, identity)?;
        let payloads = vec![encode_delta(1); case.records as usize];
        writer.append_batch(0, &payloads)?;
    }
    let log = Log::open_reader(&log_dir, identity)?;
    Ok((store, log))
}

/// Without a crash every strategy must be exact: a wrong total or offset is a bug, not a number.
fn check(owner: &Owner, steps: &[(Step, Outcome)], records: u64) -> anyhow::Result<()> {
    if let Some((step, outcome)) = steps.iter().find(|(_, outcome)| outcome.fenced().is_some()) {
        bail!("step '{step}' was fenced ({outcome}) though no other owner exists");
    }
    let store = owner.store();
    match owner.state().strategy.rules().effect {
        EffectKind::Add => {
            let total = store.total(GROUP)?;
            if total != records as i64 {
                bail!("total is {total}, expected {records}");
            }
        }
        // A set's effect is the last record's value (spec.md §3.4).
        EffectKind::Set => {
            let (value, expected) = (store.value(GROUP)?, consumer::store::set_value(records - 1));
            if value != Some(expected) {
                bail!("value is {value:?}, expected {expected}");
            }
        }
    }
    for partition in 0..store.partitions() {
        let next_offset = store.progress(GROUP, partition)?.next_offset;
        if next_offset != records {
            bail!("partition {partition} committed next offset {next_offset}, expected {records}");
        }
    }
    Ok(())
}

/// A uniquely named directory under the bench directory, removed when dropped (also when a
/// measurement fails), so that runs leave nothing behind.
pub(crate) struct Scratch {
    pub(crate) path: PathBuf,
}

impl Scratch {
    pub(crate) fn new(parent: &Path) -> anyhow::Result<Scratch> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        loop {
            let path = parent.join(format!("run-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(Scratch { path }),
                // A leftover of an earlier process with the same id: take the next name.
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(error) => return Err(error).with_context(|| format!("cannot create {}", path.display())),
            }
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.path) {
            let _ = errln!("warning: cannot remove {}: {error}", self.path.display());
        }
    }
}

pub(crate) fn fsync_samples(dir: &Path, count: usize) -> anyhow::Result<Vec<f64>> {
    (0..count).map(|_| fsync_rate(dir, FSYNC_SAMPLE)).collect()
}

/// The disk's physical limit: 4 KiB rewritten in place then `sync_data`, in a loop, for
/// `duration`. The block is allocated before timing, so each fsync flushes data only (no file
/// size change), the cheapest durable write there is.
fn fsync_rate(dir: &Path, duration: Duration) -> anyhow::Result<f64> {
    fsync_rate_of(dir, duration, false)
}

/// Appends of 4 KiB, each followed by `sync_data`: what a WAL or log append costs at the
/// least, since every fsync must also make the new file size durable.
pub(crate) fn append_fsync_rate(dir: &Path, duration: Duration) -> anyhow::Result<f64> {
    fsync_rate_of(dir, duration, true)
}

fn fsync_rate_of(dir: &Path, duration: Duration, append: bool) -> anyhow::Result<f64> {
    let scratch = Scratch::new(dir)?;
    let path = scratch.path.join("fsync-probe");
    let fail = || format!("fsync probe {}", path.display());
    let file: File = OpenOptions::new().read(true).write(true).create_new(true).open(&path).with_context(fail)?;
    let block = [0x5au8; 4096];
    file.write_all_at(&block, 0).with_context(fail)?;
    file.sync_all().with_context(fail)?;
    let started = Instant::now();
    let mut fsyncs = 0u64;
    while started.elapsed() < duration {
        let at = if append { (fsyncs + 1) * block.len() as u64 } else { 0 };
        file.write_all_at(&block, at).with_context(fail)?;
        file.sync_data().with_context(fail)?;
        fsyncs += 1;
    }
    Ok(fsyncs as f64 / started.elapsed().as_secs_f64())
}

fn print_table(measured: &[Measured], fsync_rate: f64) -> Result<(), crate::out::OutputError> {
    outln!(
        "{:<11}  {:>5}  {:<18}  {:>8}  {:>9}  {:>10}  {:>10}  {:>8}",
        "journal",
        "batch",
        "strategy",
        "records",
        "median s",
        "records/s",
        "writes/rec",
        "x fsync"
    )?;
    for entry in measured {
        let case = entry.case;
        let rate = entry.records_per_second();
        outln!(
            "{:<11}  {:>5}  {:<18}  {:>8}  {:>9.3}  {:>10.0}  {:>10.3}  {:>8.3}",
            journal_name(case.journal),
            case.batch,
            case.strategy.name(),
            case.records,
            entry.median_seconds(),
            rate,
            entry.writes_per_record,
            rate / fsync_rate
        )?;
    }
    outln!(
        "(x fsync = records/s divided by the raw fsync rate below; \
         writes/rec = durable writes, steps other than fetch, per record)"
    )?;
    outln!(
        "(parallel strategies fetch one record at a time, up to --inflight {INFLIGHT}: \
         batch does not apply, measured at batch 1 only)"
    )?;
    outln!(
        "(periodic-commit and offset-stamp fetch at most --commit-every {COMMIT_EVERY} records at once: \
         their batch 100 acts as 10)"
    )?;
    Ok(())
}

fn print_fsync_line(samples: &[f64], fsync_rate: f64, per_phase: usize) -> Result<(), crate::out::OutputError> {
    let format = |rates: &[f64]| rates.iter().map(|rate| format!("{rate:.0}")).collect::<Vec<_>>().join(" ");
    let (before, after) = samples.split_at(per_phase.min(samples.len()));
    outln!(
        "raw fsync rate: {fsync_rate:.0} fsyncs/s (4 KiB rewrite + sync_data, \
         median of {} samples of {:.1} s; before: {}; after: {})",
        samples.len(),
        FSYNC_SAMPLE.as_secs_f64(),
        format(before),
        format(after)
    )?;
    Ok(())
}

/// Batch 100 over batch 1 in records/s, per journal and serial strategy: how well batching scales.
fn print_batch_ratios(measured: &[Measured]) -> Result<(), crate::out::OutputError> {
    let find = |journal, batch, strategy| {
        measured.iter().find(|m| m.case.journal == journal && m.case.batch == batch && m.case.strategy == strategy)
    };
    let mut lines = Vec::new();
    for entry in measured.iter().filter(|m| m.case.batch == 1) {
        let (journal, strategy) = (entry.case.journal, entry.case.strategy);
        let ratio = match find(journal, 100, strategy) {
            Some(batched) => format!("{:.1}x", batched.records_per_second() / entry.records_per_second()),
            None if strategy.rules().checkpoint.is_parallel() => "batch does not apply".to_string(),
            None => continue,
        };
        lines.push(format!("  {:<11}  {:<18}  {ratio}", journal_name(journal), strategy.name()));
    }
    if !lines.is_empty() {
        outln!("batch 100 / batch 1 (records/s):")?;
        for line in &lines {
            outln!("{line}")?;
        }
    }
    Ok(())
}

/// The target line: batch-1 atomic in WAL+FULL against one fsync per record.
fn print_summary(measured: &[Measured], fsync_rate: f64) -> Result<(), crate::out::OutputError> {
    let found = measured
        .iter()
        .find(|m| m.case.journal == Journal::Wal && m.case.batch == 1 && m.case.strategy == Strategy::Atomic);
    let Some(entry) = found else {
        outln!("batch-1 atomic in WAL+FULL: not measured (left out by --journal or --strategy)")?;
        return Ok(());
    };
    let rate = entry.records_per_second();
    let ratio = rate / fsync_rate;
    let verdict = if ratio * TARGET_FACTOR >= 1.0 { "met" } else { "not met" };
    outln!(
        "batch-1 atomic in WAL+FULL: {rate:.0} records/s = {ratio:.2} x the fsync rate \
         (target: within {TARGET_FACTOR}x of one fsync per record): {verdict}"
    )?;
    Ok(())
}

/// The target again, measured so that disk drift cannot decide it: each batch-1 atomic WAL run
/// is bracketed by fsync samples taken right before and after it, and its ratio is to their
/// mean. The verdict uses the median of the per-pair ratios.
fn print_paired_target(plan: &Plan) -> anyhow::Result<()> {
    let case = Case { journal: Journal::Wal, batch: 1, strategy: Strategy::Atomic, records: plan.records_batch1 };
    let (mut ratios, mut append_ratios) = (Vec::new(), Vec::new());
    for _ in 0..plan.repeat.max(3) {
        let before = fsync_rate(&plan.dir, FSYNC_SAMPLE)?;
        let append_before = append_fsync_rate(&plan.dir, FSYNC_SAMPLE)?;
        let (seconds, _) = measure(&plan.dir, case)?;
        let append_after = append_fsync_rate(&plan.dir, FSYNC_SAMPLE)?;
        let after = fsync_rate(&plan.dir, FSYNC_SAMPLE)?;
        let rate = case.records as f64 / seconds;
        ratios.push(rate / ((before + after) / 2.0));
        append_ratios.push(rate / ((append_before + append_after) / 2.0));
        outln!(
            "  paired: fsync {before:.0}/s, append+fsync {append_before:.0}/s, atomic WAL batch 1 {rate:.0} records/s, \
             append+fsync {append_after:.0}/s, fsync {after:.0}/s"
        )?;
    }
    for (label, ratios) in [("in-place fsync", &ratios), ("append+fsync", &append_ratios)] {
        let ratio = median(ratios);
        let verdict = if ratio * TARGET_FACTOR >= 1.0 { "met" } else { "not met" };
        outln!(
            "paired batch-1 atomic in WAL+FULL: median {ratio:.2} x the adjacent {label} rate over {} pairs \
             (target: within {TARGET_FACTOR}x): {verdict}",
            ratios.len()
        )?;
    }
    Ok(())
}

fn journal_name(journal: Journal) -> &'static str {
    match journal {
        Journal::Delete => "DELETE+EXTRA",
        Journal::Wal => "WAL+FULL",
    }
}

/// The median; the mean of the middle two for an even count. Callers never pass an empty slice.
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    }
}
