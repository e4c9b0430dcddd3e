//! Read-process-write transactions (spec.md §3.3, §10 "Transactions"): the output log, its
//! records, the index of its transactions and the downstream reader.
//!
//! The output log is a second log of the data directory (`output/`, beside `log/`), with one
//! partition per input partition and the same files, checksums, acknowledgement records and
//! identity check as the input log (its identity is derived from the input log's, so a store
//! knows both). Its records are transactional (`record.rs`): data records, each the output of
//! one input record in a transaction of the transactional id (group, input partition) at a
//! producer epoch, and markers that commit or abort one transaction.
//!
//! Every append to the output log happens inside an *output section* of the store
//! (`Store::output_section`): a store transaction holding the partition's progress row, in which
//! the holder's epoch is checked first under txn-fenced. The store is the coordinator: a claim of
//! a new epoch cannot fall between that check and the append, and a take of the partition (which
//! reads the open transactions and ends them) cannot fall between another section's read and
//! its append. The output log's writer lock is taken inside the section, per section (several
//! owner processes append to the same output log), so the two locks are always taken store
//! first.
//!
//! Files, leaves first: `record.rs` (the payloads), `index.rs` (`TxnIndex`: open and ended
//! transactions, the LSO), `reader.rs` (`OutputReader`), this file (`OutputLog`, the sections'
//! bodies, `TxnError`).

mod index;
mod reader;
mod record;

pub use index::{OpenTxn, TxnIndex};
pub use reader::{Caught, Delivered, OutputReader, Read};
pub use record::{OutputRecord, TxnEnd, TxnKey, GROUP_BYTES_MAX};

use crate::log::{Log, LogError, LogIdentity, Storage, TailRepair, WriterMode};
use crate::store::{Item, StoreError, TxnRow, TxnState, TxnTable};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The output log's directory, beside the input log's (`DIR/output` beside `DIR/log`).
pub const OUTPUT_DIR: &str = "output";

/// XORed into the input log's id to make the output log's: never equal to it (the constant is
/// not 0), so the two directories cannot be swapped unnoticed, and the same for every store of
/// that input log.
const OUTPUT_ID_XOR: u64 = u64::from_le_bytes(*b"output!!");

/// How often a section tries to take the output log's writer lock, 1 ms apart, before giving
/// up with `LogError::Locked`: the lock is held for one append (or a take's scan), and only by
/// sections of other partitions or groups (the store serialises one partition's).
const WRITER_LOCK_POLLS_MAX: u32 = 10_000;

/// Where the output log of a data directory lives, and its identity.
#[derive(Clone, Debug)]
pub struct OutputLog {
    storage: Storage,
    dir: PathBuf,
    identity: LogIdentity,
}

/// A transaction a take of a partition ended: aborted (txn-fenced: it was open, its producer
/// epoch is older than the taker's) or committed (its commit point had passed, its marker was
/// missing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    pub txn: TxnKey,
    pub end: TxnEnd,
    pub input: Range<u64>,
}

/// What one take of a partition did to its transactional id's open transactions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Take {
    pub partition: u32,
    pub epoch: i64,
    pub ended: Vec<Ended>,
}

impl OutputLog {
    /// The output log's identity for an input log's: the same partitions, a derived id.
    pub fn identity_of(input: LogIdentity) -> LogIdentity {
        LogIdentity { id: input.id ^ OUTPUT_ID_XOR, partitions: input.partitions }
    }

    /// The output log of the input log in `input_dir` (of identity `input`) on `storage`.
    pub fn at(storage: &Storage, input_dir: &Path, input: LogIdentity) -> OutputLog {
        let dir = input_dir.with_file_name(OUTPUT_DIR);
        OutputLog { storage: storage.clone(), dir, identity: OutputLog::identity_of(input) }
    }

    /// The output log beside an opened input log.
    pub fn beside(input: &Log) -> OutputLog {
        let (storage, dir) = input.location();
        OutputLog::at(storage, dir, input.identity())
    }

    /// Creates the output log (`init`): its directory and files, as `Log::create` does; nothing
    /// to do when it exists, another log there is refused.
    pub fn create(&self) -> Result<(), LogError> {
        Log::create_on(&self.storage, &self.dir, self.identity)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn identity(&self) -> LogIdentity {
        self.identity
    }

    /// A reader of the output log (never modifies a file).
    pub fn open_reader(&self) -> Result<Log, LogError> {
        Log::open_reader_on(&self.storage, &self.dir, self.identity)
    }

    /// Runs `body` with the output log's writer, opened for it (waiting up to
    /// `WRITER_LOCK_POLLS_MAX` ms for another section's writer) and closed after it. Returns
    /// the unacknowledged tails the open cut (an append a crash interrupted).
    pub fn with_writer<T, E: From<LogError>>(
        &self,
        body: impl FnOnce(&mut Log) -> Result<T, E>,
    ) -> Result<(T, Vec<TailRepair>), E> {
        let mut polls = 0;
        let (mut log, repairs) = loop {
            match Log::open_writer_on(&self.storage, &self.dir, self.identity, WriterMode::Checked) {
                Ok(opened) => break opened,
                Err(LogError::Locked { .. }) if polls < WRITER_LOCK_POLLS_MAX => {
                    polls += 1;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(error) => return Err(error.into()),
            }
        };
        Ok((body(&mut log)?, repairs))
    }

    /// `produce-output`'s append, inside its section: the output records of `items` (input
    /// records of partition `partition`) as one batch, the data records of a new transaction of
    /// (`group`, `partition`) at `epoch`, which begins at the output log's end. Durable when
    /// this returns. Returns their output offsets.
    pub fn append_data(
        &self,
        (group, partition, epoch): (&str, u32, i64),
        items: &[Item],
    ) -> Result<(Range<u64>, Vec<TailRepair>), TxnError> {
        self.with_writer(|log| {
            let first_output = log.end(partition)?;
            let txn = TxnKey { group: group.to_string(), partition, epoch, first_output };
            let payloads = items
                .iter()
                .map(|item| {
                    OutputRecord::Data { txn: txn.clone(), input_offset: item.offset, delta: item.delta }.encode()
                })
                .collect::<Result<Vec<_>, _>>()?;
            let offsets = log.append_batch(partition, &payloads)?;
            assert_eq!(offsets.start, first_output, "the writer appends at its end");
            Ok(offsets)
        })
    }

    /// `commit-txn`'s marker, inside its section: the commit marker of `txn` (whose data
    /// records carry the input records `input`), unless a take wrote it already. Returns
    /// whether it was appended.
    pub fn mark_committed(&self, txn: &TxnKey, input: Range<u64>) -> Result<(bool, Vec<TailRepair>), TxnError> {
        self.with_writer(|log| {
            if is_marked(log, txn, &self.dir)? {
                return Ok(false);
            }
            let marker = OutputRecord::Marker { txn: txn.clone(), end: TxnEnd::Commit, input };
            log.append(txn.partition, &marker.encode()?)?;
            Ok(true)
        })
    }

    /// A take of `partition` at `epoch` (the start's claim, a follow-mode adoption, the
    /// worker's `assign`) initialises the transactional id (`group`, `partition`), inside its
    /// section: every open transaction of it at an epoch up to `epoch` whose commit point
    /// passed (`txns` says committed) gets its missing commit marker; with `aborts` (txn-fenced)
    /// every other one is recorded as aborted and gets its abort marker. Without (txn-unfenced)
    /// they stay open.
    pub fn take(
        &self,
        txns: &mut dyn TxnTable,
        (group, partition, epoch): (&str, u32, i64),
        aborts: bool,
    ) -> Result<(Take, Vec<TailRepair>), TxnError> {
        self.with_writer(|log| {
            let index = TxnIndex::of_partition(log, partition, &self.dir)?;
            let open: Vec<(TxnKey, OpenTxn)> = index
                .open_of(group)
                .filter(|(txn, _)| txn.epoch <= epoch)
                .map(|(txn, open)| (txn.clone(), open.clone()))
                .collect();
            let mut take = Take { partition, epoch, ended: Vec::new() };
            for (txn, open) in open {
                let end = match txns.state(txn.first_output)? {
                    Some(TxnState::Committed) => TxnEnd::Commit,
                    // Recorded by an earlier take that died before its marker.
                    Some(TxnState::Aborted) => TxnEnd::Abort,
                    None if aborts => {
                        txns.record_aborted(&aborted_row(&txn, &open))?;
                        TxnEnd::Abort
                    }
                    // txn-unfenced: no producer identity, nothing is aborted.
                    None => continue,
                };
                let marker = OutputRecord::Marker { txn: txn.clone(), end, input: open.input.clone() };
                log.append(partition, &marker.encode()?)?;
                take.ended.push(Ended { txn, end, input: open.input });
            }
            Ok(take)
        })
    }
}

/// Whether `txn`'s marker is in the output log: a marker follows the transaction's first
/// data record (`txn.first_output`), so only the records from there on are read (usually the
/// transaction's own), not the whole partition.
fn is_marked(log: &mut Log, txn: &TxnKey, path: &Path) -> Result<bool, TxnError> {
    let end = log.end(txn.partition)?;
    let bad = |offset, reason: String| TxnError::BadRecord {
        path: path.to_path_buf(),
        partition: txn.partition,
        offset,
        reason,
    };
    if txn.first_output >= end {
        return Err(bad(txn.first_output, format!("the transaction's first data record is past the end {end}")));
    }
    for record in log.read_range(txn.partition, txn.first_output..end)? {
        let found = OutputRecord::decode(&record.payload).map_err(|reason| bad(record.offset, reason))?;
        let begins = matches!(&found, OutputRecord::Data { txn: begun, .. } if begun == txn);
        if record.offset == txn.first_output && !begins {
            return Err(bad(record.offset, format!("it does not begin the transaction {txn:?}")));
        }
        match found {
            OutputRecord::Marker { txn: ended, .. } if ended == *txn => return Ok(true),
            OutputRecord::Marker { .. } | OutputRecord::Data { .. } => {}
        }
    }
    Ok(false)
}

/// The `txns` row of a transaction a take aborts.
fn aborted_row(txn: &TxnKey, open: &OpenTxn) -> TxnRow {
    TxnRow {
        group: txn.group.clone(),
        partition: txn.partition,
        first_output: txn.first_output,
        epoch: txn.epoch,
        input_offset: open.input.start,
        input_end: open.input.end,
        state: TxnState::Aborted,
    }
}

#[derive(Debug)]
pub enum TxnError {
    Log(LogError),
    Store(StoreError),
    /// A record of the output log that is not a transactional record, or does not fit the
    /// records before it (a marker that ends no open transaction, ...).
    BadRecord {
        path: PathBuf,
        partition: u32,
        offset: u64,
        reason: String,
    },
    /// A group whose name cannot name a transactional id (longer than `GROUP_BYTES_MAX`).
    GroupTooLong {
        group_bytes: usize,
    },
}

impl TxnError {
    /// Whether the error is a refusal to protect data (exit status 4): the output log is
    /// damaged, another log, or holds records no transaction explains.
    pub fn is_refusal(&self) -> bool {
        match self {
            TxnError::Log(error) => error.is_refusal(),
            TxnError::BadRecord { .. } => true,
            TxnError::Store(error) => error.is_refusal(),
            TxnError::GroupTooLong { .. } => false,
        }
    }
}

impl fmt::Display for TxnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TxnError::Log(error) => write!(f, "{error}"),
            TxnError::Store(error) => write!(f, "{error}"),
            TxnError::BadRecord { path, partition, offset, reason } => write!(
                f,
                "output log {}: record {offset} of partition {partition} is not a valid transactional record: {reason}",
                path.display()
            ),
            TxnError::GroupTooLong { group_bytes } => write!(
                f,
                "a group name of {group_bytes} bytes cannot name a transactional id (at most {GROUP_BYTES_MAX})"
            ),
        }
    }
}

impl std::error::Error for TxnError {}

impl From<LogError> for TxnError {
    fn from(error: LogError) -> Self {
        TxnError::Log(error)
    }
}

impl From<StoreError> for TxnError {
    fn from(error: StoreError) -> Self {
        TxnError::Store(error)
    }
}
