//! The replicated log (spec.md §3.2 and §10, "Replication"): per data directory two replicas,
//! each a complete log of its own (`log/replica-0/`, `log/replica-1/`: identity, partition
//! files, acknowledgement records, start files, writer lock, so every durability rule of the
//! plain log applies to each), and the replication state file (`state.rs`: per partition the
//! leader or none, the leader epoch, the high watermark, the ISR and the alive brokers). The
//! top-level `log/identity` is the same identity as every replica's, written last by `init`.
//!
//! It is the delivery lab's replicated partition on one machine: the "brokers" are two
//! directories, a follower fetch is an explicit step (`replicate`), and so are an ISR shrink
//! (`shrink_isr`) and a leader failure with its election (`fail_leader`), as in the lab and the
//! model. Every step that changes the state holds `log/replication.lock`, reads the state
//! (making it durable first), makes its file changes, records elections, truncations and ISR
//! changes in `log/replication.log`, and replaces the state file last.
//!
//! The producer (`produce.rs`) appends to the leader's replica under that lock: `acks=1` is
//! acknowledged by the leader's durable append; `acks=all` first refuses an ISR smaller than
//! `min.insync.replicas` (`NotEnoughReplicas`), then appends and is answered once the high
//! watermark covers the batch (`acknowledge`). Readers (`source.rs`) read the leader's
//! replica below the high watermark, through [`Log::open_reader`], so every owner works on a
//! replicated log unchanged.
//!
//! Files: `state.rs` (the state file, its lock, the journal), `error.rs`
//! (`ReplicationError`), this file (the front: create, open, the helpers every step shares),
//! `produce.rs` (the producer's append and acknowledgement), `steps.rs` (replicate, shrink the
//! ISR, fail the leader), `source.rs` (a reader's view of the leader).
//!
//! [`Log::open_reader`]: crate::log::Log::open_reader

mod error;
mod produce;
mod source;
mod state;
mod steps;

pub use error::ReplicationError;
pub use produce::{Acknowledged, Acks, Answer, Batch, LeaderAppend, Pending};
pub use state::{replica_dir, PartitionReplication, ReplicationState, REPLICAS_MAX, REPLICAS_MIN};
pub use steps::{Election, ElectionKind, Replicate, Shrunk};

pub(in crate::log) use source::Source;
pub(in crate::log) use state::is_replicated;

use crate::log::durable::create_dir_durably_on;
use crate::log::error::io_err;
use crate::log::identity::{check_identity, check_matches, read_identity, write_identity};
use crate::log::storage::{DirLock, Storage};
use crate::log::{holds_records, Log, LogError, LogIdentity, PartitionView, TailRepair, WriterMode};
use state::{create_journal, journal_path, lock_state, read_state, read_state_durable, state_path, write_state};
use std::path::{Path, PathBuf};

/// The handle on a replicated log directory (`log/`). Holds nothing open: every operation
/// opens the replicas it needs and takes the state lock when it changes the state.
#[derive(Clone, Debug)]
pub struct ReplicatedLog {
    storage: Storage,
    dir: PathBuf,
    identity: LogIdentity,
    replicas: u32,
}

impl ReplicatedLog {
    /// Creates the replicated log `identity` names in `dir` with `replicas` replicas (see the
    /// module documentation); nothing to do when `dir` holds it already. Another log, or a log
    /// with another replica count, is refused.
    pub fn create(dir: &Path, identity: LogIdentity, replicas: u32) -> Result<(), LogError> {
        ReplicatedLog::create_on(&Storage::Real, dir, identity, replicas)
    }

    /// [`ReplicatedLog::create`] on `storage`.
    pub fn create_on(storage: &Storage, dir: &Path, identity: LogIdentity, replicas: u32) -> Result<(), LogError> {
        assert!((REPLICAS_MIN..=REPLICAS_MAX).contains(&replicas), "{replicas} replicas");
        create_dir_durably_on(storage, dir)?;
        if let Some(found) = read_identity(storage, dir)? {
            check_matches(dir, found, identity)?;
            let found = match ReplicatedLog::open_on(storage, dir, identity)? {
                Some(log) => log.replicas,
                None => 1,
            };
            if found != replicas {
                return Err(LogError::ReplicaCount { path: dir.to_path_buf(), found, expected: replicas });
            }
            return Ok(());
        }
        if holds_records(storage, dir, identity.partitions)? {
            return Err(LogError::Unidentified { path: dir.to_path_buf() });
        }
        for broker in 0..replicas {
            Log::create_on(storage, &replica_dir(dir, broker), identity)?;
        }
        create_journal(storage, dir)?;
        if !storage.exists(&state_path(dir)) {
            write_state(storage, dir, &ReplicationState::initial(replicas, identity.partitions))?;
        }
        write_identity(storage, dir, identity)
    }

    /// `init`'s check, before anything is written: a log already in `dir` (an identity file, or
    /// a replica of a replicated `init` that stopped early) must have `replicas` replicas.
    pub fn check_init(dir: &Path, replicas: u32) -> Result<(), LogError> {
        let storage = Storage::Real;
        let found = if is_replicated(&storage, dir) {
            let made = (0..REPLICAS_MAX).filter(|&broker| storage.exists(&replica_dir(dir, broker))).count() as u32;
            // A replicated `init` killed before its last write (the identity) made its replicas
            // one by one: rerunning it finishes the rest.
            if made < replicas && read_identity(&storage, dir)?.is_none() {
                return Ok(());
            }
            made
        } else if read_identity(&storage, dir)?.is_some() {
            1
        } else {
            return Ok(());
        };
        if found != replicas {
            return Err(LogError::ReplicaCount { path: dir.to_path_buf(), found, expected: replicas });
        }
        Ok(())
    }

    /// The replicated log `identity` names in `dir`, or `None` when `dir` holds a plain log.
    /// Another log (at the top or in a replica), a missing state file or replica, and a state
    /// of another partition count are refused.
    pub fn open(dir: &Path, identity: LogIdentity) -> Result<Option<ReplicatedLog>, LogError> {
        ReplicatedLog::open_on(&Storage::Real, dir, identity)
    }

    /// [`ReplicatedLog::open`] on `storage`.
    pub fn open_on(storage: &Storage, dir: &Path, identity: LogIdentity) -> Result<Option<ReplicatedLog>, LogError> {
        check_identity(storage, dir, identity)?;
        if !is_replicated(storage, dir) {
            return Ok(None);
        }
        let state = read_state(storage, dir)?;
        let found = state.partitions.len() as u32;
        if found != identity.partitions {
            let (path, expected) = (state_path(dir), identity.partitions);
            return Err(LogError::PartitionCount { path, found, expected });
        }
        for broker in 0..state.replicas {
            check_identity(storage, &replica_dir(dir, broker), identity)?;
        }
        let log =
            ReplicatedLog { storage: storage.clone(), dir: dir.to_path_buf(), identity, replicas: state.replicas };
        Ok(Some(log))
    }

    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    pub fn identity(&self) -> LogIdentity {
        self.identity
    }

    /// The current replication state (as the file holds it; not made durable first).
    pub fn state(&self) -> Result<ReplicationState, LogError> {
        read_state(&self.storage, &self.dir)
    }

    /// Start, end, acknowledged end and damage of broker `broker`'s replica of `partition`
    /// (its whole log, not bounded by the high watermark).
    pub fn replica_view(&self, broker: u32, partition: u32) -> Result<PartitionView, LogError> {
        self.reader(broker)?.view(partition)
    }

    /// The records of broker `broker`'s replica of `partition` in `offsets` (any of its
    /// records, not only those below the high watermark).
    pub fn replica_read(
        &self,
        broker: u32,
        partition: u32,
        offsets: std::ops::Range<u64>,
    ) -> Result<Vec<crate::log::Record>, LogError> {
        self.reader(broker)?.read_range(partition, offsets)
    }

    /// The journal of elections, truncations and ISR changes, as text.
    pub fn journal(&self) -> Result<String, LogError> {
        let path = journal_path(&self.dir);
        let bytes = self.storage.read(&path).map_err(io_err(&path))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Broker `broker`'s replica as its writer, with the unacknowledged tails its open cut.
    fn writer(&self, broker: u32) -> Result<(Log, Vec<TailRepair>), LogError> {
        Log::open_writer_on(&self.storage, &replica_dir(&self.dir, broker), self.identity, WriterMode::Checked)
    }

    fn reader(&self, broker: u32) -> Result<Log, LogError> {
        Log::open_reader_on(&self.storage, &replica_dir(&self.dir, broker), self.identity)
    }

    /// The state lock and the state, made durable: what a step that changes it starts with.
    fn locked(&self) -> Result<(DirLock, ReplicationState), LogError> {
        let lock = lock_state(&self.storage, &self.dir)?;
        Ok((lock, read_state_durable(&self.storage, &self.dir)?))
    }

    /// Replaces the state file with `state`, one generation on.
    fn commit(&self, state: &mut ReplicationState) -> Result<(), LogError> {
        state.generation += 1;
        write_state(&self.storage, &self.dir, state)
    }

    fn record(&self, line: &str) -> Result<(), LogError> {
        state::record(&self.storage, &self.dir, line)
    }

    /// The high watermark recomputed (spec.md §3.2): the smallest log end among the ISR, never
    /// below the old mark (an unclean election is the only way back). `known` are ends the
    /// caller has at hand; the others are read. Returns whether it moved.
    fn advance_high_watermark(
        &self,
        part: &mut PartitionReplication,
        partition: u32,
        known: &[(u32, u64)],
    ) -> Result<bool, LogError> {
        let mut smallest: Option<u64> = None;
        for &broker in &part.isr {
            let end = match known.iter().find(|(at, _)| *at == broker) {
                Some(&(_, end)) => end,
                None => self.reader(broker)?.end(partition)?,
            };
            smallest = Some(smallest.map_or(end, |other| other.min(end)));
        }
        let Some(smallest) = smallest else { return Ok(false) };
        let moved = smallest > part.high_watermark;
        part.high_watermark = part.high_watermark.max(smallest);
        Ok(moved)
    }
}

/// `partition`'s state, checked against the partition count.
fn partition_of(state: &mut ReplicationState, partition: u32) -> Result<&mut PartitionReplication, LogError> {
    let partitions = state.partitions.len() as u32;
    state.partitions.get_mut(partition as usize).ok_or(LogError::NoSuchPartition { partition, partitions })
}

/// `init`'s identity for a replicated log whose top-level identity is missing (an `init` that
/// stopped before writing it): the replicas' own, when they hold no record; `None` when no
/// replica has one.
pub(in crate::log) fn identity_of_replicas(storage: &Storage, dir: &Path) -> Result<Option<LogIdentity>, LogError> {
    let Some(found) = read_identity(storage, &replica_dir(dir, 0))? else { return Ok(None) };
    for broker in 0..REPLICAS_MAX {
        if holds_records(storage, &replica_dir(dir, broker), found.partitions)? {
            return Err(LogError::Unidentified { path: dir.to_path_buf() });
        }
    }
    Ok(Some(found))
}
