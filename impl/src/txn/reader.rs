//! The downstream reader of one output partition (spec.md §3.3): `read_committed` delivers the
//! data records of committed transactions, skips those of aborted ones and stops at the last
//! stable offset; `read_uncommitted` delivers every data record. One record per call, so that
//! a caller (a test, the conformance harness) can interleave reads with the owners' steps.

use super::index::TxnIndex;
use super::record::{OutputRecord, TxnEnd, TxnKey};
use super::{OutputLog, TxnError};
use crate::log::Log;
use crate::strategy::Isolation;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A data record as a reader delivers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// Its offset in the output partition.
    pub offset: u64,
    pub txn: TxnKey,
    /// The input record it is the output of (of partition `txn.partition`).
    pub input_offset: u64,
    pub delta: i64,
    /// How its transaction had ended when it was read: always `Some(Commit)` under
    /// `read_committed`; `None` (still open) or `Some(Abort)` are what `read_uncommitted` sees.
    pub ended: Option<TxnEnd>,
}

/// What one call of `OutputReader::read` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    Record(Delivered),
    /// Nothing more to read now: the reader is at the end, or (`read_committed`) at the LSO.
    Caught(Caught),
}

/// Where a reader stopped: its `position`, the partition's last stable offset and its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caught {
    pub position: u64,
    pub lso: u64,
    pub end: u64,
}

/// A reader of one output partition, following the writers in other processes.
pub struct OutputReader {
    log: Log,
    path: PathBuf,
    partition: u32,
    isolation: Isolation,
    /// The next offset to look at.
    position: u64,
    index: TxnIndex,
    /// The data records indexed but not yet passed, by offset.
    pending: BTreeMap<u64, (TxnKey, u64, i64)>,
}

impl OutputReader {
    /// A reader of `partition` of `output` from offset 0.
    pub fn open(output: &OutputLog, partition: u32, isolation: Isolation) -> Result<OutputReader, TxnError> {
        let log = output.open_reader()?;
        if partition >= log.partitions() {
            let partitions = log.partitions();
            return Err(crate::log::LogError::NoSuchPartition { partition, partitions }.into());
        }
        let (path, index) = (output.dir().to_path_buf(), TxnIndex::new(partition));
        Ok(OutputReader { log, path, partition, isolation, position: 0, index, pending: BTreeMap::new() })
    }

    pub fn position(&self) -> u64 {
        self.position
    }

    /// The next record this reader may read, or where it stops (see `Read`). Each call first
    /// indexes what the writers appended since the last one.
    pub fn read(&mut self) -> Result<Read, TxnError> {
        self.refresh()?;
        loop {
            let caught = Read::Caught(Caught { position: self.position, lso: self.index.lso(), end: self.index.end() });
            if self.position == self.index.end() {
                return Ok(caught);
            }
            let offset = self.position;
            let Some((txn, input_offset, delta)) = self.pending.get(&offset).cloned() else {
                // A marker: nothing to deliver.
                self.pass(offset);
                continue;
            };
            let ended = self.index.ended(offset);
            let deliver = match (self.isolation, ended) {
                (Isolation::ReadUncommitted, _) | (Isolation::ReadCommitted, Some(TxnEnd::Commit)) => true,
                (Isolation::ReadCommitted, Some(TxnEnd::Abort)) => false,
                // The last stable offset: its transaction is still open.
                (Isolation::ReadCommitted, None) => return Ok(caught),
            };
            self.pass(offset);
            if deliver {
                return Ok(Read::Record(Delivered { offset, txn, input_offset, delta, ended }));
            }
        }
    }

    /// Reads until caught up: every record delivered, and where the reader stopped.
    pub fn read_all(&mut self) -> Result<(Vec<Delivered>, Caught), TxnError> {
        let mut delivered = Vec::new();
        loop {
            match self.read()? {
                Read::Record(record) => delivered.push(record),
                Read::Caught(caught) => return Ok((delivered, caught)),
            }
        }
    }

    fn pass(&mut self, offset: u64) {
        self.pending.remove(&offset);
        self.position = offset + 1;
        self.index.forget_below(self.position);
    }

    /// Indexes the records appended since the last refresh, keeping the data records to come.
    fn refresh(&mut self) -> Result<(), TxnError> {
        let end = self.log.end(self.partition)?;
        let from = self.index.end();
        if from >= end {
            return Ok(());
        }
        for record in self.log.read_range(self.partition, from..end)? {
            match self.index.observe_payload(record.offset, &record.payload, &self.path)? {
                OutputRecord::Data { txn, input_offset, delta } => {
                    self.pending.insert(record.offset, (txn, input_offset, delta));
                }
                OutputRecord::Marker { .. } => {}
            }
        }
        Ok(())
    }
}
