//! The replication steps of spec.md §3.2, one state change each, under the state lock:
//! `replicate` (a follower fetch: the leader's next batch copied to the follower, durably;
//! the high watermark recomputed; a follower that caught up rejoins the ISR), `shrink_isr`
//! (the lagging follower leaves the ISR) and `fail_leader` (the leader fails; a clean election
//! promotes an alive ISR member truncated to the high watermark, an unclean one the
//! out-of-sync follower as it is, and otherwise the partition has no leader). File changes
//! come first, each durable, the journal line before them, the state file last.

use super::state::state_path;
use super::{partition_of, ReplicatedLog, ReplicationError};
use crate::log::{Log, LogError, TailRepair};
use std::ops::Range;

/// What one `replicate` step did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replicate {
    /// The follower copied the leader's batch at `offsets`.
    Copied { follower: u32, offsets: Range<u64>, rejoined: bool, high_watermark: u64, repairs: Vec<TailRepair> },
    /// The follower was at the leader's end already (it rejoins the ISR if it had left it).
    CaughtUp { follower: u32, end: u64, rejoined: bool, high_watermark: u64, repairs: Vec<TailRepair> },
    /// No alive broker besides the leader: nothing fetches.
    NoFollower,
}

/// What `shrink_isr` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shrunk {
    pub follower: u32,
    pub follower_end: u64,
    pub leader_end: u64,
    pub high_watermark: u64,
}

/// How a leader's failure was resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectionKind {
    /// An alive ISR member was promoted, truncated to the high watermark.
    Clean,
    /// The out-of-sync follower was promoted as it is (`--unclean`).
    Unclean,
    /// Nobody could be promoted: the partition is unavailable.
    NoLeader,
}

/// What `fail_leader` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Election {
    pub failed: u32,
    /// The failed leader's log end: what it held, acknowledged to `acks=1` producers or not.
    pub failed_end: u64,
    pub kind: ElectionKind,
    pub promoted: Option<u32>,
    /// Records the promoted replica's truncation removed (clean: those above the high
    /// watermark; empty when it held none).
    pub truncated: Range<u64>,
    /// The new leader's log end (0 without a leader).
    pub leader_end: u64,
    pub high_watermark: u64,
    pub leader_epoch: u32,
    pub repairs: Vec<TailRepair>,
}

impl ReplicatedLog {
    /// One follower fetch of `partition`: see the module documentation. No leader is
    /// [`LogError::Unavailable`]; a follower that is not a prefix of its leader is
    /// [`ReplicationError::Diverged`].
    pub fn replicate(&self, partition: u32) -> Result<Replicate, ReplicationError> {
        let (_lock, mut state) = self.locked()?;
        let part = partition_of(&mut state, partition)?;
        let Some(leader) = part.leader else {
            return Err(LogError::Unavailable { path: state_path(&self.dir), partition }.into());
        };
        let Some(follower) = part.follower() else { return Ok(Replicate::NoFollower) };
        let mut source = self.reader(leader)?;
        let leader_end = source.end(partition)?;
        let (mut target, repairs) = self.writer(follower)?;
        let follower_end = target.end(partition)?;
        check_prefix((&mut source, &mut target), partition, follower, (follower_end, leader_end))?;
        let copied = if follower_end < leader_end {
            let count = source.batch_len_at(partition, follower_end)?;
            let frames = source.frames(partition, follower_end..follower_end + count)?;
            Some(target.append_frames(partition, &frames)?)
        } else {
            None
        };
        drop(target);
        let end = copied.as_ref().map_or(follower_end, |offsets| offsets.end);
        let rejoined = end == leader_end && !part.isr.contains(&follower);
        if rejoined {
            self.record(&format!(
                "partition {partition}: broker {follower} caught up with the leader, broker {leader}, at offset \
                 {end} and rejoined the ISR"
            ))?;
            part.isr.insert(follower);
        }
        let moved = self.advance_high_watermark(part, partition, &[(leader, leader_end), (follower, end)])?;
        let high_watermark = part.high_watermark;
        if rejoined || moved {
            self.commit(&mut state)?;
        }
        Ok(match copied {
            Some(offsets) => Replicate::Copied { follower, offsets, rejoined, high_watermark, repairs },
            None => Replicate::CaughtUp { follower, end, rejoined, high_watermark, repairs },
        })
    }

    /// The lagging follower of `partition` leaves the ISR; the high watermark is recomputed
    /// (the leader's own end when the ISR is the leader alone). Not enabled unless the follower
    /// is in the ISR and behind the leader.
    pub fn shrink_isr(&self, partition: u32) -> Result<Shrunk, ReplicationError> {
        let (_lock, mut state) = self.locked()?;
        let part = partition_of(&mut state, partition)?;
        let Some(leader) = part.leader else {
            return Err(LogError::Unavailable { path: state_path(&self.dir), partition }.into());
        };
        let not_enabled = |why: String| ReplicationError::NotEnabled { partition, step: "shrink-isr", why };
        let Some(follower) = part.follower().filter(|follower| part.isr.contains(follower)) else {
            return Err(not_enabled("no follower is in the ISR".into()));
        };
        let leader_end = self.reader(leader)?.end(partition)?;
        let follower_end = self.reader(follower)?.end(partition)?;
        if follower_end >= leader_end {
            let why = format!("broker {follower} is not behind the leader (both end at offset {leader_end})");
            return Err(not_enabled(why));
        }
        self.record(&format!(
            "partition {partition}: broker {follower} left the ISR at offset {follower_end}, behind the leader, \
             broker {leader}, at {leader_end}"
        ))?;
        part.isr.remove(&follower);
        self.advance_high_watermark(part, partition, &[(leader, leader_end)])?;
        let high_watermark = part.high_watermark;
        self.commit(&mut state)?;
        Ok(Shrunk { follower, follower_end, leader_end, high_watermark })
    }

    /// The leader of `partition` fails (it never comes back): a clean election promotes an
    /// alive ISR member, truncated to the high watermark; with none, `unclean` promotes the
    /// out-of-sync follower as it is (the high watermark becomes its end), and otherwise the
    /// partition has no leader. The election is recorded in the journal before anything
    /// changes; the truncation is durable before the state names the new leader.
    pub fn fail_leader(&self, partition: u32, unclean: bool) -> Result<Election, ReplicationError> {
        let (_lock, mut state) = self.locked()?;
        let part = partition_of(&mut state, partition)?;
        let Some(failed) = part.leader else {
            let why = "it has no leader".to_string();
            return Err(ReplicationError::NotEnabled { partition, step: "fail-leader", why });
        };
        let failed_end = self.reader(failed)?.end(partition)?;
        let old_high_watermark = part.high_watermark;
        let promotion = match part.follower() {
            Some(broker) if part.isr.contains(&broker) => Promotion::Clean(broker),
            Some(broker) if unclean => Promotion::Unclean(broker),
            Some(_) | None => Promotion::Nobody,
        };
        part.alive.remove(&failed);
        part.isr.remove(&failed);
        part.leader_epoch += 1;
        let context = (partition, failed, failed_end, part.leader_epoch);
        let election = match promotion {
            Promotion::Clean(broker) => self.promote_clean(context, broker, old_high_watermark)?,
            Promotion::Unclean(broker) => self.promote_unclean(context, broker, old_high_watermark)?,
            Promotion::Nobody => {
                self.record(&format!(
                    "partition {partition} leader epoch {}: broker {failed} failed (log end {failed_end}); no alive \
                     in-sync replica to promote: the partition has no leader (unavailable)",
                    part.leader_epoch
                ))?;
                election(context, ElectionKind::NoLeader, old_high_watermark)
            }
        };
        part.leader = election.promoted;
        part.isr.extend(election.promoted);
        part.high_watermark = election.high_watermark;
        self.commit(&mut state)?;
        Ok(election)
    }

    /// A clean election's promotion of `broker`: its replica cut to the high watermark
    /// (recorded first), which stays where it was.
    fn promote_clean(&self, context: Context, broker: u32, high_watermark: u64) -> Result<Election, ReplicationError> {
        let (partition, failed, failed_end, epoch) = context;
        let (mut log, repairs) = self.writer(broker)?;
        let end = log.end(partition)?;
        if end < high_watermark {
            let reason =
                format!("it is in the ISR, yet its log ends at {end}, below the high watermark {high_watermark}");
            return Err(ReplicationError::Diverged { partition, broker, reason });
        }
        let cut = if end > high_watermark {
            format!(
                ", its replica truncated from offset {end} to the high watermark {high_watermark} (records \
                 {high_watermark}..{end} were never committed)"
            )
        } else {
            String::new()
        };
        self.record(&format!(
            "partition {partition} leader epoch {epoch}: broker {failed} failed (log end {failed_end}, high \
             watermark {high_watermark}); broker {broker} promoted by a clean election{cut}"
        ))?;
        if end > high_watermark {
            log.cut_acknowledged(partition, high_watermark)?;
        }
        let mut election = election(context, ElectionKind::Clean, high_watermark);
        (election.promoted, election.truncated, election.leader_end) =
            (Some(broker), high_watermark..end, high_watermark);
        election.repairs = repairs;
        Ok(election)
    }

    /// An unclean election's promotion of the out-of-sync `broker` as it is: the high
    /// watermark becomes its end, and committed records past it are lost (recorded).
    fn promote_unclean(
        &self,
        context: Context,
        broker: u32,
        high_watermark: u64,
    ) -> Result<Election, ReplicationError> {
        let (partition, failed, failed_end, epoch) = context;
        let (mut log, repairs) = self.writer(broker)?;
        let end = log.end(partition)?;
        drop(log);
        let lost = if end < high_watermark {
            format!(": committed records {end}..{high_watermark} are lost")
        } else {
            String::new()
        };
        self.record(&format!(
            "partition {partition} leader epoch {epoch}: broker {failed} failed (log end {failed_end}, high \
             watermark {high_watermark}); broker {broker}, out of sync at log end {end}, promoted by an UNCLEAN \
             election{lost}"
        ))?;
        let mut election = election(context, ElectionKind::Unclean, end);
        (election.promoted, election.truncated, election.leader_end) = (Some(broker), end..end, end);
        election.repairs = repairs;
        Ok(election)
    }
}

/// An election's partition, failed broker, its log end, and the new leader epoch.
type Context = (u32, u32, u64, u32);

/// Whom an election promotes.
enum Promotion {
    /// An alive ISR member.
    Clean(u32),
    /// The out-of-sync follower (`unclean` allowed it).
    Unclean(u32),
    Nobody,
}

fn election((_, failed, failed_end, leader_epoch): Context, kind: ElectionKind, high_watermark: u64) -> Election {
    Election {
        failed,
        failed_end,
        kind,
        promoted: None,
        truncated: 0..0,
        leader_end: 0,
        high_watermark,
        leader_epoch,
        repairs: Vec::new(),
    }
}

/// A follower's log must be a prefix of its leader's: no longer, and its last record the
/// leader's record at that offset, byte for byte (every earlier one was checked when it was
/// copied).
fn check_prefix(
    (source, target): (&mut Log, &mut Log),
    partition: u32,
    follower: u32,
    (follower_end, leader_end): (u64, u64),
) -> Result<(), ReplicationError> {
    if follower_end > leader_end {
        let reason = format!("its log ends at {follower_end}, past the leader's end {leader_end}");
        return Err(ReplicationError::Diverged { partition, broker: follower, reason });
    }
    let Some(last) = follower_end.checked_sub(1) else { return Ok(()) };
    if source.frames(partition, last..last + 1)? != target.frames(partition, last..last + 1)? {
        let reason = format!("its record {last} differs from the leader's");
        return Err(ReplicationError::Diverged { partition, broker: follower, reason });
    }
    Ok(())
}
