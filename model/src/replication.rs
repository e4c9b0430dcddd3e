//! Replicated partitions (spec.md §3.2): a leader and a follower log per partition, follower
//! fetch, ISR shrink, leader failure with clean or unclean election, and the producer's
//! `acks=1` / `acks=all` acknowledgement. Consumers see the leader's log below the high
//! watermark (`sync_visible` keeps `State::log` and `State::sends` equal to it).

use crate::action::Action;
use crate::config::Config;
use crate::state::{Ghost, Offset, Replicas, State, Witness};
use crate::strategy::{Acks, ReplicaRules, Replication};

/// The replica rules of a replicated row; `None` for every other row.
pub fn rules(config: &Config) -> Option<ReplicaRules> {
    match config.strategy.rules().replication {
        Replication::Single => None,
        Replication::Replicated(rules) => Some(rules),
    }
}

/// The replication actions enabled in `state`: follower fetches, ISR shrinks, leader failures
/// and the answer to an in-flight `acks=all` append.
pub fn enabled_actions(config: &Config, state: &State, actions: &mut Vec<Action>) {
    for (p, replicas) in state.replicas.iter().enumerate() {
        let partition = p as u8;
        if replicas.in_flight.is_some_and(|send| is_answerable(replicas, send)) {
            actions.push(Action::Acknowledge { partition });
        }
        let Some(leader) = replicas.leader else { continue };
        let leader_end = replicas.logs[usize::from(leader)].len();
        if let Some(follower) = replicas.follower() {
            let behind = replicas.logs[usize::from(follower)].len() < leader_end;
            if behind {
                actions.push(Action::Replicate { partition });
            }
            if behind && replicas.isr[usize::from(follower)] && state.isr_shrinks_used < config.isr_shrinks {
                actions.push(Action::ShrinkIsr { partition });
            }
        }
        if state.leader_failures_used < config.leader_failures {
            actions.push(Action::FailLeader { partition });
        }
    }
}

/// Whether an in-flight send can be answered: the high watermark covers it (every ISR member
/// has it), or the leader's log no longer holds it (an election lost it: an error).
fn is_answerable(replicas: &Replicas, send: u8) -> bool {
    match position(replicas, send) {
        Some(offset) => offset < usize::from(replicas.hw),
        None => true,
    }
}

/// The offset of `send` in the leader's log.
fn position(replicas: &Replicas, send: u8) -> Option<usize> {
    let leader = replicas.leader?;
    replicas.logs[usize::from(leader)].iter().position(|&s| s == send)
}

/// Whether the producer may send to `partition` now: a leader, and nothing in flight.
pub fn accepts_sends(state: &State, partition: usize) -> bool {
    state.replicas.get(partition).is_none_or(|r| r.leader.is_some() && r.in_flight.is_none())
}

/// The producer's append (or retry) of `send` to a replicated partition. `acks=1`: appended to
/// the leader and acknowledged. `acks=all`: refused (`NotEnoughReplicas`) when the ISR is too
/// small, else appended (unless `recognised`: an idempotent retry the leader already holds) and
/// in flight until `acknowledge`. Returns whether the send is consumed (not refused).
pub fn append(config: &Config, state: &mut State, partition: usize, send: u8, recognised: bool) -> bool {
    let rules = rules(config).expect("a replicated row");
    let replicas = &mut state.replicas[partition];
    let leader = usize::from(replicas.leader.expect("the producer sends to a leader"));
    if rules.acks == Acks::All && replicas.isr_size() < rules.min_insync {
        state.witness(Witness::NotEnoughReplicas);
        return false;
    }
    if !recognised {
        replicas.logs[leader].push(send);
    }
    match rules.acks {
        Acks::Leader => replicas.acked |= 1 << send,
        Acks::All => replicas.in_flight = Some(send),
    }
    recompute_high_watermark(replicas);
    sync_visible(config, state, partition);
    true
}

/// Whether the leader's log holds `send` (an idempotent retry of it is recognised).
pub fn leader_holds(state: &State, partition: usize, send: u8) -> bool {
    position(&state.replicas[partition], send).is_some()
}

/// The answer to the in-flight `acks=all` append: acknowledged when the ISR still has
/// `min.insync.replicas` members; otherwise `NotEnoughReplicasAfterAppend` (or the record was
/// lost by an election): the send becomes unacknowledged, to be retried.
pub fn acknowledge(config: &Config, state: &mut State, partition: u8) {
    let rules = rules(config).expect("a replicated row");
    let p = usize::from(partition);
    let replicas = &mut state.replicas[p];
    let send = replicas.in_flight.take().expect("an answer needs a send in flight");
    let held = position(replicas, send).is_some();
    if held && replicas.isr_size() >= rules.min_insync {
        replicas.acked |= 1 << send;
        return;
    }
    if held {
        state.witness(Witness::NotEnoughReplicas);
    }
    state.producer[p].unacked = Some(send);
}

/// The follower fetches the leader's next record; a follower that caught up rejoins the ISR.
pub fn replicate(config: &Config, state: &mut State, partition: u8) {
    let p = usize::from(partition);
    let replicas = &mut state.replicas[p];
    let (leader, follower) = (replicas.leader.expect("a leader"), replicas.follower().expect("a follower"));
    let (leader, follower) = (usize::from(leader), usize::from(follower));
    let next = replicas.logs[follower].len();
    let send = replicas.logs[leader][next];
    replicas.logs[follower].push(send);
    if replicas.logs[follower].len() == replicas.logs[leader].len() {
        replicas.isr[follower] = true;
    }
    recompute_high_watermark(replicas);
    sync_visible(config, state, p);
}

/// The lagging follower leaves the ISR.
pub fn shrink_isr(config: &Config, state: &mut State, partition: u8) {
    let p = usize::from(partition);
    state.isr_shrinks_used += 1;
    let replicas = &mut state.replicas[p];
    let follower = replicas.follower().expect("a follower");
    replicas.isr[usize::from(follower)] = false;
    state.witness(Witness::IsrShrunk);
    recompute_high_watermark(&mut state.replicas[p]);
    sync_visible(config, state, p);
}

/// The leader fails. A clean election promotes an alive ISR member truncated to the high
/// watermark; else an unclean one (if the row allows it) promotes the out-of-sync follower as
/// it is; else the partition has no leader. The failed broker never comes back (spec.md §3.2).
pub fn fail_leader(config: &Config, state: &mut State, partition: u8) {
    let rules = rules(config).expect("a replicated row");
    let p = usize::from(partition);
    state.leader_failures_used += 1;
    state.witness(Witness::LeaderFailed);
    if drops_unread(config, state, partition) {
        state.witness(Witness::UnreadTruncated);
    }
    let replicas = &mut state.replicas[p];
    let old = usize::from(replicas.leader.expect("a leader fails"));
    replicas.alive[old] = false;
    replicas.isr[old] = false;
    let candidate = 1 - old;
    let alive = replicas.alive[candidate];
    if alive && replicas.isr[candidate] {
        replicas.logs[candidate].truncate(usize::from(replicas.hw));
        replicas.leader = Some(candidate as u8);
    } else if alive && rules.unclean {
        replicas.leader = Some(candidate as u8);
        replicas.isr[candidate] = true;
        replicas.hw = replicas.logs[candidate].len() as Offset;
    } else {
        replicas.leader = None;
    }
    sync_visible(config, state, p);
}

/// Whether the leader's failure in `state` drops records above the high watermark and keeps
/// none of them: the leader holds some, and the election is clean (the promoted ISR member is
/// truncated to the high watermark) or finds no leader. No consumer read them: they read
/// below the high watermark (the `unread-truncated` observation). The conformance harness
/// classifies the real `fail-leader` steps it makes with the same definition, on the state it
/// observes before them.
pub fn drops_unread(config: &Config, state: &State, partition: u8) -> bool {
    let rules = rules(config).expect("a replicated row");
    let replicas = &state.replicas[usize::from(partition)];
    let Some(leader) = replicas.leader else { return false };
    let candidate = 1 - usize::from(leader);
    let above = replicas.logs[usize::from(leader)].len() > usize::from(replicas.hw);
    let unclean = replicas.alive[candidate] && !replicas.isr[candidate] && rules.unclean;
    above && !unclean
}

/// The high watermark: the smallest log end among the ISR (the leader is always a member).
fn recompute_high_watermark(replicas: &mut Replicas) {
    let members = (0..2).filter(|&b| replicas.isr[b]).map(|b| replicas.logs[b].len());
    if let Some(hw) = members.min() {
        // An election's truncation may leave the ISR below an old mark; never go back here.
        replicas.hw = replicas.hw.max(hw as Offset);
    }
}

/// Makes the consumer-visible log the leader's below the high watermark (nothing changes while
/// the partition has no leader: nothing can be read), with the ghost bookkeeping of
/// `account_visible`.
pub fn sync_visible(config: &Config, state: &mut State, partition: usize) {
    // Disjoint fields, borrowed apart so that the visible sends are copied in place.
    let State { replicas, groups, sends, log, .. } = state;
    let replicas = &replicas[partition];
    let Some(leader) = replicas.leader else { return };
    let visible = &replicas.logs[usize::from(leader)][..usize::from(replicas.hw)];
    let ghosts = groups.iter_mut().map(|group| &mut group.ghost);
    account_visible(ghosts, partition, &sends[partition], visible, config.delta);
    log[partition].clear();
    log[partition].resize(visible.len(), config.delta);
    sends[partition].clear();
    sends[partition].extend_from_slice(visible);
}

/// The ghost history of a partition whose consumer-visible sends change from `old` to
/// `visible`: records that left it (an unclean election) flag every group that applied them
/// (`committed-read`); applications of a record whose offset a new record now holds move to
/// `lost_sum`, as for a log loss, so the new record counts afresh. A pure definition over two
/// observed logs: the conformance harness keeps its observed ghosts with it.
pub fn account_visible<'a>(
    ghosts: impl IntoIterator<Item = &'a mut Ghost>,
    partition: usize,
    old: &[u8],
    visible: &[u8],
    delta: i64,
) {
    let kept = old.iter().zip(visible).take_while(|(a, b)| a == b).count();
    for ghost in ghosts {
        let applied = &mut ghost.applied[partition];
        if applied[kept..old.len()].iter().any(|&count| count > 0) {
            ghost.read_truncated = true;
        }
        for count in &mut applied[kept..] {
            ghost.lost_sum += delta * i64::from(*count);
            *count = 0;
        }
    }
}
