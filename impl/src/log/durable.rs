//! How the log's files and directories are made durably: a file replaced atomically (temp
//! file, fsync, rename, fsync of the directory) and directories created with an fsync of each
//! new directory's parent, so that neither a file nor a directory entry can vanish in a power
//! cut after the call returned. A leaf of `log` (with the storage layer).

use super::error::{io_err, LogError};
use super::storage::{OpenMode, Storage};
use std::io;
use std::path::{Path, PathBuf};

/// Writes `bytes` to a temp file, syncs it, renames it over `path` and syncs the directory,
/// so the rename itself survives a crash. Every file of the log is created this way.
pub(super) fn replace_file(storage: &Storage, dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), LogError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let file = storage.open(&tmp, OpenMode::Truncate).map_err(io_err(&tmp))?;
    file.write_all_at(bytes, 0).map_err(io_err(&tmp))?;
    file.sync_all().map_err(io_err(&tmp))?;
    storage.rename(&tmp, path).map_err(io_err(path))?;
    sync_dir(storage, dir)
}

/// Makes the entries of `dir` (files created, renamed or removed in it) durable.
pub(super) fn sync_dir(storage: &Storage, dir: &Path) -> Result<(), LogError> {
    storage.sync_dir(dir).map_err(io_err(dir))
}

/// Creates `path` and any missing parent, syncing the parent of each directory it creates
/// (a new directory's entry lives in its parent, which `mkdir` does not make durable).
pub fn create_dir_durably(path: &Path) -> Result<(), LogError> {
    create_dir_durably_on(&Storage::Real, path)
}

/// [`create_dir_durably`] on `storage`.
pub(super) fn create_dir_durably_on(storage: &Storage, path: &Path) -> Result<(), LogError> {
    let mut missing = Vec::new();
    let mut at = Some(path);
    while let Some(dir) = at.filter(|dir| !dir.as_os_str().is_empty() && !storage.exists(dir)) {
        missing.push(dir);
        at = dir.parent();
    }
    for dir in missing.into_iter().rev() {
        match storage.create_dir(dir) {
            Ok(()) => {}
            // Another process made it meanwhile: its parent still needs the sync.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(dir)(e)),
        }
        let parent = dir.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
        sync_dir(storage, parent)?;
    }
    Ok(())
}
