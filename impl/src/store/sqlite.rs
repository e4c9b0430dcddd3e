//! The SQLite store (the default, `store.db` in the data directory). Every write is one
//! explicit `BEGIN IMMEDIATE` transaction run by `SqliteStore::write`: the write's statements,
//! then its `inside` crash hook, then COMMIT. Every COMMIT is durable before it returns, a power
//! cut included (`synchronous=EXTRA` in DELETE mode, `FULL` in WAL mode: `set_durability`);
//! the journal mode (DELETE or WAL) is chosen at creation and kept.

use super::types::{check_partitions, totals_accepting};
use super::types::{
    processed_partition, set_value, AtomicAlso, Claimed, DeadLetter, Ending, Fact, FailurePolicy, Guard, InsideHook,
    Item, Journal, PoisonAttempt, ProgressRow, Reset, Rewind, StoreError, StoreOptions, Synchronous, TxnRow, TxnState,
    TxnTable, SCHEMA_VERSION,
};
use crate::log::LogIdentity;
use crate::strategy::{DedupKey, EffectKind};
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The store's tables, created once by `SqliteStore::create`.
pub(super) const SCHEMA: &str = "
    CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);  -- partitions, wal, log_id
    CREATE TABLE effect (grp TEXT PRIMARY KEY, total INTEGER NOT NULL, value INTEGER);  -- value: the sets
    CREATE TABLE progress (
        grp TEXT NOT NULL, part INTEGER NOT NULL,
        next_offset INTEGER NOT NULL, epoch INTEGER NOT NULL, owner TEXT NOT NULL, stamp INTEGER,
        PRIMARY KEY (grp, part));
    CREATE TABLE processed (
        grp TEXT NOT NULL, part INTEGER NOT NULL, log_offset INTEGER NOT NULL,
        PRIMARY KEY (grp, part, log_offset));
    CREATE TABLE attempts (
        grp TEXT NOT NULL, part INTEGER NOT NULL, log_offset INTEGER NOT NULL,
        attempts INTEGER NOT NULL, error TEXT NOT NULL,
        PRIMARY KEY (grp, part, log_offset));
    CREATE TABLE dead_letters (
        grp TEXT NOT NULL, part INTEGER NOT NULL, log_offset INTEGER NOT NULL,
        error TEXT NOT NULL, attempts INTEGER NOT NULL, payload BLOB NOT NULL,
        PRIMARY KEY (grp, part, log_offset));
    CREATE TABLE resets (
        grp TEXT NOT NULL, part INTEGER NOT NULL, from_offset INTEGER NOT NULL, to_offset INTEGER NOT NULL,
        PRIMARY KEY (grp, part, from_offset, to_offset));
    CREATE TABLE txns (
        grp TEXT NOT NULL, part INTEGER NOT NULL, first_output INTEGER NOT NULL, epoch INTEGER NOT NULL,
        input_offset INTEGER NOT NULL, input_end INTEGER NOT NULL, state TEXT NOT NULL,
        PRIMARY KEY (grp, part, first_output));
    CREATE TABLE facts (
        grp TEXT NOT NULL, part INTEGER NOT NULL, log_offset INTEGER NOT NULL,
        PRIMARY KEY (grp, part, log_offset));
    CREATE TABLE outbox (
        grp TEXT NOT NULL, part INTEGER NOT NULL, log_offset INTEGER NOT NULL,
        PRIMARY KEY (grp, part, log_offset));
";

/// The effect: a record's delta added to its group's total, only if the sum fits `i64`
/// (`?3..=?4`, from `totals_accepting`); SQLite would otherwise store it as a REAL. Run only
/// through `add_delta`, which tells an overflow from a missing group.
const ADD_DELTA_SQL: &str = "UPDATE effect SET total = total + ?2 WHERE grp = ?1 AND total BETWEEN ?3 AND ?4";
/// The set strategies' effect: the record's own value `v(o) = o + 1` replaces the group's.
const SET_VALUE_SQL: &str = "UPDATE effect SET value = ?2 WHERE grp = ?1";
const INSERT_FACT_SQL: &str = "INSERT OR IGNORE INTO facts (grp, part, log_offset) VALUES (?1, ?2, ?3)";
const INSERT_OUTBOX_SQL: &str = "INSERT OR IGNORE INTO outbox (grp, part, log_offset) VALUES (?1, ?2, ?3)";
const SET_NEXT_SQL: &str = "UPDATE progress SET next_offset = ?3 WHERE grp = ?1 AND part = ?2";
const INSERT_PROCESSED_SQL: &str = "INSERT OR IGNORE INTO processed (grp, part, log_offset) VALUES (?1, ?2, ?3)";
const PROCESSED_SQL: &str = "SELECT 1 FROM processed WHERE grp = ?1 AND part = ?2 AND log_offset = ?3";
const ATTEMPTS_SQL: &str = "SELECT attempts, error FROM attempts WHERE grp = ?1 AND part = ?2 AND log_offset = ?3";
const INSERT_TXN_SQL: &str = "INSERT INTO txns (grp, part, first_output, epoch, input_offset, input_end, state) \
                              VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
const TXN_STATE_SQL: &str = "SELECT state FROM txns WHERE grp = ?1 AND part = ?2 AND first_output = ?3";

pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    busy_timeout: Duration,
    partitions: u32,
    journal: Journal,
    /// The identity of the log this store was initialised with (`meta.log_id`, `partitions`).
    log: LogIdentity,
}

/// A write's open transaction, with what its errors name: the database path and the busy
/// timeout a blocked statement waited.
struct Write<'a> {
    tx: Transaction<'a>,
    path: &'a Path,
    waited: Duration,
}

impl SqliteStore {
    /// Creates a store for the log `log` (its partitions; its id recorded, so every open can
    /// check the log is that one), failing if one exists already (`StoreError::AlreadyExists`).
    ///
    /// The schema, the meta rows and the schema version are one transaction: a create killed
    /// before its COMMIT leaves an empty database (no table, version 0), which `open` calls not
    /// initialised and which `create` then finishes. A concurrent create that committed first
    /// makes this one `AlreadyExists` (checked again under the write lock).
    pub fn create(path: &Path, log: LogIdentity, options: StoreOptions) -> Result<SqliteStore, StoreError> {
        let mut conn = connect(path, options)?;
        refuse_initialised(&conn, path, options.busy_timeout)?;
        set_durability(&conn, path, options.journal, options)?;
        let sql = "schema and meta";
        let fail = |source| classify(path, sql, source, options.busy_timeout);
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(fail)?;
        refuse_initialised(&tx, path, options.busy_timeout)?;
        tx.execute_batch(SCHEMA).map_err(fail)?;
        tx.execute("INSERT INTO meta (key, value) VALUES ('partitions', ?1)", params![log.partitions]).map_err(fail)?;
        // The id's bits as SQLite's signed 64-bit integer.
        tx.execute("INSERT INTO meta (key, value) VALUES ('log_id', ?1)", params![log.id as i64]).map_err(fail)?;
        let wal = i64::from(options.journal == Journal::Wal);
        tx.execute("INSERT INTO meta (key, value) VALUES ('wal', ?1)", params![wal]).map_err(fail)?;
        // The version lives in the database header, which the transaction covers too.
        tx.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(fail)?;
        tx.commit().map_err(fail)?;
        drop(conn);
        SqliteStore::open(path, options)
    }

    /// `init`'s check before it creates anything: `StoreError::AlreadyExists` when `path` holds
    /// a store (or any database with a table or a version), `StoreError::NotAStore` when it
    /// holds a file that is not an SQLite database, of any size (SQLite itself would take a
    /// file shorter than its 100-byte header for an empty database and overwrite it). Nothing
    /// there, an empty (0-byte) file, or the empty database a killed `init` left, is fine: that
    /// is what a kill inside `init` before the store's COMMIT leaves, and `init` finishes it.
    pub fn check_absent(path: &Path, options: StoreOptions) -> Result<(), StoreError> {
        if !path.exists() {
            return Ok(());
        }
        if !is_empty_or_sqlite(path) {
            return Err(StoreError::NotAStore { path: path.to_path_buf() });
        }
        refuse_initialised(&connect(path, options)?, path, options.busy_timeout)
    }

    /// Opens an existing store, checking its schema version, in the journal mode chosen at
    /// creation. Rolls back any transaction a crashed process left uncommitted (SQLite does so
    /// on first access of a hot journal or WAL). Only `busy_timeout` and `synchronous` are taken
    /// from `options`.
    pub fn open(path: &Path, options: StoreOptions) -> Result<SqliteStore, StoreError> {
        if !path.exists() {
            return Err(StoreError::NotInitialized { path: path.to_path_buf() });
        }
        let conn = connect(path, options)?;
        let sql = "PRAGMA user_version";
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(|source| classify(path, sql, source, options.busy_timeout))?;
        match version {
            SCHEMA_VERSION => {}
            0 => return Err(StoreError::NotInitialized { path: path.to_path_buf() }),
            found => return Err(StoreError::SchemaVersion { path: path.to_path_buf(), found }),
        }
        let meta = |key: &'static str| -> Result<i64, StoreError> {
            let sql = "SELECT value FROM meta WHERE key = ?1";
            conn.query_row(sql, params![key], |row| row.get(0))
                .map_err(|source| classify(path, sql, source, options.busy_timeout))
        };
        let target = path.display().to_string();
        let partitions = check_partitions(&target, meta("partitions")?)?;
        let journal = match meta("wal")? {
            0 => Journal::Delete,
            1 => Journal::Wal,
            found => return Err(StoreError::BadMeta { target, key: "wal", found, expected: "0 or 1".into() }),
        };
        let log = LogIdentity { id: meta("log_id")? as u64, partitions };
        set_durability(&conn, path, journal, options)?;
        Ok(SqliteStore { conn, path: path.to_path_buf(), busy_timeout: options.busy_timeout, partitions, journal, log })
    }

    /// The log this store was initialised with.
    pub fn log_identity(&self) -> LogIdentity {
        self.log
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    pub fn journal(&self) -> Journal {
        self.journal
    }

    fn fail(&self, sql: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        fail_with(&self.path, sql, self.busy_timeout)
    }

    /// Runs one write: `BEGIN IMMEDIATE`, `body` (the write's statements), the `inside` hook
    /// (a crash point) with the transaction still open, then COMMIT. An error from `body`
    /// drops the transaction, which rolls it back.
    fn write<T>(
        &mut self,
        inside: InsideHook<'_>,
        body: impl FnOnce(&Write<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.write_ending(inside, |write| body(write).map(Ending::Commit))
    }

    /// `write` whose `body` also chooses how the transaction ends: COMMIT, or ROLLBACK (still
    /// after the `inside` hook).
    fn write_ending<T>(
        &mut self,
        inside: InsideHook<'_>,
        body: impl FnOnce(&Write<'_>) -> Result<Ending<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let (path, waited) = (self.path.as_path(), self.busy_timeout);
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(fail_with(
            path,
            "BEGIN IMMEDIATE",
            waited,
        ))?;
        let write = Write { tx, path, waited };
        let ending = body(&write)?;
        inside();
        match ending {
            Ending::Commit(value) => write.tx.commit().map_err(fail_with(path, "COMMIT", waited)).map(|()| value),
            Ending::RollBack(value) => write.tx.rollback().map_err(fail_with(path, "ROLLBACK", waited)).map(|()| value),
        }
    }

    /// Creates the group's rows if missing: total 0, and per partition next offset 0 at epoch 1
    /// owned by `initial_owner` (spec.md §2.4). Idempotent.
    pub fn ensure_group(&mut self, group: &str, initial_owner: &str) -> Result<(), StoreError> {
        let partitions = self.partitions;
        // No crash point names this write: its hook does nothing.
        self.write(&mut || {}, |write| {
            write.exec("INSERT OR IGNORE INTO effect (grp, total) VALUES (?1, 0)", params![group])?;
            for partition in 0..partitions {
                let sql = "INSERT OR IGNORE INTO progress (grp, part, next_offset, epoch, owner) \
                           VALUES (?1, ?2, 0, 1, ?3)";
                write.exec(sql, params![group, partition, initial_owner])?;
            }
            Ok(())
        })
    }

    pub fn groups(&self) -> Result<Vec<String>, StoreError> {
        let sql = "SELECT grp FROM effect ORDER BY grp";
        let mut statement = self.conn.prepare(sql).map_err(self.fail(sql))?;
        let rows = statement.query_map([], |row| row.get(0)).map_err(self.fail(sql))?;
        rows.collect::<Result<_, _>>().map_err(self.fail(sql))
    }

    pub fn total(&self, group: &str) -> Result<i64, StoreError> {
        let sql = "SELECT total FROM effect WHERE grp = ?1";
        Ok(self.conn.query_row(sql, params![group], |row| row.get(0)).optional().map_err(self.fail(sql))?.unwrap_or(0))
    }

    pub fn progress(&self, group: &str, partition: u32) -> Result<ProgressRow, StoreError> {
        self.check_partition(partition)?;
        let sql = "SELECT next_offset, epoch, owner, stamp FROM progress WHERE grp = ?1 AND part = ?2";
        let row = self
            .conn
            .query_row(sql, params![group, partition], |row| {
                Ok(ProgressRow { next_offset: row.get(0)?, epoch: row.get(1)?, owner: row.get(2)?, stamp: row.get(3)? })
            })
            .optional()
            .map_err(self.fail(sql))?;
        Ok(row.unwrap_or(ProgressRow { next_offset: 0, epoch: 1, owner: String::new(), stamp: None }))
    }

    /// The processed-id table of a group, sorted: (partition, offset).
    pub fn processed(&self, group: &str) -> Result<Vec<(u32, u64)>, StoreError> {
        let sql = "SELECT part, log_offset FROM processed WHERE grp = ?1 ORDER BY part, log_offset";
        let mut statement = self.conn.prepare(sql).map_err(self.fail(sql))?;
        let rows = statement.query_map(params![group], |row| Ok((row.get(0)?, row.get(1)?))).map_err(self.fail(sql))?;
        rows.collect::<Result<_, _>>().map_err(self.fail(sql))
    }

    /// The set strategies' value of a group: `None` before any set (or for a group that
    /// adds).
    pub fn value(&self, group: &str) -> Result<Option<i64>, StoreError> {
        let sql = "SELECT value FROM effect WHERE grp = ?1";
        let found: Option<Option<i64>> =
            self.conn.query_row(sql, params![group], |row| row.get(0)).optional().map_err(self.fail(sql))?;
        Ok(found.flatten())
    }

    /// The `facts` (`outbox: false`) or `outbox` rows, sorted by group, partition and offset;
    /// only `group`'s if given.
    pub fn facts(&self, group: Option<&str>, outbox: bool) -> Result<Vec<Fact>, StoreError> {
        let sql = if outbox {
            "SELECT grp, part, log_offset FROM outbox WHERE ?1 IS NULL OR grp = ?1 ORDER BY grp, part, log_offset"
        } else {
            "SELECT grp, part, log_offset FROM facts WHERE ?1 IS NULL OR grp = ?1 ORDER BY grp, part, log_offset"
        };
        let mut statement = self.conn.prepare_cached(sql).map_err(self.fail(sql))?;
        let rows = statement
            .query_map(params![group], |row| {
                Ok(Fact { group: row.get(0)?, partition: row.get(1)?, offset: row.get(2)? })
            })
            .map_err(self.fail(sql))?;
        rows.collect::<Result<_, _>>().map_err(self.fail(sql))
    }

    /// The first outbox row of `group`, by partition then offset (the relay's next).
    pub fn first_outbox(&self, group: &str) -> Result<Option<Fact>, StoreError> {
        let sql = "SELECT grp, part, log_offset FROM outbox WHERE grp = ?1 ORDER BY part, log_offset LIMIT 1";
        self.conn
            .query_row(sql, params![group], |row| {
                Ok(Fact { group: row.get(0)?, partition: row.get(1)?, offset: row.get(2)? })
            })
            .optional()
            .map_err(self.fail(sql))
    }

    /// The relay's delete of an outbox row it copied to the index: one transaction; false when
    /// the row was gone (another relay deleted it).
    pub fn delete_outbox(&mut self, fact: &Fact) -> Result<bool, StoreError> {
        self.check_partition(fact.partition)?;
        // No crash point names this write: its hook does nothing.
        self.write(&mut || {}, |write| {
            let sql = "DELETE FROM outbox WHERE grp = ?1 AND part = ?2 AND log_offset = ?3";
            Ok(write.exec(sql, params![fact.group, fact.partition, fact.offset])? == 1)
        })
    }

    fn check_partition(&self, partition: u32) -> Result<(), StoreError> {
        if partition >= self.partitions {
            return Err(StoreError::NoSuchPartition { partition, partitions: self.partitions });
        }
        Ok(())
    }

    /// The rebalance: assigns the partition to `owner` and bumps its epoch, in one
    /// transaction. Returns the new epoch. The previous owner is not told.
    pub fn claim(&mut self, group: &str, partition: u32, owner: &str) -> Result<i64, StoreError> {
        self.check_partition(partition)?;
        self.ensure_group(group, owner)?;
        // No crash point names this write: its hook does nothing.
        self.write(&mut || {}, |write| {
            let sql = "UPDATE progress SET epoch = epoch + 1, owner = ?3 WHERE grp = ?1 AND part = ?2 RETURNING epoch";
            write.row(sql, params![group, partition, owner], |row| row.get(0))
        })
    }

    /// An owner's start (`only` = `None`) or follow mode's adoption of one partition: one
    /// transaction bumping the epoch of every row of `group` that names `owner` (only
    /// partition `only`, if given). Returns, by partition, each new epoch and next offset.
    pub fn claim_own(&mut self, group: &str, owner: &str, only: Option<u32>) -> Result<Vec<Claimed>, StoreError> {
        if let Some(partition) = only {
            self.check_partition(partition)?;
        }
        // No crash point names this write: its hook does nothing.
        self.write(&mut || {}, |write| {
            let sql =
                "UPDATE progress SET epoch = epoch + 1 WHERE grp = ?1 AND owner = ?2 AND (?3 IS NULL OR part = ?3) \
                       RETURNING part, epoch, next_offset";
            let mut claimed = write.rows(sql, params![group, owner, only], |row| {
                Ok(Claimed { partition: row.get(0)?, epoch: row.get(1)?, next_offset: row.get(2)? })
            })?;
            // RETURNING follows no defined order.
            claimed.sort_by_key(|c| c.partition);
            Ok(claimed)
        })
    }

    /// `apply-effect`: adds each item's delta to the total (`EffectKind::Set`: sets the value to
    /// the item's own, blindly). With `unless_processed` (dedup-separate) an item whose id is in
    /// the processed table is skipped. Returns, per item, whether it was applied.
    pub fn add_effect(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        (unless_processed, effect): (bool, EffectKind),
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        self.write(inside, |write| {
            let mut applied = Vec::with_capacity(items.len());
            for item in items {
                let skip = unless_processed && is_processed(write, group, partition, item.offset)?;
                if !skip {
                    apply_effect(write, group, partition, item, effect)?;
                }
                applied.push(!skip);
            }
            Ok(applied)
        })
    }

    /// `insert-processed`: records the items' ids (dedup-separate's separate write).
    pub fn insert_processed(
        &mut self,
        group: &str,
        partition: u32,
        offsets: &[u64],
        inside: InsideHook<'_>,
    ) -> Result<(), StoreError> {
        self.write(inside, |write| {
            for offset in offsets {
                write.exec(INSERT_PROCESSED_SQL, params![group, partition, offset])?;
            }
            Ok(())
        })
    }

    /// `commit-offset`: writes the next offset blindly (no guard), as a plain consumer does.
    pub fn commit_offset(
        &mut self,
        group: &str,
        partition: u32,
        fence: Option<i64>,
        next_offset: u64,
        inside: InsideHook<'_>,
    ) -> Result<(), StoreError> {
        self.write(inside, |write| {
            check_fence(write, group, partition, fence)?;
            write.exec(SET_NEXT_SQL, params![group, partition, next_offset]).map(|_| ())
        })
    }

    /// `apply-stamped`: for each item, set-if-newer: the delta is added (`EffectKind::Set`: the
    /// value set to the item's own) and the stamp moved only when the offset is strictly above
    /// the stamp, in the same transaction.
    pub fn apply_stamped(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        effect: EffectKind,
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        self.write(inside, |write| {
            let mut applied = Vec::with_capacity(items.len());
            for item in items {
                let sql =
                    "UPDATE progress SET stamp = ?3 WHERE grp = ?1 AND part = ?2 AND (stamp IS NULL OR stamp < ?3)";
                let newer = write.exec(sql, params![group, partition, item.offset])? == 1;
                if newer {
                    apply_effect(write, group, partition, item, effect)?;
                }
                applied.push(newer);
            }
            Ok(applied)
        })
    }

    /// `apply-deduped`: per item, insert its id and add its delta, unless the id is present.
    /// The id is (partition, offset), or under `DedupKey::OffsetOnly` (the trap) the offset alone,
    /// stored as partition 0's.
    pub fn apply_deduped(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        key: DedupKey,
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        let id_partition = processed_partition(partition, key);
        self.write(inside, |write| {
            let mut applied = Vec::with_capacity(items.len());
            for item in items {
                let fresh = write.exec(INSERT_PROCESSED_SQL, params![group, id_partition, item.offset])? == 1;
                if fresh {
                    add_delta(write, group, partition, item)?;
                }
                applied.push(fresh);
            }
            Ok(applied)
        })
    }

    /// `apply-atomic`: the effects and the next offset in one transaction (with each applied
    /// record's fact, and its outbox row, as `also` says). `Fenced` aborts with
    /// `StoreError::Fenced` when the stored epoch is not the owner's; `Cas` reads the stored next
    /// offset and skips items below it. Returns, per item, whether it was applied.
    pub fn apply_atomic(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        (guard, also): (Guard, AtomicAlso),
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        self.write(inside, |write| {
            let sql = "SELECT next_offset, epoch FROM progress WHERE grp = ?1 AND part = ?2";
            let (stored, epoch): (u64, i64) =
                write.row(sql, params![group, partition], |row| Ok((row.get(0)?, row.get(1)?)))?;
            if let Guard::Fenced { epoch: held } = guard {
                if held != epoch {
                    // Returning the error rolls the transaction back: nothing of the zombie's lands.
                    return Err(StoreError::Fenced { group: group.to_string(), partition, held, current: epoch });
                }
            }
            let mut applied = Vec::with_capacity(items.len());
            let mut next = stored;
            for item in items {
                let apply = match guard {
                    Guard::Cas => {
                        assert!(
                            item.offset <= next,
                            "an atomic-cas owner never runs ahead of the stored offset it serialises on"
                        );
                        item.offset == next
                    }
                    Guard::Blind | Guard::Fenced { .. } => true,
                };
                if apply {
                    add_delta(write, group, partition, item)?;
                    record_fact(write, (group, partition, item.offset), also)?;
                    next = item.offset + 1;
                }
                applied.push(apply);
            }
            if applied.iter().any(|&a| a) {
                write.exec(SET_NEXT_SQL, params![group, partition, next])?;
            }
            Ok(applied)
        })
    }

    /// `apply-atomic` on a poison record, whose effect fails every time: one transaction that
    /// checks the epoch first (`StoreError::Fenced` when the `fence` is stale; no check without
    /// one, the test-only mutation), then attempts the effect. Under `FailurePolicy::Count` the failure is counted in `attempts`, with `error`,
    /// in the same transaction, unless `max_attempts` are counted already (then nothing is
    /// attempted or written); under `FailurePolicy::Forget` the transaction rolls back.
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
        self.write_ending(inside, |write| {
            check_fence(write, group, partition, fence)?;
            let max_attempts = match policy {
                FailurePolicy::Count { max_attempts } => max_attempts,
                // The effect failed and nothing of the attempt is kept.
                FailurePolicy::Forget => return Ok(Ending::RollBack(PoisonAttempt::Failed { attempts: 0 })),
            };
            let counted = read_attempts(write, group, partition, offset)?.map_or(0, |(attempts, _)| attempts);
            if counted >= max_attempts {
                return Ok(Ending::RollBack(PoisonAttempt::Exhausted { attempts: counted }));
            }
            let sql = "INSERT INTO attempts (grp, part, log_offset, attempts, error) VALUES (?1, ?2, ?3, 1, ?4)
                   ON CONFLICT (grp, part, log_offset) DO UPDATE SET attempts = attempts + 1, error = excluded.error
                   RETURNING attempts";
            let attempts = write.row(sql, params![group, partition, offset, error], |row| row.get(0))?;
            Ok(Ending::Commit(PoisonAttempt::Failed { attempts }))
        })
    }

    /// `dead-letter`: one transaction that checks the epoch first (`StoreError::Fenced` when
    /// the `fence` is stale; no check without one, the test-only mutation), inserts the record into the dead-letter table with its counted
    /// attempts and last error (`error` when none was counted) and its payload, and sets the
    /// next offset past it. Returns the attempts.
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
        self.write(inside, |write| {
            check_fence(write, group, partition, fence)?;
            let (attempts, error) = read_attempts(write, group, partition, offset)?.unwrap_or((0, error.to_string()));
            let sql = "INSERT INTO dead_letters (grp, part, log_offset, error, attempts, payload) \
                       VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
            write.exec(sql, params![group, partition, offset, error, attempts, payload])?;
            write.exec(SET_NEXT_SQL, params![group, partition, offset + 1])?;
            Ok(attempts)
        })
    }

    /// `reset-offset` (`--on-out-of-range earliest`): one transaction that checks the epoch
    /// first (`StoreError::Fenced` when the `fence` is stale; no check without one, the
    /// test-only mutation), records the reset from the stored
    /// next offset to `to` (the log start) and sets the next offset to `to`. Returns the
    /// stored next offset it reset from.
    pub fn reset_offset(
        &mut self,
        group: &str,
        partition: u32,
        fence: Option<i64>,
        to: u64,
        inside: InsideHook<'_>,
    ) -> Result<u64, StoreError> {
        self.write(inside, |write| {
            check_fence(write, group, partition, fence)?;
            let sql = "SELECT next_offset FROM progress WHERE grp = ?1 AND part = ?2";
            let from: u64 = write.row(sql, params![group, partition], |row| row.get(0))?;
            // The table is a set, as the model's: recording the same reset twice keeps one row.
            let sql = "INSERT OR IGNORE INTO resets (grp, part, from_offset, to_offset) VALUES (?1, ?2, ?3, ?4)";
            write.exec(sql, params![group, partition, from, to])?;
            write.exec(SET_NEXT_SQL, params![group, partition, to])?;
            Ok(from)
        })
    }

    /// `consumer repair`, after the log lost records from `end` on: one transaction that drops
    /// the group's processed ids and counted attempts at or past `end`, moves an offset stamp
    /// at or past it to `end - 1` (none for 0), and moves a next offset past `end` back to it,
    /// recording that in `resets` (from the stored offset to `end`: a row whose `from` is above
    /// its `to` is such a rewind). Records appended later at those offsets are then applied,
    /// not skipped. The epoch moves up, fencing any owner still running on the partition.
    /// `None` (and nothing written) when nothing of the group's is at or past `end`.
    pub fn rewind_to_log_end(&mut self, group: &str, partition: u32, end: u64) -> Result<Option<Rewind>, StoreError> {
        self.check_partition(partition)?;
        // No crash point names this write: its hook does nothing.
        self.write_ending(&mut || {}, |write| {
            let sql = "SELECT next_offset, stamp FROM progress WHERE grp = ?1 AND part = ?2";
            let (from, stamp): (u64, Option<u64>) =
                write.row(sql, params![group, partition], |row| Ok((row.get(0)?, row.get(1)?)))?;
            let sql = "DELETE FROM processed WHERE grp = ?1 AND part = ?2 AND log_offset >= ?3";
            let processed_dropped = write.exec(sql, params![group, partition, end])? as u64;
            let sql = "DELETE FROM attempts WHERE grp = ?1 AND part = ?2 AND log_offset >= ?3";
            let attempts_dropped = write.exec(sql, params![group, partition, end])? as u64;
            let stamp_from = stamp.filter(|&stamp| stamp >= end);
            if from <= end && processed_dropped == 0 && attempts_dropped == 0 && stamp_from.is_none() {
                return Ok(Ending::RollBack(None));
            }
            if stamp_from.is_some() {
                let sql = "UPDATE progress SET stamp = ?3 WHERE grp = ?1 AND part = ?2";
                write.exec(sql, params![group, partition, end.checked_sub(1)])?;
            }
            if from > end {
                let sql = "INSERT OR IGNORE INTO resets (grp, part, from_offset, to_offset) VALUES (?1, ?2, ?3, ?4)";
                write.exec(sql, params![group, partition, from, end])?;
                write.exec(SET_NEXT_SQL, params![group, partition, end])?;
            }
            let sql = "UPDATE progress SET epoch = epoch + 1 WHERE grp = ?1 AND part = ?2 RETURNING epoch";
            let epoch = write.row(sql, params![group, partition], |row| row.get(0))?;
            let (group, to) = (group.to_string(), from.min(end));
            let rewind = Rewind { group, partition, from, to, processed_dropped, attempts_dropped, stamp_from, epoch };
            Ok(Ending::Commit(Some(rewind)))
        })
    }

    /// `consumer repair --gap`, after the log recorded `gap` (offsets whose records were
    /// damaged beyond reading): one transaction that records, for a group not past the gap,
    /// the skip it will make in `resets` (from its next offset, or the gap's start if that is
    /// later, to the gap's end), so the skip is accounted for before it happens. The owner's
    /// own skip (`reset-offset` at the gap) records the same row, kept once. `None` (nothing
    /// written) for a group already past the gap.
    pub fn record_gap(&mut self, group: &str, partition: u32, gap: Range<u64>) -> Result<Option<Reset>, StoreError> {
        self.check_partition(partition)?;
        // No crash point names this write: its hook does nothing.
        self.write_ending(&mut || {}, |write| {
            let sql = "SELECT next_offset FROM progress WHERE grp = ?1 AND part = ?2";
            let next: u64 = write.row(sql, params![group, partition], |row| row.get(0))?;
            if next >= gap.end {
                return Ok(Ending::RollBack(None));
            }
            let from = next.max(gap.start);
            let sql = "INSERT OR IGNORE INTO resets (grp, part, from_offset, to_offset) VALUES (?1, ?2, ?3, ?4)";
            write.exec(sql, params![group, partition, from, gap.end])?;
            Ok(Ending::Commit(Some(Reset { group: group.to_string(), partition, from, to: gap.end })))
        })
    }

    /// `commit-txn`'s store transaction, the commit point of a read-process-write transaction
    /// (spec.md §3.3): under a `fence` (the holder's epoch) it first checks the stored epoch
    /// (`StoreError::Fenced` when stale: nothing written); then it adds the items' deltas to the
    /// total (the effect of a record is its committed output), sets the next offset past them
    /// (blindly without a fence) and records `txn` as committed. The commit marker follows,
    /// apart.
    pub fn commit_txn(
        &mut self,
        items: &[Item],
        fence: Option<i64>,
        txn: &TxnRow,
        inside: InsideHook<'_>,
    ) -> Result<(), StoreError> {
        let (group, partition) = (txn.group.as_str(), txn.partition);
        self.check_partition(partition)?;
        assert_eq!(txn.state, TxnState::Committed, "commit-txn records a committed transaction");
        self.write(inside, |write| {
            check_fence(write, group, partition, fence)?;
            for item in items {
                add_delta(write, group, partition, item)?;
            }
            write.exec(SET_NEXT_SQL, params![group, partition, txn.input_end])?;
            insert_txn(write, txn)
        })
    }

    /// An output section (spec.md §10, transactions): one transaction holding the database's
    /// write lock (`BEGIN IMMEDIATE`), so no claim of a new epoch and no other section runs
    /// while `body` appends to the output log. Under `fence` (the holder's epoch) the stored
    /// epoch is checked first (`StoreError::Fenced`: `body` never runs). `body` reads and
    /// records the partition's transactions through its `TxnTable`; then the `inside` hook (a
    /// crash point, skipped when `body` failed) and COMMIT, or ROLLBACK when `body` failed.
    pub fn output_section<T, X: From<StoreError>>(
        &mut self,
        (group, partition): (&str, u32),
        fence: Option<i64>,
        inside: InsideHook<'_>,
        body: impl FnOnce(&mut dyn TxnTable) -> Result<T, X>,
    ) -> Result<T, X> {
        self.check_partition(partition)?;
        let failed = std::cell::Cell::new(false);
        let mut hook = || {
            if !failed.get() {
                inside();
            }
        };
        let result = self.write_ending(&mut hook, |write| {
            check_fence(write, group, partition, fence)?;
            let result = body(&mut SqliteTxns { write, group, partition });
            failed.set(result.is_err());
            Ok(if result.is_ok() { Ending::Commit(result) } else { Ending::RollBack(result) })
        });
        result.map_err(X::from)?
    }

    /// The `txns` rows, sorted by group, partition and first output offset; only `group`'s if
    /// given.
    pub fn txns(&self, group: Option<&str>) -> Result<Vec<TxnRow>, StoreError> {
        let sql = "SELECT grp, part, first_output, epoch, input_offset, input_end, state FROM txns
                   WHERE ?1 IS NULL OR grp = ?1 ORDER BY grp, part, first_output";
        let mut statement = self.conn.prepare_cached(sql).map_err(self.fail(sql))?;
        type Raw = (String, u32, u64, i64, u64, u64, String);
        let rows = statement
            .query_map(params![group], |row| -> rusqlite::Result<Raw> {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?, row.get(6)?))
            })
            .map_err(self.fail(sql))?;
        let mut txns = Vec::new();
        for found in rows {
            let (group, partition, first_output, epoch, input_offset, input_end, state) =
                found.map_err(self.fail(sql))?;
            let state = parse_state(&group, partition, first_output, state)?;
            txns.push(TxnRow { group, partition, first_output, epoch, input_offset, input_end, state });
        }
        Ok(txns)
    }

    /// The reset table, sorted by group, partition and offsets; only `group`'s if given.
    pub fn resets(&self, group: Option<&str>) -> Result<Vec<Reset>, StoreError> {
        let sql = "SELECT grp, part, from_offset, to_offset FROM resets
                   WHERE ?1 IS NULL OR grp = ?1 ORDER BY grp, part, from_offset, to_offset";
        let mut statement = self.conn.prepare_cached(sql).map_err(self.fail(sql))?;
        let rows = statement
            .query_map(params![group], |row| {
                Ok(Reset { group: row.get(0)?, partition: row.get(1)?, from: row.get(2)?, to: row.get(3)? })
            })
            .map_err(self.fail(sql))?;
        rows.collect::<Result<_, _>>().map_err(self.fail(sql))
    }

    /// The failed attempts counted for a record (atomic-dlq); 0 when none.
    pub fn attempts(&self, group: &str, partition: u32, offset: u64) -> Result<u64, StoreError> {
        self.check_partition(partition)?;
        let sql = ATTEMPTS_SQL;
        let mut statement = self.conn.prepare_cached(sql).map_err(self.fail(sql))?;
        let row: Option<u64> = statement
            .query_row(params![group, partition, offset], |row| row.get(0))
            .optional()
            .map_err(self.fail(sql))?;
        Ok(row.unwrap_or(0))
    }

    /// Every counted attempt of `group`: (partition, offset, attempts), sorted.
    pub fn all_attempts(&self, group: &str) -> Result<Vec<(u32, u64, u64)>, StoreError> {
        let sql = "SELECT part, log_offset, attempts FROM attempts WHERE grp = ?1 ORDER BY part, log_offset";
        let mut statement = self.conn.prepare_cached(sql).map_err(self.fail(sql))?;
        let rows = statement
            .query_map(params![group], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .map_err(self.fail(sql))?;
        rows.collect::<Result<_, _>>().map_err(self.fail(sql))
    }

    /// The dead-letter table, sorted by group, partition and offset; only `group`'s if given.
    pub fn dead_letters(&self, group: Option<&str>) -> Result<Vec<DeadLetter>, StoreError> {
        let sql = "SELECT grp, part, log_offset, attempts, error, payload FROM dead_letters
                   WHERE ?1 IS NULL OR grp = ?1 ORDER BY grp, part, log_offset";
        let mut statement = self.conn.prepare_cached(sql).map_err(self.fail(sql))?;
        let rows = statement
            .query_map(params![group], |row| {
                Ok(DeadLetter {
                    group: row.get(0)?,
                    partition: row.get(1)?,
                    offset: row.get(2)?,
                    attempts: row.get(3)?,
                    error: row.get(4)?,
                    payload: row.get(5)?,
                })
            })
            .map_err(self.fail(sql))?;
        rows.collect::<Result<_, _>>().map_err(self.fail(sql))
    }

    /// The operator's redrive of a dead letter: one transaction that deletes its row
    /// (`StoreError::NoDeadLetter` when there is none) and adds the corrected `delta` to the
    /// total, so a record counts once however often its redrive is repeated. Returns the total.
    pub fn redrive(&mut self, group: &str, partition: u32, offset: u64, delta: i64) -> Result<i64, StoreError> {
        self.check_partition(partition)?;
        // No crash point names this write: its hook does nothing.
        self.write(&mut || {}, |write| {
            let sql = "DELETE FROM dead_letters WHERE grp = ?1 AND part = ?2 AND log_offset = ?3";
            if write.exec(sql, params![group, partition, offset])? == 0 {
                // Returning the error rolls the transaction back; nothing was written anyway.
                return Err(StoreError::NoDeadLetter { group: group.to_string(), partition, offset });
            }
            add_delta(write, group, partition, &Item { offset, delta })?;
            write.row("SELECT total FROM effect WHERE grp = ?1", params![group], |row| row.get(0))
        })
    }
}

impl Write<'_> {
    /// Runs one cached statement of the transaction; returns the rows it changed. The error
    /// names the SQL that failed.
    fn exec(&self, sql: &'static str, params: impl rusqlite::Params) -> Result<usize, StoreError> {
        self.tx.prepare_cached(sql).and_then(|mut statement| statement.execute(params)).map_err(fail_with(
            self.path,
            sql,
            self.waited,
        ))
    }

    /// Runs one cached statement of the transaction and collects every row it returns.
    fn rows<T>(
        &self,
        sql: &'static str,
        params: impl rusqlite::Params,
        map: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>, StoreError> {
        self.tx
            .prepare_cached(sql)
            .and_then(|mut statement| statement.query_map(params, map)?.collect())
            .map_err(fail_with(self.path, sql, self.waited))
    }

    /// Runs one cached statement of the transaction that returns exactly one row.
    fn row<T>(
        &self,
        sql: &'static str,
        params: impl rusqlite::Params,
        map: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        self.tx.prepare_cached(sql).and_then(|mut statement| statement.query_row(params, map)).map_err(fail_with(
            self.path,
            sql,
            self.waited,
        ))
    }
}

/// Adds `item`'s delta to `group`'s total inside `write`'s transaction, refusing a sum outside
/// `i64` with `StoreError::Overflow` (which rolls the transaction back). A group without an
/// effect row is left as it is, as the plain `UPDATE` did.
fn add_delta(write: &Write<'_>, group: &str, partition: u32, item: &Item) -> Result<(), StoreError> {
    let (low, high) = totals_accepting(item.delta);
    if write.exec(ADD_DELTA_SQL, params![group, item.delta, low, high])? == 1 {
        return Ok(());
    }
    let sql = "SELECT total FROM effect WHERE grp = ?1";
    let total: Option<i64> = write
        .tx
        .query_row(sql, params![group], |row| row.get(0))
        .optional()
        .map_err(fail_with(write.path, sql, write.waited))?;
    match total {
        Some(total) => {
            let (group, offset, delta) = (group.to_string(), item.offset, item.delta);
            Err(StoreError::Overflow { group, partition, offset, total, delta })
        }
        None => Ok(()),
    }
}

/// Whether the file at `path` is empty (0 bytes) or starts with SQLite's complete 100-byte
/// header (its first 16 bytes "SQLite format 3\0"); a file that cannot be read is neither.
fn is_empty_or_sqlite(path: &Path) -> bool {
    use std::io::Read;
    let Ok(mut file) = std::fs::File::open(path) else { return false };
    let Ok(metadata) = file.metadata() else { return false };
    if !metadata.is_file() {
        return false;
    }
    if metadata.len() == 0 {
        return true;
    }
    let mut header = [0u8; 100];
    file.read_exact(&mut header).is_ok() && header.starts_with(b"SQLite format 3\0")
}

/// `StoreError::AlreadyExists` when the database `conn` holds a table or a schema version.
fn refuse_initialised(conn: &Connection, path: &Path, waited: Duration) -> Result<(), StoreError> {
    let sql = "SELECT count(*) FROM sqlite_master";
    let tables: i64 = conn.query_row(sql, [], |row| row.get(0)).map_err(fail_with(path, sql, waited))?;
    let sql = "PRAGMA user_version";
    let version: i64 =
        conn.pragma_query_value(None, "user_version", |row| row.get(0)).map_err(fail_with(path, sql, waited))?;
    if tables > 0 || version != 0 {
        return Err(StoreError::AlreadyExists { path: path.to_path_buf() });
    }
    Ok(())
}

/// The error of a failed statement (see `classify`).
fn fail_with<'a>(path: &'a Path, sql: &'static str, waited: Duration) -> impl Fn(rusqlite::Error) -> StoreError + 'a {
    move |source| classify(path, sql, source, waited)
}

/// The fence of a transaction: `StoreError::Fenced` when the stored epoch is not the `fence`'s
/// (none, nothing checked). Returning the error drops the transaction, which rolls it back.
fn check_fence(write: &Write<'_>, group: &str, partition: u32, fence: Option<i64>) -> Result<(), StoreError> {
    let Some(held) = fence else { return Ok(()) };
    let sql = "SELECT epoch FROM progress WHERE grp = ?1 AND part = ?2";
    let current = write.row(sql, params![group, partition], |row| row.get(0))?;
    if current != held {
        return Err(StoreError::Fenced { group: group.to_string(), partition, held, current });
    }
    Ok(())
}

/// The `txns` of one (group, partition) inside an output section.
struct SqliteTxns<'a, 'w> {
    write: &'a Write<'w>,
    group: &'a str,
    partition: u32,
}

impl TxnTable for SqliteTxns<'_, '_> {
    fn state(&mut self, first_output: u64) -> Result<Option<TxnState>, StoreError> {
        let (write, group, partition) = (self.write, self.group, self.partition);
        let state: Option<String> = write
            .tx
            .prepare_cached(TXN_STATE_SQL)
            .and_then(|mut statement| {
                statement.query_row(params![group, partition, first_output], |row| row.get(0)).optional()
            })
            .map_err(fail_with(write.path, TXN_STATE_SQL, write.waited))?;
        state.map(|state| parse_state(group, partition, first_output, state)).transpose()
    }

    fn record_aborted(&mut self, row: &TxnRow) -> Result<(), StoreError> {
        assert_eq!((row.group.as_str(), row.partition), (self.group, self.partition), "a section's own partition");
        assert_eq!(row.state, TxnState::Aborted, "record_aborted records an abort");
        insert_txn(self.write, row)
    }
}

/// Inserts one `txns` row.
fn insert_txn(write: &Write<'_>, txn: &TxnRow) -> Result<(), StoreError> {
    let TxnRow { group, partition, first_output, epoch, input_offset, input_end, state } = txn;
    let values = params![group, partition, first_output, epoch, input_offset, input_end, state.name()];
    write.exec(INSERT_TXN_SQL, values).map(|_| ())
}

/// A `txns.state` value as a `TxnState` (`StoreError::BadTxnState` for another text).
fn parse_state(group: &str, partition: u32, first_output: u64, state: String) -> Result<TxnState, StoreError> {
    TxnState::from_name(&state).ok_or(StoreError::BadTxnState {
        group: group.to_string(),
        partition,
        first_output,
        state,
    })
}

/// A record's counted attempts and last error, if any attempt was counted.
fn read_attempts(
    write: &Write<'_>,
    group: &str,
    partition: u32,
    offset: u64,
) -> Result<Option<(u64, String)>, StoreError> {
    write
        .tx
        .prepare_cached(ATTEMPTS_SQL)
        .and_then(|mut statement| {
            statement.query_row(params![group, partition, offset], |row| Ok((row.get(0)?, row.get(1)?))).optional()
        })
        .map_err(fail_with(write.path, ATTEMPTS_SQL, write.waited))
}

/// A record's effect: its delta added to the total, or (a set) its own value `v(o) = o + 1`.
fn apply_effect(
    write: &Write<'_>,
    group: &str,
    partition: u32,
    item: &Item,
    effect: EffectKind,
) -> Result<(), StoreError> {
    match effect {
        EffectKind::Add => add_delta(write, group, partition, item),
        EffectKind::Set => write.exec(SET_VALUE_SQL, params![group, set_value(item.offset)]).map(|_| ()),
    }
}

/// An applied record's fact, and its outbox row, as `also` says.
fn record_fact(
    write: &Write<'_>,
    (group, partition, offset): (&str, u32, u64),
    also: AtomicAlso,
) -> Result<(), StoreError> {
    match also {
        AtomicAlso::Nothing => {}
        AtomicAlso::Fact => {
            write.exec(INSERT_FACT_SQL, params![group, partition, offset])?;
        }
        AtomicAlso::FactAndOutbox => {
            write.exec(INSERT_FACT_SQL, params![group, partition, offset])?;
            write.exec(INSERT_OUTBOX_SQL, params![group, partition, offset])?;
        }
    }
    Ok(())
}

fn is_processed(write: &Write<'_>, group: &str, partition: u32, offset: u64) -> Result<bool, StoreError> {
    write
        .tx
        .query_row(PROCESSED_SQL, params![group, partition, offset], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
        .map_err(fail_with(write.path, PROCESSED_SQL, write.waited))
}

/// How long a blocked statement sleeps before trying again. SQLite's own busy handler backs off
/// to 100 ms sleeps, and an owner committing in a tight loop then wins the lock back every
/// time: a waiting `claim` starved for seconds. Polling this often lands in the gaps between
/// another process's transactions.
const BUSY_POLL: Duration = Duration::from_micros(250);

/// The busy budget, in polls, of this process's connections (the handler is a plain `fn`, so
/// it cannot capture the timeout; every store of a process uses the same one).
static BUSY_POLLS_MAX: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

fn busy_poll(attempts: i32) -> bool {
    if attempts >= BUSY_POLLS_MAX.load(std::sync::atomic::Ordering::Relaxed) {
        return false;
    }
    std::thread::sleep(BUSY_POLL);
    true
}

/// Opens a connection whose blocked statements wait up to `busy_timeout`, polling often, so
/// competing owners wait rather than fail.
fn connect(path: &Path, options: StoreOptions) -> Result<Connection, StoreError> {
    let fail = |sql| move |source| classify(path, sql, source, options.busy_timeout);
    let conn = Connection::open(path).map_err(fail("open"))?;
    let polls = (options.busy_timeout.as_secs_f64() / BUSY_POLL.as_secs_f64()).ceil().min(f64::from(i32::MAX)) as i32;
    BUSY_POLLS_MAX.store(polls, std::sync::atomic::Ordering::Relaxed);
    conn.busy_handler(Some(busy_poll)).map_err(fail("busy_handler"))?;
    Ok(conn)
}

/// Sets the journal mode and the synchronous level that makes every COMMIT durable before it
/// returns, power cuts included: in DELETE mode `EXTRA`, since `FULL` does not sync the
/// directory after the journal's unlink, which is the commit (a cut right after it brings the
/// journal back, hot, and the commit is rolled back); in WAL mode `FULL` (the WAL is synced at
/// every commit, its directory once when it is made).
/// (`Synchronous::Full` keeps `FULL` in DELETE mode too, for `consumer power-cuts` to show what
/// a cut takes back then.)
fn set_durability(conn: &Connection, path: &Path, journal: Journal, options: StoreOptions) -> Result<(), StoreError> {
    let fail = |sql| move |source| classify(path, sql, source, options.busy_timeout);
    let (mode, synchronous, sql) = match (journal, options.synchronous) {
        (Journal::Delete, Synchronous::Durable) => ("DELETE", "EXTRA", "PRAGMA synchronous = EXTRA"),
        (Journal::Delete, Synchronous::Full) => ("DELETE", "FULL", "PRAGMA synchronous = FULL"),
        (Journal::Wal, Synchronous::Durable | Synchronous::Full) => ("WAL", "FULL", "PRAGMA synchronous = FULL"),
    };
    conn.pragma_update(None, "journal_mode", mode).map_err(fail("PRAGMA journal_mode"))?;
    conn.pragma_update(None, "synchronous", synchronous).map_err(fail(sql))?;
    Ok(())
}

/// Turns SQLite's busy/locked errors into `Locked`, everything else into `Sqlite` with its SQL.
fn classify(path: &Path, sql: &'static str, source: rusqlite::Error, waited: Duration) -> StoreError {
    match source.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            StoreError::Locked { path: path.to_path_buf(), waited }
        }
        _ => StoreError::Sqlite { path: path.to_path_buf(), sql, source },
    }
}
