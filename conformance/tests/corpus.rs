//! Every trace of `tests/traces/` as its own test: replayed against the real consumer in
//! process, in-process and protocol mode (this consumer's `serve`, PROTOCOL.md), conforming
//! step by step and with the verdict it records.

use model::check::Verdict;
use model::properties::{is_safety, properties_for, role_of, Role, SAFETY};
use model::{Config, Strategy};
use std::path::{Path, PathBuf};

fn replay_corpus_file(path: &str) {
    let worker = PathBuf::from(env!("CARGO_BIN_EXE_conformance"));
    if let Err(message) = conformance::corpus::check_file(Path::new(path), Some(worker)) {
        panic!("{message}");
    }
}

include!(concat!(env!("OUT_DIR"), "/corpus_tests.rs"));

#[test]
fn the_corpus_holds_every_counterexample_witness_and_scenario() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces");
    let files = conformance::corpus::expand(std::slice::from_ref(&dir)).expect("tests/traces is readable");
    let regenerate = "regenerate with `cargo run --release -p conformance -- regenerate tests/traces`";
    let scenarios = conformance::scenarios::all();
    for (name, _) in &scenarios {
        assert!(
            files.iter().any(|f| f.file_stem().is_some_and(|s| s == name.as_str())),
            "scenario {name}: {regenerate}"
        );
    }
    let table = model::expected::from_spec().expect("spec.md's table");
    let mut witnesses = 0;
    let violated = table.values().filter(|v| **v == Some(false)).count();
    for strategy in Strategy::ALL {
        // Every `holds` cell is a claim about every interleaving: its witnesses are the
        // shortest examples of each fault striking where it matters and of each defence at
        // work, replayed against the real consumer (one test each, above).
        let config = Config::new(strategy);
        let sometimes: Vec<_> = properties_for(&config).into_iter().filter(|p| !is_safety(p)).collect();
        let holds = SAFETY.iter().any(|name| table[&(strategy, *name)] == Some(true));
        if holds {
            let defences = sometimes.iter().filter(|p| role_of(p.name) == Role::Observation).count();
            assert!(defences > 0, "{strategy} has holds cells but no observation to witness a defence at work");
        }
        for property in &sometimes {
            let path = dir.join(format!("{strategy}--{}.json", property.name));
            let trace = conformance::corpus::load(&path)
                .unwrap_or_else(|e| panic!("{strategy}: no witness of {} ({e}): {regenerate}", property.name));
            assert_eq!(trace.verdict, Some(Verdict::Reached), "{}", path.display());
            assert_eq!(trace.config, config, "{}: the witness is of the default bounds", path.display());
            witnesses += 1;
        }
    }
    // Every stale owner's fenced write of every row (a zombie's and an earlier incarnation's):
    // the fence witnesses `regenerate` adds where no other trace of the row shows one, each
    // file exactly the model's shortest path to it.
    let is_fence = |path: &Path| {
        path.file_name().is_some_and(|name| conformance::fences::Target::is_witness_file(&name.to_string_lossy()))
    };
    let others: Vec<model::trace::Trace> = files
        .iter()
        .filter(|path| !is_fence(path))
        .map(|path| conformance::corpus::load(path).expect("a corpus trace loads"))
        .collect();
    let fences = conformance::fences::witnesses(&others).unwrap_or_else(|(target, e)| panic!("{target:?}: {e}"));
    for (name, trace) in &fences {
        let stored = conformance::corpus::load(&dir.join(name))
            .unwrap_or_else(|e| panic!("no fence witness {name} ({e}): {regenerate}"));
        assert_eq!(&stored, trace, "{name} is not the model's shortest path to its fence: {regenerate}");
    }
    let stray: Vec<&PathBuf> =
        files.iter().filter(|path| is_fence(path) && !fences.iter().any(|(name, _)| path.ends_with(name))).collect();
    assert!(stray.is_empty(), "fence witnesses another trace now shows: {stray:?}: {regenerate}");
    let expected = violated + witnesses + scenarios.len() + fences.len();
    assert_eq!(files.len(), expected, "stale or missing files: {regenerate}");
}
