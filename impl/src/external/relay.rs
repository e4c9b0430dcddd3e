//! The outbox's relay (spec.md §3.4, the model's `relay {group}`): a process apart from the
//! owners that drains a group's outbox into the index, one row per step. A step copies the
//! group's first outbox row to the index (an idempotent insert, its own transaction), then
//! deletes the row from the outbox (the store's transaction). A crash between the two leaves
//! the row in the outbox and the fact in the index: the next step copies it again, which
//! changes nothing, and deletes it. So once the outbox is empty the index holds every fact the
//! store holds, whatever crashed where.

use super::{ExternalError, Index};
use crate::store::{Fact, InsideHook, Store};

pub struct Relay {
    store: Store,
    index: Index,
}

impl Relay {
    pub fn new(store: Store, index: Index) -> Relay {
        Relay { store, index }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    /// One relay step for `group`: the first outbox row (by partition, then offset: per
    /// partition the oldest) copied to the index and deleted. `None` when the group's outbox is
    /// empty.
    pub fn relay_one(&mut self, group: &str) -> Result<Option<Fact>, ExternalError> {
        self.relay_one_with(group, &mut || {})
    }

    /// `relay_one` with a hook between the copy and the delete (the relay's crash point, the
    /// hidden `consumer relay --crash-after-copy`).
    pub fn relay_one_with(&mut self, group: &str, after_copy: InsideHook<'_>) -> Result<Option<Fact>, ExternalError> {
        let Some(fact) = self.store.first_outbox(group)? else { return Ok(None) };
        self.index.write(std::slice::from_ref(&fact), &mut || {})?;
        after_copy();
        // Another relay may have deleted it meanwhile: the copy was idempotent either way.
        self.store.delete_outbox(&fact)?;
        Ok(Some(fact))
    }
}
