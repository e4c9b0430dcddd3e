//! The whole corpus of `tests/traces/` replayed against PostgreSQL, in both modes, with the
//! same conformance and verdict checks as against SQLite. Skips (printing why) only when no
//! PostgreSQL server binary exists; with `CI` set it fails instead.

#[path = "../../impl/tests/common/pg.rs"]
#[allow(dead_code)]
mod pg;

use conformance::driver::Mode;
use conformance::harness::Options;
use conformance::replay::replay;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

#[test]
fn the_corpus_conforms_on_postgres_in_both_modes() {
    let Some(server) = pg::server() else { return };
    let admin = server.url("postgres");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces");
    let files = conformance::corpus::expand(&[dir]).expect("tests/traces is readable");
    assert!(!files.is_empty(), "the corpus is empty");
    // Replays run on every core, a file at a time: each has its own data directory and schema.
    let next = AtomicUsize::new(0);
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    std::thread::scope(|scope| {
        for _ in 0..cores {
            scope.spawn(|| {
                while let Some(file) = files.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let found = replay_file(file, &admin);
                    failures.lock().expect("no replayer panics holding the lock").extend(found);
                }
            });
        }
    });
    let failures = failures.into_inner().expect("no replayer panicked");
    assert!(
        failures.is_empty(),
        "{} of {} replays diverge on PostgreSQL:\n{}",
        failures.len(),
        files.len() * 2,
        failures.join("\n")
    );
}

/// Replays one corpus file on PostgreSQL in both modes; each failure as a line to report.
fn replay_file(file: &Path, admin: &str) -> Vec<String> {
    let trace = conformance::corpus::load(file).expect("a valid corpus file");
    let mut failures = Vec::new();
    for mode in [Mode::InProcess, Mode::Process] {
        let options = Options {
            postgres: Some(admin.to_string()),
            worker_exe: Some(PathBuf::from(env!("CARGO_BIN_EXE_conformance"))),
            ..Options::new(mode)
        };
        if let Err(failure) = replay(&trace, &options) {
            failures.push(format!(
                "{} ({mode:?}): {failure}\nreproduce: cargo run -p conformance -- replay --postgres URL {}",
                file.display(),
                file.display()
            ));
        }
    }
    failures
}
