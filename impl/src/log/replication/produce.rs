//! The producer on a replicated log (spec.md §3.2's `append` and `acknowledge`): `acks=1`
//! appends to the leader's replica and is acknowledged there; `acks=all` refuses an ISR
//! smaller than `min.insync.replicas` (nothing appended), appends to the leader, and is
//! answered once the high watermark covers the batch: acknowledged if the ISR still has
//! `min.insync.replicas` members, `NotEnoughReplicasAfterAppend` otherwise, or lost when the
//! current leader's log no longer holds it (an election). The two halves are apart
//! ([`ReplicatedLog::append_pending`], [`ReplicatedLog::acknowledge`]) so that a harness can
//! take the model's steps one at a time; [`ReplicatedLog::append_all`] polls between them.

use super::state::{read_state, state_path};
use super::{partition_of, ReplicatedLog, ReplicationError};
use crate::log::durable::sync_dir;
use crate::log::{Appended, LogError, Producer, TailRepair};
use std::collections::BTreeSet;
use std::fmt;
use std::ops::Range;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// How often `append_all` looks at the high watermark again.
const ACK_POLL_MS: u64 = 2;

/// The producer's acknowledgement mode (`--acks`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Acks {
    /// `acks=1`: acknowledged once the leader's own append is durable.
    #[default]
    Leader,
    /// `acks=all`: acknowledged once the high watermark covers the batch and the ISR still
    /// has `min.insync.replicas` members.
    All,
}

impl FromStr for Acks {
    type Err = String;

    fn from_str(text: &str) -> Result<Acks, String> {
        match text {
            "1" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            other => Err(format!("unknown acks mode {other:?}: expected 1 or all")),
        }
    }
}

impl fmt::Display for Acks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Acks::Leader => f.write_str("1"),
            Acks::All => f.write_str("all"),
        }
    }
}

/// A batch for the leader: its payloads, and the idempotent producer and base sequence (a
/// retry repeats them), if any.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    pub payloads: &'a [Vec<u8>],
    pub producer: Option<(Producer, u32)>,
}

/// What the leader's append did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderAppend {
    pub partition: u32,
    /// The offsets on the leader (an idempotent retry's: the original ones, nothing appended).
    pub appended: Appended,
    pub leader: u32,
    pub leader_epoch: u32,
    /// After the append: it moves with an append only when the ISR is the leader alone.
    pub high_watermark: u64,
    pub isr: BTreeSet<u32>,
    /// Unacknowledged tails the leader's writer cut when it opened.
    pub repairs: Vec<TailRepair>,
}

/// An `acks=all` batch on the leader, waiting for its answer.
#[derive(Clone, Debug)]
pub struct Pending {
    pub append: LeaderAppend,
    pub min_insync: u32,
    /// The batch's frames as the leader holds them: whether a leader still holds the batch
    /// is whether it holds these bytes at its offsets.
    frames: Vec<u8>,
}

/// One look at a pending batch's fate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The high watermark does not cover the batch yet.
    Waiting {
        high_watermark: u64,
    },
    Acknowledged {
        high_watermark: u64,
        isr: BTreeSet<u32>,
    },
    /// The high watermark covers it, but the ISR is smaller than `min.insync.replicas`.
    NotEnoughReplicasAfterAppend {
        isr: BTreeSet<u32>,
    },
    /// The current leader's log does not hold the batch (an election lost it), or there is
    /// no leader.
    Lost {
        leader: Option<u32>,
    },
}

/// An acknowledged `acks=all` batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acknowledged {
    pub append: LeaderAppend,
    pub high_watermark: u64,
    pub isr: BTreeSet<u32>,
}

impl ReplicatedLog {
    /// `acks=1`: appends `batch` to the leader's replica of `partition` (durable there, with its
    /// acknowledgement record) and returns: acknowledged, replicated or not. No leader is
    /// [`LogError::Unavailable`].
    pub fn append_leader(&self, partition: u32, batch: Batch) -> Result<LeaderAppend, ReplicationError> {
        Ok(self.append_to_leader(partition, batch, None)?.0)
    }

    /// `acks=all`, first half: [`ReplicationError::NotEnoughReplicas`] (nothing appended) when
    /// the ISR has fewer than `min_insync` members; otherwise `batch` is appended to the
    /// leader and pending until [`ReplicatedLog::acknowledge`] answers it.
    pub fn append_pending(&self, partition: u32, batch: Batch, min_insync: u32) -> Result<Pending, ReplicationError> {
        if !(1..=self.replicas).contains(&min_insync) {
            return Err(ReplicationError::BadMinInsync { min_insync, replicas: self.replicas });
        }
        let (append, frames) = self.append_to_leader(partition, batch, Some(min_insync))?;
        Ok(Pending { append, min_insync, frames })
    }

    /// `acks=all`, second half, one look at the state (spec.md §3.2's `acknowledge`): see
    /// [`Answer`]. The state an acknowledgement rests on is made durable first.
    pub fn acknowledge(&self, pending: &Pending) -> Result<Answer, ReplicationError> {
        let mut state = read_state(&self.storage, &self.dir)?;
        let part = partition_of(&mut state, pending.append.partition)?;
        let offsets = &pending.append.appended.offsets;
        let held = match part.leader {
            Some(leader) => self.holds(leader, pending.append.partition, offsets.clone(), &pending.frames)?,
            None => false,
        };
        if !held {
            return Ok(Answer::Lost { leader: part.leader });
        }
        if part.high_watermark < offsets.end {
            return Ok(Answer::Waiting { high_watermark: part.high_watermark });
        }
        sync_dir(&self.storage, &self.dir)?;
        if part.isr.len() as u32 >= pending.min_insync {
            Ok(Answer::Acknowledged { high_watermark: part.high_watermark, isr: part.isr.clone() })
        } else {
            Ok(Answer::NotEnoughReplicasAfterAppend { isr: part.isr.clone() })
        }
    }

    /// `acks=all` whole: [`ReplicatedLog::append_pending`], then [`ReplicatedLog::acknowledge`]
    /// every few milliseconds until the batch is answered or `timeout` passes. Every answer
    /// but an acknowledgement is an error; all but `NotEnoughReplicas` are ambiguous (the
    /// batch was appended): an idempotent retry resolves them.
    pub fn append_all(
        &self,
        partition: u32,
        batch: Batch,
        min_insync: u32,
        timeout: Duration,
    ) -> Result<Acknowledged, ReplicationError> {
        let pending = self.append_pending(partition, batch, min_insync)?;
        let started = Instant::now();
        loop {
            let answer = self.acknowledge(&pending)?;
            let offsets = pending.append.appended.offsets.clone();
            return match answer {
                Answer::Waiting { .. } if started.elapsed() < timeout => {
                    std::thread::sleep(Duration::from_millis(ACK_POLL_MS));
                    continue;
                }
                Answer::Waiting { high_watermark } => {
                    let waited_ms = started.elapsed().as_millis() as u64;
                    Err(ReplicationError::AckTimeout { partition, offsets, high_watermark, waited_ms })
                }
                Answer::Acknowledged { high_watermark, isr } => {
                    Ok(Acknowledged { append: pending.append, high_watermark, isr })
                }
                Answer::NotEnoughReplicasAfterAppend { isr } => {
                    Err(ReplicationError::NotEnoughReplicasAfterAppend { partition, offsets, isr, min_insync })
                }
                Answer::Lost { leader } => Err(ReplicationError::LostByElection { partition, offsets, leader }),
            };
        }
    }

    /// The append both modes share, under the state lock so that no election moves the leader
    /// meanwhile: `min_insync` is `acks=all`'s check. The high watermark moves with the append
    /// when the ISR is the leader alone. Returns the batch's frames too.
    fn append_to_leader(
        &self,
        partition: u32,
        batch: Batch,
        min_insync: Option<u32>,
    ) -> Result<(LeaderAppend, Vec<u8>), ReplicationError> {
        let (_lock, mut state) = self.locked()?;
        let part = partition_of(&mut state, partition)?;
        let Some(leader) = part.leader else {
            return Err(LogError::Unavailable { path: state_path(&self.dir), partition }.into());
        };
        if let Some(min_insync) = min_insync.filter(|&min| (part.isr.len() as u32) < min) {
            return Err(ReplicationError::NotEnoughReplicas { partition, isr: part.isr.clone(), min_insync });
        }
        let (mut log, repairs) = self.writer(leader)?;
        let appended = match batch.producer {
            Some((producer, sequence)) => log.append_idempotent(partition, producer, sequence, batch.payloads)?,
            None => Appended { offsets: log.append_batch(partition, batch.payloads)?, duplicate: false },
        };
        let end = log.end(partition)?;
        let frames = log.frames(partition, appended.offsets.clone())?;
        drop(log);
        let moved = self.advance_high_watermark(part, partition, &[(leader, end)])?;
        let (leader_epoch, high_watermark, isr) = (part.leader_epoch, part.high_watermark, part.isr.clone());
        if moved {
            self.commit(&mut state)?;
        }
        let append = LeaderAppend { partition, appended, leader, leader_epoch, high_watermark, isr, repairs };
        Ok((append, frames))
    }

    /// Whether broker `leader`'s replica holds `frames` at `offsets`.
    fn holds(&self, leader: u32, partition: u32, offsets: Range<u64>, frames: &[u8]) -> Result<bool, LogError> {
        let mut log = self.reader(leader)?;
        if log.end(partition)? < offsets.end {
            return Ok(false);
        }
        Ok(log.frames(partition, offsets)? == frames)
    }
}
