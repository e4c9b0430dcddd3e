//! The log's storage layer: every file operation the log makes (open or create, write at an
//! offset, read, length, `set_len`, `sync_data`/`sync_all`, rename, directory creation and
//! directory fsync, the writer lock) goes through [`Storage`].
//!
//! [`Storage::Real`], the default, is `std::fs`: each arm below is the call the log made before
//! this layer existed, with the same flags, so the real path costs one branch per syscall.
//! [`Storage::Simulated`] is the test-only [`SimDisk`] (`simdisk.rs`), which keeps unsynced
//! bytes and directory entries apart so that a power cut can lose, keep or garble them.
//!
//! An enum rather than a trait object: two implementations, nothing boxed, every operation a
//! two-armed match the compiler checks. Imports only `simdisk.rs` (and `OpenMode` from it).

pub(super) use super::simdisk::OpenMode;
use super::simdisk::{SimDisk, SimFile, SimLock};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Where the log's files live: the real file system, or a simulated disk (tests, `consumer
/// power-cuts`).
#[derive(Clone, Debug, Default)]
pub enum Storage {
    #[default]
    Real,
    Simulated(SimDisk),
}

/// An open file of either storage.
pub(super) enum StorageFile {
    Real(File),
    Simulated(SimFile),
}

/// The held single-writer lock; dropping it releases the lock.
pub(super) enum DirLock {
    /// The lock lives exactly as long as this open file.
    Real(#[allow(dead_code)] File),
    Simulated(#[allow(dead_code)] SimLock),
}

impl Storage {
    pub(super) fn open(&self, path: &Path, mode: OpenMode) -> io::Result<StorageFile> {
        match self {
            Storage::Real => open_real(path, mode).map(StorageFile::Real),
            Storage::Simulated(disk) => disk.open(path, mode).map(StorageFile::Simulated),
        }
    }

    /// The whole content of the file at `path` (`fs::read`).
    pub(super) fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        match self {
            Storage::Real => fs::read(path),
            Storage::Simulated(disk) => disk.read(path),
        }
    }

    pub(super) fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        match self {
            Storage::Real => fs::rename(from, to),
            Storage::Simulated(disk) => disk.rename(from, to),
        }
    }

    /// The length of the file at `path` (`fs::metadata`).
    pub(super) fn len(&self, path: &Path) -> io::Result<u64> {
        match self {
            Storage::Real => fs::metadata(path).map(|metadata| metadata.len()),
            Storage::Simulated(disk) => disk.len(path),
        }
    }

    /// Whether a file or directory exists at `path` (`Path::exists`).
    pub(super) fn exists(&self, path: &Path) -> bool {
        match self {
            Storage::Real => path.exists(),
            Storage::Simulated(disk) => disk.exists(path),
        }
    }

    pub(super) fn create_dir(&self, path: &Path) -> io::Result<()> {
        match self {
            Storage::Real => fs::create_dir(path),
            Storage::Simulated(disk) => disk.create_dir(path),
        }
    }

    /// Makes the entries of the directory `path` durable (`fsync` of the directory).
    pub(super) fn sync_dir(&self, path: &Path) -> io::Result<()> {
        match self {
            Storage::Real => File::open(path).and_then(|dir| dir.sync_all()),
            Storage::Simulated(disk) => disk.sync_dir(path),
        }
    }

    /// Creates the lock file at `path` if missing and locks it exclusively; `None` when another
    /// holder has it.
    pub(super) fn try_lock(&self, path: &Path) -> io::Result<Option<DirLock>> {
        match self {
            Storage::Real => {
                let file = open_real(path, OpenMode::Keep)?;
                match file.try_lock() {
                    Ok(()) => Ok(Some(DirLock::Real(file))),
                    Err(fs::TryLockError::WouldBlock) => Ok(None),
                    Err(fs::TryLockError::Error(e)) => Err(e),
                }
            }
            Storage::Simulated(disk) => Ok(disk.try_lock(path)?.map(DirLock::Simulated)),
        }
    }
}

fn open_real(path: &Path, mode: OpenMode) -> io::Result<File> {
    let mut options = OpenOptions::new();
    match mode {
        OpenMode::Read => options.read(true),
        OpenMode::Write => options.write(true),
        OpenMode::ReadWrite => options.read(true).write(true),
        OpenMode::Truncate => return File::create(path),
        OpenMode::Append => options.create(true).append(true),
        OpenMode::Keep => options.create(true).truncate(false).write(true),
    };
    options.open(path)
}

impl StorageFile {
    pub(super) fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        match self {
            StorageFile::Real(file) => file.read_at(buf, offset),
            StorageFile::Simulated(file) => file.read_at(buf, offset),
        }
    }

    pub(super) fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match self {
            StorageFile::Real(file) => file.read_exact_at(buf, offset),
            StorageFile::Simulated(file) => file.read_exact_at(buf, offset),
        }
    }

    /// The bytes from `from` up to `to`, or to the end of the file if that comes first.
    pub(super) fn read_range(&self, from: u64, to: u64) -> io::Result<Vec<u8>> {
        match self {
            StorageFile::Real(file) => {
                let (mut file, mut bytes): (&File, _) = (file, Vec::new());
                file.seek(SeekFrom::Start(from))?;
                file.take(to.saturating_sub(from)).read_to_end(&mut bytes)?;
                Ok(bytes)
            }
            StorageFile::Simulated(file) => file.read_range(from, to),
        }
    }

    pub(super) fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        match self {
            StorageFile::Real(file) => file.write_all_at(bytes, offset),
            StorageFile::Simulated(file) => file.write_all_at(bytes, offset),
        }
    }

    /// Writes `bytes` at the end of a file opened with [`OpenMode::Append`].
    pub(super) fn append(&self, bytes: &[u8]) -> io::Result<()> {
        match self {
            StorageFile::Real(file) => {
                let mut file: &File = file;
                file.write_all(bytes)
            }
            StorageFile::Simulated(file) => file.append(bytes),
        }
    }

    pub(super) fn len(&self) -> io::Result<u64> {
        match self {
            StorageFile::Real(file) => file.metadata().map(|metadata| metadata.len()),
            StorageFile::Simulated(file) => file.len(),
        }
    }

    pub(super) fn set_len(&self, len: u64) -> io::Result<()> {
        match self {
            StorageFile::Real(file) => file.set_len(len),
            StorageFile::Simulated(file) => file.set_len(len),
        }
    }

    /// `fdatasync`: the file's data, and its length, survive a power cut once this returns.
    pub(super) fn sync_data(&self) -> io::Result<()> {
        match self {
            StorageFile::Real(file) => file.sync_data(),
            StorageFile::Simulated(file) => file.sync(),
        }
    }

    /// `fsync`: as `sync_data`, with every other metadata of the file.
    pub(super) fn sync_all(&self) -> io::Result<()> {
        match self {
            StorageFile::Real(file) => file.sync_all(),
            StorageFile::Simulated(file) => file.sync(),
        }
    }
}
