//! The checker of `model check --search bfs`: a single-pass, level-synchronous breadth-first
//! search of our own that records the first, hence shallowest, discovery of every property.
//!
//! Why not stateright's BFS: it keeps the *last* discovery of a property, so finding a shortest
//! counterexample took a second, almost complete search; it ignores symmetry; and its visited
//! set keeps 64-bit fingerprints (a collision would hide a state). Here:
//! - **Exact.** The visited set holds every state exactly (its parts' whole encodings,
//!   `pack.rs`, each stored once and numbered); two states are merged only when they are
//!   equal. No hash compaction, no bitstate: every verdict is a proof at its bounds.
//! - **Shortest.** States are numbered in discovery order, level by level, and every state is
//!   evaluated once, when it is expanded: the first state that discovers a property is a
//!   shallowest one, and its parent chain is a shortest path.
//! - **Symmetry.** With `symmetry`, successors are replaced by their representative (owners
//!   within a group, groups): one state per class. A path through representatives is mapped
//!   back to concrete actions by replaying it (`concrete_path`).
//! - **Deterministic.** A level is expanded in windows of chunks; threads expand chunks, and
//!   their successors are merged in chunk order by one thread. The result (numbering, counts,
//!   discoveries, paths) is the same for any number of threads.
//! - **Collapsed.** A state is stored as a record of part numbers: its globals (every field but
//!   the groups) and each group are stored once per distinct value (`Arena`). Memory per
//!   state: `4 * (1 + groups)` bytes of record, 4 of parent, and 10.7 to 21.3 of hash table
//!   (8-byte slots, between three eighths and three quarters full); the distinct parts are
//!   few.
//! - **Allocation-free.** A thread unpacks each parent into one reused state and builds every
//!   successor in another (`ConsumerModel::next_state_into`, `State::canonicalize`); a part
//!   the step did not act on keeps the parent's number without being packed again, and a group
//!   it acted on is packed and looked up without being compared first (it has nearly always
//!   changed).
//! - **Incremental.** A successor is built over a copy of its parent, and only what the step
//!   changed is copied back (`Group::restore_from`); consecutive parents (mostly siblings)
//!   unpack only the parts whose numbers differ; the log, producers and output partitions are
//!   compared with the parent's only after an action that may change them
//!   (`Action::may_change_shared`).

use crate::action::{Action, GroupsChanged};
use crate::pack::{pack_globals, pack_group, unpack_globals_into, unpack_group_into};
use crate::properties::is_discovery;
use crate::state::{GroupOrder, State};
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
    /// A search for shortest paths only (after DFS or simulation, whose paths are not): it
    /// stops as soon as every property is discovered, or at these bounds. `None`: a full search.
    pub until_found: Option<Bounds>,
}

/// Where a search for shortest paths gives up; the result is then incomplete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// No state deeper than this is expanded.
    pub depth_max: usize,
    /// No level is started once this many distinct states are stored.
    pub states_max: usize,
}

/// Distinct encodings, numbered in the order they were first added: their bytes back to back,
/// where each starts, and a hash table over them.
struct Interner {
    bytes: Vec<u8>,
    starts: Vec<u64>,
    table: Table,
}

impl Interner {
    fn new() -> Interner {
        Interner { bytes: Vec::new(), starts: vec![0], table: Table::with_capacity(1 << 12) }
    }

    fn get(&self, index: usize) -> &[u8] {
        get_of(&self.bytes, &self.starts, index)
    }

    /// The number of an encoding equal to `encoded`, if one is present.
    fn lookup(&self, encoded: &[u8], hash: u64) -> Option<u32> {
        let Interner { bytes, starts, table } = self;
        match table.find(hash, |index| get_of(bytes, starts, index) == encoded) {
            Slot::Present(index) => Some(index as u32),
            Slot::Vacant(_) => None,
        }
    }

    /// The number of `encoded`: an equal encoding's, or the next one (then it is added and
    /// the second value is true).
    fn intern(&mut self, encoded: &[u8], hash: u64) -> (u32, bool) {
        let Interner { bytes, starts, table } = self;
        let slot = match table.find(hash, |index| get_of(bytes, starts, index) == encoded) {
            Slot::Present(index) => return (index as u32, false),
            Slot::Vacant(slot) => slot,
        };
        let index = starts.len() - 1;
        assert!(index < STATES_MAX, "the search passed {STATES_MAX} distinct encodings");
        table.fill(slot, hash, index);
        bytes.extend_from_slice(encoded);
        starts.push(bytes.len() as u64);
        if table.is_crowded() {
            table.grow(|index| hash_bytes(get_of(bytes, starts, index)));
        }
        (index as u32, true)
    }
}

/// Every state, in discovery order, and each one's parent. A state is stored collapsed (as
/// SPIN's `-DCOLLAPSE` does, and as exactly): as a record of part numbers, the number of its
/// globals (every field but the groups) and of each group, in `parts`, where every distinct
/// part's encoding is stored once. States share most of their parts, so a state takes
/// `4 * (1 + groups)` bytes, however large its groups. Two states have the same record
/// exactly when they are equal.
struct Arena {
    /// The records, `width` words each, back to back.
    records: Vec<u32>,
    width: usize,
    table: Table,
    parents: Vec<u32>,
    parts: Interner,
}

impl Arena {
    fn new(groups: usize) -> Arena {
        assert!(groups < 64, "invariant: `Unchanged` has a bit per group");
        let width = 1 + groups;
        let table = Table::with_capacity(1 << 12);
        Arena { records: Vec::new(), width, table, parents: Vec::new(), parts: Interner::new() }
    }

    fn len(&self) -> usize {
        self.parents.len()
    }

    fn record(&self, index: usize) -> &[u32] {
        &self.records[index * self.width..(index + 1) * self.width]
    }

    /// Adds the state whose record is `record`, numbered next, unless an equal state is
    /// present.
    fn insert(&mut self, record: &[u32], hash: u64, parent: u32) {
        debug_assert_eq!(record.len(), self.width);
        let Arena { records, width, table, parents, .. } = self;
        let width = *width;
        let at = |index: usize| &records[index * width..(index + 1) * width];
        let slot = match table.find(hash, |index| at(index) == record) {
            Slot::Present(_) => return,
            Slot::Vacant(slot) => slot,
        };
        let index = parents.len();
        assert!(index < STATES_MAX, "the search passed {STATES_MAX} states");
        table.fill(slot, hash, index);
        records.extend_from_slice(record);
        parents.push(parent);
        if table.is_crowded() {
            table.grow(|index| hash_words(&records[index * width..(index + 1) * width]));
        }
    }

    /// Unpacks the state numbered `index` into `state`, whose groups vector has the
    /// configuration's length (every state has as many groups), reusing its buffers.
    #[cfg(test)]
    fn unpack_into(&self, index: usize, state: &mut State) {
        self.unpack_changed_into(index, None, state, |_| ());
    }

    /// Unpacks the state numbered `index` into `state`, which holds the state whose record is
    /// `previous` (or anything, with `None`): only the parts whose numbers differ are unpacked,
    /// and `changed` is told each (0: the globals, `1 + g`: group `g`). States numbered next to
    /// each other are mostly siblings, which share most parts.
    fn unpack_changed_into(
        &self,
        index: usize,
        previous: Option<&[u32]>,
        state: &mut State,
        mut changed: impl FnMut(usize),
    ) {
        let record = self.record(index);
        assert_eq!(state.groups.len() + 1, self.width, "invariant: every state has as many groups");
        let stale = |part: usize| previous.is_none_or(|previous| previous[part] != record[part]);
        if stale(0) {
            let mut globals = self.parts.get(record[0] as usize);
            unpack_globals_into(state, &mut globals);
            assert!(globals.is_empty(), "invariant: packed globals have no trailing bytes");
            changed(0);
        }
        for (g, (group, &number)) in state.groups.iter_mut().zip(&record[1..]).enumerate() {
            if stale(1 + g) {
                unpack_group_into(self.parts.get(number as usize), group);
                changed(1 + g);
            }
        }
    }

    /// The number of the state whose record is `record`, if it is stored.
    #[cfg(test)]
    fn index_of(&self, record: &[u32]) -> Option<usize> {
        let width = self.width;
        let at = |index: usize| &self.records[index * width..(index + 1) * width];
        match self.table.find(hash_words(record), |index| at(index) == record) {
            Slot::Present(index) => Some(index),
            Slot::Vacant(_) => None,
        }
    }

    /// The record `state` has here, if every part of it is stored (otherwise no stored state
    /// equals it).
    fn record_of(&self, state: &State) -> Option<Vec<u32>> {
        let mut bytes = Vec::new();
        let lookup = |bytes: &Vec<u8>| self.parts.lookup(bytes, hash_bytes(bytes));
        pack_globals(state, &mut bytes);
        let mut record = vec![lookup(&bytes)?];
        for group in &state.groups {
            bytes.clear();
            pack_group(group, &mut bytes);
            record.push(lookup(&bytes)?);
        }
        Some(record)
    }
}

fn get_of<'a>(bytes: &'a [u8], starts: &[u64], index: usize) -> &'a [u8] {
    &bytes[starts[index] as usize..starts[index + 1] as usize]
}

enum Slot {
    /// The number stored there.
    Present(usize),
    Vacant(usize),
}

/// Open addressing with linear probing over state numbers. A slot holds `number + 1` in its
/// low 32 bits (0: empty) and the high 32 bits of the state's hash, which rules out almost
/// every byte comparison with a state of a different hash.
/// An empty slot. Not zero: a zeroed table comes from `calloc` as the kernel's shared zero
/// page, and the first write to each page then costs a copy-on-write fault and a TLB flush on
/// every core (about 5 % of a two-thread check, perf); a table filled with this is written
/// once, up front. No entry equals it: an entry's low half is an index + 1 below `STATES_MAX`.
const EMPTY: u64 = u64::MAX;

struct Table {
    slots: Vec<u64>,
    filled: usize,
}

impl Table {
    fn with_capacity(slots: usize) -> Table {
        assert!(slots.is_power_of_two());
        Table { slots: vec![EMPTY; slots], filled: 0 }
    }

    fn find(&self, hash: u64, mut equal: impl FnMut(usize) -> bool) -> Slot {
        let mask = self.slots.len() - 1;
        let tag = hash >> 32;
        let mut slot = hash as usize & mask;
        loop {
            let entry = self.slots[slot];
            if entry == EMPTY {
                return Slot::Vacant(slot);
            }
            let index = (entry & 0xffff_ffff) as usize - 1;
            if entry >> 32 == tag && equal(index) {
                return Slot::Present(index);
            }
            slot = (slot + 1) & mask;
        }
    }

    fn fill(&mut self, slot: usize, hash: u64, index: usize) {
        debug_assert_eq!(self.slots[slot], EMPTY);
        debug_assert!(index < STATES_MAX, "invariant: an entry never equals EMPTY");
        self.slots[slot] = (hash >> 32) << 32 | (index as u64 + 1);
        self.filled += 1;
    }

    /// Past three quarters full, linear probes lengthen quickly (an unsuccessful search
    /// probes about 8.5 slots at 3/4, 50 at 9/10). The 32-bit tags keep the probes cheap. Growing
    /// at half full instead, the SPIN comparison's fenced-3g with symmetry peaked at 153 MB instead of
    /// 92 MB, in the same time (one run each, 2 threads).
    fn is_crowded(&self) -> bool {
        self.filled * 4 > self.slots.len() * 3
    }

    fn grow(&mut self, mut hash_of: impl FnMut(usize) -> u64) {
        let doubled = vec![EMPTY; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        let mask = self.slots.len() - 1;
        for entry in old.into_iter().filter(|&entry| entry != EMPTY) {
            let hash = hash_of((entry & 0xffff_ffff) as usize - 1);
            let mut slot = hash as usize & mask;
            while self.slots[slot] != EMPTY {
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

/// `hash_bytes` of a record's words (little-endian), without copying them.
fn hash_words(words: &[u32]) -> u64 {
    let mut hash = 0x9e37_79b9_7f4a_7c15u64 ^ (words.len() * 4) as u64;
    for pair in words.chunks(2) {
        let word = u64::from(pair[0]) | pair.get(1).map_or(0, |&high| u64::from(high) << 32);
        hash = (hash.rotate_left(23) ^ word).wrapping_mul(0xff51_afd7_ed55_8ccd);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

/// The successors of one chunk of parents, as the merge needs them.
#[derive(Default)]
struct ChunkOut {
    /// The records of the successors whose every part was stored already, back to back.
    records: Vec<u32>,
    /// The encodings of the parts not stored yet, back to back.
    bytes: Vec<u8>,
    successors: Vec<Successor>,
    /// The parts of the successors with a new one, in order (globals, then each group).
    parts: Vec<Part>,
    /// Per property (index into the wanted list) discovered in the chunk: the first parent
    /// that discovered it.
    discoveries: Vec<(usize, u32)>,
}

struct Successor {
    parent: u32,
    /// The record's hash (complete successors only).
    hash: u64,
    /// Whether every part was stored when the successor was made: then the expanding thread
    /// made its record; otherwise the merge interns its new parts, in chunk order.
    complete: bool,
}

#[derive(Clone, Copy)]
enum Part {
    Stored(u32),
    New { length: u32, hash: u64 },
}

/// Searches every state reachable in `model` (or until the deadline), evaluating `properties`.
pub fn bfs(
    model: &ConsumerModel,
    properties: &[Property<ConsumerModel>],
    options: &Options,
    progress: &mut dyn FnMut(Counts),
) -> Found {
    let mut arena = Arena::new(model.config.groups.into());
    let (mut record, mut part_bytes) = (Vec::new(), Vec::new());
    for state in model.init_states() {
        let state = if options.symmetry { state.representative() } else { state };
        let mut out = ChunkOut::default();
        out.push((u32::MAX, &state, &[]), (&state, Made::initial()), &arena, &mut part_bytes);
        merge(&mut arena, &out, &mut record);
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
                merge(&mut arena, &out, &mut record);
                generated += out.successors.len();
            }
            window_start = window_end;
            if last_report.elapsed() >= Duration::from_secs(2) {
                last_report = Instant::now();
                progress(Counts { states: generated, unique_states: arena.len(), depth });
            }
            if options.until_found.is_some() && found.iter().all(Option::is_some) {
                // Every path is already shortest: later windows are no shallower.
                break;
            }
        }
        if !complete {
            break;
        }
        level_start = level_end;
        if let Some(bounds) = options.until_found {
            let all_found = found.iter().all(Option::is_some);
            if all_found || depth >= bounds.depth_max || arena.len() >= bounds.states_max {
                complete = all_found || level_start == arena.len();
                break;
            }
        }
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
    let (mut actions, mut group_bytes) = (Vec::new(), Vec::new());
    // The parent and its successor are unpacked and built in reused states: once their
    // buffers have grown, expanding allocates nothing but the chunk's output.
    let mut state = model.init_states().swap_remove(0);
    let mut next = state.clone();
    let mut previous: Option<usize> = None;
    for index in chunk.clone() {
        // `next` is a copy of the parent before every step: a step changes a group or two, and
        // only what `push` found changed is copied back after it. Between parents, only the
        // parts whose numbers differ are unpacked, and copied into `next`.
        let mut stale = 0u64;
        arena.unpack_changed_into(index, previous.map(|p| arena.record(p)), &mut state, |part| stale |= 1 << part);
        previous = Some(index);
        if stale & 1 != 0 {
            next.clone_globals_from(&state);
        }
        for (g, (group, parent_group)) in next.groups.iter_mut().zip(&state.groups).enumerate() {
            if stale & 1 << (1 + g) != 0 {
                group.restore_from(parent_group);
            }
        }
        debug_assert!(next == state, "invariant: next is a copy of the parent before its steps");
        for &property in wanted {
            if !discovered[property] && is_discovery(model, &properties[property], &state) {
                discovered[property] = true;
                out.discoveries.push((property, index as u32));
            }
        }
        actions.clear();
        model.actions(&state, &mut actions);
        for &action in &actions {
            model.next_state_over(&state, action, &mut next);
            let shared = action.may_change_shared();
            debug_assert!(shared || next.shared_eq(&state), "invariant: {action:?} leaves the shared parts alone");
            debug_assert!(
                (next.groups.iter().zip(&state.groups).enumerate())
                    .all(|(g, (group, parent))| action.groups_changed().includes(g) || group == parent),
                "invariant: {action:?} changes no group but those it says"
            );
            // The parent is a representative: only the groups the action changed can need
            // their owners sorted.
            let origin = if symmetry {
                #[cfg(debug_assertions)]
                let whole = {
                    let mut whole = next.clone();
                    (whole.canonicalize_changed(|_| true), whole)
                };
                let origin = next.canonicalize_changed(|g| action.groups_changed().includes(g));
                #[cfg(debug_assertions)]
                assert!(whole == (origin, next.clone()), "invariant: {action:?}: partial canonicalisation differs");
                origin
            } else {
                GroupOrder::identity()
            };
            let made = Made { shared, changed: action.groups_changed(), origin };
            let unchanged =
                out.push((index as u32, &state, arena.record(index)), (&next, made), arena, &mut group_bytes);
            match (unchanged.globals, shared) {
                (true, _) => (),
                (false, true) => next.clone_globals_from(&state),
                (false, false) => next.copy_counters_from(&state),
            }
            for (i, (group, parent_group)) in next.groups.iter_mut().zip(&state.groups).enumerate() {
                if unchanged.groups & 1 << i == 0 {
                    group.restore_from(parent_group);
                }
            }
        }
    }
    out
}

impl ChunkOut {
    /// Adds `state`, a successor of `parent` (whose state and record are given). A part the
    /// step did not act on has the parent's part number: a step changes one group or two, and
    /// the rest is neither packed nor looked up. The other parts are looked up here, on
    /// the expanding thread (the arena does not change while a window is expanded): nearly
    /// always all are stored already, and then the record is made and hashed here too, which
    /// leaves the merge, the one serial part, a single lookup.
    fn push(
        &mut self,
        (parent, parent_state, parent_record): (u32, &State, &[u32]),
        (state, made): (&State, Made),
        arena: &Arena,
        bytes: &mut Vec<u8>,
    ) -> Unchanged {
        let parts_start = self.parts.len();
        let mut complete = true;
        // The part's number if it is stored already.
        let mut add = |bytes: &[u8], out: &mut ChunkOut| {
            let hash = hash_bytes(bytes);
            let number = arena.parts.lookup(bytes, hash);
            match number {
                Some(number) => out.parts.push(Part::Stored(number)),
                None => {
                    complete = false;
                    out.parts.push(Part::New { length: bytes.len() as u32, hash });
                    out.bytes.extend_from_slice(bytes);
                }
            }
            number
        };
        let mut unchanged = Unchanged { globals: false, groups: 0 };
        // The shared parts are compared only when the step may have changed them (`shared`).
        let globals_eq = state.counters_eq(parent_state) && (!made.shared || state.shared_eq(parent_state));
        if !parent_record.is_empty() && globals_eq {
            unchanged.globals = true;
            self.parts.push(Part::Stored(parent_record[0]));
        } else {
            bytes.clear();
            pack_globals(state, bytes);
            add(bytes, self);
        }
        for (i, group) in state.groups.iter().enumerate() {
            let parent_groups = if parent_record.is_empty() { &[][..] } else { &parent_state.groups[..] };
            let origin = made.origin.0[i];
            // A group the action does not act on is its parent's, wherever the sort put it.
            if !parent_groups.is_empty() && !made.changed.includes(usize::from(origin)) {
                let origin = usize::from(origin);
                debug_assert!(
                    parent_groups[origin] == *group,
                    "invariant: a group the step did not act on is unchanged"
                );
                if origin == i {
                    unchanged.groups |= 1 << i;
                }
                self.parts.push(Part::Stored(parent_record[1 + origin]));
                continue;
            }
            // A group the action acted on is nearly always changed: it is packed and looked up
            // without being compared with the parent's groups first (such a comparison mostly
            // fails, and after it the group was packed anyway). Its number tells whether it is
            // the parent's at the same position.
            bytes.clear();
            pack_group(group, bytes);
            if let Some(number) = add(bytes, self) {
                if parent_record.get(1 + i) == Some(&number) {
                    unchanged.groups |= 1 << i;
                }
            }
        }
        if complete {
            let start = self.records.len();
            for part in self.parts.drain(parts_start..) {
                let Part::Stored(number) = part else { unreachable!("a complete successor has only stored parts") };
                self.records.push(number);
            }
            let hash = hash_words(&self.records[start..]);
            self.successors.push(Successor { parent, hash, complete });
        } else {
            self.successors.push(Successor { parent, hash: 0, complete });
        }
        unchanged
    }
}

/// How a successor was made, as far as `push` needs to know.
#[derive(Clone, Copy)]
struct Made {
    /// The action may have changed the shared parts (`Action::may_change_shared`).
    shared: bool,
    /// The groups the action may change (`Action::groups_changed`), numbered before
    /// canonicalisation: the others are the parent's.
    changed: GroupsChanged,
    /// Where each group of the successor was before canonicalisation.
    origin: GroupOrder,
}

impl Made {
    /// For a state pushed without a parent (an initial state): every part is packed.
    fn initial() -> Made {
        Made { shared: true, changed: GroupsChanged::All, origin: GroupOrder::identity() }
    }

    /// For a successor by `action`, not canonicalised.
    #[cfg(test)]
    fn by(action: Action) -> Made {
        Made { shared: action.may_change_shared(), changed: action.groups_changed(), origin: GroupOrder::identity() }
    }
}

/// Which parts of a successor equal its parent's at the same position (none for an initial
/// state): the expanding thread copies back only the others.
struct Unchanged {
    globals: bool,
    /// Bit `i`: group `i`.
    groups: u64,
}

/// Adds a chunk's successors to the arena, in order (one thread: the numbering is the same for
/// any number of expanding threads).
fn merge(arena: &mut Arena, out: &ChunkOut, record: &mut Vec<u32>) {
    let width = arena.width;
    let (mut records, mut offset, mut parts) = (out.records.chunks_exact(width), 0, out.parts.iter());
    for successor in &out.successors {
        if successor.complete {
            let complete = records.next().expect("invariant: every complete successor has its record");
            arena.insert(complete, successor.hash, successor.parent);
            continue;
        }
        record.clear();
        for _ in 0..width {
            let number = match *parts.next().expect("invariant: every part of a successor is listed") {
                Part::Stored(number) => number,
                Part::New { length, hash } => {
                    let encoded = &out.bytes[offset..offset + length as usize];
                    offset += length as usize;
                    arena.parts.intern(encoded, hash).0
                }
            };
            record.push(number);
        }
        arena.insert(record, hash_words(record), successor.parent);
    }
    assert!(records.next().is_none() && parts.next().is_none(), "invariant: a chunk's output is read whole");
    assert_eq!(offset, out.bytes.len(), "invariant: a chunk's new parts are read whole");
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
    let is_stored = |state: &State, index: u32| {
        arena.record_of(&canonical(state)).is_some_and(|record| record == arena.record(index as usize))
    };
    let mut state = model
        .init_states()
        .into_iter()
        .find(|init| is_stored(init, chain[0]))
        .expect("invariant: a path starts at an initial state");
    let (mut path, mut actions) = (Vec::new(), Vec::new());
    for &child in &chain[1..] {
        actions.clear();
        model.actions(&state, &mut actions);
        let step = actions.iter().find_map(|&action| {
            let next = model.next_state(&state, action)?;
            is_stored(&next, child).then_some((action, next))
        });
        let (action, next) = step.expect("invariant: a stored child is the successor of its parent's class");
        path.push(action);
        state = next;
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::pack::pack_state;
    use crate::strategy::Strategy;
    use std::collections::BTreeMap as Map;

    /// `Action::may_change_shared` and `Action::groups_changed` are what let the checker skip
    /// comparing the log, the producers, the output partitions and the other groups after a
    /// step: an action must change nothing else. Seeded walks to full depth on every row's
    /// default configuration, and on two groups with a second incarnation (pauses).
    #[test]
    fn actions_change_only_what_they_say() {
        const WALKS: usize = 300;
        // A walk ends where no action is enabled, or here (retry-forever loops for ever).
        const STEPS_MAX: usize = 200;
        let paused = |strategy| Config { groups: 2, pauses: 1, ..Config::new(strategy) };
        let configs = Strategy::ALL.into_iter().flat_map(|strategy| [Config::new(strategy), paused(strategy)]);
        let mut walked = 0;
        for config in configs.filter(|config| config.validate().is_ok()) {
            walked += 1;
            let strategy = config.strategy;
            let model = ConsumerModel::new(config);
            let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ strategy as u64;
            let (mut actions, mut local_steps) = (Vec::new(), 0usize);
            for _ in 0..WALKS {
                let mut state = model.init_states().swap_remove(0);
                for _ in 0..STEPS_MAX {
                    actions.clear();
                    model.actions(&state, &mut actions);
                    if actions.is_empty() {
                        break;
                    }
                    // xorshift64: deterministic, no clock.
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let action = actions[(seed % actions.len() as u64) as usize];
                    let next = model.next_state(&state, action).expect("every action has a successor");
                    if !action.may_change_shared() {
                        assert!(next.shared_eq(&state), "{strategy}: {action} changed the shared parts");
                        local_steps += 1;
                    }
                    for (g, (group, parent)) in next.groups.iter().zip(&state.groups).enumerate() {
                        let said = action.groups_changed().includes(g);
                        assert!(
                            said || group == parent,
                            "{strategy}: {action} changed group {g}, which it does not say"
                        );
                    }
                    state = next;
                }
            }
            assert!(local_steps >= WALKS / 2, "{strategy}: only {local_steps} local steps were checked");
        }
        // Every default configuration, and the paused ones the rows accept (73 of 76 today).
        assert!(walked > Strategy::ALL.len() * 3 / 2, "only {walked} configurations were walked");
    }

    /// Collapsing is exact: every reachable state of a row with two groups and a paused
    /// incarnation, pushed with and without its parent (as the search does, and as initial
    /// states are), gets one number per distinct whole encoding, and unpacks to itself.
    #[test]
    fn collapsed_states_are_numbered_once_each_and_unpack_to_themselves() {
        for strategy in [Strategy::AtomicFenced, Strategy::DedupAtomic, Strategy::TxnFenced, Strategy::AcksAll] {
            let config = Config {
                groups: 2,
                owners: 2,
                records: 2,
                crashes: 1,
                rebalances: 1,
                pauses: 1,
                ..Config::new(strategy)
            };
            let config = if config.validate().is_ok() { config } else { Config { groups: 1, ..config } };
            config.validate().unwrap_or_else(|problem| panic!("{strategy}: {problem}"));
            let model = ConsumerModel::new(config);
            let mut arena = Arena::new(model.config.groups.into());
            let (mut record, mut bytes) = (Vec::new(), Vec::new());
            let init = model.init_states().swap_remove(0);
            let mut out = ChunkOut::default();
            out.push((u32::MAX, &init, &[]), (&init, Made::initial()), &arena, &mut bytes);
            merge(&mut arena, &out, &mut record);
            // Whole encodings (independent of the collapse) mapped to the number they got.
            let mut numbers: Map<Vec<u8>, usize> = Map::new();
            let (mut next_index, mut actions, mut encoded) = (0, Vec::new(), Vec::new());
            let (mut parent, mut next) = (init.clone(), init.clone());
            while next_index < arena.len() && arena.len() < 10_000 {
                arena.unpack_into(next_index, &mut parent);
                pack_state(&parent, &mut encoded);
                assert_eq!(numbers.insert(encoded.clone(), next_index), None, "{strategy}: a state stored twice");
                actions.clear();
                model.actions(&parent, &mut actions);
                let mut out = ChunkOut::default();
                for (k, &action) in actions.iter().enumerate() {
                    model.next_state_into(&parent, action, &mut next);
                    // Every other successor without its parent: the slow path must agree.
                    let parent_record = if k % 2 == 0 { arena.record(next_index) } else { &[] };
                    out.push(
                        (next_index as u32, &parent, parent_record),
                        (&next, Made::by(action)),
                        &arena,
                        &mut bytes,
                    );
                }
                merge(&mut arena, &out, &mut record);
                for &action in &actions {
                    let next = model.next_state(&parent, action).expect("every action has a successor");
                    let stored = arena.record_of(&next).expect("a pushed successor's parts are stored");
                    let index = arena.index_of(&stored);
                    let index = index.unwrap_or_else(|| panic!("{strategy}: {action} is not stored"));
                    let mut unpacked = init.clone();
                    arena.unpack_into(index, &mut unpacked);
                    assert_eq!(unpacked, next, "{strategy}: {action} unpacks to another state");
                }
                next_index += 1;
            }
            assert!(numbers.len() > 100, "{strategy}: only {} states reached", numbers.len());
        }
    }
}
