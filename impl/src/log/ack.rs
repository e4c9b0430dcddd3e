//! The acknowledgement record of a partition, `partition-{N}.ack`: the end offset and byte
//! length of the partition file as of the last acknowledged append, made durable before the
//! append returns. It is what tells "acknowledged records lost" (a frame below the length is
//! missing or fails its checksum) from "an append a crash interrupted" (bytes past it).
//!
//! Layout: a preallocated 8 KiB file of two slots, slot `k` at byte `k * 4096`, each
//! `ONCEACK2` | log id u64 | partition u32 | generation u64 | end u64 | length u64 | crc32c u32
//! of the 44 bytes before it (all LE; 48 bytes). A valid slot naming another log or partition
//! is [`LogError::ForeignFile`]: an acknowledgement record swapped or copied in from elsewhere
//! would otherwise vouch for another file's records. A valid `ONCEACK1` slot (format version 2,
//! without the owner) is [`LogError::FormatVersion`]. Generation `g` is written to slot `g % 2`, in place (`pwrite` within allocated
//! blocks, then `fdatasync`: no metadata changes), so a torn slot write leaves the other slot,
//! the previous acknowledged state, valid; readers take the valid slot of the highest
//! generation. Each slot has a 4 KiB block of its own, so one torn sector cannot reach both.

use super::durable::replace_file;
use super::error::{io_err, LogError};
use super::header::{check_owner, Owner};
use super::storage::{OpenMode, Storage, StorageFile};
use std::io;
use std::path::Path;

const MAGIC: &[u8; 8] = b"ONCEACK2";
/// A slot's magic in format version 2 (`upgrade.rs` reads those slots itself).
const MAGIC_V2: &[u8; 8] = b"ONCEACK1";
/// Bytes of one slot's record.
const RECORD_LEN: usize = 48;
/// The bytes the slot's checksum covers.
const CHECKED_LEN: usize = RECORD_LEN - 4;
/// Each slot starts a block of its own (`upgrade.rs` reads version-2 slots there too).
pub(super) const SLOT_STRIDE: u64 = 4096;
/// The file's preallocated length: two slots.
const FILE_LEN: usize = 2 * SLOT_STRIDE as usize;

/// One acknowledged state of a partition file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ack {
    /// Written to slot `generation % 2`; the highest valid one wins.
    pub(super) generation: u64,
    /// Records acknowledged: offsets `0..end`.
    pub(super) end: u64,
    /// Bytes of the partition file those records end at (header included).
    pub(super) len: u64,
}

/// What an acknowledgement file holds: the newest valid slot, or why there is none (`repair`
/// tells them apart; everyone else refuses both).
pub(super) enum AckFile {
    Valid(Ack),
    Missing,
    Unreadable(LogError),
}

fn encode(owner: Owner, ack: Ack) -> [u8; RECORD_LEN] {
    let mut bytes = [0u8; RECORD_LEN];
    bytes[..8].copy_from_slice(MAGIC);
    bytes[8..16].copy_from_slice(&owner.log.to_le_bytes());
    bytes[16..20].copy_from_slice(&owner.partition.to_le_bytes());
    bytes[20..28].copy_from_slice(&ack.generation.to_le_bytes());
    bytes[28..36].copy_from_slice(&ack.end.to_le_bytes());
    bytes[36..44].copy_from_slice(&ack.len.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..CHECKED_LEN]);
    bytes[CHECKED_LEN..].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// The record in `bytes` if it is valid and belongs in `slot`; a valid record of another
/// owner, or of format version 2, is refused.
fn decode(bytes: &[u8; RECORD_LEN], slot: u64, path: &Path, owner: Owner) -> Result<Option<Ack>, LogError> {
    if let Some(found) = version_2_slot(bytes) {
        return Err(LogError::FormatVersion { path: path.to_path_buf(), found, reads: MAGIC, upgradable: true });
    }
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(bytes[CHECKED_LEN..].try_into().expect("4 bytes"));
    if &bytes[..8] != MAGIC || crc32c::crc32c(&bytes[..CHECKED_LEN]) != crc {
        return Ok(None);
    }
    let partition = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    check_owner(path, Owner { log: u64_at(8), partition }, owner)?;
    let ack = Ack { generation: u64_at(20), end: u64_at(28), len: u64_at(36) };
    Ok((ack.generation % 2 == slot).then_some(ack))
}

/// The magic of a valid format-version-2 slot (`ONCEACK1`, 32 bytes and their crc32c).
fn version_2_slot(bytes: &[u8; RECORD_LEN]) -> Option<Vec<u8>> {
    let crc = u32::from_le_bytes(bytes[32..36].try_into().expect("4 bytes"));
    (&bytes[..8] == MAGIC_V2 && crc32c::crc32c(&bytes[..32]) == crc).then(|| MAGIC_V2.to_vec())
}

/// The newest valid slot of an open acknowledgement file of `owner`.
pub(super) fn read_ack(file: &StorageFile, path: &Path, owner: Owner) -> Result<Ack, LogError> {
    let mut newest: Option<Ack> = None;
    for slot in 0..2 {
        let mut bytes = [0u8; RECORD_LEN];
        match file.read_exact_at(&mut bytes, slot * SLOT_STRIDE) {
            Ok(()) => {}
            // A short file leaves this slot unreadable; the other may still hold a record.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => continue,
            Err(e) => return Err(io_err(path)(e)),
        }
        if let Some(ack) = decode(&bytes, slot, path, owner)? {
            newest = Some(newest.map_or(ack, |other| if ack.generation > other.generation { ack } else { other }));
        }
    }
    newest.ok_or_else(|| LogError::Corrupt {
        path: path.to_path_buf(),
        offset: 0,
        position: 0,
        reason: "neither slot of the acknowledgement record is valid".into(),
    })
}

/// Opens an acknowledgement file (for writing too when `write`); missing is `Missing`.
pub(super) fn open_ack(storage: &Storage, path: &Path, write: bool) -> Result<StorageFile, LogError> {
    let mode = if write { OpenMode::ReadWrite } else { OpenMode::Read };
    match storage.open(path, mode) {
        Ok(file) => Ok(file),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(LogError::Missing { path: path.to_path_buf(), what: "the acknowledgement record" })
        }
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Reads the acknowledgement file at `path` of `owner`, telling a missing or unreadable one
/// apart (a foreign or version-2 one is an error).
pub(super) fn inspect_ack(storage: &Storage, path: &Path, owner: Owner) -> Result<AckFile, LogError> {
    let file = match open_ack(storage, path, false) {
        Ok(file) => file,
        Err(LogError::Missing { .. }) => return Ok(AckFile::Missing),
        Err(error) => return Err(error),
    };
    match read_ack(&file, path, owner) {
        Ok(ack) => Ok(AckFile::Valid(ack)),
        Err(error @ LogError::Corrupt { .. }) => Ok(AckFile::Unreadable(error)),
        Err(error) => Err(error),
    }
}

/// Writes `ack` into its slot of the open file of `owner` and `fdatasync`s it: once this
/// returns, the acknowledged state survives a power cut.
pub(super) fn write_ack(file: &StorageFile, path: &Path, owner: Owner, ack: Ack) -> Result<(), LogError> {
    let slot = ack.generation % 2;
    file.write_all_at(&encode(owner, ack), slot * SLOT_STRIDE).and_then(|()| file.sync_data()).map_err(io_err(path))
}

/// The preallocated file of `owner` with both slots describing the same state, at generations
/// `after + 1` and `after + 2`, and the newer record.
pub(super) fn ack_file_bytes(owner: Owner, after: u64, end: u64, len: u64) -> (Vec<u8>, Ack) {
    let mut bytes = vec![0u8; FILE_LEN];
    let mut newest = Ack { generation: after, end, len };
    for generation in [after + 1, after + 2] {
        newest = Ack { generation, end, len };
        let at = (generation % 2 * SLOT_STRIDE) as usize;
        bytes[at..at + RECORD_LEN].copy_from_slice(&encode(owner, newest));
    }
    (bytes, newest)
}

/// Creates (or replaces, atomically) the file [`ack_file_bytes`] describes; returns the newer
/// record.
pub(super) fn create_ack_file(
    storage: &Storage,
    path: &Path,
    owner: Owner,
    after: u64,
    end: u64,
    len: u64,
) -> Result<Ack, LogError> {
    let (bytes, newest) = ack_file_bytes(owner, after, end, len);
    let dir = path.parent().expect("an acknowledgement file lives in the log directory");
    replace_file(storage, dir, path, &bytes)?;
    Ok(newest)
}

/// Test only (the power-cut runs' damage classes): where the newest valid slot's record lies in
/// an acknowledgement file, and its magic, so a test damages exactly those bytes whatever the
/// layout of this format version.
#[doc(hidden)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckSlotRange {
    pub slot: u64,
    pub generation: u64,
    /// The slot's whole record (magic, fields and checksum), in bytes of the file.
    pub record: std::ops::Range<u64>,
    /// The record's magic, a prefix of `record`.
    pub magic: std::ops::Range<u64>,
}

/// The [`AckSlotRange`] of the newest valid slot of the open file (as `read_ack` finds it).
pub(super) fn newest_slot_range(file: &StorageFile, path: &Path, owner: Owner) -> Result<AckSlotRange, LogError> {
    let ack = read_ack(file, path, owner)?;
    let slot = ack.generation % 2;
    let at = slot * SLOT_STRIDE;
    let (record, magic) = (at..at + RECORD_LEN as u64, at..at + MAGIC.len() as u64);
    Ok(AckSlotRange { slot, generation: ack.generation, record, magic })
}
