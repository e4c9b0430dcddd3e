//! Shrinking a schedule whose run showed an anomaly: faults are dropped while the anomaly
//! still appears, so that what is left is a small schedule that brings it back.
//!
//! The search is delta debugging's, on complements only: the faults are cut into `n` parts,
//! and the schedule without one part is tried; when the anomaly comes back, that part is gone
//! for good and `n` shrinks by one, otherwise the next part is tried; when no part can go,
//! the parts are halved (`n` doubled) until each is a single fault. Every candidate is a real
//! run, so their number is bounded, and a candidate is kept when its anomaly appears in any
//! of its tries (a real process's timing is its own: one try may miss what another hits).
//! The search is deterministic: the same answers give the same candidates.

use super::schedule::Fault;
use std::collections::BTreeSet;

/// What a shrink found: the faults left, and what it took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shrunk {
    pub faults: Vec<Fault>,
    /// Candidates tried (each one or more runs).
    pub candidates: u32,
    /// Whether the search stopped at its bound of candidates before it was done.
    pub bounded: bool,
}

/// Shrinks `faults`, asking `reproduces` whether a candidate (a subsequence, order kept) still
/// shows the anomaly, at most `candidates_max` times.
pub fn shrink<E>(
    faults: &[Fault],
    candidates_max: u32,
    reproduces: &mut dyn FnMut(&[Fault]) -> Result<bool, E>,
) -> Result<Shrunk, E> {
    let mut kept: Vec<usize> = (0..faults.len()).collect();
    let mut tried: BTreeSet<Vec<usize>> = BTreeSet::new();
    let mut candidates = 0u32;
    let mut parts = 2usize;
    loop {
        if kept.is_empty() {
            break;
        }
        let parts_now = parts.min(kept.len());
        let mut dropped = false;
        for part in 0..parts_now {
            // The part's indices in `kept`: even cuts, as `schedule::chunks` makes them.
            let range = (kept.len() * part / parts_now)..(kept.len() * (part + 1) / parts_now);
            let candidate: Vec<usize> =
                kept.iter().enumerate().filter(|(at, _)| !range.contains(at)).map(|(_, &index)| index).collect();
            if !tried.insert(candidate.clone()) {
                continue;
            }
            if candidates == candidates_max {
                return Ok(Shrunk { faults: pick(faults, &kept), candidates, bounded: true });
            }
            candidates += 1;
            if reproduces(&pick(faults, &candidate))? {
                kept = candidate;
                parts = parts_now.saturating_sub(1).max(2);
                dropped = true;
                break;
            }
        }
        if dropped {
            continue;
        }
        if parts_now >= kept.len() {
            break;
        }
        parts = (parts_now * 2).min(kept.len());
    }
    Ok(Shrunk { faults: pick(faults, &kept), candidates, bounded: false })
}

fn pick(faults: &[Fault], indices: &[usize]) -> Vec<Fault> {
    indices.iter().map(|&index| faults[index]).collect()
}

#[cfg(test)]
mod tests {
    use super::{shrink, Fault};

    /// Fault `i` of a test: a kill whose `after_calls` is `i` names it.
    fn faults(count: u64) -> Vec<Fault> {
        (0..count).map(|i| Fault::Kill { after_calls: i, syncs_only: false, restart_ms: 0 }).collect()
    }

    fn names(faults: &[Fault]) -> Vec<u64> {
        faults
            .iter()
            .map(|fault| match fault {
                Fault::Kill { after_calls, .. } => *after_calls,
                Fault::Churn { .. } | Fault::Protocol { .. } | Fault::Zombie { .. } => unreachable!("only kills"),
            })
            .collect()
    }

    /// A table of (faults, the faults the anomaly needs, the bound, what is left, candidates
    /// tried, bounded): the search finds exactly the faults needed when its bound allows, and
    /// stops at the bound with what it had otherwise. An anomaly that needs no fault shrinks
    /// to none.
    #[test]
    fn a_shrink_keeps_only_the_faults_the_anomaly_needs_within_its_bound() {
        type Case = (u64, &'static [u64], u32, &'static [u64], u32, bool);
        let table: [Case; 6] = [
            (25, &[7], 100, &[7], 9, false),
            (25, &[3, 19], 100, &[3, 19], 20, false),
            (8, &[], 100, &[], 4, false),
            (1, &[0], 100, &[0], 1, false),
            (25, &[3, 19], 4, &[0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24], 4, true),
            (0, &[], 100, &[], 0, false),
        ];
        for (count, needed, bound, left, candidates_expected, bounded) in table {
            let all = faults(count);
            let mut asked = 0u32;
            let mut oracle = |candidate: &[Fault]| -> Result<bool, ()> {
                asked += 1;
                let have = names(candidate);
                Ok(needed.iter().all(|need| have.contains(need)))
            };
            let shrunk = shrink(&all, bound, &mut oracle).expect("no error");
            let case = format!("{count} faults, needing {needed:?}, bound {bound}");
            assert_eq!(names(&shrunk.faults), left, "{case}");
            assert_eq!(shrunk.candidates, asked, "{case}: every candidate asked once");
            assert_eq!((shrunk.candidates, shrunk.bounded), (candidates_expected, bounded), "{case}");
            assert!(shrunk.candidates <= bound, "{case}");
        }
    }

    /// An error from a run stops the search and is returned.
    #[test]
    fn a_failed_run_stops_the_shrink() {
        let mut oracle = |_: &[Fault]| -> Result<bool, &str> { Err("the broker did not start") };
        assert_eq!(shrink(&faults(5), 10, &mut oracle), Err("the broker did not start"));
    }
}
