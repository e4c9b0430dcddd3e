//! The acks rows (spec.md §3.2) on the real replicated log (`consumer::log::ReplicatedLog`):
//! the harness is the producer (`append_leader` for `acks=1`; `append_pending` and
//! `acknowledge` for `acks=all`) and the coordinator of the brokers (`replicate`, `shrink_isr`,
//! `fail_leader`), and it observes each broker's replica, the replication state and the
//! consumer-visible log as the model's `Replicas`.
//!
//! Every send is its own idempotent producer (producer id `1 + send`, epoch 1, sequence 0), so
//! that a record names its send in its frame, and a retry repeats the send's producer id, epoch
//! and sequence exactly. (One producer with a sequence per send would meet `OutOfOrderSequence`
//! on a leader that an election left without its last batch: a real producer then starts a new
//! epoch, which the model's producer, whose sends are independent, does not have.)

use super::narrow;
use super::rows::ReplicaSettings;
use crate::error::{Error, Unobservable};
use consumer::log::{replica_dir, Acks, Answer, Batch, LogError, Pending, Producer, ReplicatedLog, ReplicationError};
use model::state::Replicas;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Brokers per partition, as in the model (`Replicas::logs`).
pub const BROKERS: u32 = 2;

/// The frame head of the log format (spec.md §10 "Log files"): crc32c u32, length u32, offset
/// u64, producer id u64, producer epoch u32, sequence u32, batch length u32, the record's index
/// in its batch u32; the 24-byte
/// header (`ONCELOG3`, the log id u64, the partition u32, their crc32c u32) precedes the first
/// frame.
const FRAME_HEAD_BYTES: usize = 40;
const MAGIC: &[u8; 8] = b"ONCELOG3";
const HEADER_BYTES: usize = 24;

/// What the producer's send came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Appended to the leader (or recognised there: an idempotent retry) and, with `acks=1`,
    /// acknowledged; with `acks=all`, in flight.
    Appended,
    /// `NotEnoughReplicas`: nothing appended; the send is still to be sent.
    Refused,
}

/// The answer to an `acks=all` send in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answered {
    Acknowledged,
    /// `NotEnoughReplicasAfterAppend` (`refused`) or lost by an election: the send is
    /// unacknowledged, to be retried.
    Unacknowledged {
        send: u8,
        refused: bool,
    },
}

/// The replicated data directory and the harness's producer on it.
pub struct Replicated {
    log: ReplicatedLog,
    dir: PathBuf,
    settings: ReplicaSettings,
    /// Per partition, the `acks=all` send in flight and its pending batch.
    in_flight: Vec<Option<(u8, Pending)>>,
    /// Per partition, one bit per send the producer was told is acknowledged (ghost).
    acked: Vec<u16>,
    pub leader_failures_used: u8,
    pub isr_shrinks_used: u8,
}

impl Replicated {
    pub fn new(log: ReplicatedLog, dir: &Path, settings: ReplicaSettings, partitions: usize) -> Replicated {
        Replicated {
            log,
            dir: dir.to_path_buf(),
            settings,
            in_flight: vec![None; partitions],
            acked: vec![0; partitions],
            leader_failures_used: 0,
            isr_shrinks_used: 0,
        }
    }

    /// The producer sends `send` (a new send or a retry: the same producer fields either way)
    /// with the row's acknowledgement mode. `answered`: false when the answer is lost
    /// (`append-ack-lost`): the producer is told nothing, and an `acks=all` send is not waited
    /// for.
    pub fn send(&mut self, partition: u8, send: u8, payload: Vec<u8>, answered: bool) -> Result<Sent, Error> {
        let p = usize::from(partition);
        let payloads = [payload];
        let producer = Producer { id: 1 + u64::from(send), epoch: 1 };
        let batch = Batch { payloads: &payloads, producer: Some((producer, 0)) };
        match self.settings.acks {
            Acks::Leader => {
                self.log.append_leader(u32::from(partition), batch).map_err(replication)?;
                if answered {
                    self.acked[p] |= 1 << send;
                }
            }
            Acks::All => match self.log.append_pending(u32::from(partition), batch, self.settings.min_insync) {
                Ok(pending) if answered => self.in_flight[p] = Some((send, pending)),
                Ok(_) => {}
                Err(ReplicationError::NotEnoughReplicas { .. }) => return Ok(Sent::Refused),
                Err(error) => return Err(replication(error)),
            },
        }
        Ok(Sent::Appended)
    }

    /// One look at the answer to the send in flight (spec.md §3.2's `acknowledge`). The model
    /// answers only a send the high watermark covers, or one an election lost: `Waiting` is a
    /// divergence.
    pub fn acknowledge(&mut self, partition: u8) -> Result<Answered, Error> {
        let p = usize::from(partition);
        let (send, pending) = self.in_flight[p].take().ok_or(Error::NothingInFlight { partition })?;
        match self.log.acknowledge(&pending).map_err(replication)? {
            Answer::Acknowledged { .. } => {
                self.acked[p] |= 1 << send;
                Ok(Answered::Acknowledged)
            }
            Answer::NotEnoughReplicasAfterAppend { .. } => Ok(Answered::Unacknowledged { send, refused: true }),
            Answer::Lost { .. } => Ok(Answered::Unacknowledged { send, refused: false }),
            Answer::Waiting { high_watermark } => Err(Error::AckWaiting { partition, high_watermark }),
        }
    }

    /// One follower fetch (`replicate`).
    pub fn replicate(&mut self, partition: u8) -> Result<(), Error> {
        self.log.replicate(u32::from(partition)).map_err(replication)?;
        Ok(())
    }

    /// The lagging follower leaves the ISR (`shrink-isr`).
    pub fn shrink_isr(&mut self, partition: u8) -> Result<(), Error> {
        self.log.shrink_isr(u32::from(partition)).map_err(replication)?;
        self.isr_shrinks_used += 1;
        Ok(())
    }

    /// The leader fails; the election is clean, unclean where the row allows it, or none.
    pub fn fail_leader(&mut self, partition: u8) -> Result<(), Error> {
        self.log.fail_leader(u32::from(partition), self.settings.unclean).map_err(replication)?;
        self.leader_failures_used += 1;
        Ok(())
    }

    /// The model's `Replicas` of `partition`: each broker's records as the sends their frames
    /// name, the replication state, the send in flight and the acknowledged sends.
    pub fn observe(&self, partition: u32) -> Result<Replicas, Error> {
        let state = self.log.state()?;
        let unobservable = |what: String| Unobservable::Replication { partition, what };
        if state.replicas != BROKERS {
            return Err(unobservable(format!("{} replicas, the model has {BROKERS}", state.replicas)).into());
        }
        let part = state.partitions.get(partition as usize).ok_or_else(|| unobservable("no state".into()))?;
        let members = |set: &BTreeSet<u32>, what: &str| -> Result<[bool; 2], Unobservable> {
            if set.iter().any(|&broker| broker >= BROKERS) {
                return Err(unobservable(format!("the {what} {set:?} names a broker past {}", BROKERS - 1)));
            }
            Ok([set.contains(&0), set.contains(&1)])
        };
        let p = partition as usize;
        Ok(Replicas {
            logs: [self.replica_sends(0, partition)?, self.replica_sends(1, partition)?],
            leader: part.leader.map(|leader| narrow(leader, "leader")).transpose()?,
            hw: narrow(part.high_watermark, "high watermark")?,
            isr: members(&part.isr, "ISR")?,
            alive: members(&part.alive, "alive set")?,
            in_flight: self.in_flight[p].as_ref().map(|(send, _)| *send),
            acked: self.acked[p],
        })
    }

    /// The sends broker `broker`'s replica of `partition` holds, in offset order: the producer
    /// id of each frame below the replica's end, read from its file (spec.md §10's layout:
    /// the records' payloads are all the same delta, the frames name their producer).
    fn replica_sends(&self, broker: u32, partition: u32) -> Result<Vec<u8>, Error> {
        let end = self.log.replica_view(broker, partition)?.end;
        let path = replica_dir(&self.dir, broker).join(format!("partition-{partition}.log"));
        let bytes = std::fs::read(&path).map_err(Error::io(&path, "read"))?;
        let bad = |offset: u64, reason: &str| Unobservable::Frame { path: path.clone(), offset, reason: reason.into() };
        if !bytes.starts_with(MAGIC) {
            return Err(bad(0, "the file does not start with ONCELOG3").into());
        }
        let (mut at, mut sends) = (HEADER_BYTES, Vec::new());
        for offset in 0..end {
            let head = bytes.get(at..at + FRAME_HEAD_BYTES).ok_or_else(|| bad(offset, "the file ends first"))?;
            let u64_at = |from: usize| u64::from_le_bytes(head[from..from + 8].try_into().expect("8 bytes"));
            let length = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
            if u64_at(8) != offset {
                return Err(bad(offset, "the frame there names another offset").into());
            }
            let send = u64_at(16).checked_sub(1).ok_or_else(|| bad(offset, "a record no send of the harness made"))?;
            sends.push(narrow(send, "send")?);
            at += FRAME_HEAD_BYTES + length as usize;
        }
        Ok(sends)
    }
}

fn replication(error: ReplicationError) -> Error {
    match error {
        ReplicationError::Log(error) => Error::Log(error),
        other => Error::Replication(Box::new(other)),
    }
}

/// Whether a reader's error says the partition has no leader (nothing can be read).
pub fn is_unavailable(error: &LogError) -> bool {
    matches!(error, LogError::Unavailable { .. })
}
