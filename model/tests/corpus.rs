//! Replays every trace of the regression corpus (`tests/traces/`) through the model.

use model::check::{is_discovery, property_named, replay, Verdict};
use model::trace::Trace;
use model::ConsumerModel;
use std::path::{Path, PathBuf};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces")
}

/// Replays one trace file and checks that its last state shows the recorded verdict. Returns
/// a one-line reason naming the file (and the step) when it does not.
fn check_trace(path: &Path) -> Result<(), String> {
    let name = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
    let trace = Trace::from_json(&text).map_err(|e| format!("{name}: {e}"))?;
    let model = ConsumerModel::new(trace.config.clone());
    let states = replay(&model, &trace.actions).map_err(|e| format!("{name}: no longer replays in the model: {e}"))?;
    let Some(property_name) = &trace.property else { return Ok(()) };
    let property = property_named(&model, property_name)
        .ok_or_else(|| format!("{name}: the model has no property '{property_name}' for this config"))?;
    let last = states.last().expect("replay returns the initial state at least");
    let discovered = is_discovery(&model, &property, last);
    let expected = matches!(trace.verdict, Some(Verdict::Violated) | Some(Verdict::Reached));
    if discovered != expected {
        return Err(format!(
            "{name}: after {} steps, '{property_name}' is {} but the trace records {:?}",
            trace.actions.len(),
            if discovered { "discovered" } else { "not discovered" },
            trace.verdict
        ));
    }
    Ok(())
}

#[test]
fn every_corpus_trace_replays_to_its_recorded_verdict() {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("tests/traces exists")
        .map(|entry| entry.expect("readable directory entry").path())
        .filter(|path| model::trace::is_trace_file(path))
        .collect();
    paths.sort();
    // Every violated cell of spec.md's table has its counterexample; fewer files means the
    // corpus was not regenerated after a model change.
    let violated =
        model::expected::from_spec().expect("spec.md's table").values().filter(|v| **v == Some(false)).count();
    assert!(
        paths.len() >= violated,
        "tests/traces holds {} traces; regenerate with `cargo run --release -p conformance -- regenerate tests/traces`",
        paths.len()
    );
    let failures: Vec<String> = paths.iter().filter_map(|path| check_trace(path).err()).collect();
    assert!(failures.is_empty(), "corpus traces that fail:\n{}", failures.join("\n"));
}

#[test]
fn a_trace_that_no_longer_replays_is_named_with_its_step() {
    let path = corpus_dir().join("atomic--no-duplicate.json");
    let mut trace = Trace::from_json(&std::fs::read_to_string(&path).expect("corpus file")).expect("valid trace");
    // Dropping the append makes the first fetch impossible: the log is empty.
    trace.actions.remove(0);
    let dir = std::env::temp_dir().join(format!("onceproof-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let broken = dir.join("broken.json");
    std::fs::write(&broken, trace.to_json()).expect("write temp trace");
    let error = check_trace(&broken).expect_err("a trace with a missing append cannot replay");
    std::fs::remove_dir_all(&dir).expect("clean temp dir");
    assert!(error.contains("broken.json") && error.contains("step 1"), "unexpected message: {error}");
}
