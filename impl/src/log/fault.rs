//! Fault injection for tests and conformance: losses a real disk or operator inflicts on a
//! log, made on purpose. Nothing in the consumer calls these; they exist so that the refusals
//! and `repair` can be tested against the loss they are about.

pub use super::ack::AckSlotRange;

use super::ack::{newest_slot_range, open_ack};
use super::error::{io_err, LogError};
use super::frame::{parse_frame, Frame};
use super::header::{Owner, HEADER_LEN};
use super::identity::{identity_path, read_identity, LogIdentity};
use super::lock_dir;
use super::partition::{check_header, partition_path};
use super::repair::{repair, RepairAction, RepairOptions, Repaired};
use super::storage::{OpenMode, Storage};
use std::path::Path;

/// Fault injection: cuts the file of `partition` at the frame of record `keep_records`, so
/// that the log keeps records `0..keep_records` and loses the rest, while its acknowledgement
/// record still says they were acknowledged (a truncated file, a lost page). Every open then
/// sees acknowledged records missing: the partition is damaged.
///
/// Takes the writer lock, so no writer may have the log open ([`LogError::Locked`]).
/// `keep_records` beyond the records in the file is [`LogError::OffsetOutOfRange`]. A cut
/// inside a batch loses the whole batch for readers, who never read part of one. The cut is
/// durable when this returns.
pub fn lose_tail(log_dir: &Path, partition: u32, keep_records: u64) -> Result<(), LogError> {
    lose_tail_on(&Storage::Real, log_dir, partition, keep_records)
}

/// [`lose_tail`] on `storage` (a simulated disk's log, for the power-cut tests).
pub fn lose_tail_on(storage: &Storage, log_dir: &Path, partition: u32, keep_records: u64) -> Result<(), LogError> {
    let _lock = lock_dir(storage, log_dir)?;
    let Some(identity) = read_identity(storage, log_dir)? else {
        return Err(LogError::Missing { path: identity_path(log_dir), what: "the log's identity file" });
    };
    let path = partition_path(log_dir, partition, "log");
    let file = storage.open(&path, OpenMode::ReadWrite).map_err(io_err(&path))?;
    check_header(&file, &path, Owner { log: identity.id, partition })?;
    let len = file.len().map_err(io_err(&path))?;
    let bytes = file.read_range(HEADER_LEN, len).map_err(io_err(&path))?;
    let (mut at, mut records) = (0, 0);
    while records < keep_records {
        match parse_frame(&bytes, at) {
            Frame::Valid { offset, next, .. } if offset == records => (at, records) = (next, records + 1),
            Frame::Valid { .. } | Frame::Incomplete | Frame::BadChecksum => {
                return Err(LogError::OffsetOutOfRange { partition, offset: keep_records, start: 0, end: records })
            }
        }
    }
    file.set_len(HEADER_LEN + at as u64).map_err(io_err(&path))?;
    file.sync_all().map_err(io_err(&path))
}

/// [`super::Log::repair`] on `storage` (a simulated disk's log, for the power-cut tests: the
/// consumer repairs real disks only, so only a test halts a repair between its journal and its
/// actions and cuts the power there).
pub fn repair_on(
    storage: &Storage,
    dir: &Path,
    expected: LogIdentity,
    options: RepairOptions,
    before: impl FnOnce(&[RepairAction]),
) -> Result<Repaired, LogError> {
    repair(storage, dir, expected, options, before)
}

/// Test only: where the newest valid slot of the acknowledgement record of `partition` lies
/// (`AckSlotRange`), as a process sees the file now, so that the power-cut runs damage its
/// bytes without knowing the format's layout. Neither slot valid is [`LogError::Corrupt`].
#[doc(hidden)]
pub fn newest_ack_slot_on(storage: &Storage, log_dir: &Path, partition: u32) -> Result<AckSlotRange, LogError> {
    let path = partition_path(log_dir, partition, "ack");
    let Some(identity) = read_identity(storage, log_dir)? else {
        return Err(LogError::Missing { path: identity_path(log_dir), what: "the log's identity file" });
    };
    let owner = Owner { log: identity.id, partition };
    newest_slot_range(&open_ack(storage, &path, false)?, &path, owner)
}
