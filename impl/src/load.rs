//! `consumer load`: a bounded load test. Owner processes of several groups consume a large log
//! while a coordinator moves partitions between them and kills them at random; at the end every
//! group's total is compared with the exact sum.
//!
//! Every exit path takes the owner processes with it: they live in an [`Owners`] guard whose
//! `Drop` kills (SIGKILL) and reaps them, so a timeout, an error or a SIGTERM/SIGINT (caught by
//! [`Stop`], which makes the coordinator's loop stop) leaves none running. Each owner also gets
//! `PR_SET_PDEATHSIG` (SIGKILL), so that even a SIGKILL of `load` itself takes them down.

use anyhow::{bail, Context};
use clap::Args;
use consumer::external::ExternalDir;
use consumer::log::{encode_delta, Log, Storage};
use consumer::owner::FIRST_OWNER;
use consumer::store::{Location, Store, StoreOptions, PARTITIONS_MAX};
use consumer::strategy::{EffectKind, GuardKind, Rules, Sequence, Strategy};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct LoadArgs {
    /// A fresh data directory (created; refused if it exists).
    #[arg(long)]
    dir: PathBuf,
    /// The store: a fresh PostgreSQL database URL (default: an SQLite file in --dir).
    #[arg(long)]
    store: Option<String>,
    /// Strategies to run, one after the other, each on its own groups.
    #[arg(long = "strategy", required = true)]
    strategies: Vec<Strategy>,
    /// Records of +1, spread over the partitions (1..=10000000).
    #[arg(long, allow_hyphen_values = true, default_value_t = 100_000, value_parser = crate::count_in::<u64>(1, RECORDS_MAX))]
    records: u64,
    /// Partitions of the log (1..=64).
    #[arg(long, allow_hyphen_values = true, default_value_t = 2, value_parser = crate::count_in::<u32>(1, u64::from(PARTITIONS_MAX)))]
    partitions: u32,
    /// Consumer groups per strategy (1..=16).
    #[arg(long, allow_hyphen_values = true, default_value_t = 2, value_parser = crate::count_in::<u32>(1, GROUPS_MAX))]
    groups: u32,
    /// Owner processes per group (2..=16).
    #[arg(long, allow_hyphen_values = true, default_value_t = 4, value_parser = crate::count_in::<u32>(2, OWNERS_MAX))]
    owners: u32,
    /// Records fetched and written together (1..=10000).
    #[arg(long, allow_hyphen_values = true, default_value_t = 100, value_parser = crate::count_in::<usize>(1, crate::BATCH_MAX))]
    batch: usize,
    /// Milliseconds between rebalances (a random partition of a random group to another owner;
    /// 1..=3600000).
    #[arg(long, allow_hyphen_values = true, default_value_t = 300, value_parser = crate::count_in::<u64>(1, MILLISECONDS_MAX))]
    rebalance_ms: u64,
    /// Milliseconds between SIGKILLs of a random owner process (restarted at once; 1..=3600000).
    #[arg(long, allow_hyphen_values = true, default_value_t = 500, value_parser = crate::count_in::<u64>(1, MILLISECONDS_MAX))]
    kill_ms: u64,
    /// Seed of the coordinator's choices.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1, value_parser = crate::count_in::<u64>(0, u64::MAX))]
    seed: u64,
    /// Give up (and fail) after this many seconds per strategy (1..=86400).
    #[arg(long, allow_hyphen_values = true, default_value_t = 300, value_parser = crate::count_in::<u64>(1, TIMEOUT_SECONDS_MAX))]
    timeout: u64,
}

/// The bounds of the load test's flags: far above any run on these machines, low enough that a
/// typo cannot start a thousand processes or append for a day.
const RECORDS_MAX: u64 = 10_000_000;
const GROUPS_MAX: u64 = 16;
const OWNERS_MAX: u64 = 16;
const MILLISECONDS_MAX: u64 = 3_600_000;
const TIMEOUT_SECONDS_MAX: u64 = 86_400;

/// SplitMix64, so a seed names the same sequence of rebalances and kills.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u32) -> u32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % u64::from(bound)) as u32
    }
}

/// What one strategy's run did.
struct Outcome {
    totals: Vec<i64>,
    seconds: f64,
    kills: u32,
    rebalances: u32,
}

/// The signal (SIGTERM or SIGINT) that asked `load` to stop, 0 while none has.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn note_stop_signal(signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP_SIGNAL.store(signal, Ordering::SeqCst);
}

/// SIGTERM and SIGINT stop the load test: the handler only notes the signal; the coordinator
/// checks it between steps, returns [`Interrupted`], and the [`Owners`] guard kills its children.
struct Stop;

impl Stop {
    fn install() -> anyhow::Result<()> {
        for signal in [libc::SIGTERM, libc::SIGINT] {
            // SAFETY: a zeroed sigaction with a handler that only stores into an atomic.
            let installed = unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = note_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                libc::sigemptyset(&mut action.sa_mask);
                action.sa_flags = libc::SA_RESTART;
                libc::sigaction(signal, &action, std::ptr::null_mut())
            };
            if installed != 0 {
                return Err(std::io::Error::last_os_error()).context("cannot install a signal handler");
            }
        }
        Ok(())
    }

    /// An [`Interrupted`] error once a stop signal arrived.
    fn check() -> anyhow::Result<()> {
        match STOP_SIGNAL.load(Ordering::SeqCst) {
            0 => Ok(()),
            signal => Err(Interrupted(signal).into()),
        }
    }
}

/// `load` stopped by a signal; it exits 128 + the signal's number (docs/real-consumer.md, `load`).
#[derive(Debug)]
struct Interrupted(i32);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.0 {
            libc::SIGTERM => "SIGTERM",
            libc::SIGINT => "SIGINT",
            _ => "a signal",
        };
        write!(f, "stopped by {name}; owner processes killed")
    }
}

impl std::error::Error for Interrupted {}

/// The owner processes of one strategy's run, by group. Dropping it (every return, `?` and
/// unwinding included) kills every child still running and waits for each.
struct Owners(Vec<Vec<Child>>);

impl Drop for Owners {
    fn drop(&mut self) {
        for child in self.0.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn run(args: LoadArgs) -> anyhow::Result<ExitCode> {
    Stop::install()?;
    match run_all(args) {
        Err(error) => match error.downcast_ref::<Interrupted>() {
            Some(&Interrupted(signal)) => {
                errln!("error: {error}")?;
                Ok(ExitCode::from(128 + signal as u8))
            }
            None => Err(error),
        },
        ok => ok,
    }
}

fn run_all(args: LoadArgs) -> anyhow::Result<ExitCode> {
    outln!("{}", crate::TOOL)?;
    if args.dir.exists() {
        bail!("--dir {} exists: the load test needs a fresh directory", args.dir.display());
    }
    std::fs::create_dir_all(&args.dir).with_context(|| format!("cannot create {}", args.dir.display()))?;
    let location = match &args.store {
        Some(url) => Location::parse(url),
        None => Location::Sqlite(args.dir.join("store.db")),
    };
    let log_dir = args.dir.join("log");
    let identity = Log::init(&log_dir, args.partitions)?;
    consumer::txn::OutputLog::at(&Storage::Real, &log_dir, identity).create()?;
    ExternalDir::new(&args.dir).create()?;
    let mut store = Store::create_at(&location, identity, StoreOptions::default())?;
    outln!("store: {}", store.describe())?;
    let (mut log, _) = Log::open_writer(&log_dir, identity)?;
    let per_partition = args.records / u64::from(args.partitions);
    for partition in 0..args.partitions {
        for chunk in (0..per_partition).collect::<Vec<_>>().chunks(10_000) {
            Stop::check()?;
            log.append_batch(partition, &vec![encode_delta(1); chunk.len()])?;
        }
    }
    drop(log);
    let exact = (per_partition * u64::from(args.partitions)) as i64;
    outln!(
        "{} records of +1 on {} partitions; {} groups x {} owner processes per strategy; \
         rebalance every {} ms, SIGKILL every {} ms",
        exact,
        args.partitions,
        args.groups,
        args.owners,
        args.rebalance_ms,
        args.kill_ms
    )?;
    let mut failed = false;
    for &strategy in &args.strategies {
        let outcome = run_strategy(&args, &mut store, strategy)?;
        let rate = exact as f64 * f64::from(args.groups) / outcome.seconds;
        for (group, total) in outcome.totals.iter().enumerate() {
            if strategy.rules().effect == EffectKind::Set {
                // A set's effect is its value (spec.md §3.4), which the partitions share.
                outln!("{strategy:<18} group {group}: a set: its effect is the value, not the total")?;
                continue;
            }
            let difference = total - exact;
            let verdict = match difference {
                0 => "exact".to_string(),
                d if d > 0 => format!("{d} duplicate applications"),
                d => format!("{} records skipped (net)", -d),
            };
            outln!("{strategy:<18} group {group}: total {total} vs {exact}: {verdict}")?;
            failed |= is_exact_without_poison(strategy.rules()) && difference != 0;
        }
        outln!(
            "{strategy:<18} {:.1} s, {rate:.0} records/s (all groups), survived {} kills and {} rebalances",
            outcome.seconds,
            outcome.kills,
            outcome.rebalances
        )?;
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// Whether a strategy's totals must come out exact here: its effect and its checkpoint are one
/// transaction, and that transaction's guard stops a zombie owner (fenced) or a replayed
/// record (CAS). Such a strategy is exact under crashes, rebalances and zombies as long as no
/// record is poison, and the load test appends none; the poison policy then never acts.
fn is_exact_without_poison(rules: Rules) -> bool {
    // The transactional sequence's effect and checkpoint are `commit-txn`'s one transaction;
    // the email and dual-write sequences' are their `apply-atomic`'s (the email and the index
    // are apart from it, and apart from the total).
    let one_transaction = rules.sequence.is_atomic() || rules.sequence == Sequence::Transactional;
    let guarded = match rules.guard {
        GuardKind::Fenced | GuardKind::Cas => true,
        GuardKind::Blind => false,
    };
    one_transaction && guarded
}

fn run_strategy(args: &LoadArgs, store: &mut Store, strategy: Strategy) -> anyhow::Result<Outcome> {
    let groups: Vec<String> = (0..args.groups).map(|g| format!("{strategy}-g{g}")).collect();
    for group in &groups {
        store.ensure_group(group, FIRST_OWNER)?;
    }
    // Each child joins the guard as soon as it is started, so that a failure to start the next
    // one (or a signal) still kills it.
    let mut owners = Owners(Vec::new());
    for group in &groups {
        owners.0.push(Vec::new());
        for owner in 0..args.owners {
            Stop::check()?;
            let child = spawn(args, strategy, group, owner)?;
            owners.0.last_mut().expect("just pushed").push(child);
        }
    }
    // Spread the partitions over the owners first, so that every owner has work.
    let mut rebalances = 0;
    for group in &groups {
        for partition in 0..args.partitions {
            store.claim(group, partition, &format!("o{}", partition % args.owners))?;
            rebalances += 1;
        }
    }
    let mut rng = Rng(args.seed);
    let started = Instant::now();
    let (mut next_rebalance, mut next_kill, mut kills) = (started, started, 0);
    loop {
        Stop::check()?;
        if done(store, &groups, args.partitions, args.records / u64::from(args.partitions))? {
            break;
        }
        if started.elapsed() > Duration::from_secs(args.timeout) {
            bail!("{strategy}: not done after {} s", args.timeout);
        }
        let now = Instant::now();
        if now >= next_rebalance {
            let group = rng.below(args.groups) as usize;
            let partition = rng.below(args.partitions);
            store.claim(&groups[group], partition, &format!("o{}", rng.below(args.owners)))?;
            rebalances += 1;
            next_rebalance = now + Duration::from_millis(args.rebalance_ms);
        }
        if now >= next_kill {
            let (group, owner) = (rng.below(args.groups) as usize, rng.below(args.owners) as usize);
            let child = &mut owners.0[group][owner];
            let _ = child.kill();
            let _ = child.wait();
            *child = spawn(args, strategy, &groups[group], owner as u32)?;
            kills += 1;
            next_kill = now + Duration::from_millis(args.kill_ms);
        }
        restart_exited(args, strategy, &groups, &mut owners.0)?;
        std::thread::sleep(Duration::from_millis(20));
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(owners);
    let totals = groups.iter().map(|g| store.total(g)).collect::<Result<_, _>>()?;
    Ok(Outcome { totals, seconds, kills, rebalances })
}

fn spawn(args: &LoadArgs, strategy: Strategy, group: &str, owner: u32) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("cannot find the consumer binary")?;
    let mut command = Command::new(exe);
    let parent = libc::pid_t::try_from(std::process::id()).expect("a pid fits pid_t");
    // SAFETY: prctl and getppid are async-signal-safe and touch nothing of the parent's state.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // `load` may have died between the fork and the prctl: then no parent-death signal
            // will ever come, and the owner would run on, orphaned. Its parent is no longer
            // `load` then, so it stops here instead of starting.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("load died before its owner started"));
            }
            Ok(())
        });
    }
    command
        .args(["consume", "--follow", "--group", group, "--owner", &format!("o{owner}"), "--strategy", strategy.name()])
        .args(["--batch", &args.batch.to_string(), "--commit-every", &args.batch.to_string()])
        .arg("--dir")
        .arg(&args.dir)
        .args(args.store.iter().flat_map(|url| ["--store", url.as_str()]))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start an owner process")
}

/// An owner that stopped on its own (its group looked done, or an error) is started again,
/// so that every owner keeps taking part until the whole run is done.
fn restart_exited(
    args: &LoadArgs,
    strategy: Strategy,
    groups: &[String],
    owners: &mut [Vec<Child>],
) -> anyhow::Result<()> {
    for (group, children) in groups.iter().zip(owners.iter_mut()) {
        for (owner, child) in children.iter_mut().enumerate() {
            if child.try_wait()?.is_some() {
                *child = spawn(args, strategy, group, owner as u32)?;
            }
        }
    }
    Ok(())
}

/// Whether every group committed every partition up to its end (`per_partition` records).
fn done(store: &Store, groups: &[String], partitions: u32, per_partition: u64) -> anyhow::Result<bool> {
    for group in groups {
        for partition in 0..partitions {
            if store.progress(group, partition)?.next_offset < per_partition {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The strategies held to the exact sum are the guarded atomic ones, the poison strategies
    /// among them (their policy never acts on a log without poison).
    #[test]
    fn the_guarded_atomic_strategies_must_be_exact() {
        let exact: Vec<Strategy> = Strategy::ALL.into_iter().filter(|s| is_exact_without_poison(s.rules())).collect();
        let expected = [
            Strategy::AtomicFenced,
            Strategy::AtomicCas,
            Strategy::AtomicDlq,
            Strategy::SkipPoison,
            Strategy::RetryForever,
            Strategy::TxnFenced,
            Strategy::AtomicPlusEmail,
            Strategy::EmailIdempotencyKey,
            Strategy::EmailNoKey,
            Strategy::DualWrite,
            Strategy::Outbox,
        ];
        assert_eq!(exact, expected);
    }
}
