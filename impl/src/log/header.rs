//! The 24-byte header of every per-partition file (format version 3): which file kind it is,
//! and which log and partition it belongs to, checksummed. A leaf of `log` (with `error.rs`).
//!
//! Layout: `magic[8] | log id u64 LE | partition u32 LE | crc32c u32 LE of the 20 bytes
//! before it`. Partition files start with `ONCELOG3`, start files with `ONCESTA1`; the
//! acknowledgement record carries the same two fields inside each slot (`ack.rs`). Naming the
//! owner in the file is what lets every open refuse a file swapped in from another partition
//! or copied in from another log, which the file's own checksums cannot tell.

use super::error::LogError;
use std::path::Path;

/// The first bytes of every partition file of this format version.
pub(super) const MAGIC: &[u8; 8] = b"ONCELOG3";
/// The partition file's magic of format version 2, which `consumer repair --upgrade` converts.
pub(super) const MAGIC_V2: &[u8; 8] = b"ONCELOG2";
/// The first bytes of every start file of this format version (version 2 had no header).
pub(super) const START_MAGIC: &[u8; 8] = b"ONCESTA1";
/// Byte position of the first frame of a partition file (and of a start file's value).
pub(super) const HEADER_LEN: u64 = 24;
/// The bytes the header's checksum covers: magic, log id and partition.
const CHECKED_LEN: usize = 20;

/// The log and partition a file belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Owner {
    pub(super) log: u64,
    pub(super) partition: u32,
}

/// The header of a file of `owner`, starting with `magic`.
pub(super) fn encode_header(magic: &[u8; 8], owner: Owner) -> [u8; HEADER_LEN as usize] {
    let mut bytes = [0u8; HEADER_LEN as usize];
    bytes[..8].copy_from_slice(magic);
    bytes[8..16].copy_from_slice(&owner.log.to_le_bytes());
    bytes[16..20].copy_from_slice(&owner.partition.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..CHECKED_LEN]);
    bytes[CHECKED_LEN..].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Checks that `bytes` (a file's first bytes, up to [`HEADER_LEN`]) are the intact header of
/// a file of kind `magic` belonging to `owner`. `older` is the magic of the previous format
/// version, which the upgrade converts. In order: not this format at all is
/// [`LogError::BadHeader`]; the same magic with another version digit is
/// [`LogError::FormatVersion`]; a short header or a failing checksum is
/// [`LogError::DamagedHeader`]; an intact header of another owner is [`LogError::ForeignFile`].
pub(super) fn check_header_bytes(
    path: &Path,
    bytes: &[u8],
    magic: &'static [u8; 8],
    older: Option<&[u8; 8]>,
    owner: Owner,
) -> Result<(), LogError> {
    let found = &bytes[..bytes.len().min(8)];
    let damaged = |reason: String| LogError::DamagedHeader { path: path.to_path_buf(), reason };
    if found != magic && checks_out_under(bytes, magic) {
        // The rest of the header is ours, checksum and all: the magic is what got damaged (a
        // flipped version digit must not pass for a file of another version).
        return Err(damaged(format!("its magic reads \"{}\"", found.escape_ascii())));
    }
    if found != magic {
        return Err(wrong_magic(path, found, magic, older));
    }
    if bytes.len() < HEADER_LEN as usize {
        return Err(damaged(format!("the header is cut short: {} of its {HEADER_LEN} bytes", bytes.len())));
    }
    let crc = u32::from_le_bytes(bytes[CHECKED_LEN..HEADER_LEN as usize].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[..CHECKED_LEN]) != crc {
        return Err(damaged("the header's checksum does not match it".to_string()));
    }
    let log = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    let partition = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    check_owner(path, Owner { log, partition }, owner)
}

/// Whether `bytes` hold a whole header whose checksum matches it with `magic` in its place.
fn checks_out_under(bytes: &[u8], magic: &[u8; 8]) -> bool {
    let Some(header) = bytes.get(..HEADER_LEN as usize) else { return false };
    let mut checked = [0u8; CHECKED_LEN];
    checked[..8].copy_from_slice(magic);
    checked[8..].copy_from_slice(&header[8..CHECKED_LEN]);
    crc32c::crc32c(&checked).to_le_bytes() == header[CHECKED_LEN..]
}

/// Refuses a file whose intact header or record names `found`, when `expected` owns it.
pub(super) fn check_owner(path: &Path, found: Owner, expected: Owner) -> Result<(), LogError> {
    if found == expected {
        return Ok(());
    }
    Err(LogError::ForeignFile {
        path: path.to_path_buf(),
        found_log: found.log,
        found_partition: found.partition,
        expected_log: expected.log,
        expected_partition: expected.partition,
    })
}

/// The refusal of a file that does not start with `magic`: another version of it when only
/// the last byte, the version digit, differs.
fn wrong_magic(path: &Path, found: &[u8], magic: &'static [u8; 8], older: Option<&[u8; 8]>) -> LogError {
    let versioned = found.len() == 8 && found[..7] == magic[..7] && found[7].is_ascii_digit();
    if !versioned {
        return LogError::BadHeader { path: path.to_path_buf(), found: found.to_vec(), expected: magic };
    }
    let upgradable = older.is_some_and(|older| found == older);
    LogError::FormatVersion { path: path.to_path_buf(), found: found.to_vec(), reads: magic, upgradable }
}
