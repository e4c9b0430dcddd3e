//! The retained start of each partition, `partition-{N}.start`: its 8 bytes and their
//! crc32c, read back (missing means 0) and replaced atomically. `Log::retain_before` moves it.

use super::error::{io_err, LogError};
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// A start file is the start offset and its checksum, nothing else.
const START_LEN: usize = 12;

/// Reads a start file; a missing one means nothing was ever retained.
pub(super) fn read_start(path: &Path) -> Result<u64, LogError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_err(path)(e)),
    };
    let corrupt = |offset, position, reason: &str| LogError::Corrupt {
        path: path.to_path_buf(),
        offset,
        position,
        reason: reason.to_string(),
    };
    if bytes.len() != START_LEN {
        return Err(corrupt(0, bytes.len() as u64, "a start file holds exactly 12 bytes"));
    }
    let start = u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[0..8]) != crc {
        return Err(corrupt(start, 8, "checksum mismatch"));
    }
    Ok(start)
}

/// Replaces a start file atomically: a crash leaves either the old start or the new one.
pub(super) fn write_start(path: &Path, start: u64) -> Result<(), LogError> {
    let mut bytes = start.to_le_bytes().to_vec();
    bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
    let dir = path.parent().expect("a start file lives in the log directory");
    replace_file(dir, path, &bytes)
}

/// Writes `bytes` to a temp file, syncs it, renames it over `path` and syncs the directory,
/// so the rename itself survives a crash. New partition files are created this way too.
pub(super) fn replace_file(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), LogError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let file = File::create(&tmp).map_err(io_err(&tmp))?;
    file.write_all_at(bytes, 0).map_err(io_err(&tmp))?;
    file.sync_all().map_err(io_err(&tmp))?;
    fs::rename(&tmp, path).map_err(io_err(path))?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(dir))
}
