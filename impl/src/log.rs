//! The retained, partitioned log on disk: one checksummed append-only file per partition, a
//! crash-safe retained start per partition, torn-tail repair on open, and readers that follow
//! a live writer from another process.
//!
//! # Layout
//!
//! `dir/partition-{N}.log` starts with the 8-byte header `ONCELOG1`, followed by frames:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | crc32c (LE) of every byte after it in the frame |
//! | 4 | payload length (LE) |
//! | 8 | the record's offset (LE); offsets are dense 0, 1, 2, ... per partition |
//! | n | payload |
//!
//! `dir/partition-{N}.start` holds the retained log start: 8 bytes LE and their crc32c (LE).
//! It is replaced atomically (temp file, fsync, rename, fsync of the directory); a missing file
//! means start 0. `dir/writer.lock` is locked exclusively by the single writer.
//!
//! # Recovery
//!
//! A frame that runs past the end of the file, fails its checksum or carries an unexpected
//! offset ends the valid prefix. If a valid frame with a later plausible offset follows it,
//! records were damaged in the middle of the log: that is [`LogError::Corrupt`], never a
//! silent skip. Otherwise it is a torn tail (an append cut short by a crash): the writer
//! truncates it and reports a [`TailRepair`]; a reader treats it as not yet written.
//!
//! The classification assumes appends reach the file in order, which holds for process
//! crashes (a killed writer leaves a prefix of its last `write`). After a power loss a file
//! system may persist the pages of one unacknowledged batch out of order; that surfaces as
//! `Corrupt`, which errs on the side of a loud stop rather than a silent loss.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The first bytes of every partition file; anything else is not ours to touch.
const MAGIC: &[u8; 8] = b"ONCELOG1";
/// Byte position of the first frame.
const HEADER_LEN: u64 = MAGIC.len() as u64;
/// crc32c, payload length and offset precede the payload of every frame.
const FRAME_HEAD: usize = 16;
/// A start file is the start offset and its checksum, nothing else.
const START_LEN: usize = 12;

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
    BadHeader {
        path: PathBuf,
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
            LogError::BadHeader { path } => write!(
                f,
                "{} is not a log file: its first 8 bytes are not ONCELOG1",
                path.display()
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
    /// Every torn tail found is truncated and returned as a [`TailRepair`]; damage before
    /// the tail is [`LogError::Corrupt`] and nothing is modified.
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
        Ok((
            Log {
                writer: true,
                parts,
                _lock: Some(lock),
            },
            repairs,
        ))
    }

    /// Opens `dir` for reading only, possibly while another process appends to it.
    ///
    /// Never modifies a file and takes no lock. A torn or incomplete tail is treated as not
    /// yet written, because it may be a record being appended right now; damage before the
    /// tail is [`LogError::Corrupt`]. A partition file that does not exist yet reads as empty
    /// until the writer creates it.
    pub fn open_reader(dir: &Path, partitions: u32) -> Result<Log, LogError> {
        let mut parts = Vec::new();
        for number in 0..partitions {
            let mut part = Partition::new(dir, number);
            part.refresh()?;
            parts.push(part);
        }
        Ok(Log {
            writer: false,
            parts,
            _lock: None,
        })
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
        let range = self.append_all(partition, &[payload])?;
        Ok(range.start)
    }

    /// Appends several records to `partition` with one fsync and returns their offsets.
    ///
    /// An `Ok` means every record of the batch is durable, exactly as for [`Log::append`].
    /// A crash before the `Ok` may keep any prefix of the batch (it is then a torn tail).
    pub fn append_batch(
        &mut self,
        partition: u32,
        payloads: &[Vec<u8>],
    ) -> Result<Range<u64>, LogError> {
        let slices: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        self.append_all(partition, &slices)
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
            return Err(LogError::OffsetOutOfRange {
                partition,
                offset,
                start: part.start,
                end: part.end(),
            });
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
    /// An `Ok` means the new start is durable.
    pub fn retain_before(&mut self, partition: u32, offset: u64) -> Result<u64, LogError> {
        assert!(
            self.writer,
            "retain_before on a log opened with open_reader: only the writer moves the start"
        );
        let part = self.part(partition)?;
        if offset > part.end() {
            return Err(LogError::OffsetOutOfRange {
                partition,
                offset,
                start: part.start,
                end: part.end(),
            });
        }
        if offset > part.start {
            write_start(&part.start_path, offset)?;
            part.start = offset;
        }
        Ok(part.start)
    }

    /// The shared body of `append` and `append_batch`.
    fn append_all(&mut self, partition: u32, payloads: &[&[u8]]) -> Result<Range<u64>, LogError> {
        assert!(
            self.writer,
            "append on a log opened with open_reader: only the writer appends"
        );
        self.part(partition)?.append(payloads)
    }

    /// The partition, checked against the partition count.
    fn part(&mut self, partition: u32) -> Result<&mut Partition, LogError> {
        let partitions = self.partitions();
        self.parts
            .get_mut(partition as usize)
            .ok_or(LogError::NoSuchPartition {
                partition,
                partitions,
            })
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

/// One partition's files and its in-memory index.
struct Partition {
    number: u32,
    log_path: PathBuf,
    start_path: PathBuf,
    /// `None` only for a reader whose writer has not created the file yet.
    file: Option<File>,
    /// Byte position of the frame of each offset, from offset 0 (retention keeps the bytes).
    index: Vec<u64>,
    /// Byte position just after the last indexed frame; the writer appends here.
    tail: u64,
    start: u64,
    /// Set after a failed write or fsync: the disk state is unknown until a reopen repairs it.
    poisoned: bool,
}

/// How a scan of the bytes after the indexed records ended.
enum ScanEnd {
    /// Every byte belonged to a valid frame.
    Clean,
    /// A torn tail from `position` (absolute) to `file_len`.
    Torn { position: u64, file_len: u64 },
    /// Damage before the tail.
    Corrupt {
        offset: u64,
        position: u64,
        reason: String,
    },
}

/// What one frame at a given position turned out to be.
enum Frame {
    Valid { offset: u64, next: usize },
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
        }
    }

    fn end(&self) -> u64 {
        self.index.len() as u64
    }

    /// Opens or creates the partition for writing and repairs a torn tail.
    fn open_writer(dir: &Path, number: u32) -> Result<(Partition, Option<TailRepair>), LogError> {
        let mut part = Partition::new(dir, number);
        if !part.log_path.exists() {
            create_log_file(dir, &part.log_path)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&part.log_path)
            .map_err(io_err(&part.log_path))?;
        check_header(&file, &part.log_path)?;
        part.file = Some(file);
        let repair = match part.scan_tail()? {
            ScanEnd::Clean => None,
            ScanEnd::Torn { position, file_len } => Some(part.truncate(position, file_len)?),
            ScanEnd::Corrupt {
                offset,
                position,
                reason,
            } => return Err(part.corrupt(offset, position, reason)),
        };
        part.start = read_start(&part.start_path)?;
        part.check_start_within_end()?;
        Ok((part, repair))
    }

    /// Cuts a torn tail off the file, durably, and describes what was cut.
    fn truncate(&mut self, position: u64, file_len: u64) -> Result<TailRepair, LogError> {
        let file = self
            .file
            .as_ref()
            .expect("the writer opened the file before scanning it");
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
            return Err(LogError::Corrupt {
                path: self.start_path.clone(),
                offset: start,
                position: 0,
                reason,
            });
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
                ScanEnd::Corrupt {
                    offset,
                    position,
                    reason,
                } => {
                    if suspect == Some(position) {
                        return Err(self.corrupt(offset, position, reason));
                    }
                    suspect = Some(position);
                }
            }
        }
    }

    /// Reads every byte after the indexed frames, indexes the valid ones and classifies the
    /// rest. Never modifies the file.
    fn scan_tail(&mut self) -> Result<ScanEnd, LogError> {
        let file = self.file.as_ref().expect("scan_tail needs an open file");
        let file_len = file.metadata().map_err(io_err(&self.log_path))?.len();
        if file_len < self.tail {
            let reason = format!("the file shrank to {file_len} bytes below indexed records");
            return Ok(ScanEnd::Corrupt {
                offset: self.end(),
                position: self.tail,
                reason,
            });
        }
        let bytes = read_from(file, self.tail).map_err(io_err(&self.log_path))?;
        let (valid_len, end) = scan(&bytes, self.tail, &mut self.index);
        self.tail += valid_len as u64;
        Ok(end)
    }

    /// Writes the frames at the tail, syncs once and only then indexes them.
    fn append(&mut self, payloads: &[&[u8]]) -> Result<Range<u64>, LogError> {
        let first = self.end();
        if payloads.is_empty() {
            return Ok(first..first);
        }
        if self.poisoned {
            let msg = "an earlier append failed, so the file's tail is unknown: reopen the log";
            return Err(io_err(&self.log_path)(io::Error::other(msg)));
        }
        let mut bytes = Vec::new();
        let mut positions = Vec::new();
        for (i, payload) in payloads.iter().enumerate() {
            positions.push(self.tail + bytes.len() as u64);
            encode_frame(first + i as u64, payload, &mut bytes);
        }
        let file = self
            .file
            .as_ref()
            .expect("the writer always has its file open");
        let written = file
            .write_all_at(&bytes, self.tail)
            .and_then(|()| file.sync_data());
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
        let file = self
            .file
            .as_ref()
            .expect("an indexed record implies an open file");
        file.read_exact_at(&mut bytes, position)
            .map_err(io_err(&self.log_path))?;
        match parse_frame(&bytes, 0) {
            Frame::Valid {
                offset: found,
                next,
            } if found == offset && next == bytes.len() => {
                let payload = bytes.split_off(FRAME_HEAD);
                Ok(Record { offset, payload })
            }
            _ => Err(self.corrupt(
                offset,
                position,
                "the record changed after it was indexed".into(),
            )),
        }
    }

    /// A start past the end can only come from damage (retention never passes the end).
    fn check_start_within_end(&self) -> Result<(), LogError> {
        if self.start <= self.end() {
            return Ok(());
        }
        let reason = format!(
            "the start {} is past the end {} of the log",
            self.start,
            self.end()
        );
        Err(LogError::Corrupt {
            path: self.start_path.clone(),
            offset: self.start,
            position: 0,
            reason,
        })
    }

    fn corrupt(&self, offset: u64, position: u64, reason: String) -> LogError {
        LogError::Corrupt {
            path: self.log_path.clone(),
            offset,
            position,
            reason,
        }
    }
}

/// Scans `bytes` (which start at absolute byte `base`), pushing the position of each valid
/// frame with the next expected offset onto `index`. Returns how many bytes were valid and
/// how the scan ended.
fn scan(bytes: &[u8], base: u64, index: &mut Vec<u64>) -> (usize, ScanEnd) {
    let mut pos = 0;
    loop {
        let expected = index.len() as u64;
        if pos == bytes.len() {
            return (pos, ScanEnd::Clean);
        }
        let why = match parse_frame(bytes, pos) {
            Frame::Valid { offset, next } if offset == expected => {
                index.push(base + pos as u64);
                pos = next;
                continue;
            }
            Frame::Valid { offset, .. } => format!("the frame there carries offset {offset}"),
            Frame::Incomplete => "the frame runs past the end of the file".to_string(),
            Frame::BadChecksum => "checksum mismatch".to_string(),
        };
        let end = match find_later_frame(bytes, pos, expected) {
            None => ScanEnd::Torn {
                position: base + pos as u64,
                file_len: base + bytes.len() as u64,
            },
            Some((offset, at)) => ScanEnd::Corrupt {
                offset: expected,
                position: base + pos as u64,
                reason: format!(
                    "{why}, yet record {offset} follows intact at byte {}",
                    base + at as u64
                ),
            },
        };
        return (pos, end);
    }
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
    let crc = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes"));
    let len = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes")) as usize;
    if rest.len() - FRAME_HEAD < len {
        return Frame::Incomplete;
    }
    let checked = &rest[4..FRAME_HEAD + len];
    if crc32c::crc32c(checked) != crc {
        return Frame::BadChecksum;
    }
    let offset = u64::from_le_bytes(rest[8..16].try_into().expect("8 bytes"));
    Frame::Valid {
        offset,
        next: pos + FRAME_HEAD + len,
    }
}

/// Appends the frame of one record to `out`.
fn encode_frame(offset: u64, payload: &[u8], out: &mut Vec<u8>) {
    let len = u32::try_from(payload.len());
    assert!(
        len.is_ok(),
        "a log payload must fit the frame's u32 length field"
    );
    let mut checked = Vec::with_capacity(12 + payload.len());
    checked.extend_from_slice(&len.expect("checked above").to_le_bytes());
    checked.extend_from_slice(&offset.to_le_bytes());
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
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_err(&path))?;
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

/// A partition file must start with our magic; we never repair or overwrite anything else.
fn check_header(file: &File, path: &Path) -> Result<(), LogError> {
    let mut header = [0u8; MAGIC.len()];
    match file.read_exact_at(&mut header, 0) {
        Ok(()) if &header == MAGIC => Ok(()),
        Ok(()) => Err(LogError::BadHeader {
            path: path.to_path_buf(),
        }),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(LogError::BadHeader {
            path: path.to_path_buf(),
        }),
        Err(e) => Err(io_err(path)(e)),
    }
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
        return Err(corrupt(
            0,
            bytes.len() as u64,
            "a start file holds exactly 12 bytes",
        ));
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
    let dir = path
        .parent()
        .expect("a start file lives in the log directory");
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
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Wraps an I/O error with the path it concerns.
fn io_err(path: &Path) -> impl FnOnce(io::Error) -> LogError + '_ {
    move |source| LogError::Io {
        path: path.to_path_buf(),
        source,
    }
}
