//! `consumer repair --upgrade`: converts a log of format version 2 (identity `ONCELID1`,
//! partition files `ONCELOG2`, acknowledgement slots `ONCEACK1`, 12-byte start files) to
//! version 3, whose per-partition files name their log and partition (`header.rs`) and whose
//! frames are the current `frame.rs` encoding.
//!
//! Crash-safe by one commit point per log directory. Every new file is first written beside
//! its original as `NAME.upgrade` and synced, then the directory is synced; the commit point is
//! the identity file replaced atomically by its version-3 form (`ONCELID2`); then each
//! `.upgrade` file is renamed over its original and the directory synced. A power cut before
//! the commit leaves the version-2 log as it was (a rerun writes every `.upgrade` file again);
//! after it, a version-3 identity with `.upgrade` files left is an interrupted upgrade, which
//! every open refuses (`identity.rs`) and a rerun finishes by renaming what is left.
//!
//! Only a clean partition is converted: its acknowledged bytes (by its version-2 slots) must
//! hold exactly the acknowledged records in whole batches. Bytes past the acknowledged length
//! were never acknowledged: they are dropped and reported. Anything else is refused as
//! [`LogError::Damaged`], naming the partition and the offset. Version-2 frames are parsed
//! here, by a private copy of their decoder, because `frame.rs` only speaks the current format.
//!
//! A replicated log is upgraded replica by replica (each replica a log directory of its own),
//! then its top-level identity. The transactional output log beside it is the caller's: it is
//! a log of its own identity (`consumer repair --upgrade` upgrades both).

use super::ack::{ack_file_bytes, SLOT_STRIDE};
use super::durable::{replace_file, sync_dir};
use super::error::{io_err, LogError};
use super::frame::{encode_frame, FrameMeta};
use super::header::{encode_header, Owner, MAGIC, MAGIC_V2};
use super::identity::{check_matches, encode_identity, identity_path, upgrade_path, LogIdentity};
use super::identity::{MAGIC as ID_MAGIC, MAGIC_V2 as ID_V2};
use super::lock_dir;
use super::partition::partition_path;
use super::producer::Producer;
use super::replication::{is_replicated, replica_dir};
use super::retention::{decode_start_v2, start_bytes};
use super::storage::{OpenMode, Storage};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// One thing the upgrade did, one line each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpgradeAction {
    /// A partition file rewritten in format version 3, holding the same records.
    RewroteData { path: PathBuf, partition: u32, records: u64, bytes: u64 },
    /// An acknowledgement record rewritten, acknowledging exactly the converted records.
    RewroteAck { path: PathBuf, partition: u32, end: u64, len: u64 },
    /// A start file rewritten, with the same start.
    RewroteStart { path: PathBuf, partition: u32, start: u64 },
    /// Bytes past a partition's acknowledged length (an append a crash interrupted, never
    /// acknowledged): not converted.
    DroppedUnacknowledged { path: PathBuf, partition: u32, bytes: u64 },
    /// The identity file rewritten as a version-3 log's: the commit point.
    RewroteIdentity { path: PathBuf },
    /// A `.upgrade` file of an upgrade interrupted after its commit point, moved over its
    /// original.
    Finished { path: PathBuf },
}

impl fmt::Display for UpgradeAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpgradeAction::RewroteData { path, partition, records, bytes } => write!(
                f,
                "partition {partition}: {} rewritten in format version 3: {records} record(s), {bytes} byte(s)",
                path.display()
            ),
            UpgradeAction::RewroteAck { path, partition, end, len } => write!(
                f,
                "partition {partition}: {} rewritten: acknowledges offsets 0..{end}, {len} byte(s)",
                path.display()
            ),
            UpgradeAction::RewroteStart { path, partition, start } => {
                write!(f, "partition {partition}: {} rewritten: start {start}", path.display())
            }
            UpgradeAction::DroppedUnacknowledged { path, partition, bytes } => write!(
                f,
                "partition {partition}: {} held {bytes} byte(s) past its acknowledged length (never \
                 acknowledged): not converted",
                path.display()
            ),
            UpgradeAction::RewroteIdentity { path } => {
                write!(f, "{} rewritten as ONCELID2: the log is format version 3", path.display())
            }
            UpgradeAction::Finished { path } => {
                write!(f, "{}: an interrupted upgrade's file moved over its original", path.display())
            }
        }
    }
}

/// What an upgrade did: its actions, the log directories it converted or finished, and those
/// that were of format version 3 already.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Upgraded {
    pub actions: Vec<UpgradeAction>,
    pub upgraded: Vec<PathBuf>,
    pub current: Vec<PathBuf>,
}

/// The log `expected` names in `dir`, plain or replicated, upgraded (see the module docs).
pub(super) fn upgrade(storage: &Storage, dir: &Path, expected: LogIdentity) -> Result<Upgraded, LogError> {
    let mut done = Upgraded::default();
    if !is_replicated(storage, dir) {
        upgrade_dir(storage, dir, expected, &mut done)?;
        return Ok(done);
    }
    let replicas = (0..).map(|broker| replica_dir(dir, broker)).take_while(|replica| storage.exists(replica));
    for replica in replicas.collect::<Vec<_>>() {
        upgrade_dir(storage, &replica, expected, &mut done)?;
    }
    // The top-level identity holds no partition file: its rewrite is its whole upgrade.
    match identity_version(storage, dir, expected)? {
        Version::Current => done.current.push(dir.to_path_buf()),
        Version::Previous => {
            commit(storage, dir, expected, &mut done)?;
            done.upgraded.push(dir.to_path_buf());
        }
    }
    Ok(done)
}

/// The commit point of a log directory's upgrade: its identity file replaced atomically by
/// the version-3 one.
fn commit(storage: &Storage, dir: &Path, expected: LogIdentity, done: &mut Upgraded) -> Result<(), LogError> {
    replace_file(storage, dir, &identity_path(dir), &encode_identity(ID_MAGIC, expected))?;
    done.actions.push(UpgradeAction::RewroteIdentity { path: identity_path(dir) });
    Ok(())
}

/// Which format version a log directory's identity file says.
enum Version {
    Current,
    Previous,
}

/// Upgrades one log directory holding partition files, or finishes its interrupted upgrade.
fn upgrade_dir(storage: &Storage, dir: &Path, expected: LogIdentity, done: &mut Upgraded) -> Result<(), LogError> {
    let _lock = lock_dir(storage, dir)?;
    let pairs = file_pairs(dir, expected.partitions);
    match identity_version(storage, dir, expected)? {
        Version::Current => {
            let left: Vec<(PathBuf, PathBuf)> = pairs.into_iter().filter(|(_, new)| storage.exists(new)).collect();
            if left.is_empty() {
                done.current.push(dir.to_path_buf());
                return Ok(());
            }
            move_over(storage, dir, &left, done)?;
        }
        Version::Previous => {
            convert_dir(storage, dir, expected, done)?;
            // Every `.upgrade` file exists now: the renames are the run's own, not reported.
            move_over(storage, dir, &pairs, &mut Upgraded::default())?;
        }
    }
    done.upgraded.push(dir.to_path_buf());
    Ok(())
}

/// Writes every partition's files in format version 3 beside their originals, syncs them and
/// the directory, then commits. Leftovers of a run interrupted before its commit point are
/// simply written again.
fn convert_dir(storage: &Storage, dir: &Path, expected: LogIdentity, done: &mut Upgraded) -> Result<(), LogError> {
    for number in 0..expected.partitions {
        let owner = Owner { log: expected.id, partition: number };
        for (path, bytes, action) in convert_partition(storage, dir, owner, done)? {
            write_synced(storage, &upgrade_path(&path), &bytes)?;
            done.actions.push(action);
        }
    }
    sync_dir(storage, dir)?;
    commit(storage, dir, expected, done)
}

/// Every (original, `.upgrade`) pair of files of a log of `partitions` partitions.
fn file_pairs(dir: &Path, partitions: u32) -> Vec<(PathBuf, PathBuf)> {
    let kinds = ["log", "ack", "start"];
    let paths = (0..partitions).flat_map(|n| kinds.map(|kind| partition_path(dir, n, kind)));
    paths.map(|path| (path.clone(), upgrade_path(&path))).collect()
}

/// Renames each `.upgrade` file over its original, then syncs the directory: after the commit
/// point, so a crash in between is finished by a rerun (each rename is of a complete file).
fn move_over(storage: &Storage, dir: &Path, pairs: &[(PathBuf, PathBuf)], done: &mut Upgraded) -> Result<(), LogError> {
    for (path, new) in pairs {
        storage.rename(new, path).map_err(io_err(path))?;
        done.actions.push(UpgradeAction::Finished { path: new.clone() });
    }
    sync_dir(storage, dir)
}

/// Writes a whole file (created or truncated) and syncs it.
fn write_synced(storage: &Storage, path: &Path, bytes: &[u8]) -> Result<(), LogError> {
    let file = storage.open(path, OpenMode::Truncate).map_err(io_err(path))?;
    file.write_all_at(bytes, 0).and_then(|()| file.sync_all()).map_err(io_err(path))
}

/// The identity file's version, checked against `expected`; anything but a valid identity of
/// version 2 or 3 is refused as `read_identity` refuses it.
fn identity_version(storage: &Storage, dir: &Path, expected: LogIdentity) -> Result<Version, LogError> {
    let path = identity_path(dir);
    let bytes = match storage.read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(LogError::Missing { path, what: "the log's identity file" })
        }
        Err(e) => return Err(io_err(&path)(e)),
    };
    let (version, found) = if let Some(found) = decode_identity(&bytes, ID_MAGIC) {
        (Version::Current, found)
    } else if let Some(found) = decode_identity(&bytes, ID_V2) {
        (Version::Previous, found)
    } else {
        let reason = "an identity file holds ONCELID1 or ONCELID2, an id, a partition count and their crc32c";
        return Err(LogError::Corrupt { path, offset: 0, position: 0, reason: reason.into() });
    };
    check_matches(dir, found, expected)?;
    Ok(version)
}

/// The identity in `bytes` if they are a valid identity file starting with `magic`.
fn decode_identity(bytes: &[u8], magic: &[u8; 8]) -> Option<LogIdentity> {
    let id = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?);
    let partitions = u32::from_le_bytes(bytes.get(16..20)?.try_into().ok()?);
    let identity = LogIdentity { id, partitions };
    (bytes == encode_identity(magic, identity)).then_some(identity)
}

/// The new bytes of one partition's three files, with the action each is reported as.
fn convert_partition(
    storage: &Storage,
    dir: &Path,
    owner: Owner,
    done: &mut Upgraded,
) -> Result<Vec<(PathBuf, Vec<u8>, UpgradeAction)>, LogError> {
    let partition = owner.partition;
    let [log_path, ack_path, start_path] = ["log", "ack", "start"].map(|kind| partition_path(dir, partition, kind));
    let ack = read_ack_v2(storage, &ack_path)?;
    let data = read_file(storage, &log_path, "the partition file")?;
    let start = read_file(storage, &start_path, "the start file")?;
    let Some(start) = decode_start_v2(&start) else {
        let reason = "a version-2 start file holds 8 bytes and their crc32c".to_string();
        return Err(LogError::Corrupt { path: start_path, offset: 0, position: 0, reason });
    };
    let mut frames = encode_header(MAGIC, owner).to_vec();
    convert_frames(&data, ack, &mut frames).map_err(|(offset, position, reason)| LogError::Damaged {
        path: log_path.clone(),
        partition,
        offset,
        end: ack.end,
        position,
        acked_end: ack.end,
        intact_after: 0,
        reason,
    })?;
    let dropped = data.len() as u64 - ack.len;
    if dropped > 0 {
        let path = log_path.clone();
        done.actions.push(UpgradeAction::DroppedUnacknowledged { path, partition, bytes: dropped });
    }
    let (records, bytes) = (ack.end, frames.len() as u64);
    let (ack_bytes, _) = ack_file_bytes(owner, 0, ack.end, bytes);
    Ok(vec![
        (log_path.clone(), frames, UpgradeAction::RewroteData { path: log_path, partition, records, bytes }),
        (
            ack_path.clone(),
            ack_bytes,
            UpgradeAction::RewroteAck { path: ack_path, partition, end: records, len: bytes },
        ),
        (
            start_path.clone(),
            start_bytes(owner, start),
            UpgradeAction::RewroteStart { path: start_path, partition, start },
        ),
    ])
}

/// A whole file; a missing one is refused as [`LogError::Missing`].
fn read_file(storage: &Storage, path: &Path, what: &'static str) -> Result<Vec<u8>, LogError> {
    match storage.read(path) {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(LogError::Missing { path: path.to_path_buf(), what }),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// A version-2 acknowledged state: records `0..end` in the file's first `len` bytes.
#[derive(Clone, Copy, Debug)]
struct AckV2 {
    generation: u64,
    end: u64,
    len: u64,
}

/// A version-2 slot's bytes: `ONCEACK1`, generation, end, length, crc32c of the 32 before.
const ACK_V2_LEN: usize = 36;
const ACK_V2_MAGIC: &[u8; 8] = b"ONCEACK1";

/// The newest valid slot of a version-2 acknowledgement file.
fn read_ack_v2(storage: &Storage, path: &Path) -> Result<AckV2, LogError> {
    let bytes = read_file(storage, path, "the acknowledgement record")?;
    let slot = |slot: u64| {
        let at = (slot * SLOT_STRIDE) as usize;
        let record = bytes.get(at..at + ACK_V2_LEN)?;
        let u64_at = |at: usize| u64::from_le_bytes(record[at..at + 8].try_into().expect("8 bytes"));
        let crc = u32::from_le_bytes(record[32..36].try_into().expect("4 bytes"));
        let valid = &record[..8] == ACK_V2_MAGIC && crc32c::crc32c(&record[..32]) == crc;
        let ack = AckV2 { generation: u64_at(8), end: u64_at(16), len: u64_at(24) };
        (valid && ack.generation % 2 == slot).then_some(ack)
    };
    let newest = [slot(0), slot(1)].into_iter().flatten().max_by_key(|ack| ack.generation);
    newest.ok_or_else(|| LogError::Corrupt {
        path: path.to_path_buf(),
        offset: 0,
        position: 0,
        reason: "neither slot of the version-2 acknowledgement record is valid".into(),
    })
}

/// Bytes before a version-2 frame's payload: crc32c, length, offset, producer, epoch,
/// sequence, batch length.
const FRAME_V2_HEAD: usize = 36;

/// One version-2 frame.
struct FrameV2<'a> {
    offset: u64,
    producer: u64,
    epoch: u32,
    sequence: u32,
    batch_len: u32,
    payload: &'a [u8],
}

/// The valid version-2 frame at `pos` of `bytes` and where the next one starts.
fn parse_frame_v2(bytes: &[u8], pos: usize) -> Result<(FrameV2<'_>, usize), &'static str> {
    let rest = &bytes[pos..];
    let head = rest.get(..FRAME_V2_HEAD).ok_or("the frame runs past the acknowledged bytes")?;
    let u32_at = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().expect("8 bytes"));
    let len = u32_at(4) as usize;
    let checked = rest.get(4..FRAME_V2_HEAD + len).ok_or("the frame runs past the acknowledged bytes")?;
    if crc32c::crc32c(checked) != u32_at(0) {
        return Err("checksum mismatch");
    }
    let payload = &rest[FRAME_V2_HEAD..FRAME_V2_HEAD + len];
    let (producer, epoch, sequence, batch_len) = (u64_at(16), u32_at(24), u32_at(28), u32_at(32));
    Ok((FrameV2 { offset: u64_at(8), producer, epoch, sequence, batch_len, payload }, pos + FRAME_V2_HEAD + len))
}

/// Converts the acknowledged frames of a version-2 partition file (`data`, header included)
/// into current frames appended to `out`. They must be exactly `ack.end` records in whole
/// batches ending at byte `ack.len`; else the offset, byte and reason of the first damage.
fn convert_frames(data: &[u8], ack: AckV2, out: &mut Vec<u8>) -> Result<(), (u64, u64, String)> {
    if data.get(..8) != Some(MAGIC_V2.as_slice()) {
        return Err((0, 0, format!("the file does not start with {}", MAGIC_V2.escape_ascii())));
    }
    let acked = usize::try_from(ack.len).ok().filter(|&len| len <= data.len() && len >= 8);
    let Some(acked) = acked else {
        return Err((0, 0, format!("the file has {} of the {} acknowledged bytes", data.len(), ack.len)));
    };
    let bytes = &data[..acked];
    let (mut pos, mut offset, mut batch_start) = (8, 0u64, (0u64, 8usize));
    // The first frame of the batch being read and the index of the next record in it.
    let mut open: Option<(FrameV2<'_>, u32)> = None;
    while pos < bytes.len() {
        let damage =
            |why: String| (batch_start.0, batch_start.1 as u64, format!("record {offset} at byte {pos}: {why}"));
        let (frame, next) = parse_frame_v2(bytes, pos).map_err(|why| damage(why.to_string()))?;
        if frame.offset != offset {
            return Err(damage(format!("the frame there carries offset {}", frame.offset)));
        }
        let index = match &open {
            None if frame.batch_len == 0 => return Err(damage("the frame there claims a batch of 0 records".into())),
            None => 0,
            Some((first, seen)) if continues(first, *seen, &frame) => *seen,
            Some(_) => return Err(damage("the frame there does not continue its batch".into())),
        };
        let base_sequence = frame.sequence.wrapping_sub(index);
        let producer =
            (frame.producer != 0).then_some((Producer { id: frame.producer, epoch: frame.epoch }, base_sequence));
        encode_frame(offset, FrameMeta::of(producer, index, frame.batch_len), frame.payload, out);
        let batch_len = frame.batch_len;
        (pos, offset) = (next, offset + 1);
        open = match open {
            _ if index + 1 == batch_len => {
                batch_start = (offset, pos);
                None
            }
            None => Some((frame, 1)),
            Some((first, seen)) => Some((first, seen + 1)),
        };
    }
    if open.is_some() || offset != ack.end {
        let reason = format!(
            "the acknowledged bytes hold {offset} record(s) (whole batches: {}), not {}",
            batch_start.0, ack.end
        );
        return Err((batch_start.0, batch_start.1 as u64, reason));
    }
    Ok(())
}

/// Whether `frame` is record `seen` of the batch `first` began.
fn continues(first: &FrameV2<'_>, seen: u32, frame: &FrameV2<'_>) -> bool {
    frame.producer == first.producer
        && frame.epoch == first.epoch
        && frame.batch_len == first.batch_len
        && frame.sequence == first.sequence.wrapping_add(seen)
}

/// One batch of a version-2 log written by [`write_v2_log_for_tests`].
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct V2Batch {
    /// The idempotent producer and base sequence, or `None` for a plain append.
    pub producer: Option<(Producer, u32)>,
    pub payloads: Vec<Vec<u8>>,
}

/// One partition of a version-2 log written by [`write_v2_log_for_tests`].
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct V2Partition {
    pub batches: Vec<V2Batch>,
    pub start: u64,
    /// Bytes written after the acknowledged frames, never acknowledged.
    pub unacknowledged: Vec<u8>,
}

/// Test only: writes, durably, the exact files a version-2 build wrote for a log `identity`
/// names holding `partitions`, so the upgrade is tested against the old bytes.
#[doc(hidden)]
pub fn write_v2_log_for_tests(
    storage: &Storage,
    dir: &Path,
    identity: LogIdentity,
    partitions: &[V2Partition],
) -> Result<(), LogError> {
    assert_eq!(partitions.len(), identity.partitions as usize, "one V2Partition per partition");
    super::durable::create_dir_durably_on(storage, dir)?;
    for (number, part) in (0..).zip(partitions) {
        let mut data = MAGIC_V2.to_vec();
        let mut offset = 0u64;
        for batch in &part.batches {
            let count = batch.payloads.len() as u32;
            for (index, payload) in (0..count).zip(&batch.payloads) {
                encode_frame_v2(offset, batch.producer, index, count, payload, &mut data);
                offset += 1;
            }
        }
        let acked_len = data.len() as u64;
        data.extend_from_slice(&part.unacknowledged);
        replace_file(storage, dir, &partition_path(dir, number, "log"), &data)?;
        let mut ack = vec![0u8; 2 * SLOT_STRIDE as usize];
        for generation in [1u64, 2] {
            let mut record = ACK_V2_MAGIC.to_vec();
            [generation, offset, acked_len].iter().for_each(|v| record.extend_from_slice(&v.to_le_bytes()));
            record.extend_from_slice(&crc32c::crc32c(&record).to_le_bytes());
            let at = (generation % 2 * SLOT_STRIDE) as usize;
            ack[at..at + ACK_V2_LEN].copy_from_slice(&record);
        }
        replace_file(storage, dir, &partition_path(dir, number, "ack"), &ack)?;
        let mut start = part.start.to_le_bytes().to_vec();
        start.extend_from_slice(&crc32c::crc32c(&start).to_le_bytes());
        replace_file(storage, dir, &partition_path(dir, number, "start"), &start)?;
    }
    replace_file(storage, dir, &identity_path(dir), &encode_identity(ID_V2, identity))
}

/// A version-2 frame, as the version-2 `frame.rs` encoded it.
fn encode_frame_v2(
    offset: u64,
    producer: Option<(Producer, u32)>,
    index: u32,
    count: u32,
    payload: &[u8],
    out: &mut Vec<u8>,
) {
    let (producer, base) = producer.unwrap_or((Producer { id: 0, epoch: 0 }, 0));
    let mut checked = (payload.len() as u32).to_le_bytes().to_vec();
    checked.extend_from_slice(&offset.to_le_bytes());
    checked.extend_from_slice(&producer.id.to_le_bytes());
    checked.extend_from_slice(&producer.epoch.to_le_bytes());
    checked.extend_from_slice(&base.wrapping_add(index).to_le_bytes());
    checked.extend_from_slice(&count.to_le_bytes());
    checked.extend_from_slice(payload);
    out.extend_from_slice(&crc32c::crc32c(&checked).to_le_bytes());
    out.extend_from_slice(&checked);
}
