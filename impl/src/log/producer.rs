//! Idempotent producers: per producer id and partition, the writer's table of its epoch and
//! its last [`RECENT_BATCHES`] batches, and the rules that accept, fence, deduplicate or refuse
//! an incoming batch (see [`Log::append_idempotent`](crate::log::Log::append_idempotent)).

use super::error::LogError;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;

/// How many recent batches per producer and partition a retry is matched against (Kafka's 5).
pub const RECENT_BATCHES: usize = 5;

/// An idempotent producer: its id (at least 1; 0 marks a plain append) and its epoch. A new
/// instance of a producer takes a higher epoch, which fences every older one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Producer {
    pub id: u64,
    pub epoch: u32,
}

/// What [`Log::append_idempotent`](crate::log::Log::append_idempotent) did with a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appended {
    /// The batch's offsets: new ones, or for a duplicate those of the original append.
    pub offsets: Range<u64>,
    /// true when this was an exact retry of a recorded batch: nothing was appended
    pub duplicate: bool,
}

/// One durable batch of an idempotent producer: what a retry must match exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ProducerBatch {
    pub(super) producer: Producer,
    pub(super) base_sequence: u32,
    /// At least 1.
    pub(super) count: u32,
    pub(super) first_offset: u64,
}

impl ProducerBatch {
    pub(super) fn offsets(&self) -> Range<u64> {
        self.first_offset..self.first_offset + u64::from(self.count)
    }

    fn last_sequence(&self) -> u32 {
        self.base_sequence.wrapping_add(self.count - 1)
    }
}

/// A producer's state in one partition: its epoch and its recent batches of that epoch,
/// oldest first. Never empty: a producer appears with its first batch.
struct ProducerState {
    epoch: u32,
    batches: VecDeque<ProducerBatch>,
}

/// The writer's idempotence state of one partition, per producer id.
#[derive(Default)]
pub(super) struct ProducerTable {
    producers: HashMap<u64, ProducerState>,
}

impl ProducerTable {
    /// Records a durable batch. A new epoch forgets the batches of the older one, and only
    /// the last [`RECENT_BATCHES`] batches are kept.
    pub(super) fn record(&mut self, batch: ProducerBatch) {
        let state = self
            .producers
            .entry(batch.producer.id)
            .or_insert(ProducerState { epoch: batch.producer.epoch, batches: VecDeque::new() });
        if state.epoch != batch.producer.epoch {
            state.epoch = batch.producer.epoch;
            state.batches.clear();
        }
        state.batches.push_back(batch);
        if state.batches.len() > RECENT_BATCHES {
            state.batches.pop_front();
        }
    }

    /// Applies the rules of [`Log::append_idempotent`](crate::log::Log::append_idempotent) to
    /// an incoming batch of `count` records: `Some` is the recorded batch it duplicates, `None`
    /// means append it. An empty batch is only checked for fencing.
    pub(super) fn check(
        &self,
        partition: u32,
        producer: Producer,
        base_sequence: u32,
        count: u32,
    ) -> Result<Option<ProducerBatch>, LogError> {
        let out_of_order = |expected| LogError::OutOfOrderSequence {
            partition,
            producer: producer.id,
            expected,
            found: base_sequence,
        };
        let Some(state) = self.producers.get(&producer.id) else {
            return if count == 0 || base_sequence == 0 { Ok(None) } else { Err(out_of_order(0)) };
        };
        if producer.epoch < state.epoch {
            return Err(LogError::ProducerFenced {
                partition,
                producer: producer.id,
                epoch: producer.epoch,
                current: state.epoch,
            });
        }
        if count == 0 {
            return Ok(None);
        }
        let expected = if producer.epoch > state.epoch {
            0
        } else {
            let recent = &state.batches;
            if let Some(original) = recent.iter().find(|b| b.base_sequence == base_sequence && b.count == count) {
                return Ok(Some(*original));
            }
            let last = recent.back().expect("a recorded producer has a batch");
            last.last_sequence().wrapping_add(1)
        };
        if base_sequence == expected {
            Ok(None)
        } else {
            Err(out_of_order(expected))
        }
    }
}
