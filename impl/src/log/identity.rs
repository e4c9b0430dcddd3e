//! The log's identity, `dir/identity`: a random 64-bit id and the partition count, written
//! once by `init` and recorded in the store's meta. Every open compares the store's record
//! with the file, so a store is never run against another log (a directory deleted and made
//! again, a copy of another data directory) or another partition count.
//!
//! Layout (24 bytes): `ONCELID2` | id u64 LE | partitions u32 LE | crc32c u32 LE of the 20
//! bytes before it. The file is created last by `init`, after every partition's files, so its
//! presence means a complete log. Its magic is the log's format version: `ONCELID2` a version-3
//! log (whose per-partition files name their log and partition), `ONCELID1` a version-2 log,
//! which `consumer repair --upgrade` converts (`upgrade.rs`). Replacing this file is that
//! upgrade's commit point, so a version-3 identity with files the upgrade wrote still beside
//! their originals (`*.upgrade`) is an interrupted upgrade, refused until it is finished.

use super::durable::replace_file;
use super::error::{io_err, LogError};
use super::storage::Storage;
use serde::Serialize;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The identity file's name in the log directory.
const FILE_NAME: &str = "identity";
pub(super) const MAGIC: &[u8; 8] = b"ONCELID2";
/// The identity file's magic in a log of format version 2.
pub(super) const MAGIC_V2: &[u8; 8] = b"ONCELID1";
const LEN: usize = 24;
/// What the upgrade appends to a file's name for the new version of that file.
pub(super) const UPGRADE_SUFFIX: &str = ".upgrade";
/// Where random ids come from (the kernel's CSPRNG; the crate targets Unix already).
const RANDOM_SOURCE: &str = "/dev/urandom";

/// Which log a directory holds: its random id and its partition count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct LogIdentity {
    pub id: u64,
    pub partitions: u32,
}

impl LogIdentity {
    /// A new identity with a random id, for a log about to be created.
    pub fn new_random(partitions: u32) -> Result<LogIdentity, LogError> {
        let path = Path::new(RANDOM_SOURCE);
        let mut bytes = [0u8; 8];
        File::open(path).and_then(|mut file| file.read_exact(&mut bytes)).map_err(io_err(path))?;
        Ok(LogIdentity { id: u64::from_le_bytes(bytes), partitions })
    }
}

impl fmt::Display for LogIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x} ({} partition(s))", self.id, self.partitions)
    }
}

/// The identity file of the log in `dir`.
pub(super) fn identity_path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Reads the identity file of `dir`; `None` when it does not exist.
pub(super) fn read_identity(storage: &Storage, dir: &Path) -> Result<Option<LogIdentity>, LogError> {
    let path = identity_path(dir);
    let bytes = match storage.read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(&path)(e)),
    };
    let corrupt =
        |reason: &str| LogError::Corrupt { path: path.clone(), offset: 0, position: 0, reason: reason.into() };
    // `ONCELID` and another version digit, its checksum intact (every version so far has the
    // same layout): a log of another version. With the checksum failing it is damage, which a
    // flipped version digit must not pass for.
    let intact = bytes.len() == LEN && crc32c::crc32c(&bytes[..20]).to_le_bytes() == bytes[20..24];
    if let Some(found) = bytes.get(..MAGIC.len()).filter(|found| found[..7] == MAGIC[..7] && found != MAGIC) {
        if !intact {
            return Err(corrupt("checksum mismatch (its version digit damaged, or the file)"));
        }
        let upgradable = found == MAGIC_V2;
        return Err(LogError::FormatVersion { path, found: found.to_vec(), reads: MAGIC, upgradable });
    }
    if bytes.len() != LEN || &bytes[..8] != MAGIC {
        return Err(corrupt("an identity file holds ONCELID2, an id, a partition count and their crc32c"));
    }
    let crc = u32::from_le_bytes(bytes[20..24].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[..20]) != crc {
        return Err(corrupt("checksum mismatch"));
    }
    let id = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    let partitions = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    if let Some(left) = upgrade_files(dir, partitions).into_iter().find(|path| storage.exists(path)) {
        return Err(LogError::UpgradeInterrupted { path: left });
    }
    Ok(Some(LogIdentity { id, partitions }))
}

/// The identity file's bytes, of the format version `magic` names.
pub(super) fn encode_identity(magic: &[u8; 8], identity: LogIdentity) -> Vec<u8> {
    let mut bytes = magic.to_vec();
    bytes.extend_from_slice(&identity.id.to_le_bytes());
    bytes.extend_from_slice(&identity.partitions.to_le_bytes());
    bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
    bytes
}

/// Writes the identity file of `dir` atomically and durably (file and directory synced).
pub(super) fn write_identity(storage: &Storage, dir: &Path, identity: LogIdentity) -> Result<(), LogError> {
    replace_file(storage, dir, &identity_path(dir), &encode_identity(MAGIC, identity))
}

/// `path` with the upgrade's suffix: where the upgrade writes the new version of that file.
pub(super) fn upgrade_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(UPGRADE_SUFFIX);
    PathBuf::from(name)
}

/// Every file an upgrade of a log of `partitions` partitions in `dir` may write, in order.
pub(super) fn upgrade_files(dir: &Path, partitions: u32) -> Vec<PathBuf> {
    let kinds = ["log", "ack", "start"];
    let files = (0..partitions).flat_map(|n| kinds.map(|kind| dir.join(format!("partition-{n}.{kind}"))));
    files.map(|path| upgrade_path(&path)).collect()
}

/// Checks that `dir` holds the log `expected` names: its identity file exists and carries the
/// same id and partition count.
pub(super) fn check_identity(storage: &Storage, dir: &Path, expected: LogIdentity) -> Result<(), LogError> {
    let Some(found) = read_identity(storage, dir)? else {
        return Err(LogError::Missing { path: identity_path(dir), what: "the log's identity file" });
    };
    check_matches(dir, found, expected)
}

/// Compares an identity read from `dir` with the expected one.
pub(super) fn check_matches(dir: &Path, found: LogIdentity, expected: LogIdentity) -> Result<(), LogError> {
    if found.id != expected.id {
        return Err(LogError::IdentityMismatch { path: dir.to_path_buf(), found: found.id, expected: expected.id });
    }
    if found.partitions != expected.partitions {
        let (found, expected) = (found.partitions, expected.partitions);
        return Err(LogError::PartitionCount { path: dir.to_path_buf(), found, expected });
    }
    Ok(())
}
