//! Runs the checker on one configuration and turns its discoveries into verdicts.

use crate::action::Action;
pub use crate::properties::is_discovery;
use crate::properties::{is_safety, properties_for, role_of, Role};
use crate::search;
use crate::state::State;
use crate::ConsumerModel;
use serde::{Deserialize, Serialize};
use stateright::{Checker, Model, Property, UniformChooser};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How the state space is searched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Search {
    /// Breadth-first (our own, `search.rs`): complete, shortest discoveries; honours symmetry.
    Bfs,
    /// Depth-first: complete; honours symmetry reduction.
    Dfs,
    /// Seeded random walks: never complete, so it can refute but not prove.
    Simulation,
}

#[derive(Clone, Debug)]
pub struct CheckOptions {
    pub search: Search,
    pub threads: usize,
    pub seed: u64,
    /// Stop after this long; unfinished properties are then `unknown`.
    pub timeout: Option<Duration>,
    /// Owners within a group, and groups, are interchangeable: one state per class.
    pub symmetry: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions { search: Search::Bfs, threads: 1, seed: 0, timeout: None, symmetry: false }
    }
}

/// The outcome of one property.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// `always`: no reachable state violates it (the search was complete).
    Holds,
    /// `always`: this counterexample reaches a violating state.
    Violated,
    /// `sometimes`: this example reaches the situation.
    Reached,
    /// `sometimes`: the complete search never reached the situation: for a fault witness the
    /// check is vacuous; an observation was simply not observed.
    Unreached,
    /// The search stopped early (timeout or simulation) without a discovery.
    Unknown,
}

impl Verdict {
    /// The verdict as spec.md and the JSON output spell it.
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Violated => "violated",
            Verdict::Reached => "reached",
            Verdict::Unreached => "unreached",
            Verdict::Unknown => "unknown",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PropertyOutcome {
    pub name: String,
    /// A safety claim, a fault witness or an observation (spec.md §6.2).
    pub role: Role,
    /// `always` or `sometimes`.
    pub expectation: String,
    pub verdict: Verdict,
    /// The counterexample (or example), minimised, as action values.
    pub actions: Vec<Action>,
    /// Whether `actions` is proven a shortest path to a discovery: always after our BFS; after
    /// DFS or simulation, false where the search for shortest paths gave up at its bound
    /// (`SHORTEST_STATES_MAX`) and the checker's own path was kept. True without actions.
    pub shortest: bool,
    /// With a lifted budget (`any`): the ordinary configuration `actions` replays in, each
    /// lifted budget replaced by the faults the path uses (`Config::concretised`). Its states,
    /// trace and timeline are that configuration's: concrete epochs, counts and totals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concrete: Option<crate::Config>,
}

impl PropertyOutcome {
    /// The configuration this outcome's path replays in: `concrete`, or the report's own.
    pub fn path_config<'a>(&'a self, report_config: &'a crate::Config) -> &'a crate::Config {
        self.concrete.as_ref().unwrap_or(report_config)
    }
}

/// Progress of a running check, reported every few seconds.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    pub states: usize,
    pub unique_states: usize,
    pub depth: usize,
    pub elapsed: Duration,
}

/// One strategy's part of `--json` (spec.md §8.1); read back, unknown fields are errors.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckReport {
    pub config: crate::Config,
    pub search: Search,
    pub threads: usize,
    pub symmetry: bool,
    /// Whether the whole reachable state space was explored.
    pub complete: bool,
    pub states: usize,
    pub unique_states: usize,
    pub max_depth: usize,
    /// Time the checker took to explore.
    pub seconds: f64,
    /// Time spent afterwards finding the shortest counterexamples and minimising them.
    pub counterexample_seconds: f64,
    pub properties: Vec<PropertyOutcome>,
}

impl CheckReport {
    pub fn outcome(&self, name: &str) -> Option<&PropertyOutcome> {
        self.properties.iter().find(|p| p.name == name)
    }

    /// True when a safety property is violated.
    pub fn any_violated(&self) -> bool {
        self.properties.iter().any(|p| p.verdict == Verdict::Violated)
    }

    /// The fault witnesses a complete search never reached: the faults never struck where they
    /// matter, so a `holds` beside them would be vacuous.
    pub fn unreached(&self) -> Vec<&str> {
        self.unreached_with(Role::FaultWitness)
    }

    /// The observations a complete search never reached (reported, never a failure).
    pub fn not_observed(&self) -> Vec<&str> {
        self.unreached_with(Role::Observation)
    }

    fn unreached_with(&self, role: Role) -> Vec<&str> {
        let unreached = self.properties.iter().filter(|p| p.verdict == Verdict::Unreached && p.role == role);
        unreached.map(|p| p.name.as_str()).collect()
    }
}

/// Checks `model` to completion (or until the timeout) and computes every property's verdict.
pub fn run(model: &ConsumerModel, options: &CheckOptions, progress: &mut dyn FnMut(Progress)) -> CheckReport {
    let started = Instant::now();
    let properties = model.properties();
    let (complete, states, unique_states, max_depth, found) = match options.search {
        // Our own BFS: its discoveries are already shortest (`search.rs`).
        Search::Bfs => {
            let search_options = search::Options {
                threads: options.threads.max(1),
                symmetry: options.symmetry,
                deadline: options.timeout.map(|timeout| started + timeout),
                until_found: None,
            };
            let found = search::bfs(model, &properties, &search_options, &mut |counts| {
                let search::Counts { states, unique_states, depth } = counts;
                progress(Progress { states, unique_states, depth, elapsed: started.elapsed() })
            });
            let paths = found.discoveries.into_iter().map(|(name, path)| (name, (path, true))).collect();
            (found.complete, found.states, found.unique_states, found.max_depth, paths)
        }
        Search::Dfs => {
            let checker = stateright_builder(model, options).spawn_dfs();
            with_shortest(model, &properties, options, SHORTEST_STATES_MAX, finish(checker, started, options, progress))
        }
        Search::Simulation => {
            let checker = stateright_builder(model, options).spawn_simulation(options.seed, UniformChooser);
            with_shortest(model, &properties, options, SHORTEST_STATES_MAX, finish(checker, started, options, progress))
        }
    };
    let search_seconds = started.elapsed().as_secs_f64();
    let properties = properties
        .iter()
        .map(|property| outcome(model, property, found.get(property.name).cloned(), complete))
        .collect();
    CheckReport {
        config: model.config.clone(),
        search: options.search,
        threads: options.threads.max(1),
        symmetry: options.symmetry,
        complete,
        states,
        unique_states,
        max_depth,
        seconds: search_seconds,
        counterexample_seconds: started.elapsed().as_secs_f64() - search_seconds,
        properties,
    }
}

/// stateright's checker for DFS and simulation, with the run's threads, timeout and symmetry.
fn stateright_builder(model: &ConsumerModel, options: &CheckOptions) -> stateright::CheckerBuilder<ConsumerModel> {
    let mut builder = model.clone().checker().threads(options.threads.max(1));
    if let Some(timeout) = options.timeout {
        builder = builder.timeout(timeout);
    }
    if options.symmetry {
        builder = builder.symmetry();
    }
    builder
}

/// stateright's discoveries are not shortest: our BFS (`search.rs`), stopped once it has found
/// them all, at their deepest level or at `SHORTEST_STATES_MAX` states, finds shortest ones.
/// Where it gives up, stateright's path is kept and marked not shortest.
fn with_shortest(
    model: &ConsumerModel,
    properties: &[Property<ConsumerModel>],
    options: &CheckOptions,
    states_max: usize,
    (complete, states, unique_states, max_depth, discoveries): (bool, usize, usize, usize, Discoveries),
) -> (bool, usize, usize, usize, Paths) {
    let discovered: Vec<Property<ConsumerModel>> =
        properties.iter().filter(|p| discoveries.iter().any(|(name, _)| *name == p.name)).cloned().collect();
    let depth_max = discoveries.iter().map(|(_, path)| path.len()).max().unwrap_or(0);
    let search_options = search::Options {
        threads: options.threads.max(1),
        symmetry: options.symmetry,
        deadline: None,
        until_found: Some(search::Bounds { depth_max, states_max }),
    };
    let mut shortest = if discovered.is_empty() {
        BTreeMap::new()
    } else {
        search::bfs(model, &discovered, &search_options, &mut |_| {}).discoveries
    };
    let mut paths = Paths::new();
    for (name, path) in discoveries {
        match shortest.remove(name) {
            Some(shortest) => paths.insert(name, (shortest, true)),
            None => paths.insert(name, (path, false)),
        };
    }
    (complete, states, unique_states, max_depth, paths)
}

/// Per discovered property, its path and whether it is proven shortest.
type Paths = BTreeMap<&'static str, (Vec<Action>, bool)>;

/// Distinct states past which the search for shortest paths after DFS or simulation gives up
/// (our BFS's compact arena: about 100 MiB at the fenced rows' sizes).
pub const SHORTEST_STATES_MAX: usize = 4_000_000;

type Discoveries = Vec<(&'static str, Vec<Action>)>;

/// Waits for the checker, reporting progress every two seconds, and collects its discoveries.
fn finish(
    checker: impl Checker<ConsumerModel>,
    started: Instant,
    options: &CheckOptions,
    progress: &mut dyn FnMut(Progress),
) -> (bool, usize, usize, usize, Discoveries) {
    let interval = Duration::from_secs(2);
    let mut last_report = Instant::now();
    while !checker.is_done() {
        let timed_out = options.timeout.is_some_and(|timeout| started.elapsed() >= timeout);
        if timed_out {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        if last_report.elapsed() >= interval {
            last_report = Instant::now();
            progress(Progress {
                states: checker.state_count(),
                unique_states: checker.unique_state_count(),
                depth: checker.max_depth(),
                elapsed: started.elapsed(),
            });
        }
    }
    let checker = checker.join();
    // Simulation never proves anything; BFS and DFS are complete unless the timeout cut them.
    let timed_out = options.timeout.is_some_and(|timeout| started.elapsed() >= timeout);
    let complete = options.search != Search::Simulation && !timed_out;
    let mut discoveries: Discoveries =
        checker.discoveries().into_iter().map(|(name, path)| (name, path.into_actions())).collect();
    discoveries.sort_by_key(|(name, _)| *name);
    (complete, checker.state_count(), checker.unique_state_count(), checker.max_depth(), discoveries)
}

fn outcome(
    model: &ConsumerModel,
    property: &Property<ConsumerModel>,
    found: Option<(Vec<Action>, bool)>,
    complete: bool,
) -> PropertyOutcome {
    let safety = is_safety(property);
    let verdict = match (&found, safety, complete) {
        (Some(_), true, _) => Verdict::Violated,
        (Some(_), false, _) => Verdict::Reached,
        (None, true, true) => Verdict::Holds,
        (None, false, true) => Verdict::Unreached,
        (None, _, false) => Verdict::Unknown,
    };
    let shortest = found.as_ref().is_none_or(|(_, shortest)| *shortest);
    let actions = found.map(|(actions, _)| minimize(model, property, actions)).unwrap_or_default();
    let concrete = (model.config.lifted.any() && !actions.is_empty()).then(|| concretise(model, property, &actions));
    PropertyOutcome {
        name: property.name.to_string(),
        role: role_of(property.name),
        expectation: if safety { "always" } else { "sometimes" }.to_string(),
        verdict,
        actions,
        shortest,
        concrete,
    }
}

/// The ordinary configuration a path of the abstraction replays in (spec.md §7.1). That the
/// path replays there, step for step, and ends in a discovery of the same property is the
/// simulation the abstraction's exactness rests on; it is asserted for every path reported.
pub fn concretise(model: &ConsumerModel, property: &Property<ConsumerModel>, actions: &[Action]) -> crate::Config {
    let config = model.config.concretised(actions);
    let concrete = ConsumerModel::new(config.clone());
    let states = replay(&concrete, actions).unwrap_or_else(|unreachable| {
        panic!("invariant: a path of the abstraction replays in {}: {unreachable}", config.flags())
    });
    let same = property_named(&concrete, property.name);
    let reaches = same.as_ref().is_some_and(|same| is_discovery(&concrete, same, states.last().expect("initial")));
    assert!(reaches, "invariant: the concrete path discovers {} too ({})", property.name, config.flags());
    config
}

/// Why a sequence of actions cannot be replayed through the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreachable {
    /// 1-based number of the first step that is not enabled.
    pub step: usize,
    pub action: Action,
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "step {} ({}) is not enabled in the model at that point", self.step, self.action)
    }
}

impl std::error::Error for Unreachable {}

/// Replays `actions` from the initial state, returning every state visited (initial first).
pub fn replay(model: &ConsumerModel, actions: &[Action]) -> Result<Vec<State>, Unreachable> {
    let mut states = model.init_states();
    let mut enabled = Vec::new();
    for (index, action) in actions.iter().enumerate() {
        let state = states.last().expect("replay starts from the initial state");
        enabled.clear();
        model.actions(state, &mut enabled);
        if !enabled.contains(action) {
            return Err(Unreachable { step: index + 1, action: *action });
        }
        let next = model.next_state(state, *action).expect("enabled actions always have a successor");
        states.push(next);
    }
    Ok(states)
}

/// Shortens a discovery: cut it at its first discovering state, then drop runs of consecutive
/// steps (longest runs first, down to single steps) while the rest still replays and still
/// reaches a discovery, until no run can be dropped. Deterministic for a given input.
pub fn minimize(model: &ConsumerModel, property: &Property<ConsumerModel>, actions: Vec<Action>) -> Vec<Action> {
    let discovery_end = |actions: &[Action]| -> Option<usize> {
        let states = replay(model, actions).ok()?;
        states.iter().position(|state| is_discovery(model, property, state))
    };
    let mut best = actions;
    let end = discovery_end(&best).unwrap_or_else(|| {
        panic!("a checker discovery of {} replays to a discovering state: {:?}", property.name, best)
    });
    best.truncate(end);
    'shrink: loop {
        for run in (1..=best.len()).rev() {
            for start in 0..=best.len() - run {
                let mut candidate = best.clone();
                candidate.drain(start..start + run);
                if let Some(end) = discovery_end(&candidate) {
                    candidate.truncate(end);
                    best = candidate;
                    continue 'shrink;
                }
            }
        }
        return best;
    }
}

/// Checks one property by name against a configuration's property list.
pub fn property_named(model: &ConsumerModel, name: &str) -> Option<Property<ConsumerModel>> {
    properties_for(&model.config).into_iter().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, Strategy};

    /// stateright's DFS paths for a row with violations, then the search for shortest paths
    /// with `states_max`.
    fn dfs_then_shortest(states_max: usize) -> (Discoveries, Paths, BTreeMap<&'static str, Vec<Action>>) {
        let model = ConsumerModel::new(Config { groups: 1, ..Config::new(Strategy::EffectFirst) });
        let options = CheckOptions { search: Search::Dfs, ..CheckOptions::default() };
        let properties = model.properties();
        let checker = stateright_builder(&model, &options).spawn_dfs();
        let found = finish(checker, Instant::now(), &options, &mut |_| {});
        let dfs = found.4.clone();
        let (.., paths) = with_shortest(&model, &properties, &options, states_max, found);
        let bfs_options = search::Options { threads: 1, symmetry: false, deadline: None, until_found: None };
        let bfs = search::bfs(&model, &properties, &bfs_options, &mut |_| {}).discoveries;
        (dfs, paths, bfs)
    }

    #[test]
    fn paths_after_dfs_are_shortest_and_marked_so() {
        let (dfs, paths, bfs) = dfs_then_shortest(SHORTEST_STATES_MAX);
        assert!(dfs.iter().any(|(name, path)| path.len() > bfs[name].len()), "DFS found only shortest paths: vacuous");
        assert_eq!(paths.keys().collect::<Vec<_>>(), bfs.keys().collect::<Vec<_>>());
        for (name, (path, shortest)) in &paths {
            assert!(*shortest, "{name}");
            assert_eq!(path.len(), bfs[name].len(), "{name}: not as short as BFS's");
        }
    }

    #[test]
    fn a_bound_keeps_the_checkers_path_marked_not_shortest() {
        let (dfs, paths, _) = dfs_then_shortest(1);
        assert!(dfs.iter().any(|(_, path)| !path.is_empty()), "no discovery below the initial state: vacuous");
        for (name, path) in &dfs {
            let shortest = !path.is_empty();
            assert_eq!(paths[name], (path.clone(), !shortest), "{name}");
        }
    }
}
