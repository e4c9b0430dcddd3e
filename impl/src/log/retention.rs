//! The retained start of each partition, `partition-{N}.start`: the 24-byte header naming its
//! log and partition (`ONCESTA1`, `header.rs`), then the start's 8 bytes and their crc32c (36
//! bytes in all), read back and replaced atomically. A 12-byte file is a start file of format
//! version 2 (the start and its crc32c, no header), refused with the upgrade's hint. `Log::retain_before` moves it. `init` creates it
//! (start 0); a missing start file is refused, never read as 0, because reading it as 0 would
//! silently move the start back over records retention removed.

use super::durable::replace_file;
use super::error::{io_err, LogError};
use super::header::{check_header_bytes, encode_header, Owner, HEADER_LEN, START_MAGIC};
use super::storage::Storage;
use std::io;
use std::path::Path;

/// A start file is its header, the start offset and its checksum, nothing else.
const START_LEN: usize = HEADER_LEN as usize + 12;
/// A start file of format version 2: the start offset and its checksum.
pub(super) const START_LEN_V2: usize = 12;

/// What a start file holds: its offset, or why it cannot be read (`repair` tells them apart;
/// everyone else refuses both).
pub(super) enum StartFile {
    Valid(u64),
    Missing,
    Unreadable(LogError),
}

/// Reads the start file of `owner`; a missing one is [`LogError::Missing`].
pub(super) fn read_start(storage: &Storage, path: &Path, owner: Owner) -> Result<u64, LogError> {
    match inspect_start(storage, path, owner)? {
        StartFile::Valid(start) => Ok(start),
        StartFile::Missing => Err(LogError::Missing { path: path.to_path_buf(), what: "the start file" }),
        StartFile::Unreadable(error) => Err(error),
    }
}

/// Reads the start file of `owner`, telling a missing or damaged one (its header included)
/// apart from an I/O error, a foreign file or one of format version 2, which are errors.
pub(super) fn inspect_start(storage: &Storage, path: &Path, owner: Owner) -> Result<StartFile, LogError> {
    let bytes = match storage.read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(StartFile::Missing),
        Err(e) => return Err(io_err(path)(e)),
    };
    let corrupt = |offset, position, reason: &str| {
        StartFile::Unreadable(LogError::Corrupt {
            path: path.to_path_buf(),
            offset,
            position,
            reason: reason.to_string(),
        })
    };
    if bytes.len() == START_LEN_V2 && decode_start_v2(&bytes).is_some() {
        let (found, reads) = (b"12 bytes, no header".to_vec(), START_MAGIC);
        return Err(LogError::FormatVersion { path: path.to_path_buf(), found, reads, upgradable: true });
    }
    let header = &bytes[..bytes.len().min(HEADER_LEN as usize)];
    match check_header_bytes(path, header, START_MAGIC, None, owner) {
        Ok(()) => {}
        Err(error @ (LogError::BadHeader { .. } | LogError::DamagedHeader { .. })) => {
            return Ok(StartFile::Unreadable(error))
        }
        Err(error) => return Err(error),
    }
    if bytes.len() != START_LEN {
        return Ok(corrupt(0, bytes.len() as u64, "a start file holds exactly 36 bytes"));
    }
    let start = u64::from_le_bytes(bytes[24..32].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(bytes[32..36].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[24..32]) != crc {
        return Ok(corrupt(start, 32, "checksum mismatch"));
    }
    Ok(StartFile::Valid(start))
}

/// The start a format-version-2 start file holds, if its checksum passes.
pub(super) fn decode_start_v2(bytes: &[u8]) -> Option<u64> {
    let start = u64::from_le_bytes(bytes.get(0..8)?.try_into().ok()?);
    let crc = u32::from_le_bytes(bytes.get(8..12)?.try_into().ok()?);
    (bytes.len() == START_LEN_V2 && crc32c::crc32c(&bytes[0..8]) == crc).then_some(start)
}

/// The bytes of the start file of `owner` holding `start`.
pub(super) fn start_bytes(owner: Owner, start: u64) -> Vec<u8> {
    let mut bytes = encode_header(START_MAGIC, owner).to_vec();
    bytes.extend_from_slice(&start.to_le_bytes());
    bytes.extend_from_slice(&crc32c::crc32c(&start.to_le_bytes()).to_le_bytes());
    bytes
}

/// Replaces the start file of `owner` atomically: a crash leaves either the old start or the
/// new one.
pub(super) fn write_start(storage: &Storage, path: &Path, owner: Owner, start: u64) -> Result<(), LogError> {
    let dir = path.parent().expect("a start file lives in the log directory");
    replace_file(storage, dir, path, &start_bytes(owner, start))
}
