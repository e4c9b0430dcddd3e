//! Tests of the idempotent producer: exact retries, restarts, gaps, fencing, epochs, the
//! window of recent batches, independence of producers and partitions, torn batches, and a
//! lost acknowledgement through the `consumer` binary in child processes.

mod common;

use std::fs;
use std::ops::Range;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use common::{describe, expect_code, stderr, stdout, DataDir, CRASHED, FAILED};
use consumer::log::{Appended, Log, LogError, Producer, TailRepair, RECENT_BATCHES};
use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, RngSeed};

/// Serialises the tests of this file. A child process forked by one test holds copies of the
/// parent's descriptors until it execs, the writer lock's among them, so a test reopening a
/// log at that moment in another thread would find the lock held.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    // A test that panicked while holding the guard leaves nothing behind that others share.
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What an idempotent batch must come back with.
#[derive(Clone, Debug)]
enum Expect {
    /// New records at these offsets.
    Appended(Range<u64>),
    /// An exact retry: the original batch's offsets, and nothing appended.
    Duplicate(Range<u64>),
    OutOfOrder {
        expected: u32,
    },
    Fenced {
        current: u32,
    },
}

/// One step of a scenario.
#[derive(Clone, Debug)]
enum Step {
    /// An idempotent batch of `count` records from producer `(id, epoch)`.
    Send { partition: u32, producer: (u64, u32), base: u32, count: u32, expect: Expect },
    /// A plain `append_batch` of `count` records, which no producer owns.
    Plain { partition: u32, count: u32 },
    /// Retention up to `before` on `partition`.
    Retain { partition: u32, before: u64 },
    /// Drops the writer and opens the log again, as a restart does.
    Reopen,
}

use Expect::{Appended as New, Duplicate, Fenced, OutOfOrder};

/// An idempotent batch on partition 0.
fn send(producer: (u64, u32), base: u32, count: u32, expect: Expect) -> Step {
    on(0, producer, base, count, expect)
}

/// An idempotent batch on `partition`.
fn on(partition: u32, producer: (u64, u32), base: u32, count: u32, expect: Expect) -> Step {
    Step::Send { partition, producer, base, count, expect }
}

struct Scenario {
    name: &'static str,
    partitions: u32,
    steps: Vec<Step>,
}

fn scenarios() -> Vec<Scenario> {
    // Six single-record batches of producer 1, one more than the window of recent batches.
    let six: Vec<Step> = (0..6).map(|i| send((1, 0), i, 1, New(i.into()..(i + 1).into()))).collect();
    assert_eq!(RECENT_BATCHES, 5, "the window scenario assumes Kafka's five batches");
    vec![
        Scenario {
            name: "an exact retry returns the first result and appends nothing",
            partitions: 1,
            steps: vec![
                send((1, 0), 0, 2, New(0..2)),
                send((1, 0), 0, 2, Duplicate(0..2)),
                send((1, 0), 0, 2, Duplicate(0..2)),
            ],
        },
        Scenario {
            name: "the next sequence appends",
            partitions: 1,
            steps: vec![
                send((1, 0), 0, 2, New(0..2)),
                send((1, 0), 2, 3, New(2..5)),
                send((1, 0), 5, 1, New(5..6)),
                send((1, 0), 2, 3, Duplicate(2..5)),
            ],
        },
        Scenario {
            name: "a restart keeps deduplicating and keeps the next sequence",
            partitions: 1,
            steps: vec![
                send((1, 0), 0, 2, New(0..2)),
                send((1, 0), 2, 1, New(2..3)),
                Step::Reopen,
                send((1, 0), 0, 2, Duplicate(0..2)),
                send((1, 0), 2, 1, Duplicate(2..3)),
                send((1, 0), 5, 1, OutOfOrder { expected: 3 }),
                send((1, 0), 3, 1, New(3..4)),
            ],
        },
        Scenario {
            name: "a gap, an overlap and a first batch not at 0 are out of order",
            partitions: 1,
            steps: vec![
                send((1, 0), 1, 1, OutOfOrder { expected: 0 }),
                send((1, 0), 0, 2, New(0..2)),
                send((1, 0), 3, 1, OutOfOrder { expected: 2 }),
                // Not an exact match of the recorded batch 0..=1, so not a duplicate either.
                send((1, 0), 0, 1, OutOfOrder { expected: 2 }),
                send((1, 0), 1, 1, OutOfOrder { expected: 2 }),
                send((1, 0), 2, 1, New(2..3)),
            ],
        },
        Scenario {
            name: "an older epoch is fenced, even for an exact retry",
            partitions: 1,
            steps: vec![
                send((1, 1), 0, 1, New(0..1)),
                send((1, 2), 0, 1, New(1..2)),
                send((1, 1), 0, 1, Fenced { current: 2 }),
                send((1, 1), 1, 1, Fenced { current: 2 }),
                Step::Reopen,
                send((1, 1), 1, 1, Fenced { current: 2 }),
                send((1, 2), 1, 1, New(2..3)),
            ],
        },
        Scenario {
            name: "a newer epoch restarts the sequence at 0 and forgets the older batches",
            partitions: 1,
            steps: vec![
                send((1, 1), 0, 2, New(0..2)),
                send((1, 2), 2, 1, OutOfOrder { expected: 0 }),
                send((1, 2), 0, 2, New(2..4)),
                send((1, 2), 0, 2, Duplicate(2..4)),
                send((1, 2), 2, 1, New(4..5)),
                Step::Reopen,
                send((1, 2), 0, 2, Duplicate(2..4)),
                send((1, 3), 0, 1, New(5..6)),
            ],
        },
        Scenario {
            name: "a retry of a batch older than the last five is out of order, not appended again",
            partitions: 1,
            steps: [
                six.clone(),
                vec![
                    send((1, 0), 0, 1, OutOfOrder { expected: 6 }),
                    send((1, 0), 1, 1, Duplicate(1..2)),
                    Step::Reopen,
                    send((1, 0), 0, 1, OutOfOrder { expected: 6 }),
                    send((1, 0), 1, 1, Duplicate(1..2)),
                    send((1, 0), 5, 1, Duplicate(5..6)),
                ],
            ]
            .concat(),
        },
        Scenario {
            name: "two producers are independent",
            partitions: 1,
            steps: vec![
                send((1, 0), 0, 1, New(0..1)),
                send((2, 0), 0, 1, New(1..2)),
                send((1, 0), 1, 2, New(2..4)),
                send((2, 0), 0, 1, Duplicate(1..2)),
                send((2, 0), 1, 1, New(4..5)),
                send((1, 0), 1, 2, Duplicate(2..4)),
                send((2, 1), 0, 1, New(5..6)),
                send((1, 0), 3, 1, New(6..7)),
                send((2, 0), 2, 1, Fenced { current: 1 }),
            ],
        },
        Scenario {
            name: "partitions are independent",
            partitions: 2,
            steps: vec![
                on(0, (1, 0), 0, 2, New(0..2)),
                on(1, (1, 0), 0, 1, New(0..1)),
                on(1, (1, 0), 1, 1, New(1..2)),
                on(0, (1, 0), 0, 2, Duplicate(0..2)),
                on(0, (1, 0), 1, 1, OutOfOrder { expected: 2 }),
                on(0, (1, 1), 0, 1, New(2..3)),
                // The new epoch on partition 0 fences nothing on partition 1.
                on(1, (1, 0), 2, 1, New(2..3)),
                Step::Reopen,
                on(1, (1, 0), 1, 1, Duplicate(1..2)),
                on(0, (1, 0), 2, 1, Fenced { current: 1 }),
            ],
        },
        Scenario {
            name: "plain appends mix with idempotent ones and are never deduplicated",
            partitions: 1,
            steps: vec![
                Step::Plain { partition: 0, count: 2 },
                send((1, 0), 0, 1, New(2..3)),
                Step::Plain { partition: 0, count: 1 },
                Step::Plain { partition: 0, count: 1 },
                send((1, 0), 0, 1, Duplicate(2..3)),
                Step::Reopen,
                send((1, 0), 0, 1, Duplicate(2..3)),
                send((1, 0), 1, 1, New(5..6)),
            ],
        },
        Scenario {
            name: "records retained away still deduplicate after a restart",
            partitions: 1,
            steps: vec![
                send((1, 0), 0, 2, New(0..2)),
                send((1, 0), 2, 1, New(2..3)),
                Step::Retain { partition: 0, before: 3 },
                Step::Reopen,
                send((1, 0), 0, 2, Duplicate(0..2)),
                send((1, 0), 3, 1, New(3..4)),
            ],
        },
        Scenario {
            name: "an empty batch appends nothing and is only checked for fencing",
            partitions: 1,
            steps: vec![
                send((1, 0), 7, 0, New(0..0)),
                send((1, 1), 0, 1, New(0..1)),
                send((1, 1), 9, 0, New(1..1)),
                send((1, 0), 0, 0, Fenced { current: 1 }),
                send((1, 1), 1, 1, New(1..2)),
            ],
        },
    ]
}

/// The payloads of a batch: unique per step, so that a record appended twice would show.
fn batch(step: usize, count: u32) -> Vec<Vec<u8>> {
    (0..count).map(|i| format!("step {step} record {i}").into_bytes()).collect()
}

/// The writer of the log in `dir`, made first (as `init` does) if there is none.
fn writer(dir: &Path, partitions: u32) -> Log {
    let identity = Log::init(dir, partitions).expect("init the log");
    let (log, repairs) = Log::open_writer(dir, identity).expect("open writer");
    assert_eq!(repairs, vec![], "a cleanly written log needs no repair");
    log
}

/// Every readable record of `partition`, with the log start.
fn contents(log: &mut Log, partition: u32) -> (u64, Vec<Vec<u8>>) {
    let (start, end) = (log.start(partition).unwrap(), log.end(partition).unwrap());
    let records = (start..end).map(|o| log.read(partition, o).unwrap().payload).collect();
    (start, records)
}

/// Checks an error against the expected one, including its one-line message.
fn check_error(case: &str, error: &LogError, partition: u32, producer: Producer, base: u32, expect: &Expect) {
    let text = error.to_string();
    assert_eq!(text.lines().count(), 1, "case '{case}': '{text}' is not one line");
    let mut numbers = vec![format!("partition {partition}"), format!("producer {}", producer.id)];
    match (error, expect) {
        (LogError::OutOfOrderSequence { partition: p, producer: id, expected, found }, OutOfOrder { expected: e }) => {
            assert_eq!((*p, *id, *expected, *found), (partition, producer.id, *e, base), "case '{case}'");
            numbers.extend([format!("expected base sequence {e}"), format!("got {base}")]);
        }
        (LogError::ProducerFenced { partition: p, producer: id, epoch, current }, Fenced { current: c }) => {
            assert_eq!((*p, *id, *epoch, *current), (partition, producer.id, producer.epoch, *c), "case '{case}'");
            numbers.extend([format!("epoch {}", producer.epoch), format!("current epoch {c}")]);
        }
        _ => panic!("case '{case}': expected {expect:?}, got {error}"),
    }
    for number in numbers {
        assert!(text.contains(&number), "case '{case}': '{text}' lacks '{number}'");
    }
}

/// Runs a scenario, checking every result and, after every step, every partition's records
/// against what the expected appends put there.
fn run(scenario: &Scenario) {
    let case = scenario.name;
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), scenario.partitions);
    let mut expected: Vec<Vec<Vec<u8>>> = vec![Vec::new(); scenario.partitions as usize];
    for (i, step) in scenario.steps.iter().enumerate() {
        let case = format!("{case}, step {i}");
        match step {
            Step::Send { partition, producer: (id, epoch), base, count, expect } => {
                let producer = Producer { id: *id, epoch: *epoch };
                let payloads = batch(i, *count);
                let end_before = log.end(*partition).unwrap();
                let result = log.append_idempotent(*partition, producer, *base, &payloads);
                let records = &mut expected[*partition as usize];
                match (&result, expect) {
                    (Ok(got), New(offsets)) => {
                        assert_eq!(*got, Appended { offsets: offsets.clone(), duplicate: false }, "case '{case}'");
                        assert_eq!(
                            offsets.start,
                            records.len() as u64,
                            "case '{case}': the scenario expects a wrong offset"
                        );
                        records.extend(payloads);
                    }
                    (Ok(got), Duplicate(offsets)) => {
                        assert_eq!(*got, Appended { offsets: offsets.clone(), duplicate: true }, "case '{case}'");
                    }
                    (Err(error), _) => check_error(&case, error, *partition, producer, *base, expect),
                    (Ok(got), _) => panic!("case '{case}': expected {expect:?}, got {got:?}"),
                }
                if !matches!(expect, New(_)) {
                    assert_eq!(log.end(*partition).unwrap(), end_before, "case '{case}': the log end moved");
                }
            }
            Step::Plain { partition, count } => {
                let payloads = batch(i, *count);
                let start = expected[*partition as usize].len() as u64;
                assert_eq!(
                    log.append_batch(*partition, &payloads).unwrap(),
                    start..start + u64::from(*count),
                    "case '{case}'"
                );
                expected[*partition as usize].extend(payloads);
            }
            Step::Retain { partition, before } => {
                assert_eq!(log.retain_before(*partition, *before).unwrap(), *before, "case '{case}'");
            }
            Step::Reopen => {
                drop(log);
                log = writer(dir.path(), scenario.partitions);
            }
        }
        for (partition, records) in expected.iter().enumerate() {
            let (start, found) = contents(&mut log, partition as u32);
            assert_eq!(found, records[start as usize..], "case '{case}': partition {partition} holds other records");
        }
    }
}

#[test]
fn scenarios_of_retries_epochs_and_sequences() {
    let _serial = serial();
    for scenario in scenarios() {
        run(&scenario);
    }
}

/// Bytes of the partition file's header (magic, log id, partition, crc32c), as documented in
/// `src/log/mod.rs`.
const HEADER: u64 = 24;

/// The byte length of a frame of `payload_len` bytes, as documented in `src/log/mod.rs`.
fn frame_len(payload_len: usize) -> u64 {
    40 + payload_len as u64
}

#[test]
fn a_batch_torn_anywhere_is_dropped_whole_and_its_retry_appends_it() {
    let _serial = serial();
    let producer = Producer { id: 3, epoch: 1 };
    let first = vec![b"first".to_vec()];
    let torn = vec![b"torn-0".to_vec(), b"torn-1".to_vec(), b"torn-2".to_vec()];
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 1);
    log.append_idempotent(0, producer, 0, &first).unwrap();
    // A crash during the second batch's write never reaches its acknowledgement record.
    let ack = dir.path().join("partition-0.ack");
    let acknowledged_first = fs::read(&ack).unwrap();
    log.append_idempotent(0, producer, 1, &torn).unwrap();
    drop(log);
    let path = dir.path().join("partition-0.log");
    let full = fs::read(&path).unwrap();
    let identity = Log::read_identity(dir.path()).unwrap().expect("made by writer()");
    let kept_len = HEADER + frame_len(5);
    assert_eq!(full.len() as u64, kept_len + 3 * frame_len(6), "the log layout is not the documented one");
    // Every cut inside the second batch, between its frames as well as inside them, is
    // what a crash during its write can leave.
    for cut in kept_len + 1..full.len() as u64 {
        fs::write(&path, &full[..cut as usize]).unwrap();
        fs::write(&ack, &acknowledged_first).unwrap();
        let mut reader = Log::open_reader(dir.path(), identity).unwrap();
        assert_eq!(reader.end(0).unwrap(), 1, "cut at {cut}: a reader saw part of a batch");
        let (mut log, repairs) = Log::open_writer(dir.path(), identity).unwrap();
        let (dropped_bytes, adopted) = (cut - kept_len, 1..1);
        let repair = TailRepair { path: path.clone(), partition: 0, kept_records: 1, dropped_bytes, adopted };
        assert_eq!(repairs, vec![repair], "cut at {cut}");
        assert_eq!(
            log.append_idempotent(0, producer, 1, &torn).unwrap(),
            Appended { offsets: 1..4, duplicate: false },
            "cut at {cut}: the retry of a torn batch must append it"
        );
        assert_eq!(
            log.append_idempotent(0, producer, 0, &first).unwrap(),
            Appended { offsets: 0..1, duplicate: true },
            "cut at {cut}"
        );
        assert_eq!(fs::read(&path).unwrap(), full, "cut at {cut}: the retry must write the same bytes");
    }
}

#[test]
#[should_panic(expected = "producer id 0 is reserved for plain appends")]
fn producer_id_0_is_refused() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 1);
    let _ = log.append_idempotent(0, Producer { id: 0, epoch: 0 }, 0, &[b"x".to_vec()]);
}

/// How a generated call picks its epoch and base sequence, relative to the batches its
/// producer got accepted so far in that partition (epoch 1 and sequence 0 before any).
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// The next sequence at the last accepted epoch.
    Next,
    /// An exact retry of the accepted batch this many batches back (the last one is 0).
    Retry(usize),
    /// The next epoch, starting again at sequence 0.
    Bump,
    /// The epoch below the last accepted one, at the next sequence.
    Stale,
    /// The last accepted epoch and this base sequence.
    Base(u32),
}

/// One idempotent call of the generated workload.
#[derive(Clone, Debug)]
struct Call {
    partition: u32,
    id: u64,
    kind: Kind,
    count: u32,
}

/// A batch the log accepted as new: (epoch, base sequence, count, offsets).
type Accepted = (u32, u32, u32, Range<u64>);

impl Call {
    /// The producer and base sequence of this call, given the producer's accepted batches.
    fn resolve(&self, accepted: &[Accepted]) -> (Producer, u32, u32) {
        let (epoch, next) = accepted.last().map_or((1, 0), |(epoch, base, count, _)| (*epoch, base + count));
        let producer = |epoch| Producer { id: self.id, epoch };
        match self.kind {
            Kind::Next => (producer(epoch), next, self.count),
            Kind::Retry(back) => match accepted.iter().rev().nth(back) {
                Some((epoch, base, count, _)) => (producer(*epoch), *base, *count),
                None => (producer(epoch), next, self.count),
            },
            Kind::Bump => (producer(epoch + 1), 0, self.count),
            Kind::Stale => (producer(epoch.saturating_sub(1)), next, self.count),
            Kind::Base(base) => (producer(epoch), base, self.count),
        }
    }
}

fn calls() -> impl Strategy<Value = Vec<Call>> {
    let kind = prop_oneof![
        4 => Just(Kind::Next),
        4 => (0usize..7).prop_map(Kind::Retry),
        1 => Just(Kind::Bump),
        1 => Just(Kind::Stale),
        1 => (0u32..8).prop_map(Kind::Base),
    ];
    let count = prop_oneof![6 => Just(1u32), 3 => Just(2), 1 => Just(0)];
    let call =
        (0u32..2, 1u64..3, kind, count).prop_map(|(partition, id, kind, count)| Call { partition, id, kind, count });
    prop::collection::vec(call, 1..40)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 32,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        rng_seed: RngSeed::Fixed(20_260_414),
        ..ProptestConfig::default()
    })]

    /// The producer table a writer rebuilds from the log on open answers every call exactly
    /// as the table kept in memory: one log is reopened after every call, the other never.
    /// The rules the answers must follow whatever came before are checked along the way.
    #[test]
    fn a_restart_after_any_call_changes_no_answer(calls in calls()) {
        let _serial = serial();
        let (kept, restarted) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut log = writer(kept.path(), 2);
        let mut accepted: std::collections::HashMap<(u32, u64), Vec<Accepted>> = Default::default();
        for (i, call) in calls.iter().enumerate() {
            let history = accepted.entry((call.partition, call.id)).or_default();
            let (producer, base, count) = call.resolve(history);
            // A retry of one of the last five batches of the producer's current epoch must
            // be a duplicate, whatever came before.
            let must_be_duplicate = match call.kind {
                Kind::Retry(back) => history
                    .last()
                    .is_some_and(|last| back < 5 && history.iter().rev().nth(back).is_some_and(|a| a.0 == last.0)),
                Kind::Next | Kind::Bump | Kind::Stale | Kind::Base(_) => false,
            };
            let payloads = batch(i, count);
            let end = log.end(call.partition).unwrap();
            let answer = log.append_idempotent(call.partition, producer, base, &payloads);
            let mut reopened = writer(restarted.path(), 2);
            let again = reopened.append_idempotent(call.partition, producer, base, &payloads);
            prop_assert_eq!(format!("{answer:?}"), format!("{again:?}"), "call {}: {:?}", i, call);
            match (&answer, call.kind) {
                (Ok(Appended { offsets, duplicate: false }), _) => {
                    prop_assert_eq!(offsets.clone(), end..end + u64::from(count), "call {}", i);
                    if count > 0 {
                        history.push((producer.epoch, base, count, offsets.clone()));
                    }
                }
                (Ok(Appended { offsets, duplicate: true }), _) => {
                    let original =
                        history.iter().rev().take(5).find(|(e, b, c, _)| (*e, *b, *c) == (producer.epoch, base, count));
                    prop_assert_eq!(
                        original.map(|a| a.3.clone()),
                        Some(offsets.clone()),
                        "call {}: a duplicate of no recent batch",
                        i
                    );
                }
                (Err(error), _) => prop_assert!(
                    matches!(error, LogError::OutOfOrderSequence { .. } | LogError::ProducerFenced { .. }),
                    "call {}: {}", i, error
                ),
            }
            prop_assert!(
                !must_be_duplicate || matches!(answer, Ok(Appended { duplicate: true, .. })),
                "call {}: {:?}",
                i,
                answer
            );
            // Only a new batch moves the end.
            let grew = match &answer {
                Ok(Appended { offsets, duplicate: false }) => offsets.end - offsets.start,
                _ => 0,
            };
            prop_assert_eq!(log.end(call.partition).unwrap(), end + grew, "call {}", i);
        }
        let mut reopened = writer(restarted.path(), 2);
        for partition in 0..2 {
            prop_assert_eq!(contents(&mut log, partition), contents(&mut reopened, partition));
        }
    }
}

/// One `consumer append` run of the CLI scenario and what it must print.
struct CliStep {
    args: &'static [&'static str],
    code: i32,
    /// The exact stdout, or for a failure the texts its single stderr line must contain.
    out: &'static [&'static str],
}

/// The arguments of the batch whose acknowledgement gets lost.
const FIRST: &[&str] = &["--producer-id", "7", "--producer-epoch", "1", "--sequence", "0", "--delta", "5"];

#[test]
fn a_lost_acknowledgement_is_retried_as_a_duplicate_through_the_binary() {
    let _serial = serial();
    let case = "lost acknowledgement";
    let dir = DataDir::new(case, 1);
    let crashed = dir.run("append", &[FIRST, &["--crash-after-append"]].concat());
    expect_code(case, "append --crash-after-append", &crashed, CRASHED);
    assert_eq!(
        stdout(&crashed),
        "",
        "case '{case}': the crash came before the acknowledgement\n{}",
        describe(&crashed)
    );
    assert_eq!(dir.status(case)["log"][0]["end"], 1, "case '{case}': the append before the crash is durable");

    let retry = dir.run("append", FIRST);
    expect_code(case, "the retry", &retry, 0);
    assert_eq!(stdout(&retry), "duplicate of offsets 0..1 (already durable; nothing appended)\n", "case '{case}'");
    assert_eq!(dir.status(case)["log"][0]["end"], 1, "case '{case}': the retry appended nothing");
}

#[test]
fn the_append_subcommand_speaks_the_producer_rules() {
    let _serial = serial();
    let steps = [
        CliStep {
            args: &["--delta", "1", "--count", "2"],
            code: 0,
            out: &["appended offsets 0..2 to partition 0 (durable)\n"],
        },
        CliStep { args: FIRST, code: 0, out: &["appended offsets 2..3 to partition 0 (durable)\n"] },
        CliStep { args: FIRST, code: 0, out: &["duplicate of offsets 2..3 (already durable; nothing appended)\n"] },
        CliStep {
            args: &["--producer-id", "7", "--producer-epoch", "1", "--sequence", "1", "--delta", "5", "--count", "3"],
            code: 0,
            out: &["appended offsets 3..6 to partition 0 (durable)\n"],
        },
        CliStep {
            args: &["--producer-id", "7", "--producer-epoch", "1", "--sequence", "9", "--delta", "5"],
            code: FAILED,
            out: &["error: out-of-order sequence", "producer 7", "partition 0", "expected base sequence 4, got 9"],
        },
        CliStep {
            args: &["--producer-id", "7", "--producer-epoch", "2", "--sequence", "0", "--delta", "5"],
            code: 0,
            out: &["appended offsets 6..7 to partition 0 (durable)\n"],
        },
        CliStep {
            args: FIRST,
            code: FAILED,
            out: &["error: producer 7 is fenced on partition 0", "epoch 1 is below the current epoch 2"],
        },
        CliStep {
            args: &["--producer-id", "7", "--sequence", "0", "--delta", "5"],
            code: FAILED,
            out: &["error: --producer-id, --producer-epoch and --sequence go together", "missing --producer-epoch"],
        },
        CliStep {
            args: &["--producer-id", "0", "--producer-epoch", "1", "--sequence", "0", "--delta", "5"],
            code: FAILED,
            out: &["error: invalid value '0' for '--producer-id"],
        },
    ];
    let case = "producer rules";
    let dir = DataDir::new(case, 1);
    for (i, step) in steps.iter().enumerate() {
        let what = format!("step {i}: append {}", step.args.join(" "));
        let output = dir.run("append", step.args);
        expect_code(case, &what, &output, step.code);
        if step.code == 0 {
            assert_eq!(stdout(&output), step.out[0], "case '{case}', {what}");
            continue;
        }
        let errors = stderr(&output);
        let first = errors.lines().next().unwrap_or_default();
        assert_eq!(stdout(&output), "", "case '{case}', {what}: a rejected append prints nothing on stdout");
        for expected in step.out {
            assert!(first.contains(expected), "case '{case}', {what}: '{first}' lacks '{expected}'");
        }
    }
    assert_eq!(dir.status(case)["log"][0]["end"], 7, "case '{case}': the rejected appends appended nothing");
}
