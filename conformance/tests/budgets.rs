//! The example consumers of `examples/` at every fault budget: seeded walks with three owners,
//! two partitions, two crashes, two rebalances, a second live incarnation, a retention step, a
//! lost tail of the log and a lost acknowledgement (`conformance test --worker CMD --strategy
//! ROW --owners 3 --partitions 2 --crashes 2 --rebalances 2 --pauses 1 --retentions 1
//! --log-losses 1 --ack-losses 1`), killed inside steps too (the default), with power cuts, and
//! with races off (they are judged on the corpus, `protocol.rs`). The row's default
//! bounds (`protocol.rs`, the corpus) leave retention and log losses out, so only these walks
//! ask the examples for `fail-out-of-range` and `refuse-ahead`: every example conforms on them,
//! the walks strike every fault among them (checked, so that a change of the walks cannot leave
//! a step untried), and each broken example is still caught at these bounds.
//!
//! Needs `python3` and `perl` with DBD::SQLite on PATH (`bash scripts/setup.sh` installs them):
//! without one, an example's walks print `skipped: python3 not installed (bash scripts/setup.sh
//! installs it)` (or Perl's DBD::SQLite's) and are left out, unless `CI` is set: then the test
//! fails.

#[path = "../../tests/support/tools.rs"]
mod tools;

use conformance::batch::{replay_generated, Generated};
use conformance::driver::Mode;
use conformance::generate;
use conformance::harness::Options;
use conformance::observe::ObserveSpec;
use conformance::protocol::shell_quote;
use conformance::replay::Inside;
use model::{Action, Config, ConsumerModel, Strategy};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The first walk's seed; walk `i` is seed `SEED + i`, as `conformance test --seed` numbers them.
const SEED: u64 = 1;
const STEPS_MAX: usize = 60;
/// Each test's cap: past it the test fails rather than letting CI run long. It is a guard, not
/// a benchmark: each example's walks take 14 to 19 s here (their stores read by their SQL, so
/// no store-role process starts per kill point).
const CAP: Duration = Duration::from_secs(180);

/// Every fault budget at 1 or more; the rest (groups, records) the row's.
fn every_budget(row: Strategy) -> Config {
    Config {
        owners: 3,
        partitions: 2,
        crashes: 2,
        rebalances: 2,
        pauses: 1,
        retentions: 1,
        log_losses: 1,
        ack_losses: 1,
        ..Config::new(row)
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The command of the example `examples/DIR/SCRIPT` with `flags` (`.pl` Perl's, `.py`
/// Python's), through the interpreter's real path (as in protocol.rs: a version manager's shim
/// would cost every process, and every kill point's reader, a dozen more), and the observation
/// spec its directory ships: the walks read the store by its SQL, so no store role is trusted.
/// `None` when the interpreter or its modules are missing (skipped, saying so).
fn example(script: &str, flags: &str) -> Option<(String, PathBuf)> {
    let (interpreter, dir) = match script.rsplit_once('.') {
        Some((_, "pl")) => (tools::perl()?, "perl"),
        _ => (tools::python3()?, "python"),
    };
    let path = root().join("examples").join(dir).join(script);
    let spec = root().join("examples").join(dir).join("store.observe.toml");
    Some((format!("{} {}{flags}", shell_quote(&interpreter), shell_quote(&path.to_string_lossy())), spec))
}

/// What the walks of an example must show.
enum Expect {
    /// Every walk conforms; together they strike every fault of the budgets and ask for both
    /// stopping steps, and kill points inside steps were found and judged.
    Conforms,
    /// The broken example: at least one walk diverges, and each divergence's report contains
    /// every one of these (the bug's signature; `a|b`: either of them).
    Caught(&'static [&'static str]),
}

/// One example's walks at every budget.
struct Walks {
    script: &'static str,
    flags: &'static str,
    row: Strategy,
    walks: u64,
    expect: Expect,
}

/// Whether a walk's actions strike a fault or take a step.
type Strikes = fn(&[Action]) -> bool;

/// The faults and steps the conforming walks must strike, each with the test on a walk's actions.
const STRUCK: &[(&str, Strikes)] = &[
    ("a crash and then a restart", |walk| {
        let crash = walk.iter().position(|a| matches!(a, Action::Crash { .. }));
        crash.is_some_and(|at| walk[at..].iter().any(|a| matches!(a, Action::Restart { .. })))
    }),
    ("a pause (a second live incarnation)", |walk| walk.iter().any(|a| matches!(a, Action::Pause { .. }))),
    ("a rebalance", |walk| walk.iter().any(|a| matches!(a, Action::Rebalance { .. }))),
    ("a retention step", |walk| walk.iter().any(|a| matches!(a, Action::Retain { .. }))),
    ("a lost tail of the log", |walk| walk.iter().any(|a| matches!(a, Action::LoseTail { .. }))),
    ("a lost acknowledgement", |walk| walk.iter().any(|a| matches!(a, Action::AppendAckLost { .. }))),
    ("fail-out-of-range", |walk| walk.iter().any(|a| matches!(a, Action::FailOutOfRange { .. }))),
    ("refuse-ahead", |walk| walk.iter().any(|a| matches!(a, Action::RefuseAhead { .. }))),
];

/// Replays the example's walks (each on its own, the cap checked between them) and checks
/// what `expect` says; prints the figures (walks, steps, kill points, seconds). Returns at once
/// when the example's interpreter is missing (skipped, saying so, outside CI).
fn walk_at_every_budget(case: &Walks) {
    let Some((command, spec)) = example(case.script, case.flags) else { return };
    let config = every_budget(case.row);
    config.validate().unwrap_or_else(|why| panic!("{}: the bounds are invalid: {why}", case.row));
    let observe = ObserveSpec::load(&spec).unwrap_or_else(|error| panic!("{error}"));
    // Races are judged on the corpus (tests/protocol.rs: the examples conform raced, the
    // broken consumers are caught); over these walks' many writes they would take the family
    // past its cap, so here they are off, and the reproducing command says so.
    let options = Options {
        command: Some(command.clone()),
        inside_step: true,
        races: false,
        observe: Some(std::sync::Arc::new(observe)),
        ..Options::new(Mode::Protocol)
    };
    conformance::harness::check_observation(&config, &options).unwrap_or_else(|error| panic!("{error}"));
    let reproduce = format!(
        "cargo run -p conformance -- test {} --races off --worker {} --observe {} --walks {} --seed {SEED} --steps-max {STEPS_MAX}",
        config.flags(),
        shell_quote(&command),
        shell_quote(&spec.to_string_lossy()),
        case.walks
    );
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("budgets").join(format!("{}{}", case.script, case.flags));
    let model = ConsumerModel::new(config.clone());
    let started = Instant::now();
    let (mut steps, mut inside, mut reports, mut walks) = (0, Inside::default(), Vec::new(), Vec::new());
    for index in 0..case.walks {
        let elapsed = started.elapsed();
        assert!(
            elapsed < CAP,
            "'{command}' passed the cap of {CAP:?} at walk {index} ({elapsed:?})\nreproduce: {reproduce}"
        );
        let generated = Generated::Walks { count: 1, seed: SEED + index, steps_max: STEPS_MAX };
        let mut report = |line: &str| {
            if line.starts_with("DIVERGES") {
                reports.push(line.to_string());
            }
        };
        let summary = replay_generated(&config, generated, &options, &out, &mut report).expect("the walk runs");
        steps += summary.steps;
        inside += summary.inside;
        walks.push(generate::walk(&model, SEED + index, STEPS_MAX));
    }
    let elapsed = started.elapsed();
    let seconds = elapsed.as_secs_f64();
    println!(
        "{}{} ({}): {} walks from seed {SEED}, {steps} steps, {} diverged; {}; {seconds:.1} s",
        case.script,
        case.flags,
        case.row,
        case.walks,
        reports.len(),
        inside.summary(true)
    );
    assert!(elapsed < CAP, "'{command}': the walks passed the cap of {CAP:?} ({elapsed:?})\nreproduce: {reproduce}");
    match case.expect {
        Expect::Conforms => {
            assert!(reports.is_empty(), "'{command}' diverges:\n{}\nreproduce: {reproduce}", reports.join("\n"));
            for (fault, struck) in STRUCK {
                let seeds = format!("seeds {SEED}..={}", SEED + case.walks - 1);
                assert!(
                    walks.iter().any(|walk| struck(walk)),
                    "{}: no walk of {seeds} has {fault} (walk more)",
                    case.row
                );
            }
            assert!(
                inside.found > 0 && inside.judged == inside.found,
                "'{command}': kill points {inside:?}\nreproduce: {reproduce}"
            );
            assert_eq!(
                inside.writes_unseen, 0,
                "'{command}': a write step showed no kill point: {inside:?}\nreproduce: {reproduce}"
            );
        }
        Expect::Caught(signature) => {
            assert!(
                !reports.is_empty(),
                "'{command}' conforms on every walk, but it is broken\nreproduce: {reproduce}"
            );
            for report in &reports {
                for expected in signature {
                    let found = expected.split('|').any(|alternative| report.contains(alternative));
                    assert!(found, "'{command}': a divergence without '{expected}':\n{report}");
                }
            }
        }
    }
}

/// The walk counts keep each example under about 20 s on a 2-core machine; the walks from seed
/// 1 strike every fault of the list above for each row.
const CONFORMING: [Walks; 3] = [
    Walks { script: "atomic_fenced.py", flags: "", row: Strategy::AtomicFenced, walks: 48, expect: Expect::Conforms },
    Walks { script: "effect_first.py", flags: "", row: Strategy::EffectFirst, walks: 32, expect: Expect::Conforms },
    Walks { script: "dedup_atomic.pl", flags: "", row: Strategy::DedupAtomic, walks: 40, expect: Expect::Conforms },
];

/// The broken examples, each caught in the first of three walks at these bounds too.
const BROKEN: [Walks; 3] = [
    // A zombie's write lands: the real total runs ahead of the model's at an apply-atomic.
    Walks {
        script: "atomic_fenced.py",
        flags: " --no-fence",
        row: Strategy::AtomicFenced,
        walks: 3,
        expect: Expect::Caught(&["and its next offset in one transaction", "≠ g0: total"]),
    },
    // Effect and offset in two transactions: a kill point between the two commits.
    Walks {
        script: "split_transaction.py",
        flags: "",
        row: Strategy::AtomicFenced,
        walks: 3,
        expect: Expect::Caught(&["is not atomic: killed after"]),
    },
    // The dedup id not consulted: a processed record's effect lands again.
    Walks {
        script: "dedup_atomic.pl",
        flags: " --no-dedup",
        row: Strategy::DedupAtomic,
        walks: 3,
        // The record applied again shows in the total: in the replay's step, or in a restarted
        // owner's next steps.
        expect: Expect::Caught(&["with its id, unless processed", "≠ g0: total|where the model's leaves g0 total"]),
    },
];

#[test]
fn the_python_atomic_fenced_consumer_conforms_at_every_fault_budget() {
    walk_at_every_budget(&CONFORMING[0]);
}

#[test]
fn the_python_effect_first_consumer_conforms_at_every_fault_budget() {
    walk_at_every_budget(&CONFORMING[1]);
}

#[test]
fn the_perl_dedup_atomic_consumer_conforms_at_every_fault_budget() {
    walk_at_every_budget(&CONFORMING[2]);
}

#[test]
fn the_broken_examples_are_caught_at_every_fault_budget() {
    for case in &BROKEN {
        walk_at_every_budget(case);
    }
}
