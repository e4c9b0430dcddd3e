//! The store: per group the effect, per (group, partition) progress, epoch and stamp, the
//! processed-id table, the failed attempts and dead letters of poison records, and the recorded
//! resets past retained records. Two backends: SQLite (`SqliteStore`, here, the default), where
//! every write is one explicit `BEGIN IMMEDIATE` transaction, and PostgreSQL
//! (`crate::pgstore::PgStore`); `Store` dispatches to either.

use rusqlite::{params, Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior};
use serde::Serialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The schema version in `PRAGMA user_version`; a database with another one is refused.
pub const SCHEMA_VERSION: i64 = 3;

const SCHEMA: &str = "
    CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
    CREATE TABLE effect (grp TEXT PRIMARY KEY, total INTEGER NOT NULL);
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
";

/// SQLite's journal mode: DELETE (the mission's scenario, the default) or WAL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Journal {
    Delete,
    Wal,
}

impl std::str::FromStr for Journal {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "delete" => Ok(Journal::Delete),
            "wal" => Ok(Journal::Wal),
            other => Err(format!("unknown journal mode '{other}' (expected delete or wal)")),
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct StoreOptions {
    pub journal: Journal,
    /// How long a writer waits for another process's transaction before giving up.
    pub busy_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions { journal: Journal::Delete, busy_timeout: Duration::from_secs(5) }
    }
}

#[derive(Debug)]
pub enum StoreError {
    /// A statement failed; carries the database path and the SQL.
    Sqlite {
        path: PathBuf,
        sql: &'static str,
        source: rusqlite::Error,
    },
    /// Another process held the database past the busy timeout.
    Locked {
        path: PathBuf,
        waited: Duration,
    },
    SchemaVersion {
        path: PathBuf,
        found: i64,
    },
    NotInitialized {
        path: PathBuf,
    },
    AlreadyExists {
        path: PathBuf,
    },
    /// A fenced write found a newer epoch than the owner's: the owner is a zombie.
    Fenced {
        group: String,
        partition: u32,
        held: i64,
        current: i64,
    },
    NoSuchPartition {
        partition: u32,
        partitions: u32,
    },
    /// A redrive named a record that is not in the dead-letter table.
    NoDeadLetter {
        group: String,
        partition: u32,
        offset: u64,
    },
    /// A PostgreSQL statement failed; carries the connection target (never the password) and
    /// the SQL.
    Postgres {
        target: String,
        sql: &'static str,
        source: postgres::Error,
    },
    /// The PostgreSQL database has no store schema (run `consumer init --store URL`).
    PgNotInitialized {
        target: String,
    },
    /// `consumer init` found the store's tables in the PostgreSQL database.
    PgAlreadyInitialised {
        target: String,
    },
    PgSchemaVersion {
        target: String,
        found: i64,
    },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Sqlite { path, sql, source } => {
                write!(
                    f,
                    "database {}: {source} (in: {})",
                    path.display(),
                    sql.split_whitespace().collect::<Vec<_>>().join(" ")
                )
            }
            StoreError::Locked { path, waited } => {
                write!(
                    f,
                    "database {} is locked by another process (waited {:.1} s)",
                    path.display(),
                    waited.as_secs_f64()
                )
            }
            StoreError::SchemaVersion { path, found } => {
                write!(
                    f,
                    "database {} has schema version {found}, this build reads version {SCHEMA_VERSION}",
                    path.display()
                )
            }
            StoreError::AlreadyExists { path } => write!(f, "database {} exists already", path.display()),
            StoreError::NotInitialized { path } => {
                write!(f, "database {} is not initialised (run `consumer init`)", path.display())
            }
            StoreError::Fenced { group, partition, held, current } => write!(
                f,
                "fenced: group {group} partition {partition} is at epoch {current}, this owner holds epoch {held}"
            ),
            StoreError::NoSuchPartition { partition, partitions } => {
                write!(f, "partition {partition} does not exist (the store has {partitions})")
            }
            StoreError::NoDeadLetter { group, partition, offset } => {
                write!(f, "no dead letter for group {group} partition {partition} offset {offset}")
            }
            StoreError::Postgres { target, sql, source } => {
                // The driver's own text of a server error is only "db error"; the server's
                // message and SQLSTATE say what went wrong.
                let cause = match source.as_db_error() {
                    Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
                    None => source.to_string(),
                };
                write!(f, "database {target}: {cause} (in: {})", sql.split_whitespace().collect::<Vec<_>>().join(" "))
            }
            StoreError::PgNotInitialized { target } => {
                write!(f, "database {target} is not initialised (run `consumer init --store URL`)")
            }
            StoreError::PgAlreadyInitialised { target } => write!(f, "database {target} is already initialised"),
            StoreError::PgSchemaVersion { target, found } => {
                write!(f, "database {target} has schema version {found}, this build reads version {SCHEMA_VERSION}")
            }
        }
    }
}

impl std::error::Error for StoreError {}

/// One (group, partition) row of `progress`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProgressRow {
    pub next_offset: u64,
    pub epoch: i64,
    pub owner: String,
    pub stamp: Option<u64>,
}

/// How a write guards itself: `atomic` writes blindly, `atomic-fenced` checks the epoch,
/// `atomic-cas` serialises on the stored next offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    Blind,
    Fenced { epoch: i64 },
    Cas,
}

/// A record a write concerns: its offset and its delta.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    pub offset: u64,
    pub delta: i64,
}

/// What a poison record's transaction keeps of its failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    /// atomic-dlq: count the attempt durably, up to `max_attempts`; no attempt once counted.
    Count { max_attempts: u64 },
    /// skip-poison, retry-forever: keep nothing (the transaction rolls back).
    Forget,
}

/// What a poison record's transaction did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoisonAttempt {
    /// The effect was attempted and failed; `attempts` is the durable count after the
    /// transaction (0 under `FailurePolicy::Forget`).
    Failed { attempts: u64 },
    /// `max_attempts` were already counted: nothing was attempted and nothing written.
    Exhausted { attempts: u64 },
}

/// One row of the dead-letter table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeadLetter {
    pub group: String,
    pub partition: u32,
    pub offset: u64,
    pub attempts: u64,
    pub error: String,
    pub payload: Vec<u8>,
}

/// One row of the reset table: the group's next offset of `partition` moved from `from` to
/// `to` (the log start) because retention removed the records in between.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Reset {
    pub group: String,
    pub partition: u32,
    pub from: u64,
    pub to: u64,
}

/// The phases of a write a crash point can name; `Inside` runs after the statements and
/// before COMMIT, so a crash there leaves an uncommitted transaction behind.
pub type InsideHook<'a> = &'a mut dyn FnMut();

pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    busy_timeout: Duration,
    partitions: u32,
    journal: Journal,
}

impl SqliteStore {
    /// Creates a store for `partitions` partitions (failing if one exists already).
    pub fn create(path: &Path, partitions: u32, options: StoreOptions) -> Result<SqliteStore, StoreError> {
        if path.exists() {
            return Err(StoreError::AlreadyExists { path: path.to_path_buf() });
        }
        let conn = connect(path, options)?;
        set_durability(&conn, path, options.journal, options.busy_timeout)?;
        let sql = "schema and meta";
        let fail = |source| StoreError::Sqlite { path: path.to_path_buf(), sql, source };
        conn.execute_batch(SCHEMA).map_err(fail)?;
        conn.execute("INSERT INTO meta (key, value) VALUES ('partitions', ?1)", params![partitions]).map_err(fail)?;
        let wal = i64::from(options.journal == Journal::Wal);
        conn.execute("INSERT INTO meta (key, value) VALUES ('wal', ?1)", params![wal]).map_err(fail)?;
        conn.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(fail)?;
        SqliteStore::open(path, options)
    }

    /// Opens an existing store, checking its schema version, in the journal mode chosen at
    /// creation. Rolls back any transaction a crashed process left uncommitted (SQLite does so
    /// on first access of a hot journal or WAL). Only `busy_timeout` is taken from `options`.
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
        let sql = "SELECT value FROM meta WHERE key = 'partitions'";
        let partitions: u32 = conn
            .query_row(sql, [], |row| row.get(0))
            .map_err(|source| classify(path, sql, source, options.busy_timeout))?;
        let sql = "SELECT value FROM meta WHERE key = 'wal'";
        let wal: i64 = conn
            .query_row(sql, [], |row| row.get(0))
            .map_err(|source| classify(path, sql, source, options.busy_timeout))?;
        let journal = if wal == 1 { Journal::Wal } else { Journal::Delete };
        set_durability(&conn, path, journal, options.busy_timeout)?;
        Ok(SqliteStore { conn, path: path.to_path_buf(), busy_timeout: options.busy_timeout, partitions, journal })
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
        move |source| classify(&self.path, sql, source, self.busy_timeout)
    }

    fn begin(&mut self) -> Result<Transaction<'_>, StoreError> {
        let (path, timeout) = (self.path.clone(), self.busy_timeout);
        self.conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|source| classify(&path, "BEGIN IMMEDIATE", source, timeout))
    }

    /// Creates the group's rows if missing: total 0, and per partition next offset 0 at epoch 1
    /// owned by `initial_owner` (spec.md §2.4). Idempotent.
    pub fn ensure_group(&mut self, group: &str, initial_owner: &str) -> Result<(), StoreError> {
        let partitions = self.partitions;
        let (path_buf, timeout) = (self.path.clone(), self.busy_timeout);
        let path = path_buf.as_path();
        let fail = |sql| move |source| classify(path, sql, source, timeout);
        let tx = self.begin()?;
        let sql = "INSERT OR IGNORE INTO effect (grp, total) VALUES (?1, 0)";
        exec(&tx, path, timeout, sql, params![group])?;
        for partition in 0..partitions {
            let sql = "INSERT OR IGNORE INTO progress (grp, part, next_offset, epoch, owner) VALUES (?1, ?2, 0, 1, ?3)";
            exec(&tx, path, timeout, sql, params![group, partition, initial_owner])?;
        }
        tx.commit().map_err(fail("COMMIT"))
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
        let (path_buf, timeout) = (self.path.clone(), self.busy_timeout);
        let path = path_buf.as_path();
        let fail = |sql| move |source| classify(path, sql, source, timeout);
        let tx = self.begin()?;
        let sql = "UPDATE progress SET epoch = epoch + 1, owner = ?3 WHERE grp = ?1 AND part = ?2 RETURNING epoch";
        let epoch = tx
            .prepare_cached(sql)
            .and_then(|mut statement| statement.query_row(params![group, partition, owner], |row| row.get(0)))
            .map_err(fail(sql))?;
        tx.commit().map_err(fail("COMMIT"))?;
        Ok(epoch)
    }

    /// `apply-effect`: adds each item's delta to the total. With `unless_processed`
    /// (dedup-separate) an item whose id is in the processed table is skipped. Returns, per
    /// item, whether it was applied.
    pub fn add_effect(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        unless_processed: bool,
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        let (path_buf, timeout) = (self.path.clone(), self.busy_timeout);
        let path = path_buf.as_path();
        let fail = |sql| move |source| classify(path, sql, source, timeout);
        let tx = self.begin()?;
        let mut applied = Vec::with_capacity(items.len());
        for item in items {
            let skip =
                unless_processed && is_processed(&tx, group, partition, item.offset).map_err(fail(PROCESSED_SQL))?;
            if !skip {
                let sql = ADD_EFFECT_SQL;
                exec(&tx, path, timeout, sql, params![group, item.delta])?;
            }
            applied.push(!skip);
        }
        finish(tx, inside, path, timeout)?;
        Ok(applied)
    }

    /// `insert-processed`: records the items' ids (dedup-separate's separate write).
    pub fn insert_processed(
        &mut self,
        group: &str,
        partition: u32,
        offsets: &[u64],
        inside: InsideHook<'_>,
    ) -> Result<(), StoreError> {
        let (path_buf, timeout) = (self.path.clone(), self.busy_timeout);
        let path = path_buf.as_path();
        let tx = self.begin()?;
        for offset in offsets {
            let sql = "INSERT OR IGNORE INTO processed (grp, part, log_offset) VALUES (?1, ?2, ?3)";
            exec(&tx, path, timeout, sql, params![group, partition, offset])?;
        }
        finish(tx, inside, path, timeout)
    }

    /// `commit-offset`: writes the next offset blindly (no guard), as a plain consumer does.
    pub fn commit_offset(
        &mut self,
        group: &str,
        partition: u32,
        next_offset: u64,
        inside: InsideHook<'_>,
    ) -> Result<(), StoreError> {
        let (path_buf, timeout) = (self.path.clone(), self.busy_timeout);
        let path = path_buf.as_path();
        let tx = self.begin()?;
        let sql = "UPDATE progress SET next_offset = ?3 WHERE grp = ?1 AND part = ?2";
        exec(&tx, path, timeout, sql, params![group, partition, next_offset])?;
        finish(tx, inside, path, timeout)
    }

    /// `apply-stamped`: for each item, set-if-newer: the delta is added and the stamp moved only
    /// when the offset is strictly above the stamp, in the same statement.
    pub fn apply_stamped(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        let (path_buf, timeout) = (self.path.clone(), self.busy_timeout);
        let path = path_buf.as_path();
        let tx = self.begin()?;
        let mut applied = Vec::with_capacity(items.len());
        for item in items {
            let sql = "UPDATE progress SET stamp = ?3 WHERE grp = ?1 AND part = ?2 AND (stamp IS NULL OR stamp < ?3)";
            let newer = exec(&tx, path, timeout, sql, params![group, partition, item.offset])? == 1;
            if newer {
                let sql = ADD_EFFECT_SQL;
                exec(&tx, path, timeout, sql, params![group, item.delta])?;
            }
            applied.push(newer);
        }
        finish(tx, inside, path, timeout)?;
        Ok(applied)
    }

    /// `apply-deduped`: per item, insert its id and add its delta, unless the id is present.
    pub fn apply_deduped(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        let (path_buf, timeout) = (self.path.clone(), self.busy_timeout);
        let path = path_buf.as_path();
        let tx = self.begin()?;
        let mut applied = Vec::with_capacity(items.len());
        for item in items {
            let sql = "INSERT OR IGNORE INTO processed (grp, part, log_offset) VALUES (?1, ?2, ?3)";
            let fresh = exec(&tx, path, timeout, sql, params![group, partition, item.offset])? == 1;
            if fresh {
                let sql = ADD_EFFECT_SQL;
                exec(&tx, path, timeout, sql, params![group, item.delta])?;
            }
            applied.push(fresh);
        }
        finish(tx, inside, path, timeout)?;
        Ok(applied)
    }

    /// `apply-atomic`: the effects and the next offset in one transaction. `Fenced` aborts with
    /// `StoreError::Fenced` when the stored epoch is not the owner's; `Cas` reads the stored next
    /// offset and skips items below it. Returns, per item, whether it was applied.
    pub fn apply_atomic(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        guard: Guard,
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        let (path_buf, timeout) = (self.path.clone(), self.busy_timeout);
        let path = path_buf.as_path();
        let fail = |sql| move |source| classify(path, sql, source, timeout);
        let tx = self.begin()?;
        let sql = "SELECT next_offset, epoch FROM progress WHERE grp = ?1 AND part = ?2";
        let (stored, epoch): (u64, i64) = tx
            .prepare_cached(sql)
            .and_then(|mut statement| {
                statement.query_row(params![group, partition], |row| Ok((row.get(0)?, row.get(1)?)))
            })
            .map_err(fail(sql))?;
        if let Guard::Fenced { epoch: held } = guard {
            if held != epoch {
                // Dropping the transaction rolls it back: nothing of the zombie's lands.
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
                let sql = ADD_EFFECT_SQL;
                exec(&tx, path, timeout, sql, params![group, item.delta])?;
                next = item.offset + 1;
            }
            applied.push(apply);
        }
        if applied.iter().any(|&a| a) {
            let sql = "UPDATE progress SET next_offset = ?3 WHERE grp = ?1 AND part = ?2";
            exec(&tx, path, timeout, sql, params![group, partition, next])?;
        }
        finish(tx, inside, path, timeout)?;
        Ok(applied)
    }

    /// `apply-atomic` on a poison record, whose effect fails every time: one transaction that
    /// checks the epoch first (`StoreError::Fenced` when `epoch` is stale), then attempts the
    /// effect. Under `FailurePolicy::Count` the failure is counted in `attempts`, with `error`,
    /// in the same transaction, unless `max_attempts` are counted already (then nothing is
    /// attempted or written); under `FailurePolicy::Forget` the transaction rolls back.
    #[allow(clippy::too_many_arguments)]
    pub fn poison_attempt(
        &mut self,
        group: &str,
        partition: u32,
        offset: u64,
        epoch: i64,
        policy: FailurePolicy,
        error: &str,
        inside: InsideHook<'_>,
    ) -> Result<PoisonAttempt, StoreError> {
        let (path_buf, timeout) = (self.path.clone(), self.busy_timeout);
        let path = path_buf.as_path();
        let fail = |sql| move |source| classify(path, sql, source, timeout);
        let tx = self.begin()?;
        check_epoch(&tx, group, partition, epoch, path, timeout)?;
        let max_attempts = match policy {
            FailurePolicy::Count { max_attempts } => max_attempts,
            FailurePolicy::Forget => {
                // The effect failed and nothing of the attempt is kept.
                inside();
                tx.rollback().map_err(fail("ROLLBACK"))?;
                return Ok(PoisonAttempt::Failed { attempts: 0 });
            }
        };
        let counted = read_attempts(&tx, group, partition, offset)
            .map_err(fail(ATTEMPTS_SQL))?
            .map_or(0, |(attempts, _)| attempts);
        if counted >= max_attempts {
            inside();
            tx.rollback().map_err(fail("ROLLBACK"))?;
            return Ok(PoisonAttempt::Exhausted { attempts: counted });
        }
        let sql = "INSERT INTO attempts (grp, part, log_offset, attempts, error) VALUES (?1, ?2, ?3, 1, ?4)
                   ON CONFLICT (grp, part, log_offset) DO UPDATE SET attempts = attempts + 1, error = excluded.error
                   RETURNING attempts";
        let attempts = tx
            .prepare_cached(sql)
            .and_then(|mut statement| statement.query_row(params![group, partition, offset, error], |row| row.get(0)))
            .map_err(fail(sql))?;
        finish(tx, inside, path, timeout)?;
        Ok(PoisonAttempt::Failed { attempts })
    }

    /// `dead-letter`: one transaction that checks the epoch first (`StoreError::Fenced` when
    /// `epoch` is stale), inserts the record into the dead-letter table with its counted
    /// attempts and last error (`error` when none was counted) and its payload, and sets the
    /// next offset past it. Returns the attempts.
    #[allow(clippy::too_many_arguments)]
    pub fn dead_letter(
        &mut self,
        group: &str,
        partition: u32,
        offset: u64,
        epoch: i64,
        payload: &[u8],
        error: &str,
        inside: InsideHook<'_>,
    ) -> Result<u64, StoreError> {
        let (path_buf, timeout) = (self.path.clone(), self.busy_timeout);
        let path = path_buf.as_path();
        let fail = |sql| move |source| classify(path, sql, source, timeout);
        let tx = self.begin()?;
        check_epoch(&tx, group, partition, epoch, path, timeout)?;
        let (attempts, error) =
            read_attempts(&tx, group, partition, offset).map_err(fail(ATTEMPTS_SQL))?.unwrap_or((0, error.to_string()));
        let sql = "INSERT INTO dead_letters (grp, part, log_offset, error, attempts, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
        tx.prepare_cached(sql)
            .and_then(|mut statement| statement.execute(params![group, partition, offset, error, attempts, payload]))
            .map_err(fail(sql))?;
        let sql = "UPDATE progress SET next_offset = ?3 WHERE grp = ?1 AND part = ?2";
        exec(&tx, path, timeout, sql, params![group, partition, offset + 1])?;
        finish(tx, inside, path, timeout)?;
        Ok(attempts)
    }

    /// `reset-offset` (`--on-out-of-range earliest`): one transaction that checks the epoch
    /// first (`StoreError::Fenced` when `epoch` is stale), records the reset from the stored
    /// next offset to `to` (the log start) and sets the next offset to `to`. Returns the
    /// stored next offset it reset from.
    pub fn reset_offset(
        &mut self,
        group: &str,
        partition: u32,
        epoch: i64,
        to: u64,
        inside: InsideHook<'_>,
    ) -> Result<u64, StoreError> {
        let (path_buf, timeout) = (self.path.clone(), self.busy_timeout);
        let path = path_buf.as_path();
        let fail = |sql| move |source| classify(path, sql, source, timeout);
        let tx = self.begin()?;
        check_epoch(&tx, group, partition, epoch, path, timeout)?;
        let sql = "SELECT next_offset FROM progress WHERE grp = ?1 AND part = ?2";
        let from: u64 = tx
            .prepare_cached(sql)
            .and_then(|mut statement| statement.query_row(params![group, partition], |row| row.get(0)))
            .map_err(fail(sql))?;
        // The table is a set, as the model's: recording the same reset twice keeps one row.
        let sql = "INSERT OR IGNORE INTO resets (grp, part, from_offset, to_offset) VALUES (?1, ?2, ?3, ?4)";
        exec(&tx, path, timeout, sql, params![group, partition, from, to])?;
        let sql = "UPDATE progress SET next_offset = ?3 WHERE grp = ?1 AND part = ?2";
        exec(&tx, path, timeout, sql, params![group, partition, to])?;
        finish(tx, inside, path, timeout)?;
        Ok(from)
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
        let (path_buf, timeout) = (self.path.clone(), self.busy_timeout);
        let path = path_buf.as_path();
        let fail = |sql| move |source| classify(path, sql, source, timeout);
        let tx = self.begin()?;
        let sql = "DELETE FROM dead_letters WHERE grp = ?1 AND part = ?2 AND log_offset = ?3";
        let deleted = exec(&tx, path, timeout, sql, params![group, partition, offset])?;
        if deleted == 0 {
            // Dropping the transaction rolls it back; nothing was written anyway.
            return Err(StoreError::NoDeadLetter { group: group.to_string(), partition, offset });
        }
        let sql = "UPDATE effect SET total = total + ?2 WHERE grp = ?1 RETURNING total";
        let total = tx
            .prepare_cached(sql)
            .and_then(|mut statement| statement.query_row(params![group, delta], |row| row.get(0)))
            .map_err(fail(sql))?;
        tx.commit().map_err(fail("COMMIT"))?;
        Ok(total)
    }
}

/// The fence of a transaction: `StoreError::Fenced` when the stored epoch is not `held`.
/// Returning the error drops the transaction, which rolls it back.
fn check_epoch(
    tx: &Transaction<'_>,
    group: &str,
    partition: u32,
    held: i64,
    path: &Path,
    waited: Duration,
) -> Result<(), StoreError> {
    let sql = "SELECT epoch FROM progress WHERE grp = ?1 AND part = ?2";
    let current = tx
        .prepare_cached(sql)
        .and_then(|mut statement| statement.query_row(params![group, partition], |row| row.get(0)))
        .map_err(|source| classify(path, sql, source, waited))?;
    if current != held {
        return Err(StoreError::Fenced { group: group.to_string(), partition, held, current });
    }
    Ok(())
}

const ATTEMPTS_SQL: &str = "SELECT attempts, error FROM attempts WHERE grp = ?1 AND part = ?2 AND log_offset = ?3";

/// A record's counted attempts and last error, if any attempt was counted.
fn read_attempts(
    tx: &Transaction<'_>,
    group: &str,
    partition: u32,
    offset: u64,
) -> Result<Option<(u64, String)>, rusqlite::Error> {
    tx.prepare_cached(ATTEMPTS_SQL)?
        .query_row(params![group, partition, offset], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()
}

/// The effect: a record's delta added to its group's total.
const ADD_EFFECT_SQL: &str = "UPDATE effect SET total = total + ?2 WHERE grp = ?1";

/// Runs one cached statement of a transaction; the error names the SQL that failed.
fn exec(
    tx: &Transaction<'_>,
    path: &Path,
    waited: Duration,
    sql: &'static str,
    params: impl rusqlite::Params,
) -> Result<usize, StoreError> {
    tx.prepare_cached(sql)
        .and_then(|mut statement| statement.execute(params))
        .map_err(|source| classify(path, sql, source, waited))
}

/// Commits, after running the `inside` hook (a crash point) with the transaction open.
fn finish(tx: Transaction<'_>, inside: InsideHook<'_>, path: &Path, waited: Duration) -> Result<(), StoreError> {
    inside();
    tx.commit().map_err(|source| classify(path, "COMMIT", source, waited))
}

const PROCESSED_SQL: &str = "SELECT 1 FROM processed WHERE grp = ?1 AND part = ?2 AND log_offset = ?3";

fn is_processed(tx: &Transaction<'_>, group: &str, partition: u32, offset: u64) -> Result<bool, rusqlite::Error> {
    tx.query_row(PROCESSED_SQL, params![group, partition, offset], |_| Ok(())).optional().map(|found| found.is_some())
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

/// Sets the journal mode and `synchronous=FULL`: every COMMIT is durable before it returns.
fn set_durability(conn: &Connection, path: &Path, journal: Journal, waited: Duration) -> Result<(), StoreError> {
    let fail = |sql| move |source| classify(path, sql, source, waited);
    let mode = match journal {
        Journal::Delete => "DELETE",
        Journal::Wal => "WAL",
    };
    conn.pragma_update(None, "journal_mode", mode).map_err(fail("PRAGMA journal_mode"))?;
    conn.pragma_update(None, "synchronous", "FULL").map_err(fail("PRAGMA synchronous = FULL"))?;
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
/// and the conformance harness keep naming one concrete type `Store` with the same methods as
/// before, nothing is boxed, and each method is a two-armed `match` that the compiler checks
/// for exhaustiveness. The SQLite arm calls the unchanged `SqliteStore`, so its behaviour is
/// exactly what it was; `Store::create` and `Store::open` still take an SQLite path, and
/// `create_at` / `open_at` take a `Location`.
pub enum Store {
    Sqlite(SqliteStore),
    Postgres(crate::pgstore::PgStore),
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
    /// Creates an SQLite store (see `SqliteStore::create`).
    pub fn create(path: &Path, partitions: u32, options: StoreOptions) -> Result<Store, StoreError> {
        SqliteStore::create(path, partitions, options).map(Store::Sqlite)
    }

    /// Opens an SQLite store (see `SqliteStore::open`).
    pub fn open(path: &Path, options: StoreOptions) -> Result<Store, StoreError> {
        SqliteStore::open(path, options).map(Store::Sqlite)
    }

    /// Creates a store of either backend; PostgreSQL ignores the journal mode.
    pub fn create_at(location: &Location, partitions: u32, options: StoreOptions) -> Result<Store, StoreError> {
        match location {
            Location::Sqlite(path) => Store::create(path, partitions, options),
            Location::Postgres(url) => crate::pgstore::PgStore::create(url, partitions, options).map(Store::Postgres),
        }
    }

    /// Opens a store of either backend.
    pub fn open_at(location: &Location, options: StoreOptions) -> Result<Store, StoreError> {
        match location {
            Location::Sqlite(path) => Store::open(path, options),
            Location::Postgres(url) => crate::pgstore::PgStore::open(url, options).map(Store::Postgres),
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

    pub fn claim(&mut self, group: &str, partition: u32, owner: &str) -> Result<i64, StoreError> {
        dispatch!(self, s => s.claim(group, partition, owner))
    }

    pub fn add_effect(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        unless_processed: bool,
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        dispatch!(self, s => s.add_effect(group, partition, items, unless_processed, inside))
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

    pub fn commit_offset(
        &mut self,
        group: &str,
        partition: u32,
        next_offset: u64,
        inside: InsideHook<'_>,
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.commit_offset(group, partition, next_offset, inside))
    }

    pub fn apply_stamped(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        dispatch!(self, s => s.apply_stamped(group, partition, items, inside))
    }

    pub fn apply_deduped(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        dispatch!(self, s => s.apply_deduped(group, partition, items, inside))
    }

    pub fn apply_atomic(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        guard: Guard,
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        dispatch!(self, s => s.apply_atomic(group, partition, items, guard, inside))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn poison_attempt(
        &mut self,
        group: &str,
        partition: u32,
        offset: u64,
        epoch: i64,
        policy: FailurePolicy,
        error: &str,
        inside: InsideHook<'_>,
    ) -> Result<PoisonAttempt, StoreError> {
        dispatch!(self, s => s.poison_attempt(group, partition, offset, epoch, policy, error, inside))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn dead_letter(
        &mut self,
        group: &str,
        partition: u32,
        offset: u64,
        epoch: i64,
        payload: &[u8],
        error: &str,
        inside: InsideHook<'_>,
    ) -> Result<u64, StoreError> {
        dispatch!(self, s => s.dead_letter(group, partition, offset, epoch, payload, error, inside))
    }

    pub fn reset_offset(
        &mut self,
        group: &str,
        partition: u32,
        epoch: i64,
        to: u64,
        inside: InsideHook<'_>,
    ) -> Result<u64, StoreError> {
        dispatch!(self, s => s.reset_offset(group, partition, epoch, to, inside))
    }

    pub fn resets(&self, group: Option<&str>) -> Result<Vec<Reset>, StoreError> {
        dispatch!(self, s => s.resets(group))
    }

    pub fn attempts(&self, group: &str, partition: u32, offset: u64) -> Result<u64, StoreError> {
        dispatch!(self, s => s.attempts(group, partition, offset))
    }

    pub fn dead_letters(&self, group: Option<&str>) -> Result<Vec<DeadLetter>, StoreError> {
        dispatch!(self, s => s.dead_letters(group))
    }

    pub fn redrive(&mut self, group: &str, partition: u32, offset: u64, delta: i64) -> Result<i64, StoreError> {
        dispatch!(self, s => s.redrive(group, partition, offset, delta))
    }
}
