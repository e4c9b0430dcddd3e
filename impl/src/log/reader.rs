//! Readers: a partition followed while a writer in another process appends to it. A refresh
//! re-reads the start file and the acknowledgement record, then indexes the acknowledged bytes
//! appended since; nothing past the acknowledged end is ever exposed (it may be an append in
//! progress, or one a crash interrupted). Acknowledged records missing or damaged mark the
//! partition damaged; the intact records below the damage stay readable.
//!
//! A reader syncs the acknowledgement record whenever it finds a new one: the writer writes the
//! slot before it syncs it, and a reader that consumed what an unsynced slot acknowledged
//! could, after a power cut took the slot, find its group ahead of the log (the power-cut
//! runs found this). The records the slot covers were synced before it was written.

use super::ack::{open_ack, read_ack};
use super::error::{io_err, LogError};
use super::header::HEADER_LEN;
use super::partition::Partition;
use super::retention::read_start;

impl Partition {
    /// Brings a reader up to date: the start first, then the acknowledged end, then the
    /// records, so that every record the writer retained below that start, and every byte the
    /// acknowledged end covers, was written before we scan. A missing file is refused.
    pub(super) fn refresh(&mut self) -> Result<(), LogError> {
        let start = read_start(&self.storage, &self.start_path, self.owner)?;
        let ack_file = open_ack(&self.storage, &self.ack_path, false)?;
        let ack = read_ack(&ack_file, &self.ack_path, self.owner)?;
        if ack != self.ack {
            // Durable before anything it acknowledges is exposed (fsync of a read-only file
            // descriptor: Linux flushes the file's pages whoever wrote them).
            ack_file.sync_data().map_err(io_err(&self.ack_path))?;
        }
        if self.file.is_none() {
            self.open_data(false)?;
        }
        let file = self.file.as_ref().expect("opened above");
        let file_len = file.len().map_err(io_err(&self.log_path))?;
        if ack.end < self.end() || ack.len < self.tail || file_len < self.tail {
            // The acknowledged log went back (a repair) or lost bytes already indexed (acknowledged
            // records lost under us): index it afresh rather than keep records that are gone.
            self.index.clear();
            self.holes.clear();
            self.tail = HEADER_LEN;
        }
        let end = self.index_to(file_len.min(ack.len))?;
        self.damage = self.damage_against(ack, file_len, &end);
        self.ack = ack;
        if start < self.start {
            let reason = format!("the start moved backwards from {} to {start}", self.start);
            return Err(LogError::Corrupt { path: self.start_path.clone(), offset: start, position: 0, reason });
        }
        self.start = start;
        self.check_start_within_end()
    }
}
