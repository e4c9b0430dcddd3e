//! Non-vacuity: a deliberately broken consumer (a test-only switch in the real code path) is
//! reported as divergent, at the step where the bug first shows.

use conformance::driver::Mode;
use conformance::harness::Options;
use conformance::replay::{replay, ReplayFailure};
use consumer::owner::Mutation;
use std::path::{Path, PathBuf};

fn corpus(name: &str) -> model::trace::Trace {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces").join(name);
    conformance::corpus::load(&path).expect("corpus file")
}

/// (trace file, mutation, the step at which the replay must diverge)
const CASES: [(&str, Mutation, usize); 2] = [
    // The zombie's transaction lands instead of aborting: the total doubles at step 6.
    ("scenario--zombie-atomic-fenced.json", Mutation::NoFence, 6),
    // The zombie's record below the stored offset is applied instead of skipped.
    ("scenario--zombie-atomic-cas.json", Mutation::NoCas, 6),
];

#[test]
fn broken_consumers_diverge_at_the_step_that_shows_the_bug() {
    for (file, mutation, step) in CASES {
        for mode in [Mode::InProcess, Mode::Process] {
            let worker = Some(PathBuf::from(env!("CARGO_BIN_EXE_conformance")));
            let options = Options { mutation: Some(mutation), worker_exe: worker.clone(), ..Options::new(mode) };
            match replay(&corpus(file), &options) {
                Err(ReplayFailure::Divergence { step: found, diff, .. }) => {
                    assert_eq!(found, step, "{file} with {mutation:?} in {mode:?} diverged at step {found}:\n{diff}");
                    assert!(
                        diff.contains("total"),
                        "{file} with {mutation:?}: the diff should show the total:\n{diff}"
                    );
                }
                other => panic!("{file} with {mutation:?} in {mode:?}: expected a divergence, got {other:?}"),
            }
            // The same trace conforms without the mutation, so the divergence is the bug's.
            let clean = Options { worker_exe: worker, ..Options::new(mode) };
            assert!(replay(&corpus(file), &clean).is_ok(), "{file} must conform without {mutation:?}");
        }
    }
}
