//! Every trace of `tests/traces/` as its own test: replayed against the real consumer in
//! process and in-process mode, conforming step by step and with the verdict it records.

use std::path::{Path, PathBuf};

fn replay_corpus_file(path: &str) {
    let worker = PathBuf::from(env!("CARGO_BIN_EXE_conformance"));
    if let Err(message) = conformance::corpus::check_file(Path::new(path), Some(worker)) {
        panic!("{message}");
    }
}

include!(concat!(env!("OUT_DIR"), "/corpus_tests.rs"));

#[test]
fn the_corpus_holds_every_counterexample_and_every_scenario() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces");
    let files = conformance::corpus::expand(&[dir]).expect("tests/traces is readable");
    let scenarios = conformance::scenarios::all();
    for (name, _) in &scenarios {
        assert!(
            files.iter().any(|f| f.file_stem().is_some_and(|s| s == name.as_str())),
            "scenario {name} is missing: run `cargo run --release -p conformance -- regenerate tests/traces`"
        );
    }
    // One counterexample per violated cell of spec.md's table, plus the scenarios.
    let violated =
        model::expected::from_spec().expect("spec.md's table").values().filter(|v| **v == Some(false)).count();
    assert_eq!(
        files.len(),
        violated + scenarios.len(),
        "regenerate with `cargo run --release -p conformance -- regenerate tests/traces`"
    );
}
