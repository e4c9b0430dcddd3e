//! Readers: a partition followed while a writer in another process appends to it. A refresh
//! re-reads the start file, opens the partition file once the writer has created it and
//! indexes what was appended since; a torn tail is left for later.

use super::error::{io_err, LogError};
use super::frame::ScanEnd;
use super::partition::{check_header, Partition};
use super::retention::read_start;
use std::fs::File;
use std::io;

impl Partition {
    /// Brings a reader up to date: the start first, then the records, so that every record
    /// the writer retained below that start was written before we scan and gets indexed.
    pub(super) fn refresh(&mut self) -> Result<(), LogError> {
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
}
