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

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The first bytes of every partition file; anything else is not ours to touch.
const MAGIC: &[u8; 8] = b"ONCELOG2";
/// What every header of this log format starts with, whatever its version.
const MAGIC_FAMILY: &[u8; 7] = b"ONCELOG";
/// Byte position of the first frame.
const HEADER_LEN: u64 = MAGIC.len() as u64;
/// crc32c, payload length, offset, producer id, producer epoch, sequence and batch length
/// precede the payload of every frame.
const FRAME_HEAD: usize = 36;
/// A start file is the start offset and its checksum, nothing else.
const START_LEN: usize = 12;
/// How many recent batches per producer and partition a retry is matched against (Kafka's 5).
pub const RECENT_BATCHES: usize = 5;

/// The handle on a log directory, either as its single writer or as one of its readers.
pub struct Log {
    writer: bool,
    parts: Vec<Partition>,
    /// Never read: the exclusive lock lives exactly as long as this open file.
    _lock: Option<File>,
}

/// One record as it was appended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub offset: u64,
    pub payload: Vec<u8>,
}

/// An idempotent producer: its id (at least 1; 0 marks a plain append) and its epoch. A new
/// instance of a producer takes a higher epoch, which fences every older one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Producer {
    pub id: u64,
    pub epoch: u32,
}

/// What [`Log::append_idempotent`] did with a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appended {
    /// The batch's offsets: new ones, or for a duplicate those of the original append.
    pub offsets: Range<u64>,
    /// true when this was an exact retry of a recorded batch: nothing was appended
    pub duplicate: bool,
}

/// What open() repaired, reported to the caller (never silent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TailRepair {
    /// The partition file that was truncated.
    pub path: PathBuf,
    pub partition: u32,
    /// Records left in the file after the repair (its new end offset).
    pub kept_records: u64,
    /// Bytes of the torn tail that were cut off.
    pub dropped_bytes: u64,
}

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
    /// The file does not start with `ONCELOG2`; `found` holds its first bytes (up to 8). An
    /// `ONCELOG` header of another version is a log format this build does not support.
    BadHeader {
        path: PathBuf,
        found: Vec<u8>,
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
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Io { path, source } => {
                write!(f, "log I/O error on {}: {source}", path.display())
            }
            LogError::Corrupt { path, offset, position, reason } => write!(
                f,
                "log {} is corrupt at offset {offset} (byte {position}): {reason}",
                path.display()
            ),
            LogError::OffsetOutOfRange { partition, offset, start, end } => write!(
                f,
                "offset {offset} of partition {partition} is out of range: the log holds {start}..{end}"
            ),
            LogError::NoSuchPartition { partition, partitions } => write!(
                f,
                "partition {partition} does not exist: the log has {partitions} partitions (0..{partitions})"
            ),
            LogError::Locked { path } => write!(
                f,
                "log lock {} is held by another writer: only one writer per log directory",
                path.display()
            ),
            LogError::BadHeader { path, found } if is_other_version(found) => write!(
                f,
                "log {} has header {}: that log format version is not supported (this build reads only ONCELOG2 and converts nothing)",
                path.display(),
                found.escape_ascii()
            ),
            LogError::BadHeader { path, found } => write!(
                f,
                "{} is not a log file: its first 8 bytes are not ONCELOG2 (found \"{}\")",
                path.display(),
                found.escape_ascii()
            ),
            LogError::OutOfOrderSequence { partition, producer, expected, found } => write!(
                f,
                "out-of-order sequence from producer {producer} on partition {partition}: expected base sequence {expected}, got {found}"
            ),
            LogError::ProducerFenced { partition, producer, epoch, current } => write!(
                f,
                "producer {producer} is fenced on partition {partition}: its epoch {epoch} is below the current epoch {current}"
            ),
        }
    }
}

impl std::error::Error for LogError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LogError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Whether a refused header is this log format's header of another version.
fn is_other_version(found: &[u8]) -> bool {
    found.len() == MAGIC.len() && found.starts_with(MAGIC_FAMILY)
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

/// The producer fields every frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FrameMeta {
    /// 0 for a plain append.
    producer: u64,
    epoch: u32,
    /// The batch's base sequence plus the record's index in the batch.
    sequence: u32,
    /// The number of records in the batch; at least 1.
    batch_len: u32,
}

impl FrameMeta {
    /// The fields of record `index` of a batch of `batch_len` records.
    fn of(producer: Option<(Producer, u32)>, index: u32, batch_len: u32) -> FrameMeta {
        let (producer, base_sequence) = producer.unwrap_or((Producer { id: 0, epoch: 0 }, 0));
        FrameMeta {
            producer: producer.id,
            epoch: producer.epoch,
            sequence: base_sequence.wrapping_add(index),
            batch_len,
        }
    }
}

/// One durable batch of an idempotent producer: what a retry must match exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ProducerBatch {
    producer: Producer,
    base_sequence: u32,
    /// At least 1.
    count: u32,
    first_offset: u64,
}

impl ProducerBatch {
    fn offsets(&self) -> Range<u64> {
        self.first_offset..self.first_offset + u64::from(self.count)
    }

    fn last_sequence(&self) -> u32 {
        self.base_sequence.wrapping_add(self.count - 1)
    }
}

/// A producer's state in one partition: its epoch and its recent batches of that epoch,
/// oldest first. Never empty: a producer appears with its first batch.
struct ProducerState {
    epoch: u32,
    batches: VecDeque<ProducerBatch>,
}

/// The writer's idempotence state of one partition, per producer id.
#[derive(Default)]
struct ProducerTable {
    producers: HashMap<u64, ProducerState>,
}

impl ProducerTable {
    /// Records a durable batch. A new epoch forgets the batches of the older one, and only
    /// the last [`RECENT_BATCHES`] batches are kept.
    fn record(&mut self, batch: ProducerBatch) {
        let state = self
            .producers
            .entry(batch.producer.id)
            .or_insert(ProducerState { epoch: batch.producer.epoch, batches: VecDeque::new() });
        if state.epoch != batch.producer.epoch {
            state.epoch = batch.producer.epoch;
            state.batches.clear();
        }
        state.batches.push_back(batch);
        if state.batches.len() > RECENT_BATCHES {
            state.batches.pop_front();
        }
    }

    /// Applies the rules of [`Log::append_idempotent`] to an incoming batch of `count`
    /// records: `Some` is the recorded batch it duplicates, `None` means append it. An empty
    /// batch is only checked for fencing.
    fn check(
        &self,
        partition: u32,
        producer: Producer,
        base_sequence: u32,
        count: u32,
    ) -> Result<Option<ProducerBatch>, LogError> {
        let out_of_order = |expected| LogError::OutOfOrderSequence {
            partition,
            producer: producer.id,
            expected,
            found: base_sequence,
        };
        let Some(state) = self.producers.get(&producer.id) else {
            return if count == 0 || base_sequence == 0 { Ok(None) } else { Err(out_of_order(0)) };
        };
        if producer.epoch < state.epoch {
            return Err(LogError::ProducerFenced {
                partition,
                producer: producer.id,
                epoch: producer.epoch,
                current: state.epoch,
            });
        }
        if count == 0 {
            return Ok(None);
        }
        let expected = if producer.epoch > state.epoch {
            0
        } else {
            let recent = &state.batches;
            if let Some(original) = recent.iter().find(|b| b.base_sequence == base_sequence && b.count == count) {
                return Ok(Some(*original));
            }
            let last = recent.back().expect("a recorded producer has a batch");
            last.last_sequence().wrapping_add(1)
        };
        if base_sequence == expected {
            Ok(None)
        } else {
            Err(out_of_order(expected))
        }
    }
}

/// One partition's files and its in-memory index.
struct Partition {
    number: u32,
    log_path: PathBuf,
    start_path: PathBuf,
    /// `None` only for a reader whose writer has not created the file yet.
    file: Option<File>,
    /// Byte position of the frame of each offset, from offset 0 (retention keeps the bytes).
    index: Vec<u64>,
    /// Byte position just after the last indexed frame; the writer appends here. Always the
    /// end of a complete batch.
    tail: u64,
    start: u64,
    /// Set after a failed write or fsync: the disk state is unknown until a reopen repairs it.
    poisoned: bool,
    /// The writer's idempotent producers; `None` for a reader.
    producers: Option<ProducerTable>,
}

/// How a scan of the bytes after the indexed records ended.
enum ScanEnd {
    /// Every byte belonged to a valid frame of a complete batch.
    Clean,
    /// A torn tail from `position` (absolute, the start of an incomplete batch) to `file_len`.
    Torn { position: u64, file_len: u64 },
    /// Damage before the tail.
    Corrupt { offset: u64, position: u64, reason: String },
}

/// What one frame at a given position turned out to be.
enum Frame {
    Valid { offset: u64, meta: FrameMeta, next: usize },
    Incomplete,
    BadChecksum,
}

impl Partition {
    fn new(dir: &Path, number: u32) -> Partition {
        Partition {
            number,
            log_path: dir.join(format!("partition-{number}.log")),
            start_path: dir.join(format!("partition-{number}.start")),
            file: None,
            index: Vec::new(),
            tail: HEADER_LEN,
            start: 0,
            poisoned: false,
            producers: None,
        }
    }

    fn end(&self) -> u64 {
        self.index.len() as u64
    }

    /// Opens or creates the partition for writing, repairs a torn tail and rebuilds the
    /// producer table. The file is synced either way, so everything indexed is durable.
    fn open_writer(dir: &Path, number: u32) -> Result<(Partition, Option<TailRepair>), LogError> {
        let mut part = Partition::new(dir, number);
        part.producers = Some(ProducerTable::default());
        if !part.log_path.exists() {
            create_log_file(dir, &part.log_path)?;
        }
        let file = OpenOptions::new().read(true).write(true).open(&part.log_path).map_err(io_err(&part.log_path))?;
        check_header(&file, &part.log_path)?;
        part.file = Some(file);
        let repair = match part.scan_tail()? {
            ScanEnd::Clean => None,
            ScanEnd::Torn { position, file_len } => Some(part.truncate(position, file_len)?),
            ScanEnd::Corrupt { offset, position, reason } => return Err(part.corrupt(offset, position, reason)),
        };
        if repair.is_none() {
            // A crashed writer may have left its last batch in the page cache only; a retry
            // must not be told that batch is durable before it is.
            let file = part.file.as_ref().expect("opened above");
            file.sync_data().map_err(io_err(&part.log_path))?;
        }
        part.start = read_start(&part.start_path)?;
        part.check_start_within_end()?;
        Ok((part, repair))
    }

    /// Cuts a torn tail off the file, durably, and describes what was cut.
    fn truncate(&mut self, position: u64, file_len: u64) -> Result<TailRepair, LogError> {
        let file = self.file.as_ref().expect("the writer opened the file before scanning it");
        file.set_len(position).map_err(io_err(&self.log_path))?;
        // sync_all, not sync_data: the new length is metadata that must survive a crash.
        file.sync_all().map_err(io_err(&self.log_path))?;
        Ok(TailRepair {
            path: self.log_path.clone(),
            partition: self.number,
            kept_records: self.end(),
            dropped_bytes: file_len - position,
        })
    }

    /// Brings a reader up to date: the start first, then the records, so that every record
    /// the writer retained below that start was written before we scan and gets indexed.
    fn refresh(&mut self) -> Result<(), LogError> {
        let start = read_start(&self.start_path)?;
        if self.file.is_none() && !self.open_existing()? {
            self.start = start;
            return self.check_start_within_end();
        }
        self.index_new_records()?;
        if start < self.start {
            let reason = format!("the start moved backwards from {} to {start}", self.start);
            return Err(LogError::Corrupt { path: self.start_path.clone(), offset: start, position: 0, reason });
        }
        self.start = start;
        self.check_start_within_end()
    }

    /// Opens the partition file for a reader; `false` if the writer has not created it yet.
    fn open_existing(&mut self) -> Result<bool, LogError> {
        let file = match File::open(&self.log_path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_err(&self.log_path)(e)),
        };
        check_header(&file, &self.log_path)?;
        self.file = Some(file);
        Ok(true)
    }

    /// Indexes what a live writer appended since the last refresh; a torn tail is left for
    /// later. Damage is re-read once before it is reported: a reader racing a `write` can see
    /// a later page of it before an earlier one, but never twice at the same place.
    fn index_new_records(&mut self) -> Result<(), LogError> {
        let mut suspect = None;
        loop {
            match self.scan_tail()? {
                ScanEnd::Clean | ScanEnd::Torn { .. } => return Ok(()),
                ScanEnd::Corrupt { offset, position, reason } => {
                    if suspect == Some(position) {
                        return Err(self.corrupt(offset, position, reason));
                    }
                    suspect = Some(position);
                }
            }
        }
    }

    /// Reads every byte after the indexed frames, indexes the complete batches, records the
    /// idempotent ones in the writer's producer table and classifies the rest. Never
    /// modifies the file.
    fn scan_tail(&mut self) -> Result<ScanEnd, LogError> {
        let file = self.file.as_ref().expect("scan_tail needs an open file");
        let file_len = file.metadata().map_err(io_err(&self.log_path))?.len();
        if file_len < self.tail {
            let reason = format!("the file shrank to {file_len} bytes below indexed records");
            return Ok(ScanEnd::Corrupt { offset: self.end(), position: self.tail, reason });
        }
        let bytes = read_from(file, self.tail).map_err(io_err(&self.log_path))?;
        let mut batches = Vec::new();
        let (valid_len, end) = scan(&bytes, self.tail, &mut self.index, &mut batches);
        self.tail += valid_len as u64;
        if let Some(table) = self.producers.as_mut() {
            batches.into_iter().for_each(|batch| table.record(batch));
        }
        Ok(end)
    }

    /// Checks an idempotent batch against the producer table, then appends it unless it is
    /// a duplicate.
    fn append_idempotent(
        &mut self,
        producer: Producer,
        base_sequence: u32,
        payloads: &[&[u8]],
    ) -> Result<Appended, LogError> {
        let count = batch_len(payloads);
        let table = self.producers.as_ref().expect("the writer keeps a producer table");
        if let Some(original) = table.check(self.number, producer, base_sequence, count)? {
            return Ok(Appended { offsets: original.offsets(), duplicate: true });
        }
        let offsets = self.append(payloads, Some((producer, base_sequence)))?;
        if count > 0 {
            let table = self.producers.as_mut().expect("checked above");
            table.record(ProducerBatch { producer, base_sequence, count, first_offset: offsets.start });
        }
        Ok(Appended { offsets, duplicate: false })
    }

    /// Writes the batch's frames at the tail, syncs once and only then indexes them.
    /// `producer` is the idempotent producer and the batch's base sequence, if any.
    fn append(&mut self, payloads: &[&[u8]], producer: Option<(Producer, u32)>) -> Result<Range<u64>, LogError> {
        let first = self.end();
        let count = batch_len(payloads);
        if count == 0 {
            return Ok(first..first);
        }
        if self.poisoned {
            let msg = "an earlier append failed, so the file's tail is unknown: reopen the log";
            return Err(io_err(&self.log_path)(io::Error::other(msg)));
        }
        let mut bytes = Vec::new();
        let mut positions = Vec::new();
        for (i, payload) in (0..count).zip(payloads) {
            positions.push(self.tail + bytes.len() as u64);
            let meta = FrameMeta::of(producer, i, count);
            encode_frame(first + u64::from(i), meta, payload, &mut bytes);
        }
        let file = self.file.as_ref().expect("the writer always has its file open");
        let written = file.write_all_at(&bytes, self.tail).and_then(|()| file.sync_data());
        if let Err(e) = written {
            self.poisoned = true;
            return Err(io_err(&self.log_path)(e));
        }
        self.tail += bytes.len() as u64;
        self.index.extend(positions);
        Ok(first..self.end())
    }

    /// Reads one indexed record and re-verifies its frame.
    fn read_record(&self, offset: u64) -> Result<Record, LogError> {
        let at = offset as usize;
        let position = self.index[at];
        let next = self.index.get(at + 1).copied().unwrap_or(self.tail);
        let mut bytes = vec![0; (next - position) as usize];
        let file = self.file.as_ref().expect("an indexed record implies an open file");
        file.read_exact_at(&mut bytes, position).map_err(io_err(&self.log_path))?;
        match parse_frame(&bytes, 0) {
            Frame::Valid { offset: found, next, .. } if found == offset && next == bytes.len() => {
                let payload = bytes.split_off(FRAME_HEAD);
                Ok(Record { offset, payload })
            }
            _ => Err(self.corrupt(offset, position, "the record changed after it was indexed".into())),
        }
    }

    /// A start past the end can only come from damage (retention never passes the end).
    fn check_start_within_end(&self) -> Result<(), LogError> {
        if self.start <= self.end() {
            return Ok(());
        }
        let reason = format!("the start {} is past the end {} of the log", self.start, self.end());
        Err(LogError::Corrupt { path: self.start_path.clone(), offset: self.start, position: 0, reason })
    }

    fn corrupt(&self, offset: u64, position: u64, reason: String) -> LogError {
        LogError::Corrupt { path: self.log_path.clone(), offset, position, reason }
    }
}

/// The number of records of a batch, which its frames store as a u32.
fn batch_len(payloads: &[&[u8]]) -> u32 {
    let len = u32::try_from(payloads.len());
    assert!(len.is_ok(), "a batch must hold at most u32::MAX records");
    len.expect("checked above")
}

/// The batch a scan has seen the first frames of, but not yet all of them.
struct OpenBatch {
    /// The fields of its first frame.
    first: FrameMeta,
    /// Byte position (relative to the scanned bytes) of its first frame.
    at: usize,
    /// Absolute byte positions of its frames seen so far.
    positions: Vec<u64>,
}

impl OpenBatch {
    /// Why a valid frame cannot be the next record of this batch, if it cannot.
    fn rejects(&self, meta: &FrameMeta) -> Option<String> {
        let first = &self.first;
        let seen = self.positions.len() as u32;
        let fits = meta.producer == first.producer
            && meta.epoch == first.epoch
            && meta.batch_len == first.batch_len
            && meta.sequence == first.sequence.wrapping_add(seen);
        (!fits).then(|| {
            format!(
                "the frame there does not continue the batch of {} records begun {seen} records before it",
                first.batch_len
            )
        })
    }
}

/// Scans `bytes` (which start at absolute byte `base`). Each complete batch of valid frames
/// with the next expected offsets has its frames' positions pushed onto `index` and, if it
/// came from an idempotent producer, is pushed onto `batches`. Returns how many bytes were
/// complete batches and how the scan ended.
fn scan(bytes: &[u8], base: u64, index: &mut Vec<u64>, batches: &mut Vec<ProducerBatch>) -> (usize, ScanEnd) {
    let mut pos = 0;
    let mut open: Option<OpenBatch> = None;
    loop {
        let pending = open.as_ref().map_or(0, |batch| batch.positions.len());
        let expected = (index.len() + pending) as u64;
        let valid = open.as_ref().map_or(pos, |batch| batch.at);
        if pos == bytes.len() && open.is_none() {
            return (pos, ScanEnd::Clean);
        }
        let why = match parse_frame(bytes, pos) {
            _ if pos == bytes.len() => "the file ends inside a batch".to_string(),
            Frame::Valid { offset, meta, next } if offset == expected => {
                let rejected = match &open {
                    Some(batch) => batch.rejects(&meta),
                    None if meta.batch_len == 0 => Some("the frame there claims a batch of 0 records".into()),
                    None => None,
                };
                match rejected {
                    Some(why) => why,
                    None => {
                        let batch =
                            open.get_or_insert_with(|| OpenBatch { first: meta, at: pos, positions: Vec::new() });
                        batch.positions.push(base + pos as u64);
                        pos = next;
                        if batch.positions.len() == batch.first.batch_len as usize {
                            let done = open.take().expect("inserted above");
                            complete(done, index, batches);
                        }
                        continue;
                    }
                }
            }
            Frame::Valid { offset, .. } => format!("the frame there carries offset {offset}"),
            Frame::Incomplete => "the frame runs past the end of the file".to_string(),
            Frame::BadChecksum => "checksum mismatch".to_string(),
        };
        let end = match find_later_frame(bytes, pos, expected) {
            None => ScanEnd::Torn { position: base + valid as u64, file_len: base + bytes.len() as u64 },
            Some((offset, at)) => ScanEnd::Corrupt {
                offset: expected,
                position: base + pos as u64,
                reason: format!("{why}, yet record {offset} follows intact at byte {}", base + at as u64),
            },
        };
        return (valid, end);
    }
}

/// Indexes a batch whose frames were all found and keeps it if it is idempotent.
fn complete(batch: OpenBatch, index: &mut Vec<u64>, batches: &mut Vec<ProducerBatch>) {
    let first = batch.first;
    if first.producer != 0 {
        batches.push(ProducerBatch {
            producer: Producer { id: first.producer, epoch: first.epoch },
            base_sequence: first.sequence,
            count: first.batch_len,
            first_offset: index.len() as u64,
        });
    }
    index.extend(batch.positions);
}

/// Looks, byte by byte from `from`, for a valid frame whose offset could follow `expected`:
/// above it, and no further above than the remaining bytes could hold frames. Such a frame
/// proves the damage is not a torn tail, because a crash only cuts the end of the last append.
fn find_later_frame(bytes: &[u8], from: usize, expected: u64) -> Option<(u64, usize)> {
    let limit = expected + ((bytes.len() - from) / FRAME_HEAD) as u64 + 1;
    (from..bytes.len()).find_map(|at| {
        let head = bytes.get(at..at + FRAME_HEAD)?;
        let offset = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
        if offset <= expected || offset > limit {
            return None;
        }
        match parse_frame(bytes, at) {
            Frame::Valid { offset, .. } => Some((offset, at)),
            _ => None,
        }
    })
}

/// Decodes and checks the frame at `pos` of `bytes`.
fn parse_frame(bytes: &[u8], pos: usize) -> Frame {
    let rest = &bytes[pos..];
    if rest.len() < FRAME_HEAD {
        return Frame::Incomplete;
    }
    let u32_at = |at: usize| u32::from_le_bytes(rest[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(rest[at..at + 8].try_into().expect("8 bytes"));
    let crc = u32_at(0);
    let len = u32_at(4) as usize;
    if rest.len() - FRAME_HEAD < len {
        return Frame::Incomplete;
    }
    let checked = &rest[4..FRAME_HEAD + len];
    if crc32c::crc32c(checked) != crc {
        return Frame::BadChecksum;
    }
    Frame::Valid {
        offset: u64_at(8),
        meta: FrameMeta { producer: u64_at(16), epoch: u32_at(24), sequence: u32_at(28), batch_len: u32_at(32) },
        next: pos + FRAME_HEAD + len,
    }
}

/// Appends the frame of one record to `out`.
fn encode_frame(offset: u64, meta: FrameMeta, payload: &[u8], out: &mut Vec<u8>) {
    let len = u32::try_from(payload.len());
    assert!(len.is_ok(), "a log payload must fit the frame's u32 length field");
    let mut checked = Vec::with_capacity(FRAME_HEAD - 4 + payload.len());
    checked.extend_from_slice(&len.expect("checked above").to_le_bytes());
    checked.extend_from_slice(&offset.to_le_bytes());
    checked.extend_from_slice(&meta.producer.to_le_bytes());
    checked.extend_from_slice(&meta.epoch.to_le_bytes());
    checked.extend_from_slice(&meta.sequence.to_le_bytes());
    checked.extend_from_slice(&meta.batch_len.to_le_bytes());
    checked.extend_from_slice(payload);
    out.extend_from_slice(&crc32c::crc32c(&checked).to_le_bytes());
    out.extend_from_slice(&checked);
}

/// Every byte of `file` from `from` to its current end (the end may grow as we read).
fn read_from(mut file: &File, from: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(from))?;
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
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

/// Creates a partition file holding just the header. It appears by rename, complete, so a
/// crash can never leave a file with a partial header (a short file is a bad header).
fn create_log_file(dir: &Path, path: &Path) -> Result<(), LogError> {
    replace_file(dir, path, MAGIC)
}

/// A partition file must start with our magic; we never repair, convert or overwrite
/// anything else (an older format version included).
fn check_header(file: &File, path: &Path) -> Result<(), LogError> {
    let mut header = [0u8; MAGIC.len()];
    let mut got = 0;
    while got < header.len() {
        match file.read_at(&mut header[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(path)(e)),
        }
    }
    if &header == MAGIC {
        return Ok(());
    }
    Err(LogError::BadHeader { path: path.to_path_buf(), found: header[..got].to_vec() })
}

/// Reads a start file; a missing one means nothing was ever retained.
fn read_start(path: &Path) -> Result<u64, LogError> {
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
fn write_start(path: &Path, start: u64) -> Result<(), LogError> {
    let mut bytes = start.to_le_bytes().to_vec();
    bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
    let dir = path.parent().expect("a start file lives in the log directory");
    replace_file(dir, path, &bytes)
}

/// Writes `bytes` to a temp file, syncs it, renames it over `path` and syncs the directory,
/// so the rename itself survives a crash.
fn replace_file(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), LogError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let file = File::create(&tmp).map_err(io_err(&tmp))?;
    file.write_all_at(bytes, 0).map_err(io_err(&tmp))?;
    file.sync_all().map_err(io_err(&tmp))?;
    fs::rename(&tmp, path).map_err(io_err(path))?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(dir))
}

/// Wraps an I/O error with the path it concerns.
fn io_err(path: &Path) -> impl FnOnce(io::Error) -> LogError + '_ {
    move |source| LogError::Io { path: path.to_path_buf(), source }
}
