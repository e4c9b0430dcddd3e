//! A reader of a replicated log ([`Log::open_reader`] on `log/`): each partition is read
//! from its current leader's replica, below the high watermark, so consumers see committed
//! records only and an owner works on a replicated log unchanged. Every refresh reads the
//! state file again: a new leader (an election) is followed, and a partition without one is
//! [`LogError::Unavailable`]. A state of a new generation is made durable (the directory
//! synced) before anything it covers is exposed: its writer may not have synced the rename
//! yet, and a power cut must not take back a high watermark a consumer read below.
//!
//! [`Log::open_reader`]: crate::log::Log::open_reader

use super::state::{read_state, replica_dir, state_path};
use crate::log::durable::sync_dir;
use crate::log::partition::Partition;
use crate::log::storage::Storage;
use crate::log::{LogError, LogIdentity};
use std::path::{Path, PathBuf};

/// Where a reader of a replicated log reads each partition from.
pub(in crate::log) struct Source {
    storage: Storage,
    dir: PathBuf,
    /// The broker whose replica each partition's `Partition` reads, once pointed at one.
    reading: Vec<Option<u32>>,
    /// The state generation this reader last made durable.
    synced: u64,
    /// The log's id, which every replica's files name (replicas share the log's identity).
    log: u64,
}

impl Source {
    /// The source of a reader of `dir`, or `None` when `dir` holds a plain log.
    pub(in crate::log) fn open(
        storage: &Storage,
        dir: &Path,
        identity: LogIdentity,
    ) -> Result<Option<Source>, LogError> {
        if super::ReplicatedLog::open_on(storage, dir, identity)?.is_none() {
            return Ok(None);
        }
        let reading = vec![None; identity.partitions as usize];
        let (storage, dir) = (storage.clone(), dir.to_path_buf());
        Ok(Some(Source { storage, dir, reading, synced: 0, log: identity.id }))
    }

    /// Points `part` (partition `number`) at its leader's replica, refreshed, and bounds it by
    /// the high watermark.
    pub(in crate::log) fn follow(&mut self, number: u32, part: &mut Partition) -> Result<(), LogError> {
        let state = read_state(&self.storage, &self.dir)?;
        if state.generation != self.synced {
            sync_dir(&self.storage, &self.dir)?;
            self.synced = state.generation;
        }
        let Some(replication) = state.partitions.get(number as usize) else {
            let (found, expected) = (state.partitions.len() as u32, self.reading.len() as u32);
            return Err(LogError::PartitionCount { path: state_path(&self.dir), found, expected });
        };
        let Some(leader) = replication.leader else {
            return Err(LogError::Unavailable { path: state_path(&self.dir), partition: number });
        };
        if self.reading[number as usize] != Some(leader) {
            *part = Partition::new(&self.storage, &replica_dir(&self.dir, leader), self.log, number);
            self.reading[number as usize] = Some(leader);
        }
        part.refresh()?;
        part.limit = Some(replication.high_watermark);
        Ok(())
    }
}
