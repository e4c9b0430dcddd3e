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
    assert_eq!(files.len(), violated + witnesses + scenarios.len(), "stale or missing files: {regenerate}");
}
