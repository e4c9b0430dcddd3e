//! The transactional sequence (spec.md §3.3, §10 "Transactions"): `produce-output`,
//! `commit-txn`, and the take of a partition, which initialises its transactional id. Each
//! append to the output log runs inside an output section of the store (`crate::txn`).

use super::{Outcome, Owner, OwnerError, Stage, REPORTS_KEPT_MAX};
use crate::crash::When;
use crate::log::TailRepair;
use crate::store::{StoreError, TxnRow, TxnState};
use crate::strategy::{FencedWrite, GuardKind, Sequence, Step, StepKind};
use crate::txn::{OutputLog, Take, TxnKey};

impl Owner {
    /// The fence of the transactional writes of `partition` under the rules' guard: the lease
    /// epoch (txn-fenced: the producer epoch of the transactional id), or none (txn-unfenced).
    fn txn_fence(&self, partition: u32) -> Option<i64> {
        match self.settings.rules().guard {
            GuardKind::Fenced => Some(self.leases[&partition].epoch),
            GuardKind::Blind => None,
            GuardKind::Cas => panic!("invariant: Rules::check pairs the transactional sequence with no CAS"),
        }
    }

    /// The output log; only the transactional sequence, which has one, takes these steps.
    fn output_log(&self) -> OutputLog {
        let output = self.output.clone();
        output.unwrap_or_else(|| panic!("invariant: {} has no output log", self.settings.strategy))
    }

    /// Keeps the tails the output log's writer cut, for the report (the last ones).
    fn keep_repairs(&mut self, repairs: Vec<TailRepair>) {
        self.output_repairs.extend(repairs);
        let excess = self.output_repairs.len().saturating_sub(REPORTS_KEPT_MAX);
        self.output_repairs.drain(..excess);
    }

    /// The take of `partition` at its lease's epoch (a start's claim, a follow-mode adoption,
    /// the worker's `assign`) initialises the transactional id: in one output section (fenced
    /// by that epoch under txn-fenced) the open transactions of earlier epochs are ended (see
    /// `OutputLog::take`). Does nothing for the other sequences. Returns false when the section
    /// was fenced (a newer epoch was claimed since): the lease is dropped.
    pub(super) fn take_transactional_id(&mut self, partition: u32) -> Result<bool, OwnerError> {
        match self.settings.rules().sequence {
            Sequence::Transactional => {}
            Sequence::CommitThenEffect
            | Sequence::EffectThenCommit
            | Sequence::EffectOnly
            | Sequence::EffectRecordCommit
            | Sequence::Stamped
            | Sequence::DedupedThenCommit
            | Sequence::Atomic
            | Sequence::AtomicThenEmail
            | Sequence::EmailThenAtomic { .. }
            | Sequence::AtomicThenIndex
            | Sequence::AtomicWithOutbox => return Ok(true),
        }
        let (output, epoch, fence) = (self.output_log(), self.leases[&partition].epoch, self.txn_fence(partition));
        let group = self.group.clone();
        let section = self.store.output_section((&group, partition), fence, &mut || {}, |txns| {
            output.take(txns, (&group, partition, epoch), fence.is_some()).map_err(OwnerError::from)
        });
        let (take, repairs) = match section {
            Ok(taken) => taken,
            Err(OwnerError::Store(StoreError::Fenced { .. })) => {
                self.leases.remove(&partition);
                return Ok(false);
            }
            Err(error) => return Err(error),
        };
        self.keep_repairs(repairs);
        self.keep_take(take);
        Ok(true)
    }

    fn keep_take(&mut self, take: Take) {
        if self.takes.len() == REPORTS_KEPT_MAX {
            self.takes.remove(0);
        }
        self.takes.push(take);
    }

    /// `produce-output`: in one output section (fenced by the lease epoch under txn-fenced,
    /// `Fenced` and nothing appended when stale) the batch's output records are appended as the
    /// data records of a new transaction, durably. The batch moves to `Produced`.
    pub(super) fn produce_output(&mut self, step: Step) -> Result<Outcome, OwnerError> {
        let (partition, offset) = (step.partition, step.offset);
        let items = self.items(partition, offset);
        let fence = self.settings.fence(FencedWrite::ProduceOutput, self.txn_fence(partition));
        let (output, epoch) = (self.output_log(), self.leases[&partition].epoch);
        let (group, crash) = (self.group.clone(), self.crash.clone());
        let span = offset..offset + items.len() as u64;
        let mut inside = || crash.at(StepKind::ProduceOutput, When::Inside, span.clone());
        let section = self.store.output_section((&group, partition), fence, &mut inside, |_| {
            output.append_data((&group, partition, epoch), &items).map_err(OwnerError::from)
        });
        let (offsets, repairs) = match section {
            Ok(appended) => appended,
            Err(OwnerError::Store(StoreError::Fenced { held, current, .. })) => {
                return Ok(self.fenced(partition, held, current))
            }
            Err(error) => return Err(error),
        };
        self.keep_repairs(repairs);
        let record = self.lease_mut(partition).records.get_mut(&offset).expect("in flight");
        record.stage = Stage::Produced;
        record.output = Some(offsets.clone());
        Ok(Outcome::Produced { first: offsets.start, end: offsets.end })
    }

    /// `commit-txn`: one store transaction (fenced under txn-fenced: `Fenced` and nothing
    /// written when stale) adds the batch's deltas to the total, sets the next offset past it
    /// and records the transaction as committed: the commit point. Then, in an output section,
    /// its commit marker (unless a take of the partition wrote it since). A crash between the
    /// two (`commit-txn:inside`) leaves a committed transaction without its marker, which
    /// read_committed readers stop at until the next take of the partition writes it.
    pub(super) fn commit_txn(&mut self, step: Step) -> Result<Outcome, OwnerError> {
        let (partition, offset) = (step.partition, step.offset);
        let items = self.items(partition, offset);
        let record = &self.leases[&partition].records[&offset];
        let output_offsets = record.output.clone().expect("invariant: a produced batch knows its output offsets");
        let epoch = self.leases[&partition].epoch;
        let fence = self.settings.fence(FencedWrite::CommitTxn, self.txn_fence(partition));
        let txn = TxnKey { group: self.group.clone(), partition, epoch, first_output: output_offsets.start };
        let row = TxnRow {
            group: txn.group.clone(),
            partition,
            first_output: txn.first_output,
            epoch,
            input_offset: offset,
            input_end: record.end,
            state: TxnState::Committed,
        };
        // No crash point falls inside the store transaction: one there is `commit-txn:before`
        // as far as anything durable goes (it rolls back).
        match self.store.commit_txn(&items, fence, &row, &mut || {}) {
            Ok(()) => {}
            Err(StoreError::Fenced { held, current, .. }) => return Ok(self.fenced(partition, held, current)),
            Err(error) => return Err(error.into()),
        }
        let span = offset..row.input_end;
        self.crash.at(StepKind::CommitTxn, When::Inside, span);
        let output = self.output_log();
        let input = offset..row.input_end;
        let group = self.group.clone();
        // The marker is no decision (the store made it): no fence.
        let (_, repairs) = self.store.output_section((&group, partition), None, &mut || {}, |_| {
            output.mark_committed(&txn, input).map_err(OwnerError::from)
        })?;
        self.keep_repairs(repairs);
        let applied = vec![true; items.len()];
        self.after_effect(step, &applied);
        Ok(Outcome::Applied { applied: items.len() as u64, skipped: 0 })
    }
}
