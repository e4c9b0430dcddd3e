//! The checker's hot path allocates nothing once its reused states have grown: unpacking a
//! parent, listing its actions, building each successor, taking its representative and
//! packing it (`search.rs`'s `expand_chunk`). Counted with an allocator that counts per thread.

mod common;

use common::paused_config;
use model::pack::{pack_state, unpack_state_into};
use model::{Config, ConsumerModel, State, Strategy};
use stateright::Model;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeSet, VecDeque};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed to the system allocator unchanged; the count is a side effect.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// The encodings of the first `states_max` states a plain BFS of `config` reaches.
fn encodings(model: &ConsumerModel, states_max: usize) -> Vec<Vec<u8>> {
    let mut seen: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut queue: VecDeque<State> = model.init_states().into();
    let mut actions = Vec::new();
    while let Some(state) = queue.pop_front() {
        let mut encoded = Vec::new();
        pack_state(&state, &mut encoded);
        if seen.len() == states_max || !seen.insert(encoded) {
            continue;
        }
        actions.clear();
        model.actions(&state, &mut actions);
        queue.extend(actions.iter().filter_map(|&action| model.next_state(&state, action)));
    }
    seen.into_iter().collect()
}

/// Reused buffers, as one expanding thread of the checker holds them.
struct Expander {
    state: State,
    next: State,
    actions: Vec<model::Action>,
    encoded: Vec<u8>,
}

impl Expander {
    /// Expands every parent once; returns the successors built.
    fn expand(&mut self, model: &ConsumerModel, parents: &[Vec<u8>]) -> u64 {
        let mut successors = 0;
        for parent in parents {
            unpack_state_into(parent, &mut self.state);
            self.actions.clear();
            model.actions(&self.state, &mut self.actions);
            for &action in &self.actions {
                model.next_state_into(&self.state, action, &mut self.next);
                self.next.canonicalize();
                pack_state(&self.next, &mut self.encoded);
                successors += 1;
            }
        }
        successors
    }
}

/// For every row (with a second incarnation, so that paused slots are exercised): a first
/// pass over up to 1,000 reachable states grows the buffers, and a second pass over the same
/// states allocates nothing at all.
#[test]
fn expanding_a_state_allocates_nothing_once_the_buffers_have_grown() {
    for strategy in Strategy::ALL {
        let config = Config { groups: 2, ..paused_config(strategy) };
        let config = if config.validate().is_ok() { config } else { paused_config(strategy) };
        let model = ConsumerModel::new(config);
        let parents = encodings(&model, 1_000);
        let initial = model.init_states().swap_remove(0);
        let mut expander = Expander { next: initial.clone(), state: initial, actions: Vec::new(), encoded: Vec::new() };
        let warm = expander.expand(&model, &parents);
        let before = allocations();
        let successors = expander.expand(&model, &parents);
        let allocated = allocations() - before;
        assert_eq!(successors, warm, "{strategy}: the same parents have the same successors");
        assert!(successors > 0, "{strategy}: nothing was expanded");
        assert_eq!(
            allocated,
            0,
            "{strategy}: {allocated} allocations for {successors} successors of {} parents",
            parents.len()
        );
    }
}
