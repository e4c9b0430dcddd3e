//! `ReplicationError`: how a producer's acknowledgement or a replication step fails, beyond
//! the log's own errors. Each names the partition, and the offsets an ambiguous failure
//! appended.

use crate::log::LogError;
use std::collections::BTreeSet;
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

/// Every way a replicated append, acknowledgement or step fails.
#[derive(Debug)]
pub enum ReplicationError {
    Log(LogError),
    /// `acks=all` (or a replication step) on a log that is not replicated.
    NotReplicated {
        path: PathBuf,
    },
    /// `--min-insync-replicas` outside `1..=replicas`.
    BadMinInsync {
        min_insync: u32,
        replicas: u32,
    },
    /// `acks=all` and the ISR is smaller than `min.insync.replicas`: nothing was appended.
    NotEnoughReplicas {
        partition: u32,
        isr: BTreeSet<u32>,
        min_insync: u32,
    },
    /// `acks=all`: the high watermark covers the batch, but the ISR shrank below
    /// `min.insync.replicas`. Ambiguous: appended at `offsets`, not acknowledged.
    NotEnoughReplicasAfterAppend {
        partition: u32,
        offsets: Range<u64>,
        isr: BTreeSet<u32>,
        min_insync: u32,
    },
    /// `acks=all`: the current leader's log does not hold the batch (an election lost it, or
    /// there is no leader). Ambiguous: appended at `offsets` on the old leader, not acknowledged.
    LostByElection {
        partition: u32,
        offsets: Range<u64>,
        leader: Option<u32>,
    },
    /// `acks=all`: the high watermark did not cover the batch in time. Ambiguous: appended at
    /// `offsets`, not acknowledged.
    AckTimeout {
        partition: u32,
        offsets: Range<u64>,
        high_watermark: u64,
        waited_ms: u64,
    },
    /// The step is not enabled in this state (spec.md §3.2's preconditions).
    NotEnabled {
        partition: u32,
        step: &'static str,
        why: String,
    },
    /// A follower's log is not a prefix of its leader's, or an ISR member is below the high
    /// watermark: refused, nothing copied or promoted.
    Diverged {
        partition: u32,
        broker: u32,
        reason: String,
    },
}

impl fmt::Display for ReplicationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplicationError::Log(error) => write!(f, "{error}"),
            ReplicationError::NotReplicated { path } => write!(
                f,
                "log {} is not replicated: --acks all and the replication steps need `consumer init --replicas 2`",
                path.display()
            ),
            ReplicationError::BadMinInsync { min_insync, replicas } => {
                write!(f, "--min-insync-replicas {min_insync} is out of range: accepted values are 1..={replicas}")
            }
            ReplicationError::NotEnoughReplicas { partition, isr, min_insync } => write!(
                f,
                "NotEnoughReplicas: partition {partition} has {} in-sync replica(s) {isr:?}, fewer than \
                 min.insync.replicas {min_insync}: nothing appended",
                isr.len()
            ),
            ReplicationError::NotEnoughReplicasAfterAppend { partition, offsets, isr, min_insync } => write!(
                f,
                "NotEnoughReplicasAfterAppend: partition {partition} offsets {}..{} were appended, but the ISR \
                 {isr:?} shrank below min.insync.replicas {min_insync}: not acknowledged (retry with the same \
                 producer id, epoch and sequence)",
                offsets.start, offsets.end
            ),
            ReplicationError::LostByElection { partition, offsets, leader } => write!(
                f,
                "partition {partition} offsets {}..{} were appended to a leader that failed, and the current leader \
                 ({}) does not hold them: not acknowledged (retry with the same producer id, epoch and sequence)",
                offsets.start,
                offsets.end,
                leader.map_or("none".to_string(), |leader| format!("broker {leader}"))
            ),
            ReplicationError::AckTimeout { partition, offsets, high_watermark, waited_ms } => write!(
                f,
                "partition {partition} offsets {}..{} were appended, but the high watermark ({high_watermark}) did \
                 not cover them within {waited_ms} ms: not acknowledged (replicate, then retry with the same \
                 producer id, epoch and sequence)",
                offsets.start, offsets.end
            ),
            ReplicationError::NotEnabled { partition, step, why } => {
                write!(f, "{step} of partition {partition} is not possible now: {why}")
            }
            ReplicationError::Diverged { partition, broker, reason } => {
                write!(f, "partition {partition}: broker {broker}'s replica diverged: {reason} (refused)")
            }
        }
    }
}

impl std::error::Error for ReplicationError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // Transparent: its message is the log error's own, so its source is the log error's.
            ReplicationError::Log(error) => std::error::Error::source(error),
            ReplicationError::NotReplicated { .. }
            | ReplicationError::BadMinInsync { .. }
            | ReplicationError::NotEnoughReplicas { .. }
            | ReplicationError::NotEnoughReplicasAfterAppend { .. }
            | ReplicationError::LostByElection { .. }
            | ReplicationError::AckTimeout { .. }
            | ReplicationError::NotEnabled { .. }
            | ReplicationError::Diverged { .. } => None,
        }
    }
}

impl From<LogError> for ReplicationError {
    fn from(error: LogError) -> Self {
        ReplicationError::Log(error)
    }
}

impl ReplicationError {
    /// Whether the error is a refusal to protect data (exit status 4): a write that is not
    /// acknowledged (whether or not it was appended), a partition without a leader, a replica
    /// that diverged. Bad input and a step that is not enabled are 2.
    pub fn is_refusal(&self) -> bool {
        match self {
            ReplicationError::Log(error) => error.is_refusal(),
            ReplicationError::NotEnoughReplicas { .. }
            | ReplicationError::NotEnoughReplicasAfterAppend { .. }
            | ReplicationError::LostByElection { .. }
            | ReplicationError::AckTimeout { .. }
            | ReplicationError::Diverged { .. } => true,
            ReplicationError::NotReplicated { .. }
            | ReplicationError::BadMinInsync { .. }
            | ReplicationError::NotEnabled { .. } => false,
        }
    }

    /// Whether the batch was appended (to some leader) though not acknowledged: the ambiguous
    /// failures an idempotent retry resolves.
    pub fn appended(&self) -> Option<&Range<u64>> {
        match self {
            ReplicationError::NotEnoughReplicasAfterAppend { offsets, .. }
            | ReplicationError::LostByElection { offsets, .. }
            | ReplicationError::AckTimeout { offsets, .. } => Some(offsets),
            ReplicationError::Log(_)
            | ReplicationError::NotReplicated { .. }
            | ReplicationError::BadMinInsync { .. }
            | ReplicationError::NotEnoughReplicas { .. }
            | ReplicationError::NotEnabled { .. }
            | ReplicationError::Diverged { .. } => None,
        }
    }
}
