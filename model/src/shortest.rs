//! Shortest discoveries after stateright's DFS or simulation, whose discoveries are whatever
//! path the search happened to take: a level-by-level BFS bounded by the deepest of them. (Our
//! own BFS, `search.rs`, finds shortest discoveries in its single pass and needs none of this.)

use crate::action::Action;
use crate::properties::is_discovery;
use crate::state::State;
use crate::ConsumerModel;
use stateright::{Model, Property};
use std::collections::hash_map::{DefaultHasher, Entry};
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// Visited states past which the search gives up (and callers keep the checker's own path):
/// bounds memory at roughly 100 MiB of fingerprints.
pub const VISITED_MAX: usize = 4_000_000;

/// A 64-bit fingerprint with fixed keys, so the search is the same on every run. A collision
/// (about 1e-7 at four million states) could only hide a state, never invent a path: every
/// returned path is replayed by the caller.
fn fingerprint(state: &State) -> u64 {
    let mut hasher = DefaultHasher::new();
    state.hash(&mut hasher);
    hasher.finish()
}

/// For each wanted property, a shortest action sequence from the initial state to a state
/// that discovers it (violates an `always`, satisfies a `sometimes`), searching no deeper than
/// `depth_max`. Properties not found within the bounds are absent from the result.
pub fn shortest_discoveries(
    model: &ConsumerModel,
    wanted: &[Property<ConsumerModel>],
    depth_max: usize,
) -> BTreeMap<&'static str, Vec<Action>> {
    type Parents = HashMap<u64, Option<(u64, Action)>, BuildHasherDefault<DefaultHasher>>;
    let mut parents = Parents::default();
    let mut found = BTreeMap::new();
    let mut frontier: Vec<(u64, State)> = Vec::new();
    for state in model.init_states() {
        let id = fingerprint(&state);
        parents.insert(id, None);
        frontier.push((id, state));
    }
    let path_to = |parents: &Parents, mut id: u64| {
        let mut actions = Vec::new();
        while let Some(Some((parent, action))) = parents.get(&id) {
            actions.push(*action);
            id = *parent;
        }
        actions.reverse();
        actions
    };
    let mut actions = Vec::new();
    for depth in 0..=depth_max {
        for (id, state) in &frontier {
            for property in wanted {
                if !found.contains_key(property.name) && is_discovery(model, property, state) {
                    found.insert(property.name, path_to(&parents, *id));
                }
            }
        }
        if found.len() == wanted.len() || depth == depth_max || parents.len() > VISITED_MAX {
            break;
        }
        let mut next_frontier = Vec::new();
        for (id, state) in &frontier {
            actions.clear();
            model.actions(state, &mut actions);
            for action in &actions {
                let Some(next) = model.next_state(state, *action) else { continue };
                let next_id = fingerprint(&next);
                if let Entry::Vacant(entry) = parents.entry(next_id) {
                    entry.insert(Some((*id, *action)));
                    next_frontier.push((next_id, next));
                }
            }
        }
        frontier = next_frontier;
    }
    found
}
