//! `Log::upgrade` (`consumer repair --upgrade`) from format version 2 to 3, on the simulated
//! disk: the converted log holds every acknowledged record byte for byte, and a power cut at
//! every disk operation of the upgrade, with several seeds, leaves either the complete old log
//! (which a rerun upgrades) or the new one (which a rerun finishes when the cut came between
//! the commit point and the last rename). Damaged version-2 logs are refused, not converted.
//! Through the binary: `tests/foreign.rs` (a version-2 data directory upgraded, then consumed).

use consumer::log::{
    replica_dir, write_v2_log_for_tests, Log, LogError, LogIdentity, Producer, ReplicatedLog, SimDisk, Storage,
    V2Batch, V2Partition,
};
use std::path::{Path, PathBuf};

const ROOT: &str = "/sim";
const SEEDS: u64 = 4;
const IDENTITY: LogIdentity = LogIdentity { id: 0x0123_4567_89ab_cdef, partitions: 2 };
const PRODUCER: Producer = Producer { id: 7, epoch: 1 };

fn batch(producer: Option<(Producer, u32)>, payloads: &[&str]) -> V2Batch {
    V2Batch { producer, payloads: payloads.iter().map(|p| p.as_bytes().to_vec()).collect() }
}

/// Plain and idempotent batches (one whose sequences wrap), a moved start and a torn tail.
fn old_log() -> Vec<V2Partition> {
    let wrapping = Producer { id: 9, epoch: 2 };
    vec![
        V2Partition {
            batches: vec![
                batch(None, &["a"]),
                batch(Some((PRODUCER, 0)), &["b", "c", "d"]),
                batch(None, &["e", "ff"]),
                batch(Some((PRODUCER, 3)), &[""]),
            ],
            start: 1,
            unacknowledged: b"torn tail".to_vec(),
        },
        V2Partition {
            batches: vec![batch(Some((wrapping, u32::MAX - 1)), &["x", "y", "z"])],
            start: 0,
            unacknowledged: Vec::new(),
        },
    ]
}

/// A simulated disk holding the version-2 log, durably.
fn world() -> (SimDisk, Storage, PathBuf) {
    let disk = SimDisk::new(Path::new(ROOT));
    let storage = Storage::Simulated(disk.clone());
    let dir = Path::new(ROOT).join("log");
    write_v2_log_for_tests(&storage, &dir, IDENTITY, &old_log()).expect("the version-2 log");
    (disk, storage, dir)
}

/// The version-3 log in `dir` holds exactly the old log's acknowledged records, offsets and
/// payloads, from the same starts, and opens clean for its writer.
fn check_new(storage: &Storage, dir: &Path, context: &str) {
    let mut reader = Log::open_reader_on(storage, dir, IDENTITY).unwrap_or_else(|e| panic!("{context}: {e}"));
    for (number, part) in (0..).zip(old_log()) {
        let payloads: Vec<Vec<u8>> = part.batches.into_iter().flat_map(|batch| batch.payloads).collect();
        let end = reader.end(number).expect("end");
        assert_eq!(end, payloads.len() as u64, "{context}: partition {number}'s end");
        assert_eq!(reader.start(number).expect("start"), part.start, "{context}: partition {number}'s start");
        let records = reader.read_range(number, part.start..end).expect("records");
        for (record, offset) in records.iter().zip(part.start..) {
            assert_eq!(record.offset, offset, "{context}: partition {number}");
            assert_eq!(record.payload, payloads[offset as usize], "{context}: partition {number} offset {offset}");
        }
        assert!(!reader.damaged(number).expect("damage"), "{context}: partition {number} damaged");
    }
    drop(reader);
    let (_, repairs) = Log::open_writer_on(storage, dir, IDENTITY, consumer::log::WriterMode::Checked)
        .unwrap_or_else(|e| panic!("{context}: writer: {e}"));
    assert!(repairs.is_empty(), "{context}: the new log's tails were cut: {repairs:?}");
}

#[test]
fn an_upgraded_log_holds_every_acknowledged_record_and_its_producers() {
    let (_disk, storage, dir) = world();
    let refused = Log::open_reader_on(&storage, &dir, IDENTITY).err().expect("a version-2 log is refused");
    assert!(matches!(refused, LogError::FormatVersion { upgradable: true, .. }), "{refused}");
    assert!(refused.to_string().contains("run `consumer repair --upgrade`"), "{refused}");
    let upgraded = Log::upgrade_on(&storage, &dir, IDENTITY).expect("upgrade");
    let lines: Vec<String> = upgraded.actions.iter().map(ToString::to_string).collect();
    assert_eq!(lines.len(), 2 * 3 + 2, "a line per file, the torn tail, the identity: {lines:#?}");
    assert!(lines.iter().any(|line| line.contains("9 byte(s) past its acknowledged length")), "{lines:#?}");
    check_new(&storage, &dir, "upgraded");
    // The producer table is rebuilt from the converted frames: a retry is a duplicate.
    let (mut log, _) = Log::open_writer_on(&storage, &dir, IDENTITY, consumer::log::WriterMode::Checked).expect("w");
    let retry = vec![b"b".to_vec(), b"c".to_vec(), b"d".to_vec()];
    let appended = log.append_idempotent(0, PRODUCER, 0, &retry).expect("retry");
    assert!(appended.duplicate && appended.offsets == (1..4), "{appended:?}");
    drop(log);
    let again = Log::upgrade_on(&storage, &dir, IDENTITY).expect("a second upgrade");
    assert!(again.upgraded.is_empty() && again.actions.is_empty(), "nothing to upgrade: {again:?}");
}

/// What one cut left, before the rerun.
enum Left {
    Old,
    New,
}

#[test]
fn a_power_cut_anywhere_in_the_upgrade_loses_nothing() {
    let ops = {
        let (disk, storage, dir) = world();
        let before = disk.ops();
        Log::upgrade_on(&storage, &dir, IDENTITY).expect("the reference upgrade");
        disk.ops() - before
    };
    let (mut old, mut new, mut finished_by_rerun) = (0, 0, 0);
    for op in 0..ops {
        for seed in 1..=SEEDS {
            let context = format!("cut before operation {op} of {ops}, seed {seed}");
            let (disk, storage, dir) = world();
            disk.halt_at_op(op);
            let halted = Log::upgrade_on(&storage, &dir, IDENTITY);
            assert!(halted.is_err() && disk.halted(), "{context}: the upgrade did not stop: {halted:?}");
            disk.power_cut(seed);
            let left = match Log::open_reader_on(&storage, &dir, IDENTITY) {
                Ok(_) => Left::New,
                Err(LogError::FormatVersion { upgradable: true, .. }) => Left::Old,
                Err(LogError::UpgradeInterrupted { .. }) => {
                    finished_by_rerun += 1;
                    Left::New
                }
                Err(other) => panic!("{context}: neither the old log nor the new one: {other}"),
            };
            let rerun = Log::upgrade_on(&storage, &dir, IDENTITY).unwrap_or_else(|e| panic!("{context}: rerun: {e}"));
            match left {
                Left::Old => {
                    old += 1;
                    assert!(!rerun.upgraded.is_empty(), "{context}: the rerun converted nothing");
                }
                Left::New => new += 1,
            }
            check_new(&storage, &dir, &context);
        }
    }
    println!(
        "upgrade power cuts: {ops} cut points × {SEEDS} seeds, old {old}, new {new} \
         ({finished_by_rerun} finished by a rerun), lost 0"
    );
    assert!(old > 0 && new > 0, "cuts on both sides of the commit point");
}

/// What a case does to a version-2 partition file's bytes.
type Damage = fn(&mut Vec<u8>);

/// A damaged version-2 partition: the upgrade refuses in one line naming the partition and
/// the offset, and changes nothing (the log stays the old one, refused with the hint).
#[test]
fn a_damaged_version_2_log_is_refused() {
    // Partition 1's first frame starts at byte 8; its payload "x" at byte 8 + 36.
    let cases: [(&str, Damage); 3] = [
        ("a flipped payload byte", |bytes| bytes[8 + 36] ^= 1),
        ("a flipped offset byte", |bytes| bytes[8 + 8] ^= 1),
        ("acknowledged bytes cut off", |bytes| bytes.truncate(8 + 36 + 1 + 36)),
    ];
    for (name, damage) in cases {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = temp.path().join("log");
        write_v2_log_for_tests(&Storage::Real, &dir, IDENTITY, &old_log()).expect("v2");
        let file = dir.join("partition-1.log");
        let mut bytes = std::fs::read(&file).expect("read");
        damage(&mut bytes);
        std::fs::write(&file, &bytes).expect("write");
        let refused = Log::upgrade(&dir, IDENTITY).err().unwrap_or_else(|| panic!("{name}: upgraded"));
        assert!(
            matches!(&refused, LogError::Damaged { partition: 1, offset: 0, path, .. } if *path == file),
            "{name}: {refused}"
        );
        assert!(refused.is_refusal() && !refused.to_string().contains('\n'), "{name}: {refused}");
        let still = Log::open_reader(&dir, IDENTITY).err().expect("still the old log");
        assert!(matches!(still, LogError::FormatVersion { upgradable: true, .. }), "{name}: {still}");
    }
}

/// A replicated log of format version 2: each replica is a log directory of its own,
/// converted with its records, then the top-level identity; a second run has nothing to do.
#[test]
fn a_replicated_log_is_upgraded_replica_by_replica() {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = temp.path().join("log");
    ReplicatedLog::create(&dir, IDENTITY, 2).expect("a replicated log");
    for broker in 0..2 {
        write_v2_log_for_tests(&Storage::Real, &replica_dir(&dir, broker), IDENTITY, &old_log()).expect("v2");
    }
    // The top-level identity of a version-2 log, by its documented layout.
    let mut identity = b"ONCELID1".to_vec();
    identity.extend_from_slice(&IDENTITY.id.to_le_bytes());
    identity.extend_from_slice(&IDENTITY.partitions.to_le_bytes());
    identity.extend_from_slice(&crc32c::crc32c(&identity).to_le_bytes());
    std::fs::write(dir.join("identity"), identity).expect("v2 identity");
    let Err(refused) = ReplicatedLog::open(&dir, IDENTITY) else { panic!("a version-2 log is refused") };
    assert!(matches!(refused, LogError::FormatVersion { upgradable: true, .. }), "{refused}");
    let upgraded = Log::upgrade(&dir, IDENTITY).expect("upgrade");
    let expected = vec![replica_dir(&dir, 0), replica_dir(&dir, 1), dir.clone()];
    assert_eq!(upgraded.upgraded, expected);
    let log = ReplicatedLog::open(&dir, IDENTITY).expect("open").expect("replicated");
    for broker in 0..2 {
        for (number, part) in (0..).zip(old_log()) {
            let payloads: Vec<Vec<u8>> = part.batches.into_iter().flat_map(|batch| batch.payloads).collect();
            let view = log.replica_view(broker, number).expect("view");
            assert_eq!((view.start, view.end, view.damage), (part.start, payloads.len() as u64, None));
            let records = log.replica_read(broker, number, view.start..view.end).expect("records");
            let read: Vec<Vec<u8>> = records.into_iter().map(|record| record.payload).collect();
            assert_eq!(read, payloads[view.start as usize..], "broker {broker} partition {number}");
        }
    }
    let again = Log::upgrade(&dir, IDENTITY).expect("a second upgrade");
    assert!(again.upgraded.is_empty() && again.current == expected, "{again:?}");
}
