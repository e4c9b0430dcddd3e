//! `Log::repair`: makes a log that lost acknowledged records, or files, consistent again, and
//! says exactly what it removes or accepts as lost. Per partition: a missing file is made
//! again empty; acknowledged records lost at the end (missing, or damaged with no whole batch
//! after them) are cut; a damaged range with intact batches after it is refused, unless
//! `RepairOptions::gap` asks to record it as a gap (a gap frame written over exactly the
//! damaged bytes, so every intact record after it keeps its offset and its bytes); an
//! incomplete batch past the acknowledged length (never acknowledged) is cut, whole batches
//! past it are kept; the acknowledgement record is set to the intact end; a missing start file
//! is made again at the first frame's offset (0: frames are numbered from 0 and retention keeps
//! their bytes), and a start past the new end moves back to it. Another log (an identity
//! mismatch) is refused, never repaired, and so is a file whose intact header names another
//! log or partition ([`LogError::ForeignFile`]): repair does not guess where it belongs. A
//! partition file whose header is damaged gets its header written again only when the frames
//! after it are exactly the records the partition's own acknowledgement record (which names
//! this log and partition) acknowledges; otherwise it is refused.
//!
//! Every action is appended to `dir/repairs.log` (one line each, synced) before anything
//! changes, so the loss stays recorded with the log even when no group had consumed it.
//!
//! The log's part only: moving each group's stored offsets back to the log end is the store's
//! (`consumer repair` does both, the log first, so a crash between them leaves a consistent
//! log whose groups are ahead of it, which a second `repair` finishes).

use super::ack::{create_ack_file, inspect_ack, AckFile};
use super::durable::{create_dir_durably_on, replace_file, sync_dir};
use super::error::{io_err, LogError};
use super::frame::{encode_gap, records, Hole, ScanEnd, FRAME_HEAD};
use super::header::{encode_header, HEADER_LEN, MAGIC};
use super::identity::{check_matches, identity_path, read_identity, write_identity, LogIdentity};
use super::lock_dir;
use super::partition::{Damage, Partition};
use super::retention::{inspect_start, write_start, StartFile};
use super::storage::{OpenMode, Storage};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One thing `repair` changes, with what it removes or accepts as lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RepairAction {
    /// The log directory was missing: made again, empty, with the store's identity.
    RecreatedDirectory { path: PathBuf },
    /// The identity file was missing (and no partition file held a record): written again.
    RecreatedIdentity { path: PathBuf },
    /// A partition file was missing: made again, empty. `lost` is the acknowledged records
    /// its acknowledgement record names, `None` when that record is gone too.
    RecreatedPartition { path: PathBuf, partition: u32, lost: Option<Range<u64>> },
    /// Acknowledged records were missing or damaged: the file is cut after its intact records.
    LostAcknowledged { path: PathBuf, partition: u32, offsets: Range<u64>, cut_bytes: u64, reason: String },
    /// Records `offsets` (bytes `bytes`) were damaged with intact records after them: the
    /// damaged bytes are replaced by a gap frame (asked for with `--gap`); the records after
    /// it keep their offsets, and every group's resets record the skip.
    RecordedGap {
        path: PathBuf,
        partition: u32,
        offsets: Range<u64>,
        bytes: Range<u64>,
        intact_after: u64,
        reason: String,
    },
    /// Whole, checksum-valid batches past the acknowledged end: kept and acknowledged (the
    /// acknowledgement record is a lower bound).
    Adopted { path: PathBuf, partition: u32, offsets: Range<u64> },
    /// Bytes past the acknowledged length: an append a crash interrupted, never acknowledged.
    CutUnacknowledged { path: PathBuf, partition: u32, kept_records: u64, cut_bytes: u64 },
    /// The acknowledgement record is gone, so whether the bytes after the intact records were
    /// acknowledged is unknown: they are cut all the same.
    CutUnknown { path: PathBuf, partition: u32, kept_records: u64, cut_bytes: u64, reason: String },
    /// The acknowledgement record was missing or unreadable: the intact records are accepted
    /// as the acknowledged ones.
    RebuiltAck { path: PathBuf, partition: u32, end: u64, reason: String },
    /// The start file was missing or unreadable: made again at the first frame's offset.
    RecreatedStart { path: PathBuf, partition: u32, start: u64, reason: String },
    /// The start was past the partition's new end: moved back to it.
    MovedStart { path: PathBuf, partition: u32, from: u64, to: u64 },
    /// The partition file's header was damaged, but its frames are exactly the records its
    /// acknowledgement record acknowledges: the header was written again, nothing lost.
    RewroteHeader { path: PathBuf, partition: u32, end: u64, reason: String },
}

impl fmt::Display for RepairAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepairAction::RecreatedDirectory { path } => {
                let what = "the log directory was missing: made again, empty, with the store's log identity";
                write!(f, "{}: {what}", path.display())
            }
            RepairAction::RecreatedIdentity { path } => {
                let what = "the identity file was missing: written again with the store's log identity";
                write!(f, "{}: {what}", path.display())
            }
            RepairAction::RecreatedPartition { path, partition, lost } => {
                let lost = match lost {
                    Some(lost) if lost.is_empty() => "it held no acknowledged record".to_string(),
                    Some(lost) => format!("acknowledged offsets {}..{} are lost", lost.start, lost.end),
                    None => "how many acknowledged records it held is unknown (its acknowledgement record is gone too)"
                        .to_string(),
                };
                write!(f, "partition {partition}: {} was missing: made again, empty; {lost}", path.display())
            }
            RepairAction::LostAcknowledged { path, partition, offsets, cut_bytes, reason } => write!(
                f,
                "partition {partition}: {} lost acknowledged offsets {}..{} ({reason}): cut after its intact \
                 records, {} lost, {cut_bytes} byte(s) removed",
                path.display(),
                offsets.start,
                offsets.end,
                records(offsets.end - offsets.start)
            ),
            RepairAction::RecordedGap { path, partition, offsets, bytes, intact_after, reason } => write!(
                f,
                "partition {partition}: {} offsets {}..{} ({}, bytes {}..{}) are damaged ({reason}): recorded as \
                 a gap; the {} after them are kept, and every group's resets record the skip",
                path.display(),
                offsets.start,
                offsets.end,
                records(offsets.end - offsets.start),
                bytes.start,
                bytes.end,
                records(*intact_after)
            ),
            RepairAction::Adopted { path, partition, offsets } => write!(
                f,
                "partition {partition}: {} holds whole batches past its acknowledged end, offsets {}..{} ({}): \
                 kept and acknowledged (the acknowledgement record is a lower bound)",
                path.display(),
                offsets.start,
                offsets.end,
                records(offsets.end - offsets.start)
            ),
            RepairAction::CutUnacknowledged { path, partition, kept_records, cut_bytes } => write!(
                f,
                "partition {partition}: {} held {cut_bytes} byte(s) past its acknowledged end {kept_records} \
                 (an append a crash interrupted, never acknowledged): removed",
                path.display()
            ),
            RepairAction::CutUnknown { path, partition, kept_records, cut_bytes, reason } => write!(
                f,
                "partition {partition}: {} held {cut_bytes} byte(s) past its intact records 0..{kept_records} \
                 ({reason}), acknowledged or not (unknown): removed",
                path.display()
            ),
            RepairAction::RebuiltAck { path, partition, end, reason } => write!(
                f,
                "partition {partition}: {} ({reason}) rebuilt: the intact records 0..{end} are accepted as \
                 acknowledged",
                path.display()
            ),
            RepairAction::RecreatedStart { path, partition, start, reason } => write!(
                f,
                "partition {partition}: {} ({reason}) made again at offset {start}, the first frame's offset \
                 (records below the old start, if any, are readable again)",
                path.display()
            ),
            RepairAction::MovedStart { path, partition, from, to } => write!(
                f,
                "partition {partition}: {}: the start {from} is past the new end: moved back to {to}",
                path.display()
            ),
            RepairAction::RewroteHeader { path, partition, end, reason } => write!(
                f,
                "partition {partition}: {} had a damaged header ({reason}), but its frames are exactly the \
                 acknowledged records 0..{end}: header written again, nothing lost",
                path.display()
            ),
        }
    }
}

/// What `repair` did: its actions (empty for a healthy log), each partition's end after it,
/// and the gaps it recorded (partition, offsets), which every group's resets must record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repaired {
    pub actions: Vec<RepairAction>,
    pub ends: Vec<u64>,
    pub gaps: Vec<(u32, Range<u64>)>,
}

/// How far `repair` may go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepairOptions {
    /// Record a damaged range that has intact records after it as a gap, keeping those
    /// records; without it such a partition is refused (`LogError::Damaged`).
    pub gap: bool,
}

/// What one partition needs, found by reading only.
struct Plan {
    number: u32,
    actions: Vec<RepairAction>,
    /// The partition file is missing: make it, header only.
    create_file: bool,
    /// The partition file's header is damaged but its frames are the acknowledged ones.
    rewrite_header: bool,
    /// The file's new length, when bytes are cut.
    cut_to: Option<u64>,
    /// Damaged ranges to overwrite with gap frames: offsets and bytes.
    gaps: Vec<(Range<u64>, Range<u64>)>,
    /// The acknowledgement file to write: the generation to follow, end and length.
    ack: Option<(u64, u64, u64)>,
    /// The start file to write.
    start: Option<u64>,
    /// Records after the repair.
    end: u64,
}

/// See the module documentation. `before` is shown every action before anything changes.
pub(super) fn repair(
    storage: &Storage,
    dir: &Path,
    expected: LogIdentity,
    options: RepairOptions,
    before: impl FnOnce(&[RepairAction]),
) -> Result<Repaired, LogError> {
    if super::is_replicated(storage, dir) {
        // Its partition files are in the replicas: a plain repair would make new, empty ones.
        return Err(LogError::Replicated { path: dir.to_path_buf(), operation: "repair" });
    }
    let exists = storage.exists(dir);
    let identity = if exists { read_identity(storage, dir)? } else { None };
    if let Some(found) = identity {
        check_matches(dir, found, expected)?;
    }
    let mut lock = if exists { Some(lock_dir(storage, dir)?) } else { None };
    let mut actions = Vec::new();
    let plans: Vec<Plan> = if exists {
        let plan = |number| plan_partition(storage, dir, expected.id, number, options);
        (0..expected.partitions).map(plan).collect::<Result<_, _>>()?
    } else {
        actions.push(RepairAction::RecreatedDirectory { path: dir.to_path_buf() });
        (0..expected.partitions).map(|number| fresh_plan(storage, dir, expected.id, number)).collect()
    };
    if identity.is_none() && exists {
        if plans.iter().any(|plan| plan.end > 0 || plan.cut_to.is_some()) {
            return Err(LogError::Unidentified { path: dir.to_path_buf() });
        }
        actions.push(RepairAction::RecreatedIdentity { path: identity_path(dir) });
    }
    actions.extend(plans.iter().flat_map(|plan| plan.actions.iter().cloned()));
    before(&actions);
    if lock.is_none() {
        create_dir_durably_on(storage, dir)?;
        lock = Some(lock_dir(storage, dir)?);
    }
    record(storage, dir, &actions)?;
    let ends = plans.iter().map(|plan| plan.end).collect();
    let gaps =
        plans.iter().flat_map(|plan| plan.gaps.iter().map(|(offsets, _)| (plan.number, offsets.clone()))).collect();
    for plan in plans {
        apply(storage, dir, expected.id, plan)?;
    }
    if identity.is_none() {
        write_identity(storage, dir, expected)?;
    }
    drop(lock);
    Ok(Repaired { actions, ends, gaps })
}

/// The journal of every repair's actions, kept with the log.
const JOURNAL: &str = "repairs.log";

/// Appends `actions` to the journal, one line each, and makes them durable before any of
/// them is carried out.
fn record(storage: &Storage, dir: &Path, actions: &[RepairAction]) -> Result<(), LogError> {
    if actions.is_empty() {
        return Ok(());
    }
    let path = dir.join(JOURNAL);
    let created = !storage.exists(&path);
    let file = storage.open(&path, OpenMode::Append).map_err(io_err(&path))?;
    let text: String = actions.iter().map(|action| format!("{action}\n")).collect();
    file.append(text.as_bytes()).and_then(|()| file.sync_data()).map_err(io_err(&path))?;
    if created {
        sync_dir(storage, dir)?;
    }
    Ok(())
}

/// A partition of a log directory that is gone: everything made again, nothing known lost.
fn fresh_plan(storage: &Storage, dir: &Path, log: u64, number: u32) -> Plan {
    let part = Partition::new(storage, dir, log, number);
    let actions = vec![RepairAction::RecreatedPartition { path: part.log_path, partition: number, lost: None }];
    Plan { actions, create_file: true, ack: Some((0, 0, HEADER_LEN)), start: Some(0), ..Plan::empty(number) }
}

impl Plan {
    /// The plan of partition `number` that changes nothing.
    fn empty(number: u32) -> Plan {
        let (actions, create_file, rewrite_header, gaps) = (Vec::new(), false, false, Vec::new());
        Plan { number, actions, create_file, rewrite_header, cut_to: None, gaps, ack: None, start: None, end: 0 }
    }
}

/// Reads one partition's files and plans what makes them consistent; changes nothing.
fn plan_partition(
    storage: &Storage,
    dir: &Path,
    log: u64,
    number: u32,
    options: RepairOptions,
) -> Result<Plan, LogError> {
    let mut part = Partition::new(storage, dir, log, number);
    let mut plan = Plan::empty(number);
    let ack = inspect_ack(storage, &part.ack_path, part.owner)?;
    let opened = match part.open_data(false) {
        Err(LogError::DamagedHeader { path, reason }) => {
            let why = reason.clone();
            plan_header(&mut part, &ack, (LogError::DamagedHeader { path, reason }, why), &mut plan)
        }
        Err(LogError::BadHeader { path, found, expected }) => {
            let why =
                format!("its first 8 bytes are not {} (found \"{}\")", expected.escape_ascii(), found.escape_ascii());
            plan_header(&mut part, &ack, (LogError::BadHeader { path, found, expected }, why), &mut plan)
        }
        opened => opened,
    };
    let (end, len) = match opened {
        Ok(()) => plan_data(&mut part, &ack, &mut plan, options)?,
        Err(LogError::Missing { .. }) => {
            let lost = match &ack {
                AckFile::Valid(ack) => Some(0..ack.end),
                AckFile::Missing | AckFile::Unreadable(_) => None,
            };
            plan.actions.push(RepairAction::RecreatedPartition {
                path: part.log_path.clone(),
                partition: number,
                lost,
            });
            plan.create_file = true;
            (0, HEADER_LEN)
        }
        Err(error) => return Err(error),
    };
    let path = part.ack_path.clone();
    plan.ack = match ack {
        AckFile::Valid(ack) if (ack.end, ack.len) == (end, len) => None,
        AckFile::Valid(ack) => Some((ack.generation, end, len)),
        AckFile::Missing => {
            let reason = "missing".to_string();
            plan.actions.push(RepairAction::RebuiltAck { path, partition: number, end, reason });
            Some((0, end, len))
        }
        AckFile::Unreadable(error) => {
            plan.actions.push(RepairAction::RebuiltAck { path, partition: number, end, reason: error.to_string() });
            Some((0, end, len))
        }
    };
    plan.start = plan_start(&part, number, end, &mut plan.actions)?;
    plan.end = end;
    Ok(plan)
}

/// A partition file whose header is not intact (`error`): its header is written again only
/// when its frames from byte [`HEADER_LEN`] are exactly what its valid acknowledgement record
/// acknowledges (the record names this log and partition, so the frames are this partition's);
/// otherwise `error` stands. `reason` says what is wrong with the header for the journal (the
/// refusal's own text says "refused", which a rewrite is not). Leaves the file open and
/// indexed for [`plan_data`].
fn plan_header(
    part: &mut Partition,
    ack: &AckFile,
    (error, reason): (LogError, String),
    plan: &mut Plan,
) -> Result<(), LogError> {
    let AckFile::Valid(ack) = ack else { return Err(error) };
    let path = part.log_path.clone();
    let file = part.storage.open(&path, OpenMode::Read).map_err(io_err(&path))?;
    let file_len = file.len().map_err(io_err(&path))?;
    part.file = Some(file);
    let end = part.index_to(file_len.min(ack.len))?;
    if part.damage_against(*ack, file_len, &end).is_some() {
        return Err(error);
    }
    let (partition, end) = (plan.number, ack.end);
    plan.actions.push(RepairAction::RewroteHeader { path, partition, end, reason });
    plan.rewrite_header = true;
    Ok(())
}

/// Plans what an existing partition file needs and returns its (end, length) after it. The
/// whole file is read: the acknowledgement record is a lower bound, and damage in the middle
/// must be told apart from a torn tail by the whole batches after it.
fn plan_data(
    part: &mut Partition,
    ack: &AckFile,
    plan: &mut Plan,
    options: RepairOptions,
) -> Result<(u64, u64), LogError> {
    let file = part.file.as_ref().expect("opened by the caller");
    let file_len = file.len().map_err(io_err(&part.log_path))?;
    let (path, partition) = (part.log_path.clone(), plan.number);
    let end = part.scan_tail()?;
    plan_holes(part, ack, plan, options, file_len, &end)?;
    match ack {
        AckFile::Valid(ack) if part.end() < ack.end => {
            let offsets = part.end()..ack.end;
            let cut_bytes = file_len.saturating_sub(part.tail);
            let reason = part.damage_against(*ack, file_len, &end).map_or_else(String::new, |damage| damage.reason);
            plan.actions.push(RepairAction::LostAcknowledged { path, partition, offsets, cut_bytes, reason });
        }
        AckFile::Valid(ack) => {
            if part.end() > ack.end {
                let offsets = ack.end..part.end();
                plan.actions.push(RepairAction::Adopted { path: path.clone(), partition, offsets });
            }
            if file_len > part.tail {
                let (kept_records, cut_bytes) = (part.end(), file_len - part.tail);
                plan.actions.push(RepairAction::CutUnacknowledged { path, partition, kept_records, cut_bytes });
            }
        }
        AckFile::Missing | AckFile::Unreadable(_) => match end {
            ScanEnd::Clean => {}
            ScanEnd::Torn { reason, .. } => {
                let (kept_records, cut_bytes) = (part.end(), file_len - part.tail);
                plan.actions.push(RepairAction::CutUnknown { path, partition, kept_records, cut_bytes, reason });
            }
        },
    }
    if file_len > part.tail {
        plan.cut_to = Some(part.tail);
    }
    Ok((part.end(), part.tail))
}

/// Plans the damaged ranges with intact batches after them: refused without
/// `RepairOptions::gap` (nothing intact is ever deleted unasked), else each becomes a gap.
fn plan_holes(
    part: &Partition,
    ack: &AckFile,
    plan: &mut Plan,
    options: RepairOptions,
    file_len: u64,
    end: &ScanEnd,
) -> Result<(), LogError> {
    let damaged: Vec<Hole> = part.holes.iter().filter(|hole| !hole.is_gap()).cloned().collect();
    let Some(first) = damaged.first() else { return Ok(()) };
    if !options.gap {
        let acked = match ack {
            AckFile::Valid(ack) => *ack,
            AckFile::Missing | AckFile::Unreadable(_) => part.ack,
        };
        let damage: Damage = part.damage_against(acked, file_len, end).expect("a damaged range is damage");
        assert_eq!(damage.offset, first.offsets.start, "the first damaged range is the damage");
        return Err(part.damaged(&damage));
    }
    for hole in damaged {
        let (offsets, bytes) = (hole.offsets.clone(), hole.bytes.clone());
        if encode_gap(offsets.clone(), bytes.end - bytes.start).is_none() {
            // Records missing with (almost) no bytes in their place: a gap frame cannot be
            // written over them without moving the intact records after them.
            let reason = format!(
                "records {}..{} are missing with only {} byte(s) in their place, too few for a gap frame \
                 ({FRAME_HEAD} bytes): refused, nothing changed",
                offsets.start,
                offsets.end,
                bytes.end - bytes.start
            );
            return Err(LogError::Corrupt {
                path: part.log_path.clone(),
                offset: offsets.start,
                position: bytes.start,
                reason,
            });
        }
        let intact_after = part.records_after(offsets.end);
        let reason = hole.damage.clone().expect("not a gap");
        let path = part.log_path.clone();
        plan.actions.push(RepairAction::RecordedGap {
            path,
            partition: plan.number,
            offsets: offsets.clone(),
            bytes: bytes.clone(),
            intact_after,
            reason,
        });
        plan.gaps.push((offsets, bytes));
    }
    Ok(())
}

/// Plans the start file: made again at the first frame's offset if missing or unreadable,
/// moved back to `end` if past it.
fn plan_start(
    part: &Partition,
    partition: u32,
    end: u64,
    actions: &mut Vec<RepairAction>,
) -> Result<Option<u64>, LogError> {
    let path = part.start_path.clone();
    // Frames are numbered from 0 and retention keeps their bytes: the first frame is offset 0.
    let first = 0;
    let reason = match inspect_start(&part.storage, &part.start_path, part.owner)? {
        StartFile::Valid(start) if start <= end => return Ok(None),
        StartFile::Valid(from) => {
            actions.push(RepairAction::MovedStart { path, partition, from, to: end });
            return Ok(Some(end));
        }
        StartFile::Missing => "missing".to_string(),
        StartFile::Unreadable(error) => error.to_string(),
    };
    actions.push(RepairAction::RecreatedStart { path, partition, start: first, reason });
    Ok(Some(first))
}

/// Carries out one partition's plan, each write durable: the data file first, then the
/// acknowledgement record, then the start, so a crash in between leaves at worst a damaged
/// partition that a second `repair` finds again.
fn apply(storage: &Storage, dir: &Path, log: u64, plan: Plan) -> Result<(), LogError> {
    let part = Partition::new(storage, dir, log, plan.number);
    let header = encode_header(MAGIC, part.owner);
    if plan.create_file {
        replace_file(storage, dir, &part.log_path, &header)?;
    }
    if plan.rewrite_header {
        // In place: the frames after it stay as they are, and a torn write of these 24 bytes
        // leaves a damaged header that a second `repair` finds again.
        let file = storage.open(&part.log_path, OpenMode::Write).map_err(io_err(&part.log_path))?;
        file.write_all_at(&header, 0).and_then(|()| file.sync_data()).map_err(io_err(&part.log_path))?;
    }
    if !plan.gaps.is_empty() {
        // In place, over exactly the damaged bytes: nothing after them moves, the file keeps its
        // length and the acknowledgement record stays true. A torn write leaves the range
        // damaged, which a second `repair --gap` finds again (the journal already says so).
        let file = storage.open(&part.log_path, OpenMode::ReadWrite).map_err(io_err(&part.log_path))?;
        for (offsets, bytes) in &plan.gaps {
            let frame = encode_gap(offsets.clone(), bytes.end - bytes.start).expect("checked when planned");
            file.write_all_at(&frame, bytes.start).map_err(io_err(&part.log_path))?;
        }
        file.sync_data().map_err(io_err(&part.log_path))?;
    }
    if let Some(len) = plan.cut_to {
        let file = storage.open(&part.log_path, OpenMode::Write).map_err(io_err(&part.log_path))?;
        file.set_len(len).map_err(io_err(&part.log_path))?;
        file.sync_all().map_err(io_err(&part.log_path))?;
    }
    if let Some((after, end, len)) = plan.ack {
        create_ack_file(storage, &part.ack_path, part.owner, after, end, len)?;
    }
    if let Some(start) = plan.start {
        write_start(storage, &part.start_path, part.owner, start)?;
    }
    Ok(())
}
