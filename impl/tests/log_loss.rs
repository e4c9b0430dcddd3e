//! The log's defences against losing acknowledged records, through the library: the identity
//! every open checks, the acknowledgement record's documented layout and its torn slot
//! writes, fault injection (`fault::lose_tail`) and `Log::repair`, case by case. The same
//! losses through the command line: `loss.rs`.

mod common;

use consumer::log::{fault, Log, LogError, LogIdentity, RepairAction, TailRepair};
use std::fs;
use std::path::{Path, PathBuf};

/// Bytes before the first frame, and of a frame of a 3-byte payload (`src/log/mod.rs`).
const HEADER: u64 = 24;
const FRAME3: u64 = 40 + 3;
/// The acknowledgement record's layout (`src/log/ack.rs`): 8 KiB, slot k at byte 4096 k,
/// each `ONCEACK2`, log id (u64 LE), partition (u32 LE), generation, end, length (u64 LE)
/// and the crc32c of those 44 bytes.
const SLOT_STRIDE: usize = 4096;
const RECORD_LEN: usize = 48;

fn path(dir: &Path, partition: u32, extension: &str) -> PathBuf {
    dir.join(format!("partition-{partition}.{extension}"))
}

/// A log of `partitions` partitions with `records` three-byte records in partition 0, one per
/// append; its identity.
fn log_with(dir: &Path, partitions: u32, records: u64) -> LogIdentity {
    let identity = Log::init(dir, partitions).expect("init");
    let (mut log, _) = Log::open_writer(dir, identity).expect("writer");
    for i in 0..records {
        assert_eq!(log.append(0, format!("r{i:02}").as_bytes()).expect("append"), i);
    }
    identity
}

/// The valid slots of an acknowledgement file as (slot, generation, end, length), decoded by
/// the documented layout.
fn slots(bytes: &[u8]) -> Vec<(usize, u64, u64, u64)> {
    assert_eq!(bytes.len(), 2 * SLOT_STRIDE, "the acknowledgement file is preallocated to two 4 KiB slots");
    (0..2)
        .filter_map(|slot| {
            let record = &bytes[slot * SLOT_STRIDE..slot * SLOT_STRIDE + RECORD_LEN];
            let u64_at = |at: usize| u64::from_le_bytes(record[at..at + 8].try_into().unwrap());
            let crc = u32::from_le_bytes(record[44..48].try_into().unwrap());
            let valid = &record[..8] == b"ONCEACK2" && crc32c::crc32c(&record[..44]) == crc;
            // Partition 0's record: its log's id, then partition 0.
            valid.then(|| assert_eq!(&record[16..20], &0u32.to_le_bytes(), "slot {slot} names partition 0"));
            valid.then(|| (slot, u64_at(20), u64_at(28), u64_at(36)))
        })
        .collect()
}

#[test]
fn the_ack_record_layout_is_the_documented_one() {
    let dir = tempfile::tempdir().unwrap();
    let identity = Log::init(dir.path(), 1).unwrap();
    let ack = path(dir.path(), 0, "ack");
    assert_eq!(slots(&fs::read(&ack).unwrap()), vec![(0, 2, 0, HEADER), (1, 1, 0, HEADER)], "after init");
    let (mut log, _) = Log::open_writer(dir.path(), identity).unwrap();
    log.append(0, b"one").unwrap();
    assert_eq!(slots(&fs::read(&ack).unwrap()), vec![(0, 2, 0, HEADER), (1, 3, 1, HEADER + FRAME3)]);
    log.append_batch(0, &[b"two".to_vec(), b"six".to_vec()]).unwrap();
    let expected = vec![(0, 4, 3, HEADER + 3 * FRAME3), (1, 3, 1, HEADER + FRAME3)];
    assert_eq!(slots(&fs::read(&ack).unwrap()), expected, "generation g goes to slot g % 2, in place");
    assert_eq!(fs::metadata(path(dir.path(), 0, "log")).unwrap().len(), HEADER + 3 * FRAME3);
}

/// A slot write torn anywhere (a byte of it wrong, the slot zeroed, the new record's first
/// bytes over the old one's last) leaves the other slot, the previous acknowledged state, as
/// a lower bound: readers see the previous end, and the writer keeps the last append's whole
/// batch and acknowledges it again, so no acknowledged record is ever cut by a damaged slot.
/// Both slots unreadable is refused.
#[test]
fn a_torn_slot_write_leaves_the_previous_acknowledged_state() {
    let dir = tempfile::tempdir().unwrap();
    let identity = log_with(dir.path(), 1, 1);
    let ack = path(dir.path(), 0, "ack");
    let before = fs::read(&ack).unwrap();
    let (mut log, _) = Log::open_writer(dir.path(), identity).unwrap();
    log.append(0, b"new").unwrap();
    drop(log);
    let (after, data) = (fs::read(&ack).unwrap(), fs::read(path(dir.path(), 0, "log")).unwrap());
    // Generation 4, end 2, went to slot 0 over generation 2.
    assert_eq!(slots(&after)[0], (0, 4, 2, HEADER + 2 * FRAME3));
    let mut tears: Vec<(String, Vec<u8>)> = Vec::new();
    for byte in 0..RECORD_LEN {
        let mut torn = after.clone();
        torn[byte] ^= 0x10;
        tears.push((format!("byte {byte} flipped"), torn));
    }
    for written in 1..RECORD_LEN {
        let mut torn = before.clone();
        torn[..written].copy_from_slice(&after[..written]);
        tears.push((format!("{written} bytes of the new record written"), torn));
    }
    let mut zeroed = after.clone();
    zeroed[..SLOT_STRIDE].fill(0);
    tears.push(("the slot zeroed".to_string(), zeroed));
    for (tear, torn) in tears {
        fs::write(&ack, &torn).unwrap();
        fs::write(path(dir.path(), 0, "log"), &data).unwrap();
        let mut reader = Log::open_reader(dir.path(), identity).unwrap();
        assert_eq!((reader.end(0).unwrap(), reader.damaged(0).unwrap()), (1, false), "{tear}");
        let (mut writer, repairs) = Log::open_writer(dir.path(), identity).unwrap();
        let kept = TailRepair {
            path: path(dir.path(), 0, "log"),
            partition: 0,
            kept_records: 2,
            dropped_bytes: 0,
            adopted: 1..2,
        };
        assert_eq!(repairs, vec![kept], "{tear}");
        assert_eq!(writer.append(0, b"9th").unwrap(), 2, "{tear}: the whole record past the slot is kept");
    }
    let mut both = after.clone();
    both[0] ^= 1;
    both[SLOT_STRIDE] ^= 1;
    fs::write(&ack, &both).unwrap();
    for error in [Log::open_reader(dir.path(), identity).err(), Log::open_writer(dir.path(), identity).err()] {
        let error = error.expect("refused");
        assert!(matches!(&error, LogError::Corrupt { path, .. } if *path == ack), "{error}");
        assert!(error.is_refusal() && error.to_string().contains("neither slot"), "{error}");
    }
}

/// An acknowledgement file cut short (a file system that lost its tail) keeps the slot it
/// still holds whole: a slot past the file's end is unreadable like a torn one, never an I/O
/// error; with neither slot whole every open is refused. A reader leaves the file as it is.
#[test]
fn an_acknowledgement_file_cut_short_keeps_the_slot_it_still_holds() {
    // After `init` slot 0 holds generation 2 (end 0) and slot 1 generation 1; one append
    // writes generation 3 (end 1) to slot 1, a second generation 4 (end 2) to slot 0.
    // (case, records appended, bytes of the file kept, the acknowledged end; None: refused)
    let cases: &[(&str, u64, usize, Option<u64>)] = &[
        ("slot 1 cut, the older slot 0 left", 1, SLOT_STRIDE, Some(0)),
        ("slot 1 cut, the newer slot 0 left", 2, SLOT_STRIDE, Some(2)),
        ("slot 1 cut within its record", 1, SLOT_STRIDE + RECORD_LEN - 1, Some(0)),
        ("only slot 0's record left", 2, RECORD_LEN, Some(2)),
        ("slot 0 cut within its record", 2, RECORD_LEN - 1, None),
        ("nothing left", 1, 0, None),
    ];
    for &(case, records, kept, end) in cases {
        let dir = tempfile::tempdir().unwrap();
        let identity = log_with(dir.path(), 1, records);
        let ack = path(dir.path(), 0, "ack");
        fs::OpenOptions::new().write(true).open(&ack).unwrap().set_len(kept as u64).unwrap();
        match (Log::open_reader(dir.path(), identity), end) {
            (Ok(mut reader), Some(end)) => assert_eq!(reader.end(0).unwrap(), end, "{case}"),
            (Err(error), None) => {
                assert!(matches!(&error, LogError::Corrupt { path, .. } if *path == ack), "{case}: {error}");
                assert!(error.to_string().contains("neither slot"), "{case}: {error}");
            }
            (reader, end) => panic!("{case}: expected end {end:?}, got {:?}", reader.map(|_| ())),
        }
        assert_eq!(fs::metadata(&ack).unwrap().len(), kept as u64, "{case}: the reader changed the file");
    }
}

/// A file the log cannot reach for another reason than its absence (here a symbolic link to
/// itself: `ELOOP`) is an I/O error naming it, never taken for a missing file: not a
/// partition file without records, which `init` would write over, nor a missing file of a
/// complete log, which `repair` would make again. Nothing follows or replaces the link.
#[test]
fn a_file_unreachable_for_another_reason_than_absence_is_an_io_error_naming_it() {
    let is_io_error_of = |case: &str, error: Option<LogError>, file: &Path| {
        let error = error.unwrap_or_else(|| panic!("{case}: an unreachable file is accepted"));
        assert!(matches!(&error, LogError::Io { path, .. } if path == file), "{case}: {error}");
    };
    let is_link = |file: &Path| fs::symlink_metadata(file).unwrap().file_type().is_symlink();
    let dir = tempfile::tempdir().unwrap();
    let looped = path(dir.path(), 0, "log");
    std::os::unix::fs::symlink(&looped, &looped).unwrap();
    is_io_error_of("identity_for_init", Log::identity_for_init(dir.path(), 1).err(), &looped);
    is_io_error_of("init", Log::init(dir.path(), 1).err(), &looped);
    assert!(!dir.path().join("identity").exists() && is_link(&looped), "init wrote nothing");

    for name in ["identity", "partition-0.log", "partition-0.ack", "partition-0.start"] {
        let dir = tempfile::tempdir().unwrap();
        let identity = log_with(dir.path(), 1, 1);
        let looped = dir.path().join(name);
        fs::remove_file(&looped).unwrap();
        std::os::unix::fs::symlink(&looped, &looped).unwrap();
        is_io_error_of(name, Log::open_reader(dir.path(), identity).err(), &looped);
        is_io_error_of(name, Log::open_writer(dir.path(), identity).err(), &looped);
        is_io_error_of(name, Log::init(dir.path(), 1).err(), &looped);
        is_io_error_of(name, Log::repair(dir.path(), identity, |_| {}).err(), &looped);
        assert!(is_link(&looped), "{name}: the link was replaced");
    }
}

/// The identity file's documented layout (`src/log/identity.rs`, 24 bytes): `ONCELID2`, the
/// id (u64 LE), the partition count (u32 LE) and the crc32c of those 20 bytes. Any other
/// content is refused by every open and by `init`, and left as it is: `ONCELID` with another
/// version digit as another format version, anything else as corrupt.
#[test]
fn an_identity_file_is_the_documented_layout_or_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let identity = log_with(dir.path(), 2, 1);
    let file = dir.path().join("identity");
    let written = fs::read(&file).unwrap();
    let mut expected = b"ONCELID2".to_vec();
    expected.extend_from_slice(&identity.id.to_le_bytes());
    expected.extend_from_slice(&2u32.to_le_bytes());
    expected.extend_from_slice(&crc32c::crc32c(&expected).to_le_bytes());
    assert_eq!(written, expected, "the identity file's layout");
    // Shown as the refusals name ids: 16 hex digits, then the partition count.
    assert_eq!(identity.to_string(), format!("{:016x} (2 partition(s))", identity.id));

    let edited = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut bytes = written.clone();
        edit(&mut bytes);
        bytes
    };
    // The identity file as format version 2 wrote it: the same layout under `ONCELID1`.
    let version_1 = |b: &mut Vec<u8>| {
        b[7] = b'1';
        let crc = crc32c::crc32c(&b[..20]);
        b[20..24].copy_from_slice(&crc.to_le_bytes());
    };
    // (case, the file's content, the refusal: `None` corrupt, `Some(found)` another version)
    let mut cases: Vec<(String, Vec<u8>, Option<Vec<u8>>)> = vec![
        ("version 1 (a format-version-2 log)".into(), edited(&version_1), Some(b"ONCELID1".to_vec())),
        ("a byte appended".into(), edited(&|b| b.push(0)), None),
        ("the checksum's last byte cut".into(), edited(&|b| b.truncate(23)), None),
        ("the magic alone".into(), edited(&|b| b.truncate(8)), None),
        ("the magic cut".into(), edited(&|b| b.truncate(7)), None),
        ("empty".into(), Vec::new(), None),
        ("another file's magic".into(), edited(&|b| b[..8].copy_from_slice(b"ONCEACK1")), None),
    ];
    for byte in 0..written.len() {
        // Byte 7 is the version digit: flipped alone, the checksum fails, so it is damage and
        // never passes for another version (which has a checksum of its own).
        cases.push((format!("byte {byte} flipped"), edited(&|b| b[byte] ^= 0x01), None));
    }
    for (case, bytes, version) in cases {
        fs::write(&file, &bytes).unwrap();
        let errors = [
            ("read_identity", Log::read_identity(dir.path()).err()),
            ("open_reader", Log::open_reader(dir.path(), identity).err()),
            ("open_writer", Log::open_writer(dir.path(), identity).err()),
            ("init", Log::init(dir.path(), 2).err()),
        ];
        for (what, error) in errors {
            let error = error.unwrap_or_else(|| panic!("{case}: {what} accepted the identity file"));
            match (&error, &version) {
                (LogError::FormatVersion { path, found, .. }, Some(version)) => {
                    assert_eq!((path, found), (&file, version), "{case}: {what}");
                }
                (LogError::Corrupt { path, .. }, None) => assert_eq!(path, &file, "{case}: {what}"),
                _ => panic!("{case}: {what}: expected {}, got {error}", version.map_or("corrupt", |_| "a version")),
            }
        }
        assert_eq!(fs::read(&file).unwrap(), bytes, "{case}: the file was changed");
    }
}

/// Every open checks the directory holds the store's log, whole.
#[test]
fn a_log_opens_only_as_the_log_its_store_names() {
    let dir = tempfile::tempdir().unwrap();
    let none = Log::open_reader(dir.path(), LogIdentity { id: 7, partitions: 1 }).err().expect("no log yet");
    assert!(matches!(&none, LogError::Missing { path, .. } if path.ends_with("identity")), "{none}");
    let identity = log_with(dir.path(), 2, 2);
    let other = LogIdentity { id: identity.id ^ 1, ..identity };
    let error = Log::open_writer(dir.path(), other).err().expect("another id");
    let mismatch = (identity.id, other.id);
    assert!(matches!(error, LogError::IdentityMismatch { found, expected, .. } if (found, expected) == mismatch));
    let fewer = LogIdentity { partitions: 1, ..identity };
    let error = Log::open_reader(dir.path(), fewer).err().expect("another count");
    assert!(matches!(error, LogError::PartitionCount { found: 2, expected: 1, .. }), "{error}");
    let error = Log::init(dir.path(), 1).expect_err("init with another count");
    assert!(matches!(error, LogError::PartitionCount { found: 2, expected: 1, .. }), "{error}");
    assert_eq!(Log::init(dir.path(), 2).unwrap(), identity, "init over the same log adopts it");
    for extension in ["log", "start", "ack"] {
        let file = path(dir.path(), 1, extension);
        let bytes = fs::read(&file).unwrap();
        fs::remove_file(&file).unwrap();
        for error in [Log::open_reader(dir.path(), identity).err(), Log::open_writer(dir.path(), identity).err()] {
            let error = error.expect("a missing file is refused");
            assert!(matches!(&error, LogError::Missing { path, .. } if *path == file), "{error}");
            assert_eq!(error.to_string().lines().count(), 1);
        }
        assert!(!file.exists(), "nothing recreates a missing {extension} file in place");
        fs::write(&file, bytes).unwrap();
    }
    fs::remove_file(dir.path().join("identity")).unwrap();
    let error = Log::init(dir.path(), 2).expect_err("records without an identity");
    assert!(matches!(error, LogError::Unidentified { .. }), "{error}");
    // Already `init`'s read-only first half refuses them (`create` checks again, but `consumer
    // init` runs other checks in between and must not get a fresh identity for them).
    let error = Log::identity_for_init(dir.path(), 2).expect_err("records without an identity, read-only");
    assert!(matches!(error, LogError::Unidentified { .. }), "{error}");
}

/// A reader that indexed four records follows the log through a change made under it: a
/// lost tail is damage at its next refresh; after a repair cut the log back, appends that
/// end past what it indexed (in records or in bytes) are read afresh, never through the
/// positions it indexed before. Each case changes one of the three things a refresh compares
/// (the acknowledged end, the acknowledged length, the file's length).
#[test]
fn a_reader_follows_a_loss_and_a_repair_made_under_it() {
    struct Case {
        name: &'static str,
        /// After the loss of records 1.. and the repair, what the writer appends (if it
        /// appends), and bytes then added past the acknowledged length.
        appended: Option<(&'static [&'static [u8]], &'static [u8])>,
        /// The reader's view after it: (end, acknowledged end, damaged).
        view: (u64, u64, bool),
    }
    let cases = [
        Case { name: "the tail lost, no repair: only the file is shorter", appended: None, view: (1, 4, true) },
        Case {
            name: "repaired, then one longer record: fewer records, more bytes",
            appended: Some((&[&[7u8; 200]], b"")),
            view: (2, 2, false),
        },
        Case {
            name: "repaired, then three 1-byte records and an unacknowledged tail: as many records, \
                   fewer acknowledged bytes, a longer file",
            appended: Some((&[b"a", b"b", b"c"], b"half a frame, never acknowledged")),
            view: (4, 4, false),
        },
    ];
    for case in &cases {
        let dir = tempfile::tempdir().unwrap();
        let identity = log_with(dir.path(), 1, 4);
        let mut reader = Log::open_reader(dir.path(), identity).unwrap();
        assert_eq!(reader.end(0).unwrap(), 4, "{}", case.name);
        fault::lose_tail(dir.path(), 0, 1).unwrap();
        let mut expected = vec![b"r00".to_vec()];
        if let Some((payloads, unacknowledged)) = case.appended {
            Log::repair(dir.path(), identity, |_| {}).unwrap();
            let (mut writer, _) = Log::open_writer(dir.path(), identity).unwrap();
            writer.append_batch(0, &payloads.iter().map(|payload| payload.to_vec()).collect::<Vec<_>>()).unwrap();
            drop(writer);
            let mut file = fs::OpenOptions::new().append(true).open(path(dir.path(), 0, "log")).unwrap();
            std::io::Write::write_all(&mut file, unacknowledged).unwrap();
            expected.extend(payloads.iter().map(|payload| payload.to_vec()));
        }
        let view = reader.view(0).unwrap();
        assert_eq!((view.end, view.acked_end, view.damage.is_some()), case.view, "{}: {view:?}", case.name);
        let read: Vec<Vec<u8>> = (0..view.end).map(|offset| reader.read(0, offset).unwrap().payload).collect();
        assert_eq!(read, expected, "{}: the records read", case.name);
    }
}

#[test]
fn lose_tail_keeps_the_records_below_and_refuses_a_held_log_or_a_keep_past_the_end() {
    for keep in 0..=4 {
        let dir = tempfile::tempdir().unwrap();
        let identity = log_with(dir.path(), 1, 4);
        fault::lose_tail(dir.path(), 0, keep).unwrap();
        let mut reader = Log::open_reader(dir.path(), identity).unwrap();
        let view = reader.view(0).unwrap();
        assert_eq!((view.end, view.acked_end, view.damage.is_some()), (keep, 4, keep < 4), "keep {keep}");
        assert_eq!(fs::metadata(path(dir.path(), 0, "log")).unwrap().len(), HEADER + keep * FRAME3);
    }
    let dir = tempfile::tempdir().unwrap();
    let identity = log_with(dir.path(), 1, 2);
    let error = fault::lose_tail(dir.path(), 0, 3).expect_err("past the end");
    assert!(matches!(error, LogError::OffsetOutOfRange { offset: 3, end: 2, .. }), "{error}");
    let _writer = Log::open_writer(dir.path(), identity).unwrap();
    assert!(matches!(fault::lose_tail(dir.path(), 0, 1), Err(LogError::Locked { .. })));
}

/// One damage `repair` meets, what it must say it did (by kind, in order) and the end after.
struct RepairCase {
    name: &'static str,
    damage: fn(&Path),
    /// The actions in the log directory given, every `reason` empty (the reasons are checked
    /// to be there, not word for word).
    actions: fn(&Path) -> Vec<RepairAction>,
    /// Texts the journal (each action's line) must hold.
    says: &'static [&'static str],
    end: u64,
}

/// `action` with its `reason`, if it has one, emptied; whether it had a non-empty one.
fn without_reason(action: &RepairAction) -> (RepairAction, bool) {
    let mut action = action.clone();
    let had = match &mut action {
        RepairAction::LostAcknowledged { reason, .. }
        | RepairAction::RecordedGap { reason, .. }
        | RepairAction::CutUnknown { reason, .. }
        | RepairAction::RebuiltAck { reason, .. }
        | RepairAction::RecreatedStart { reason, .. }
        | RepairAction::RewroteHeader { reason, .. } => !std::mem::take(reason).is_empty(),
        RepairAction::RecreatedDirectory { .. }
        | RepairAction::RecreatedIdentity { .. }
        | RepairAction::RecreatedPartition { .. }
        | RepairAction::CutUnacknowledged { .. }
        | RepairAction::Adopted { .. }
        | RepairAction::MovedStart { .. } => true,
    };
    (action, had)
}

/// Each damage is made consistent and recorded in `repairs.log`, each action saying what it
/// removed (records, bytes, the start it moved): the writer then opens with no repair to make,
/// readers see no damage, appends continue at the end, and a second repair finds nothing and
/// writes nothing.
/// Partition 0 holds four 3-byte records (frames of 43 bytes after the 24-byte header).
#[test]
fn repair_makes_each_damage_consistent_and_says_what_it_removed() {
    use RepairAction::*;
    let cases = [
        RepairCase { name: "a healthy log", damage: |_| {}, actions: |_| vec![], says: &[], end: 4 },
        RepairCase {
            name: "a lost tail",
            damage: |dir| fault::lose_tail(dir, 0, 1).unwrap(),
            actions: |dir| {
                vec![LostAcknowledged {
                    path: path(dir, 0, "log"),
                    partition: 0,
                    offsets: 1..4,
                    cut_bytes: 0,
                    reason: String::new(),
                }]
            },
            says: &["lost acknowledged offsets 1..4", "0 byte(s) removed"],
            end: 1,
        },
        RepairCase {
            name: "an unacknowledged tail",
            damage: |dir| {
                let mut file = fs::OpenOptions::new().append(true).open(path(dir, 0, "log")).unwrap();
                std::io::Write::write_all(&mut file, b"half a frame").unwrap();
            },
            actions: |dir| {
                vec![CutUnacknowledged { path: path(dir, 0, "log"), partition: 0, kept_records: 4, cut_bytes: 12 }]
            },
            says: &["held 12 byte(s) past its acknowledged end 4"],
            end: 4,
        },
        RepairCase {
            name: "both acknowledgement slots unreadable, a torn tail",
            damage: |dir| {
                fs::write(path(dir, 0, "ack"), vec![0u8; 2 * SLOT_STRIDE]).unwrap();
                let log = path(dir, 0, "log");
                let len = fs::metadata(&log).unwrap().len();
                fs::OpenOptions::new().write(true).open(&log).unwrap().set_len(len - 1).unwrap();
            },
            actions: |dir| {
                vec![
                    CutUnknown {
                        path: path(dir, 0, "log"),
                        partition: 0,
                        kept_records: 3,
                        cut_bytes: FRAME3 - 1,
                        reason: String::new(),
                    },
                    RebuiltAck { path: path(dir, 0, "ack"), partition: 0, end: 3, reason: String::new() },
                ]
            },
            says: &["held 42 byte(s) past its intact records 0..3", "the intact records 0..3 are accepted"],
            end: 3,
        },
        RepairCase {
            name: "a start past the new end",
            damage: |dir| {
                let identity = Log::read_identity(dir).unwrap().unwrap();
                Log::open_writer(dir, identity).unwrap().0.retain_before(0, 3).unwrap();
                fault::lose_tail(dir, 0, 2).unwrap();
            },
            actions: |dir| {
                vec![
                    LostAcknowledged {
                        path: path(dir, 0, "log"),
                        partition: 0,
                        offsets: 2..4,
                        cut_bytes: 0,
                        reason: String::new(),
                    },
                    MovedStart { path: path(dir, 0, "start"), partition: 0, from: 3, to: 2 },
                ]
            },
            says: &["lost acknowledged offsets 2..4", "the start 3 is past the new end: moved back to 2"],
            end: 2,
        },
        RepairCase {
            name: "an identity file lost, with no records anywhere",
            damage: |dir| {
                fault::lose_tail(dir, 0, 0).unwrap();
                fs::remove_file(dir.join("identity")).unwrap();
            },
            actions: |dir| {
                vec![
                    RecreatedIdentity { path: dir.join("identity") },
                    LostAcknowledged {
                        path: path(dir, 0, "log"),
                        partition: 0,
                        offsets: 0..4,
                        cut_bytes: 0,
                        reason: String::new(),
                    },
                ]
            },
            says: &["the identity file was missing", "lost acknowledged offsets 0..4"],
            end: 0,
        },
        RepairCase {
            name: "a partition file lost that held records",
            damage: |dir| fs::remove_file(path(dir, 0, "log")).unwrap(),
            actions: |dir| vec![RecreatedPartition { path: path(dir, 0, "log"), partition: 0, lost: Some(0..4) }],
            says: &["partition-0.log was missing: made again, empty; acknowledged offsets 0..4 are lost"],
            end: 0,
        },
        RepairCase {
            name: "a partition file lost that held no record",
            damage: |dir| fs::remove_file(path(dir, 1, "log")).unwrap(),
            actions: |dir| vec![RecreatedPartition { path: path(dir, 1, "log"), partition: 1, lost: Some(0..0) }],
            says: &["partition-1.log was missing: made again, empty; it held no acknowledged record"],
            end: 4,
        },
        RepairCase {
            name: "a partition file lost with its acknowledgement record",
            damage: |dir| {
                fs::remove_file(path(dir, 1, "log")).unwrap();
                fs::remove_file(path(dir, 1, "ack")).unwrap();
            },
            actions: |dir| {
                vec![
                    RecreatedPartition { path: path(dir, 1, "log"), partition: 1, lost: None },
                    RebuiltAck { path: path(dir, 1, "ack"), partition: 1, end: 0, reason: String::new() },
                ]
            },
            says: &["how many acknowledged records it held is unknown", "the intact records 0..0 are accepted"],
            end: 4,
        },
        RepairCase {
            name: "a start file lost",
            damage: |dir| fs::remove_file(path(dir, 0, "start")).unwrap(),
            actions: |dir| {
                vec![RecreatedStart { path: path(dir, 0, "start"), partition: 0, start: 0, reason: String::new() }]
            },
            says: &["partition-0.start (missing) made again at offset 0"],
            end: 4,
        },
    ];
    for case in &cases {
        let dir = tempfile::tempdir().unwrap();
        let identity = log_with(dir.path(), 2, 4);
        (case.damage)(dir.path());
        let mut shown = Vec::new();
        let repaired = Log::repair(dir.path(), identity, |actions| shown = actions.to_vec()).unwrap();
        assert_eq!(shown, repaired.actions, "{}: what is shown before is what is done", case.name);
        let (actions, reasons): (Vec<RepairAction>, Vec<bool>) = repaired.actions.iter().map(without_reason).unzip();
        assert_eq!(actions, (case.actions)(dir.path()), "{}", case.name);
        assert!(reasons.iter().all(|&had| had), "{}: an action without its reason: {:?}", case.name, repaired.actions);
        assert!(repaired.actions.iter().all(|action| action.to_string().lines().count() == 1), "{}", case.name);
        // The journal kept with the log records every action, so the loss stays on record.
        let journal: String = repaired.actions.iter().map(|action| format!("{action}\n")).collect();
        let kept = fs::read_to_string(dir.path().join("repairs.log")).unwrap_or_default();
        assert_eq!(kept, journal, "{}: repairs.log", case.name);
        for text in case.says {
            assert!(journal.contains(text), "{}: the journal does not say '{text}':\n{journal}", case.name);
        }
        assert_eq!(repaired.ends, vec![case.end, 0], "{}", case.name);
        let (mut writer, repairs) = Log::open_writer(dir.path(), identity).unwrap();
        assert_eq!((repairs, writer.damaged(0).unwrap()), (vec![], false), "{}", case.name);
        assert_eq!(writer.append(0, b"new").unwrap(), case.end, "{}: appends continue at the end", case.name);
        drop(writer);
        // A repair with nothing to do changes nothing, not even an acknowledgement record
        // that already agrees with its file.
        let before = common::snapshot(dir.path());
        let again = Log::repair(dir.path(), identity, |_| {}).unwrap();
        assert_eq!(again.actions, Vec::<RepairAction>::new(), "{}: a second repair", case.name);
        assert_eq!(common::snapshot(dir.path()), before, "{}: a second repair", case.name);
    }
}

/// Repair refuses what it cannot tell is the store's log, and changes nothing.
#[test]
fn repair_refuses_another_log_or_records_without_an_identity() {
    let dir = tempfile::tempdir().unwrap();
    let identity = log_with(dir.path(), 1, 2);
    let other = LogIdentity { id: identity.id.wrapping_add(1), ..identity };
    let mut shown = false;
    let error = Log::repair(dir.path(), other, |_| shown = true).expect_err("another log");
    assert!(matches!(error, LogError::IdentityMismatch { .. }) && !shown, "{error}");
    fs::remove_file(dir.path().join("identity")).unwrap();
    let error = Log::repair(dir.path(), identity, |_| shown = true).expect_err("no identity, records");
    assert!(matches!(error, LogError::Unidentified { .. }) && !shown, "{error}");
    assert!(!dir.path().join("identity").exists());
}
