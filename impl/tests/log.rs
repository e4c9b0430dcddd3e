//! Tests of the on-disk log: the API contract, the documented frame layout, retention,
//! locking, live readers, and exhaustive corruption and truncation checks, over plain and
//! idempotent batches, driven by a deterministic proptest: acknowledged bytes damaged or cut
//! make the partition damaged (refused, never repaired away), an unacknowledged tail is cut
//! and reported, and the unchecked writer (the trap) still classifies torn tails from the file
//! alone. Identity, acknowledgement record, fault injection and repair: `log_loss.rs`.

mod common;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use consumer::log::{
    create_dir_durably, decode_delta, encode_delta, Damage, Log, LogError, LogIdentity, Producer, Record, SimDisk,
    Storage, TailRepair, WriterMode,
};
use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, RngSeed};

/// Bytes before the first frame: `ONCELOG3`, the log id, the partition and their crc32c.
const HEADER: usize = 24;
/// Frame bytes before the payload: crc32c, length, offset, producer id, producer epoch,
/// sequence and batch length.
const FRAME_HEAD: usize = 40;

/// The writer of the log in `dir`, made first (as `init` does) if there is none.
fn writer(dir: &Path, partitions: u32) -> Log {
    let identity = Log::init(dir, partitions).expect("init the log");
    let (log, repairs) = Log::open_writer(dir, identity).expect("open writer");
    assert_eq!(repairs, vec![], "a cleanly written log needs no repair");
    log
}

/// The writer of a new one-partition log in `dir` holding records `0..count`, each its own
/// offset as a delta.
fn writer_of_deltas(dir: &Path, count: i64) -> Log {
    let mut log = writer(dir, 1);
    for delta in 0..count {
        log.append(0, &encode_delta(delta)).unwrap();
    }
    log
}

/// The identity of the log already in `dir`.
fn identity(dir: &Path) -> LogIdentity {
    Log::read_identity(dir).expect("read the identity").expect("the log was made")
}

fn open_reader(dir: &Path) -> Result<Log, LogError> {
    Log::open_reader(dir, identity(dir))
}

fn open_writer(dir: &Path) -> Result<(Log, Vec<TailRepair>), LogError> {
    Log::open_writer(dir, identity(dir))
}

fn open_unchecked(dir: &Path) -> Result<(Log, Vec<TailRepair>), LogError> {
    Log::open_writer_unchecked(dir, identity(dir))
}

fn log_file(dir: &Path, partition: u32) -> PathBuf {
    dir.join(format!("partition-{partition}.log"))
}

fn ack_file(dir: &Path, partition: u32) -> PathBuf {
    dir.join(format!("partition-{partition}.ack"))
}

/// The header of a file of kind `magic` of `partition` of the log in `dir`, as documented in
/// `src/log/header.rs`: the magic, the log id, the partition and the crc32c of those 20 bytes.
fn header_of(dir: &Path, magic: &[u8; 8], partition: u32) -> Vec<u8> {
    let mut bytes = magic.to_vec();
    bytes.extend_from_slice(&identity(dir).id.to_le_bytes());
    bytes.extend_from_slice(&partition.to_le_bytes());
    bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
    bytes
}

/// The header of partition 0's file of the log in `dir`.
fn header(dir: &Path) -> Vec<u8> {
    header_of(dir, b"ONCELOG3", 0)
}

/// Whether `error` refuses a file's header: not this format, another version, or damaged.
fn is_header_refusal(error: &LogError) -> bool {
    matches!(error, LogError::BadHeader { .. } | LogError::FormatVersion { .. } | LogError::DamagedHeader { .. })
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

/// `read_range` over a log holding 2..6 (records 0 and 1 retained away): the records of a
/// range within it, nothing for an empty range wherever it lies, and otherwise
/// `OffsetOutOfRange` naming the first offset outside (the range's start below the log's
/// start, else the first offset past the end).
#[test]
fn read_range_reads_within_the_log_and_names_the_first_offset_outside() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer_of_deltas(dir.path(), 6);
    log.retain_before(0, 2).unwrap();
    // (range, Ok(the deltas read) or Err(the offset named))
    type Row = (std::ops::Range<u64>, Result<Vec<i64>, u64>);
    let table: [Row; 9] = [
        (2..6, Ok(vec![2, 3, 4, 5])),
        (3..5, Ok(vec![3, 4])),
        (3..3, Ok(vec![])),
        (9..9, Ok(vec![])),
        (1..4, Err(1)),
        (0..9, Err(0)),
        (2..7, Err(6)),
        (4..8, Err(6)),
        (7..9, Err(7)),
    ];
    for (range, expected) in table {
        let got = match log.read_range(0, range.clone()) {
            Ok(records) => Ok(records.iter().map(|record| decode_delta(&record.payload).unwrap()).collect()),
            Err(LogError::OffsetOutOfRange { partition: 0, offset, start: 2, end: 6 }) => Err(offset),
            Err(other) => panic!("{range:?}: {other}"),
        };
        assert_eq!(got, expected, "read_range(0, {range:?})");
    }
}

#[test]
fn retention_hides_records_below_start_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer_of_deltas(dir.path(), 6);
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

/// Opening a consistent log writes nothing, whichever way it is opened: the checked writer,
/// the unchecked one (whose acknowledgement record already says what the file holds: nothing
/// to forget) and a reader leave every file byte for byte, so an open is never a write that a
/// power cut could tear.
#[test]
fn opening_a_consistent_log_leaves_every_file_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer_of_deltas(dir.path(), 3);
    log.retain_before(0, 1).unwrap();
    drop(log);
    let before = common::snapshot(dir.path());
    for mode in [WriterMode::Checked, WriterMode::Unchecked] {
        let (log, repairs) = Log::open_writer_on(&Storage::Real, dir.path(), identity(dir.path()), mode).unwrap();
        assert_eq!(repairs, vec![], "{mode:?}");
        drop(log);
        assert_eq!(common::snapshot(dir.path()), before, "{mode:?}");
    }
    drop(open_reader(dir.path()).unwrap());
    assert_eq!(common::snapshot(dir.path()), before, "a reader");
}

#[test]
fn a_second_writer_is_locked_out_but_readers_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let _first = writer(dir.path(), 1);
    match open_writer(dir.path()) {
        Err(LogError::Locked { path }) => assert_eq!(path, dir.path().join("writer.lock")),
        other => panic!("expected Locked, got {:?}", other.map(|_| ())),
    }
    open_reader(dir.path()).expect("a reader takes no lock");
}

/// `Log::open_writer_within(dir, wait)` run on a thread: its error (`None` when it opened) and
/// the milliseconds it took, or `None` when it had not returned after `patience` (a waiter
/// that never gives up fails the test instead of hanging it).
fn wait_for_writer(dir: &Path, wait: Duration, patience: Duration) -> Option<(Option<LogError>, u128)> {
    let (dir, identity) = (dir.to_path_buf(), identity(dir));
    common::within(patience, move || Log::open_writer_within(&dir, identity, wait).err())
}

#[test]
fn a_waiting_writer_gives_up_once_its_wait_is_over_and_takes_a_lock_released_within_it() {
    let dir = tempfile::tempdir().unwrap();
    let first = writer(dir.path(), 1);
    let patience = Duration::from_secs(30);
    let (outcome, waited_ms) = wait_for_writer(dir.path(), Duration::from_millis(100), patience)
        .expect("a writer waiting 100 ms for a held lock returns");
    assert!(matches!(outcome, Some(LogError::Locked { .. })), "{outcome:?}");
    assert!(waited_ms >= 100, "gave up after {waited_ms} ms");
    // Released while another waits: the waiter takes it.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(first);
    });
    let (outcome, _) = wait_for_writer(dir.path(), Duration::from_secs(30), patience).expect("the waiter returns");
    assert!(outcome.is_none(), "the lock was released within the wait: {outcome:?}");
    releaser.join().unwrap();
}

/// A writer's memory is authoritative (it alone appends and retains), in every mode: it
/// reads its own appends back and its end is theirs, even when the acknowledgement record on
/// disk says less (`WithoutAckRecord` leaves the record alone, so a handle that re-read it
/// would forget what it wrote).
#[test]
fn a_writer_reads_back_what_it_appended_in_every_mode() {
    let modes =
        [WriterMode::Checked, WriterMode::Unchecked, WriterMode::WithoutAckRecord, WriterMode::AckBeforeDataSync];
    for mode in modes {
        let dir = tempfile::tempdir().unwrap();
        let identity = Log::init(dir.path(), 1).unwrap();
        let (mut log, _) = Log::open_writer_with(dir.path(), identity, mode).unwrap();
        log.append(0, b"first").unwrap();
        log.append(0, b"second").unwrap();
        assert_eq!(log.end(0).unwrap(), 2, "{mode:?}");
        assert_eq!(log.read(0, 1).unwrap().payload, b"second", "{mode:?}");
        assert_eq!(log.read_range(0, 0..2).unwrap().len(), 2, "{mode:?}");
    }
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
    let mut reader = open_reader(dir.path()).unwrap();
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
    let mut reader = open_reader(dir.path()).unwrap();
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
fn a_reader_opened_before_the_first_append_sees_records_appear() {
    let dir = tempfile::tempdir().unwrap();
    let identity = Log::init(dir.path(), 1).unwrap();
    let mut reader = Log::open_reader(dir.path(), identity).unwrap();
    assert_eq!(reader.end(0).unwrap(), 0);
    let mut log = writer(dir.path(), 1);
    log.append(0, b"x").unwrap();
    assert_eq!(reader.read(0, 0).unwrap().payload, b"x".to_vec());
}

/// Bytes past the acknowledged length are an append in progress (or one a crash interrupted):
/// a reader never exposes them, and sees them once the acknowledgement record covers them.
#[test]
fn a_reader_never_reads_past_the_acknowledged_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 1);
    log.append(0, b"one").unwrap();
    let acknowledged_one = fs::read(ack_file(dir.path(), 0)).unwrap();
    log.append(0, b"two").unwrap();
    drop(log);
    let (path, ack) = (log_file(dir.path(), 0), ack_file(dir.path(), 0));
    let (full, acknowledged_two) = (fs::read(&path).unwrap(), fs::read(&ack).unwrap());
    let second_starts = HEADER + FRAME_HEAD + 3;
    fs::write(&ack, &acknowledged_one).unwrap();
    // Part of the second frame, then all of it: neither is acknowledged yet.
    for len in [second_starts + 5, full.len()] {
        fs::write(&path, &full[..len]).unwrap();
        let mut reader = open_reader(dir.path()).unwrap();
        assert_eq!(reader.end(0).unwrap(), 1, "{len} bytes");
        assert!(!reader.damaged(0).unwrap(), "{len} bytes: an unacknowledged tail is no damage");
        assert_eq!(fs::read(&path).unwrap().len(), len, "a reader never truncates");
    }
    let mut reader = open_reader(dir.path()).unwrap();
    fs::write(&ack, &acknowledged_two).unwrap();
    assert_eq!(reader.end(0).unwrap(), 2, "the acknowledged record is indexed on refresh");
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
    let mut reader = open_reader(dir.path()).unwrap();
    assert!(matches!(reader.start(2), Err(LogError::NoSuchPartition { .. })));
}

#[test]
fn a_foreign_file_is_a_bad_header_and_stays_untouched() {
    let dir = tempfile::tempdir().unwrap();
    Log::init(dir.path(), 1).unwrap();
    let path = log_file(dir.path(), 0);
    // Not this format at all, too short a file, and the format's family name cut short: none
    // is a header of another version of this format.
    for (bytes, found) in [(&b"NOTALOG!and more"[..], "NOTALOG!"), (b"ONCE", "ONCE"), (b"ONCELOG", "ONCELOG")] {
        fs::write(&path, bytes).unwrap();
        let err = open_writer(dir.path()).err().expect("a foreign file must not open");
        assert!(matches!(&err, LogError::BadHeader { path: p, .. } if *p == path));
        let says = format!(
            "{} is not a file of this log: its first 8 bytes are not ONCELOG3 (found \"{found}\"): refused",
            path.display()
        );
        assert_eq!(err.to_string(), says);
        assert_eq!(fs::read(&path).unwrap(), bytes);
        assert_eq!(open_reader(dir.path()).err().map(|e| e.to_string()), Some(says), "a reader");
    }
}

/// An open reads the partition file's header with `read_at` (a short file is a bad header)
/// and the acknowledgement record's slots with `read_exact_at` (a short file leaves a slot
/// unreadable, the other one counts): an `Interrupted` read is retried, as `read_exact_at`
/// does, and any other read error is the open's error, naming the file, never retried, taken
/// for a bad header or skipped as an unreadable slot.
#[test]
fn an_open_retries_an_interrupted_read_and_reports_an_io_error_naming_the_file() {
    let disk = SimDisk::new(Path::new("/sim"));
    let storage = Storage::Simulated(disk.clone());
    let dir = Path::new("/sim/log");
    let identity = LogIdentity { id: 7, partitions: 1 };
    Log::create_on(&storage, dir, identity).unwrap();
    for path in [log_file(dir, 0), ack_file(dir, 0)] {
        disk.fail_reads(&path, &[io::ErrorKind::Interrupted, io::ErrorKind::Interrupted]);
        let mut reader = Log::open_reader_on(&storage, dir, identity).expect("interrupted reads are retried");
        assert_eq!(reader.end(0).unwrap(), 0);
        disk.fail_reads(&path, &[io::ErrorKind::Other]);
        match Log::open_reader_on(&storage, dir, identity) {
            Err(error @ LogError::Io { .. }) => {
                // The I/O error is the error's source too, for callers that walk the chain.
                let source = std::error::Error::source(&error).and_then(|cause| cause.downcast_ref::<io::Error>());
                assert_eq!(source.map(io::Error::kind), Some(io::ErrorKind::Other), "{error}");
                assert!(matches!(&error, LogError::Io { path: p, .. } if *p == path), "{error}");
            }
            other => panic!("{}: expected the read error, got {:?}", path.display(), other.map(|_| ())),
        }
        Log::open_reader_on(&storage, dir, identity).expect("the next read succeeds");
    }
}

/// A directory `create_dir_durably` cannot make (here, under a regular file) is an I/O error
/// naming it, not a success that leaves it missing; one that exists already is made by
/// nobody and is fine, and every missing parent is made.
#[test]
fn create_dir_durably_makes_every_missing_directory_or_names_the_one_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a/b/c");
    create_dir_durably(&nested).unwrap();
    create_dir_durably(&nested).expect("an existing directory is fine");
    assert!(nested.is_dir());
    let file = dir.path().join("file");
    fs::write(&file, b"not a directory").unwrap();
    let under = file.join("log");
    match create_dir_durably(&under) {
        Err(LogError::Io { path, source }) => {
            assert_eq!((path, source.kind()), (under.clone(), io::ErrorKind::NotADirectory));
        }
        other => panic!("expected an I/O error naming {}, got {other:?}", under.display()),
    }
    assert_eq!(fs::read(&file).unwrap(), b"not a directory");
}

/// Two processes making the same directories at once (two `consumer init` of a new data
/// directory: they take the directory's lock only once it exists) both succeed: a directory
/// the other one made between the check and the `mkdir` is made, not an error. Two threads
/// start together on a fresh nested path, round after round.
#[test]
fn create_dir_durably_racing_another_creator_succeeds() {
    const ROUNDS: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    for round in 0..ROUNDS {
        let nested = dir.path().join(format!("{round}/a/b/c/d"));
        let start = std::sync::Barrier::new(2);
        let results: Vec<Result<(), LogError>> = std::thread::scope(|scope| {
            let racers: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        start.wait();
                        create_dir_durably(&nested)
                    })
                })
                .collect();
            racers.into_iter().map(|racer| racer.join().unwrap()).collect()
        });
        for result in results {
            result.unwrap_or_else(|e| panic!("round {round}: {e}"));
        }
        assert!(nested.is_dir(), "round {round}");
    }
}

/// Partition files of older versions: version 1 (converted by nothing) and version 2 (which
/// `consumer repair --upgrade` converts, and the refusal says so), each refused in one line.
#[test]
fn an_older_version_partition_file_is_refused_with_one_line_and_stays_untouched() {
    for (magic, upgradable, says) in
        [(b"ONCELOG1", false, "converts nothing"), (b"ONCELOG2", true, "run `consumer repair --upgrade`")]
    {
        let dir = tempfile::tempdir().unwrap();
        Log::init(dir.path(), 1).unwrap();
        let path = log_file(dir.path(), 0);
        // An old file: its header and one frame's worth of bytes of the old layout.
        let mut old = magic.to_vec();
        old.extend_from_slice(&[0x5a; 24]);
        fs::write(&path, &old).unwrap();
        let err = open_writer(dir.path()).err().expect("an old log must not open");
        assert!(
            matches!(&err, LogError::FormatVersion { path: p, found, upgradable: u, .. }
                if *p == path && found == magic && *u == upgradable),
            "{err}"
        );
        let text = err.to_string();
        assert_eq!(text.lines().count(), 1, "{text}");
        for expected in ["partition-0.log", std::str::from_utf8(magic).unwrap(), says] {
            assert!(text.contains(expected), "'{text}' lacks '{expected}'");
        }
        assert_eq!(fs::read(&path).unwrap(), old, "opening converts nothing");
        let err = open_reader(dir.path()).err().expect("a reader refuses it too");
        assert!(err.to_string().contains(says), "{err}");
    }
}

/// The frame of one record, built from the layout documented in `src/log.rs`.
fn frame(offset: u64, producer: u64, epoch: u32, sequence: u32, batch_len: u32, payload: &[u8]) -> Vec<u8> {
    // The record's index in its batch: these batches start at a multiple of their length.
    let index = sequence.checked_rem(batch_len).unwrap_or(0);
    let mut checked = (payload.len() as u32).to_le_bytes().to_vec();
    checked.extend_from_slice(&offset.to_le_bytes());
    checked.extend_from_slice(&producer.to_le_bytes());
    checked.extend_from_slice(&epoch.to_le_bytes());
    checked.extend_from_slice(&sequence.to_le_bytes());
    checked.extend_from_slice(&batch_len.to_le_bytes());
    checked.extend_from_slice(&index.to_le_bytes());
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
    let mut expected = header(dir.path());
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

/// The acknowledgement record of `partition`, as documented in `src/log/ack.rs`: an 8 KiB
/// file whose slot `generation % 2` (at byte 4096 times the slot) holds `ONCEACK2`, the log
/// id, the partition, the generation, the end, the byte length and the crc32c of those 44
/// bytes; the other slot empty.
fn write_ack(dir: &Path, partition: u32, generation: u64, end: u64, len: u64) {
    let mut record = b"ONCEACK2".to_vec();
    record.extend_from_slice(&identity(dir).id.to_le_bytes());
    record.extend_from_slice(&partition.to_le_bytes());
    for value in [generation, end, len] {
        record.extend_from_slice(&value.to_le_bytes());
    }
    record.extend_from_slice(&crc32c::crc32c(&record).to_le_bytes());
    let mut bytes = vec![0u8; 8192];
    let at = (generation % 2 * 4096) as usize;
    bytes[at..at + record.len()].copy_from_slice(&record);
    fs::write(ack_file(dir, partition), bytes).unwrap();
}

/// A hand-made partition file whose every byte is acknowledged.
fn write_acknowledged(dir: &Path, bytes: &[u8], records: u64) {
    fs::write(log_file(dir, 0), bytes).unwrap();
    write_ack(dir, 0, 7, records, bytes.len() as u64);
}

#[test]
fn a_frame_that_does_not_continue_its_batch_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    Log::init(dir.path(), 1).unwrap();
    let first = frame(0, 1, 0, 0, 2, b"p1");
    // Checksum-valid and at the right offset, but from another producer than its batch.
    let intruder = frame(1, 2, 0, 1, 2, b"p2");
    let mut bytes = header(dir.path());
    bytes.extend_from_slice(&first);
    bytes.extend_from_slice(&intruder);
    bytes.extend_from_slice(&frame(2, 0, 0, 0, 1, b"after"));
    write_acknowledged(dir.path(), &bytes, 3);
    // Checked: acknowledged records are damaged; the batch it breaks is not readable at all,
    // and the intact batch after it is found again.
    let (mut log, repairs) = open_writer(dir.path()).unwrap();
    assert_eq!(repairs, vec![]);
    let damage = log.damage(0).unwrap().expect("damaged");
    let found = (damage.offset, damage.end, damage.position, damage.acked_end, damage.intact_after);
    assert_eq!(found, (0, 2, HEADER as u64, 3, 1));
    assert!(damage.reason.contains("does not continue the batch"), "{}", damage.reason);
    assert!(matches!(log.append(0, b"x"), Err(LogError::Damaged { offset: 0, .. })));
    drop(log);
    // Unchecked (the file alone): the intact batch after it makes it corrupt, not torn, from the
    // damaged batch's first record on.
    match open_unchecked(dir.path()) {
        Err(LogError::Corrupt { offset: 0, position, reason, .. }) => {
            assert_eq!(position, HEADER as u64);
            assert!(reason.contains("does not continue the batch"), "{reason}");
        }
        other => panic!("expected Corrupt at offset 0, got {:?}", other.map(|_| ())),
    }
    assert_eq!(fs::read(log_file(dir.path(), 0)).unwrap(), bytes, "damage is never repaired away");
}

/// A damage's reason says where the scan of the acknowledged bytes stopped and why, word for
/// word, one row per way a frame can end the intact records: record 0 (a plain record) is
/// intact and what follows it is cut or damaged, with every byte acknowledged.
#[test]
fn a_damage_names_why_the_scan_stopped() {
    let zero = frame(0, 0, 0, 0, 1, b"zero");
    let at = HEADER + zero.len();
    let one = frame(1, 0, 0, 0, 1, b"one");
    let a = frame(1, 0, 0, 0, 2, b"a");
    let pair = [a.clone(), frame(2, 0, 0, 1, 2, b"b")].concat();
    let stray = [a.clone(), frame(2, 0, 0, 5, 2, b"b")].concat();
    let mut flipped = one.clone();
    flipped[FRAME_HEAD] ^= 1;
    /// What follows record 0 and how many of its bytes are left, the records acknowledged, the
    /// record the scan stopped at and its byte after record 0, and why it stopped.
    struct Row {
        after: Vec<u8>,
        kept: usize,
        records: u64,
        stopped: (u64, usize),
        why: &'static str,
    }
    let row = |after: Vec<u8>, kept, records, stopped, why| Row { after, kept, records, stopped, why };
    let rows = [
        row(pair, FRAME_HEAD + 1, 3, (2, FRAME_HEAD + 1), "the file ends inside a batch"),
        row(one.clone(), FRAME_HEAD, 2, (1, 0), "the frame runs past the end of the file"),
        row(flipped, one.len(), 2, (1, 0), "checksum mismatch"),
        row(frame(1, 0, 0, 0, 0, b"one"), one.len(), 2, (1, 0), "the frame there claims a batch of 0 records"),
        row(frame(5, 0, 0, 0, 1, b"one"), one.len(), 2, (1, 0), "the frame there carries offset 5"),
        row(
            stray.clone(),
            stray.len(),
            3,
            (2, a.len()),
            "the frame there does not continue the batch of 2 records begun 1 record before it",
        ),
    ];
    for Row { after, kept, records, stopped: (record, byte), why } in rows {
        let dir = tempfile::tempdir().unwrap();
        Log::init(dir.path(), 1).unwrap();
        let bytes = [header(dir.path()), zero.clone(), after].concat();
        write_acknowledged(dir.path(), &bytes, records);
        let file = &bytes[..at + kept];
        fs::write(log_file(dir.path(), 0), file).unwrap();
        let (mut log, _) = open_writer(dir.path()).unwrap();
        let damage = log.damage(0).unwrap().unwrap_or_else(|| panic!("{why}: no damage"));
        let mut reason = format!("record {record} at byte {}: {why}", at + byte);
        if file.len() < bytes.len() {
            reason.push_str(&format!("; the file has {} of the {} acknowledged bytes", file.len(), bytes.len()));
        }
        let expected =
            Damage { offset: 1, end: records, position: at as u64, acked_end: records, intact_after: 0, reason };
        assert_eq!(damage, expected);
        assert_eq!(fs::read(log_file(dir.path(), 0)).unwrap(), file, "{why}: nobody modifies a damaged partition");
    }
}

/// Acknowledged bytes all there, every frame intact, yet fewer records than the
/// acknowledgement record counts (the records rewritten as fewer, longer records over the same
/// bytes): damage naming both counts, for a writer and a reader, and nothing modified.
#[test]
fn acknowledged_bytes_holding_fewer_records_than_acknowledged_are_damage() {
    let one = frame(0, 0, 0, 0, 1, &[7; 81]);
    let two = [frame(0, 0, 0, 0, 1, &[7; 40]), frame(1, 0, 0, 0, 1, &[7; 19])].concat();
    for (frames, end, reason) in [
        (one, 1, "its acknowledged bytes hold 1 record, not 3"),
        (two, 2, "its acknowledged bytes hold 2 records, not 3"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        Log::init(dir.path(), 1).unwrap();
        let bytes = [header(dir.path()), frames].concat();
        write_acknowledged(dir.path(), &bytes, 3);
        let reason = reason.to_string();
        let position = bytes.len() as u64;
        let damage = Some(Damage { offset: end, end: 3, position, acked_end: 3, intact_after: 0, reason });
        let (mut writer, repairs) = open_writer(dir.path()).unwrap();
        assert_eq!((repairs, writer.damage(0).unwrap()), (vec![], damage.clone()));
        drop(writer);
        assert_eq!(open_reader(dir.path()).unwrap().damage(0).unwrap(), damage, "a reader");
        assert_eq!(fs::read(log_file(dir.path(), 0)).unwrap(), bytes);
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
    // The start's first byte, after the header (a damaged header: `tests/foreign.rs`).
    bytes[HEADER] ^= 0x40;
    fs::write(&path, &bytes).unwrap();
    let err = open_writer(dir.path()).err().expect("a damaged start must not open");
    assert!(matches!(&err, LogError::Corrupt { path: p, .. } if *p == path), "{err}");
}

/// A start file that is intact (its checksum matches) but names an offset past the log's end:
/// only damage makes one (retention never passes the end), so writer and reader refuse it.
#[test]
fn an_intact_start_file_past_the_end_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 1);
    log.append(0, b"x").unwrap();
    drop(log);
    let path = dir.path().join("partition-0.start");
    let mut bytes = header_of(dir.path(), b"ONCESTA1", 0);
    bytes.extend_from_slice(&2u64.to_le_bytes());
    bytes.extend_from_slice(&crc32c::crc32c(&2u64.to_le_bytes()).to_le_bytes());
    fs::write(&path, &bytes).unwrap();
    let writer_error = open_writer(dir.path()).err().expect("a start past the end must not open a writer");
    let reader_error = open_reader(dir.path()).err().expect("nor a reader");
    for error in [writer_error, reader_error] {
        match &error {
            LogError::Corrupt { path: p, offset: 2, reason, .. } if *p == path => {
                assert!(reason.contains("the start 2 is past the end 1"), "{reason}");
            }
            other => panic!("expected Corrupt naming the start file, got {other}"),
        }
    }
}

/// A record rewritten under a reader after it indexed it (here: record 0's frame replaced by
/// record 1's, an intact frame of the same length at another offset) is refused, not read.
#[test]
fn a_record_rewritten_after_a_reader_indexed_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 1);
    log.append(0, b"abc").unwrap();
    log.append(0, b"def").unwrap();
    drop(log);
    let mut reader = open_reader(dir.path()).unwrap();
    assert_eq!(reader.read(0, 0).unwrap().payload, b"abc");
    let path = log_file(dir.path(), 0);
    let mut bytes = fs::read(&path).unwrap();
    let frame_len = FRAME_HEAD + 3;
    let second = bytes[HEADER + frame_len..HEADER + 2 * frame_len].to_vec();
    bytes[HEADER..HEADER + frame_len].copy_from_slice(&second);
    fs::write(&path, &bytes).unwrap();
    match reader.read(0, 0) {
        Err(LogError::Corrupt { offset: 0, position, reason, .. }) => {
            assert_eq!(position, HEADER as u64);
            assert!(reason.contains("changed after it was indexed"), "{reason}");
        }
        other => panic!("expected Corrupt at offset 0, got {other:?}"),
    }
    assert_eq!(reader.read(0, 1).unwrap().payload, b"def", "record 1 is as it was");
}

/// A flipped byte in an acknowledged record: the writer opens, changes nothing and refuses to
/// append or retain on that partition, naming file, partition and offset in one line; readers
/// read the records below the damage; another partition is unaffected. The unchecked writer
/// calls it corrupt, as the log did before the acknowledgement record.
#[test]
fn a_damaged_partition_refuses_appends_and_retention_but_reads_below_the_damage() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = writer(dir.path(), 2);
    for payload in [b"abc", b"def", b"ghi"] {
        log.append(0, payload).unwrap();
    }
    drop(log);
    let path = log_file(dir.path(), 0);
    let mut bytes = fs::read(&path).unwrap();
    let second = HEADER + FRAME_HEAD + 3;
    bytes[second + FRAME_HEAD] ^= 1; // first payload byte of record 1
    fs::write(&path, &bytes).unwrap();

    let (mut log, repairs) = open_writer(dir.path()).unwrap();
    assert_eq!(repairs, vec![], "damage is not an unacknowledged tail");
    let text = log.append(0, b"jkl").unwrap_err().to_string();
    assert_eq!(text.lines().count(), 1, "{text}");
    let expected = format!(
        "partition 0 is damaged: {} cannot be read at offsets 1..2 (1 record, from byte {second}: record 1 at byte \
         {second}: checksum mismatch; whole batches resume at offset 2",
        path.display()
    );
    assert!(text.starts_with(&expected), "'{text}' lacks '{expected}'");
    assert!(matches!(log.retain_before(0, 1), Err(LogError::Damaged { partition: 0, offset: 1, acked_end: 3, .. })));
    assert_eq!(log.read(0, 0).unwrap().payload, b"abc".to_vec());
    assert!(matches!(log.read(0, 1), Err(LogError::OffsetOutOfRange { offset: 1, end: 1, .. })));
    assert_eq!(log.append(1, b"elsewhere").unwrap(), 0, "another partition still appends");
    drop(log);
    let mut reader = open_reader(dir.path()).unwrap();
    assert_eq!((reader.end(0).unwrap(), reader.damaged(0).unwrap(), reader.damaged(1).unwrap()), (1, true, false));
    assert_eq!(read_all(&mut reader, 0), vec![b"abc".to_vec()]);
    assert_eq!(fs::read(&path).unwrap(), bytes, "nobody modified the damaged file");

    let err = open_unchecked(dir.path()).err().expect("the unchecked writer finds damage before the tail");
    let text = err.to_string();
    assert!(text.contains(&format!("partition-0.log is corrupt at offset 1 (byte {second})")), "{text}");
}

#[test]
fn a_missing_record_in_the_middle_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let payloads = vec![b"zero".to_vec(), b"one".to_vec(), b"two".to_vec()];
    let original = write_log(dir.path(), &payloads);
    let ends = frame_ends(&payloads);
    // Every frame stays checksum-valid; only the offsets no longer follow 0, 1, 2.
    let mut bytes = original[..ends[0]].to_vec();
    bytes.extend_from_slice(&original[ends[1]..]);
    fs::write(log_file(dir.path(), 0), &bytes).unwrap();
    let (log, _) = open_writer(dir.path()).unwrap();
    let mut log = log;
    let damage = log.damage(0).unwrap().expect("acknowledged records are missing");
    assert_eq!((damage.offset, damage.position), (1, ends[0] as u64));
    assert!(damage.reason.contains("offset 2"), "{}", damage.reason);
    drop(log);
    match open_unchecked(dir.path()) {
        Err(LogError::Corrupt { offset: 1, position, reason, .. }) => {
            assert_eq!(position, ends[0] as u64);
            assert!(reason.contains("offset 2"), "{reason}");
        }
        other => panic!("expected Corrupt at offset 1, got {:?}", other.map(|_| ())),
    }
    assert_eq!(fs::read(log_file(dir.path(), 0)).unwrap(), bytes, "corruption is never repaired");
}

/// The unchecked writer tells damage from a torn tail by an intact frame after it, and trusts
/// such a frame only if its offset is above the expected one by no more than the bytes left
/// could hold frames, plus one (a payload may hold bytes that parse as a frame with any
/// offset). Record 0, then `missing` records cut out, then one record: its offset, `missing +
/// 1`, is inside that bound for 1 and 2 missing (damage, the file untouched) and beyond it for
/// 3 (taken for a torn tail and cut, as the file alone cannot tell).
#[test]
fn the_unchecked_writer_trusts_a_later_frame_only_within_the_bytes_left() {
    for (missing, damage) in [(1u64, true), (2, true), (3, false)] {
        let dir = tempfile::tempdir().unwrap();
        let payloads: Vec<Vec<u8>> = (0..missing + 2).map(|i| format!("r{i}").into_bytes()).collect();
        let original = write_log(dir.path(), &payloads);
        let ends = frame_ends(&payloads);
        let mut bytes = original[..ends[0]].to_vec();
        bytes.extend_from_slice(&original[ends[missing as usize]..]);
        let last = missing + 1;
        match reopen_unchecked(dir.path(), &bytes, &payloads) {
            Err(LogError::Corrupt { offset: 1, position, reason, .. }) if damage => {
                assert_eq!(position, ends[0] as u64, "{missing} missing");
                let follows = format!(
                    "the frame there carries offset {last}; whole batches resume at offset {last} (byte {})",
                    ends[0]
                );
                assert!(reason.ends_with(&follows), "{missing} missing: {reason}");
                assert_eq!(fs::read(log_file(dir.path(), 0)).unwrap(), bytes, "damage is never repaired");
            }
            Ok((records, repairs)) if !damage => {
                assert_eq!(records, payloads[..1], "{missing} missing");
                assert_eq!(repairs.len(), 1, "{missing} missing: {repairs:?}");
                assert_eq!((repairs[0].kept_records, repairs[0].dropped_bytes), (1, (bytes.len() - ends[0]) as u64));
                assert_eq!(fs::read(log_file(dir.path(), 0)).unwrap(), bytes[..ends[0]], "{missing} missing");
            }
            other => panic!("{missing} missing: expected damage {damage}, got {:?}", other.map(|(r, _)| r.len())),
        }
    }
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

/// Opens `bytes` as partition 0 of `dir` with the unchecked writer (the file alone decides,
/// as before the acknowledgement record) and checks its records against `payloads`. Returns
/// the writer's result so each test can check how the damage was classified.
fn reopen_unchecked(
    dir: &Path,
    bytes: &[u8],
    payloads: &[Vec<u8>],
) -> Result<(Vec<Vec<u8>>, Vec<TailRepair>), LogError> {
    fs::write(log_file(dir, 0), bytes).unwrap();
    let written = open_unchecked(dir).map(|(mut w, repairs)| (read_all(&mut w, 0), repairs));
    if let Ok((records, _)) = &written {
        assert_eq!(records[..], payloads[..records.len()], "a record came back altered");
    }
    written
}

/// What a checked open of partition 0 found.
#[derive(Debug)]
struct Opened {
    records: Vec<Vec<u8>>,
    repairs: Vec<TailRepair>,
    damage: Option<Damage>,
}

/// Opens `bytes` as partition 0 of `dir`, acknowledged by the acknowledgement file `ack`, with
/// a reader and then a checked writer: checks that they agree, that the records are those of
/// `payloads`, that the reader modifies nothing and that nobody modifies a damaged partition.
fn reopen_checked(dir: &Path, bytes: &[u8], ack: &[u8], payloads: &[Vec<u8>]) -> Result<Opened, LogError> {
    let path = log_file(dir, 0);
    fs::write(&path, bytes).unwrap();
    fs::write(ack_file(dir, 0), ack).unwrap();
    let read = open_reader(dir).map(|mut r| (read_all(&mut r, 0), r.damage(0).unwrap()));
    assert_eq!(fs::read(&path).unwrap(), bytes, "open_reader must never modify the file");
    let written = open_writer(dir).map(|(mut w, repairs)| {
        let (records, damage) = (read_all(&mut w, 0), w.damage(0).unwrap());
        Opened { records, repairs, damage }
    });
    match (&read, &written) {
        (Ok((records, damage)), Ok(opened)) => {
            // A reader reads below the acknowledgement record only; the writer also keeps, and
            // acknowledges, the whole batches past it.
            let adopted: u64 = opened.repairs.iter().map(|repair| repair.adopted.end - repair.adopted.start).sum();
            let seen = &opened.records[..opened.records.len() - adopted as usize];
            assert_eq!((&records[..], damage), (seen, &opened.damage), "reader and writer must agree");
        }
        (Err(read), Err(written)) if is_header_refusal(read) && is_header_refusal(written) => {
            assert_eq!(read.to_string(), written.to_string(), "reader and writer refuse the same header alike");
        }
        _ => panic!("reader {read:?} and writer {written:?} disagree"),
    }
    if let Ok(opened) = &written {
        assert_eq!(opened.records[..], payloads[..opened.records.len()], "a record came back altered");
        if opened.damage.is_some() {
            assert_eq!(fs::read(&path).unwrap(), bytes, "nobody modifies a damaged partition");
        }
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

/// Writes `batches` to partition 0 of a fresh log in `dir` and returns the file's bytes,
/// each batch's base sequence (0 for a plain one; each producer's sequences are dense from 0)
/// and the acknowledgement file as it was before each batch and after the last.
fn write_batches(dir: &Path, batches: &[Batch]) -> (Vec<u8>, Vec<u32>, Vec<Vec<u8>>) {
    let mut log = writer(dir, 1);
    let mut next = std::collections::HashMap::new();
    let mut bases = Vec::new();
    let mut acks = vec![fs::read(ack_file(dir, 0)).unwrap()];
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
        acks.push(fs::read(ack_file(dir, 0)).unwrap());
        end += count;
    }
    drop(log);
    (fs::read(log_file(dir, 0)).unwrap(), bases, acks)
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

    /// A flipped byte anywhere in acknowledged bytes damages the partition from the batch
    /// holding it on: never repaired away, the records before that batch still readable.
    #[test]
    fn every_single_byte_flip_in_acknowledged_bytes_damages_the_partition(
        batches in batches(2..5, 24),
        mask in 1u8..=255,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let payloads = flatten(&batches);
        let (original, _, acks) = write_batches(dir.path(), &batches);
        let ack = acks.last().unwrap();
        let ends = frame_ends(&payloads);
        let firsts = first_offsets(&batches);
        for position in 0..original.len() {
            let mut bytes = original.clone();
            bytes[position] ^= mask;
            let result = reopen_checked(dir.path(), &bytes, ack, &payloads);
            if position < HEADER {
                prop_assert!(result.as_ref().is_err_and(is_header_refusal), "byte {}", position);
                continue;
            }
            // The damaged record is the first whose frame ends after the flipped byte; its
            // batch is lost whole, as nobody reads part of a batch.
            let damaged = ends.iter().position(|&end| end > position).unwrap();
            let batch_start = *firsts.iter().rev().find(|&&first| first <= damaged).unwrap();
            let opened = result.unwrap_or_else(|e| panic!("byte {position}: a damaged partition still opens, not {e}"));
            prop_assert_eq!(opened.records.len(), batch_start, "byte {}", position);
            prop_assert_eq!(opened.repairs, vec![], "byte {}: damage is not an unacknowledged tail", position);
            let damage = opened.damage.unwrap_or_else(|| panic!("byte {position}: the damage went unnoticed"));
            prop_assert_eq!((damage.offset, damage.acked_end), (batch_start as u64, payloads.len() as u64));
        }
    }

    /// The unchecked writer classifies from the file alone, as the log did before the
    /// acknowledgement record: damage followed by an intact batch is corrupt from the damaged
    /// batch's first record on, and damage in the last batch passes for a torn append, losing
    /// that batch (the trap a flipped byte in an acknowledged last frame fell into).
    #[test]
    fn every_single_byte_flip_is_classified_by_the_unchecked_writer(batches in batches(2..5, 24), mask in 1u8..=255) {
        let dir = tempfile::tempdir().unwrap();
        let payloads = flatten(&batches);
        let (original, _, _) = write_batches(dir.path(), &batches);
        let ends = frame_ends(&payloads);
        let firsts = first_offsets(&batches);
        let last_batch_start = *firsts.last().unwrap();
        for position in 0..original.len() {
            let mut bytes = original.clone();
            bytes[position] ^= mask;
            let result = reopen_unchecked(dir.path(), &bytes, &payloads);
            if position < HEADER {
                prop_assert!(result.as_ref().is_err_and(is_header_refusal), "byte {}", position);
                continue;
            }
            // The damaged record is the first whose frame ends after the flipped byte; its
            // batch is the damaged one.
            let damaged = ends.iter().position(|&end| end > position).unwrap();
            let batch_start = *firsts.iter().rev().find(|&&first| first <= damaged).unwrap();
            let batch_position = if batch_start == 0 { HEADER } else { ends[batch_start - 1] };
            let last = batch_start == last_batch_start;
            match result {
                // An intact batch follows the damage, so it cannot be a torn tail.
                Err(LogError::Corrupt { offset, position: at, .. }) if !last => {
                    prop_assert_eq!(offset, batch_start as u64);
                    prop_assert_eq!(at, batch_position as u64);
                }
                // Damage in the last batch is indistinguishable from a torn append, and a
                // torn append loses its whole batch.
                Ok((records, repairs)) if last => {
                    prop_assert_eq!(
                        records.len(),
                        last_batch_start,
                        "byte {} kept more than the complete batches",
                        position
                    );
                    prop_assert_eq!(repairs.len(), 1);
                    prop_assert_eq!(repairs[0].kept_records, last_batch_start as u64);
                    prop_assert_eq!(repairs[0].dropped_bytes, (original.len() - batch_position) as u64);
                }
                Ok(_) => prop_assert!(false, "byte {}: damage before the tail was repaired away", position),
                Err(other) => prop_assert!(false, "byte {}: unexpected {}", position, other),
            }
        }
    }
}

/// The batches whose every frame fits in `len` bytes, and the records and bytes they hold.
fn whole_batches(batches: &[Batch], len: usize) -> (usize, usize, usize) {
    let payloads = flatten(batches);
    let (ends, firsts) = (frame_ends(&payloads), first_offsets(batches));
    let whole = batches.iter().zip(&firsts).take_while(|(b, &first)| ends[first + b.payloads.len() - 1] <= len).count();
    let kept = firsts.get(whole).copied().unwrap_or(payloads.len());
    let valid_len = if kept == 0 { HEADER } else { ends[kept - 1] };
    (whole, kept, valid_len)
}

/// Retries every idempotent batch of the first `whole` on a writer of `dir`: each must be a
/// duplicate with its original offsets (the rebuilt producer table knows exactly them), and
/// the log must end at `kept`.
fn check_retries(dir: &Path, batches: &[Batch], bases: &[u32], whole: usize, kept: usize) -> Result<(), TestCaseError> {
    let mut log = writer(dir, 1);
    let firsts = first_offsets(batches);
    for ((batch, &first), &base) in batches.iter().zip(&firsts).zip(bases).take(whole) {
        let Some(id) = batch.producer else { continue };
        let retried = log.append_idempotent(0, producer(id), base, &batch.payloads).unwrap();
        prop_assert!(retried.duplicate, "batch at {} was appended again", first);
        prop_assert_eq!(retried.offsets, first as u64..(first + batch.payloads.len()) as u64);
    }
    prop_assert_eq!(log.end(0).unwrap(), kept as u64);
    Ok(())
}

proptest! {
    // Each case already tries every length of its file, so fewer cases suffice.
    #![proptest_config(deterministic(32))]

    /// A cut anywhere in acknowledged bytes loses acknowledged records: the partition is
    /// damaged from the first batch the cut reaches, and the whole batches before it read.
    #[test]
    fn every_cut_of_acknowledged_bytes_damages_the_partition(batches in batches(1..5, 24)) {
        let dir = tempfile::tempdir().unwrap();
        let payloads = flatten(&batches);
        let (original, _, acks) = write_batches(dir.path(), &batches);
        for len in HEADER..original.len() {
            let (_, kept, valid_len) = whole_batches(&batches, len);
            let opened = reopen_checked(dir.path(), &original[..len], acks.last().unwrap(), &payloads)
                .unwrap_or_else(|e| panic!("a cut to {len} bytes still opens, not {e}"));
            prop_assert_eq!(opened.records.len(), kept, "len {}", len);
            prop_assert_eq!(opened.repairs, vec![], "len {}: acknowledged records are never cut away", len);
            let damage = opened.damage.unwrap_or_else(|| panic!("len {len}: the loss went unnoticed"));
            prop_assert_eq!((damage.offset, damage.position), (kept as u64, valid_len as u64), "len {}", len);
        }
    }

    /// Batches appended after the last acknowledged one whose acknowledgement never became
    /// durable (a crash or power cut during the append, or a damaged newest slot), cut
    /// anywhere: the writer keeps and acknowledges their whole batches (the acknowledgement
    /// record is a lower bound), cuts the incomplete one and reports both, and the retries of
    /// every kept batch are duplicates.
    #[test]
    fn every_cut_of_an_unacknowledged_tail_keeps_its_whole_batches(
        batches in batches(1..5, 24),
        split in 0usize..5,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let payloads = flatten(&batches);
        let (original, bases, acks) = write_batches(dir.path(), &batches);
        let split = split.min(batches.len());
        let acked: usize = batches[..split].iter().map(|b| b.payloads.len()).sum();
        let acked_len = if acked == 0 { HEADER } else { frame_ends(&payloads)[acked - 1] };
        for len in acked_len..=original.len() {
            let (whole, kept, valid_len) = whole_batches(&batches, len);
            let opened = reopen_checked(dir.path(), &original[..len], &acks[split], &payloads)
                .unwrap_or_else(|e| panic!("len {len}: {e}"));
            prop_assert_eq!(opened.records.len(), kept, "len {}", len);
            prop_assert!(opened.damage.is_none(), "len {}: an unacknowledged tail is no damage", len);
            let (adopted, dropped_bytes) = (acked as u64..kept as u64, (len - valid_len) as u64);
            let expected: Vec<TailRepair> = if adopted.is_empty() && dropped_bytes == 0 {
                vec![]
            } else {
                let (path, kept_records) = (log_file(dir.path(), 0), kept as u64);
                vec![TailRepair { path, partition: 0, kept_records, dropped_bytes, adopted }]
            };
            prop_assert_eq!(opened.repairs, expected, "len {}", len);
            prop_assert_eq!(fs::metadata(log_file(dir.path(), 0)).unwrap().len(), valid_len as u64);
            check_retries(dir.path(), &batches, &bases, whole, kept)?;
        }
    }

    /// The unchecked writer (the file alone) keeps the longest prefix of whole batches, as the
    /// log did before the acknowledgement record.
    #[test]
    fn every_truncation_keeps_the_longest_prefix_of_whole_batches_unchecked(batches in batches(1..5, 24)) {
        let dir = tempfile::tempdir().unwrap();
        let payloads = flatten(&batches);
        let (original, bases, _) = write_batches(dir.path(), &batches);
        for len in HEADER..=original.len() {
            // The batches whose every frame fits in `len` bytes survive; a batch cut short,
            // even between two of its frames, is a torn tail.
            let (whole, kept, valid_len) = whole_batches(&batches, len);
            let (records, repairs) = reopen_unchecked(dir.path(), &original[..len], &payloads)
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
                    adopted: kept as u64..kept as u64,
                }]
            };
            prop_assert_eq!(repairs, expected);
            prop_assert_eq!(fs::metadata(log_file(dir.path(), 0)).unwrap().len(), valid_len as u64);
            // The unchecked writer made the acknowledgement record say what the file holds,
            // so a checked writer opens it clean.
            check_retries(dir.path(), &batches, &bases, whole, kept)?;
        }
    }
}
