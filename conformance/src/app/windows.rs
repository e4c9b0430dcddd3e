//! The dangerous windows of a consumer, counted: for each, whether this application can reach
//! it (the run saw the events that bound it) and how many faults struck inside it. A verdict of
//! no anomaly stands only beside these counts, and a window the application reaches that no
//! fault struck leaves the run not established: its defence there was never tested.
//!
//! What is counted, and by what:
//! - a kill with an OffsetCommit unsent (the proxy killed the instance when its commit arrived,
//!   before the broker saw it): reachable when the application sends OffsetCommits;
//! - a kill after an OffsetCommit was answered, before the instance's next store write: the same;
//! - a commit whose response was lost (the connection closed right after it went on): the same;
//! - a kill right after a sync under the store (the tracer's kill whose call was a sync): reachable
//!   when the application synced under the store;
//! - a zombie resumed after its partitions moved: reachable with two instances or more;
//! - a rebalance with records in flight (the protocol history's: a partition moved to another
//!   instance, whose first fetch of it started before the old owner's last): reachable when a
//!   partition moved between instances.

use super::judge::Tried;
use crate::killpoints::SYNC_CALLS;
use kafka_lane::proxy::ProtocolFault;

/// One window and its counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub name: &'static str,
    /// Why it is reachable (`Ok`), or why not (`Err`).
    pub reachable: Result<String, String>,
    pub struck: usize,
}

/// What the run saw besides `Tried`: OffsetCommits sent, syncs under the store, the most
/// instances running at once.
#[derive(Clone, Copy, Debug, Default)]
pub struct Seen {
    pub commits: usize,
    pub syncs: u64,
    pub instances_max: u32,
    /// Whether a proxy saw the protocol (not with the benchmark's `--without-proxy`).
    pub proxied: bool,
    /// Partitions moved between instances, and the moves with records in flight.
    pub moved: usize,
    pub moved_in_flight: usize,
}

/// The windows, in the order the report lists them.
pub fn count(tried: &Tried, seen: Seen) -> Vec<Window> {
    let commits = if !seen.proxied {
        Err("not observed: no proxy".to_string())
    } else if seen.commits > 0 {
        Ok(format!("{} OffsetCommits sent", seen.commits))
    } else {
        Err("the application sent no OffsetCommit: its offsets live elsewhere".to_string())
    };
    let protocol = |fault: ProtocolFault| tried.protocol.iter().filter(|strike| strike.fault == fault).count();
    let syncs = if seen.syncs > 0 {
        Ok(format!("{} syncs under the store", seen.syncs))
    } else {
        Err("no sync under the store was seen".to_string())
    };
    let zombies = if seen.instances_max >= 2 {
        Ok(format!("{} instances at once", seen.instances_max))
    } else {
        Err("one instance at a time: nobody to take its partitions over".to_string())
    };
    let moves = if !seen.proxied {
        Err("not observed: no proxy".to_string())
    } else if seen.moved > 0 {
        Ok(format!("{} partition moves between instances", seen.moved))
    } else {
        Err("no partition moved between instances".to_string())
    };
    vec![
        Window {
            name: "a kill with an OffsetCommit unsent",
            reachable: commits.clone(),
            struck: protocol(ProtocolFault::KillAtCommit),
        },
        Window {
            name: "a kill after an OffsetCommit was answered",
            reachable: commits.clone(),
            struck: protocol(ProtocolFault::KillAfterCommitAnswer),
        },
        Window {
            name: "an OffsetCommit whose response was lost",
            reachable: commits,
            struck: protocol(ProtocolFault::CloseAfterCommitSent),
        },
        Window {
            name: "a kill right after a sync under the store",
            reachable: syncs,
            struck: tried.kills.iter().filter(|kill| SYNC_CALLS.contains(&kill.strike.syscall)).count(),
        },
        Window {
            name: "a zombie resumed after its partitions moved",
            reachable: zombies,
            struck: tried.zombies.iter().filter(|zombie| zombie.reassigned.is_some()).count(),
        },
        Window { name: "a rebalance with records in flight", reachable: moves, struck: seen.moved_in_flight },
    ]
}

/// The report's lines: one per window.
pub fn lines(windows: &[Window]) -> Vec<String> {
    let mut lines = vec!["windows (struck / reachable for this application):".to_string()];
    for window in windows {
        lines.push(match &window.reachable {
            Ok(why) => {
                let times = if window.struck == 1 { "time" } else { "times" };
                format!("  {}: struck {} {times} (reachable: {why})", window.name, window.struck)
            }
            Err(why) => format!("  {}: not reachable ({why})", window.name),
        });
    }
    lines
}

/// The reachable windows no fault struck, for a verdict that cannot stand.
pub fn unstruck(windows: &[Window]) -> Vec<&'static str> {
    windows.iter().filter(|w| w.reachable.is_ok() && w.struck == 0).map(|w| w.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::judge::{ProtocolStrike, Tried};

    /// A table: (OffsetCommits, syncs, instances at most, partition moves and those with
    /// records in flight, protocol faults struck) in, the unstruck reachable windows out.
    #[test]
    fn a_reachable_window_no_fault_struck_is_named() {
        let strike = |fault| ProtocolStrike { fault, instance: "app-1".into(), at_ms: 0, committed: vec![] };
        type Case = (usize, u64, u32, (usize, usize), Vec<ProtocolFault>, Vec<&'static str>);
        let table: Vec<Case> = vec![
            // Offsets elsewhere, one instance, no sync, no move: nothing is reachable.
            (0, 0, 1, (0, 0), vec![], vec![]),
            // Commits sent, one protocol fault of one kind: the other two kinds are named.
            (
                5,
                0,
                1,
                (0, 0),
                vec![ProtocolFault::KillAtCommit],
                vec!["a kill after an OffsetCommit was answered", "an OffsetCommit whose response was lost"],
            ),
            // Syncs and two instances, nothing struck, partitions moved with nothing in flight:
            // all three named.
            (
                0,
                3,
                2,
                (4, 0),
                vec![],
                vec![
                    "a kill right after a sync under the store",
                    "a zombie resumed after its partitions moved",
                    "a rebalance with records in flight",
                ],
            ),
            // A move with records in flight strikes its window.
            (0, 0, 1, (4, 1), vec![], vec![]),
        ];
        for (index, (commits, syncs, instances_max, (moved, moved_in_flight), faults, expected)) in
            table.into_iter().enumerate()
        {
            let tried = Tried { protocol: faults.into_iter().map(strike).collect(), ..Tried::default() };
            let seen = Seen { commits, syncs, instances_max, proxied: true, moved, moved_in_flight };
            let windows = count(&tried, seen);
            assert_eq!(unstruck(&windows), expected, "case {index}");
            assert_eq!(lines(&windows).len(), windows.len() + 1);
        }
    }
}
