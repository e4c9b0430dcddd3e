//! The open owner protocol (PROTOCOL.md) with consumers outside this repository's Rust: the
//! Python examples of `examples/python/` and the Perl one of `examples/perl/` replay their
//! rows' corpus traces and conform; the broken ones (the fence check dropped, the dedup id not
//! consulted) are caught at the step where a stale or replayed write lands; and a crash point
//! armed inside a step kills each implementation (this consumer's `serve`, the Python and the
//! Perl ones) where it says, the durable state then read by a fresh process. The examples at
//! every fault budget are walked in `budgets.rs`.
//!
//! Needs `python3` and `perl` with DBD::SQLite on PATH (`bash scripts/setup.sh` installs them):
//! without one, a test of its examples prints `skipped: python3 not installed (bash
//! scripts/setup.sh installs it)` (or Perl's DBD::SQLite's) and returns, unless `CI` is set:
//! then it fails.

#[path = "../../tests/support/tools.rs"]
mod tools;

use conformance::batch::{self, Generated};
use conformance::driver::{log_dir, Mode, OwnerHandle, OwnerSpec};
use conformance::harness::Options;
use conformance::protocol::{
    shell_quote, Launch, ProtocolError, ProtocolOwner, ProtocolStore, REPLY_TIMEOUT_MS_DEFAULT,
};
use conformance::replay::{replay, replay_counted, Inside, ReplayFailure};
use conformance::Error;
use consumer::log::{encode_delta, Log};
use consumer::owner::Settings;
use consumer::strategy::{StartPolicy, Step, StepKind, Strategy as RealStrategy};
use model::{Action, Strategy};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The family's cap (other-language consumers, each test on its own): past it a test fails
/// rather than letting CI run long. A row's traces take about 10 s here (Python's start-up
/// for every process); the cap is a guard, not a benchmark.
const FAMILY_CAP: Duration = Duration::from_secs(240);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The command of the Python example `examples/python/SCRIPT` with `flags`, started by the
/// interpreter `python3` names (its real path: a version manager's `python3` may be a shell
/// script that runs a dozen processes before Python, which every kill-point reader would pay
/// for); `None` when Python 3 is missing (the test returns, skipped).
fn python(script: &str, flags: &str) -> Option<String> {
    Some(command(&tools::python3()?, "examples/python", script, flags))
}

/// The command of the Perl example `examples/perl/SCRIPT`, by the interpreter's real path;
/// `None` when Perl or its DBD::SQLite is missing (the test returns, skipped).
fn perl(script: &str, flags: &str) -> Option<String> {
    Some(command(&tools::perl()?, "examples/perl", script, flags))
}

/// `INTERPRETER DIR/SCRIPT FLAGS`, DIR relative to the repository's root.
fn command(interpreter: &str, dir: &str, script: &str, flags: &str) -> String {
    let path = root().join(dir).join(script);
    format!("{} {}{flags}", shell_quote(interpreter), shell_quote(&path.to_string_lossy()))
}

/// This consumer's implementation of the protocol: the conformance binary's hidden `serve`.
fn ours() -> String {
    format!("{} serve", shell_quote(env!("CARGO_BIN_EXE_conformance")))
}

/// A corpus trace's file name and how its replay ended.
type Outcome = (String, Result<(), ReplayFailure>);

/// Replays every corpus trace of `row` against `command` (killed inside steps too when
/// `inside_step`); each trace's file name and outcome, and the kill points tried.
fn replay_row(command: &str, row: Strategy, inside_step: bool) -> (Vec<Outcome>, Inside) {
    let dir = root().join("tests/traces");
    let files = conformance::corpus::expand(&[dir]).expect("tests/traces is readable");
    let options = Options { command: Some(command.to_string()), inside_step, ..Options::new(Mode::Protocol) };
    let mut inside = Inside::default();
    let started = Instant::now();
    let mut outcomes = Vec::new();
    for path in files {
        assert!(started.elapsed() < FAMILY_CAP, "'{command}' passed the cap of {FAMILY_CAP:?} at {}", path.display());
        let trace = conformance::corpus::load(&path).expect("a corpus trace loads");
        if trace.config.strategy != row {
            continue;
        }
        let name = path.file_name().expect("a file").to_string_lossy().into_owned();
        outcomes.push((name, replay_counted(&trace, &options, &mut inside).map(|_| ())));
    }
    assert!(!outcomes.is_empty(), "the corpus has no trace of {row}");
    (outcomes, inside)
}

/// Every trace of the row conforms, killed between steps and at every kill point inside them:
/// the consumer's claim holds on the whole corpus. The kills struck: kill points were found,
/// and no owner step changed the model's store without a write under the store directory.
/// What was tried comes back for the row's own witnesses.
fn assert_conforms(command: &str, row: Strategy) -> Inside {
    let (outcomes, inside) = replay_row(command, row, true);
    for (name, outcome) in outcomes {
        if let Err(failure) = outcome {
            panic!(
                "{name} diverges for '{command}':\n{failure}\nreproduce: cargo run -p conformance -- replay --worker \
                 {} --strategy {row} tests/traces/{name}",
                shell_quote(command)
            );
        }
    }
    assert!(inside.found > 0 && inside.judged == inside.found, "'{command}': kill points {inside:?}");
    assert_eq!(inside.writes_unseen, 0, "'{command}': a write step showed no kill point: {inside:?}");
    inside
}

/// Its fence held where it was raced: owners raced inside its writes, and power cuts judged.
#[test]
fn the_python_atomic_fenced_consumer_conforms_on_every_atomic_fenced_trace() {
    let Some(command) = python("atomic_fenced.py", "") else { return };
    let inside = assert_conforms(&command, Strategy::AtomicFenced);
    assert!(inside.races > 0 && inside.race_steps > 0 && inside.power_cuts > 0 && inside.syncs > 0, "{inside:?}");
}

/// The seed's consumer: its duplicates (a crash between effect and commit, a zombie's write)
/// reproduce exactly where the model's effect-first counterexamples put them.
#[test]
fn the_python_effect_first_consumer_conforms_on_every_effect_first_trace() {
    let Some(command) = python("effect_first.py", "") else { return };
    let _ = assert_conforms(&command, Strategy::EffectFirst);
}

/// The Perl example (DBI and DBD::SQLite): the dedup id in the effect's transaction, the commit
/// blind; a zombie's duplicate is skipped and its blind commit moves the checkpoint back, as
/// the model's row predicts.
#[test]
fn the_perl_dedup_atomic_consumer_conforms_on_every_dedup_atomic_trace() {
    let Some(command) = perl("dedup_atomic.pl", "") else { return };
    assert_conforms(&command, Strategy::DedupAtomic);
}

/// The dedup id inserted but not consulted (`--no-dedup`): exactly the traces in which the
/// model skips a record as processed diverge, at that `apply-deduped` (the effect applied
/// twice: the real total above the model's).
#[test]
fn the_broken_perl_consumer_is_caught_where_a_processed_record_lands_again() {
    let Some(command) = perl("dedup_atomic.pl", " --no-dedup") else { return };
    let expected = ["dedup-atomic--duplicate-skipped.json", "dedup-atomic--monotonic-checkpoint.json"];
    let mut diverged = Vec::new();
    for (name, outcome) in replay_row(&command, Strategy::DedupAtomic, false).0 {
        let Err(failure) = outcome else { continue };
        match &failure {
            ReplayFailure::Divergence { action: Some(Action::ApplyDeduped { .. }), table, .. } => {
                let total_differs = table.lines().any(|line| line.starts_with("≠ g0: total"));
                assert!(total_differs, "{name}: the divergence shows no total:\n{failure}");
            }
            other => panic!("{name}: diverged, but not at an apply-deduped:\n{other}"),
        }
        diverged.push(name);
    }
    assert_eq!(diverged, expected, "the traces the consumer without dedup fails");
}

/// The fence check dropped: every trace where a stale owner writes diverges, at that write
/// (an `apply-atomic` after which the real total is above the model's), and only those.
#[test]
fn the_broken_python_consumer_is_caught_where_the_zombie_write_lands() {
    let Some(command) = python("atomic_fenced.py", " --no-fence") else { return };
    let expected = [
        "atomic-fenced--paused-fenced.json",
        "atomic-fenced--paused-write.json",
        "atomic-fenced--zombie-fenced.json",
        "atomic-fenced--zombie-write.json",
        "scenario--zombie-atomic-fenced.json",
    ];
    let mut diverged = Vec::new();
    for (name, outcome) in replay_row(&command, Strategy::AtomicFenced, false).0 {
        let Err(failure) = outcome else { continue };
        match &failure {
            ReplayFailure::Divergence { action: Some(Action::ApplyAtomic { .. }), table, .. } => {
                let total_differs = table.lines().any(|line| line.starts_with("≠ g0: total"));
                assert!(total_differs, "{name}: the divergence shows no total:\n{failure}");
            }
            other => panic!("{name}: diverged, but not at a zombie's apply-atomic:\n{other}"),
        }
        diverged.push(name);
    }
    assert_eq!(diverged, expected, "the traces the unfenced consumer fails");
}

/// Effect and offset committed in two transactions, every reply as atomic-fenced's: with kill
/// points inside steps, every trace in which a record is applied diverges at its first
/// `apply-atomic`, killed between the two commits (the effect durable, the offset not); with
/// `--inside-step off` (crashes between steps only) every trace conforms. Nothing but the
/// kill points inside steps catches it.
#[test]
fn a_consumer_that_splits_effect_and_offset_is_caught_by_kill_points_inside_steps_only() {
    let Some(command) = python("split_transaction.py", "") else { return };
    let applying = [
        "atomic-fenced--crash-after-write.json",
        "atomic-fenced--log-end.json",
        "atomic-fenced--replay.json",
        "scenario--zombie-atomic-fenced.json",
    ];
    let table: [(bool, &[&str]); 2] = [(true, &applying), (false, &[])];
    for (inside_step, expected) in table {
        let (outcomes, inside) = replay_row(&command, Strategy::AtomicFenced, inside_step);
        let mut diverged = Vec::new();
        for (name, outcome) in outcomes {
            let Err(failure) = outcome else { continue };
            match &failure {
                ReplayFailure::NotAtomic { action: Some(Action::ApplyAtomic { .. }), shows, point, .. } => {
                    // Between the commits: the effect is durable (total 5), the offset is not.
                    assert!(shows.contains("total 5, p0 next offset 0"), "{name}: {failure}");
                    assert!(point.contains("store.db"), "{name}: {failure}");
                }
                other => panic!("{name} (--inside-step {inside_step}): not the split transaction:\n{other}"),
            }
            diverged.push(name);
        }
        assert_eq!(diverged, expected, "the traces that diverge with --inside-step {inside_step}");
        assert_eq!(inside.found > 0, inside_step, "kill points with --inside-step {inside_step}: {inside:?}");
    }
}

/// A consumer whose store is not under the directory `init` names (here the atomic-fenced
/// example with its store moved elsewhere, as a pointer in the store directory could send it)
/// is refused at its first step: the tracer sees the owner open a file outside the store for
/// writing, which no kill point's copy of the store directory holds.
#[test]
fn a_store_opened_outside_the_store_directory_is_refused() {
    let Some(example) = python("atomic_fenced.py", "") else { return };
    let elsewhere = tempfile::tempdir().expect("a directory for the store");
    let script = elsewhere.path().join("elsewhere.py");
    let examples = root().join("examples/python");
    let program = format!(
        "import sys\nsys.path.insert(0, {examples:?})\nimport onceproof_consumer, atomic_fenced\n\
         original = onceproof_consumer.Store.__init__\n\
         onceproof_consumer.Store.__init__ = lambda self, directory, create: original(self, {store:?}, create)\n\
         sys.exit(onceproof_consumer.serve(atomic_fenced.AtomicFenced))\n",
        examples = examples.display().to_string(),
        store = elsewhere.path().display().to_string(),
    );
    std::fs::write(&script, program).expect("the script");
    let command = example.replacen(
        &shell_quote(&examples.join("atomic_fenced.py").to_string_lossy()),
        &shell_quote(&script.to_string_lossy()),
        1,
    );
    let trace = conformance::corpus::load(&root().join("tests/traces/atomic-fenced--replay.json")).expect("a trace");
    let options = Options { command: Some(command.clone()), inside_step: true, ..Options::new(Mode::Protocol) };
    match replay_counted(&trace, &options, &mut Inside::default()) {
        Err(ReplayFailure::OutsideStore { step: 0, path, .. }) => {
            let store = elsewhere.path().canonicalize().expect("the directory").join("store.db");
            assert_eq!(path, store.display().to_string());
        }
        other => panic!("{command}: not refused for its store outside the directory: {other:?}"),
    }
}

/// Whether a replay's failure is the one a broken consumer must be caught with.
type Caught = fn(&ReplayFailure) -> bool;

/// The consumers of `conformance/tests/consumers/`, each broken in a way only this version's
/// checks see, replayed on one trace with the default kill points: a restart position in a file
/// of its own (caught by restarting an owner on a kill point's copy), what was applied in a file
/// of its own (caught by the restarted owner's next steps), the same file outside the
/// store renamed into place there (refused, naming it), a store file mapped into memory
/// (refused, naming the file), a fence checked in a transaction of its own (caught by a race
/// held between its two transactions, naming both incarnations' steps), and a start that
/// claims by what it read a transaction before (caught by a race holding the start there).
#[test]
fn a_side_file_restart_and_a_mapped_store_are_caught_inside_steps() {
    let Some(interpreter) = tools::python3() else { return };
    let trace = conformance::corpus::load(&root().join("tests/traces/atomic-fenced--replay.json")).expect("a trace");
    let spec = conformance::observe::ObserveSpec::load(&root().join("examples/python/store.observe.toml"))
        .expect("the examples' observation spec");
    let outside = tempfile::tempdir().expect("a directory outside the store");
    let outside_flag = format!(" --outside {}", shell_quote(&outside.path().to_string_lossy()));
    let table: [(&str, &str, Caught); 6] = [
        ("side_file.py", "", |failure| {
            matches!(failure, ReplayFailure::RestartDiverges { step: 4, point, differs, .. }
                if point.contains("position") && differs.contains("took p0 lease at 1"))
        }),
        // Its leases are right after every kill; what it does next is not.
        ("side_skip.py", "", |failure| {
            matches!(failure, ReplayFailure::RestartDiverges { step: 4, point, differs, .. }
                if point.contains("done") && differs.contains("after its steps fetch 0 0, apply-atomic 0 0, it left g0 total 0"))
        }),
        // The same file kept outside, under a temporary name renamed into place there.
        ("side_file.py", &outside_flag, |failure| {
            matches!(failure, ReplayFailure::OutsideStore { step: 4, call, path, .. }
                if call == "rename" && path.contains("position-"))
        }),
        (
            "mapped.py",
            "",
            |failure| matches!(failure, ReplayFailure::MappedStore { step: 0, file, .. } if file == "counter"),
        ),
        // Its fence checked in a transaction before the write's: held between the two while a
        // second incarnation claims and applies, it applies the record again.
        ("fence_apart.py", "", |failure| {
            matches!(failure, ReplayFailure::RaceDiverges { step: 4, race, .. }
                if race.contains("began transaction 2") && race.contains("g0 total 10"))
        }),
        // Its start's claim writing back the next offset it read a transaction before: held
        // between the two while the earlier incarnation applies, it takes the offset back.
        ("claim_apart.py", "", |failure| {
            matches!(failure, ReplayFailure::RaceDiverges { step: 4, race, table, .. }
                if race.contains("held as its start began transaction") && table.contains("g0 p0 next 0 epoch"))
        }),
    ];
    for (script, flags, caught) in table {
        let command = command(&interpreter, "conformance/tests/consumers", script, flags);
        let options = Options {
            command: Some(command.clone()),
            inside_step: true,
            observe: Some(std::sync::Arc::new(spec.clone())),
            ..Options::new(Mode::Protocol)
        };
        match replay_counted(&trace, &options, &mut Inside::default()) {
            Err(failure) if caught(&failure) => {}
            other => panic!(
                "{script}: not caught as it should be: {}",
                other.map_or_else(|f| f.to_string(), |_| "conforms".into())
            ),
        }
    }
}

/// A consumer whose commits a power cut takes back (`unsynced.py`: its SQLite settings as
/// flags) is caught with the step a cut right after it loses, whatever a SIGKILL leaves: one
/// that never syncs (`synchronous = OFF`, in DELETE and in WAL mode), and one in DELETE mode
/// with `FULL`, whose commit (the journal's unlink) is never made durable by a sync of its
/// directory. In WAL mode with `FULL` it conforms, and so does every variant with
/// `--power-cuts off` (nothing else catches it). A table of flags, whether a cut is judged and
/// what must come of it.
#[test]
fn a_consumer_whose_commit_a_power_cut_takes_back_is_caught_with_the_step_lost() {
    let Some(interpreter) = tools::python3() else { return };
    let trace = conformance::corpus::load(&root().join("tests/traces/atomic-fenced--replay.json")).expect("a trace");
    let spec = conformance::observe::ObserveSpec::load(&root().join("examples/python/store.observe.toml"))
        .expect("the examples' observation spec");
    // The first step that writes is the restart's claim (step 2).
    let lost = |failure: &ReplayFailure| {
        matches!(failure, ReplayFailure::PowerCutLoses { step: 2, point, shows, .. }
            if point == "right after the step" && shows.contains(": step 2 (") && shows.contains("acknowledged, is lost"))
    };
    let table: [(&str, bool, bool); 6] = [
        ("", true, false),
        ("--journal WAL", true, false),
        ("--synchronous FULL", true, false),
        ("--journal WAL --synchronous FULL", true, true),
        ("", false, true),
        ("--synchronous FULL", false, true),
    ];
    for (flags, power_cuts, conforms) in table {
        let command = command(&interpreter, "conformance/tests/consumers", "unsynced.py", &format!(" {flags}"));
        let options = Options {
            command: Some(command.clone()),
            inside_step: true,
            power_cuts,
            observe: Some(std::sync::Arc::new(spec.clone())),
            ..Options::new(Mode::Protocol)
        };
        let mut inside = Inside::default();
        let case = format!("unsynced.py {flags} with power cuts {power_cuts}");
        match (replay_counted(&trace, &options, &mut inside), conforms) {
            (Ok(_), true) => assert_eq!(inside.power_cuts > 0, power_cuts, "{case}: {inside:?}"),
            (Err(failure), false) if lost(&failure) => {}
            (other, _) => panic!("{case}: {}", other.map_or_else(|f| f.to_string(), |_| "conforms".into())),
        }
    }
}

/// `conformance test --worker` walks (`--walks 4 --seed 1`, the row's default bounds) catch the
/// split transaction too, each divergence a kill between its two commits, and pass it with
/// `--inside-step off`.
#[test]
fn walks_catch_the_split_transaction_with_kill_points_inside_steps_only() {
    let Some(command) = python("split_transaction.py", "") else { return };
    let config = model::Config::new(Strategy::AtomicFenced);
    let generated = Generated::Walks { count: 4, seed: 1, steps_max: 60 };
    for inside_step in [true, false] {
        let out = tempfile::tempdir().expect("a directory for divergent walks");
        let options = Options { command: Some(command.clone()), inside_step, ..Options::new(Mode::Protocol) };
        let mut lines = Vec::new();
        let summary =
            batch::replay_generated(&config, generated, &options, out.path(), &mut |line| lines.push(line.to_string()))
                .expect("the walks run");
        let reports: Vec<&String> = lines.iter().filter(|line| line.starts_with("DIVERGES")).collect();
        match inside_step {
            true => {
                assert!(summary.divergences > 0, "no walk caught the split transaction: {lines:?}");
                assert!(reports.iter().all(|report| report.contains("is not atomic: killed after")), "{lines:?}");
            }
            false => assert_eq!(summary.divergences, 0, "between steps the split cannot show: {lines:?}"),
        }
    }
}

/// Seeded random walks of each Python consumer's row at its default bounds (`conformance test
/// --worker CMD --strategy ROW --walks 8 --seed 1`), killed inside steps too: every walk
/// conforms, and together they
/// exercise both kinds of kill the corpus's own traces of a row may lack: a crash (SIGKILL)
/// followed by a restart (a new process resuming from what its store made durable), and a
/// second live incarnation (pause).
#[test]
fn the_python_consumers_conform_on_seeded_walks_with_kills_and_restarts() {
    const WALKS: u64 = 8;
    let started = Instant::now();
    for (script, row) in [("atomic_fenced.py", Strategy::AtomicFenced), ("effect_first.py", Strategy::EffectFirst)] {
        let Some(command) = python(script, "") else { return };
        let config = model::Config::new(row);
        let model = model::ConsumerModel::new(config.clone());
        let options = Options { command: Some(command.clone()), inside_step: true, ..Options::new(Mode::Protocol) };
        let (mut restarted, mut paused) = (false, false);
        for seed in 1..=WALKS {
            assert!(started.elapsed() < FAMILY_CAP, "the walks passed the cap of {FAMILY_CAP:?} at {row} seed {seed}");
            let actions = conformance::generate::walk(&model, seed, 60);
            let crashes = actions.iter().position(|a| matches!(a, Action::Crash { .. }));
            restarted |= crashes.is_some_and(|at| actions[at..].iter().any(|a| matches!(a, Action::Restart { .. })));
            paused |= actions.iter().any(|a| matches!(a, Action::Pause { .. }));
            let trace = model::trace::Trace::new(config.clone(), None, None, format!("walk {seed}"), actions);
            if let Err(failure) = replay(&trace, &options) {
                panic!(
                    "{row} walk {seed} diverges for '{command}':\n{failure}\nreproduce: cargo run -p conformance -- \
                     test --worker {} --strategy {row} --walks 1 --seed {seed}",
                    shell_quote(&command)
                );
            }
        }
        assert!(restarted, "{row}: no walk of seeds 1..={WALKS} crashes an owner and restarts it");
        assert!(paused || row == Strategy::EffectFirst, "{row}: no walk of seeds 1..={WALKS} pauses an owner");
    }
}

/// One armed crash: the strategy, the steps before it (each on record 0 of partition 0), the
/// point, and the durable (total, next offset) a fresh process then reads.
struct Crash {
    strategy: RealStrategy,
    row: Strategy,
    script: &'static str,
    before: &'static [StepKind],
    point: &'static str,
    step: StepKind,
    survived: (i64, u64),
}

const CRASHES: &[Crash] = &[
    crash(RealStrategy::AtomicFenced, Strategy::AtomicFenced, "atomic_fenced.py", &[], "apply-atomic:before", (0, 0)),
    crash(RealStrategy::AtomicFenced, Strategy::AtomicFenced, "atomic_fenced.py", &[], "apply-atomic:inside", (0, 0)),
    crash(RealStrategy::AtomicFenced, Strategy::AtomicFenced, "atomic_fenced.py", &[], "apply-atomic:after", (5, 1)),
    crash(RealStrategy::EffectFirst, Strategy::EffectFirst, "effect_first.py", &[], "apply-effect:before", (0, 0)),
    crash(RealStrategy::EffectFirst, Strategy::EffectFirst, "effect_first.py", &[], "apply-effect:inside", (0, 0)),
    crash(RealStrategy::EffectFirst, Strategy::EffectFirst, "effect_first.py", &[], "apply-effect:after", (5, 0)),
    crash(RealStrategy::EffectFirst, Strategy::EffectFirst, "effect_first.py", APPLIED, "commit-offset:before", (5, 0)),
    crash(RealStrategy::EffectFirst, Strategy::EffectFirst, "effect_first.py", APPLIED, "commit-offset:inside", (5, 0)),
    crash(RealStrategy::EffectFirst, Strategy::EffectFirst, "effect_first.py", APPLIED, "commit-offset:after", (5, 1)),
    crash(RealStrategy::DedupAtomic, Strategy::DedupAtomic, "dedup_atomic.pl", &[], "apply-deduped:before", (0, 0)),
    crash(RealStrategy::DedupAtomic, Strategy::DedupAtomic, "dedup_atomic.pl", &[], "apply-deduped:inside", (0, 0)),
    crash(RealStrategy::DedupAtomic, Strategy::DedupAtomic, "dedup_atomic.pl", &[], "apply-deduped:after", (5, 0)),
    crash(RealStrategy::DedupAtomic, Strategy::DedupAtomic, "dedup_atomic.pl", DEDUPED, "commit-offset:before", (5, 0)),
    crash(RealStrategy::DedupAtomic, Strategy::DedupAtomic, "dedup_atomic.pl", DEDUPED, "commit-offset:inside", (5, 0)),
    crash(RealStrategy::DedupAtomic, Strategy::DedupAtomic, "dedup_atomic.pl", DEDUPED, "commit-offset:after", (5, 1)),
];

const APPLIED: &[StepKind] = &[StepKind::ApplyEffect];
const DEDUPED: &[StepKind] = &[StepKind::ApplyDeduped];

const fn crash(
    strategy: RealStrategy,
    row: Strategy,
    script: &'static str,
    before: &'static [StepKind],
    point: &'static str,
    survived: (i64, u64),
) -> Crash {
    let step = match (strategy, before.len()) {
        (RealStrategy::AtomicFenced, _) => StepKind::ApplyAtomic,
        (RealStrategy::DedupAtomic, 0) => StepKind::ApplyDeduped,
        (_, 0) => StepKind::ApplyEffect,
        _ => StepKind::CommitOffset,
    };
    Crash { strategy, row, script, before, point, step, survived }
}

/// Every crash point of this consumer's `serve`, and of each example whose interpreter is
/// here (a missing one is skipped, saying so, outside CI).
#[test]
fn a_crash_point_kills_each_implementation_where_it_says() {
    let started = Instant::now();
    let (python, perl) = (tools::python3(), tools::perl());
    for case in CRASHES {
        assert!(started.elapsed() < FAMILY_CAP, "the crash points passed the cap of {FAMILY_CAP:?} at {}", case.point);
        let example = match case.script.ends_with(".pl") {
            true => perl.as_deref().map(|perl| command(perl, "examples/perl", case.script, "")),
            false => python.as_deref().map(|python| command(python, "examples/python", case.script, "")),
        };
        for command in std::iter::once(ours()).chain(example) {
            let survived = run_crash(case, &command);
            assert_eq!(
                survived, case.survived,
                "'{command}' crashed at {} ({}): (total, next offset) read afterwards",
                case.point, case.row
            );
        }
    }
}

/// A fresh data directory with one record (delta 5) on partition 0; the store set up through
/// the protocol; owner o0 fetches it, takes the steps before, arms the point and takes the
/// step, which must kill it; a fresh store process reads what survived.
fn run_crash(case: &Crash, command: &str) -> (i64, u64) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let log = log_dir(dir.path());
    let identity = Log::identity_for_init(&log, 1).expect("a log identity");
    Log::create(&log, identity).expect("the log");
    let (mut writer, _) = Log::open_writer(&log, identity).expect("the log's writer");
    writer.append(0, &encode_delta(5)).expect("an append");
    drop(writer);
    let store = dir.path().join("consumer");
    std::fs::create_dir(&store).expect("the consumer's store directory");
    let settings = Settings { start: StartPolicy::StoredEpoch, batch: 1, ..Settings::new(case.strategy) };
    let launch = Launch {
        command: command.to_string(),
        store,
        dir: dir.path().to_path_buf(),
        partitions: 1,
        row: case.row.to_string(),
        settings,
        reply_timeout_ms: REPLY_TIMEOUT_MS_DEFAULT,
        inside_step: false,
    };
    let mut agent = ProtocolStore::start(launch.clone()).expect("the store role starts");
    agent.setup("g0", "o0").expect("setup");
    let spec = OwnerSpec {
        store: None,
        worker_exe: None,
        dir: dir.path().to_path_buf(),
        group: "g0".into(),
        owner: "o0".into(),
        settings,
        launch: Some(launch),
        inside_step: false,
        durability: None,
    };
    let mut owner = ProtocolOwner::spawn(spec.launch.as_ref().expect("a launch"), &spec).expect("the owner starts");
    let step = |kind, offset| Step { kind, partition: 0, offset };
    owner.step(step(StepKind::Fetch, 0)).expect("fetch 0");
    for &kind in case.before {
        owner.step(step(kind, 0)).expect("the steps before the crash");
    }
    owner.arm(case.point).expect("arm");
    let offset = if case.step == StepKind::CommitOffset { 1 } else { 0 };
    match owner.step(step(case.step, offset)) {
        Err(Error::Protocol { source: ProtocolError::Ended { .. }, .. }) => {}
        other => panic!("'{command}' at {}: expected the process to die, got {other:?}", case.point),
    }
    agent.restart().expect("a fresh store process");
    let observed = agent.observe("g0").expect("observe");
    (observed.total, observed.partitions[0].next_offset)
}

/// A consumer that misbehaves on the wire, as a shell script: what it does after reading the
/// store role's `init`, and the line the replay's failure must contain.
struct Misbehaviour {
    name: &'static str,
    script: &'static str,
    expected: &'static str,
}

const INIT_OK: &str = r#"echo '{"in_reply_to": 1, "type": "init_ok", "protocol": 1}'"#;

const MISBEHAVIOURS: [Misbehaviour; 5] = [
    Misbehaviour {
        name: "frozen after init",
        script: "read line; INIT_OK; exec sleep 600",
        expected: "no reply to setup g0 o0 within 300 ms: the consumer is taken for frozen and killed",
    },
    Misbehaviour { name: "frozen at init", script: "exec sleep 600", expected: "no reply to init within 300 ms" },
    Misbehaviour {
        name: "exits",
        script: "read line; exit 3",
        expected: "the process ended (exit status: 3) without replying to init",
    },
    Misbehaviour {
        name: "garbage",
        script: "read line; echo hello; exec sleep 600",
        expected: "unreadable reply 'hello' to init",
    },
    Misbehaviour {
        name: "a line cut by its end",
        script: "read line; printf '{\"in_reply_to\": 1'",
        expected: "to init: the output ended within the line",
    },
];

/// A consumer that freezes, exits or writes garbage fails the replay with one message naming
/// the request, within the reply wait: nothing hangs (a frozen consumer is killed).
#[test]
fn a_consumer_that_freezes_exits_or_writes_garbage_fails_the_replay_naming_the_request() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let trace_path = root().join("tests/traces/scenario--zombie-atomic-fenced.json");
    let trace = conformance::corpus::load(&trace_path).expect("a corpus trace loads");
    for (index, case) in MISBEHAVIOURS.iter().enumerate() {
        let script = dir.path().join(format!("consumer-{index}.sh"));
        std::fs::write(&script, format!("#!/bin/sh\n{}\n", case.script.replace("INIT_OK", INIT_OK))).expect("a script");
        let command = format!("sh {}", shell_quote(&script.to_string_lossy()));
        let options = Options { command: Some(command), reply_timeout_ms: 300, ..Options::new(Mode::Protocol) };
        let started = Instant::now();
        let outcome = replay(&trace, &options);
        let Err(failure) = outcome else { panic!("{}: the replay passed", case.name) };
        let message = failure.to_string();
        assert!(message.contains(case.expected), "{}: expected '{}' in:\n{message}", case.name, case.expected);
        assert!(started.elapsed() < Duration::from_secs(60), "{}: took {:?}", case.name, started.elapsed());
    }
}

/// On the command line the wait is `--reply-timeout-ms`, and the reproduce command keeps it: a
/// frozen consumer's trace fails (exit 1) naming the request, within the wait.
#[test]
fn a_frozen_consumer_fails_the_replay_at_the_wait_given_on_the_command_line() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let script = dir.path().join("frozen.sh");
    std::fs::write(&script, format!("#!/bin/sh\nread line\n{INIT_OK}\nexec sleep 600\n")).expect("a script");
    let command = format!("sh {}", shell_quote(&script.to_string_lossy()));
    let trace = root().join("tests/traces/scenario--zombie-atomic-fenced.json");
    let started = Instant::now();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_conformance"))
        .args(["replay", "--worker", &command, "--strategy", "atomic-fenced", "--reply-timeout-ms", "300"])
        .arg(&trace)
        .output()
        .expect("conformance runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("no reply to setup g0 o0 within 300 ms"), "{stdout}");
    let reproduce = format!("--strategy atomic-fenced --reply-timeout-ms 300 {}", trace.display());
    assert!(stdout.contains(&reproduce), "the reproduce command keeps the wait:\n{stdout}");
    assert!(started.elapsed() < Duration::from_secs(60), "took {:?}", started.elapsed());
}

/// A claim replays, besides the row's traces, those of the rows its consumer serves alike that
/// bring a step the row's lack: a consumer that resets to the log's start where atomic-fenced
/// fails out of range conforms on atomic-fenced's trace and is caught on reset-fail's, and the
/// correct example conforms on both, the summary counting the traces and naming what none had.
#[test]
fn a_claim_replays_the_alike_rows_traces_and_counts_what_it_replayed() {
    let Some(interpreter) = tools::python3() else { return };
    let corpus = tempfile::tempdir().expect("a corpus of two traces");
    for name in ["atomic-fenced--replay.json", "reset-fail--out-of-range.json", "commit-first--replay.json"] {
        std::fs::copy(root().join("tests/traces").join(name), corpus.path().join(name)).expect("a trace copied");
    }
    let table = [
        ("conformance/tests/consumers", "reset_to_start.py", Some(1), "diverges for this consumer on 1, first at"),
        ("examples/python", "atomic_fenced.py", Some(0), "holds for this consumer on the 2 traces replayed; not tried"),
    ];
    for (dir, script, code, summary) in table {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_conformance"))
            .args(["replay", "--worker", &command(&interpreter, dir, script, ""), "--strategy", "atomic-fenced"])
            .arg(corpus.path())
            .output()
            .expect("conformance runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), code, "{script}:\n{stdout}");
        assert!(
            stdout.contains(
                "replaying the 1 traces of atomic-fenced and, for the steps and faults they add, 1 of reset-fail"
            ),
            "{script}:\n{stdout}"
        );
        assert!(stdout.contains(summary), "{script}:\n{stdout}");
        assert!(!stdout.contains("every trace"), "{script}:\n{stdout}");
    }
}
