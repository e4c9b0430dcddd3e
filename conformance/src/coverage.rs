//! What a claim's replay covers. A consumer claiming a row serves, with the same settings, the
//! rows whose real configuration is that row's (`harness::real_row`): atomic-fenced's consumer
//! meets retention under reset-fail and a lost log tail under log-loss-refuse. The traces of
//! those rows are added where they bring a kind of step or fault the row's own traces lack, and
//! the kinds that no replayed trace has are named, so that a summary never says more than was
//! replayed.

use crate::harness::real_row;
use model::trace::Trace;
use model::Strategy;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// The kind a trace needs a second partition for, and a second group.
pub const SECOND_PARTITION: &str = "a second partition";
pub const SECOND_GROUP: &str = "a second group";

/// The traces a claim of `row` replays, and what they leave out.
#[derive(Debug)]
pub struct Selection {
    /// The row's own traces, then the added ones, in the order given.
    pub traces: Vec<(PathBuf, Trace)>,
    /// How many of `traces` are the row's own.
    pub own: usize,
    /// Per added trace's row, how many of its traces were added.
    pub added: Vec<(Strategy, usize)>,
    /// The kinds the row's consumer meets in some trace of its rows, or could meet (a second
    /// partition where the row allows one), that no replayed trace has.
    pub missing: Vec<String>,
}

/// The rows a consumer claiming `row` serves alike: the same real configuration, other names.
pub fn alike(row: Strategy) -> Vec<Strategy> {
    let real = real_row(row);
    Strategy::ALL.iter().copied().filter(|&other| other != row && real_row(other) == real).collect()
}

/// The kinds a trace has: each action's kind (`fetch`, `crash`, `retain`, ...), and a second
/// partition or group when its configuration has one.
pub fn kinds(trace: &Trace) -> BTreeSet<String> {
    let mut kinds: BTreeSet<String> = trace
        .actions
        .iter()
        .filter_map(|action| serde_json::to_value(action).ok()?.get("kind")?.as_str().map(str::to_string))
        .collect();
    if trace.config.partitions >= 2 {
        kinds.insert(SECOND_PARTITION.to_string());
    }
    if trace.config.groups >= 2 {
        kinds.insert(SECOND_GROUP.to_string());
    }
    kinds
}

/// Picks the traces a claim of `row` replays from every trace given: the row's own, then, from
/// the alike rows' traces, the fewest that bring every kind they have beyond the row's own:
/// each time the one that brings the most kinds still lacking (the first given on a tie),
/// until none brings one (a greedy cover: few traces, as each costs a consumer's starts).
pub fn select(row: Strategy, given: Vec<(PathBuf, Trace)>) -> Selection {
    let alike = alike(row);
    let (mut traces, others): (Vec<_>, Vec<_>) = given.into_iter().partition(|(_, t)| t.config.strategy == row);
    let own = traces.len();
    let mut covered: BTreeSet<String> = traces.iter().flat_map(|(_, trace)| kinds(trace)).collect();
    let mut universe = covered.clone();
    if traces.first().is_some_and(|(_, trace)| allows_second_partition(trace)) {
        universe.insert(SECOND_PARTITION.to_string());
    }
    // (Its place among those given, the trace, the kinds it brings.)
    let mut candidates: Vec<(usize, (PathBuf, Trace), BTreeSet<String>)> = others
        .into_iter()
        .filter(|(_, trace)| alike.contains(&trace.config.strategy))
        .enumerate()
        .map(|(place, (path, trace))| {
            let brought = kinds(&trace);
            (place, (path, trace), brought)
        })
        .collect();
    universe.extend(candidates.iter().flat_map(|(_, _, brought)| brought.iter().cloned()));
    let mut picked = Vec::new();
    loop {
        let new_kinds = |brought: &BTreeSet<String>| brought.difference(&covered).count();
        // The most new kinds; on a tie, the first given (`max_by_key` keeps the last maximum).
        let best = candidates
            .iter()
            .enumerate()
            .max_by_key(|(_, (place, _, brought))| (new_kinds(brought), std::cmp::Reverse(*place)));
        let Some((index, (_, _, brought))) = best else { break };
        if new_kinds(brought) == 0 {
            break;
        }
        let (place, trace, brought) = candidates.remove(index);
        covered.extend(brought);
        picked.push((place, trace));
    }
    // Replayed in the order given.
    picked.sort_by_key(|(place, _)| *place);
    let picked: Vec<(PathBuf, Trace)> = picked.into_iter().map(|(_, trace)| trace).collect();
    let mut added: Vec<(Strategy, usize)> = Vec::new();
    for (_, trace) in &picked {
        match added.iter_mut().find(|(strategy, _)| *strategy == trace.config.strategy) {
            Some((_, count)) => *count += 1,
            None => added.push((trace.config.strategy, 1)),
        }
    }
    traces.extend(picked);
    let missing = universe.difference(&covered).cloned().collect();
    Selection { traces, own, added, missing }
}

/// Whether the row of `trace` may run on two partitions (its configuration with a second one
/// is valid).
fn allows_second_partition(trace: &Trace) -> bool {
    let config = model::Config { partitions: 2, ..trace.config.clone() };
    config.validate().is_ok()
}

#[cfg(test)]
mod tests {
    use super::{alike, select, SECOND_PARTITION};
    use model::Strategy;
    use std::path::PathBuf;

    /// The committed corpus: a claim of atomic-fenced adds reset-fail's out-of-range,
    /// log-loss-refuse's lost tail and refusal and producer-idempotent's retried append, one
    /// trace each, and names a second partition as never tried.
    #[test]
    fn a_claim_adds_the_traces_of_rows_it_serves_alike_where_they_bring_a_kind() {
        assert_eq!(
            alike(Strategy::AtomicFenced),
            [Strategy::ProducerIdempotent, Strategy::ResetFail, Strategy::LogLossRefuse]
        );
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/traces");
        let paths = crate::corpus::expand_with_kept(&[dir]).expect("the corpus");
        let given = paths.into_iter().map(|path| crate::corpus::load(&path).map(|trace| (path, trace)));
        let given: Vec<_> = given.collect::<Result<_, _>>().expect("every trace loads");
        let selection = select(Strategy::AtomicFenced, given);
        assert_eq!(selection.own, 9, "the row's seven, the zombie scenario and a kept trace");
        let added: Vec<_> = selection.added.iter().map(|(row, n)| (row.name(), *n)).collect();
        // One trace each: log-loss-refuse's refusal brings its lost tail too.
        assert_eq!(added, [("log-loss-refuse", 1), ("producer-idempotent", 1), ("reset-fail", 1)]);
        let kinds: std::collections::BTreeSet<String> =
            selection.traces.iter().flat_map(|(_, trace)| super::kinds(trace)).collect();
        for kind in ["fail-out-of-range", "retain", "lose-tail"] {
            assert!(kinds.contains(kind), "{kind} in {kinds:?}");
        }
        assert_eq!(selection.missing, [SECOND_PARTITION]);
    }
}
