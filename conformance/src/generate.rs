//! Model paths for generated tests: every path up to a depth, or seeded random walks.

use model::{Action, ConsumerModel, State};
use stateright::Model;

/// SplitMix64: a small, fixed pseudo-random generator, so a seed names the same walks on
/// every machine and every version of every dependency.
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (bound > 0); the tiny modulo bias does not matter here.
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound as u64) as usize
    }
}

fn enabled(model: &ConsumerModel, state: &State) -> Vec<Action> {
    let mut actions = Vec::new();
    model.actions(state, &mut actions);
    actions
}

/// `count` random walks from the initial state, each until no action is enabled or
/// `steps_max` steps. Walk `i` uses the generator seeded with `seed + i`, so any one walk can
/// be reproduced alone.
pub fn walks(model: &ConsumerModel, count: usize, seed: u64, steps_max: usize) -> Vec<Vec<Action>> {
    (0..count as u64).map(|i| walk(model, seed.wrapping_add(i), steps_max)).collect()
}

fn walk(model: &ConsumerModel, seed: u64, steps_max: usize) -> Vec<Action> {
    let mut rng = SplitMix64::new(seed);
    let mut state = model.init_states().remove(0);
    let mut path = Vec::new();
    while path.len() < steps_max {
        let actions = enabled(model, &state);
        if actions.is_empty() {
            break;
        }
        let action = actions[rng.below(actions.len())];
        state = model.next_state(&state, action).expect("enabled actions have successors");
        path.push(action);
    }
    path
}

/// Every path of exactly `depth` steps, plus the shorter ones that end in a state with no
/// enabled action, in a fixed order; stops after `paths_max` paths (the second value says
/// whether it stopped early).
pub fn paths_to_depth(model: &ConsumerModel, depth: usize, paths_max: usize) -> (Vec<Vec<Action>>, bool) {
    let mut paths = Vec::new();
    let mut prefix = Vec::new();
    let state = model.init_states().remove(0);
    let complete = extend(model, &state, depth, &mut prefix, &mut paths, paths_max);
    (paths, !complete)
}

fn extend(
    model: &ConsumerModel,
    state: &State,
    depth: usize,
    prefix: &mut Vec<Action>,
    paths: &mut Vec<Vec<Action>>,
    paths_max: usize,
) -> bool {
    let actions = enabled(model, state);
    if prefix.len() == depth || actions.is_empty() {
        paths.push(prefix.clone());
        return paths.len() < paths_max;
    }
    for action in actions {
        let next = model.next_state(state, action).expect("enabled actions have successors");
        prefix.push(action);
        let go_on = extend(model, &next, depth, prefix, paths, paths_max);
        prefix.pop();
        if !go_on {
            return false;
        }
    }
    true
}
