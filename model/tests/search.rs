//! The checker of `search.rs` and what it relies on: exact packing, properties that symmetry
//! cannot change, one result for any number of threads, shortest discoveries.

mod common;

use common::small_config;
use model::check::{self, CheckOptions, CheckReport, Search};
use model::pack::{pack_state, unpack_state};
use model::properties::is_discovery;
use model::{Config, ConsumerModel, State, Strategy};
use stateright::{Model, Representative};
use std::collections::{BTreeSet, VecDeque};

/// A small configuration where symmetry has something to merge, and cheap enough to search in
/// a debug build several times per row: two groups of one record; where a row refuses that
/// (the txn rows have one group, the poison rows need their poison record), three owners, two
/// of whom stand by interchangeably.
fn two_groups(strategy: Strategy) -> Config {
    let small = small_config(strategy);
    let candidates = [
        Config { groups: 2, records: 1, commit_every: 1, inflight: 1, ..small.clone() },
        Config { groups: 2, ..small.clone() },
        Config { owners: 3, records: 1, commit_every: 1, inflight: 1, ..small.clone() },
        Config { owners: 3, ..small },
    ];
    let valid = candidates.into_iter().find(|config| config.validate().is_ok());
    valid.unwrap_or_else(|| panic!("{strategy}: no symmetric small configuration is valid"))
}

/// Every reachable state of `config` (a plain BFS over whole states, independent of
/// `search.rs`), at most `states_max` of them.
fn reachable(config: &Config, states_max: usize) -> Vec<State> {
    let model = ConsumerModel::new(config.clone());
    let mut seen: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut states = Vec::new();
    let mut queue: VecDeque<State> = model.init_states().into();
    let (mut actions, mut encoded) = (Vec::new(), Vec::new());
    while let Some(state) = queue.pop_front() {
        pack_state(&state, &mut encoded);
        if !seen.insert(encoded.clone()) || states.len() == states_max {
            continue;
        }
        actions.clear();
        model.actions(&state, &mut actions);
        queue.extend(actions.iter().filter_map(|&action| model.next_state(&state, action)));
        states.push(state);
    }
    states
}

#[test]
fn packing_is_exact_on_every_reachable_state_of_every_row() {
    for strategy in Strategy::ALL {
        let states = reachable(&two_groups(strategy), 5_000);
        assert!(states.len() > 100, "{strategy}: only {} states", states.len());
        let mut encoded = Vec::new();
        for state in &states {
            pack_state(state, &mut encoded);
            assert_eq!(&unpack_state(&encoded), state, "{strategy}: {encoded:?}");
        }
    }
}

/// Symmetry reduction is sound only for properties that cannot tell a state from its
/// representative (the search evaluates representatives). `groups-diverge` once compared the
/// owner names of two groups' rows, which symmetry renames per group.
#[test]
fn no_property_tells_a_state_from_its_representative() {
    for strategy in Strategy::ALL {
        let config = two_groups(strategy);
        let model = ConsumerModel::new(config.clone());
        let properties = model.properties();
        let mut representatives_differing = 0;
        for state in reachable(&config, 5_000) {
            let representative = state.representative();
            representatives_differing += usize::from(representative != state);
            for property in &properties {
                assert_eq!(
                    is_discovery(&model, property, &state),
                    is_discovery(&model, property, &representative),
                    "{strategy}: {} differs on a state and its representative: {state:?}",
                    property.name
                );
            }
        }
        assert!(representatives_differing > 0, "{strategy}: symmetry merged nothing, the test is vacuous");
    }
}

/// The reduction is exact only if a state and its representative have the same successors up
/// to representatives (a bisimulation; with the test above, no verdict can change): renaming
/// owners, groups and (within a group's partition) epochs must commute with every step. With a
/// second incarnation, a crash and a rebalance, a partition holds up to three epochs at once,
/// and gaps between them (an epoch no lease holds any more) are renamed away.
#[test]
fn steps_commute_with_taking_representatives() {
    for strategy in Strategy::ALL {
        let config = Some(common::paused_config(strategy)).filter(|c| c.validate().is_ok());
        let config = config.unwrap_or_else(|| two_groups(strategy));
        let model = ConsumerModel::new(config.clone());
        let successors = |state: &State| -> BTreeSet<Vec<u8>> {
            let mut actions = Vec::new();
            model.actions(state, &mut actions);
            let nexts = actions.iter().filter_map(|&action| model.next_state(state, action));
            nexts.map(|next| pack(&next.representative())).collect()
        };
        let (mut renamed, mut epochs_renamed) = (0, 0);
        for state in reachable(&config, 3_000) {
            let representative = state.representative();
            renamed += usize::from(representative != state);
            epochs_renamed += usize::from(epochs(&representative) != epochs(&state));
            assert_eq!(successors(&state), successors(&representative), "{strategy}: {state:?}");
        }
        assert!(renamed > 0, "{strategy}: no state was renamed, the test is vacuous");
        // The transactional rows keep their epochs (their output partitions order them).
        let transactional = !model.init_states()[0].output.is_empty();
        assert_eq!(epochs_renamed > 0, !transactional, "{strategy}: {epochs_renamed} states had epochs renamed");
    }
}

fn pack(state: &State) -> Vec<u8> {
    let mut encoded = Vec::new();
    pack_state(state, &mut encoded);
    encoded
}

/// Every epoch of a state, sorted: the rows' and the leases'.
fn epochs(state: &State) -> Vec<u8> {
    let mut epochs = Vec::new();
    for group in &state.groups {
        epochs.extend(group.store.partitions.iter().map(|row| row.epoch));
        let slots = group.owners.iter().chain(&group.paused);
        epochs.extend(slots.flat_map(|slot| slot.leases.iter().flatten().map(|lease| lease.epoch)));
    }
    epochs.sort();
    epochs
}

fn bfs(config: Config, threads: usize, symmetry: bool) -> CheckReport {
    let options = CheckOptions { search: Search::Bfs, threads, symmetry, ..CheckOptions::default() };
    let report = check::run(&ConsumerModel::new(config), &options, &mut |_| {});
    assert!(report.complete, "{}: the search did not finish", report.config.strategy);
    report
}

/// Everything a report says that a search decides: counts, depth, verdicts and paths.
fn decided(report: &CheckReport) -> (usize, usize, usize, Vec<String>) {
    let properties = report.properties.iter().map(|p| format!("{} {:?} {:?}", p.name, p.verdict, p.actions)).collect();
    (report.unique_states, report.states, report.max_depth, properties)
}

#[test]
fn two_threads_decide_exactly_what_one_thread_decides() {
    for strategy in Strategy::ALL {
        for symmetry in [false, true] {
            let (one, two) = (bfs(two_groups(strategy), 1, symmetry), bfs(two_groups(strategy), 2, symmetry));
            assert_eq!(decided(&one), decided(&two), "{strategy}, symmetry {symmetry}");
        }
    }
}

/// Symmetry keeps every verdict and the length of every shortest path, visits fewer states,
/// and its paths are concrete: they replay from the initial state to a discovery.
#[test]
fn symmetry_keeps_verdicts_and_shortest_lengths_with_fewer_states() {
    for strategy in Strategy::ALL {
        let (plain, reduced) = (bfs(two_groups(strategy), 1, false), bfs(two_groups(strategy), 1, true));
        assert!(reduced.unique_states < plain.unique_states, "{strategy}: {} states", reduced.unique_states);
        let model = ConsumerModel::new(two_groups(strategy));
        for (p, r) in plain.properties.iter().zip(&reduced.properties) {
            assert_eq!((&p.name, &p.verdict), (&r.name, &r.verdict), "{strategy}");
            assert_eq!(p.actions.len(), r.actions.len(), "{strategy} {}: shortest lengths differ", p.name);
            let states = check::replay(&model, &r.actions).unwrap_or_else(|e| panic!("{strategy} {}: {e}", r.name));
            if !r.actions.is_empty() {
                let property = check::property_named(&model, &r.name).expect("a property of the row");
                assert!(is_discovery(&model, &property, states.last().expect("replayed")), "{strategy} {}", r.name);
            }
        }
    }
}
