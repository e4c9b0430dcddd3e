//! The lane's load test, small (`cargo test -p kafka-lane --features kafka --test load`): owner
//! processes of one group on an in-process broker, killed and replaced while records are
//! produced. atomic-fenced must end exact; effect-first may apply records twice (counted) but
//! never lose one. docs/kafka-lane.md has the larger runs' figures.
#![cfg(feature = "kafka")]

use kafka_lane::load::{load, LoadArgs};
use std::path::Path;
use std::time::{Duration, Instant};

/// The load family's time cap (each run takes about 5 s).
const LOAD_CAP: Duration = Duration::from_secs(180);

fn args(strategy: &str, commit_every: u32, dir: &Path) -> LoadArgs {
    LoadArgs {
        owners: 3,
        records: 1200,
        partitions: 4,
        disruptions: 4,
        strategy: strategy.to_string(),
        commit_every,
        seed: 1,
        bootstrap: None,
        topic: None,
        dir: Some(dir.to_path_buf()),
    }
}

#[test]
fn kills_and_leaves_under_load() {
    let program = Path::new(env!("CARGO_BIN_EXE_kafka-lane"));
    let started = Instant::now();
    // (strategy, commit every, whether the total must be exact)
    let cases = [("atomic-fenced", 1, true), ("effect-first", 10, false)];
    for (strategy, commit_every, exact) in cases {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("load-{strategy}"));
        let _ = std::fs::remove_dir_all(&dir);
        let report = load(&args(strategy, commit_every, &dir), program).expect("the load test runs");
        println!("{strategy}: {report:?}");
        let records = i64::from(report.records);
        assert_eq!(report.kills + report.leaves, 4, "{strategy}: every disruption struck");
        assert!(report.total >= records, "{strategy}: {} of {records} records lost", records - report.total);
        if exact {
            assert_eq!(report.total, records, "{strategy}: {} duplicate applications", report.total - records);
        }
        assert!(started.elapsed() < LOAD_CAP, "the load family ran past its cap of {LOAD_CAP:?}");
    }
}
