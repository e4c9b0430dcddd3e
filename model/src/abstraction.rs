//! The abstraction behind `any` (spec.md §7.1): with a crash, rebalance or pause budget lifted,
//! every successor is mapped to its abstract state, so that the reachable graph is finite and a
//! verdict covers every number of those faults at the given records, groups and owners.
//!
//! α, applied after every step (`step::apply`), keeps everything a rule or a property reads
//! and forgets only what none can tell apart:
//! - the lifted faults' counters are dropped (set to 0): with the budget lifted, no rule reads
//!   them;
//! - each partition's epochs (the row's, every lease's) are renamed to "stale" (1) and
//!   "current" (the row's: 1, or 2 when a lease is stale): a rule compares an epoch only with
//!   the row's, for equality, and a new epoch is the row's plus one, above every lease's, so a
//!   stale lease stays stale and no rule tells two stale epochs apart (`merge_stale_epochs`);
//! - each record's application count is saturated at `APPLIED_SATURATION`: the properties
//!   read a count only as 0, 1 or "more than 1" (`no-duplicate`, `no-silent-skip`,
//!   `contiguous-prefix`, `latest-wins`, the replay witness);
//! - the total is kept as its difference from the group's own applications (`group-isolation`
//!   reads nothing else of it): after saturating, the total is recomputed as the saturated
//!   applications times the delta plus that difference, and the lost applications
//!   (`lost_sum`, which only enters that sum) are folded into it and dropped.
//!
//! Why this is exact (each step commutes with α, and α keeps every property's value) is
//! argued in spec.md §7.1 and checked state by state in `model/tests/abstraction.rs`.

use crate::config::Config;
use crate::state::{Group, State};
use crate::strategy::{EffectKind, Sequence, Strategy};

/// Application counts are kept up to this value: "applied more than once" is all any
/// property or rule reads past 1.
pub const APPLIED_SATURATION: u8 = 2;

/// Whether `any` may lift a budget of `strategy`, or why not (one line, for the refusal).
pub fn covers(strategy: Strategy) -> Result<(), &'static str> {
    match strategy.rules().sequence {
        Sequence::Transactional => {
            Err("its output partitions keep producer epochs and order them across takes (a transaction of a lower \
             epoch is aborted), so its epochs cannot be renamed")
        }
        Sequence::CommitThenEffect
        | Sequence::EffectThenCommit
        | Sequence::Effect
        | Sequence::EffectRecordCommit
        | Sequence::Stamped
        | Sequence::DedupedThenCommit
        | Sequence::Atomic
        | Sequence::AtomicThenEmail
        | Sequence::EmailThenAtomic { .. }
        | Sequence::AtomicThenIndex
        | Sequence::AtomicWithOutbox => Ok(()),
    }
}

/// Replaces `state` by its abstract state under `config` (which lifts at least one budget).
/// Idempotent; allocation-free (the checker's hot path).
pub fn abstract_in_place(config: &Config, state: &mut State) {
    debug_assert!(config.lifted.any(), "invariant: only a configuration with a lifted budget is abstracted");
    if config.lifted.crashes {
        state.crashes_used = 0;
    }
    if config.lifted.rebalances {
        state.rebalances_used = 0;
    }
    if config.lifted.pauses {
        state.pauses_used = 0;
    }
    let adds = config.strategy.rules().effect == EffectKind::Add;
    for group in &mut state.groups {
        merge_stale_epochs(group);
        saturate(config.delta, adds, group);
    }
}

/// Renames each partition's epochs to two values at most: every lease whose epoch differs from
/// the row's (stale) gets 1, the row and the leases that hold its epoch (current) get 1 when no
/// lease is stale, else 2. Exact: outside the transactional rows (`covers`) a rule compares an
/// epoch only with the row's, for equality, and a new epoch is the row's plus one, so a stale
/// lease never becomes current again and two stale epochs are never told apart.
fn merge_stale_epochs(group: &mut Group) {
    let Group { store, owners, paused, .. } = group;
    for (p, row) in store.partitions.iter_mut().enumerate() {
        let leases = || owners.iter().chain(paused.iter()).filter_map(move |slot| slot.leases[p].as_ref());
        assert!(leases().all(|lease| lease.epoch <= row.epoch), "invariant: no lease's epoch is above its row's");
        let stale_exists = leases().any(|lease| lease.epoch != row.epoch);
        let current = 1 + u8::from(stale_exists);
        for slot in owners.iter_mut().chain(paused.iter_mut()) {
            if let Some(lease) = &mut slot.leases[p] {
                lease.epoch = if lease.epoch == row.epoch { current } else { 1 };
            }
        }
        row.epoch = current;
    }
}

/// Saturates the application counts and recomputes the total from what is kept.
fn saturate(delta: i64, adds: bool, group: &mut Group) {
    let over: i64 =
        group.ghost.applied.iter().flatten().map(|&count| i64::from(count.saturating_sub(APPLIED_SATURATION))).sum();
    if over == 0 && group.ghost.lost_sum == 0 {
        return;
    }
    for count in group.ghost.applied.iter_mut().flatten() {
        *count = (*count).min(APPLIED_SATURATION);
    }
    if adds {
        // total - delta * applications - lost_sum is what group-isolation compares with 0; it
        // is kept, and the total follows the counts that are kept. (Bounded: a step adds one
        // application, and the state before it was abstract.)
        let forgotten = delta.checked_mul(over).and_then(|sum| sum.checked_add(group.ghost.lost_sum));
        let forgotten = forgotten.unwrap_or_else(|| panic!("invariant: the forgotten applications fit i64"));
        group.store.total = group.store.total.checked_sub(forgotten).unwrap_or_else(|| {
            panic!("invariant: the abstract total fits i64 (it differs from the kept applications by what a step adds)")
        });
    }
    group.ghost.lost_sum = 0;
}
