//! The state's small sets and maps: sorted vectors with the `BTreeSet`/`BTreeMap` methods the
//! rules use.
//!
//! Why not the B-trees: a state's sets hold a handful of items, and the checker clones a state
//! for every successor it generates. A B-tree allocates its nodes on every clone, and
//! `clone_from` cannot reuse them. Here the items sit inline (up to `INLINE_ITEMS`, beyond
//! which they spill to the heap, so traces with long logs still fit): a clone copies them and
//! allocates nothing, and a successor built in a reused state allocates nothing once the
//! other buffers have grown (`step::next_state_into`). Iteration order, equality and ordering
//! are the B-trees' (sorted items, compared lexicographically), so encodings, representatives
//! and counts do not change.

use std::fmt;

/// Items held without a heap allocation: a lease's records in flight and completed offsets,
/// and a store's rows at the default bounds, fit; a longer set spills to the heap. Measured
/// on the default check (2 jobs, one run): 4 took 12.3 s of wall time, 8 took 13.1 s.
pub const INLINE_ITEMS: usize = 4;

/// A small vector of `Copy` items: inline up to `INLINE_ITEMS`, on the heap beyond. The unused
/// inline slots always hold `T::default()`, so two inline vectors are equal exactly when their
/// whole fixed arrays are (a few word compares, no call), and a clone of inline items is one
/// fixed-size copy. Once spilled, a vector keeps its heap buffer even when it shrinks, so a
/// state reused for successors allocates nothing once its buffers have grown
/// (`model/tests/allocations.rs`); equality and hash then go by the items.
enum Items<T> {
    Inline { len: u8, items: [T; INLINE_ITEMS] },
    Heap(Vec<T>),
}

impl<T: Copy + Default> Default for Items<T> {
    fn default() -> Self {
        Items::Inline { len: 0, items: [T::default(); INLINE_ITEMS] }
    }
}

impl<T: Copy + Default> Clone for Items<T> {
    /// A fresh clone is inline whenever the items fit (a spilled vector that shrank included).
    fn clone(&self) -> Self {
        match self {
            Items::Inline { len, items } => Items::Inline { len: *len, items: *items },
            Items::Heap(items) if items.len() <= INLINE_ITEMS => items.iter().copied().collect(),
            Items::Heap(items) => Items::Heap(items.clone()),
        }
    }

    fn clone_from(&mut self, source: &Self) {
        match (&mut *self, source) {
            (Items::Heap(heap), _) => {
                heap.clear();
                heap.extend_from_slice(source.as_slice());
            }
            (Items::Inline { .. }, Items::Inline { len, items }) => {
                *self = Items::Inline { len: *len, items: *items };
            }
            (Items::Inline { .. }, Items::Heap(heap)) if heap.len() <= INLINE_ITEMS => {
                *self = Items::default();
                heap.iter().for_each(|&item| self.push(item));
            }
            (Items::Inline { .. }, Items::Heap(heap)) => *self = Items::Heap(heap.clone()),
        }
    }
}

impl<T: Copy + Default + PartialEq> PartialEq for Items<T> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Items::Inline { len, items }, Items::Inline { len: other_len, items: other_items }) => {
                len == other_len && items == other_items
            }
            _ => self.as_slice() == other.as_slice(),
        }
    }
}

impl<T: Copy + Default + Eq> Eq for Items<T> {}

/// As a slice's (length, then the items), whichever way they are held: the hash the earlier
/// `SmallVec` had, so stateright's fingerprints (explore, DFS, simulation) are unchanged.
impl<T: Copy + Default + std::hash::Hash> std::hash::Hash for Items<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl<T: Copy + Default> Items<T> {
    fn as_slice(&self) -> &[T] {
        match self {
            Items::Inline { len, items } => &items[..usize::from(*len)],
            Items::Heap(items) => items,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            Items::Inline { len, items } => &mut items[..usize::from(*len)],
            Items::Heap(items) => items,
        }
    }

    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn insert(&mut self, at: usize, item: T) {
        match self {
            Items::Inline { len, items } if usize::from(*len) < INLINE_ITEMS => {
                let end = usize::from(*len);
                assert!(at <= end, "invariant: an insertion within the items");
                items.copy_within(at..end, at + 1);
                items[at] = item;
                *len += 1;
            }
            Items::Inline { items, .. } => {
                let mut spilled = Vec::with_capacity(INLINE_ITEMS * 2);
                spilled.extend_from_slice(items);
                spilled.insert(at, item);
                *self = Items::Heap(spilled);
            }
            Items::Heap(items) => items.insert(at, item),
        }
    }

    fn push(&mut self, item: T) {
        self.insert(self.len(), item);
    }

    fn remove(&mut self, at: usize) -> T {
        match self {
            Items::Inline { len, items } => {
                let end = usize::from(*len);
                assert!(at < end, "invariant: a removal within the items");
                let removed = items[at];
                items.copy_within(at + 1..end, at);
                items[end - 1] = T::default();
                *len -= 1;
                removed
            }
            Items::Heap(items) => items.remove(at),
        }
    }

    fn retain(&mut self, mut keep: impl FnMut(&mut T) -> bool) {
        match self {
            Items::Inline { len, items } => {
                let mut kept = 0;
                for at in 0..usize::from(*len) {
                    let mut item = items[at];
                    if keep(&mut item) {
                        items[kept] = item;
                        kept += 1;
                    }
                }
                items[kept..].fill(T::default());
                *len = kept as u8;
            }
            Items::Heap(items) => items.retain_mut(keep),
        }
    }

    fn clear(&mut self) {
        match self {
            Items::Inline { .. } => *self = Items::default(),
            Items::Heap(items) => items.clear(),
        }
    }
}

impl<T: Copy + Default> FromIterator<T> for Items<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut items = Items::default();
        iter.into_iter().for_each(|item| items.push(item));
        items
    }
}

/// A set kept as a sorted vector without duplicates.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SortedSet<T: Copy + Default> {
    items: Items<T>,
}

impl<T: Copy + Default> Default for SortedSet<T> {
    fn default() -> Self {
        SortedSet { items: Items::default() }
    }
}

/// Lexicographic over the items, as `BTreeSet`'s.
impl<T: Ord + Copy + Default> PartialOrd for SortedSet<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<T: Ord + Copy + Default> Ord for SortedSet<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.items.as_slice().cmp(other.items.as_slice())
    }
}

impl<T: Ord + Copy + Default> SortedSet<T> {
    pub fn new() -> Self {
        SortedSet::default()
    }

    /// Adds `item`; false when it was present.
    pub fn insert(&mut self, item: T) -> bool {
        match self.items.as_slice().binary_search(&item) {
            Ok(_) => false,
            Err(at) => {
                self.items.insert(at, item);
                true
            }
        }
    }

    /// Removes `item`; false when it was absent.
    pub fn remove(&mut self, item: &T) -> bool {
        match self.items.as_slice().binary_search(item) {
            Ok(at) => {
                self.items.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    pub fn contains(&self, item: &T) -> bool {
        self.items.as_slice().binary_search(item).is_ok()
    }

    pub fn first(&self) -> Option<&T> {
        self.items.as_slice().first()
    }

    pub fn last(&self) -> Option<&T> {
        self.items.as_slice().last()
    }

    pub fn pop_first(&mut self) -> Option<T> {
        (!self.is_empty()).then(|| self.items.remove(0))
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.items.retain(|item| keep(item));
    }

    pub fn clear(&mut self) {
        self.items.clear();
    }

    /// Replaces the items by `items`, which must come in strictly ascending order (an
    /// encoding of a set), reusing the buffer.
    pub fn refill(&mut self, items: impl Iterator<Item = T>) {
        self.items.clear();
        items.for_each(|item| self.items.push(item));
        let ordered = self.items.as_slice().windows(2).all(|pair| pair[0] < pair[1]);
        assert!(ordered, "invariant: a set is refilled in order");
    }
}

impl<T: Copy + Default> SortedSet<T> {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.len() == 0
    }

    /// The items in ascending order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.as_slice().iter()
    }
}

impl<'a, T: Copy + Default> IntoIterator for &'a SortedSet<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.as_slice().iter()
    }
}

impl<T: Ord + Copy + Default> FromIterator<T> for SortedSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut items: Items<T> = iter.into_iter().collect();
        items.as_mut_slice().sort();
        let mut previous = None;
        items.retain(|item| previous.replace(*item) != Some(*item));
        SortedSet { items }
    }
}

impl<T: Ord + Copy + Default, const N: usize> From<[T; N]> for SortedSet<T> {
    fn from(items: [T; N]) -> Self {
        items.into_iter().collect()
    }
}

/// Printed as a set, as `BTreeSet` is (`{1, 2}`), for the explorer and debug output.
impl<T: fmt::Debug + Copy + Default> fmt::Debug for SortedSet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.items.as_slice()).finish()
    }
}

/// A map kept as a vector of (key, value) pairs sorted by key, keys unique.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SortedMap<K: Copy + Default, V: Copy + Default> {
    entries: Items<(K, V)>,
}

impl<K: Copy + Default, V: Copy + Default> Default for SortedMap<K, V> {
    fn default() -> Self {
        SortedMap { entries: Items::default() }
    }
}

/// Lexicographic over the entries, as `BTreeMap`'s.
impl<K: Ord + Copy + Default, V: Ord + Copy + Default> PartialOrd for SortedMap<K, V> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<K: Ord + Copy + Default, V: Ord + Copy + Default> Ord for SortedMap<K, V> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.entries.as_slice().cmp(other.entries.as_slice())
    }
}

impl<K: Ord + Copy + Default, V: Copy + Default> SortedMap<K, V> {
    pub fn new() -> Self {
        SortedMap::default()
    }

    fn find(&self, key: &K) -> Result<usize, usize> {
        self.entries.as_slice().binary_search_by(|(k, _)| k.cmp(key))
    }

    /// Sets `key` to `value`; the value it replaces, if any.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(at) => Some(std::mem::replace(&mut self.entries.as_mut_slice()[at].1, value)),
            Err(at) => {
                self.entries.insert(at, (key, value));
                None
            }
        }
    }

    /// The value of `key`, inserted as `default` when absent (`BTreeMap`'s
    /// `entry(key).or_insert(default)`).
    pub fn get_or_insert(&mut self, key: K, default: V) -> &mut V {
        let at = match self.find(&key) {
            Ok(at) => at,
            Err(at) => {
                self.entries.insert(at, (key, default));
                at
            }
        };
        &mut self.entries.as_mut_slice()[at].1
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.find(key).ok().map(|at| self.entries.remove(at).1)
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.find(key).ok().map(|at| &self.entries.as_slice()[at].1)
    }

    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.find(key).ok().map(|at| &mut self.entries.as_mut_slice()[at].1)
    }

    pub fn contains_key(&self, key: &K) -> bool {
        self.find(key).is_ok()
    }

    pub fn first_key_value(&self) -> Option<(&K, &V)> {
        self.entries.as_slice().first().map(|(k, v)| (k, v))
    }

    pub fn last_key_value(&self) -> Option<(&K, &V)> {
        self.entries.as_slice().last().map(|(k, v)| (k, v))
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.entries.retain(|(k, v)| keep(k, v));
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Replaces the entries by `entries`, which must come in strictly ascending key order (an
    /// encoding of a map), reusing the buffer.
    pub fn refill(&mut self, entries: impl Iterator<Item = (K, V)>) {
        self.entries.clear();
        entries.for_each(|entry| self.entries.push(entry));
        let ordered = self.entries.as_slice().windows(2).all(|pair| pair[0].0 < pair[1].0);
        assert!(ordered, "invariant: a map is refilled in key order");
    }
}

impl<K: Copy + Default, V: Copy + Default> SortedMap<K, V> {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.len() == 0
    }

    /// The entries in ascending key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + ExactSizeIterator {
        self.entries.as_slice().iter().map(|(k, v)| (k, v))
    }

    pub fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = (&K, &mut V)> + ExactSizeIterator {
        self.entries.as_mut_slice().iter_mut().map(|(k, v)| (&*k, v))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + ExactSizeIterator {
        self.entries.as_slice().iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator {
        self.entries.as_slice().iter().map(|(_, v)| v)
    }

    /// The (key, value) pairs in ascending key order, as one slice (for packing).
    pub fn as_slice(&self) -> &[(K, V)] {
        self.entries.as_slice()
    }
}

impl<K: Ord + Copy + Default, V: Copy + Default> FromIterator<(K, V)> for SortedMap<K, V> {
    /// As `BTreeMap`'s: a later value of a repeated key wins.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = SortedMap::new();
        for (key, value) in iter {
            map.insert(key, value);
        }
        map
    }
}

impl<K: Ord + Copy + Default, V: Copy + Default, const N: usize> From<[(K, V); N]> for SortedMap<K, V> {
    fn from(entries: [(K, V); N]) -> Self {
        entries.into_iter().collect()
    }
}

/// Printed as a map, as `BTreeMap` is (`{1: 2}`).
impl<K: fmt::Debug + Copy + Default, V: fmt::Debug + Copy + Default> fmt::Debug for SortedMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.entries.as_slice().iter().map(|(k, v)| (k, v))).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// The same operations on a B-tree and a sorted vector leave the same items in the same
    /// order, with the same answers, comparisons and debug output.
    #[test]
    fn sorted_collections_behave_as_the_b_trees_do() {
        let operations: [(bool, u8, u8); 12] =
            [(true, 3, 0), (true, 1, 1), (true, 3, 2), (false, 2, 0), (true, 2, 3), (false, 3, 0)]
                .into_iter()
                .chain([(true, 9, 4), (true, 0, 5), (false, 0, 0), (true, 7, 6), (false, 9, 0), (true, 1, 7)])
                .collect::<Vec<_>>()
                .try_into()
                .expect("twelve operations");
        let (mut tree_set, mut set) = (BTreeSet::new(), SortedSet::new());
        let (mut tree_map, mut map) = (BTreeMap::new(), SortedMap::new());
        let (mut earlier_set, mut earlier_tree_set) = (set.clone(), tree_set.clone());
        for (insert, key, value) in operations {
            if insert {
                assert_eq!(set.insert(key), tree_set.insert(key), "insert {key}");
                assert_eq!(map.insert(key, value), tree_map.insert(key, value), "insert {key}");
            } else {
                assert_eq!(set.remove(&key), tree_set.remove(&key), "remove {key}");
                assert_eq!(map.remove(&key), tree_map.remove(&key), "remove {key}");
            }
            assert!(set.iter().eq(tree_set.iter()));
            assert!(map.iter().eq(tree_map.iter()));
            assert_eq!(format!("{set:?} {map:?}"), format!("{tree_set:?} {tree_map:?}"));
            assert_eq!(set.cmp(&earlier_set), tree_set.cmp(&earlier_tree_set), "ordering after {key}");
            assert_eq!(map.first_key_value(), tree_map.first_key_value());
            assert_eq!(set.last(), tree_set.last());
            earlier_set.clone_from(&set);
            earlier_tree_set.clone_from(&tree_set);
        }
        assert_eq!(set.pop_first(), tree_set.pop_first());
        assert!(set.iter().eq(tree_set.iter()));
    }
}
