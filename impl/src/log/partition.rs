//! One partition's files and in-memory index: opening it as the writer (header check, the
//! acknowledged length checked against the file, an unacknowledged tail cut, the producer
//! table rebuilt), durable acknowledged appends and checked reads. A reader's refresh is in
//! `reader.rs`.

use super::ack::{create_ack_file, inspect_ack, open_ack, read_ack, write_ack, Ack, AckFile};
use super::error::{io_err, LogError};
use super::frame::{encode_frame, parse_frame, records, scan, Frame, FrameMeta, Hole, ScanEnd, FRAME_HEAD, NO_FRAME};
use super::header::{check_header_bytes, Owner, HEADER_LEN, MAGIC, MAGIC_V2};
use super::producer::{Appended, Producer, ProducerBatch, ProducerTable};
use super::retention::read_start;
use super::storage::{OpenMode, Storage, StorageFile};
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One record as it was appended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub offset: u64,
    pub payload: Vec<u8>,
}

/// What the writer's open changed past the acknowledged end, reported to the caller (never
/// silent): a torn tail cut, and whole batches the acknowledgement record did not cover kept
/// and acknowledged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TailRepair {
    /// The partition file concerned.
    pub path: PathBuf,
    pub partition: u32,
    /// Records in the file after the open (its new end offset).
    pub kept_records: u64,
    /// Bytes of the torn tail that were cut off (0: none).
    pub dropped_bytes: u64,
    /// Records of whole, checksum-valid batches past the acknowledged end that the open kept
    /// and acknowledged (empty: none). The acknowledgement record is a lower bound: a slot
    /// damaged or torn after the batch was synced must not cost the batch, and a producer
    /// that got no acknowledgement retries through its producer id, which finds them.
    pub adopted: Range<u64>,
}

/// Records of a partition that cannot be read: acknowledged records lost at the end (the
/// intact records end at `offset`, byte `position`, below the `acked_end` the acknowledgement
/// record holds; `intact_after` is 0), or a damaged range `offset..end` (from byte
/// `position`) with `intact_after` intact records after it, which readers do not pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub offset: u64,
    pub end: u64,
    pub position: u64,
    pub acked_end: u64,
    pub intact_after: u64,
    pub reason: String,
}

/// How a writer treats the acknowledgement record (`partition-N.ack`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriterMode {
    /// On open, whole batches past the acknowledged length are kept and acknowledged, an
    /// incomplete one is cut (both reported), and records missing or damaged make the
    /// partition damaged (appends refused, nothing modified); every append updates the record
    /// before it returns.
    Checked,
    /// Test only, the trap: on open the record is ignored (the file alone decides, torn-tail
    /// repair as before the record existed) and then made to say what the file holds, so a
    /// log that lost its tail grows again at its new end.
    Unchecked,
    /// Benchmark only: as `Checked`, but appends leave the record alone. They are durable yet
    /// not acknowledged until the next open, which keeps their whole batches (the record is a
    /// lower bound); this measures what the record costs.
    WithoutAckRecord,
    /// Test only, a deliberately broken writer: as `Checked`, but an append writes the record
    /// (and syncs it) without syncing its data first, so it acknowledges records a power cut
    /// can still take. The power-cut runs must catch it.
    AckBeforeDataSync,
}

impl WriterMode {
    /// Whether an append syncs its data before it writes the acknowledgement record.
    fn syncs_data_before_ack(self) -> bool {
        match self {
            WriterMode::Checked | WriterMode::Unchecked | WriterMode::WithoutAckRecord => true,
            WriterMode::AckBeforeDataSync => false,
        }
    }
}

/// One partition's files and its in-memory index. The `pub(super)` fields are those a reader's
/// refresh (`reader.rs`) and `Log` (`mod.rs`) read or move; the rest only this file touches.
pub(super) struct Partition {
    number: u32,
    /// The log and partition every file of this partition must name in its header.
    pub(super) owner: Owner,
    pub(super) storage: Storage,
    pub(super) log_path: PathBuf,
    pub(super) start_path: PathBuf,
    pub(super) ack_path: PathBuf,
    /// Opened by the writer's open and by a reader's first refresh.
    pub(super) file: Option<StorageFile>,
    /// The writer's open acknowledgement file.
    ack_file: Option<StorageFile>,
    /// Byte position of the frame of each offset, from offset 0 (retention keeps the bytes);
    /// `NO_FRAME` for an offset in one of `holes`.
    pub(super) index: Vec<u64>,
    /// Damaged ranges with intact batches after them, and recorded gaps, in offset order.
    pub(super) holes: Vec<Hole>,
    /// Byte position just after the last indexed frame; the writer appends here. Always the
    /// end of a complete batch.
    pub(super) tail: u64,
    pub(super) start: u64,
    /// The acknowledged state last read (reader) or written (writer).
    pub(super) ack: Ack,
    /// Set when acknowledged records are missing or damaged: the writer refuses to append.
    pub(super) damage: Option<Damage>,
    mode: WriterMode,
    /// Set after a failed write or fsync: the disk state is unknown until a reopen repairs it.
    poisoned: bool,
    /// The writer's idempotent producers; `None` for a reader.
    producers: Option<ProducerTable>,
    /// A reader of a replicated log's leader reads only below this, the high watermark
    /// (`replication/source.rs`); `None` everywhere else.
    pub(super) limit: Option<u64>,
}

impl Partition {
    /// Partition `number` of the log whose id is `log` (its identity's), in `dir`.
    pub(super) fn new(storage: &Storage, dir: &Path, log: u64, number: u32) -> Partition {
        Partition {
            number,
            owner: Owner { log, partition: number },
            storage: storage.clone(),
            log_path: partition_path(dir, number, "log"),
            start_path: partition_path(dir, number, "start"),
            ack_path: partition_path(dir, number, "ack"),
            file: None,
            ack_file: None,
            index: Vec::new(),
            holes: Vec::new(),
            tail: HEADER_LEN,
            start: 0,
            ack: Ack { generation: 0, end: 0, len: HEADER_LEN },
            damage: None,
            mode: WriterMode::Checked,
            poisoned: false,
            producers: None,
            limit: None,
        }
    }

    pub(super) fn end(&self) -> u64 {
        self.index.len() as u64
    }

    /// The end of what a reader may read: the indexed records, below any damage, and below
    /// the high watermark when the partition is a replicated log's leader.
    pub(super) fn readable_end(&self) -> u64 {
        let intact = self.damage.as_ref().map_or(self.end(), |damage| damage.offset.min(self.end()));
        self.limit.map_or(intact, |limit| limit.min(intact))
    }

    /// The recorded gaps (offsets with no record, given up by `repair --gap`), in order.
    pub(super) fn gaps(&self) -> Vec<Range<u64>> {
        self.holes.iter().filter(|hole| hole.is_gap()).map(|hole| hole.offsets.clone()).collect()
    }

    /// The hole holding `offset`, if any.
    pub(super) fn hole_at(&self, offset: u64) -> Option<&Hole> {
        self.holes.iter().find(|hole| hole.offsets.contains(&offset))
    }

    /// The byte position where the frame of indexed record `offset` ends.
    fn frame_end(&self, offset: u64) -> u64 {
        match self.index.get(offset as usize + 1) {
            Some(&NO_FRAME) => self.hole_at(offset + 1).expect("a NO_FRAME offset is in a hole").bytes.start,
            Some(&next) => next,
            None => self.tail,
        }
    }

    /// Opens the partition for writing: checks the file against its acknowledgement record
    /// (or, `Unchecked`, repairs a torn tail from the file alone) and rebuilds the producer
    /// table. Everything indexed is durable when this returns.
    pub(super) fn open_writer(
        storage: &Storage,
        dir: &Path,
        log: u64,
        number: u32,
        mode: WriterMode,
    ) -> Result<(Partition, Option<TailRepair>), LogError> {
        let mut part = Partition::new(storage, dir, log, number);
        part.producers = Some(ProducerTable::default());
        part.mode = mode;
        part.open_data(true)?;
        let repair = match mode {
            WriterMode::Checked | WriterMode::WithoutAckRecord | WriterMode::AckBeforeDataSync => {
                part.recover_acknowledged()?
            }
            WriterMode::Unchecked => part.recover_unchecked()?,
        };
        part.start = read_start(&part.storage, &part.start_path, part.owner)?;
        part.check_start_within_end()?;
        Ok((part, repair))
    }

    /// Opens the partition file (read-write for the writer) and checks its header: it must
    /// name this log and partition. A missing file is refused: it held acknowledged records,
    /// or `init` made it.
    pub(super) fn open_data(&mut self, write: bool) -> Result<(), LogError> {
        let mode = if write { OpenMode::ReadWrite } else { OpenMode::Read };
        let file = match self.storage.open(&self.log_path, mode) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(LogError::Missing { path: self.log_path.clone(), what: "the partition file" })
            }
            Err(e) => return Err(io_err(&self.log_path)(e)),
        };
        check_header(&file, &self.log_path, self.owner)?;
        self.file = Some(file);
        Ok(())
    }

    /// The checked open. The acknowledgement record is a lower bound: the acknowledged bytes
    /// must hold the acknowledged records, else the partition is damaged and left untouched;
    /// past them, whole checksum-valid batches are kept and acknowledged (their data was synced
    /// before any slot write, so a damaged or torn newest slot must not cost them), and an
    /// incomplete batch (an append a crash interrupted) is cut. Damage anywhere with an intact
    /// batch after it cannot come from a crash: the partition is damaged.
    fn recover_acknowledged(&mut self) -> Result<Option<TailRepair>, LogError> {
        let ack_file = open_ack(&self.storage, &self.ack_path, true)?;
        let ack = read_ack(&ack_file, &self.ack_path, self.owner)?;
        let file_len = self.file_len()?;
        let end = self.index_to(file_len)?;
        self.damage = self.damage_against(ack, file_len, &end);
        self.ack = ack;
        let ack_file = self.ack_file.insert(ack_file);
        if self.damage.is_some() {
            return Ok(None);
        }
        // A crashed writer may have left its last record in the page cache only; a retry must
        // not be told that batch is durable before it is.
        ack_file.sync_data().map_err(io_err(&self.ack_path))?;
        let dropped_bytes = match end {
            ScanEnd::Torn { position, file_len, .. } => self.truncate(position, file_len)?,
            ScanEnd::Clean => {
                let file = self.file.as_ref().expect("opened before recovery");
                file.sync_data().map_err(io_err(&self.log_path))?;
                0
            }
        };
        let adopted = ack.end..self.end();
        if !adopted.is_empty() {
            // Synced above (the data, or the cut with `sync_all`): acknowledged from now on.
            self.acknowledge(Ack { generation: ack.generation + 1, end: self.end(), len: self.tail })?;
        }
        if dropped_bytes == 0 && adopted.is_empty() {
            return Ok(None);
        }
        let (path, partition, kept_records) = (self.log_path.clone(), self.number, self.end());
        Ok(Some(TailRepair { path, partition, kept_records, dropped_bytes, adopted }))
    }

    /// The trap (`WriterMode::Unchecked`): the file alone decides (a torn tail is cut, damage
    /// with intact batches after it is `Corrupt`), and the acknowledgement record is then made
    /// to say what the file holds, forgetting any acknowledged record it lost.
    fn recover_unchecked(&mut self) -> Result<Option<TailRepair>, LogError> {
        let end = self.scan_tail()?;
        if let Some(hole) = self.holes.iter().find(|hole| !hole.is_gap()) {
            let reason = hole.damage.clone().expect("not a gap");
            return Err(self.corrupt(hole.offsets.start, hole.bytes.start, reason));
        }
        let repair = match end {
            ScanEnd::Clean => None,
            ScanEnd::Torn { position, file_len, .. } => {
                let dropped_bytes = self.truncate(position, file_len)?;
                let (path, partition, kept_records) = (self.log_path.clone(), self.number, self.end());
                let adopted = kept_records..kept_records;
                Some(TailRepair { path, partition, kept_records, dropped_bytes, adopted })
            }
        };
        if repair.is_none() {
            let file = self.file.as_ref().expect("opened before recovery");
            file.sync_data().map_err(io_err(&self.log_path))?;
        }
        let (end, len) = (self.end(), self.tail);
        let storage = self.storage.clone();
        let owner = self.owner;
        self.ack = match inspect_ack(&storage, &self.ack_path, owner)? {
            AckFile::Valid(ack) if (ack.end, ack.len) == (end, len) => ack,
            AckFile::Valid(ack) => {
                let forgotten = Ack { generation: ack.generation + 1, end, len };
                write_ack(&open_ack(&storage, &self.ack_path, true)?, &self.ack_path, owner, forgotten)?;
                forgotten
            }
            AckFile::Missing | AckFile::Unreadable(_) => create_ack_file(&storage, &self.ack_path, owner, 0, end, len)?,
        };
        self.ack_file = Some(open_ack(&storage, &self.ack_path, true)?);
        Ok(repair)
    }

    /// Indexes the bytes not indexed yet, up to byte `limit` (or the file's end): complete
    /// batches, gaps and damaged ranges with whole batches after them; complete idempotent
    /// batches go to the producer table. Returns how the scan ended. Never modifies a file.
    pub(super) fn index_to(&mut self, limit: u64) -> Result<ScanEnd, LogError> {
        if self.tail >= limit {
            return Ok(ScanEnd::Clean);
        }
        let file = self.file.as_ref().expect("indexing needs the open file");
        let bytes = file.read_range(self.tail, limit).map_err(io_err(&self.log_path))?;
        let mut batches = Vec::new();
        let scanned = scan(&bytes, self.tail, &mut self.index, &mut batches);
        self.tail += scanned.valid_len as u64;
        self.holes.extend(scanned.holes);
        if let Some(table) = self.producers.as_mut() {
            batches.into_iter().for_each(|batch| table.record(batch));
        }
        Ok(scanned.end)
    }

    /// Whether the indexed partition holds what `ack` acknowledges: no damaged range, and
    /// the acknowledged records whole, ending exactly at the acknowledged length. `end` is how
    /// the last scan ended, for the reason.
    pub(super) fn damage_against(&self, ack: Ack, file_len: u64, end: &ScanEnd) -> Option<Damage> {
        let acked_end = ack.end.max(self.end());
        if let Some(hole) = self.holes.iter().find(|hole| !hole.is_gap()) {
            return Some(Damage {
                offset: hole.offsets.start,
                end: hole.offsets.end,
                position: hole.bytes.start,
                acked_end,
                intact_after: self.records_after(hole.offsets.end),
                reason: hole.damage.clone().expect("not a gap"),
            });
        }
        let at_ack = (ack.end <= self.end()).then(|| self.position_of(ack.end));
        if at_ack == Some(ack.len) {
            return None;
        }
        let detail = match end {
            ScanEnd::Torn { reason, .. } if self.tail < ack.len => Some(reason.clone()),
            ScanEnd::Torn { .. } | ScanEnd::Clean => None,
        };
        let short =
            (file_len < ack.len).then(|| format!("the file has {file_len} of the {} acknowledged bytes", ack.len));
        let reason = match (detail, short) {
            (Some(detail), Some(short)) => format!("{detail}; {short}"),
            (Some(reason), None) | (None, Some(reason)) => reason,
            (None, None) => format!("its acknowledged bytes hold {}, not {}", records(self.end()), ack.end),
        };
        let offset = self.end().min(ack.end);
        Some(Damage { offset, end: acked_end, position: self.position_of(offset), acked_end, intact_after: 0, reason })
    }

    /// The byte position of the frame of `offset` (the tail for the end).
    fn position_of(&self, offset: u64) -> u64 {
        match self.index.get(offset as usize) {
            Some(&NO_FRAME) => self.hole_at(offset).expect("a NO_FRAME offset is in a hole").bytes.start,
            Some(&at) => at,
            None => self.tail,
        }
    }

    /// The readable records at or after `offset`.
    pub(super) fn records_after(&self, offset: u64) -> u64 {
        self.index.iter().skip(offset as usize).filter(|&&at| at != NO_FRAME).count() as u64
    }

    fn file_len(&self) -> Result<u64, LogError> {
        let file = self.file.as_ref().expect("the partition file is open");
        file.len().map_err(io_err(&self.log_path))
    }

    /// Cuts a torn tail off the file, durably; returns the bytes cut.
    fn truncate(&mut self, position: u64, file_len: u64) -> Result<u64, LogError> {
        let file = self.file.as_ref().expect("the writer opened the file before scanning it");
        file.set_len(position).map_err(io_err(&self.log_path))?;
        // sync_all, not sync_data: the new length is metadata that must survive a crash.
        file.sync_all().map_err(io_err(&self.log_path))?;
        Ok(file_len - position)
    }

    /// Reads every byte after the indexed frames, indexes the complete batches (and holes),
    /// records the idempotent ones in the writer's producer table and says how the scan
    /// ended. Never modifies the file. The unchecked writer, which trusts the file alone, and
    /// `repair` of a partition whose acknowledgement record is gone use it.
    pub(super) fn scan_tail(&mut self) -> Result<ScanEnd, LogError> {
        let file_len = self.file_len()?;
        self.index_to(file_len)
    }

    /// Checks an idempotent batch against the producer table, then appends it unless it is
    /// a duplicate.
    pub(super) fn append_idempotent(
        &mut self,
        producer: Producer,
        base_sequence: u32,
        payloads: &[&[u8]],
    ) -> Result<Appended, LogError> {
        self.check_writable()?;
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

    /// Writes the batch's frames at the tail and syncs them once, then records the new
    /// acknowledged end and syncs that, and only then indexes them: a crash before the record
    /// is durable leaves bytes past the acknowledged length, which the next open cuts.
    /// `producer` is the idempotent producer and the batch's base sequence, if any.
    pub(super) fn append(
        &mut self,
        payloads: &[&[u8]],
        producer: Option<(Producer, u32)>,
    ) -> Result<Range<u64>, LogError> {
        self.check_writable()?;
        let first = self.end();
        let count = batch_len(payloads);
        if count == 0 {
            return Ok(first..first);
        }
        let mut bytes = Vec::new();
        let mut positions = Vec::new();
        for (i, payload) in (0..count).zip(payloads) {
            positions.push(self.tail + bytes.len() as u64);
            let meta = FrameMeta::of(producer, i, count);
            encode_frame(first + u64::from(i), meta, payload, &mut bytes);
        }
        self.write_acknowledged(&bytes, first + u64::from(count))?;
        self.index.extend(positions);
        Ok(first..self.end())
    }

    /// Appends whole batches another replica holds (`frames`: their frames as that replica
    /// wrote them, which carry this partition's next offsets), as `append` does: written,
    /// synced, acknowledged, then indexed. Frames that are not whole batches continuing this
    /// partition are refused, and nothing is written.
    pub(super) fn append_frames(&mut self, frames: &[u8]) -> Result<Range<u64>, LogError> {
        self.check_writable()?;
        let first = self.end();
        let mut batches = Vec::new();
        // Indexed first, to check them; taken back below unless they land.
        let scanned = scan(frames, self.tail, &mut self.index, &mut batches);
        let refused = match (scanned.end, scanned.holes.first()) {
            // `scan` ends `Clean` only once it consumed every byte with no batch open.
            (ScanEnd::Clean, None) => {
                assert_eq!(scanned.valid_len, frames.len(), "a clean scan consumed every copied byte");
                None
            }
            (ScanEnd::Clean, Some(hole)) => {
                Some(hole.damage.clone().unwrap_or_else(|| "a gap is not a batch to copy".to_string()))
            }
            (ScanEnd::Torn { reason, .. }, _) => Some(reason),
        };
        if let Some(reason) = refused {
            self.index.truncate(first as usize);
            let reason = format!("copied frames are not whole batches continuing the log: {reason}");
            return Err(self.corrupt(first, self.tail, reason));
        }
        let end = self.end();
        if let Err(error) = self.write_acknowledged(frames, end) {
            self.index.truncate(first as usize);
            return Err(error);
        }
        if let Some(table) = self.producers.as_mut() {
            batches.into_iter().for_each(|batch| table.record(batch));
        }
        Ok(first..end)
    }

    /// Writes `bytes` (frames of whole batches) at the tail, syncs them (but for the broken
    /// `AckBeforeDataSync`), then makes `end` and the new length the acknowledged state. A
    /// failure poisons the handle: what reached the disk is unknown.
    fn write_acknowledged(&mut self, bytes: &[u8], end: u64) -> Result<(), LogError> {
        let file = self.file.as_ref().expect("the writer always has its file open");
        let written = if self.mode.syncs_data_before_ack() {
            file.write_all_at(bytes, self.tail).and_then(|()| file.sync_data())
        } else {
            file.write_all_at(bytes, self.tail)
        };
        if let Err(e) = written {
            self.poisoned = true;
            return Err(io_err(&self.log_path)(e));
        }
        let ack = Ack { generation: self.ack.generation + 1, end, len: self.tail + bytes.len() as u64 };
        if let Err(error) = self.acknowledge(ack) {
            self.poisoned = true;
            return Err(error);
        }
        self.tail = ack.len;
        Ok(())
    }

    /// The explicit truncation of a promoted replica (`fail-leader`): records `to..` leave
    /// the acknowledged log. The acknowledgement record moves first, then the file is cut, so
    /// a crash in between leaves bytes past the acknowledged length (an unacknowledged tail
    /// the next open cuts), never damage. The index and the producer table are rebuilt from
    /// what is left.
    pub(super) fn cut_acknowledged(&mut self, to: u64) -> Result<(), LogError> {
        self.check_writable()?;
        assert!(to <= self.end(), "a truncation to {to} past the end {}", self.end());
        if to < self.start {
            let reason = format!("a truncation to {to} below the start {}", self.start);
            return Err(LogError::Corrupt { path: self.start_path.clone(), offset: to, position: 0, reason });
        }
        let position = self.index.get(to as usize).copied().unwrap_or(self.tail);
        let ack = Ack { generation: self.ack.generation + 1, end: to, len: position };
        let done = self.acknowledge(ack).and_then(|()| {
            let file = self.file.as_ref().expect("the writer always has its file open");
            file.set_len(position).and_then(|()| file.sync_all()).map_err(io_err(&self.log_path))
        });
        if let Err(error) = done {
            self.poisoned = true;
            return Err(error);
        }
        (self.index, self.holes, self.tail) = (Vec::new(), Vec::new(), HEADER_LEN);
        self.producers = Some(ProducerTable::default());
        let end = self.index_to(position)?;
        let damage = self.damage_against(ack, position, &end);
        assert!(damage.is_none(), "the file holds what was just acknowledged: {damage:?}");
        Ok(())
    }

    /// The frames of the records `offsets` (indexed ones), as they are in the file.
    pub(super) fn frames(&self, offsets: Range<u64>) -> Result<Vec<u8>, LogError> {
        assert!(offsets.end <= self.end(), "frames {offsets:?} past the end {}", self.end());
        if offsets.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(hole) = offsets.clone().find_map(|offset| self.hole_at(offset)) {
            let reason = format!("records {}..{} have no frames to copy", hole.offsets.start, hole.offsets.end);
            return Err(self.corrupt(hole.offsets.start, hole.bytes.start, reason));
        }
        let from = self.index[offsets.start as usize];
        let to = self.frame_end(offsets.end - 1);
        let file = self.file.as_ref().expect("an indexed record implies an open file");
        let bytes = file.read_range(from, to).map_err(io_err(&self.log_path))?;
        if bytes.len() as u64 != to - from {
            return Err(self.corrupt(offsets.start, from, "the file is shorter than its index".into()));
        }
        Ok(bytes)
    }

    /// The number of records of the batch the record at `offset` (an indexed one) belongs to.
    pub(super) fn batch_len_at(&self, offset: u64) -> Result<u64, LogError> {
        let bytes = self.frames(offset..offset + 1)?;
        match parse_frame(&bytes, 0) {
            Frame::Valid { meta, .. } => Ok(u64::from(meta.batch_len())),
            Frame::Incomplete | Frame::BadChecksum => {
                let position = self.index[offset as usize];
                Err(self.corrupt(offset, position, "the record changed after it was indexed".into()))
            }
        }
    }

    /// Makes `ack` the durable acknowledged state (but for `WithoutAckRecord`).
    fn acknowledge(&mut self, ack: Ack) -> Result<(), LogError> {
        match self.mode {
            WriterMode::Checked | WriterMode::Unchecked | WriterMode::AckBeforeDataSync => {
                let file = self.ack_file.as_ref().expect("the writer keeps its acknowledgement file open");
                write_ack(file, &self.ack_path, self.owner, ack)?;
                self.ack = ack;
            }
            WriterMode::WithoutAckRecord => {}
        }
        Ok(())
    }

    /// A damaged partition, or one whose last write failed, takes no append.
    pub(super) fn check_writable(&self) -> Result<(), LogError> {
        if let Some(damage) = &self.damage {
            return Err(self.damaged(damage));
        }
        if self.poisoned {
            let msg = "an earlier append failed, so the file's tail is unknown: reopen the log";
            return Err(io_err(&self.log_path)(io::Error::other(msg)));
        }
        Ok(())
    }

    /// The refusal naming a damaged partition.
    pub(super) fn damaged(&self, damage: &Damage) -> LogError {
        LogError::Damaged {
            path: self.log_path.clone(),
            partition: self.number,
            offset: damage.offset,
            end: damage.end,
            position: damage.position,
            acked_end: damage.acked_end,
            intact_after: damage.intact_after,
            reason: damage.reason.clone(),
        }
    }

    /// Reads one indexed record and re-verifies its frame.
    pub(super) fn read_record(&self, offset: u64) -> Result<Record, LogError> {
        let position = self.index[offset as usize];
        if position == NO_FRAME {
            let reason = "the record is in a damaged range or a recorded gap".to_string();
            return Err(self.corrupt(offset, self.position_of(offset), reason));
        }
        let next = self.frame_end(offset);
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

    /// A start past the acknowledged end can only come from damage (retention never passes
    /// the end). The acknowledged end, not the intact one: a loss does not move the start.
    pub(super) fn check_start_within_end(&self) -> Result<(), LogError> {
        let end = self.ack.end.max(self.end());
        if self.start <= end {
            return Ok(());
        }
        let reason = format!("the start {} is past the end {end} of the log", self.start);
        Err(LogError::Corrupt { path: self.start_path.clone(), offset: self.start, position: 0, reason })
    }

    pub(super) fn corrupt(&self, offset: u64, position: u64, reason: String) -> LogError {
        LogError::Corrupt { path: self.log_path.clone(), offset, position, reason }
    }
}

/// `partition-{number}.{extension}` in `dir`.
pub(super) fn partition_path(dir: &Path, number: u32, extension: &str) -> PathBuf {
    dir.join(format!("partition-{number}.{extension}"))
}

/// The number of records of a batch, which its frames store as a u32.
fn batch_len(payloads: &[&[u8]]) -> u32 {
    let len = u32::try_from(payloads.len());
    assert!(len.is_ok(), "a batch must hold at most u32::MAX records");
    len.expect("checked above")
}

/// A partition file must start with our intact header naming `owner`; we never convert or
/// overwrite anything else (an older format version included: `consumer repair --upgrade`
/// does that), and only `repair` rewrites a damaged header (`repair.rs`).
pub(super) fn check_header(file: &StorageFile, path: &Path, owner: Owner) -> Result<(), LogError> {
    let mut header = [0u8; HEADER_LEN as usize];
    let mut got = 0;
    while got < header.len() {
        match file.read_at(&mut header[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(path)(e)),
        }
    }
    check_header_bytes(path, &header[..got], MAGIC, Some(MAGIC_V2), owner)
}
