//! One partition's file and in-memory index: opening it as the writer (header check, torn-tail
//! repair, producer table rebuild), durable appends and checked reads. A reader's refresh is
//! in `reader.rs`.

use super::error::{io_err, LogError};
use super::frame::{encode_frame, parse_frame, scan, Frame, FrameMeta, ScanEnd, FRAME_HEAD};
use super::header::{HEADER_LEN, MAGIC};
use super::producer::{Appended, Producer, ProducerBatch, ProducerTable};
use super::retention::{read_start, replace_file};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

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

/// One partition's files and its in-memory index. The `pub(super)` fields are those a reader's
/// refresh (`reader.rs`) and `Log` (`mod.rs`) read or move; the rest only this file touches.
pub(super) struct Partition {
    number: u32,
    pub(super) log_path: PathBuf,
    pub(super) start_path: PathBuf,
    /// `None` only for a reader whose writer has not created the file yet.
    pub(super) file: Option<File>,
    /// Byte position of the frame of each offset, from offset 0 (retention keeps the bytes).
    index: Vec<u64>,
    /// Byte position just after the last indexed frame; the writer appends here. Always the
    /// end of a complete batch.
    tail: u64,
    pub(super) start: u64,
    /// Set after a failed write or fsync: the disk state is unknown until a reopen repairs it.
    poisoned: bool,
    /// The writer's idempotent producers; `None` for a reader.
    producers: Option<ProducerTable>,
}

impl Partition {
    pub(super) fn new(dir: &Path, number: u32) -> Partition {
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

    pub(super) fn end(&self) -> u64 {
        self.index.len() as u64
    }

    /// Opens or creates the partition for writing, repairs a torn tail and rebuilds the
    /// producer table. The file is synced either way, so everything indexed is durable.
    pub(super) fn open_writer(dir: &Path, number: u32) -> Result<(Partition, Option<TailRepair>), LogError> {
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

    /// Reads every byte after the indexed frames, indexes the complete batches, records the
    /// idempotent ones in the writer's producer table and classifies the rest. Never
    /// modifies the file.
    pub(super) fn scan_tail(&mut self) -> Result<ScanEnd, LogError> {
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
    pub(super) fn append_idempotent(
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
    pub(super) fn append(
        &mut self,
        payloads: &[&[u8]],
        producer: Option<(Producer, u32)>,
    ) -> Result<Range<u64>, LogError> {
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
    pub(super) fn read_record(&self, offset: u64) -> Result<Record, LogError> {
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
    pub(super) fn check_start_within_end(&self) -> Result<(), LogError> {
        if self.start <= self.end() {
            return Ok(());
        }
        let reason = format!("the start {} is past the end {} of the log", self.start, self.end());
        Err(LogError::Corrupt { path: self.start_path.clone(), offset: self.start, position: 0, reason })
    }

    pub(super) fn corrupt(&self, offset: u64, position: u64, reason: String) -> LogError {
        LogError::Corrupt { path: self.log_path.clone(), offset, position, reason }
    }
}

/// The number of records of a batch, which its frames store as a u32.
fn batch_len(payloads: &[&[u8]]) -> u32 {
    let len = u32::try_from(payloads.len());
    assert!(len.is_ok(), "a batch must hold at most u32::MAX records");
    len.expect("checked above")
}

/// Every byte of `file` from `from` to its current end (the end may grow as we read).
fn read_from(mut file: &File, from: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(from))?;
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Creates a partition file holding just the header. It appears by rename, complete, so a
/// crash can never leave a file with a partial header (a short file is a bad header).
fn create_log_file(dir: &Path, path: &Path) -> Result<(), LogError> {
    replace_file(dir, path, MAGIC)
}

/// A partition file must start with our magic; we never repair, convert or overwrite
/// anything else (an older format version included).
pub(super) fn check_header(file: &File, path: &Path) -> Result<(), LogError> {
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
