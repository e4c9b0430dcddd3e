//! The transactions of one output partition, as far as its records were read: which are open
//! (their data records read, no marker yet), how the data records of the ended ones ended, and
//! the last stable offset (LSO): the first data record of a transaction still open.

use super::record::{OutputRecord, TxnEnd, TxnKey};
use super::TxnError;
use crate::log::Log;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

/// Records read per `read_range` when a whole partition is indexed.
const INDEX_CHUNK_RECORDS: u64 = 4096;

/// A transaction whose marker has not been read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenTxn {
    /// The output offsets of its data records, ascending.
    pub offsets: Vec<u64>,
    /// The input offsets its data records carry (from the lowest to one past the highest).
    pub input: Range<u64>,
}

/// The index of one output partition's records `[0, end)`.
#[derive(Clone, Debug)]
pub struct TxnIndex {
    partition: u32,
    end: u64,
    open: BTreeMap<TxnKey, OpenTxn>,
    /// How the data records at or past `kept_from` ended (a reader forgets what it passed).
    ended: BTreeMap<u64, TxnEnd>,
    kept_from: u64,
}

impl TxnIndex {
    pub fn new(partition: u32) -> TxnIndex {
        TxnIndex { partition, end: 0, open: BTreeMap::new(), ended: BTreeMap::new(), kept_from: 0 }
    }

    /// Reads and indexes every record of `partition` of the output log `log` (at `path`, for
    /// errors).
    pub fn of_partition(log: &mut Log, partition: u32, path: &Path) -> Result<TxnIndex, TxnError> {
        let mut index = TxnIndex::new(partition);
        let (start, end) = (log.start(partition)?, log.end(partition)?);
        if start > 0 {
            // Records below the start could hold open transactions nobody can end any more.
            let reason = format!("the output log's start is {start}, but it is never retained");
            return Err(index.bad(path, start, reason));
        }
        while index.end < end {
            let chunk = index.end..end.min(index.end + INDEX_CHUNK_RECORDS);
            for record in log.read_range(partition, chunk)? {
                index.observe_payload(record.offset, &record.payload, path)?;
            }
        }
        Ok(index)
    }

    /// The records indexed: `[0, end)`.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The last stable offset: the first data record of a transaction still open, or the end.
    pub fn lso(&self) -> u64 {
        self.open.values().filter_map(|txn| txn.offsets.first().copied()).min().unwrap_or(self.end)
    }

    /// The open transactions of the transactional id (`group`, this partition).
    pub fn open_of<'a>(&'a self, group: &'a str) -> impl Iterator<Item = (&'a TxnKey, &'a OpenTxn)> + 'a {
        self.open.iter().filter(move |(key, _)| key.group == group)
    }

    pub fn is_open(&self, txn: &TxnKey) -> bool {
        self.open.contains_key(txn)
    }

    /// How the transaction of the data record at `offset` ended, if it did.
    pub fn ended(&self, offset: u64) -> Option<TxnEnd> {
        assert!(offset >= self.kept_from, "the index forgot how the records below {} ended", self.kept_from);
        self.ended.get(&offset).copied()
    }

    /// Forgets how the data records below `offset` ended (a reader passed them).
    pub fn forget_below(&mut self, offset: u64) {
        self.kept_from = self.kept_from.max(offset);
        self.ended = self.ended.split_off(&self.kept_from);
    }

    /// Decodes and indexes the record at `offset`, the next one.
    pub fn observe_payload(&mut self, offset: u64, payload: &[u8], path: &Path) -> Result<OutputRecord, TxnError> {
        let record = OutputRecord::decode(payload).map_err(|reason| self.bad(path, offset, reason))?;
        self.observe(offset, &record, path)?;
        Ok(record)
    }

    /// Indexes `record`, the record at `offset`, the next one: a data record joins its open
    /// transaction (the first one begins it, at its own offset); a marker ends an open one.
    pub fn observe(&mut self, offset: u64, record: &OutputRecord, path: &Path) -> Result<(), TxnError> {
        assert_eq!(offset, self.end, "records are indexed in order");
        let txn = record.txn();
        if txn.partition != self.partition {
            let reason = format!("it names partition {}", txn.partition);
            return Err(self.bad(path, offset, reason));
        }
        match record {
            OutputRecord::Data { input_offset, .. } => {
                let open = self.open.get_mut(txn);
                if open.is_none() && txn.first_output != offset {
                    let reason = format!("it begins a transaction said to begin at {}", txn.first_output);
                    return Err(self.bad(path, offset, reason));
                }
                let fresh = || OpenTxn { offsets: Vec::new(), input: *input_offset..*input_offset };
                let open = match open {
                    Some(open) => open,
                    None => self.open.entry(txn.clone()).or_insert_with(fresh),
                };
                open.offsets.push(offset);
                open.input = open.input.start.min(*input_offset)..open.input.end.max(input_offset + 1);
            }
            OutputRecord::Marker { end, .. } => {
                let Some(open) = self.open.remove(txn) else {
                    let reason = format!(
                        "its marker ends no open transaction (epoch {}, first output {})",
                        txn.epoch, txn.first_output
                    );
                    return Err(self.bad(path, offset, reason));
                };
                let kept = open.offsets.into_iter().filter(|&data| data >= self.kept_from);
                self.ended.extend(kept.map(|data| (data, *end)));
            }
        }
        self.end = offset + 1;
        Ok(())
    }

    fn bad(&self, path: &Path, offset: u64, reason: String) -> TxnError {
        TxnError::BadRecord { path: path.to_path_buf(), partition: self.partition, offset, reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(group: &str, epoch: i64, first_output: u64) -> TxnKey {
        TxnKey { group: group.to_string(), partition: 0, epoch, first_output }
    }

    fn data(txn: &TxnKey, input_offset: u64) -> OutputRecord {
        OutputRecord::Data { txn: txn.clone(), input_offset, delta: 5 }
    }

    fn marker(txn: &TxnKey, end: TxnEnd, input: Range<u64>) -> OutputRecord {
        OutputRecord::Marker { txn: txn.clone(), end, input }
    }

    /// The LSO is the first record of a transaction still open, across groups and epochs; a
    /// marker ends exactly its transaction and says how each of its data records ended.
    #[test]
    fn the_lso_follows_the_first_open_transaction() {
        let path = Path::new("/output");
        let (zombie, newer, other) = (key("g", 2, 0), key("g", 3, 1), key("h", 1, 2));
        let mut index = TxnIndex::new(0);
        let steps: [(OutputRecord, u64); 6] = [
            (data(&zombie, 0), 0),
            (data(&newer, 0), 0),
            (data(&other, 0), 0),
            (marker(&newer, TxnEnd::Commit, 0..1), 0),
            (marker(&zombie, TxnEnd::Abort, 0..1), 2),
            (marker(&other, TxnEnd::Commit, 0..1), 6),
        ];
        for (offset, (record, lso)) in (0..).zip(steps) {
            index.observe(offset, &record, path).unwrap();
            assert_eq!(index.lso(), lso, "after record {offset}");
        }
        let ends: Vec<_> = (0..3).map(|offset| index.ended(offset)).collect();
        assert_eq!(ends, [Some(TxnEnd::Abort), Some(TxnEnd::Commit), Some(TxnEnd::Commit)]);
        assert_eq!(index.open_of("g").count(), 0);
    }

    /// A marker that ends no open transaction, a data record that begins a transaction at
    /// another offset than it says, and a record of another partition are refused.
    #[test]
    fn inconsistent_records_are_refused() {
        let path = Path::new("/output");
        let txn = key("g", 1, 0);
        let mut index = TxnIndex::new(0);
        let error = index.observe(0, &marker(&txn, TxnEnd::Commit, 0..1), path).unwrap_err();
        assert!(error.to_string().contains("ends no open transaction"), "{error}");
        let error = index.observe(0, &data(&key("g", 1, 5), 0), path).unwrap_err();
        assert!(error.to_string().contains("said to begin at 5"), "{error}");
        let elsewhere = OutputRecord::Data { txn: TxnKey { partition: 1, ..txn }, input_offset: 0, delta: 1 };
        assert!(index.observe(0, &elsewhere, path).unwrap_err().to_string().contains("names partition 1"));
    }
}
