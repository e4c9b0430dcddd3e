//! `LogError`: every way a log operation fails, each naming the file or partition concerned.

use super::frame::records;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Every way a log operation fails; each names the file or partition concerned.
#[derive(Debug)]
pub enum LogError {
    Io {
        path: PathBuf,
        source: io::Error,
    },
    /// Damaged data. In a partition file, `offset` is the record that should have been at
    /// byte `position`. In a start file, `offset` is the start value as stored (0 if unreadable)
    /// and `position` the byte where the check failed.
    Corrupt {
        path: PathBuf,
        offset: u64,
        position: u64,
        reason: String,
    },
    OffsetOutOfRange {
        partition: u32,
        offset: u64,
        start: u64,
        end: u64,
    },
    NoSuchPartition {
        partition: u32,
        partitions: u32,
    },
    Locked {
        path: PathBuf,
    },
    /// The file does not start with `expected` (nor with another version of it): it is not a
    /// file of this log format at all, or it is empty. `found` holds its first bytes (up to 8).
    BadHeader {
        path: PathBuf,
        found: Vec<u8>,
        expected: &'static [u8; 8],
    },
    /// A file of the log is of another version of its format: `found` holds its first 8 bytes,
    /// `reads` the only ones this build reads. `upgradable`: the previous version, which
    /// `consumer repair --upgrade` converts; nothing else converts anything.
    FormatVersion {
        path: PathBuf,
        found: Vec<u8>,
        reads: &'static [u8; 8],
        upgradable: bool,
    },
    /// A per-partition file's header (its magic is right) is cut short or fails its checksum.
    DamagedHeader {
        path: PathBuf,
        reason: String,
    },
    /// A per-partition file whose intact header (or acknowledgement slot) names another log
    /// or another partition: swapped or copied in from elsewhere. Never read, never rewritten.
    ForeignFile {
        path: PathBuf,
        found_log: u64,
        found_partition: u32,
        expected_log: u64,
        expected_partition: u32,
    },
    /// The log's identity says format version 3, but `path`, a file `consumer repair
    /// --upgrade` wrote, was not yet moved over its original: that upgrade was interrupted.
    UpgradeInterrupted {
        path: PathBuf,
    },
    /// An idempotent batch does not start at the sequence the producer must send next: a gap,
    /// a reordering, or a retry of a batch older than the recent ones kept.
    OutOfOrderSequence {
        partition: u32,
        producer: u64,
        expected: u32,
        found: u32,
    },
    /// An idempotent batch from an epoch below the producer's recorded one: a fenced instance.
    ProducerFenced {
        partition: u32,
        producer: u64,
        epoch: u32,
        current: u32,
    },
    /// Records of a partition are missing or damaged: records `offset..end` (from byte
    /// `position`) cannot be read, with `intact_after` intact records after them (0: the
    /// acknowledged records are lost up to the `acked_end` the acknowledgement record holds).
    /// The writer refuses the partition; readers read below `offset`.
    Damaged {
        path: PathBuf,
        partition: u32,
        offset: u64,
        end: u64,
        position: u64,
        acked_end: u64,
        intact_after: u64,
        reason: String,
    },
    /// A file the log cannot do without is gone (`what` says which): it is never recreated in
    /// place, because records the store depends on may have been in it.
    Missing {
        path: PathBuf,
        what: &'static str,
    },
    /// The log directory's partition files hold records, but it has no identity file: nothing
    /// can tell whether they are the store's log.
    Unidentified {
        path: PathBuf,
    },
    /// The log directory holds another log than the one the store was initialised with.
    IdentityMismatch {
        path: PathBuf,
        found: u64,
        expected: u64,
    },
    /// The log directory has another partition count than the store (or `init`) expects.
    PartitionCount {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    /// A replicated partition has no leader (its leader failed and no replica could be
    /// elected): it is unavailable, and reads and appends are refused rather than guessed.
    /// `path` is the replication state file that says so.
    Unavailable {
        path: PathBuf,
        partition: u32,
    },
    /// `operation` is not offered on a replicated log (`path`): its replicas are logs of their
    /// own, appended to through the leader and copied by the replication steps.
    Replicated {
        path: PathBuf,
        operation: &'static str,
    },
    /// The log directory has another number of replicas than `init` (or the caller) expects.
    ReplicaCount {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Io { path, source } => {
                write!(f, "log I/O error on {}: {source}", path.display())
            }
            LogError::Corrupt { path, offset, position, reason } => {
                write!(f, "log {} is corrupt at offset {offset} (byte {position}): {reason}", path.display())
            }
            LogError::OffsetOutOfRange { partition, offset, start, end } => {
                write!(f, "offset {offset} of partition {partition} is out of range: the log holds {start}..{end}")
            }
            LogError::NoSuchPartition { partition, partitions } => {
                write!(f, "partition {partition} does not exist: the log has {partitions} partitions (0..{partitions})")
            }
            LogError::Locked { path } => {
                write!(f, "log lock {} is held by another writer: only one writer per log directory", path.display())
            }
            LogError::BadHeader { path, found, expected } => write!(
                f,
                "{} is not a file of this log: its first 8 bytes are not {} (found \"{}\"): refused",
                path.display(),
                expected.escape_ascii(),
                found.escape_ascii()
            ),
            LogError::FormatVersion { path, found, reads, upgradable: true } => write!(
                f,
                "{} has format {}, the previous version: this build reads only {}; run `consumer repair --upgrade`",
                path.display(),
                found.escape_ascii(),
                reads.escape_ascii()
            ),
            LogError::FormatVersion { path, found, reads, upgradable: false } => write!(
                f,
                "{} has format {}, another version: this build reads only {} and converts nothing",
                path.display(),
                found.escape_ascii(),
                reads.escape_ascii()
            ),
            LogError::DamagedHeader { path, reason } => write!(
                f,
                "{}: its header is damaged ({reason}): refused (`consumer repair` rewrites a partition file's \
                 header only when its records are exactly the acknowledged ones)",
                path.display()
            ),
            LogError::ForeignFile { path, found_log, found_partition, expected_log, expected_partition } => write!(
                f,
                "{} belongs to log {found_log:016x} partition {found_partition}, not to this log \
                 {expected_log:016x} partition {expected_partition}: refused (a file of another log or partition; \
                 `consumer repair` does not guess)",
                path.display()
            ),
            LogError::UpgradeInterrupted { path } => write!(
                f,
                "{} is left over: an upgrade was interrupted: run `consumer repair --upgrade`",
                path.display()
            ),
            LogError::OutOfOrderSequence { partition, producer, expected, found } => write!(
                f,
                "out-of-order sequence from producer {producer} on partition {partition}: \
                 expected base sequence {expected}, got {found}"
            ),
            LogError::ProducerFenced { partition, producer, epoch, current } => write!(
                f,
                "producer {producer} is fenced on partition {partition}: \
                 its epoch {epoch} is below the current epoch {current}"
            ),
            LogError::Damaged { path, partition, offset, position, acked_end, intact_after: 0, reason, .. } => write!(
                f,
                "partition {partition} lost acknowledged records: {} holds intact records only up to offset \
                 {offset} (byte {position}) of the {acked_end} acknowledged ({reason}); run `consumer repair`",
                path.display()
            ),
            LogError::Damaged { path, partition, offset, end, position, intact_after, reason, .. } => write!(
                f,
                "partition {partition} is damaged: {} cannot be read at offsets {offset}..{end} ({}, from byte \
                 {position}: {reason}); {} after them intact, not read past the damage; run `consumer repair \
                 --gap` to record the damaged offsets as a gap and keep the rest",
                path.display(),
                records(end - offset),
                records(*intact_after)
            ),
            LogError::Missing { path, what } => write!(
                f,
                "{what} {} is missing: refused (nothing recreates it in place; `consumer repair` does, \
                 recording the loss)",
                path.display()
            ),
            LogError::Unidentified { path } => write!(
                f,
                "log {} holds records but no identity file: nothing can tell whether it is the store's log (refused)",
                path.display()
            ),
            LogError::IdentityMismatch { path, found, expected } => write!(
                f,
                "log {} has identity {found:016x}, but the store was initialised with log {expected:016x}: \
                 it is another log (refused; `consumer repair` does not repair this)",
                path.display()
            ),
            LogError::PartitionCount { path, found, expected } => {
                write!(f, "log {} has {found} partition(s), but {expected} were expected: refused", path.display())
            }
            LogError::Unavailable { path, partition } => write!(
                f,
                "partition {partition} is unavailable: it has no leader ({} names none: its leader failed and no \
                 in-sync replica could be elected); refused rather than read or appended elsewhere",
                path.display()
            ),
            LogError::Replicated { path, operation } => {
                write!(f, "log {} is replicated: {operation} is not offered on a replicated log", path.display())
            }
            LogError::ReplicaCount { path, found, expected } => {
                write!(f, "log {} has {found} replica(s), but {expected} were expected: refused", path.display())
            }
        }
    }
}

impl std::error::Error for LogError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LogError::Io { source, .. } => Some(source),
            LogError::Corrupt { .. }
            | LogError::OffsetOutOfRange { .. }
            | LogError::NoSuchPartition { .. }
            | LogError::Locked { .. }
            | LogError::BadHeader { .. }
            | LogError::FormatVersion { .. }
            | LogError::DamagedHeader { .. }
            | LogError::ForeignFile { .. }
            | LogError::UpgradeInterrupted { .. }
            | LogError::OutOfOrderSequence { .. }
            | LogError::ProducerFenced { .. }
            | LogError::Damaged { .. }
            | LogError::Missing { .. }
            | LogError::Unidentified { .. }
            | LogError::IdentityMismatch { .. }
            | LogError::PartitionCount { .. }
            | LogError::Unavailable { .. }
            | LogError::Replicated { .. }
            | LogError::ReplicaCount { .. } => None,
        }
    }
}

impl LogError {
    /// Whether the error is a refusal to protect data (acknowledged records lost or damaged, a
    /// file missing, damaged or not of this log, another log, a partition without a leader):
    /// the command line's exit status 4, where bad input (a log of another format version,
    /// which `consumer repair --upgrade` may convert) is 2.
    pub fn is_refusal(&self) -> bool {
        match self {
            LogError::Corrupt { .. }
            | LogError::BadHeader { .. }
            | LogError::DamagedHeader { .. }
            | LogError::ForeignFile { .. }
            | LogError::Damaged { .. }
            | LogError::Missing { .. }
            | LogError::Unidentified { .. }
            | LogError::IdentityMismatch { .. }
            | LogError::PartitionCount { .. }
            | LogError::Unavailable { .. }
            | LogError::ReplicaCount { .. } => true,
            LogError::Replicated { .. }
            | LogError::Io { .. }
            | LogError::OffsetOutOfRange { .. }
            | LogError::NoSuchPartition { .. }
            | LogError::Locked { .. }
            | LogError::FormatVersion { .. }
            | LogError::UpgradeInterrupted { .. }
            | LogError::OutOfOrderSequence { .. }
            | LogError::ProducerFenced { .. } => false,
        }
    }
}

/// Wraps an I/O error with the path it concerns.
pub(super) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> LogError + '_ {
    move |source| LogError::Io { path: path.to_path_buf(), source }
}
