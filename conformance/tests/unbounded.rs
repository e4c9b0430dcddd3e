//! Every path `model check` finds with `any` (spec.md §7.1) replays on the real consumer: the
//! abstraction's verdicts are only as good as its claim that a path of the abstraction is a
//! path of the concrete system, and these replays check that claim against the consumer, not
//! only against the model. At small bounds (one group, two records; crashes, rebalances and
//! second incarnations `any`), for rows that violate no-duplicate with `any` (their
//! counterexamples) and rows that keep it (their fault witnesses and observations, the paths
//! behind a `holds`), each trace is built as `model check --traces` builds it, written and read
//! back as `conformance replay` reads it, and replayed in process mode, state by state.

use conformance::batch::{replay_generated, Generated};
use conformance::driver::Mode;
use conformance::harness::Options;
use model::check::{run, CheckOptions, CheckReport, Search, Verdict};
use model::config::{lifted_count, Budget, Lifted};
use model::trace::Trace;
use model::{Action, Config, ConsumerModel, Strategy};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Each test's cap: past it the test fails rather than letting CI run long. A guard, not a
/// benchmark: in a debug build the five rows take about 11 s here, the walks about 5 s.
const CAP: Duration = Duration::from_secs(240);

/// What a row's check with `any` must find, and so which of its traces are replayed.
enum Expect {
    /// These safety properties are violated: every counterexample is replayed.
    Violates(&'static [&'static str]),
    /// These safety properties hold: every reached fault witness and observation is replayed.
    Holds(&'static [&'static str]),
}

/// The rows: three that duplicate under any number of faults, two whose fences keep every
/// guarantee under any number of them.
const ROWS: [(&str, Expect); 5] = [
    ("effect-first", Expect::Violates(&["no-duplicate"])),
    ("atomic", Expect::Violates(&["no-duplicate"])),
    ("fenced-stored-epoch", Expect::Violates(&["no-duplicate"])),
    ("atomic-fenced", Expect::Holds(&["no-duplicate", "contiguous-prefix"])),
    ("atomic-cas", Expect::Holds(&["no-duplicate", "contiguous-prefix"])),
];

/// `model check --strategy ROW --groups 1 --records 2 --crashes any --rebalances any --pauses
/// any`: each lifted budget keeps the row's default count, at least 1 (`lifted_count`).
fn lifted(strategy: Strategy) -> Config {
    let row = Config::new(strategy);
    let (crashes, _) = lifted_count(Budget::Any, row.crashes);
    let (rebalances, _) = lifted_count(Budget::Any, row.rebalances);
    let (pauses, _) = lifted_count(Budget::Any, row.pauses);
    Config {
        groups: 1,
        records: 2,
        crashes,
        rebalances,
        pauses,
        lifted: Lifted { crashes: true, rebalances: true, pauses: true },
        ..row
    }
}

/// How many of each lifted fault a path uses: crashes, rebalances, pauses.
fn faults(actions: &[Action]) -> (u8, u8, u8) {
    let count =
        |kind: fn(&Action) -> bool| u8::try_from(actions.iter().filter(|a| kind(a)).count()).expect("a short path");
    (
        count(|a| matches!(a, Action::Crash { .. })),
        count(|a| matches!(a, Action::Rebalance { .. })),
        count(|a| matches!(a, Action::Pause { .. })),
    )
}

/// One trace as `model check --traces` writes it: its configuration is the concrete one its
/// actions replay in (nothing lifted, each lifted budget the faults it uses, at least the count
/// kept), the file reads back as the same trace, and a file of the same path that still says
/// `any` reads back concretised to it.
fn check_concretised(report: &CheckReport, trace: &Trace) -> Trace {
    let name = trace.property.as_deref().unwrap_or("run");
    let kept = &report.config;
    let config = &trace.config;
    assert_eq!(config.lifted, Lifted::NONE, "{name}: a trace's config lifts nothing");
    let (crashes, rebalances, pauses) = faults(&trace.actions);
    assert_eq!(config.crashes, crashes.max(kept.crashes), "{name}: crashes");
    assert_eq!(config.rebalances, rebalances.max(kept.rebalances), "{name}: rebalances");
    assert_eq!(config.pauses, pauses.max(kept.pauses), "{name}: pauses");
    let bounds = Config { crashes: kept.crashes, rebalances: kept.rebalances, pauses: kept.pauses, ..config.clone() };
    assert_eq!(bounds, Config { lifted: Lifted::NONE, ..kept.clone() }, "{name}: the other bounds are the check's");
    let read = Trace::from_json(&trace.to_json()).unwrap_or_else(|e| panic!("{name}: the trace reads back: {e}"));
    assert_eq!(&read, trace, "{name}: the trace reads back as written");
    let with_any = Trace::new(
        kept.clone(),
        trace.property.as_deref(),
        trace.verdict.clone(),
        String::new(),
        trace.actions.clone(),
    );
    let json = with_any.to_json();
    assert!(json.contains(r#""crashes":"any""#), "{name}: the lifted file says any: {json}");
    let read_any = Trace::from_json(&json).unwrap_or_else(|e| panic!("{name}: a file with any reads back: {e}"));
    assert_eq!(&read_any.config, config, "{name}: a file with any replays in the same concrete config");
    read
}

/// Checks `strategy` with `any`, checks the verdicts `expect` names, and replays every
/// counterexample and example in process mode; returns how many were replayed, and how many
/// use more of a lifted fault than the check's kept count (none at these bounds: a shortest
/// path needs at most one of each, which is why the walks below exist). A replay reproduces
/// the model's states step by step and its violations (`replay::verdicts`); each
/// counterexample's property must be violated on the real store too.
fn replay_with_any(strategy: Strategy, expect: &Expect, started: Instant) -> (usize, usize) {
    let config = lifted(strategy);
    config.validate().unwrap_or_else(|e| panic!("{strategy}: {e}"));
    let options = CheckOptions { search: Search::Bfs, ..CheckOptions::default() };
    let report = run(&ConsumerModel::new(config.clone()), &options, &mut |_| {});
    assert!(report.complete, "{strategy}: the check with any is complete");
    let (names, wanted) = match expect {
        Expect::Violates(names) => (*names, Verdict::Violated),
        Expect::Holds(names) => (*names, Verdict::Holds),
    };
    // The witnesses and observations too where the row violates: they are cheap, and they
    // are paths of the abstraction like the counterexamples.
    let mut traces = Trace::counterexamples(&report);
    traces.extend(Trace::examples(&report));
    for name in names {
        let verdict = report.outcome(name).map(|o| o.verdict.clone());
        assert_eq!(verdict, Some(wanted.clone()), "{strategy}: {name} with any");
    }
    assert!(!traces.is_empty(), "{strategy}: the check with any found traces to replay");
    let worker = PathBuf::from(env!("CARGO_BIN_EXE_conformance"));
    let replay_options = Options { worker_exe: Some(worker), ..Options::new(Mode::Process) };
    let mut real_violations = std::collections::BTreeSet::new();
    let mut beyond_kept = 0;
    for trace in &traces {
        let name = trace.property.as_deref().unwrap_or("run");
        let trace = check_concretised(&report, trace);
        let kept = &report.config;
        beyond_kept += usize::from(
            trace.config.crashes > kept.crashes
                || trace.config.rebalances > kept.rebalances
                || trace.config.pauses > kept.pauses,
        );
        let replayed = conformance::replay::replay(&trace, &replay_options).unwrap_or_else(|failure| {
            panic!("{strategy} / {name} ({}) diverges on the real consumer:\n{failure}", trace.config.flags())
        });
        if trace.verdict == Some(Verdict::Violated) {
            assert!(
                replayed.violated.iter().any(|(property, violated)| property == name && *violated),
                "{strategy} / {name}: the real consumer violates it too: {:?}",
                replayed.violated
            );
        }
        real_violations.extend(replayed.violated.into_iter().filter(|(_, violated)| *violated).map(|(p, _)| p));
        assert!(started.elapsed() < CAP, "{strategy} / {name}: passed the cap of {CAP:?} ({:?})", started.elapsed());
    }
    if let Expect::Violates(names) = expect {
        for name in *names {
            assert!(
                real_violations.contains(*name),
                "{strategy}: {name} is among the replayed violations: {real_violations:?}"
            );
        }
    }
    (traces.len(), beyond_kept)
}

#[test]
fn every_trace_found_with_any_replays_on_the_real_consumer() {
    let started = Instant::now();
    let mut beyond_kept = 0;
    for (name, expect) in &ROWS {
        let strategy: Strategy = name.parse().unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let row_started = Instant::now();
        let (replayed, beyond) = replay_with_any(strategy, expect, started);
        beyond_kept += beyond;
        println!(
            "{strategy}: {replayed} traces found with any replayed ({beyond} past the kept budgets) in {:.1?}",
            row_started.elapsed()
        );
    }
    println!("{beyond_kept} traces used more faults than the kept budgets");
    let elapsed = started.elapsed();
    assert!(elapsed < CAP, "the rows passed the cap of {CAP:?} ({elapsed:?})");
}

/// The shortest paths above never need more than the kept count of a fault at these bounds;
/// `conformance test --crashes any` walks do. Each walk is generated in the abstraction and
/// replayed in the faults it uses (`batch::replay_generated` concretises it): walks with two
/// crashes, two rebalances and two second incarnations conform on the real consumer too.
#[test]
fn walks_with_any_replay_in_the_faults_they_use() {
    let started = Instant::now();
    let config = lifted("atomic-fenced".parse().expect("a row"));
    let (count, seed, steps_max) = (30, 1, 40);
    let model = ConsumerModel::new(config.clone());
    let most = (0..count).fold((0, 0, 0), |most: (u8, u8, u8), index| {
        let used = faults(&conformance::generate::walk(&model, seed + index as u64, steps_max));
        (most.0.max(used.0), most.1.max(used.1), most.2.max(used.2))
    });
    assert!(most.0 >= 2 && most.1 >= 2 && most.2 >= 2, "the walks use each fault twice: {most:?}");
    let worker = PathBuf::from(env!("CARGO_BIN_EXE_conformance"));
    let options = Options { worker_exe: Some(worker), ..Options::new(Mode::Process) };
    let out = std::env::temp_dir().join(format!("onceproof-unbounded-walks-{}", std::process::id()));
    let mut lines = Vec::new();
    let summary = replay_generated(&config, Generated::Walks { count, seed, steps_max }, &options, &out, &mut |line| {
        lines.push(line.to_string())
    })
    .expect("the walks run");
    let _ = std::fs::remove_dir_all(&out);
    assert_eq!((summary.traces, summary.divergences), (count, 0), "{}", lines.join("\n"));
    let elapsed = started.elapsed();
    println!("{count} walks with any (most faults {most:?}) replayed in {elapsed:.1?}");
    assert!(elapsed < CAP, "the walks passed the cap of {CAP:?} ({elapsed:?})");
}
