//! The txn rows (spec.md §3.3) on the real output log (`consumer::txn`): the harness observes
//! each output partition as the model's `OutEntry`s and is the downstream reader, an
//! `OutputReader` of the row's isolation driven one model step at a time.
//!
//! A real transaction is named by its transactional id (group, partition), producer epoch and
//! first output offset; the model names it by (input offset, producer epoch), one input record
//! each (batch 1). The mapping is checked to be one to one.
//!
//! The model's reader takes one entry per `read-output`: a data record it delivers, or a
//! marker (and, read committed, an aborted record) it passes. `OutputReader::read` delivers
//! one data record per call and passes the entries before it inside the call. So the harness
//! calls it only for an entry the model's reader delivers (`model::txn::reader_step`), and the
//! real reader must deliver exactly that record: having passed, inside the call, the entries
//! the model's reader passed one step each. The observed position is the offset after the last
//! entry taken.

use crate::error::{Error, Unobservable};
use consumer::log::Log;
use consumer::txn::{OutputLog, OutputReader, OutputRecord, Read, TxnEnd};
use model::state::OutEntry;
use model::strategy::Isolation;
use model::txn::TxnId;
use std::collections::{BTreeMap, BTreeSet};

/// The output log, the downstream reader, and what it took.
pub struct Transactional {
    /// The group whose transactions write the output (the txn rows have one).
    group: String,
    output: Log,
    isolation: Isolation,
    readers: Vec<OutputReader>,
    /// Per partition, the model's reader position: the entries taken.
    positions: Vec<u8>,
    /// Per partition, the transactions of the data records the reader delivered.
    taken: Vec<BTreeSet<TxnId>>,
}

impl Transactional {
    pub fn new(output: &OutputLog, group: String, isolation: Isolation, partitions: u32) -> Result<Self, Error> {
        let real_isolation = match isolation {
            Isolation::ReadCommitted => consumer::strategy::Isolation::ReadCommitted,
            Isolation::ReadUncommitted => consumer::strategy::Isolation::ReadUncommitted,
        };
        let readers = (0..partitions)
            .map(|partition| OutputReader::open(output, partition, real_isolation).map_err(txn))
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(Transactional {
            group,
            output: output.open_reader()?,
            isolation,
            readers,
            positions: vec![0; partitions as usize],
            taken: vec![BTreeSet::new(); partitions as usize],
        })
    }

    /// The model's `read-output` on `partition`, whose output the harness observed as
    /// `entries` before the step.
    pub fn read_output(&mut self, partition: u8, entries: &[OutEntry]) -> Result<(), Error> {
        let p = usize::from(partition);
        let at = self.positions[p];
        let diverged = |found: String| Error::Reader { partition, offset: at, found };
        match model::txn::reader_step(self.isolation, entries, usize::from(at)) {
            None => return Err(diverged("has nothing it may read there".into())),
            Some(false) => {}
            Some(true) => match self.readers[p].read().map_err(txn)? {
                Read::Record(record) if record.offset == u64::from(at) => {
                    let epoch = super::narrow(record.txn.epoch, "epoch")?;
                    self.taken[p].insert((super::narrow(record.input_offset, "offset")?, epoch));
                }
                Read::Record(record) => return Err(diverged(format!("delivered record {}", record.offset))),
                Read::Caught(caught) => {
                    let (position, lso, end) = (caught.position, caught.lso, caught.end);
                    return Err(diverged(format!("stopped at {position} (LSO {lso}, end {end})")));
                }
            },
        }
        self.positions[p] += 1;
        Ok(())
    }

    pub fn positions(&self) -> Vec<u8> {
        self.positions.clone()
    }

    /// Whether the reader took a record whose transaction is aborted in `output` (per
    /// partition, as observed now): it read aborted output, now or before its abort.
    pub fn read_aborted(&self, output: &[Vec<OutEntry>]) -> bool {
        self.taken
            .iter()
            .zip(output)
            .any(|(taken, entries)| taken.iter().any(|&id| model::txn::outcome(entries, id) == Some(false)))
    }

    /// Every record of every output partition as the model's entries.
    pub fn observe(&mut self) -> Result<Vec<Vec<OutEntry>>, Error> {
        (0..self.output.partitions()).map(|partition| self.observe_partition(partition)).collect()
    }

    fn observe_partition(&mut self, partition: u32) -> Result<Vec<OutEntry>, Error> {
        let end = self.output.end(partition)?;
        let mut entries = Vec::new();
        // The model's name of each real transaction, and the real one each model name stands for.
        let mut names: BTreeMap<TxnId, u64> = BTreeMap::new();
        for record in self.output.read_range(partition, 0..end)? {
            let offset = record.offset;
            let bad = |reason: String| Unobservable::Output { partition, offset, reason };
            let decoded = OutputRecord::decode(&record.payload).map_err(bad)?;
            let txn = decoded.txn();
            if txn.group != self.group || txn.partition != partition {
                return Err(bad(format!("it names group {} partition {}", txn.group, txn.partition)).into());
            }
            let epoch = super::narrow(txn.epoch, "epoch")?;
            let (entry, input) = match &decoded {
                OutputRecord::Data { input_offset, .. } => {
                    let input = super::narrow(*input_offset, "offset")?;
                    (OutEntry::Data { input, epoch }, input)
                }
                OutputRecord::Marker { end, input, .. } => {
                    if input.end != input.start + 1 {
                        return Err(bad(format!("its transaction covers inputs {input:?}; traces use batch 1")).into());
                    }
                    let commit = *end == TxnEnd::Commit;
                    let input = super::narrow(input.start, "offset")?;
                    (OutEntry::Marker { input, epoch, commit }, input)
                }
            };
            let first = *names.entry((input, epoch)).or_insert(txn.first_output);
            if first != txn.first_output {
                let reason = format!(
                    "two transactions of input {input} at epoch {epoch} (first outputs {first} and {})",
                    txn.first_output
                );
                return Err(bad(reason).into());
            }
            entries.push(entry);
        }
        Ok(entries)
    }
}

/// The number of abort markers in `output`: takes write them (a new one is `txn-aborted`).
pub fn aborts(output: &[Vec<OutEntry>]) -> usize {
    output.iter().flatten().filter(|entry| matches!(entry, OutEntry::Marker { commit: false, .. })).count()
}

fn txn(error: consumer::txn::TxnError) -> Error {
    Error::Txn(Box::new(error))
}
