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

use smallvec::SmallVec;
use std::fmt;

/// Items held without a heap allocation: a lease's records in flight and completed offsets,
/// and a store's rows at the default bounds, fit; a longer set spills to the heap. Measured
/// on the default check (2 jobs, one run): 4 took 12.3 s of wall time, 8 took 13.1 s.
pub const INLINE_ITEMS: usize = 4;

/// A set kept as a sorted vector without duplicates.
#[derive(PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SortedSet<T> {
    items: SmallVec<[T; INLINE_ITEMS]>,
}

/// Items are `Copy` (offsets, partition numbers, stages): a clone is one copy of the slice,
/// not an item-by-item `Clone` (the restore after every successor, `search::expand_chunk`).
impl<T: Copy> Clone for SortedSet<T> {
    fn clone(&self) -> Self {
        SortedSet { items: SmallVec::from_slice(&self.items) }
    }
    fn clone_from(&mut self, source: &Self) {
        self.items.clear();
        self.items.extend_from_slice(&source.items);
    }
}

impl<T: Ord> SortedSet<T> {
    pub fn new() -> Self {
        SortedSet { items: SmallVec::new() }
    }

    /// Adds `item`; false when it was present.
    pub fn insert(&mut self, item: T) -> bool {
        match self.items.binary_search(&item) {
            Ok(_) => false,
            Err(at) => {
                self.items.insert(at, item);
                true
            }
        }
    }

    /// Removes `item`; false when it was absent.
    pub fn remove(&mut self, item: &T) -> bool {
        match self.items.binary_search(item) {
            Ok(at) => {
                self.items.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    pub fn contains(&self, item: &T) -> bool {
        self.items.binary_search(item).is_ok()
    }

    pub fn first(&self) -> Option<&T> {
        self.items.first()
    }

    pub fn last(&self) -> Option<&T> {
        self.items.last()
    }

    pub fn pop_first(&mut self) -> Option<T> {
        (!self.items.is_empty()).then(|| self.items.remove(0))
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
        self.items.extend(items);
        assert!(self.items.windows(2).all(|pair| pair[0] < pair[1]), "invariant: a set is refilled in order");
    }
}

impl<T> SortedSet<T> {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The items in ascending order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }
}

impl<'a, T> IntoIterator for &'a SortedSet<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

impl<T: Ord> FromIterator<T> for SortedSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut items: SmallVec<[T; INLINE_ITEMS]> = iter.into_iter().collect();
        items.sort();
        items.dedup();
        SortedSet { items }
    }
}

impl<T: Ord, const N: usize> From<[T; N]> for SortedSet<T> {
    fn from(items: [T; N]) -> Self {
        items.into_iter().collect()
    }
}

/// Printed as a set, as `BTreeSet` is (`{1, 2}`), for the explorer and debug output.
impl<T: fmt::Debug> fmt::Debug for SortedSet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(&self.items).finish()
    }
}

/// A map kept as a vector of (key, value) pairs sorted by key, keys unique.
#[derive(PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SortedMap<K, V> {
    entries: SmallVec<[(K, V); INLINE_ITEMS]>,
}

/// As `SortedSet`'s: one copy of the slice.
impl<K: Copy, V: Copy> Clone for SortedMap<K, V> {
    fn clone(&self) -> Self {
        SortedMap { entries: SmallVec::from_slice(&self.entries) }
    }
    fn clone_from(&mut self, source: &Self) {
        self.entries.clear();
        self.entries.extend_from_slice(&source.entries);
    }
}

impl<K: Ord, V> SortedMap<K, V> {
    pub fn new() -> Self {
        SortedMap { entries: SmallVec::new() }
    }

    fn find(&self, key: &K) -> Result<usize, usize> {
        self.entries.binary_search_by(|(k, _)| k.cmp(key))
    }

    /// Sets `key` to `value`; the value it replaces, if any.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(at) => Some(std::mem::replace(&mut self.entries[at].1, value)),
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
        &mut self.entries[at].1
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.find(key).ok().map(|at| self.entries.remove(at).1)
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.find(key).ok().map(|at| &self.entries[at].1)
    }

    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.find(key).ok().map(|at| &mut self.entries[at].1)
    }

    pub fn contains_key(&self, key: &K) -> bool {
        self.find(key).is_ok()
    }

    pub fn first_key_value(&self) -> Option<(&K, &V)> {
        self.entries.first().map(|(k, v)| (k, v))
    }

    pub fn last_key_value(&self) -> Option<(&K, &V)> {
        self.entries.last().map(|(k, v)| (k, v))
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
        self.entries.extend(entries);
        let ordered = self.entries.windows(2).all(|pair| pair[0].0 < pair[1].0);
        assert!(ordered, "invariant: a map is refilled in key order");
    }
}

impl<K, V> SortedMap<K, V> {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries in ascending key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + ExactSizeIterator {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = (&K, &mut V)> + ExactSizeIterator {
        self.entries.iter_mut().map(|(k, v)| (&*k, v))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + ExactSizeIterator {
        self.entries.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator {
        self.entries.iter().map(|(_, v)| v)
    }

    /// The (key, value) pairs in ascending key order, as one slice (for packing).
    pub fn as_slice(&self) -> &[(K, V)] {
        &self.entries
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for SortedMap<K, V> {
    /// As `BTreeMap`'s: a later value of a repeated key wins.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = SortedMap::new();
        for (key, value) in iter {
            map.insert(key, value);
        }
        map
    }
}

impl<K: Ord, V, const N: usize> From<[(K, V); N]> for SortedMap<K, V> {
    fn from(entries: [(K, V); N]) -> Self {
        entries.into_iter().collect()
    }
}

/// Printed as a map, as `BTreeMap` is (`{1: 2}`).
impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for SortedMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.entries.iter().map(|(k, v)| (k, v))).finish()
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
