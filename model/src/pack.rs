//! An exact, compact byte encoding of `State`, for the checker's visited set (`search.rs`).
//!
//! Exact: `unpack(pack(s)) == s` for every state, so two states share an encoding only when
//! they are equal, and a search over encodings loses nothing (no hash compaction, no bitstate).
//! Compact: small integers take one byte (LEB128 varints, zigzag for signed ones), collections
//! their length and elements, so a state of the default bounds takes a few dozen bytes instead
//! of the ~1.5 KB of heap a `State` holds.
//!
//! Every struct is packed through a destructuring `let` without `..`: a field added to the
//! state is a compile error here until it is packed.

use crate::collections::{SortedMap, SortedSet};
use crate::state::{Ghost, Group, Lease, OutEntry, Owner, PartitionRow, ProducerState, Replicas, Stage, State, Store};

/// A value with an exact byte encoding.
pub trait Pack: Sized {
    fn pack(&self, out: &mut Vec<u8>);
    /// Reads one value from the front of `input` and advances it. `input` must come from
    /// `pack` (the checker never unpacks anything else): malformed bytes are a bug and panic.
    fn unpack(input: &mut &[u8]) -> Self;
    /// `unpack` into an existing value, reusing its buffers (the checker unpacks every state
    /// it expands into one reused state).
    fn unpack_into(&mut self, input: &mut &[u8]) {
        *self = Self::unpack(input);
    }
}

/// Packs a state into `out` (cleared first).
pub fn pack_state(state: &State, out: &mut Vec<u8>) {
    out.clear();
    state.pack(out);
}

/// Unpacks a whole encoding made by `pack_state` into `state`, reusing its buffers.
pub fn unpack_state_into(mut bytes: &[u8], state: &mut State) {
    state.unpack_into(&mut bytes);
    assert!(bytes.is_empty(), "invariant: a packed state has no trailing bytes");
}

/// Unpacks a whole encoding made by `pack_state`.
pub fn unpack_state(mut bytes: &[u8]) -> State {
    let state = State::unpack(&mut bytes);
    assert!(bytes.is_empty(), "invariant: a packed state has no trailing bytes");
    state
}

fn take_byte(input: &mut &[u8]) -> u8 {
    let (&byte, rest) = input.split_first().expect("invariant: a packed value is complete");
    *input = rest;
    byte
}

/// Packs every field of `state` but its groups (which `search.rs` stores apart, once per
/// distinct group), in declaration order. The destructuring has no `..`.
pub fn pack_globals(state: &State, out: &mut Vec<u8>) {
    let State {
        log,
        sends,
        producer,
        ack_losses_used,
        log_start,
        retentions_used,
        groups: _,
        crashes_used,
        rebalances_used,
        pauses_used,
        log_losses_used,
        leader_failures_used,
        isr_shrinks_used,
        replicas,
        output,
        reader,
        damaged,
        witnessed,
    } = state;
    log.pack(out);
    sends.pack(out);
    producer.pack(out);
    ack_losses_used.pack(out);
    log_start.pack(out);
    retentions_used.pack(out);
    crashes_used.pack(out);
    rebalances_used.pack(out);
    pauses_used.pack(out);
    log_losses_used.pack(out);
    leader_failures_used.pack(out);
    isr_shrinks_used.pack(out);
    replicas.pack(out);
    output.pack(out);
    reader.pack(out);
    damaged.pack(out);
    witnessed.pack(out);
}

/// Reads what `pack_globals` wrote into `state` (its groups untouched), reusing its buffers.
pub fn unpack_globals_into(state: &mut State, input: &mut &[u8]) {
    let State {
        log,
        sends,
        producer,
        ack_losses_used,
        log_start,
        retentions_used,
        groups: _,
        crashes_used,
        rebalances_used,
        pauses_used,
        log_losses_used,
        leader_failures_used,
        isr_shrinks_used,
        replicas,
        output,
        reader,
        damaged,
        witnessed,
    } = state;
    log.unpack_into(input);
    sends.unpack_into(input);
    producer.unpack_into(input);
    ack_losses_used.unpack_into(input);
    log_start.unpack_into(input);
    retentions_used.unpack_into(input);
    crashes_used.unpack_into(input);
    rebalances_used.unpack_into(input);
    pauses_used.unpack_into(input);
    log_losses_used.unpack_into(input);
    leader_failures_used.unpack_into(input);
    isr_shrinks_used.unpack_into(input);
    replicas.unpack_into(input);
    output.unpack_into(input);
    reader.unpack_into(input);
    damaged.unpack_into(input);
    witnessed.unpack_into(input);
}

/// Packs one group (`search.rs` numbers the distinct ones).
pub fn pack_group(group: &Group, out: &mut Vec<u8>) {
    group.pack(out);
}

/// Reads a whole encoding made by `pack_group` into `group`, reusing its buffers.
pub fn unpack_group_into(mut bytes: &[u8], group: &mut Group) {
    group.unpack_into(&mut bytes);
    assert!(bytes.is_empty(), "invariant: a packed group has no trailing bytes");
}

pub fn pack_varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

pub fn unpack_varint(input: &mut &[u8]) -> u64 {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = take_byte(input);
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return value;
        }
    }
    panic!("invariant: a packed varint has at most ten bytes")
}

impl Pack for u8 {
    fn pack(&self, out: &mut Vec<u8>) {
        out.push(*self);
    }
    fn unpack(input: &mut &[u8]) -> Self {
        take_byte(input)
    }
}

impl Pack for u16 {
    fn pack(&self, out: &mut Vec<u8>) {
        pack_varint(u64::from(*self), out);
    }
    fn unpack(input: &mut &[u8]) -> Self {
        u16::try_from(unpack_varint(input)).expect("invariant: a packed u16 fits")
    }
}

impl Pack for u32 {
    fn pack(&self, out: &mut Vec<u8>) {
        pack_varint(u64::from(*self), out);
    }
    fn unpack(input: &mut &[u8]) -> Self {
        u32::try_from(unpack_varint(input)).expect("invariant: a packed u32 fits")
    }
}

impl Pack for i64 {
    /// Zigzag: small magnitudes of either sign take one byte.
    fn pack(&self, out: &mut Vec<u8>) {
        pack_varint(((*self << 1) ^ (*self >> 63)) as u64, out);
    }
    fn unpack(input: &mut &[u8]) -> Self {
        let zigzag = unpack_varint(input);
        ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64)
    }
}

impl Pack for bool {
    fn pack(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    fn unpack(input: &mut &[u8]) -> Self {
        match take_byte(input) {
            0 => false,
            1 => true,
            other => panic!("invariant: a packed bool is 0 or 1, not {other}"),
        }
    }
}

impl<T: Pack> Pack for Option<T> {
    fn pack(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(value) => {
                out.push(1);
                value.pack(out);
            }
        }
    }
    fn unpack(input: &mut &[u8]) -> Self {
        bool::unpack(input).then(|| T::unpack(input))
    }
    fn unpack_into(&mut self, input: &mut &[u8]) {
        match (bool::unpack(input), self.as_mut()) {
            (true, Some(value)) => value.unpack_into(input),
            (true, None) => *self = Some(T::unpack(input)),
            (false, _) => *self = None,
        }
    }
}

fn pack_length(length: usize, out: &mut Vec<u8>) {
    pack_varint(length as u64, out);
}

fn unpack_length(input: &mut &[u8]) -> usize {
    usize::try_from(unpack_varint(input)).expect("invariant: a packed length fits")
}

/// A collection: its length, then its items in iteration order.
fn pack_items<'a, T: Pack + 'a>(items: impl ExactSizeIterator<Item = &'a T>, out: &mut Vec<u8>) {
    pack_length(items.len(), out);
    items.for_each(|item| item.pack(out));
}

fn unpack_items<T: Pack, C: FromIterator<T>>(input: &mut &[u8]) -> C {
    let length = unpack_length(input);
    (0..length).map(|_| T::unpack(input)).collect()
}

impl<T: Pack> Pack for Vec<T> {
    fn pack(&self, out: &mut Vec<u8>) {
        pack_items(self.iter(), out);
    }
    fn unpack(input: &mut &[u8]) -> Self {
        unpack_items(input)
    }
    fn unpack_into(&mut self, input: &mut &[u8]) {
        let length = unpack_length(input);
        self.truncate(length);
        self.iter_mut().for_each(|item| item.unpack_into(input));
        while self.len() < length {
            self.push(T::unpack(input));
        }
    }
}

impl<T: Pack> Pack for [T; 2] {
    fn pack(&self, out: &mut Vec<u8>) {
        self.iter().for_each(|value| value.pack(out));
    }
    fn unpack(input: &mut &[u8]) -> Self {
        [T::unpack(input), T::unpack(input)]
    }
    fn unpack_into(&mut self, input: &mut &[u8]) {
        self.iter_mut().for_each(|value| value.unpack_into(input));
    }
}

impl<T: Pack + Ord + Copy + Default> Pack for SortedSet<T> {
    fn pack(&self, out: &mut Vec<u8>) {
        pack_items(self.iter(), out);
    }
    fn unpack(input: &mut &[u8]) -> Self {
        unpack_items(input)
    }
    fn unpack_into(&mut self, input: &mut &[u8]) {
        let length = unpack_length(input);
        self.refill((0..length).map(|_| T::unpack(input)));
    }
}

impl<K: Pack + Ord + Copy + Default, V: Pack + Copy + Default> Pack for SortedMap<K, V> {
    fn pack(&self, out: &mut Vec<u8>) {
        pack_length(self.len(), out);
        self.iter().for_each(|(key, value)| {
            key.pack(out);
            value.pack(out);
        });
    }
    fn unpack(input: &mut &[u8]) -> Self {
        unpack_items::<(K, V), _>(input)
    }
    fn unpack_into(&mut self, input: &mut &[u8]) {
        let length = unpack_length(input);
        self.refill((0..length).map(|_| <(K, V)>::unpack(input)));
    }
}

impl<A: Pack, B: Pack> Pack for (A, B) {
    fn pack(&self, out: &mut Vec<u8>) {
        self.0.pack(out);
        self.1.pack(out);
    }
    fn unpack(input: &mut &[u8]) -> Self {
        (A::unpack(input), B::unpack(input))
    }
}

impl<A: Pack, B: Pack, C: Pack> Pack for (A, B, C) {
    fn pack(&self, out: &mut Vec<u8>) {
        self.0.pack(out);
        self.1.pack(out);
        self.2.pack(out);
    }
    fn unpack(input: &mut &[u8]) -> Self {
        (A::unpack(input), B::unpack(input), C::unpack(input))
    }
}

/// Packs and unpacks a struct field by field, in declaration order. The destructuring has no
/// `..`, so a new field fails to compile here until it is listed.
macro_rules! pack_struct {
    ($type:ident { $($field:ident),* $(,)? }) => {
        impl Pack for $type {
            fn pack(&self, out: &mut Vec<u8>) {
                let $type { $($field),* } = self;
                $($field.pack(out);)*
            }
            fn unpack(input: &mut &[u8]) -> Self {
                $(let $field = Pack::unpack(input);)*
                $type { $($field),* }
            }
            fn unpack_into(&mut self, input: &mut &[u8]) {
                let $type { $($field),* } = self;
                $($field.unpack_into(input);)*
            }
        }
    };
}

pack_struct!(State {
    log,
    sends,
    producer,
    ack_losses_used,
    log_start,
    retentions_used,
    groups,
    crashes_used,
    rebalances_used,
    pauses_used,
    log_losses_used,
    leader_failures_used,
    isr_shrinks_used,
    replicas,
    output,
    reader,
    damaged,
    witnessed,
});
pack_struct!(Replicas { logs, leader, hw, isr, alive, in_flight, acked });
pack_struct!(ProducerState { sent, unacked });
pack_struct!(Group { store, inbox, index, owners, paused, forming, ghost });
pack_struct!(Store { total, partitions, processed, attempts, dead_letters, resets, value, facts, outbox });
pack_struct!(PartitionRow { next_offset, epoch, owner, stamp });
pack_struct!(Owner { alive, leases, incarnation_of });
pack_struct!(Lease { epoch, position, checkpoint, records, done });
pack_struct!(Ghost {
    applied,
    high_water,
    stale_write_landed,
    foreign_write,
    failures,
    lost_sum,
    unjustified_refusal,
    read_truncated,
    read_aborted,
});

impl Pack for Stage {
    fn pack(&self, out: &mut Vec<u8>) {
        out.push(match self {
            Stage::Fetched => 0,
            Stage::Committed => 1,
            Stage::EffectApplied => 2,
            Stage::Recorded => 3,
            Stage::Exhausted => 4,
            Stage::Produced => 5,
            Stage::Stored => 6,
            Stage::Emailed => 7,
        });
    }
    fn unpack(input: &mut &[u8]) -> Self {
        match take_byte(input) {
            0 => Stage::Fetched,
            1 => Stage::Committed,
            2 => Stage::EffectApplied,
            3 => Stage::Recorded,
            4 => Stage::Exhausted,
            5 => Stage::Produced,
            6 => Stage::Stored,
            7 => Stage::Emailed,
            other => panic!("invariant: no stage is packed as {other}"),
        }
    }
}

impl Pack for OutEntry {
    fn pack(&self, out: &mut Vec<u8>) {
        match *self {
            OutEntry::Data { input, epoch } => out.extend([0, input, epoch]),
            OutEntry::Marker { input, epoch, commit } => out.extend([1, input, epoch, u8::from(commit)]),
        }
    }
    fn unpack(input: &mut &[u8]) -> Self {
        match take_byte(input) {
            0 => OutEntry::Data { input: u8::unpack(input), epoch: u8::unpack(input) },
            1 => OutEntry::Marker { input: u8::unpack(input), epoch: u8::unpack(input), commit: bool::unpack(input) },
            other => panic!("invariant: no output entry is packed with tag {other}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_round_trip_at_their_edges() {
        for value in [0i64, 1, -1, 63, -64, 64, -65, i64::MAX, i64::MIN, 1_000_000_000_000] {
            let mut out = Vec::new();
            value.pack(&mut out);
            assert_eq!(i64::unpack(&mut out.as_slice()), value);
        }
        for (value, bytes) in [(0u32, 1), (127, 1), (128, 2), (16_383, 2), (16_384, 3), (u32::MAX, 5)] {
            let mut out = Vec::new();
            value.pack(&mut out);
            assert_eq!(out.len(), bytes, "{value}");
            assert_eq!(u32::unpack(&mut out.as_slice()), value);
        }
    }
}
