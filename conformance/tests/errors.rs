//! The harness's typed errors for steps the real system cannot take: a step the real owner
//! refuses reads the same in both modes and names the owner; an action on a crashed owner is
//! `NotRunning`.

use conformance::driver::Mode;
use conformance::error::WorkerError;
use conformance::harness::{Harness, Options};
use conformance::Error;
use model::{Action, Config, Strategy};
use std::path::PathBuf;

#[test]
fn refused_steps_and_missing_owners_are_typed_errors_naming_the_owner() {
    let config = Config::new(Strategy::Atomic);
    for mode in [Mode::InProcess, Mode::Process] {
        let options =
            Options { worker_exe: Some(PathBuf::from(env!("CARGO_BIN_EXE_conformance"))), ..Options::new(mode) };
        let mut harness = Harness::new(&config, &options).expect("a fresh real system");
        // Nothing is fetched, so the real owner refuses to apply offset 0.
        let apply = Action::ApplyAtomic { group: 0, owner: 1, partition: 0, offset: 0 };
        let error = harness.apply(&apply).expect_err("the step is not enabled");
        match (&error, mode) {
            (Error::Owner { group, owner, source }, Mode::InProcess) => {
                assert_eq!((group.as_str(), owner.as_str()), ("g0", "o1"));
                assert!(matches!(**source, consumer::owner::OwnerError::NotEnabled { .. }), "{error}");
            }
            (Error::Worker { group, owner, source: WorkerError::Refused { command, .. } }, Mode::Process) => {
                assert_eq!((group.as_str(), owner.as_str(), command.as_str()), ("g0", "o1", "apply-atomic 0 0"));
            }
            _ => panic!("{mode:?}: unexpected error {error:?}"),
        }
        let line = error.to_string();
        assert!(line.starts_with("g0/o1") && line.contains("step 'apply-atomic 0 0' is not enabled"), "{line}");
        assert_eq!(line.lines().count(), 1, "{line}");
        harness.apply(&Action::Crash { group: 1, owner: 0 }).expect("a crash of a running owner");
        let error = harness.apply(&Action::Crash { group: 1, owner: 0 }).expect_err("already crashed");
        assert!(matches!(&error, Error::NotRunning { group, owner } if group == "g1" && owner == "o0"), "{error:?}");
    }
}
