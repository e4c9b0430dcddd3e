//! The retained start of each partition, `partition-{N}.start`: its 8 bytes and their
//! crc32c, read back and replaced atomically. `Log::retain_before` moves it. `init` creates it
//! (start 0); a missing start file is refused, never read as 0, because reading it as 0 would
//! silently move the start back over records retention removed.

use super::durable::replace_file;
use super::error::{io_err, LogError};
use super::storage::Storage;
use std::io;
use std::path::Path;

/// A start file is the start offset and its checksum, nothing else.
const START_LEN: usize = 12;

/// What a start file holds: its offset, or why it cannot be read (`repair` tells them apart;
/// everyone else refuses both).
pub(super) enum StartFile {
    Valid(u64),
    Missing,
    Unreadable(LogError),
}

/// Reads a start file; a missing one is [`LogError::Missing`].
pub(super) fn read_start(storage: &Storage, path: &Path) -> Result<u64, LogError> {
    match inspect_start(storage, path)? {
        StartFile::Valid(start) => Ok(start),
        StartFile::Missing => Err(LogError::Missing { path: path.to_path_buf(), what: "the start file" }),
        StartFile::Unreadable(error) => Err(error),
    }
}

/// Reads a start file, telling a missing or damaged one apart from an I/O error.
pub(super) fn inspect_start(storage: &Storage, path: &Path) -> Result<StartFile, LogError> {
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
    if bytes.len() != START_LEN {
        return Ok(corrupt(0, bytes.len() as u64, "a start file holds exactly 12 bytes"));
    }
    let start = u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[0..8]) != crc {
        return Ok(corrupt(start, 8, "checksum mismatch"));
    }
    Ok(StartFile::Valid(start))
}

/// Replaces a start file atomically: a crash leaves either the old start or the new one.
pub(super) fn write_start(storage: &Storage, path: &Path, start: u64) -> Result<(), LogError> {
    let mut bytes = start.to_le_bytes().to_vec();
    bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
    let dir = path.parent().expect("a start file lives in the log directory");
    replace_file(storage, dir, path, &bytes)
}
