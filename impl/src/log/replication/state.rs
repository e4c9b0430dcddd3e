//! The replication state file, `log/replication.state`: per partition the leader (or none),
//! the leader epoch, the high watermark, the ISR and the alive brokers; its lock
//! `log/replication.lock`, held by every step that changes it; and the journal
//! `log/replication.log`, where every election, truncation and ISR change is recorded (one
//! line each, synced) before it is made.
//!
//! Layout (all LE): `ONCEREP1` | replicas u32 | partitions u32 | generation u64 | per
//! partition: leader u32 (`u32::MAX`: none) | leader epoch u32 | high watermark u64 | ISR u32
//! (a bit per broker) | alive u32 (a bit per broker) | crc32c u32 of every byte before it. The
//! file is replaced atomically (temp file, fsync, rename, fsync of the directory): a power cut
//! leaves the old state or the new one, never a torn one. Every replacement bumps the
//! generation, so a reader can tell a new state from the one it acted on.

use crate::log::durable::{replace_file, sync_dir};
use crate::log::error::{io_err, LogError};
use crate::log::storage::{DirLock, OpenMode, Storage};
use serde::Serialize;
use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The replica counts a replicated log may have (1 is the plain log, not replicated).
pub const REPLICAS_MIN: u32 = 2;
pub const REPLICAS_MAX: u32 = 2;

const MAGIC: &[u8; 8] = b"ONCEREP1";
const STATE_FILE: &str = "replication.state";
const LOCK_FILE: &str = "replication.lock";
const JOURNAL_FILE: &str = "replication.log";
const NO_LEADER: u32 = u32::MAX;
/// Bytes before the partitions, and per partition.
const HEAD_LEN: usize = 24;
const PARTITION_LEN: usize = 24;
/// How long a step waits for another process's step to release the lock.
const LOCK_WAIT_MS_MAX: u64 = 10_000;
const LOCK_POLL_MS: u64 = 1;

/// One partition's replication state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartitionReplication {
    /// `None`: no replica could be elected; the partition is unavailable.
    pub leader: Option<u32>,
    /// Elections so far (every `fail-leader`).
    pub leader_epoch: u32,
    /// Records below it are on every ISR member; consumers read only below it.
    pub high_watermark: u64,
    /// The in-sync replicas; the leader is one of them.
    pub isr: BTreeSet<u32>,
    /// The brokers that have not failed (a failed broker never comes back).
    pub alive: BTreeSet<u32>,
}

impl PartitionReplication {
    /// The alive broker that is not the leader, if any: the one that fetches from it.
    pub fn follower(&self) -> Option<u32> {
        self.alive.iter().copied().find(|&broker| Some(broker) != self.leader)
    }
}

/// The whole file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplicationState {
    pub replicas: u32,
    /// Bumped by every replacement of the file.
    pub generation: u64,
    pub partitions: Vec<PartitionReplication>,
}

impl ReplicationState {
    /// A new replicated log: broker 0 leads every partition, every broker alive and in sync.
    pub fn initial(replicas: u32, partitions: u32) -> ReplicationState {
        assert!((REPLICAS_MIN..=REPLICAS_MAX).contains(&replicas), "{replicas} replicas");
        let all: BTreeSet<u32> = (0..replicas).collect();
        let partition =
            PartitionReplication { leader: Some(0), leader_epoch: 0, high_watermark: 0, isr: all.clone(), alive: all };
        ReplicationState { replicas, generation: 1, partitions: vec![partition; partitions as usize] }
    }

    fn encode(&self) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&self.replicas.to_le_bytes());
        bytes.extend_from_slice(&(self.partitions.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&self.generation.to_le_bytes());
        for part in &self.partitions {
            bytes.extend_from_slice(&part.leader.unwrap_or(NO_LEADER).to_le_bytes());
            bytes.extend_from_slice(&part.leader_epoch.to_le_bytes());
            bytes.extend_from_slice(&part.high_watermark.to_le_bytes());
            bytes.extend_from_slice(&bits(&part.isr).to_le_bytes());
            bytes.extend_from_slice(&bits(&part.alive).to_le_bytes());
        }
        bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
        bytes
    }

    /// The state in `bytes`, or why they are not one.
    fn decode(bytes: &[u8]) -> Result<ReplicationState, String> {
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        if bytes.len() < HEAD_LEN + 4 || &bytes[..8] != MAGIC {
            return Err("it does not start with ONCEREP1".into());
        }
        let (replicas, count) = (u32_at(8), u32_at(12) as usize);
        if bytes.len() != HEAD_LEN + count * PARTITION_LEN + 4 {
            return Err(format!("{} bytes cannot hold {count} partitions", bytes.len()));
        }
        let crc_at = bytes.len() - 4;
        if crc32c::crc32c(&bytes[..crc_at]) != u32_at(crc_at) {
            return Err("checksum mismatch".into());
        }
        if !(REPLICAS_MIN..=REPLICAS_MAX).contains(&replicas) {
            return Err(format!("{replicas} replicas (supported: {REPLICAS_MIN}..={REPLICAS_MAX})"));
        }
        let partitions = (0..count)
            .map(|p| {
                let at = HEAD_LEN + p * PARTITION_LEN;
                let leader = Some(u32_at(at)).filter(|&leader| leader != NO_LEADER);
                let (isr, alive) = (brokers(u32_at(at + 16)), brokers(u32_at(at + 20)));
                let part = PartitionReplication {
                    leader,
                    leader_epoch: u32_at(at + 4),
                    high_watermark: u64_at(at + 8),
                    isr,
                    alive,
                };
                check_partition(&part, replicas).map_err(|why| format!("partition {p}: {why}")).map(|()| part)
            })
            .collect::<Result<_, _>>()?;
        Ok(ReplicationState { replicas, generation: u64_at(16), partitions })
    }
}

/// The invariants a decoded partition must hold: brokers within the count, the ISR among the
/// alive, the leader alive and in the ISR.
fn check_partition(part: &PartitionReplication, replicas: u32) -> Result<(), String> {
    let within = part.alive.iter().chain(&part.isr).chain(&part.leader).all(|&broker| broker < replicas);
    if !within {
        return Err(format!("a broker outside 0..{replicas}"));
    }
    if !part.isr.is_subset(&part.alive) {
        return Err("an ISR member is not alive".into());
    }
    match part.leader {
        Some(leader) if !part.isr.contains(&leader) => Err(format!("the leader {leader} is not in the ISR")),
        Some(_) | None => Ok(()),
    }
}

fn bits(brokers: &BTreeSet<u32>) -> u32 {
    brokers.iter().fold(0, |acc, &broker| acc | 1 << broker)
}

fn brokers(bits: u32) -> BTreeSet<u32> {
    (0..32).filter(|broker| bits & (1 << broker) != 0).collect()
}

pub(super) fn state_path(dir: &Path) -> PathBuf {
    dir.join(STATE_FILE)
}

pub(super) fn journal_path(dir: &Path) -> PathBuf {
    dir.join(JOURNAL_FILE)
}

/// The directory of broker `broker`'s replica, a complete log of its own.
pub fn replica_dir(dir: &Path, broker: u32) -> PathBuf {
    dir.join(format!("replica-{broker}"))
}

/// Reads the state file of the replicated log in `dir`; missing is refused.
pub(super) fn read_state(storage: &Storage, dir: &Path) -> Result<ReplicationState, LogError> {
    let path = state_path(dir);
    let bytes = match storage.read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(LogError::Missing { path, what: "the replication state file" })
        }
        Err(e) => return Err(io_err(&path)(e)),
    };
    ReplicationState::decode(&bytes).map_err(|reason| LogError::Corrupt { path, offset: 0, position: 0, reason })
}

/// Reads the state and makes it durable before the caller acts on it: the writer that
/// renamed it may not have synced the directory yet, and a power cut could then take back a
/// state someone already acted on (a reader showing records below a high watermark that
/// goes back, a producer acknowledging what a later election truncates).
pub(super) fn read_state_durable(storage: &Storage, dir: &Path) -> Result<ReplicationState, LogError> {
    let state = read_state(storage, dir)?;
    sync_dir(storage, dir)?;
    Ok(state)
}

/// Replaces the state file atomically and durably.
pub(super) fn write_state(storage: &Storage, dir: &Path, state: &ReplicationState) -> Result<(), LogError> {
    replace_file(storage, dir, &state_path(dir), &state.encode())
}

/// Whether `dir` holds a replicated log: a state file, or a replica without one (whose
/// missing state file `read_state` then refuses).
pub(in crate::log) fn is_replicated(storage: &Storage, dir: &Path) -> bool {
    storage.exists(&state_path(dir)) || storage.exists(&replica_dir(dir, 0))
}

/// Takes the lock every step that changes the state holds, waiting for another process's
/// step (bounded: [`LogError::Locked`] past it).
pub(super) fn lock_state(storage: &Storage, dir: &Path) -> Result<DirLock, LogError> {
    let path = dir.join(LOCK_FILE);
    let started = Instant::now();
    loop {
        match storage.try_lock(&path) {
            Ok(Some(lock)) => return Ok(lock),
            Ok(None) if started.elapsed() < Duration::from_millis(LOCK_WAIT_MS_MAX) => {
                std::thread::sleep(Duration::from_millis(LOCK_POLL_MS));
            }
            Ok(None) => return Err(LogError::Locked { path }),
            Err(e) => return Err(io_err(&path)(e)),
        }
    }
}

/// Appends one line to the journal and syncs it, before the change it records is made.
pub(super) fn record(storage: &Storage, dir: &Path, line: &str) -> Result<(), LogError> {
    let path = journal_path(dir);
    let file = storage.open(&path, OpenMode::Append).map_err(io_err(&path))?;
    file.append(format!("{line}\n").as_bytes()).and_then(|()| file.sync_data()).map_err(io_err(&path))
}

/// Creates the empty journal (so that no later append creates a directory entry).
pub(super) fn create_journal(storage: &Storage, dir: &Path) -> Result<(), LogError> {
    let path = journal_path(dir);
    if storage.exists(&path) {
        return Ok(());
    }
    replace_file(storage, dir, &path, b"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_round_trips_and_every_flipped_byte_is_refused() {
        let mut state = ReplicationState::initial(2, 3);
        state.partitions[1].leader = None;
        state.partitions[1].isr = BTreeSet::from([1]);
        state.partitions[1].alive = BTreeSet::from([1]);
        state.partitions[2].high_watermark = 7;
        state.generation = 9;
        let bytes = state.encode();
        assert_eq!(bytes.len(), HEAD_LEN + 3 * PARTITION_LEN + 4);
        assert_eq!(ReplicationState::decode(&bytes), Ok(state));
        for at in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x40;
            assert!(ReplicationState::decode(&flipped).is_err(), "byte {at} flipped was accepted");
        }
        assert!(ReplicationState::decode(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn a_state_breaking_an_invariant_is_refused() {
        type Break = fn(&mut PartitionReplication);
        let cases: [(&str, Break); 3] = [
            ("the leader 1 is not in the ISR", |p| p.leader = Some(1)),
            ("an ISR member is not alive", |p| p.isr = BTreeSet::from([0, 1])),
            ("a broker outside 0..2", |p| p.alive = BTreeSet::from([0, 5])),
        ];
        for (why, break_it) in cases {
            let mut state = ReplicationState::initial(2, 1);
            state.partitions[0] = PartitionReplication {
                leader: Some(0),
                leader_epoch: 0,
                high_watermark: 0,
                isr: BTreeSet::from([0]),
                alive: BTreeSet::from([0]),
            };
            break_it(&mut state.partitions[0]);
            let error = ReplicationState::decode(&state.encode()).expect_err(why);
            assert!(error.contains(why), "{why}: {error}");
        }
    }
}
