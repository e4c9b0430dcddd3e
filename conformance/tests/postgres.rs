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

#[test]
fn the_corpus_conforms_on_postgres_in_both_modes() {
    let Some(server) = pg::server() else { return };
    let admin = server.url("postgres");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces");
    let files = conformance::corpus::expand(&[dir]).expect("tests/traces is readable");
    assert!(!files.is_empty(), "the corpus is empty");
    let mut failures = Vec::new();
    for file in &files {
        let trace = conformance::corpus::load(file).expect("a valid corpus file");
        for mode in [Mode::InProcess, Mode::Process] {
            let options = Options {
                postgres: Some(admin.clone()),
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
    }
    assert!(
        failures.is_empty(),
        "{} of {} replays diverge on PostgreSQL:\n{}",
        failures.len(),
        files.len() * 2,
        failures.join("\n")
    );
}
