//! The store: per group the effect, per (group, partition) progress, epoch and stamp, the
//! processed-id table, the failed attempts and dead letters of poison records, the recorded
//! resets past retained records, the transactions of the transactional strategies, and the
//! dual-write rows' facts and outbox. Two backends: SQLite (`sqlite::SqliteStore`, the default),
//! where every write is one explicit `BEGIN IMMEDIATE` transaction, and PostgreSQL
//! (`postgres::PgStore`); `Store` dispatches to either.
//!
//! Files, a DAG: `types.rs` (what both backends share) <- `sqlite.rs`, `postgres.rs` <- this
//! file (the front: `Location` and `Store`).

pub mod postgres;
pub mod sqlite;
mod types;

pub use self::postgres::PgStore;
pub use sqlite::SqliteStore;
pub use types::{
    check_name, set_value, AtomicAlso, Claimed, DeadLetter, Fact, FailurePolicy, Guard, InsideHook, Item, Journal,
    PoisonAttempt, ProgressRow, Reset, Rewind, StoreError, StoreOptions, Synchronous, TxnRow, TxnState, TxnTable,
    NAME_BYTES_MAX, PARTITIONS_MAX, SCHEMA_VERSION,
};

use crate::log::LogIdentity;
use crate::strategy::{DedupKey, EffectKind};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Where a store lives: an SQLite file (the default, `store.db` in the data directory) or a
/// PostgreSQL database named by a `postgres://` or `postgresql://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Location {
    /// A `--store` argument: a PostgreSQL URL, or else the path of an SQLite file.
    pub fn parse(text: &str) -> Location {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            Location::Postgres(text.to_string())
        } else {
            Location::Sqlite(PathBuf::from(text))
        }
    }
}

/// The store of either backend.
///
/// An enum rather than a trait object: the set of backends is closed (two), `Owner`, the CLI
/// and the conformance harness name one concrete type `Store`, nothing is boxed, and each
/// method is a two-armed `match` that the compiler checks for exhaustiveness.
/// `Store::create` and `Store::open` take an SQLite path, `create_at` / `open_at` a
/// `Location`.
pub enum Store {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

/// Runs the same call on whichever backend the store is.
macro_rules! dispatch {
    ($store:expr, $backend:ident => $call:expr) => {
        match $store {
            Store::Sqlite($backend) => $call,
            Store::Postgres($backend) => $call,
        }
    };
}

impl Store {
    /// Creates an SQLite store for the log `log` (see `SqliteStore::create`).
    pub fn create(path: &Path, log: LogIdentity, options: StoreOptions) -> Result<Store, StoreError> {
        SqliteStore::create(path, log, options).map(Store::Sqlite)
    }

    /// Opens an SQLite store (see `SqliteStore::open`).
    pub fn open(path: &Path, options: StoreOptions) -> Result<Store, StoreError> {
        SqliteStore::open(path, options).map(Store::Sqlite)
    }

    /// Creates a store of either backend for the log `log`; PostgreSQL ignores the journal mode.
    pub fn create_at(location: &Location, log: LogIdentity, options: StoreOptions) -> Result<Store, StoreError> {
        match location {
            Location::Sqlite(path) => Store::create(path, log, options),
            Location::Postgres(url) => PgStore::create(url, log, options).map(Store::Postgres),
        }
    }

    /// `init`'s check before it creates anything (the log first, the store last): refuses a
    /// location that holds a store already, as `create_at` would, without writing.
    pub fn check_absent(location: &Location, options: StoreOptions) -> Result<(), StoreError> {
        match location {
            Location::Sqlite(path) => SqliteStore::check_absent(path, options),
            Location::Postgres(url) => PgStore::check_absent(url, options),
        }
    }

    /// Opens a store of either backend.
    pub fn open_at(location: &Location, options: StoreOptions) -> Result<Store, StoreError> {
        match location {
            Location::Sqlite(path) => Store::open(path, options),
            Location::Postgres(url) => PgStore::open(url, options).map(Store::Postgres),
        }
    }

    /// One line naming the store: the SQLite path and journal mode, or the PostgreSQL target.
    pub fn describe(&self) -> String {
        match self {
            Store::Sqlite(store) => format!("{} (journal {:?})", store.path().display(), store.journal()),
            Store::Postgres(store) => format!("{} (postgres)", store.target()),
        }
    }

    pub fn partitions(&self) -> u32 {
        dispatch!(self, s => s.partitions())
    }

    /// The log this store was initialised with: every open of the log checks it.
    pub fn log_identity(&self) -> LogIdentity {
        dispatch!(self, s => s.log_identity())
    }

    pub fn rewind_to_log_end(&mut self, group: &str, partition: u32, end: u64) -> Result<Option<Rewind>, StoreError> {
        dispatch!(self, s => s.rewind_to_log_end(group, partition, end))
    }

    /// `consumer repair --gap`: the skip of `gap` recorded for `group` (see
    /// `SqliteStore::record_gap`).
    pub fn record_gap(&mut self, group: &str, partition: u32, gap: Range<u64>) -> Result<Option<Reset>, StoreError> {
        dispatch!(self, s => s.record_gap(group, partition, gap))
    }

    pub fn ensure_group(&mut self, group: &str, initial_owner: &str) -> Result<(), StoreError> {
        dispatch!(self, s => s.ensure_group(group, initial_owner))
    }

    pub fn groups(&self) -> Result<Vec<String>, StoreError> {
        dispatch!(self, s => s.groups())
    }

    pub fn total(&self, group: &str) -> Result<i64, StoreError> {
        dispatch!(self, s => s.total(group))
    }

    pub fn progress(&self, group: &str, partition: u32) -> Result<ProgressRow, StoreError> {
        dispatch!(self, s => s.progress(group, partition))
    }

    pub fn processed(&self, group: &str) -> Result<Vec<(u32, u64)>, StoreError> {
        dispatch!(self, s => s.processed(group))
    }

    /// The set strategies' value of a group (spec.md §3.4): `None` before any set.
    pub fn value(&self, group: &str) -> Result<Option<i64>, StoreError> {
        dispatch!(self, s => s.value(group))
    }

    /// The facts the dual-write rows recorded with their effects, sorted; only `group`'s if
    /// given.
    pub fn facts(&self, group: Option<&str>) -> Result<Vec<Fact>, StoreError> {
        dispatch!(self, s => s.facts(group, false))
    }

    /// The outbox rows not relayed yet, sorted by group, partition and offset (the relay takes
    /// the first); only `group`'s if given.
    pub fn outbox(&self, group: Option<&str>) -> Result<Vec<Fact>, StoreError> {
        dispatch!(self, s => s.facts(group, true))
    }

    /// The first outbox row of `group` (by partition, then offset): the relay's next.
    pub fn first_outbox(&self, group: &str) -> Result<Option<Fact>, StoreError> {
        dispatch!(self, s => s.first_outbox(group))
    }

    /// The relay's delete of an outbox row it copied to the index: one transaction; false when
    /// the row was gone already.
    pub fn delete_outbox(&mut self, fact: &Fact) -> Result<bool, StoreError> {
        dispatch!(self, s => s.delete_outbox(fact))
    }

    pub fn claim(&mut self, group: &str, partition: u32, owner: &str) -> Result<i64, StoreError> {
        dispatch!(self, s => s.claim(group, partition, owner))
    }

    /// An owner's start (spec.md §10): one transaction that bumps the epoch of every progress
    /// row of `group` naming `owner` and reads back, by partition, the new epochs and the next
    /// offsets its leases start from.
    pub fn claim_own(&mut self, group: &str, owner: &str) -> Result<Vec<Claimed>, StoreError> {
        let claimed = dispatch!(self, s => s.claim_own(group, owner, None))?;
        assert!(claimed.len() <= self.partitions() as usize, "a claim names each partition at most once");
        Ok(claimed)
    }

    /// Follow mode's adoption of one partition: as `claim_own`, for `partition` only, and only
    /// while its row still names `owner`; `None` when it does not any more.
    pub fn claim_own_partition(
        &mut self,
        group: &str,
        partition: u32,
        owner: &str,
    ) -> Result<Option<Claimed>, StoreError> {
        let claimed = dispatch!(self, s => s.claim_own(group, owner, Some(partition)))?;
        assert!(claimed.len() <= 1, "one partition's claim names at most its own row");
        assert!(claimed.iter().all(|c| c.partition == partition), "the claim names the partition asked for");
        Ok(claimed.first().copied())
    }

    /// `apply-effect`: the items' effect (`effect`), skipping processed ids when
    /// `unless_processed` (dedup-separate).
    pub fn add_effect(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        (unless_processed, effect): (bool, EffectKind),
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        dispatch!(self, s => s.add_effect(group, partition, items, (unless_processed, effect), inside))
    }

    pub fn insert_processed(
        &mut self,
        group: &str,
        partition: u32,
        offsets: &[u64],
        inside: InsideHook<'_>,
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.insert_processed(group, partition, offsets, inside))
    }

    /// `commit-offset`: `next_offset` written blindly, or, with `fence` (the broker rows' check),
    /// only when the stored epoch is the one held (`StoreError::Fenced`, nothing written, else).
    pub fn commit_offset(
        &mut self,
        group: &str,
        partition: u32,
        fence: Option<i64>,
        next_offset: u64,
        inside: InsideHook<'_>,
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.commit_offset(group, partition, fence, next_offset, inside))
    }

    pub fn apply_stamped(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        effect: EffectKind,
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        dispatch!(self, s => s.apply_stamped(group, partition, items, effect, inside))
    }

    pub fn apply_deduped(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        key: DedupKey,
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        dispatch!(self, s => s.apply_deduped(group, partition, items, key, inside))
    }

    /// `apply-atomic` under `guard`, recording each applied record's fact (and outbox row) as
    /// `also` says.
    pub fn apply_atomic(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        (guard, also): (Guard, AtomicAlso),
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        dispatch!(self, s => s.apply_atomic(group, partition, items, (guard, also), inside))
    }

    /// `fence` is the owner's epoch, checked first; `None` (no check) only under the
    /// test-only `owner::Mutation::NoFence`, as for `dead_letter` and `reset_offset`.
    #[allow(clippy::too_many_arguments)]
    pub fn poison_attempt(
        &mut self,
        group: &str,
        partition: u32,
        offset: u64,
        fence: Option<i64>,
        policy: FailurePolicy,
        error: &str,
        inside: InsideHook<'_>,
    ) -> Result<PoisonAttempt, StoreError> {
        dispatch!(self, s => s.poison_attempt(group, partition, offset, fence, policy, error, inside))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn dead_letter(
        &mut self,
        group: &str,
        partition: u32,
        offset: u64,
        fence: Option<i64>,
        payload: &[u8],
        error: &str,
        inside: InsideHook<'_>,
    ) -> Result<u64, StoreError> {
        dispatch!(self, s => s.dead_letter(group, partition, offset, fence, payload, error, inside))
    }

    pub fn reset_offset(
        &mut self,
        group: &str,
        partition: u32,
        fence: Option<i64>,
        to: u64,
        inside: InsideHook<'_>,
    ) -> Result<u64, StoreError> {
        dispatch!(self, s => s.reset_offset(group, partition, fence, to, inside))
    }

    pub fn resets(&self, group: Option<&str>) -> Result<Vec<Reset>, StoreError> {
        dispatch!(self, s => s.resets(group))
    }

    /// `commit-txn`'s store transaction, the commit point of a read-process-write transaction:
    /// the fence (if any), the items' effect, the next offset past them and `txn` recorded as
    /// committed.
    pub fn commit_txn(
        &mut self,
        items: &[Item],
        fence: Option<i64>,
        txn: &TxnRow,
        inside: InsideHook<'_>,
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.commit_txn(items, fence, txn, inside))
    }

    /// An output section: one transaction holding the partition's progress row (the fence
    /// checked, if any) while `body` appends to the output log and reads or records the
    /// partition's transactions. Every append to the output log happens inside one, after the
    /// store's lock and before the output log's writer lock, so the two are always taken in
    /// that order.
    pub fn output_section<T, X: From<StoreError>>(
        &mut self,
        (group, partition): (&str, u32),
        fence: Option<i64>,
        inside: InsideHook<'_>,
        body: impl FnOnce(&mut dyn TxnTable) -> Result<T, X>,
    ) -> Result<T, X> {
        dispatch!(self, s => s.output_section((group, partition), fence, inside, body))
    }

    pub fn txns(&self, group: Option<&str>) -> Result<Vec<TxnRow>, StoreError> {
        dispatch!(self, s => s.txns(group))
    }

    pub fn attempts(&self, group: &str, partition: u32, offset: u64) -> Result<u64, StoreError> {
        dispatch!(self, s => s.attempts(group, partition, offset))
    }

    /// Every counted attempt of `group`: (partition, offset, attempts), sorted.
    pub fn all_attempts(&self, group: &str) -> Result<Vec<(u32, u64, u64)>, StoreError> {
        dispatch!(self, s => s.all_attempts(group))
    }

    pub fn dead_letters(&self, group: Option<&str>) -> Result<Vec<DeadLetter>, StoreError> {
        dispatch!(self, s => s.dead_letters(group))
    }

    pub fn redrive(&mut self, group: &str, partition: u32, offset: u64, delta: i64) -> Result<i64, StoreError> {
        dispatch!(self, s => s.redrive(group, partition, offset, delta))
    }
}

#[cfg(test)]
mod tests {
    use super::postgres::{table_names, SCHEMA as PG_SCHEMA};
    use super::sqlite::SCHEMA as SQLITE_SCHEMA;

    /// Both backends create the same tables, and `table_names` finds every one of them (the
    /// PostgreSQL `init` refuses a database holding any of them).
    #[test]
    fn both_backends_create_the_same_tables() {
        let expected = [
            "meta",
            "effect",
            "progress",
            "processed",
            "attempts",
            "dead_letters",
            "resets",
            "txns",
            "facts",
            "outbox",
        ];
        assert_eq!(table_names(PG_SCHEMA), expected);
        assert_eq!(table_names(SQLITE_SCHEMA), expected);
        assert_eq!(PG_SCHEMA.matches("CREATE TABLE").count(), expected.len());
        assert_eq!(SQLITE_SCHEMA.matches("CREATE TABLE").count(), expected.len());
    }
}
