//! Seeded random walks of every strategy in `Strategy::ALL`, at fault-heavy bounds, replayed
//! against the real consumer (in process). The `holds` cells are claims about every
//! interleaving; the corpus replays a few chosen ones, the walks many more, so a defence
//! removed from the real code (a fence, a CAS, a dedup insert) fails here even where no
//! counterexample of the model exercises it. A new row is walked as soon as it is in `ALL`.

use conformance::batch::{replay_generated, Generated};
use conformance::driver::Mode;
use conformance::harness::Options;
use model::strategy::{Replication, Sequence};
use model::{Config, Strategy};
use std::panic::{self, AssertUnwindSafe};
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
/// and two rebalances, and every other fault budget of the row's log at 1 or more (a lost
/// acknowledgement, a second live incarnation; on a plain log a retention step and a log loss,
/// on a replicated one a leader failure and an ISR shrink; the poison rows keep their poison
/// record), whatever the row's defaults. A replicated log has neither retention nor a lost
/// tail (the real one refuses retention, and its losses are elections: spec.md §10), and the
/// txn rows keep their one group (its transactions write the output).
fn fault_heavy(strategy: Strategy) -> Config {
    let row = Config::new(strategy);
    let replicated = match strategy.rules().replication {
        Replication::Single => false,
        Replication::Replicated(_) => true,
    };
    let (plain_log, replica) = (u8::from(!replicated), u8::from(replicated));
    Config {
        owners: 3,
        partitions: 2,
        crashes: 2,
        rebalances: 2,
        ack_losses: row.ack_losses.max(1),
        retentions: row.retentions.max(1).min(plain_log),
        pauses: row.pauses.max(1),
        log_losses: row.log_losses.max(1).min(plain_log),
        leader_failures: row.leader_failures.max(replica),
        isr_shrinks: row.isr_shrinks.max(replica),
        ..row
    }
}

/// The bounds the walks promise: the acks rows meet a leader failure and an ISR shrink, the
/// txn rows keep their one group, every row at least three owners and two partitions.
#[test]
fn the_fault_heavy_bounds_strike_every_row_where_it_matters() {
    for strategy in Strategy::ALL {
        let config = fault_heavy(strategy);
        config.validate().unwrap_or_else(|why| panic!("{strategy}: the walk bounds are invalid: {why}"));
        assert!(config.owners >= 3 && config.partitions >= 2 && config.crashes >= 2, "{strategy}");
        match strategy.rules().replication {
            Replication::Replicated(_) => {
                assert!(config.leader_failures >= 1 && config.isr_shrinks >= 1, "{strategy}: {config:?}");
                assert_eq!((config.retentions, config.log_losses), (0, 0), "{strategy}");
            }
            Replication::Single => assert!(config.retentions >= 1 && config.log_losses >= 1, "{strategy}"),
        }
        if strategy.rules().sequence == Sequence::Transactional {
            assert_eq!(config.groups, 1, "{strategy}: the txn rows have one group");
        }
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
                // The first divergence ends the family: the walkers finish the strategies they
                // hold and take no new one. A divergence already fails the test with its
                // reproduce command, and stopping early is what makes a planted bug cheap to
                // catch (the mutation run of MUTANTS.md runs this test once per mutant).
                while let Some(&strategy) = Strategy::ALL.get(next.fetch_add(1, Ordering::Relaxed)) {
                    // A panic (a consumer's assertion, a broken bound) is a failure like a
                    // divergence: it ends the family too, with its message.
                    let outcome = panic::catch_unwind(AssertUnwindSafe(|| walk(strategy, &out, started)))
                        .unwrap_or_else(|payload| Some(format!("{strategy}: panicked: {}", panic_message(&*payload))));
                    let mut failures = failures.lock().expect("no walker panics holding the lock");
                    failures.extend(outcome);
                    if !failures.is_empty() {
                        next.store(Strategy::ALL.len(), Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().expect("no walker panicked");
    assert!(
        failures.is_empty(),
        "{} strategies diverged (the walks stop at the first divergence, so strategies not yet walked are not \
         listed):\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// A panic's message: a `&str` or `String` payload (what `panic!` makes), else a placeholder.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(message), _) => (*message).to_string(),
        (None, Some(message)) => message.clone(),
        (None, None) => "a panic without a message".to_string(),
    }
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
