//! Read-process-write transactions (spec.md §3.3): per input record, an output record in the
//! owner's open transaction, then one commit (the marker and the input's next offset). The
//! transactional id is the input partition's, its producer epoch the partition row's epoch;
//! every take of the partition aborts the open transactions of earlier epochs (when fenced).
//! A downstream reader reads the output, `read_committed` or `read_uncommitted`.

use crate::action::Action;
use crate::config::Config;
use crate::state::{Offset, OutEntry, State, Witness};
use crate::strategy::{Guard, Isolation};

/// The transactions of a partition's output are identified by (input offset, producer epoch):
/// one input record each.
pub type TxnId = (Offset, u8);

/// Whether the transaction `id` ended in the output, and how: `Some(true)` committed,
/// `Some(false)` aborted, `None` still open.
pub fn outcome(output: &[OutEntry], (input, epoch): TxnId) -> Option<bool> {
    output.iter().find_map(|entry| match *entry {
        OutEntry::Marker { input: i, epoch: e, commit } if (i, e) == (input, epoch) => Some(commit),
        OutEntry::Marker { .. } | OutEntry::Data { .. } => None,
    })
}

/// What the downstream reader does with the entry at `at` of an output partition: `Some(true)`
/// it takes a data record (delivers it), `Some(false)` it passes the entry without delivering
/// anything (a marker, or under `read_committed` a record of an aborted transaction), `None`
/// it may not read it (past the end, or `read_committed` at the last stable offset: the first
/// record of an open transaction). The conformance harness drives its real reader with it.
pub fn reader_step(isolation: Isolation, output: &[OutEntry], at: usize) -> Option<bool> {
    match (*output.get(at)?, isolation) {
        (OutEntry::Marker { .. }, _) => Some(false),
        (OutEntry::Data { .. }, Isolation::ReadUncommitted) => Some(true),
        (OutEntry::Data { input, epoch }, Isolation::ReadCommitted) => outcome(output, (input, epoch)),
    }
}

/// The downstream reader's step, if it has one: the next entry it may take.
pub fn enabled_actions(config: &Config, state: &State, actions: &mut Vec<Action>) {
    let isolation = config.strategy.rules().isolation;
    for (p, output) in state.output.iter().enumerate() {
        if reader_step(isolation, output, usize::from(state.reader[p])).is_some() {
            actions.push(Action::ReadOutput { partition: p as u8 });
        }
    }
}

/// The reader takes its next entry: `read_committed` skips an aborted record, while
/// `read_uncommitted` reads it, which breaks `no-aborted-read`.
pub fn read_output(config: &Config, state: &mut State, partition: u8) {
    let p = usize::from(partition);
    let entry = state.output[p][usize::from(state.reader[p])];
    state.reader[p] += 1;
    let OutEntry::Data { input, epoch } = entry else { return };
    let aborted = outcome(&state.output[p], (input, epoch)) == Some(false);
    match config.strategy.rules().isolation {
        Isolation::ReadUncommitted if aborted => state.groups[0].ghost.read_aborted = true,
        Isolation::ReadUncommitted | Isolation::ReadCommitted => {}
    }
}

/// `produce-output`: the output record of input `offset` joins the transaction of the owner's
/// producer epoch.
pub fn produce_output(state: &mut State, partition: u8, offset: Offset, epoch: u8) {
    state.output[usize::from(partition)].push(OutEntry::Data { input: offset, epoch });
}

/// `commit-txn`'s marker (the store's next offset and effect are written by the caller).
pub fn commit(state: &mut State, partition: u8, offset: Offset, epoch: u8) {
    state.output[usize::from(partition)].push(OutEntry::Marker { input: offset, epoch, commit: true });
}

/// Taking a partition at a new producer epoch (a start's claim, a rebalance) initialises its
/// transactional id: under the fence, every open transaction of an earlier epoch is aborted.
/// A reader that already took one of its records read an aborted record. Without the fence
/// (MiniKafka's transaction path carries no producer identity) nothing is aborted.
pub fn take_partition(config: &Config, state: &mut State, partition: u8, epoch: u8) {
    let p = usize::from(partition);
    if state.output.is_empty() {
        return;
    }
    match config.strategy.rules().guard {
        Guard::Fenced => {}
        Guard::Blind | Guard::Cas => return,
    }
    // Kept inline (a take finds one or two open transactions at the check's bounds): the
    // checker's successors allocate nothing.
    let open: smallvec::SmallVec<[(usize, TxnId); 4]> = state.output[p]
        .iter()
        .enumerate()
        .filter_map(|(at, entry)| match *entry {
            OutEntry::Data { input, epoch: e } if e < epoch && outcome(&state.output[p], (input, e)).is_none() => {
                Some((at, (input, e)))
            }
            OutEntry::Data { .. } | OutEntry::Marker { .. } => None,
        })
        .collect();
    for (at, (input, e)) in open {
        state.output[p].push(OutEntry::Marker { input, epoch: e, commit: false });
        state.witness(Witness::TxnAborted);
        if at < usize::from(state.reader[p]) {
            state.groups[0].ghost.read_aborted = true;
        }
    }
}

/// `output-exactly-once`: the output a `read_committed` reader can see holds, for every input
/// offset below the group's committed next offset, exactly one record, and none for the others.
pub fn output_exactly_once(state: &State) -> bool {
    state.output.iter().enumerate().all(|(p, output)| {
        let next = state.groups[0].store.partitions[p].next_offset;
        let committed = |input: Offset| {
            output
                .iter()
                .filter(|entry| match **entry {
                    OutEntry::Data { input: i, epoch } => i == input && outcome(output, (i, epoch)) == Some(true),
                    OutEntry::Marker { .. } => false,
                })
                .count()
        };
        let inputs: std::collections::BTreeSet<Offset> = output
            .iter()
            .filter_map(|entry| match *entry {
                OutEntry::Data { input, .. } => Some(input),
                OutEntry::Marker { .. } => None,
            })
            .chain(0..next)
            .collect();
        inputs.into_iter().all(|input| committed(input) == usize::from(input < next))
    })
}
