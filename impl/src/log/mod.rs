//! The retained, partitioned log on disk: one checksummed append-only file per partition, a
//! crash-safe retained start per partition, torn-tail repair on open, readers that follow a
//! live writer from another process, and Kafka-style idempotent producers.
//!
//! # Layout (format version 3)
//!
//! Every per-partition file names the log and the partition it belongs to, so that a file
//! swapped in from another partition or copied in from another log is refused rather than
//! read: each file's own checksums cannot tell. The header (`header.rs`, 24 bytes):
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic: `ONCELOG3` (partition file) or `ONCESTA1` (start file) |
//! | 8 | the log's id (LE), its identity's |
//! | 4 | the partition (LE) |
//! | 4 | crc32c (LE) of the 20 bytes before it |
//!
//! `dir/partition-{N}.log` starts with that header (24 bytes: `HEADER_LEN`), followed by
//! frames:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | crc32c (LE) of every byte after it in the frame |
//! | 4 | payload length (LE) |
//! | 8 | the record's offset (LE); offsets are dense 0, 1, 2, ... per partition |
//! | 8 | producer id (LE); 0 for a plain append, which has no producer |
//! | 4 | producer epoch (LE); 0 for a plain append |
//! | 4 | the record's sequence (LE): its batch's base sequence plus its index in the batch |
//! | 4 | batch length (LE): the number of records in the batch this record belongs to |
//! | 4 | the record's index in its batch (LE); `u32::MAX` in a gap frame |
//! | n | payload |
//!
//! Every record of a batch carries the same producer id, epoch and batch length, consecutive
//! sequences (wrapping from `u32::MAX` to 0, as Kafka's wrap at `i32::MAX`) and indexes 0, 1,
//! ..., so a scan rebuilds the batch boundaries, and one that lost its way in damaged bytes
//! finds the next batch by a frame of index 0. A plain batch has base sequence 0. A *gap
//! frame* (index `u32::MAX`, batch length `n`, producer 0, zero padding for payload) stands
//! for `n` offsets whose records `repair --gap` gave up as damaged; it fills exactly the bytes
//! they occupied.
//!
//! Every open checks each header before it reads anything else: not this format at all (an
//! empty file included) is [`LogError::BadHeader`], a header that fails its checksum
//! [`LogError::DamagedHeader`], an intact one naming another log or partition
//! [`LogError::ForeignFile`]: all refusals. `ONCELOG` with another version digit is
//! [`LogError::FormatVersion`]: version 2's `ONCELOG2` with the hint to run `consumer repair
//! --upgrade` (`upgrade.rs`), anything else converted by nothing.
//!
//! `dir/partition-{N}.start` holds the retained start: the `ONCESTA1` header, then 8 bytes LE
//! and their crc32c (LE), 36 bytes. It is replaced atomically (temp file, fsync, rename, fsync
//! of the directory). `init` makes it; a missing one is [`LogError::Missing`], never read as 0.
//! `dir/writer.lock` is locked exclusively by the single writer.
//!
//! `dir/identity` holds `ONCELID2` (the format version), the log's random id and partition
//! count (`identity.rs`), written last by `init` and recorded in the store: every open checks
//! both ([`LogError::IdentityMismatch`], [`LogError::PartitionCount`]), so a store never runs
//! against another log, and the headers name its id, so no file of another log is read either.
//!
//! `dir/partition-{N}.ack` holds the acknowledgement record (`ack.rs`): the end offset and
//! byte length of the file as of the last acknowledged append, in two alternating
//! checksummed slots of a preallocated file, each naming its log and partition too.
//! `dir/repairs.log` records, one line each, what every [`Log::repair`] removed or accepted as
//! lost.
//!
//! # Appends and recovery
//!
//! An append writes its batch's frames and `fdatasync`s the file, then writes the next slot of
//! the acknowledgement record and `fdatasync`s that, and only then returns. A reader that finds
//! a new acknowledgement record syncs it before it exposes what it covers, so nobody consumes
//! a record a power cut can still take. The record is a *lower bound* of what was
//! acknowledged: its newest valid slot may be older than the last acknowledgement (that slot
//! damaged, or its write torn), never newer. So on the writer's open, which reads the whole
//! file:
//!
//! - past the acknowledged length, whole checksum-valid batches are kept and acknowledged
//!   (their data was synced before any slot covering them was written; a producer that got no
//!   acknowledgement retries through its producer id and finds them), and an incomplete last
//!   batch (an append a crash or power cut interrupted) is cut; both are reported in a
//!   [`TailRepair`]. Readers never look past the acknowledged length;
//! - a frame below the acknowledged length that is missing (the file is shorter) or fails
//!   its checks, with no whole batch after it, means acknowledged records were lost at the
//!   end: the partition is *damaged*;
//! - a batch that fails its checks with a whole batch after it (anywhere: a crash only cuts
//!   the last append) is a damaged range: the partition is *damaged*, and the records after
//!   the range are indexed but not read ([`Damage::intact_after`]).
//!
//! A damaged partition refuses appends and retention ([`LogError::Damaged`], naming file,
//! partition, offsets and the records after them) and is modified by nobody; readers read the
//! intact records below the damage and report it ([`Log::damage`]). Only [`Log::repair`]
//! changes it: a loss at the end is cut (and the groups rewound); a damaged range is refused
//! unless [`RepairOptions::gap`] asks for a gap frame in its place, after which the records
//! after it read again and the range's offsets are a gap ([`PartitionView::gaps`]).
//!
//! Frames are checked batch by batch: a frame that fails its checksum, carries an unexpected
//! offset or does not continue its batch fails its whole batch. A batch is thus all or
//! nothing: nobody ever reads part of one, and a retry of a batch a crash cut short appends it
//! again rather than finding half of it. After a failing frame the scan looks byte by byte,
//! from that frame on (a damaged length field says nothing of where the next frame starts),
//! for a checksum-valid frame of index 0 at a higher offset, no further above than the bytes
//! left could hold frames; not finding one, it takes the rest for a torn tail.
//!
//! The test-only [`WriterMode::Unchecked`] writer recovers the way the log did before the
//! acknowledgement record: from the file alone, where a damaged last batch passes for a torn
//! tail (and whole batches after damage make it [`LogError::Corrupt`]).
//!
//! # Idempotent producers
//!
//! [`Log::append_idempotent`] deduplicates retries the way Kafka's idempotent producer does.
//! Per producer id and partition, the writer keeps the producer's epoch and its last
//! [`RECENT_BATCHES`] batches (base sequence, count, first offset). `open_writer` rebuilds this
//! table by scanning every record of the file, including those retained away below the start,
//! and syncs the file first, so a batch it finds is durable before a retry is told so. Readers
//! keep no table: they cannot append.
//!
//! # Files
//!
//! A DAG, leaves first: `error.rs` (`LogError`); `header.rs` (the 24-byte header naming log
//! and partition);
//! `simdisk.rs` (the test-only simulated disk) and `storage.rs` (`Storage`, through which
//! every file operation goes: `std::fs`, or the simulated disk); `durable.rs` (files replaced
//! and directories made durably); `identity.rs` (the identity
//! file); `ack.rs` (the acknowledgement record); `producer.rs` (the idempotent producer
//! table); `frame.rs` (the frame codec and the scan); `retention.rs` (start files);
//! `partition.rs` (one partition: open, recovery, append, read); `reader.rs` (a reader's
//! refresh); this file, the front (`Log`); `repair.rs` (`Log::repair`), `upgrade.rs`
//! (`Log::upgrade`: format version 2 to 3) and `fault.rs` (fault injection for tests), which
//! use the front's lock.

mod ack;
mod durable;
mod error;
pub mod fault;
mod frame;
mod header;
mod identity;
mod partition;
mod producer;
mod reader;
mod repair;
mod replication;
mod retention;
mod simdisk;
mod storage;
mod upgrade;

pub use durable::create_dir_durably;
pub use error::LogError;
pub use identity::LogIdentity;
pub use partition::{Damage, Record, TailRepair, WriterMode};
pub use producer::{Appended, Producer, RECENT_BATCHES};
pub use repair::{RepairAction, RepairOptions, Repaired};
pub use replication::{
    replica_dir, Acknowledged, Acks, Answer, Batch, Election, ElectionKind, LeaderAppend, PartitionReplication,
    Pending, Replicate, ReplicatedLog, ReplicationError, ReplicationState, Shrunk, REPLICAS_MAX, REPLICAS_MIN,
};
pub use simdisk::{Cut, Halt, SimDisk, SimOp, SplitMix64};
pub use storage::Storage;
#[doc(hidden)]
pub use upgrade::{write_v2_log_for_tests, V2Batch, V2Partition};
pub use upgrade::{UpgradeAction, Upgraded};

use ack::create_ack_file;
use durable::{create_dir_durably_on, replace_file};
use error::io_err;
use header::{encode_header, Owner, HEADER_LEN, MAGIC};
use identity::{check_identity, check_matches, read_identity, write_identity};
use partition::{partition_path, Partition};
use replication::{identity_of_replicas, is_replicated, Source};
use retention::write_start;
use std::ops::Range;
use std::path::{Path, PathBuf};
use storage::DirLock;

/// The handle on a log directory, either as its single writer or as one of its readers.
pub struct Log {
    writer: bool,
    identity: LogIdentity,
    /// Where the log lives: the transactional output log is found beside it (`crate::txn`).
    storage: Storage,
    dir: PathBuf,
    parts: Vec<Partition>,
    /// Never read: the exclusive lock lives exactly as long as this value.
    _lock: Option<DirLock>,
    /// A reader of a replicated log: each partition read from its leader's replica, below the
    /// high watermark (`replication/source.rs`).
    replicated: Option<Source>,
}

/// What a reader sees of one partition after one refresh.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionView {
    pub start: u64,
    /// The end of the readable records (the intact ones when the partition is damaged).
    pub end: u64,
    /// The end the acknowledgement record holds.
    pub acked_end: u64,
    pub damage: Option<Damage>,
    /// Offsets with no record, given up as damaged by `repair --gap`, in order.
    pub gaps: Vec<Range<u64>>,
}

/// Encodes a record's delta as its payload: 8 bytes, little-endian.
pub fn encode_delta(delta: i64) -> Vec<u8> {
    delta.to_le_bytes().to_vec()
}

/// Decodes a payload written by [`encode_delta`]; any other length is not a delta.
pub fn decode_delta(payload: &[u8]) -> Option<i64> {
    let bytes: [u8; 8] = payload.try_into().ok()?;
    Some(i64::from_le_bytes(bytes))
}

impl Log {
    /// `init`'s first half, which writes nothing: the identity of the log in `dir` if it has
    /// one with `partitions` partitions and every file ([`LogError::PartitionCount`] for
    /// another count), else a new random identity. A directory whose partition files hold
    /// records but that has no identity file is refused: nothing can tell which log it is.
    pub fn identity_for_init(dir: &Path, partitions: u32) -> Result<LogIdentity, LogError> {
        let storage = Storage::Real;
        match read_identity(&storage, dir)? {
            Some(found) => {
                check_matches(dir, found, LogIdentity { id: found.id, partitions })?;
                Log::open_reader(dir, found)?;
                Ok(found)
            }
            None if holds_records(&storage, dir, partitions)? => {
                Err(LogError::Unidentified { path: dir.to_path_buf() })
            }
            // A replicated `init` that stopped before its last write: its replicas' identity
            // (none without `replica-0`'s identity file, a plain or a new log).
            None => match identity_of_replicas(&storage, dir)? {
                Some(found) => check_matches(dir, found, LogIdentity { id: found.id, partitions }).map(|()| found),
                None => LogIdentity::new_random(partitions),
            },
        }
    }

    /// `init`'s second half: creates the log `identity` names in `dir` (the directory, made
    /// durably, and per partition its file, start 0 and acknowledgement record, then the
    /// identity file, whose presence marks a complete log). Nothing to do when `dir` holds
    /// that log already; another one, or a replicated one, is refused.
    pub fn create(dir: &Path, identity: LogIdentity) -> Result<(), LogError> {
        Log::create_on(&Storage::Real, dir, identity)
    }

    /// [`Log::create`] on `storage`.
    pub fn create_on(storage: &Storage, dir: &Path, identity: LogIdentity) -> Result<(), LogError> {
        create_dir_durably_on(storage, dir)?;
        if is_replicated(storage, dir) {
            let found = ReplicatedLog::open_on(storage, dir, identity)?.map_or(1, |log| log.replicas());
            return Err(LogError::ReplicaCount { path: dir.to_path_buf(), found, expected: 1 });
        }
        if let Some(found) = read_identity(storage, dir)? {
            check_matches(dir, found, identity)?;
            return Log::open_reader_on(storage, dir, identity).map(|_| ());
        }
        if holds_records(storage, dir, identity.partitions)? {
            return Err(LogError::Unidentified { path: dir.to_path_buf() });
        }
        for number in 0..identity.partitions {
            let owner = Owner { log: identity.id, partition: number };
            replace_file(storage, dir, &partition_path(dir, number, "log"), &encode_header(MAGIC, owner))?;
            write_start(storage, &partition_path(dir, number, "start"), owner, 0)?;
            create_ack_file(storage, &partition_path(dir, number, "ack"), owner, 0, 0, HEADER_LEN)?;
        }
        write_identity(storage, dir, identity)
    }

    /// The identity of the log in `dir`, read from its identity file; `None` when it has none.
    pub fn read_identity(dir: &Path) -> Result<Option<LogIdentity>, LogError> {
        read_identity(&Storage::Real, dir)
    }

    /// [`Log::identity_for_init`] then [`Log::create`]: a new log (or the one already there).
    pub fn init(dir: &Path, partitions: u32) -> Result<LogIdentity, LogError> {
        let identity = Log::identity_for_init(dir, partitions)?;
        Log::create(dir, identity)?;
        Ok(identity)
    }

    /// Opens the log `expected` names in `dir` as its only writer ([`WriterMode::Checked`]).
    ///
    /// Takes an exclusive lock on `dir/writer.lock` for the life of the `Log`, because two
    /// writers would hand out the same offsets; a held lock gives [`LogError::Locked`]. Another
    /// log, or a missing file, is refused (nothing is created in its place). Bytes past each
    /// partition's acknowledged length are cut and returned as [`TailRepair`]s; a damaged
    /// partition is left as it is and refuses appends. The idempotent producers' table is
    /// rebuilt from every acknowledged record, and the files are synced, so what the table
    /// records is durable.
    pub fn open_writer(dir: &Path, expected: LogIdentity) -> Result<(Log, Vec<TailRepair>), LogError> {
        Log::open_writer_with(dir, expected, WriterMode::Checked)
    }

    /// [`Log::open_writer`], waiting up to `wait` for another writer to release the lock (as
    /// the store's busy timeout waits for another process's transaction) instead of failing at
    /// once; [`LogError::Locked`] past it. The lock is tried every millisecond: a writer holds
    /// it for one command (an append: its scan and two fsyncs), so waiters get their turn.
    pub fn open_writer_within(
        dir: &Path,
        expected: LogIdentity,
        wait: std::time::Duration,
    ) -> Result<(Log, Vec<TailRepair>), LogError> {
        let started = std::time::Instant::now();
        loop {
            match Log::open_writer(dir, expected) {
                Err(LogError::Locked { .. }) if started.elapsed() < wait => {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                opened => return opened,
            }
        }
    }

    /// Test only: the writer of the trap "a log that grows again after losing its tail"
    /// ([`WriterMode::Unchecked`]).
    pub fn open_writer_unchecked(dir: &Path, expected: LogIdentity) -> Result<(Log, Vec<TailRepair>), LogError> {
        Log::open_writer_with(dir, expected, WriterMode::Unchecked)
    }

    /// [`Log::open_writer`] in the given mode.
    pub fn open_writer_with(
        dir: &Path,
        expected: LogIdentity,
        mode: WriterMode,
    ) -> Result<(Log, Vec<TailRepair>), LogError> {
        Log::open_writer_on(&Storage::Real, dir, expected, mode)
    }

    /// [`Log::open_writer_with`] on `storage`.
    pub fn open_writer_on(
        storage: &Storage,
        dir: &Path,
        expected: LogIdentity,
        mode: WriterMode,
    ) -> Result<(Log, Vec<TailRepair>), LogError> {
        check_identity(storage, dir, expected)?;
        if is_replicated(storage, dir) {
            let operation = "writing the whole log (appends go to the leader's replica: `append`, or ReplicatedLog)";
            return Err(LogError::Replicated { path: dir.to_path_buf(), operation });
        }
        let lock = lock_dir(storage, dir)?;
        let mut parts = Vec::new();
        let mut repairs = Vec::new();
        for number in 0..expected.partitions {
            let (part, repair) = Partition::open_writer(storage, dir, expected.id, number, mode)?;
            parts.push(part);
            repairs.extend(repair);
        }
        let (storage, dir) = (storage.clone(), dir.to_path_buf());
        Ok((
            Log { writer: true, identity: expected, storage, dir, parts, _lock: Some(lock), replicated: None },
            repairs,
        ))
    }

    /// Opens the log `expected` names in `dir` for reading only, possibly while another
    /// process appends to it.
    ///
    /// Never modifies a file and takes no lock. Nothing past a partition's acknowledged end is
    /// read. Another log or a missing file is refused; a damaged partition opens, its intact
    /// records readable ([`Log::damage`] says where they end). A reader keeps no producer table.
    ///
    /// On a replicated log ([`ReplicatedLog`]) each partition is read from its current
    /// leader's replica, below the high watermark: committed records only. A partition with
    /// no leader opens, and every read of it is [`LogError::Unavailable`].
    pub fn open_reader(dir: &Path, expected: LogIdentity) -> Result<Log, LogError> {
        Log::open_reader_on(&Storage::Real, dir, expected)
    }

    /// [`Log::open_reader`] on `storage`.
    pub fn open_reader_on(storage: &Storage, dir: &Path, expected: LogIdentity) -> Result<Log, LogError> {
        check_identity(storage, dir, expected)?;
        if let Some(mut source) = Source::open(storage, dir, expected)? {
            // Placeholders until `follow` points each at its leader's replica.
            let mut parts: Vec<Partition> =
                (0..expected.partitions).map(|n| Partition::new(storage, dir, expected.id, n)).collect();
            for (number, part) in (0..).zip(&mut parts) {
                match source.follow(number, part) {
                    Ok(()) | Err(LogError::Unavailable { .. }) => {}
                    Err(error) => return Err(error),
                }
            }
            let (storage, dir) = (storage.clone(), dir.to_path_buf());
            return Ok(Log {
                writer: false,
                identity: expected,
                storage,
                dir,
                parts,
                _lock: None,
                replicated: Some(source),
            });
        }
        let mut parts = Vec::new();
        for number in 0..expected.partitions {
            let mut part = Partition::new(storage, dir, expected.id, number);
            part.refresh()?;
            parts.push(part);
        }
        let (storage, dir) = (storage.clone(), dir.to_path_buf());
        Ok(Log { writer: false, identity: expected, storage, dir, parts, _lock: None, replicated: None })
    }

    /// Makes the log `expected` names in `dir` consistent again after a loss: see `repair.rs`.
    /// `before` is shown every action before anything changes; a healthy log gets none and is
    /// left as it is. Another log is refused. Takes the writer lock.
    pub fn repair(
        dir: &Path,
        expected: LogIdentity,
        before: impl FnOnce(&[RepairAction]),
    ) -> Result<Repaired, LogError> {
        repair::repair(&Storage::Real, dir, expected, RepairOptions::default(), before)
    }

    /// [`Log::repair`] with `options` (`gap`: record damaged ranges with intact records after
    /// them as gaps instead of refusing them).
    pub fn repair_with(
        dir: &Path,
        expected: LogIdentity,
        options: RepairOptions,
        before: impl FnOnce(&[RepairAction]),
    ) -> Result<Repaired, LogError> {
        repair::repair(&Storage::Real, dir, expected, options, before)
    }

    /// `consumer repair --upgrade`'s part for one log: converts the log `expected` names in
    /// `dir` (plain, or replicated: every replica) from format version 2 to 3, crash-safely,
    /// or finishes an upgrade a crash interrupted after its commit point; a log of version 3
    /// already is left as it is (`Upgraded::current`). See `upgrade.rs`.
    pub fn upgrade(dir: &Path, expected: LogIdentity) -> Result<Upgraded, LogError> {
        upgrade::upgrade(&Storage::Real, dir, expected)
    }

    /// [`Log::upgrade`] on `storage` (a simulated disk's log, for the power-cut tests).
    pub fn upgrade_on(storage: &Storage, dir: &Path, expected: LogIdentity) -> Result<Upgraded, LogError> {
        upgrade::upgrade(storage, dir, expected)
    }

    /// The identity this handle was opened with (checked against the directory's).
    pub fn identity(&self) -> LogIdentity {
        self.identity
    }

    /// The storage and the directory this handle was opened on.
    pub fn location(&self) -> (&Storage, &Path) {
        (&self.storage, &self.dir)
    }

    /// The number of partitions this handle was opened with.
    pub fn partitions(&self) -> u32 {
        self.parts.len() as u32
    }

    /// Appends one record to `partition` and returns its offset.
    ///
    /// An `Ok` means the record is durable (the file was `sync_data`ed) and will be read back
    /// at that offset after any crash. After an I/O error the handle refuses further appends,
    /// since what reached the disk is unknown; reopen the log to repair and continue.
    pub fn append(&mut self, partition: u32, payload: &[u8]) -> Result<u64, LogError> {
        let range = self.append_all(partition, &[payload], None)?;
        Ok(range.start)
    }

    /// Appends several records to `partition` with one fsync and returns their offsets.
    ///
    /// An `Ok` means every record of the batch is durable, exactly as for [`Log::append`].
    /// A crash before the `Ok` leaves all of the batch or none of it: an incomplete batch is
    /// a torn tail. The records carry no producer, so nothing deduplicates them.
    pub fn append_batch(&mut self, partition: u32, payloads: &[Vec<u8>]) -> Result<Range<u64>, LogError> {
        let slices: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        self.append_all(partition, &slices, None)
    }

    /// Idempotent append of a batch (one fsync). Per (producer id, partition) the log keeps
    /// the last [`RECENT_BATCHES`] batches (base sequence, count, first offset). In order:
    /// an epoch below the recorded one is [`LogError::ProducerFenced`]; an exact match (same
    /// epoch, same base sequence and count) of one of the recent batches returns its original
    /// offsets with `duplicate: true` and appends nothing; a new, higher epoch starts a fresh
    /// sequence at 0 (`base_sequence` must be 0); otherwise `base_sequence` must be the last
    /// sequence + 1 (or 0 for a producer never seen), else [`LogError::OutOfOrderSequence`].
    /// Sequences wrap from `u32::MAX` to 0. An `Ok` means durable (for a duplicate: the
    /// original append was durable).
    ///
    /// Payloads are not compared: a retry is recognised by its sequences, as in Kafka. An
    /// empty batch is checked for fencing only and appends and records nothing. Writer only.
    ///
    /// # Panics
    ///
    /// If `producer.id` is 0 (the id of plain appends) or the batch holds more than
    /// `u32::MAX` records.
    pub fn append_idempotent(
        &mut self,
        partition: u32,
        producer: Producer,
        base_sequence: u32,
        payloads: &[Vec<u8>],
    ) -> Result<Appended, LogError> {
        assert!(self.writer, "append_idempotent on a log opened with open_reader: only the writer appends");
        assert!(producer.id >= 1, "producer id 0 is reserved for plain appends");
        let slices: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        self.part(partition)?.append_idempotent(producer, base_sequence, &slices)
    }

    /// Reads the record at `offset`. A reader first refreshes: it indexes the records
    /// appended since (by any process) and re-reads the start file.
    ///
    /// An offset below the start or at/after the end is [`LogError::OffsetOutOfRange`], never
    /// a silent jump to the nearest record. The frame is re-checked against its checksum, so
    /// damage after open is reported as [`LogError::Corrupt`].
    pub fn read(&mut self, partition: u32, offset: u64) -> Result<Record, LogError> {
        let part = self.current(partition)?;
        let end = part.readable_end();
        if offset < part.start || offset >= end {
            return Err(LogError::OffsetOutOfRange { partition, offset, start: part.start, end });
        }
        part.read_record(offset)
    }

    /// Reads the records `offsets` of `partition`, each as [`Log::read`] would, with one
    /// refresh for all of them (a fetch of a batch). The whole range must lie within the start
    /// and the end, else [`LogError::OffsetOutOfRange`] names the first offset outside.
    pub fn read_range(&mut self, partition: u32, offsets: Range<u64>) -> Result<Vec<Record>, LogError> {
        let part = self.current(partition)?;
        let (start, end) = (part.start, part.readable_end());
        if offsets.is_empty() {
            return Ok(Vec::new());
        }
        if offsets.start < start || offsets.end > end {
            let offset = if offsets.start < start { offsets.start } else { end.max(offsets.start) };
            return Err(LogError::OffsetOutOfRange { partition, offset, start, end });
        }
        offsets.map(|offset| part.read_record(offset)).collect()
    }

    /// The first readable offset of `partition` (refreshed for a reader).
    pub fn start(&mut self, partition: u32) -> Result<u64, LogError> {
        Ok(self.current(partition)?.start)
    }

    /// The next offset to be written to `partition` (refreshed for a reader; a replicated
    /// log's reader: the leader's high watermark, or its end if that is lower).
    pub fn end(&mut self, partition: u32) -> Result<u64, LogError> {
        Ok(self.current(partition)?.readable_end())
    }

    /// Whether `partition` lost acknowledged records (refreshed for a reader).
    pub fn damaged(&mut self, partition: u32) -> Result<bool, LogError> {
        Ok(self.current(partition)?.damage.is_some())
    }

    /// Where the intact records of a damaged `partition` end and why (refreshed for a reader).
    pub fn damage(&mut self, partition: u32) -> Result<Option<Damage>, LogError> {
        Ok(self.current(partition)?.damage.clone())
    }

    /// Start, end, acknowledged end and damage of `partition`, after one refresh.
    pub fn view(&mut self, partition: u32) -> Result<PartitionView, LogError> {
        let part = self.current(partition)?;
        let end = part.readable_end();
        let (damage, gaps) = (part.damage.clone(), part.gaps());
        Ok(PartitionView { start: part.start, end, acked_end: part.ack.end, damage, gaps })
    }

    /// Retention: advances the start of `partition` to `offset` and returns the new start.
    ///
    /// Writer only. The start never moves backwards (an `offset` below it changes nothing)
    /// and may not pass the end ([`LogError::OffsetOutOfRange`]). Records below the start are
    /// no longer readable by anyone, though their bytes physically stay in the file: dropping
    /// them would mean rewriting the file, and a reader must only ever see a higher start.
    /// Their producer fields still count when the writer rebuilds its producer table.
    /// An `Ok` means the new start is durable. A damaged partition is refused.
    pub fn retain_before(&mut self, partition: u32, offset: u64) -> Result<u64, LogError> {
        assert!(self.writer, "retain_before on a log opened with open_reader: only the writer moves the start");
        let part = self.part(partition)?;
        part.check_writable()?;
        if offset > part.end() {
            return Err(LogError::OffsetOutOfRange { partition, offset, start: part.start, end: part.end() });
        }
        if offset > part.start {
            write_start(&part.storage, &part.start_path, part.owner, offset)?;
            part.start = offset;
        }
        Ok(part.start)
    }

    /// The shared body of `append` and `append_batch`.
    fn append_all(
        &mut self,
        partition: u32,
        payloads: &[&[u8]],
        producer: Option<(Producer, u32)>,
    ) -> Result<Range<u64>, LogError> {
        assert!(self.writer, "append on a log opened with open_reader: only the writer appends");
        self.part(partition)?.append(payloads, producer)
    }

    /// The partition, checked against the partition count.
    fn part(&mut self, partition: u32) -> Result<&mut Partition, LogError> {
        let partitions = self.partitions();
        self.parts.get_mut(partition as usize).ok_or(LogError::NoSuchPartition { partition, partitions })
    }

    /// The partition, refreshed first when this handle is a reader. The writer's memory is
    /// authoritative, since nobody else may append or move the start.
    fn current(&mut self, partition: u32) -> Result<&mut Partition, LogError> {
        let partitions = self.partitions();
        let part = self.parts.get_mut(partition as usize).ok_or(LogError::NoSuchPartition { partition, partitions })?;
        match &mut self.replicated {
            Some(source) => source.follow(partition, part)?,
            None if !self.writer => part.refresh()?,
            None => {}
        }
        Ok(part)
    }

    /// The frames of the records `offsets` of `partition` as its file holds them (the
    /// replication copies and compares them); within the partition's records.
    fn frames(&mut self, partition: u32, offsets: Range<u64>) -> Result<Vec<u8>, LogError> {
        let part = self.current(partition)?;
        if offsets.end > part.end() {
            let (offset, start, end) = (offsets.end - 1, part.start, part.end());
            return Err(LogError::OffsetOutOfRange { partition, offset, start, end });
        }
        part.frames(offsets)
    }

    /// The number of records of the batch that holds record `offset` of `partition`.
    fn batch_len_at(&mut self, partition: u32, offset: u64) -> Result<u64, LogError> {
        let part = self.current(partition)?;
        if offset >= part.end() {
            return Err(LogError::OffsetOutOfRange { partition, offset, start: part.start, end: part.end() });
        }
        part.batch_len_at(offset)
    }

    /// Writer only: appends whole batches copied from another replica (`Partition::append_frames`).
    fn append_frames(&mut self, partition: u32, frames: &[u8]) -> Result<Range<u64>, LogError> {
        assert!(self.writer, "append_frames on a reader: only the writer appends");
        self.part(partition)?.append_frames(frames)
    }

    /// Writer only: the explicit truncation of a promoted replica (`Partition::cut_acknowledged`).
    fn cut_acknowledged(&mut self, partition: u32, to: u64) -> Result<(), LogError> {
        assert!(self.writer, "cut_acknowledged on a reader: only the writer truncates");
        self.part(partition)?.cut_acknowledged(to)
    }
}

/// Whether any of the first `partitions` partition files in `dir` holds a byte past its
/// header (a record, or part of one).
fn holds_records(storage: &Storage, dir: &Path, partitions: u32) -> Result<bool, LogError> {
    for number in 0..partitions {
        let path = partition_path(dir, number, "log");
        match storage.len(&path) {
            Ok(len) if len > HEADER_LEN => return Ok(true),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&path)(e)),
        }
    }
    Ok(false)
}

/// Takes the single-writer lock, held for as long as the returned value lives.
fn lock_dir(storage: &Storage, dir: &Path) -> Result<DirLock, LogError> {
    let path = dir.join("writer.lock");
    match storage.try_lock(&path) {
        Ok(Some(lock)) => Ok(lock),
        Ok(None) => Err(LogError::Locked { path }),
        Err(e) => Err(io_err(&path)(e)),
    }
}
