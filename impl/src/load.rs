//! `consumer load`: a bounded load test. Owner processes of several groups consume a large log
//! while a coordinator moves partitions between them and kills them at random; at the end every
//! group's total is compared with the exact sum.

use anyhow::{bail, Context};
use clap::Args;
use consumer::external::ExternalDir;
use consumer::log::{encode_delta, Log, Storage};
use consumer::owner::FIRST_OWNER;
use consumer::store::{Location, Store, StoreOptions, PARTITIONS_MAX};
use consumer::strategy::{EffectKind, GuardKind, Rules, Sequence, Strategy};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
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

pub fn run(args: LoadArgs) -> anyhow::Result<ExitCode> {
    println!("{}", crate::TOOL);
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
    println!("store: {}", store.describe());
    let (mut log, _) = Log::open_writer(&log_dir, identity)?;
    let per_partition = args.records / u64::from(args.partitions);
    for partition in 0..args.partitions {
        for chunk in (0..per_partition).collect::<Vec<_>>().chunks(10_000) {
            log.append_batch(partition, &vec![encode_delta(1); chunk.len()])?;
        }
    }
    drop(log);
    let exact = (per_partition * u64::from(args.partitions)) as i64;
    println!(
        "{} records of +1 on {} partitions; {} groups x {} owner processes per strategy; \
         rebalance every {} ms, SIGKILL every {} ms",
        exact, args.partitions, args.groups, args.owners, args.rebalance_ms, args.kill_ms
    );
    let mut failed = false;
    for &strategy in &args.strategies {
        let outcome = run_strategy(&args, &mut store, strategy)?;
        let rate = exact as f64 * f64::from(args.groups) / outcome.seconds;
        for (group, total) in outcome.totals.iter().enumerate() {
            if strategy.rules().effect == EffectKind::Set {
                // A set's effect is its value (spec.md §3.4), which the partitions share.
                println!("{strategy:<18} group {group}: a set: its effect is the value, not the total");
                continue;
            }
            let difference = total - exact;
            let verdict = match difference {
                0 => "exact".to_string(),
                d if d > 0 => format!("{d} duplicate applications"),
                d => format!("{} records skipped (net)", -d),
            };
            println!("{strategy:<18} group {group}: total {total} vs {exact}: {verdict}");
            failed |= is_exact_without_poison(strategy.rules()) && difference != 0;
        }
        println!(
            "{strategy:<18} {:.1} s, {rate:.0} records/s (all groups), survived {} kills and {} rebalances",
            outcome.seconds, outcome.kills, outcome.rebalances
        );
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
    let mut owners: Vec<Vec<Child>> = Vec::new();
    for group in &groups {
        owners.push((0..args.owners).map(|o| spawn(args, strategy, group, o)).collect::<anyhow::Result<_>>()?);
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
            let child = &mut owners[group][owner];
            let _ = child.kill();
            let _ = child.wait();
            *child = spawn(args, strategy, &groups[group], owner as u32)?;
            kills += 1;
            next_kill = now + Duration::from_millis(args.kill_ms);
        }
        restart_exited(args, strategy, &groups, &mut owners)?;
        std::thread::sleep(Duration::from_millis(20));
    }
    let seconds = started.elapsed().as_secs_f64();
    for child in owners.iter_mut().flatten() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let totals = groups.iter().map(|g| store.total(g)).collect::<Result<_, _>>()?;
    Ok(Outcome { totals, seconds, kills, rebalances })
}

fn spawn(args: &LoadArgs, strategy: Strategy, group: &str, owner: u32) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("cannot find the consumer binary")?;
    Command::new(exe)
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
