//! One spelling of an earlier incarnation: after a pause of g0/o0, what the harness prints of
//! the process still running as o0 (a step's header, the side-by-side table, its process's
//! errors) names it `g0/o0'`, as spec.md §2.2 does, never by its paused slot (`g0/o2`).
//!
//! Replays `atomic-fenced--paused-write.json` (append, o0 fetches, o0 is paused, the earlier
//! incarnation applies) against Python consumers over the open protocol. Needs `python3`
//! (`bash scripts/setup.sh` installs it): without it the test prints `skipped: python3 not
//! installed (bash scripts/setup.sh installs it)` and returns, unless `CI` is set: then it fails.

#[path = "../../tests/support/tools.rs"]
mod tools;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A consumer that claims atomic-fenced and refuses every `apply-atomic` (`refused`): the
/// error reply names the process that sent it.
const REFUSING: &str = r#"
import sys
sys.path.insert(0, sys.argv[1])
from onceproof_consumer import StepError, serve
from atomic_fenced import AtomicFenced

class Refusing(AtomicFenced):
    def step_apply_atomic(self, partition, offset, lease):
        raise StepError("refused", "this consumer refuses every apply-atomic")

sys.exit(serve(Refusing))
"#;

fn quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

#[test]
fn an_earlier_incarnation_is_spelled_with_a_prime_wherever_the_harness_names_it() {
    if tools::python3().is_none() {
        return;
    }
    let examples = root().join("examples/python");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("incarnations");
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let refusing = dir.join("refusing.py");
    std::fs::write(&refusing, REFUSING).expect("write the refusing consumer");
    let trace = root().join("tests/traces/atomic-fenced--paused-write.json");
    // (consumer, lines the replay's output must contain)
    let table: [(String, &[&str]); 2] = [
        // The fence dropped: the earlier incarnation's write lands, a divergence.
        (
            format!("python3 {} --no-fence", quoted(&examples.join("atomic_fenced.py"))),
            &[
                "divergence after step 4 (g0/o0' applies p0 offset 0 and its next offset in one transaction):",
                "g0/o0' (earlier incarnation): p0 epoch 1 position 1 checkpoint 1, in flight {}",
            ],
        ),
        // An error reply of the earlier incarnation's process.
        (
            format!("python3 {} {}", quoted(&refusing), quoted(&examples)),
            &["the real system failed step 4 (g0/o0' applies p0 offset 0 and its next offset in one transaction): \
               g0/o0' (protocol process): "],
        ),
    ];
    for (consumer, expected) in table {
        let output = Command::new(env!("CARGO_BIN_EXE_conformance"))
            .args(["replay", "--inside-step", "off", "--strategy", "atomic-fenced", "--worker", &consumer])
            .arg(&trace)
            .output()
            .expect("the conformance binary runs");
        let text = String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{consumer} must diverge:\n{text}");
        for line in expected {
            assert!(text.contains(line), "{consumer}: the output lacks '{line}':\n{text}");
        }
        for slot in ["g0/o2", "  o0' "] {
            assert!(!text.contains(slot), "{consumer}: the output names the incarnation '{slot}':\n{text}");
        }
    }
}
