//! Seeded random walks of every strategy in `Strategy::ALL`, at fault-heavy bounds, replayed
//! against the real consumer (in process). The `holds` cells are claims about every
//! interleaving; the corpus replays a few chosen ones, the walks many more, so a defence
//! removed from the real code (a fence, a CAS, a dedup insert) fails here even where no
//! counterexample of the model exercises it. A new row is walked as soon as it is in `ALL`.

use conformance::batch::{replay_generated, Generated};
use conformance::driver::Mode;
use conformance::harness::Options;
use model::{Config, Strategy};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Walks per strategy: one or two seconds each in a debug build (40 to 70 walks per second),
/// and they run on every core.
const WALKS_PER_STRATEGY: usize = 100;
const SEED: u64 = 0x5eed;
const STEPS_MAX: usize = 80;
/// The family's cap: past it the test fails rather than letting CI run long. It is a cap, not
/// a speed target: the walks take about a tenth of it.
const FAMILY_CAP: Duration = Duration::from_secs(300);

/// Fault-heavy bounds: three owners (two can be zombies at once), two partitions, two crashes
/// and two rebalances, and every other fault budget at 1 or more (a lost acknowledgement, a
/// retention step, a second live incarnation, a log loss; the poison rows keep their poison
/// record), whatever the row's defaults.
fn fault_heavy(strategy: Strategy) -> Config {
    let row = Config::new(strategy);
    Config {
        owners: 3,
        partitions: 2,
        crashes: 2,
        rebalances: 2,
        ack_losses: row.ack_losses.max(1),
        retentions: row.retentions.max(1),
        pauses: row.pauses.max(1),
        log_losses: row.log_losses.max(1),
        ..row
    }
}

#[test]
fn random_walks_of_every_strategy_conform_under_faults() {
    let started = Instant::now();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("walk-divergences");
    let next = AtomicUsize::new(0);
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    std::thread::scope(|scope| {
        for _ in 0..cores {
            scope.spawn(|| {
                while let Some(&strategy) = Strategy::ALL.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let outcome = walk(strategy, &out, started);
                    failures.lock().expect("no walker panics holding the lock").extend(outcome);
                }
            });
        }
    });
    let failures = failures.into_inner().expect("no walker panicked");
    assert!(failures.is_empty(), "{} strategies diverged:\n{}", failures.len(), failures.join("\n\n"));
}

/// Walks one strategy; `Some` describes its divergences (with the reproduce commands).
fn walk(strategy: Strategy, out: &Path, started: Instant) -> Option<String> {
    let config = fault_heavy(strategy);
    config.validate().unwrap_or_else(|why| panic!("{strategy}: the walk bounds are invalid: {why}"));
    assert!(started.elapsed() < FAMILY_CAP, "the walks passed their cap of {FAMILY_CAP:?} before {strategy}");
    let options = Options::new(Mode::InProcess);
    let mut lines: Vec<String> = Vec::new();
    let generated = Generated::Walks { count: WALKS_PER_STRATEGY, seed: SEED, steps_max: STEPS_MAX };
    let summary = replay_generated(&config, generated, &options, out, &mut |line| lines.push(line.into()))
        .unwrap_or_else(|error| panic!("{strategy}: {error}"));
    eprintln!("{strategy}: {summary}");
    // Every walk must do something: an empty walk would make the family vacuous.
    assert_eq!(summary.traces, WALKS_PER_STRATEGY, "{strategy}");
    assert!(summary.steps >= WALKS_PER_STRATEGY, "{strategy}: the walks took only {} steps", summary.steps);
    (summary.divergences > 0).then(|| format!("{strategy}: {summary}\n{}", lines.join("\n")))
}
