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

/// One random walk from the initial state, until no action is enabled or `steps_max` steps.
/// `conformance test --walks N --seed S` replays the walks of seeds `S`, `S + 1`, ..., one at a
/// time, so that any one can be reproduced alone and none is kept after its replay.
pub fn walk(model: &ConsumerModel, seed: u64, steps_max: usize) -> Vec<Action> {
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

/// Visits every path of exactly `depth` steps, plus the shorter ones that end in a state with
/// no enabled action, in a fixed order, one at a time (only the current path is kept). Stops
/// when `visit` returns false, or before a path past the first `paths_max`: then it returns
/// true (cut: some paths were not visited).
pub fn for_each_path(
    model: &ConsumerModel,
    depth: usize,
    paths_max: usize,
    visit: &mut dyn FnMut(&[Action]) -> bool,
) -> bool {
    let (mut visited, mut cut) = (0, false);
    let state = model.init_states().remove(0);
    extend(model, &state, depth, &mut Vec::new(), &mut |path| {
        if visited == paths_max {
            cut = true;
            return false;
        }
        visited += 1;
        visit(path)
    });
    cut
}

fn extend(
    model: &ConsumerModel,
    state: &State,
    depth: usize,
    prefix: &mut Vec<Action>,
    visit: &mut dyn FnMut(&[Action]) -> bool,
) -> bool {
    let actions = enabled(model, state);
    if prefix.len() == depth || actions.is_empty() {
        return visit(prefix);
    }
    for action in actions {
        let next = model.next_state(state, action).expect("enabled actions have successors");
        prefix.push(action);
        let go_on = extend(model, &next, depth, prefix, visit);
        prefix.pop();
        if !go_on {
            return false;
        }
    }
    true
}
