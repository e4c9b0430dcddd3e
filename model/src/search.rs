//! The checker of `model check --search bfs`: a single-pass, level-synchronous breadth-first
//! search of our own that records the first, hence shallowest, discovery of every property.
//!
//! Why not stateright's BFS: it keeps the *last* discovery of a property, so finding a shortest
//! counterexample took a second, almost complete search; it ignores symmetry; and its visited
//! set keeps 64-bit fingerprints (a collision would hide a state). Here:
//! - **Exact.** The visited set holds every state's whole encoding (`pack.rs`); two states are
//!   merged only when they are equal. Every verdict is a proof at its bounds.
//! - **Shortest.** States are numbered in discovery order, level by level, and every state is
//!   evaluated once, when it is expanded: the first state that discovers a property is a
//!   shallowest one, and its parent chain is a shortest path.
//! - **Symmetry.** With `symmetry`, successors are replaced by their representative (owners
//!   within a group, groups): one state per class. A path through representatives is mapped
//!   back to concrete actions by replaying it (`concrete_path`).
//! - **Deterministic.** A level is expanded in windows of chunks; threads expand chunks, and
//!   their successors are merged in chunk order by one thread. The result (numbering, counts,
//!   discoveries, paths) is the same for any number of threads.
//!
//! The arena: states are appended to one byte vector in discovery order, with their start
//! offsets and their parent's number. A level is a range of numbers, so the frontier is not
//! stored twice. Memory per state: its encoding, 8 bytes of offset, 4 of parent, and 8 or 16
//! of hash table.

use crate::action::Action;
use crate::pack::{pack_state, unpack_state_into};
use crate::properties::is_discovery;
use crate::state::State;
use crate::ConsumerModel;
use stateright::{Model, Property, Representative};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Parents expanded by one task: large enough to amortise the hand-over, small enough that a
/// window's successors stay a few megabytes.
const CHUNK_STATES: usize = 512;
/// Chunks per window: the successors of a window are held until they are merged.
const WINDOW_CHUNKS: usize = 32;
/// The state numbers are `u32` (the parent links), and the table packs a number with a tag.
const STATES_MAX: usize = u32::MAX as usize - 1;

/// What the search found.
#[derive(Clone, Debug)]
pub struct Found {
    /// Distinct states (representatives under symmetry) reached.
    pub unique_states: usize,
    /// Successor states generated, duplicates included, plus the initial states.
    pub states: usize,
    /// Levels below the initial one: the length of the longest shortest path.
    pub max_depth: usize,
    /// Whether every reachable state was expanded (false: the deadline cut the search).
    pub complete: bool,
    /// Per discovered property, a shortest path of concrete actions to a discovering state.
    pub discoveries: BTreeMap<&'static str, Vec<Action>>,
}

/// A running search's counts, for progress reports.
#[derive(Clone, Copy, Debug)]
pub struct Counts {
    pub states: usize,
    pub unique_states: usize,
    pub depth: usize,
}

pub struct Options {
    pub threads: usize,
    pub symmetry: bool,
    /// Stop expanding once this instant passes; the result is then incomplete.
    pub deadline: Option<Instant>,
}

/// Every state, in discovery order: encodings, where each starts, and each one's parent.
struct Arena {
    bytes: Vec<u8>,
    starts: Vec<u64>,
    parents: Vec<u32>,
    table: Table,
}

impl Arena {
    fn new() -> Arena {
        Arena { bytes: Vec::new(), starts: vec![0], parents: Vec::new(), table: Table::with_capacity(1 << 12) }
    }

    fn len(&self) -> usize {
        self.parents.len()
    }

    fn get(&self, index: usize) -> &[u8] {
        get_of(&self.bytes, &self.starts, index)
    }

    /// Adds `encoded` (numbered next) unless an equal state is present.
    fn insert(&mut self, encoded: &[u8], hash: u64, parent: u32) {
        let Arena { bytes, starts, parents, table } = self;
        let slot = match table.find(hash, |index| get_of(bytes, starts, index) == encoded) {
            Slot::Present => return,
            Slot::Vacant(slot) => slot,
        };
        let index = parents.len();
        assert!(index < STATES_MAX, "the search passed {STATES_MAX} states");
        table.fill(slot, hash, index);
        bytes.extend_from_slice(encoded);
        starts.push(bytes.len() as u64);
        parents.push(parent);
        if table.is_crowded() {
            table.grow(|index| hash_bytes(get_of(bytes, starts, index)));
        }
    }
}

fn get_of<'a>(bytes: &'a [u8], starts: &[u64], index: usize) -> &'a [u8] {
    &bytes[starts[index] as usize..starts[index + 1] as usize]
}

enum Slot {
    Present,
    Vacant(usize),
}

/// Open addressing with linear probing over state numbers. A slot holds `number + 1` in its
/// low 32 bits (0: empty) and the high 32 bits of the state's hash, which rules out almost
/// every byte comparison with a state of a different hash.
struct Table {
    slots: Vec<u64>,
    filled: usize,
}

impl Table {
    fn with_capacity(slots: usize) -> Table {
        assert!(slots.is_power_of_two());
        Table { slots: vec![0; slots], filled: 0 }
    }

    fn find(&self, hash: u64, mut equal: impl FnMut(usize) -> bool) -> Slot {
        let mask = self.slots.len() - 1;
        let tag = hash >> 32;
        let mut slot = hash as usize & mask;
        loop {
            let entry = self.slots[slot];
            if entry == 0 {
                return Slot::Vacant(slot);
            }
            if entry >> 32 == tag && equal((entry & 0xffff_ffff) as usize - 1) {
                return Slot::Present;
            }
            slot = (slot + 1) & mask;
        }
    }

    fn fill(&mut self, slot: usize, hash: u64, index: usize) {
        debug_assert_eq!(self.slots[slot], 0);
        self.slots[slot] = (hash >> 32) << 32 | (index as u64 + 1);
        self.filled += 1;
    }

    /// Past half full, probes lengthen quickly.
    fn is_crowded(&self) -> bool {
        self.filled * 2 > self.slots.len()
    }

    fn grow(&mut self, mut hash_of: impl FnMut(usize) -> u64) {
        let doubled = vec![0; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        let mask = self.slots.len() - 1;
        for entry in old.into_iter().filter(|&entry| entry != 0) {
            let hash = hash_of((entry & 0xffff_ffff) as usize - 1);
            let mut slot = hash as usize & mask;
            while self.slots[slot] != 0 {
                slot = (slot + 1) & mask;
            }
            self.slots[slot] = entry;
        }
    }
}

/// A 64-bit hash of an encoding with fixed constants (the same on every run and machine): the
/// bytes in 8-byte words, multiplied in, then a final avalanche (splitmix64's finaliser) so
/// that the low bits, which pick the slot, depend on every byte.
fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut hash = 0x9e37_79b9_7f4a_7c15u64 ^ bytes.len() as u64;
    for chunk in bytes.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        hash = (hash.rotate_left(23) ^ u64::from_le_bytes(word)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

/// The successors of one chunk of parents, as the merge needs them.
#[derive(Default)]
struct ChunkOut {
    /// The successors' encodings, back to back.
    bytes: Vec<u8>,
    /// Per successor: its parent's number, its encoding's length, its hash.
    successors: Vec<(u32, u32, u64)>,
    /// Per property (index into the wanted list) discovered in the chunk: the first parent
    /// that discovered it.
    discoveries: Vec<(usize, u32)>,
}

/// Searches every state reachable in `model` (or until the deadline), evaluating `properties`.
pub fn bfs(
    model: &ConsumerModel,
    properties: &[Property<ConsumerModel>],
    options: &Options,
    progress: &mut dyn FnMut(Counts),
) -> Found {
    let mut arena = Arena::new();
    let mut encoded = Vec::new();
    for state in model.init_states() {
        let state = if options.symmetry { state.representative() } else { state };
        pack_state(&state, &mut encoded);
        arena.insert(&encoded, hash_bytes(&encoded), u32::MAX);
    }
    let mut found: Vec<Option<u32>> = vec![None; properties.len()];
    let mut generated = arena.len();
    let (mut level_start, mut depth, mut complete) = (0, 0, true);
    let mut last_report = Instant::now();
    while level_start < arena.len() {
        let level_end = arena.len();
        let mut window_start = level_start;
        while window_start < level_end {
            if options.deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                complete = false;
                break;
            }
            let window_end = level_end.min(window_start + CHUNK_STATES * WINDOW_CHUNKS);
            let wanted: Vec<usize> = (0..properties.len()).filter(|&p| found[p].is_none()).collect();
            let outs = expand_window(model, properties, &wanted, options, &arena, window_start..window_end);
            for out in outs {
                for &(property, state) in &out.discoveries {
                    found[property].get_or_insert(state);
                }
                let mut offset = 0;
                for &(parent, length, hash) in &out.successors {
                    let bytes = &out.bytes[offset..offset + length as usize];
                    offset += length as usize;
                    arena.insert(bytes, hash, parent);
                }
                generated += out.successors.len();
            }
            window_start = window_end;
            if last_report.elapsed() >= Duration::from_secs(2) {
                last_report = Instant::now();
                progress(Counts { states: generated, unique_states: arena.len(), depth });
            }
        }
        if !complete {
            break;
        }
        level_start = level_end;
        if level_start < arena.len() {
            depth += 1;
        }
    }
    let discoveries = properties
        .iter()
        .zip(&found)
        .filter_map(|(property, state)| Some((property.name, concrete_path(model, options, &arena, (*state)?))))
        .collect();
    Found { unique_states: arena.len(), states: generated, max_depth: depth, complete, discoveries }
}

/// Expands the parents `window` on `options.threads` threads, chunk by chunk; the outputs come
/// back in chunk order whatever thread made them.
fn expand_window(
    model: &ConsumerModel,
    properties: &[Property<ConsumerModel>],
    wanted: &[usize],
    options: &Options,
    arena: &Arena,
    window: std::ops::Range<usize>,
) -> Vec<ChunkOut> {
    let chunks: Vec<std::ops::Range<usize>> =
        window.clone().step_by(CHUNK_STATES).map(|start| start..window.end.min(start + CHUNK_STATES)).collect();
    let expand =
        |chunk: &std::ops::Range<usize>| expand_chunk(model, properties, wanted, options.symmetry, arena, chunk);
    let threads = options.threads.clamp(1, chunks.len().max(1));
    if threads == 1 {
        return chunks.iter().map(expand).collect();
    }
    let outs: Vec<Mutex<Option<ChunkOut>>> = chunks.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let mut index = next.fetch_add(1, Ordering::Relaxed);
                while let Some(chunk) = chunks.get(index) {
                    *outs[index].lock().expect("no expander panics holding its slot") = Some(expand(chunk));
                    index = next.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    outs.into_iter().map(|out| out.into_inner().ok().flatten().expect("every chunk was expanded")).collect()
}

fn expand_chunk(
    model: &ConsumerModel,
    properties: &[Property<ConsumerModel>],
    wanted: &[usize],
    symmetry: bool,
    arena: &Arena,
    chunk: &std::ops::Range<usize>,
) -> ChunkOut {
    let mut out = ChunkOut::default();
    let mut discovered = vec![false; properties.len()];
    let (mut actions, mut encoded) = (Vec::new(), Vec::new());
    // The parent and its successor are unpacked and built in reused states: once their
    // buffers have grown, expanding allocates nothing but the chunk's output.
    let mut state = model.init_states().swap_remove(0);
    let mut next = state.clone();
    for index in chunk.clone() {
        unpack_state_into(arena.get(index), &mut state);
        for &property in wanted {
            if !discovered[property] && is_discovery(model, &properties[property], &state) {
                discovered[property] = true;
                out.discoveries.push((property, index as u32));
            }
        }
        actions.clear();
        model.actions(&state, &mut actions);
        for &action in &actions {
            model.next_state_into(&state, action, &mut next);
            if symmetry {
                next.canonicalize();
            }
            pack_state(&next, &mut encoded);
            out.bytes.extend_from_slice(&encoded);
            out.successors.push((index as u32, encoded.len() as u32, hash_bytes(&encoded)));
        }
    }
    out
}

/// The concrete actions from the initial state to the state numbered `target`. The arena holds
/// representatives under symmetry, and a stored parent link says which state, not which
/// action: each step takes the first enabled action (in `actions` order) whose successor has
/// the stored child's encoding. One exists because a representative's successors are the
/// representatives of its class members' successors; the choice is deterministic.
fn concrete_path(model: &ConsumerModel, options: &Options, arena: &Arena, target: u32) -> Vec<Action> {
    let mut chain = vec![target];
    while let Some(&parent) = chain.last().map(|&index| &arena.parents[index as usize]) {
        if parent == u32::MAX {
            break;
        }
        chain.push(parent);
    }
    chain.reverse();
    let canonical = |state: &State| if options.symmetry { state.representative() } else { state.clone() };
    let mut state = model
        .init_states()
        .into_iter()
        .find(|init| {
            let mut encoded = Vec::new();
            pack_state(&canonical(init), &mut encoded);
            encoded == arena.get(chain[0] as usize)
        })
        .expect("invariant: a path starts at an initial state");
    let (mut path, mut actions, mut encoded) = (Vec::new(), Vec::new(), Vec::new());
    for &child in &chain[1..] {
        actions.clear();
        model.actions(&state, &mut actions);
        let step = actions.iter().find_map(|&action| {
            let next = model.next_state(&state, action)?;
            pack_state(&canonical(&next), &mut encoded);
            (encoded == arena.get(child as usize)).then_some((action, next))
        });
        let (action, next) = step.expect("invariant: a stored child is the successor of its parent's class");
        path.push(action);
        state = next;
    }
    path
}
