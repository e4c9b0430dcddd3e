//! The abstraction behind `any` (spec.md §7.1), checked rather than only argued:
//! - state by state: for every covered row, every state the concrete system C reaches within a
//!   few faults of each lifted kind enables the same actions as its abstract state, every step
//!   commutes with α, and every property has the same value on both;
//! - verdict by verdict: a row's verdicts with `any` against its verdicts at every budget
//!   0..=3 of the lifted faults (a violation at some budget is one with `any`; a `holds` with
//!   `any` holds at every budget).

use model::abstraction::{abstract_in_place, covers};
use model::check::Verdict;
use model::config::Lifted;
use model::properties::{is_safety, properties_for};
use model::search;
use model::state::State;
use model::step::{apply_concrete, enabled_actions};
use model::{Config, ConsumerModel, Strategy};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

/// The faults (crashes, rebalances and second incarnations together) the enumeration of C
/// allows: enough for both merges of α to happen (two takes leave two stale epochs beside the
/// current one; a zombie and a restart apply a record a third time, past the saturation).
const FAULTS_MAX: u8 = 2;
/// A row's enumeration stops here (and the test fails): the bounds below keep every row far
/// under it.
const STATES_MAX: usize = 2_000_000;

/// The small bounds both checks run at: one group, two owners, two records.
fn small(strategy: Strategy) -> Config {
    Config { groups: 1, owners: 2, partitions: 1, records: 2, commit_every: 1, inflight: 1, ..Config::new(strategy) }
}

/// `small` with crashes, rebalances and second incarnations all lifted (`slots` paused slots).
fn lifted(strategy: Strategy, slots: u8) -> Config {
    let config = Config {
        crashes: 1,
        rebalances: 1,
        pauses: slots,
        lifted: Lifted { crashes: true, rebalances: true, pauses: true },
        ..small(strategy)
    };
    assert_eq!(config.validate(), Ok(()), "{strategy}");
    config
}

fn covered() -> Vec<Strategy> {
    Strategy::ALL.into_iter().filter(|&s| covers(s).is_ok()).collect()
}

fn abstracted(config: &Config, state: &State) -> State {
    let mut abstract_state = state.clone();
    abstract_in_place(config, &mut abstract_state);
    abstract_state
}

fn successor(config: &Config, state: &State, action: model::Action) -> State {
    let mut next = state.clone();
    apply_concrete(config, state, action, &mut next);
    next
}

fn within_faults(state: &State) -> bool {
    state.crashes_used + state.rebalances_used + state.pauses_used <= FAULTS_MAX
}

/// Enumerates C's states within `FAULTS_MAX` faults of each kind and checks each against its
/// abstract state; returns how many states were checked and how many abstract states they map
/// to (so the test shows α merging something).
fn check_row(strategy: Strategy) -> (usize, usize) {
    let config = lifted(strategy, 1);
    let model = ConsumerModel::new(config.clone());
    let properties = properties_for(&config);
    let mut seen: HashSet<State> = HashSet::new();
    let mut images: HashSet<State> = HashSet::new();
    let mut frontier: Vec<State> = vec![State::initial(&config)];
    seen.insert(frontier[0].clone());
    let (mut enabled, mut enabled_abstract) = (Vec::new(), Vec::new());
    while let Some(state) = frontier.pop() {
        let abstract_state = abstracted(&config, &state);
        let repro = format!("cargo test -p model --test abstraction -- {strategy}");
        for property in &properties {
            assert_eq!(
                (property.condition)(&model, &state),
                (property.condition)(&model, &abstract_state),
                "{strategy}: {} tells a state from its abstract state\n{:?}\n{:?}\nreproduce: {repro}",
                property.name,
                state.full(),
                abstract_state.full()
            );
        }
        enabled.clear();
        enabled_abstract.clear();
        enabled_actions(&config, &state, &mut enabled);
        enabled_actions(&config, &abstract_state, &mut enabled_abstract);
        assert_eq!(
            enabled,
            enabled_abstract,
            "{strategy}: enabled actions differ\n{:?}\nreproduce: {repro}",
            state.full()
        );
        for &action in &enabled {
            let next = successor(&config, &state, action);
            let next_abstract = successor(&config, &abstract_state, action);
            assert_eq!(
                abstracted(&config, &next),
                abstracted(&config, &next_abstract),
                "{strategy}: {action} does not commute with the abstraction\nfrom {:?}\nreproduce: {repro}",
                state.full()
            );
            if within_faults(&next) && !seen.contains(&next) {
                seen.insert(next.clone());
                frontier.push(next);
            }
        }
        images.insert(abstract_state);
        assert!(seen.len() <= STATES_MAX, "{strategy}: more than {STATES_MAX} states; shrink the bounds");
    }
    (seen.len(), images.len())
}

#[test]
fn every_reachable_state_commutes_with_the_abstraction_and_keeps_every_property() {
    let mut lines = Vec::new();
    for strategy in covered() {
        let (states, images) = check_row(strategy);
        assert!(images < states, "{strategy}: α merged nothing in {states} states (the check would be vacuous)");
        lines.push(format!("{strategy}: {states} concrete states, {images} abstract"));
        eprintln!("{}", lines.last().expect("pushed"));
    }
    assert!(lines.len() >= 10, "at least the ten core rows are covered: {lines:?}");
    println!("{}", lines.join("\n"));
}

/// Safety verdicts by property name: a full BFS (symmetry on: exact on every covered row), a
/// property discovered is violated, one never discovered holds.
fn safety_verdicts(config: Config) -> BTreeMap<&'static str, Verdict> {
    let model = ConsumerModel::new(config);
    let properties: Vec<_> = properties_for(&model.config).into_iter().filter(is_safety).collect();
    let options = search::Options { threads: 1, symmetry: true, deadline: None, until_found: None };
    let found = search::bfs(&model, &properties, &options, &mut |_| {});
    assert!(found.complete, "{}: the search finished", model.config.flags());
    let verdict = |name| if found.discoveries.contains_key(name) { Verdict::Violated } else { Verdict::Holds };
    properties.iter().map(|p| (p.name, verdict(p.name))).collect()
}

/// The budgets the sweep visits: crashes and rebalances 0..=3 each, pauses 0..=slots+1 (a
/// budget above the row's slots is compared with `any` at that many slots, since `--pauses
/// any` bounds the earlier incarnations alive at once by the slots).
fn budgets() -> Vec<(u8, u8, u8)> {
    let mut budgets = Vec::new();
    for crashes in 0..=3 {
        for rebalances in 0..=3 {
            for pauses in 0..=2 {
                budgets.push((crashes, rebalances, pauses));
            }
        }
    }
    budgets
}

#[test]
fn verdicts_with_any_agree_with_every_budget() {
    let started = Instant::now();
    let mut compared = 0usize;
    for strategy in covered() {
        let unbounded: Vec<BTreeMap<&str, Verdict>> =
            (1..=2).map(|slots| safety_verdicts(lifted(strategy, slots))).collect();
        for (crashes, rebalances, pauses) in budgets() {
            let bounded = Config { crashes, rebalances, pauses, lifted: Lifted::NONE, ..small(strategy) };
            let slots = usize::from(pauses.max(1));
            let any = &unbounded[slots - 1];
            let repro = format!(
                "model check {} --symmetry  vs  --crashes any --rebalances any --pauses any (slots {slots})",
                bounded.flags()
            );
            for (name, verdict) in safety_verdicts(bounded) {
                compared += 1;
                let with_any = any.get(name).unwrap_or_else(|| panic!("{strategy}: {name} is checked with any"));
                if verdict == Verdict::Violated {
                    assert_eq!(
                        with_any,
                        &Verdict::Violated,
                        "{strategy} / {name}: violated at a budget, not with any: {repro}"
                    );
                }
            }
        }
        assert!(started.elapsed() < TIME_CAP, "the sweep exceeded {TIME_CAP:?}; sample the budgets");
    }
    println!("{compared} bounded verdicts compared with any");
}

/// The sweep's time cap (it runs about a minute in a debug build on 2 cores).
const TIME_CAP: Duration = Duration::from_secs(600);
