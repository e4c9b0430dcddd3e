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

/// (trace file, mutation, the step at which the replay must diverge, what its diff shows)
const CASES: [(&str, Mutation, usize, &str); 3] = [
    // The zombie's transaction lands instead of aborting: the total doubles at step 6.
    ("scenario--zombie-atomic-fenced.json", Mutation::NoFence, 6, "total"),
    // The zombie's record below the stored offset is applied instead of skipped.
    ("scenario--zombie-atomic-cas.json", Mutation::NoCas, 6, "total"),
    // The second incarnation's email of record 0 carries no key: delivered twice, not dropped
    // (the diff shows the inbox's count of record (0, 0): `): 2`, where the model has 1).
    ("scenario--email-key-drops-the-repeat.json", Mutation::NoEmailKey, 6, "+                 ): 2,"),
];

#[test]
fn broken_consumers_diverge_at_the_step_that_shows_the_bug() {
    for (file, mutation, step, shows) in CASES {
        for mode in [Mode::InProcess, Mode::Process] {
            let worker = Some(PathBuf::from(env!("CARGO_BIN_EXE_conformance")));
            let options = Options { mutation: Some(mutation), worker_exe: worker.clone(), ..Options::new(mode) };
            match replay(&corpus(file), &options) {
                Err(ReplayFailure::Divergence { step: found, diff, .. }) => {
                    assert_eq!(found, step, "{file} with {mutation:?} in {mode:?} diverged at step {found}:\n{diff}");
                    assert!(
                        diff.contains(shows),
                        "{file} with {mutation:?}: the diff should show the {shows}:\n{diff}"
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
