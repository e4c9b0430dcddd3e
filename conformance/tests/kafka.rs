//! The Kafka-protocol lane (`cargo test -p conformance --features kafka --test kafka`): every
//! trace of tests/traces whose row is on the lane, replayed on nisshi-broker in this process
//! through rdkafka owner processes, compared with the model's state after every step.
#![cfg(feature = "kafka")]

use conformance::kafka::{lane_strategy, LaneSession, LaneVerdict};
use std::path::Path;
use std::time::{Duration, Instant};

/// The lane's time cap: 90 traces take about 185 s (a rebalance through the coordinator costs
/// about a second).
const LANE_CAP: Duration = Duration::from_secs(600);

/// The traces the real broker ends early, and why: a zombie's offset commit that the model's
/// effect-first and commit-first rows let land (their offset store has no fence) is refused by
/// the broker's generation check, since the zombie's client has left the group. Every other
/// lane trace must conform.
const BROKER_FENCED: [&str; 7] = [
    "commit-first--fenced-writes.json",
    "commit-first--monotonic-checkpoint.json",
    "commit-first--no-duplicate.json",
    "commit-first--replay.json",
    "commit-first--zombie-write.json",
    "effect-first--monotonic-checkpoint.json",
    "effect-first--no-silent-skip.json",
];

/// The traces the lane leaves out, and why: its owners read one partition; and broker-relaxed's
/// group forms (its `sync`) while the member it replaces is still in it, which nisshi-broker
/// 0.6.0 never does (it forms the group once that member's session ended).
const LEFT_OUT: [&str; 4] = [
    "broker-relaxed--fenced-writes.json",
    "broker-relaxed--zombie-fenced.json",
    "broker-relaxed--zombie-write.json",
    "scenario--dedup-atomic-keys-by-partition.json",
];

/// How many traces of tests/traces are of the lane's rows: a regenerated corpus that loses
/// some fails here rather than silently shrinking the lane.
const LANE_TRACES: usize = 90;

#[test]
fn the_lane_rows_traces_replay_on_the_broker() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces");
    let mut files: Vec<_> = std::fs::read_dir(&corpus)
        .expect("tests/traces exists")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kafka-lane");
    let _ = std::fs::remove_dir_all(&dir);
    let program = Path::new(env!("CARGO_BIN_EXE_conformance"));
    let mut session = LaneSession::start(program, &["kafka"], &dir).expect("the broker starts");
    let started = Instant::now();
    let mut failures = Vec::new();
    let mut replayed = 0;
    for file in &files {
        let trace = conformance::corpus::load(file).expect("a corpus trace loads");
        if lane_strategy(trace.config.strategy).is_none() {
            continue;
        }
        replayed += 1;
        let name = file.file_name().expect("a file name").to_string_lossy().into_owned();
        // The broker's coordinator has once, in about a thousand replays, not assigned a
        // joining member the partition within 30 s (the member it replaced had left): the
        // trace runs once more on fresh groups, and a second failure fails the test.
        let report = session.replay(&trace).or_else(|first| {
            println!("{name}: the lane failed ({first}); once more on fresh groups");
            session.replay(&trace)
        });
        let report = report.unwrap_or_else(|e| panic!("{name}: the lane failed twice: {e}"));
        println!("{name}: {:?} ({} steps, {:.1} s)", report.verdict, report.steps_run, report.seconds);
        let fenced_expected = BROKER_FENCED.contains(&name.as_str());
        let left_out_expected = LEFT_OUT.contains(&name.as_str());
        let as_expected = match &report.verdict {
            LaneVerdict::Conforms => !fenced_expected && !left_out_expected,
            LaneVerdict::BrokerFenced { .. } => fenced_expected,
            LaneVerdict::LeftOut { .. } => left_out_expected,
            LaneVerdict::Diverged { .. } => false,
        };
        if !as_expected {
            failures.push(format!("{name}: {:?}", report.verdict));
        }
        assert!(started.elapsed() < LANE_CAP, "the lane ran past its cap of {LANE_CAP:?} at {name}");
    }
    session.stop().expect("the broker stops");
    assert_eq!(replayed, LANE_TRACES, "lane traces in tests/traces");
    assert!(
        failures.is_empty(),
        "{} of {replayed} lane traces did not end as expected (reproduce: cargo run -p conformance --features kafka -- kafka replay FILE):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
