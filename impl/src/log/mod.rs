//! The retained, partitioned log on disk: one checksummed append-only file per partition, a
//! crash-safe retained start per partition, torn-tail repair on open, readers that follow a
//! live writer from another process, and Kafka-style idempotent producers.
//!
//! # Layout (format version 2)
//!
//! `dir/partition-{N}.log` starts with the 8-byte header `ONCELOG2`, followed by frames:
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
//! | n | payload |
//!
//! Every record of a batch carries the same producer id, epoch and batch length, and
//! consecutive sequences (wrapping from `u32::MAX` to 0, as Kafka's wrap at `i32::MAX`), so a
//! scan rebuilds the batch boundaries. A plain batch has base sequence 0. A file whose header
//! is `ONCELOG1` (the version without producer fields) is refused as [`LogError::BadHeader`]:
//! nothing converts it.
//!
//! `dir/partition-{N}.start` holds the retained log start: 8 bytes LE and their crc32c (LE).
//! It is replaced atomically (temp file, fsync, rename, fsync of the directory); a missing file
//! means start 0. `dir/writer.lock` is locked exclusively by the single writer.
//!
//! # Recovery
//!
//! A frame that runs past the end of the file, fails its checksum, carries an unexpected
//! offset or does not continue its batch ends the valid prefix. If a valid frame with a later
//! plausible offset follows it, records were damaged in the middle of the log: that is
//! [`LogError::Corrupt`], never a silent skip. Otherwise it is a torn tail (an append cut short
//! by a crash), which begins at the first record of the incomplete batch: the writer truncates
//! it and reports a [`TailRepair`]; a reader treats it as not yet written. A batch is thus all
//! or nothing: nobody ever reads part of one, and a retry of a batch a crash cut short appends
//! it again rather than finding half of it.
//!
//! The classification assumes appends reach the file in order, which holds for process
//! crashes (a killed writer leaves a prefix of its last `write`). After a power loss a file
//! system may persist the pages of one unacknowledged batch out of order; that surfaces as
//! `Corrupt`, which errs on the side of a loud stop rather than a silent loss.
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
//! A DAG, leaves first: `header.rs` (the 8-byte header); `error.rs` (`LogError`);
//! `producer.rs` (the idempotent producer table); `frame.rs` (the frame codec and the scan);
//! `retention.rs` (start files); `partition.rs` (one partition: open, repair, append, read);
//! `reader.rs` (a reader's refresh); this file, the front (`Log`).

mod error;
mod frame;
mod header;
mod partition;
mod producer;
mod reader;
mod retention;

pub use error::LogError;
pub use partition::{Record, TailRepair};
pub use producer::{Appended, Producer, RECENT_BATCHES};

use error::io_err;
use partition::Partition;
use retention::write_start;
use std::fs::{self, File, OpenOptions};
use std::ops::Range;
use std::path::Path;

/// The handle on a log directory, either as its single writer or as one of its readers.
pub struct Log {
    writer: bool,
    parts: Vec<Partition>,
    /// Never read: the exclusive lock lives exactly as long as this open file.
    _lock: Option<File>,
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
    /// Opens `dir` (creating it and any missing partition file) as its only writer.
    ///
    /// Takes an exclusive lock on `dir/writer.lock` for the life of the `Log`, because two
    /// writers would hand out the same offsets; a held lock gives [`LogError::Locked`].
    /// Every torn tail found (including an incomplete batch) is truncated and returned as a
    /// [`TailRepair`]; damage before the tail is [`LogError::Corrupt`] and nothing is
    /// modified. The idempotent producers' table is rebuilt from every record in the files,
    /// and the files are synced, so what the table records is durable.
    pub fn open_writer(dir: &Path, partitions: u32) -> Result<(Log, Vec<TailRepair>), LogError> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let lock = lock_dir(dir)?;
        let mut parts = Vec::new();
        let mut repairs = Vec::new();
        for number in 0..partitions {
            let (part, repair) = Partition::open_writer(dir, number)?;
            parts.push(part);
            repairs.extend(repair);
        }
        Ok((Log { writer: true, parts, _lock: Some(lock) }, repairs))
    }

    /// Opens `dir` for reading only, possibly while another process appends to it.
    ///
    /// Never modifies a file and takes no lock. A torn or incomplete tail (an incomplete
    /// batch included) is treated as not yet written, because it may be a batch being
    /// appended right now; damage before the tail is [`LogError::Corrupt`]. A partition file
    /// that does not exist yet reads as empty until the writer creates it. A reader keeps no
    /// producer table.
    pub fn open_reader(dir: &Path, partitions: u32) -> Result<Log, LogError> {
        let mut parts = Vec::new();
        for number in 0..partitions {
            let mut part = Partition::new(dir, number);
            part.refresh()?;
            parts.push(part);
        }
        Ok(Log { writer: false, parts, _lock: None })
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
        if offset < part.start || offset >= part.end() {
            return Err(LogError::OffsetOutOfRange { partition, offset, start: part.start, end: part.end() });
        }
        part.read_record(offset)
    }

    /// The first readable offset of `partition` (refreshed for a reader).
    pub fn start(&mut self, partition: u32) -> Result<u64, LogError> {
        Ok(self.current(partition)?.start)
    }

    /// The next offset to be written to `partition` (refreshed for a reader).
    pub fn end(&mut self, partition: u32) -> Result<u64, LogError> {
        Ok(self.current(partition)?.end())
    }

    /// Retention: advances the start of `partition` to `offset` and returns the new start.
    ///
    /// Writer only. The start never moves backwards (an `offset` below it changes nothing)
    /// and may not pass the end ([`LogError::OffsetOutOfRange`]). Records below the start are
    /// no longer readable by anyone, though their bytes physically stay in the file: dropping
    /// them would mean rewriting the file, and a reader must only ever see a higher start.
    /// Their producer fields still count when the writer rebuilds its producer table.
    /// An `Ok` means the new start is durable.
    pub fn retain_before(&mut self, partition: u32, offset: u64) -> Result<u64, LogError> {
        assert!(self.writer, "retain_before on a log opened with open_reader: only the writer moves the start");
        let part = self.part(partition)?;
        if offset > part.end() {
            return Err(LogError::OffsetOutOfRange { partition, offset, start: part.start, end: part.end() });
        }
        if offset > part.start {
            write_start(&part.start_path, offset)?;
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
        let writer = self.writer;
        let part = self.part(partition)?;
        if !writer {
            part.refresh()?;
        }
        Ok(part)
    }
}

/// Takes the single-writer lock, held for as long as the returned file stays open.
fn lock_dir(dir: &Path) -> Result<File, LogError> {
    let path = dir.join("writer.lock");
    let file = OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io_err(&path))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(fs::TryLockError::WouldBlock) => Err(LogError::Locked { path }),
        Err(fs::TryLockError::Error(e)) => Err(io_err(&path)(e)),
    }
}
