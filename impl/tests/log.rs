//! Tests of the on-disk log: the API contract, the documented frame layout, retention,
//! locking, live readers, and exhaustive corruption and truncation checks, over plain and
//! idempotent batches, driven by a deterministic proptest.

use std::fs;
use std::path::{Path, PathBuf};

use consumer::log::{decode_delta, encode_delta, Log, LogError, Producer, Record, TailRepair};
use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, RngSeed};

/// Bytes before the first frame.
const HEADER: usize = 8;
/// Frame bytes before the payload: crc32c, length, offset, producer id, producer epoch,
/// sequence and batch length.
const FRAME_HEAD: usize = 36;

fn writer(dir: &Path, partitions: u32) -> Log {
    let (log, repairs) = Log::open_writer(dir, partitions).expect("open writer");
    assert_eq!(repairs, vec![], "a cleanly written log needs no repair");
    log
}

fn log_file(dir: &Path, partition: u32) -> PathBuf {
    dir.join(format!("partition-{partition}.log"))
}

/// Byte position where each record's frame ends, given the payloads in offset order.
fn frame_ends(payloads: &[Vec<u8>]) -> Vec<usize> {
    let mut end = HEADER;
    payloads
        .iter()
        .map(|p| {
            end += FRAME_HEAD + p.len();
            end
        })
        .collect()
}

fn read_all(log: &mut Log, partition: u32) -> Vec<Vec<u8>> {
    let (start, end) = (log.start(partition).unwrap(), log.end(partition).unwrap());
    (start..end)
        .map(|o| {
            let record = log.read(partition, o).expect("read an offset inside start..end");
            assert_eq!(record.offset, o);
            record.payload
        })
        .collect()
}

#[test]
fn round_trip_across_reopen_with_dense_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 2);
    assert_eq!(log.partitions(), 2);
    for i in 0..5u64 {
        assert_eq!(log.append(0, format!("p0-{i}").as_bytes()).unwrap(), i);
    }
    assert_eq!(log.append(1, b"p1-0").unwrap(), 0, "offsets are scoped by partition");
    drop(log);

    let mut log = writer(dir.path(), 2);
    assert_eq!(log.end(0).unwrap(), 5);
    assert_eq!(log.read(0, 3).unwrap(), Record { offset: 3, payload: b"p0-3".to_vec() });
    assert_eq!(log.append(0, b"p0-5").unwrap(), 5, "offsets continue after a reopen");
    assert_eq!(read_all(&mut log, 1), vec![b"p1-0".to_vec()]);
}

#[test]
fn append_batch_returns_one_range() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 1);
    log.append(0, b"first").unwrap();
    let batch = vec![b"a".to_vec(), vec![], b"ccc".to_vec()];
    assert_eq!(log.append_batch(0, &batch).unwrap(), 1..4);
    assert_eq!(log.append_batch(0, &[]).unwrap(), 4..4, "an empty batch appends nothing");
    assert_eq!(log.read(0, 2).unwrap().payload, Vec::<u8>::new());
    assert_eq!(log.read(0, 3).unwrap().payload, b"ccc".to_vec());
    assert_eq!((log.start(0).unwrap(), log.end(0).unwrap()), (0, 4));
}

#[test]
fn start_and_end_of_an_empty_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 1);
    assert_eq!((log.start(0).unwrap(), log.end(0).unwrap()), (0, 0));
    assert!(matches!(log.read(0, 0), Err(LogError::OffsetOutOfRange { partition: 0, offset: 0, start: 0, end: 0 })));
}

#[test]
fn retention_hides_records_below_start_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 1);
    for i in 0..6 {
        log.append(0, &encode_delta(i)).unwrap();
    }
    assert_eq!(log.retain_before(0, 4).unwrap(), 4);
    let below = log.read(0, 3).unwrap_err();
    assert!(matches!(below, LogError::OffsetOutOfRange { offset: 3, start: 4, end: 6, .. }));
    assert_eq!(below.to_string(), "offset 3 of partition 0 is out of range: the log holds 4..6");
    assert_eq!(decode_delta(&log.read(0, 4).unwrap().payload), Some(4));
    assert_eq!(log.retain_before(0, 2).unwrap(), 4, "the start never moves backwards");
    assert!(matches!(log.retain_before(0, 7), Err(LogError::OffsetOutOfRange { offset: 7, .. })));
    drop(log);

    let mut log = writer(dir.path(), 1);
    assert_eq!((log.start(0).unwrap(), log.end(0).unwrap()), (4, 6));
    assert!(matches!(log.read(0, 0), Err(LogError::OffsetOutOfRange { .. })));
    assert_eq!(log.retain_before(0, 6).unwrap(), 6, "retaining up to the end empties the log");
    assert!(matches!(log.read(0, 5), Err(LogError::OffsetOutOfRange { start: 6, end: 6, .. })));
}

#[test]
fn a_second_writer_is_locked_out_but_readers_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let _first = writer(dir.path(), 1);
    match Log::open_writer(dir.path(), 1) {
        Err(LogError::Locked { path }) => assert_eq!(path, dir.path().join("writer.lock")),
        other => panic!("expected Locked, got {:?}", other.map(|_| ())),
    }
    Log::open_reader(dir.path(), 1).expect("a reader takes no lock");
}

#[test]
fn the_lock_is_released_when_the_writer_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    drop(writer(dir.path(), 1));
    writer(dir.path(), 1);
}

#[test]
fn a_reader_sees_appends_and_retention_made_after_it_opened() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 1);
    log.append(0, b"before").unwrap();
    let mut reader = Log::open_reader(dir.path(), 1).unwrap();
    assert_eq!(reader.end(0).unwrap(), 1);
    log.append_batch(0, &[b"after-1".to_vec(), b"after-2".to_vec()]).unwrap();
    assert_eq!(reader.read(0, 2).unwrap().payload, b"after-2".to_vec());
    log.retain_before(0, 2).unwrap();
    assert_eq!(reader.start(0).unwrap(), 2);
    assert!(matches!(reader.read(0, 1), Err(LogError::OffsetOutOfRange { start: 2, end: 3, .. })));
}

#[test]
fn a_reader_follows_a_writer_appending_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 1);
    let mut reader = Log::open_reader(dir.path(), 1).unwrap();
    let payload = |i: u64| vec![i as u8; 1 + (i as usize * 37) % 3000];
    let appender = std::thread::spawn(move || {
        for batch in 0..40u64 {
            let payloads: Vec<Vec<u8>> = (batch * 10..batch * 10 + 10).map(payload).collect();
            log.append_batch(0, &payloads).unwrap();
        }
    });
    let mut next = 0;
    loop {
        // Checked before reading, so a finished appender's last records are still read.
        let finished = appender.is_finished();
        // Every refresh must see a clean prefix: never an error, never a wrong record.
        while next < reader.end(0).unwrap() {
            assert_eq!(reader.read(0, next).unwrap().payload, payload(next));
            next += 1;
        }
        if finished {
            break;
        }
    }
    appender.join().unwrap();
    assert_eq!(next, 400);
}

#[test]
fn a_reader_opened_before_the_writer_sees_the_files_appear() {
    let dir = tempfile::tempdir().unwrap();
    let mut reader = Log::open_reader(dir.path(), 1).unwrap();
    assert_eq!(reader.end(0).unwrap(), 0);
    let mut log = writer(dir.path(), 1);
    log.append(0, b"x").unwrap();
    assert_eq!(reader.read(0, 0).unwrap().payload, b"x".to_vec());
}

#[test]
fn a_reader_treats_a_partial_tail_as_not_yet_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 1);
    log.append(0, b"one").unwrap();
    log.append(0, b"two").unwrap();
    drop(log);
    let path = log_file(dir.path(), 0);
    let full = fs::read(&path).unwrap();
    let second_starts = HEADER + FRAME_HEAD + 3;
    fs::write(&path, &full[..second_starts + 5]).unwrap();

    let mut reader = Log::open_reader(dir.path(), 1).unwrap();
    assert_eq!(reader.end(0).unwrap(), 1);
    assert_eq!(fs::read(&path).unwrap().len(), second_starts + 5, "a reader never truncates");
    fs::write(&path, &full).unwrap();
    assert_eq!(reader.end(0).unwrap(), 2, "the completed record is indexed on refresh");
    assert_eq!(reader.read(0, 1).unwrap().payload, b"two".to_vec());
}

#[test]
fn unknown_partitions_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 2);
    let err = log.append(2, b"x").unwrap_err();
    assert!(matches!(err, LogError::NoSuchPartition { partition: 2, partitions: 2 }));
    assert!(matches!(log.read(5, 0), Err(LogError::NoSuchPartition { partition: 5, .. })));
    assert!(matches!(log.end(2), Err(LogError::NoSuchPartition { .. })));
    assert!(matches!(log.retain_before(2, 0), Err(LogError::NoSuchPartition { .. })));
    let mut reader = Log::open_reader(dir.path(), 2).unwrap();
    assert!(matches!(reader.start(2), Err(LogError::NoSuchPartition { .. })));
}

#[test]
fn a_foreign_file_is_a_bad_header_and_stays_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = log_file(dir.path(), 0);
    fs::write(&path, b"NOTALOG!and more").unwrap();
    let err = Log::open_writer(dir.path(), 1).err().expect("a foreign file must not open");
    assert!(matches!(&err, LogError::BadHeader { path: p, .. } if *p == path));
    assert!(err.to_string().contains("partition-0.log"), "{err}");
    assert_eq!(fs::read(&path).unwrap(), b"NOTALOG!and more");
    fs::write(&path, b"ONCE").unwrap();
    assert!(matches!(Log::open_reader(dir.path(), 1), Err(LogError::BadHeader { .. })));
}

#[test]
fn a_version_1_log_is_refused_with_one_line_and_stays_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = log_file(dir.path(), 0);
    // A version 1 file: its header and one 16-byte-head frame of the old layout.
    let mut old = b"ONCELOG1".to_vec();
    old.extend_from_slice(&[0x5a; 24]);
    fs::write(&path, &old).unwrap();
    let err = Log::open_writer(dir.path(), 1).err().expect("a version 1 log must not open");
    assert!(matches!(&err, LogError::BadHeader { path: p, found } if *p == path && found == b"ONCELOG1"), "{err}");
    let text = err.to_string();
    assert_eq!(text.lines().count(), 1, "{text}");
    for expected in ["partition-0.log", "ONCELOG1", "format version is not supported"] {
        assert!(text.contains(expected), "'{text}' lacks '{expected}'");
    }
    assert_eq!(fs::read(&path).unwrap(), old, "nothing converts an old log");
    let err = Log::open_reader(dir.path(), 1).err().expect("a reader refuses it too");
    assert!(err.to_string().contains("format version is not supported"), "{err}");
}

/// The frame of one record, built from the layout documented in `src/log.rs`.
fn frame(offset: u64, producer: u64, epoch: u32, sequence: u32, batch_len: u32, payload: &[u8]) -> Vec<u8> {
    let mut checked = (payload.len() as u32).to_le_bytes().to_vec();
    checked.extend_from_slice(&offset.to_le_bytes());
    checked.extend_from_slice(&producer.to_le_bytes());
    checked.extend_from_slice(&epoch.to_le_bytes());
    checked.extend_from_slice(&sequence.to_le_bytes());
    checked.extend_from_slice(&batch_len.to_le_bytes());
    checked.extend_from_slice(payload);
    let mut bytes = crc32c::crc32c(&checked).to_le_bytes().to_vec();
    bytes.extend_from_slice(&checked);
    bytes
}

#[test]
fn the_frame_layout_is_the_documented_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 1);
    log.append(0, b"plain").unwrap();
    let producer = Producer { id: 0x0102_0304_0506_0708, epoch: 9 };
    log.append_idempotent(0, producer, 0, &[b"a".to_vec(), b"bc".to_vec()]).unwrap();
    log.append_idempotent(0, producer, 2, &[b"d".to_vec()]).unwrap();
    log.append_batch(0, &[b"x".to_vec(), b"y".to_vec()]).unwrap();
    let mut expected = b"ONCELOG2".to_vec();
    for part in [
        frame(0, 0, 0, 0, 1, b"plain"),
        frame(1, producer.id, 9, 0, 2, b"a"),
        frame(2, producer.id, 9, 1, 2, b"bc"),
        frame(3, producer.id, 9, 2, 1, b"d"),
        frame(4, 0, 0, 0, 2, b"x"),
        frame(5, 0, 0, 1, 2, b"y"),
    ] {
        expected.extend_from_slice(&part);
    }
    assert_eq!(fs::read(log_file(dir.path(), 0)).unwrap(), expected);
}

#[test]
fn a_frame_that_does_not_continue_its_batch_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let first = frame(0, 1, 0, 0, 2, b"p1");
    // Checksum-valid and at the right offset, but from another producer than its batch.
    let intruder = frame(1, 2, 0, 1, 2, b"p2");
    let mut bytes = b"ONCELOG2".to_vec();
    bytes.extend_from_slice(&first);
    bytes.extend_from_slice(&intruder);
    bytes.extend_from_slice(&frame(2, 0, 0, 0, 1, b"after"));
    fs::write(log_file(dir.path(), 0), &bytes).unwrap();
    match Log::open_writer(dir.path(), 1) {
        Err(LogError::Corrupt { offset: 1, position, reason, .. }) => {
            assert_eq!(position, (HEADER + first.len()) as u64);
            assert!(reason.contains("does not continue the batch"), "{reason}");
        }
        other => panic!("expected Corrupt at offset 1, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn a_damaged_start_file_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 1);
    log.append(0, b"x").unwrap();
    log.retain_before(0, 1).unwrap();
    drop(log);
    let path = dir.path().join("partition-0.start");
    let mut bytes = fs::read(&path).unwrap();
    bytes[0] ^= 0x40;
    fs::write(&path, &bytes).unwrap();
    let err = Log::open_writer(dir.path(), 1).err().expect("a damaged start must not open");
    assert!(matches!(&err, LogError::Corrupt { path: p, .. } if *p == path), "{err}");
}

#[test]
fn errors_name_their_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 1);
    log.append(0, b"abc").unwrap();
    log.append(0, b"def").unwrap();
    drop(log);
    let path = log_file(dir.path(), 0);
    let mut bytes = fs::read(&path).unwrap();
    bytes[HEADER + FRAME_HEAD] ^= 1; // first payload byte of record 0
    fs::write(&path, &bytes).unwrap();
    let err = Log::open_writer(dir.path(), 1).err().expect("damage before the tail");
    let text = err.to_string();
    assert!(text.contains("partition-0.log is corrupt at offset 0 (byte 8)"), "{text}");
}

#[test]
fn a_missing_record_in_the_middle_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let payloads = vec![b"zero".to_vec(), b"one".to_vec(), b"two".to_vec()];
    let original = write_log(dir.path(), &payloads);
    let ends = frame_ends(&payloads);
    // Every frame stays checksum-valid; only the offsets no longer follow 0, 1, 2.
    let mut bytes = original[..ends[0]].to_vec();
    bytes.extend_from_slice(&original[ends[1]..]);
    fs::write(log_file(dir.path(), 0), &bytes).unwrap();
    match Log::open_writer(dir.path(), 1) {
        Err(LogError::Corrupt { offset: 1, position, reason, .. }) => {
            assert_eq!(position, ends[0] as u64);
            assert!(reason.contains("offset 2"), "{reason}");
        }
        other => panic!("expected Corrupt at offset 1, got {:?}", other.map(|_| ())),
    }
    assert_eq!(fs::read(log_file(dir.path(), 0)).unwrap(), bytes, "corruption is never repaired");
}

#[test]
fn deltas_round_trip() {
    for delta in [0, 1, -1, i64::MIN, i64::MAX] {
        assert_eq!(decode_delta(&encode_delta(delta)), Some(delta));
    }
    assert_eq!(encode_delta(1).len(), 8);
    assert_eq!(decode_delta(&[1, 2, 3]), None);
}

/// Writes `payloads` to partition 0 of a fresh log in `dir` and returns the file's bytes.
fn write_log(dir: &Path, payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut log = writer(dir, 1);
    for (i, payload) in payloads.iter().enumerate() {
        assert_eq!(log.append(0, payload).unwrap(), i as u64);
    }
    drop(log);
    fs::read(log_file(dir, 0)).unwrap()
}

/// Opens `bytes` as partition 0 of `dir` with a reader and then a writer, and checks what
/// both hold against `payloads`. `intact` is how many leading records are undamaged.
/// Returns the writer's result so each test can check how the damage was classified.
fn reopen_damaged(dir: &Path, bytes: &[u8], payloads: &[Vec<u8>]) -> Result<(Vec<Vec<u8>>, Vec<TailRepair>), LogError> {
    let path = log_file(dir, 0);
    fs::write(&path, bytes).unwrap();
    let read = Log::open_reader(dir, 1).map(|mut r| read_all(&mut r, 0));
    assert_eq!(fs::read(&path).unwrap(), bytes, "open_reader must never modify the file");
    let written = Log::open_writer(dir, 1).map(|(mut w, repairs)| (read_all(&mut w, 0), repairs));
    match (&read, &written) {
        (Ok(r), Ok((w, _))) => assert_eq!(r, w, "reader and writer must agree on the records"),
        (Err(LogError::Corrupt { .. }), Err(LogError::Corrupt { .. })) => {}
        (Err(LogError::BadHeader { .. }), Err(LogError::BadHeader { .. })) => {}
        _ => panic!("reader {read:?} and writer {:?} disagree", written.as_ref().map(|_| ())),
    }
    if let Ok((records, _)) = &written {
        assert_eq!(records[..], payloads[..records.len()], "a record came back altered");
    }
    written
}

fn deterministic(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        rng_seed: RngSeed::Fixed(20_260_414),
        ..ProptestConfig::default()
    }
}

fn payloads(records: std::ops::Range<usize>, max_len: usize) -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..max_len), records)
}

/// One batch of a generated log: its payloads, and the id of the idempotent producer that
/// appends it (`None` for a plain `append_batch`).
#[derive(Clone, Debug)]
struct Batch {
    payloads: Vec<Vec<u8>>,
    producer: Option<u64>,
}

/// Between `count` batches of 1 to 3 records, each plain or from producer 1 or 2.
fn batches(count: std::ops::Range<usize>, max_len: usize) -> impl Strategy<Value = Vec<Batch>> {
    let batch = (payloads(1..4, max_len), prop::option::of(1u64..3))
        .prop_map(|(payloads, producer)| Batch { payloads, producer });
    prop::collection::vec(batch, count)
}

/// The producer that appends a generated batch: epoch 1, whatever its id.
fn producer(id: u64) -> Producer {
    Producer { id, epoch: 1 }
}

/// Writes `batches` to partition 0 of a fresh log in `dir` and returns the file's bytes and
/// each batch's base sequence (0 for a plain one). Each producer's sequences are dense from 0.
fn write_batches(dir: &Path, batches: &[Batch]) -> (Vec<u8>, Vec<u32>) {
    let mut log = writer(dir, 1);
    let mut next = std::collections::HashMap::new();
    let mut bases = Vec::new();
    let mut end = 0;
    for batch in batches {
        let count = batch.payloads.len() as u64;
        let (offsets, base) = match batch.producer {
            None => (log.append_batch(0, &batch.payloads).unwrap(), 0),
            Some(id) => {
                let sequence: &mut u32 = next.entry(id).or_default();
                let base = *sequence;
                let appended = log.append_idempotent(0, producer(id), base, &batch.payloads).unwrap();
                assert!(!appended.duplicate, "a fresh sequence is never a duplicate");
                *sequence += count as u32;
                (appended.offsets, base)
            }
        };
        assert_eq!(offsets, end..end + count);
        bases.push(base);
        end += count;
    }
    drop(log);
    (fs::read(log_file(dir, 0)).unwrap(), bases)
}

/// The records of `batches` in offset order.
fn flatten(batches: &[Batch]) -> Vec<Vec<u8>> {
    batches.iter().flat_map(|b| b.payloads.clone()).collect()
}

/// The offset of each batch's first record.
fn first_offsets(batches: &[Batch]) -> Vec<usize> {
    let mut first = 0;
    batches
        .iter()
        .map(|b| {
            first += b.payloads.len();
            first - b.payloads.len()
        })
        .collect()
}

proptest! {
    #![proptest_config(deterministic(64))]

    #[test]
    fn arbitrary_payloads_round_trip(payloads in payloads(1..20, 300)) {
        let dir = tempfile::tempdir().unwrap();
        let mut log = writer(dir.path(), 1);
        for (i, payload) in payloads.iter().enumerate() {
            prop_assert_eq!(log.append(0, payload).unwrap(), i as u64);
        }
        prop_assert_eq!(&read_all(&mut log, 0), &payloads);
        drop(log);
        let mut reopened = writer(dir.path(), 1);
        prop_assert_eq!(&read_all(&mut reopened, 0), &payloads);
    }

    #[test]
    fn every_single_byte_flip_is_detected(batches in batches(2..5, 24), mask in 1u8..=255) {
        let dir = tempfile::tempdir().unwrap();
        let payloads = flatten(&batches);
        let (original, _) = write_batches(dir.path(), &batches);
        let ends = frame_ends(&payloads);
        let last_batch_start = *first_offsets(&batches).last().unwrap();
        for position in 0..original.len() {
            let mut bytes = original.clone();
            bytes[position] ^= mask;
            let result = reopen_damaged(dir.path(), &bytes, &payloads);
            if position < HEADER {
                prop_assert!(matches!(result, Err(LogError::BadHeader { .. })), "byte {}", position);
                continue;
            }
            // The damaged record is the first whose frame ends after the flipped byte.
            let damaged = ends.iter().position(|&end| end > position).unwrap();
            let frame_start = if damaged == 0 { HEADER } else { ends[damaged - 1] };
            let last = damaged == payloads.len() - 1;
            match result {
                // Intact records follow the damage, so it cannot be a torn tail, even when
                // they belong to the same batch.
                Err(LogError::Corrupt { offset, position: at, .. }) if !last => {
                    prop_assert_eq!(offset, damaged as u64);
                    prop_assert_eq!(at, frame_start as u64);
                }
                // Damage in the last record is indistinguishable from a torn append, and a
                // torn append loses its whole batch.
                Ok((records, repairs)) if last => {
                    let cut = if last_batch_start == 0 { HEADER } else { ends[last_batch_start - 1] };
                    prop_assert_eq!(
                        records.len(),
                        last_batch_start,
                        "byte {} kept more than the complete batches",
                        position
                    );
                    prop_assert_eq!(repairs.len(), 1);
                    prop_assert_eq!(repairs[0].kept_records, last_batch_start as u64);
                    prop_assert_eq!(repairs[0].dropped_bytes, (original.len() - cut) as u64);
                }
                Ok(_) => prop_assert!(false, "byte {}: damage before the tail was repaired away", position),
                Err(other) => prop_assert!(false, "byte {}: unexpected {}", position, other),
            }
        }
    }
}

proptest! {
    // Each case already tries every length of its file, so fewer cases suffice.
    #![proptest_config(deterministic(32))]

    #[test]
    fn every_truncation_keeps_the_longest_prefix_of_whole_batches(batches in batches(1..5, 24)) {
        let dir = tempfile::tempdir().unwrap();
        let payloads = flatten(&batches);
        let (original, bases) = write_batches(dir.path(), &batches);
        let ends = frame_ends(&payloads);
        let firsts = first_offsets(&batches);
        for len in HEADER..=original.len() {
            // The batches whose every frame fits in `len` bytes survive; a batch cut short,
            // even between two of its frames, is a torn tail.
            let whole = batches
                .iter()
                .zip(&firsts)
                .take_while(|(b, &first)| ends[first + b.payloads.len() - 1] <= len)
                .count();
            let kept = firsts.get(whole).copied().unwrap_or(payloads.len());
            let valid_len = if kept == 0 { HEADER } else { ends[kept - 1] };
            let (records, repairs) = reopen_damaged(dir.path(), &original[..len], &payloads)
                .unwrap_or_else(|e| panic!("truncation to {len} bytes is a torn tail, not {e}"));
            prop_assert_eq!(records.len(), kept);
            let expected: Vec<TailRepair> = if valid_len == len {
                vec![]
            } else {
                vec![TailRepair {
                    path: log_file(dir.path(), 0),
                    partition: 0,
                    kept_records: kept as u64,
                    dropped_bytes: (len - valid_len) as u64,
                }]
            };
            prop_assert_eq!(repairs, expected);
            prop_assert_eq!(fs::metadata(log_file(dir.path(), 0)).unwrap().len(), valid_len as u64);
            // The rebuilt producer table knows exactly the surviving idempotent batches: a
            // retry of each is a duplicate with its original offsets and appends nothing.
            let mut log = writer(dir.path(), 1);
            for ((batch, &first), &base) in batches.iter().zip(&firsts).zip(&bases).take(whole) {
                let Some(id) = batch.producer else { continue };
                let retried = log.append_idempotent(0, producer(id), base, &batch.payloads).unwrap();
                prop_assert!(retried.duplicate, "len {}: batch at {} was appended again", len, first);
                prop_assert_eq!(retried.offsets, first as u64..(first + batch.payloads.len()) as u64);
            }
            prop_assert_eq!(log.end(0).unwrap(), kept as u64);
        }
    }
}
