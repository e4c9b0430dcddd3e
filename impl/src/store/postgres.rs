//! The PostgreSQL store (`--store postgres://...`): the SQLite store's tables, rows and
//! transactions on a PostgreSQL server, through the synchronous `postgres` client.
//!
//! Every write is one `BEGIN ISOLATION LEVEL READ COMMITTED ... COMMIT` transaction run by
//! `PgStore::write` (`transaction`), with the same statements as `SqliteStore`'s. Where SQLite
//! serialises writers by its database lock, these transactions lock the (group, partition)
//! progress row with `SELECT ... FOR UPDATE` first (apply-atomic with every guard, poison
//! attempts, dead letters and offset resets), so competing owners queue on that row and the
//! epoch and next offset they read stay current until their COMMIT. Transactions that lock
//! more than one row take the progress row before the effect row, so two of them never wait for
//! each other in a cycle. The `inside` hook runs before COMMIT: a crash there closes the
//! connection without COMMIT and the server rolls the transaction back. The schema version is
//! the `schema_version` row of `meta`.

use super::types::{check_partitions, totals_accepting};
use super::types::{
    processed_partition, set_value, AtomicAlso, Claimed, DeadLetter, Ending, Fact, FailurePolicy, Guard, InsideHook,
    Item, PoisonAttempt, ProgressRow, Reset, Rewind, StoreError, StoreOptions, TxnRow, TxnState, TxnTable,
    SCHEMA_VERSION,
};
use crate::log::LogIdentity;
use crate::strategy::{DedupKey, EffectKind};
use postgres::config::Host;
use postgres::types::ToSql;
use postgres::{Client, Config, IsolationLevel, NoTls, Row, Transaction};
use std::cell::RefCell;
use std::ops::Range;
use std::str::FromStr;
use std::time::Duration;

/// The store's tables, created once by `PgStore::create`; `table_names` reads their names back.
pub(super) const SCHEMA: &str = "
    CREATE TABLE meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL);  -- partitions, schema_version, log_id
    CREATE TABLE effect (grp TEXT PRIMARY KEY, total BIGINT NOT NULL, value BIGINT);  -- value: the sets
    CREATE TABLE progress (
        grp TEXT NOT NULL, part BIGINT NOT NULL,
        next_offset BIGINT NOT NULL, epoch BIGINT NOT NULL, owner TEXT NOT NULL, stamp BIGINT,
        PRIMARY KEY (grp, part));
    CREATE TABLE processed (
        grp TEXT NOT NULL, part BIGINT NOT NULL, log_offset BIGINT NOT NULL,
        PRIMARY KEY (grp, part, log_offset));
    CREATE TABLE attempts (
        grp TEXT NOT NULL, part BIGINT NOT NULL, log_offset BIGINT NOT NULL,
        attempts BIGINT NOT NULL, error TEXT NOT NULL,
        PRIMARY KEY (grp, part, log_offset));
    CREATE TABLE dead_letters (
        grp TEXT NOT NULL, part BIGINT NOT NULL, log_offset BIGINT NOT NULL,
        error TEXT NOT NULL, attempts BIGINT NOT NULL, payload BYTEA NOT NULL,
        PRIMARY KEY (grp, part, log_offset));
    CREATE TABLE resets (
        grp TEXT NOT NULL, part BIGINT NOT NULL, from_offset BIGINT NOT NULL, to_offset BIGINT NOT NULL,
        PRIMARY KEY (grp, part, from_offset, to_offset));
    CREATE TABLE txns (
        grp TEXT NOT NULL, part BIGINT NOT NULL, first_output BIGINT NOT NULL, epoch BIGINT NOT NULL,
        input_offset BIGINT NOT NULL, input_end BIGINT NOT NULL, state TEXT NOT NULL,
        PRIMARY KEY (grp, part, first_output));
    CREATE TABLE facts (
        grp TEXT NOT NULL, part BIGINT NOT NULL, log_offset BIGINT NOT NULL,
        PRIMARY KEY (grp, part, log_offset));
    CREATE TABLE outbox (
        grp TEXT NOT NULL, part BIGINT NOT NULL, log_offset BIGINT NOT NULL,
        PRIMARY KEY (grp, part, log_offset));
";

/// The names of the tables a schema creates, in order: the word after each `CREATE TABLE`.
/// `init` refuses a database that holds any of `SCHEMA`'s, so the list cannot drift from it.
pub(super) fn table_names(schema: &str) -> Vec<&str> {
    schema.split("CREATE TABLE ").skip(1).filter_map(|create| create.split_whitespace().next()).collect()
}

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

pub struct PgStore {
    /// A `RefCell` because the client needs `&mut` even to read, and the store's readers take
    /// `&self` as `SqliteStore`'s do.
    client: RefCell<Client>,
    target: String,
    partitions: u32,
    /// The identity of the log this store was initialised with (`meta.log_id`, `partitions`).
    log: LogIdentity,
}

/// The connection target of a URL without its password: `postgres://user@host:port/dbname`.
fn describe(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    let port = if ports.is_empty() { String::new() } else { format!(":{}", ports.join(",")) };
    format!(
        "postgres://{}@{}{port}/{}",
        config.get_user().unwrap_or(""),
        hosts.join(","),
        config.get_dbname().unwrap_or("")
    )
}

fn fail<'a>(target: &'a str, sql: &'static str) -> impl Fn(postgres::Error) -> StoreError + 'a {
    move |source| StoreError::Postgres { target: target.to_string(), sql, source }
}

/// A write's open transaction, with the target its errors name.
struct Write<'a> {
    tx: Transaction<'a>,
    target: &'a str,
}

impl Write<'_> {
    /// Runs one statement of the transaction; returns the rows it changed. The error names the
    /// SQL that failed.
    fn exec(&mut self, sql: &'static str, params: Params<'_>) -> Result<u64, StoreError> {
        self.tx.execute(sql, params).map_err(fail(self.target, sql))
    }

    /// Runs one statement of the transaction and returns every row.
    fn rows(&mut self, sql: &'static str, params: Params<'_>) -> Result<Vec<Row>, StoreError> {
        self.tx.query(sql, params).map_err(fail(self.target, sql))
    }

    /// Runs one statement of the transaction that returns exactly one row.
    fn one(&mut self, sql: &'static str, params: Params<'_>) -> Result<Row, StoreError> {
        self.tx.query_one(sql, params).map_err(fail(self.target, sql))
    }

    /// Runs one statement of the transaction that returns at most one row.
    fn optional(&mut self, sql: &'static str, params: Params<'_>) -> Result<Option<Row>, StoreError> {
        self.tx.query_opt(sql, params).map_err(fail(self.target, sql))
    }
}

/// Runs one write on `client`: BEGIN (READ COMMITTED), `body` (the write's statements), the
/// `inside` hook (a crash point) with the transaction still open, then the ending `body` chose:
/// COMMIT, or ROLLBACK. An error from `body` drops the transaction, which rolls it back.
fn transaction<T>(
    client: &mut Client,
    target: &str,
    inside: InsideHook<'_>,
    body: impl FnOnce(&mut Write<'_>) -> Result<Ending<T>, StoreError>,
) -> Result<T, StoreError> {
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::ReadCommitted)
        .start()
        .map_err(fail(target, "BEGIN ISOLATION LEVEL READ COMMITTED"))?;
    let mut write = Write { tx, target };
    let ending = body(&mut write)?;
    inside();
    match ending {
        Ending::Commit(value) => write.tx.commit().map_err(fail(target, "COMMIT")).map(|()| value),
        Ending::RollBack(value) => write.tx.rollback().map_err(fail(target, "ROLLBACK")).map(|()| value),
    }
}

/// Locks the progress row and checks the fence: `StoreError::Fenced` when the stored epoch is
/// not `held`. Returning the error drops the transaction, which rolls it back.
fn lock_and_check_epoch(write: &mut Write<'_>, group: &str, partition: u32, held: i64) -> Result<(), StoreError> {
    let sql = "SELECT epoch FROM progress WHERE grp = $1 AND part = $2 FOR UPDATE";
    let current: i64 = write.one(sql, &[&group, &i64::from(partition)])?.get(0);
    if current != held {
        return Err(StoreError::Fenced { group: group.to_string(), partition, held, current });
    }
    Ok(())
}

const ATTEMPTS_SQL: &str = "SELECT attempts, error FROM attempts WHERE grp = $1 AND part = $2 AND log_offset = $3";

/// Locks the progress row of a fenced write, checking the fence when there is one
/// (`lock_and_check_epoch`; without one, the test-only mutation or an unfenced transaction,
/// the row is locked all the same, so competing writers still serialise on it).
fn lock_row(write: &mut Write<'_>, group: &str, partition: u32, fence: Option<i64>) -> Result<(), StoreError> {
    match fence {
        Some(held) => lock_and_check_epoch(write, group, partition, held),
        None => {
            let sql = "SELECT epoch FROM progress WHERE grp = $1 AND part = $2 FOR UPDATE";
            write.one(sql, &[&group, &i64::from(partition)]).map(|_| ())
        }
    }
}

/// Inserts one `txns` row.
fn insert_txn(write: &mut Write<'_>, txn: &TxnRow) -> Result<(), StoreError> {
    let sql = "INSERT INTO txns (grp, part, first_output, epoch, input_offset, input_end, state) \
               VALUES ($1, $2, $3, $4, $5, $6, $7)";
    let (part, first, input, end) =
        (i64::from(txn.partition), txn.first_output as i64, txn.input_offset as i64, txn.input_end as i64);
    write.exec(sql, &[&txn.group, &part, &first, &txn.epoch, &input, &end, &txn.state.name()]).map(|_| ())
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

/// The `txns` of one (group, partition) inside an output section.
struct PgTxns<'a, 'w> {
    write: &'a mut Write<'w>,
    group: &'a str,
    partition: u32,
}

impl TxnTable for PgTxns<'_, '_> {
    fn state(&mut self, first_output: u64) -> Result<Option<TxnState>, StoreError> {
        let sql = "SELECT state FROM txns WHERE grp = $1 AND part = $2 AND first_output = $3";
        let params: [&(dyn ToSql + Sync); 3] = [&self.group, &i64::from(self.partition), &(first_output as i64)];
        let row = self.write.optional(sql, &params)?;
        row.map(|row| parse_state(self.group, self.partition, first_output, row.get(0))).transpose()
    }

    fn record_aborted(&mut self, row: &TxnRow) -> Result<(), StoreError> {
        assert_eq!((row.group.as_str(), row.partition), (self.group, self.partition), "a section's own partition");
        assert_eq!(row.state, TxnState::Aborted, "record_aborted records an abort");
        insert_txn(self.write, row)
    }
}

/// A record's counted attempts and last error, if any attempt was counted.
fn read_attempts(
    write: &mut Write<'_>,
    group: &str,
    partition: u32,
    offset: u64,
) -> Result<Option<(u64, String)>, StoreError> {
    let row = write.optional(ATTEMPTS_SQL, &[&group, &i64::from(partition), &(offset as i64)])?;
    Ok(row.map(|row| (row.get::<_, i64>(0) as u64, row.get(1))))
}

/// The effect: a record's delta added to its group's total, only if the sum fits `BIGINT`
/// (`$3..=$4`, from `totals_accepting`), so an overflow is the same `StoreError::Overflow` as
/// on SQLite rather than a server error. Run only through `add_delta`.
const ADD_DELTA_SQL: &str = "UPDATE effect SET total = total + $2 WHERE grp = $1 AND total BETWEEN $3 AND $4";

/// Adds `item`'s delta to `group`'s total inside `write`'s transaction, refusing a sum outside
/// `i64` with `StoreError::Overflow` (which rolls the transaction back). A group without an
/// effect row is left as it is, as the plain `UPDATE` did.
fn add_delta(write: &mut Write<'_>, group: &str, partition: u32, item: &Item) -> Result<(), StoreError> {
    let (low, high) = totals_accepting(item.delta);
    if write.exec(ADD_DELTA_SQL, &[&group, &item.delta, &low, &high])? == 1 {
        return Ok(());
    }
    let sql = "SELECT total FROM effect WHERE grp = $1";
    match write.optional(sql, &[&group])? {
        Some(row) => {
            let (group, offset, delta) = (group.to_string(), item.offset, item.delta);
            Err(StoreError::Overflow { group, partition, offset, total: row.get(0), delta })
        }
        None => Ok(()),
    }
}

/// A record's effect: its delta added to the total, or (a set) its own value `v(o) = o + 1`.
fn apply_effect(
    write: &mut Write<'_>,
    group: &str,
    partition: u32,
    item: &Item,
    effect: EffectKind,
) -> Result<(), StoreError> {
    match effect {
        EffectKind::Add => add_delta(write, group, partition, item),
        EffectKind::Set => {
            let sql = "UPDATE effect SET value = $2 WHERE grp = $1";
            write.exec(sql, &[&group, &set_value(item.offset)]).map(|_| ())
        }
    }
}

/// An applied record's fact, and its outbox row, as `also` says.
fn record_fact(
    write: &mut Write<'_>,
    (group, partition, offset): (&str, u32, u64),
    also: AtomicAlso,
) -> Result<(), StoreError> {
    let params: [&(dyn ToSql + Sync); 3] = [&group, &i64::from(partition), &(offset as i64)];
    let fact = "INSERT INTO facts (grp, part, log_offset) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING";
    match also {
        AtomicAlso::Nothing => {}
        AtomicAlso::Fact => {
            write.exec(fact, &params)?;
        }
        AtomicAlso::FactAndOutbox => {
            write.exec(fact, &params)?;
            let outbox = "INSERT INTO outbox (grp, part, log_offset) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING";
            write.exec(outbox, &params)?;
        }
    }
    Ok(())
}

const SET_NEXT_SQL: &str = "UPDATE progress SET next_offset = $3 WHERE grp = $1 AND part = $2";

/// How much longer than the busy timeout a connection or a statement may wait for the server:
/// a lock wait (bounded by the busy timeout alone) then fails as a lock timeout first, and a
/// busy timeout of 0 still leaves time to connect.
const REPLY_GRACE: Duration = Duration::from_secs(1);

/// Connects in a thread and waits for it at most `wait`. The client's own `connect_timeout`
/// bounds only the socket's connection: a server that accepts it and never answers (a stopped
/// postmaster: the kernel accepts on its socket) would block the startup for ever. On a
/// timeout the thread is left behind; if it connects later, it drops the connection.
fn connect_within(config: Config, target: &str, wait: Duration) -> Result<Client, StoreError> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("postgres-connect".to_string())
        .spawn(move || {
            // The receiver is gone after a timeout: nobody needs the client any more.
            let _ = sender.send(config.connect(NoTls));
        })
        .map_err(|source| StoreError::PgThread { target: target.to_string(), source })?;
    match receiver.recv_timeout(wait) {
        Ok(connected) => connected.map_err(fail(target, "connect")),
        Err(_) => Err(StoreError::PgTimeout { target: target.to_string(), waited: wait, during: "connect" }),
    }
}

/// The key of the advisory lock `create` holds: two concurrent `init`s of one database queue
/// on it, and the second finds the first one's tables.
const INIT_LOCK_KEY: i64 = 0x6f6e_6365_696e_6974; // "onceinit"

impl PgStore {
    /// Connects with every wait on the server bounded by the busy timeout (spec.md §10): the
    /// connection, its startup included, and every statement by `busy_timeout + REPLY_GRACE`
    /// (`StoreError::PgTimeout`, or the server's statement timeout), a lock by `busy_timeout`
    /// itself (`lock_timeout`), so a lock wait fails as such before the statement's bound.
    fn connect(url: &str, options: StoreOptions) -> Result<(Client, String), StoreError> {
        let mut config = Config::from_str(url).map_err(|source| StoreError::Postgres {
            target: "(unparsable URL)".to_string(),
            sql: "connect",
            source,
        })?;
        let target = describe(&config);
        let reply = options.busy_timeout + REPLY_GRACE;
        config.connect_timeout(reply);
        let mut client = connect_within(config, &target, reply)?;
        // 0 would mean forever in PostgreSQL, so at least 1 ms.
        let lock_ms = options.busy_timeout.as_millis().clamp(1, i32::MAX as u128);
        let statement_ms = reply.as_millis().clamp(1, i32::MAX as u128);
        let sql = "SET lock_timeout, statement_timeout";
        client
            .batch_execute(&format!("SET lock_timeout = {lock_ms}; SET statement_timeout = {statement_ms}"))
            .map_err(fail(&target, sql))?;
        Ok((client, target))
    }

    /// Creates the store's schema in the URL's database for the log `log` (its partitions; its
    /// id recorded), refusing a database that holds any of the store's tables already.
    pub fn create(url: &str, log: LogIdentity, options: StoreOptions) -> Result<PgStore, StoreError> {
        let (mut client, target) = PgStore::connect(url, options)?;
        // No crash point names this write: its hook does nothing.
        transaction(&mut client, &target, &mut || {}, |write| {
            write.one("SELECT pg_advisory_xact_lock($1)", &[&INIT_LOCK_KEY])?;
            let sql = "SELECT count(*) FROM information_schema.tables \
                       WHERE table_schema = current_schema() AND table_name = ANY($1)";
            let found: i64 = write.one(sql, &[&table_names(SCHEMA)])?.get(0);
            if found > 0 {
                // Returning the error rolls the transaction back; nothing was written anyway.
                return Err(StoreError::PgAlreadyInitialised { target: target.clone() });
            }
            write.tx.batch_execute(SCHEMA).map_err(fail(write.target, "schema"))?;
            let sql = "INSERT INTO meta (key, value) VALUES ('partitions', $1), ('schema_version', $2), ('log_id', $3)";
            // The id's bits as a signed BIGINT.
            write.exec(sql, &[&i64::from(log.partitions), &SCHEMA_VERSION, &(log.id as i64)])?;
            Ok(Ending::Commit(()))
        })?;
        PgStore::open(url, options)
    }

    /// Opens the store in the URL's database, checking its schema version. A transaction a
    /// crashed owner left open was rolled back by the server when its connection closed.
    pub fn open(url: &str, options: StoreOptions) -> Result<PgStore, StoreError> {
        let (mut client, target) = PgStore::connect(url, options)?;
        let sql = "SELECT to_regclass('meta') IS NOT NULL";
        let exists: bool = client.query_one(sql, &[]).map_err(fail(&target, sql))?.get(0);
        if !exists {
            return Err(StoreError::PgNotInitialized { target });
        }
        let sql = "SELECT value FROM meta WHERE key = 'schema_version'";
        let version: Option<i64> = client.query_opt(sql, &[]).map_err(fail(&target, sql))?.map(|row| row.get(0));
        match version {
            Some(SCHEMA_VERSION) => {}
            None => return Err(StoreError::PgNotInitialized { target }),
            Some(found) => return Err(StoreError::PgSchemaVersion { target, found }),
        }
        let mut meta = |key: &'static str| -> Result<i64, StoreError> {
            let sql = "SELECT value FROM meta WHERE key = $1";
            Ok(client.query_one(sql, &[&key]).map_err(fail(&target, sql))?.get(0))
        };
        let partitions = meta("partitions")?;
        let log_id = meta("log_id")?;
        let partitions = check_partitions(&target, partitions)?;
        let log = LogIdentity { id: log_id as u64, partitions };
        Ok(PgStore { client: RefCell::new(client), target, partitions, log })
    }

    /// `init`'s check before it creates anything: `StoreError::PgAlreadyInitialised` when the
    /// URL's database holds any of the store's tables.
    pub fn check_absent(url: &str, options: StoreOptions) -> Result<(), StoreError> {
        let (mut client, target) = PgStore::connect(url, options)?;
        let sql = "SELECT count(*) FROM information_schema.tables \
                   WHERE table_schema = current_schema() AND table_name = ANY($1)";
        let found: i64 = client.query_one(sql, &[&table_names(SCHEMA)]).map_err(fail(&target, sql))?.get(0);
        if found > 0 {
            return Err(StoreError::PgAlreadyInitialised { target });
        }
        Ok(())
    }

    /// The log this store was initialised with.
    pub fn log_identity(&self) -> LogIdentity {
        self.log
    }

    /// The connection target, without the password.
    pub fn target(&self) -> &str {
        &self.target
    }

    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    fn check_partition(&self, partition: u32) -> Result<(), StoreError> {
        if partition >= self.partitions {
            return Err(StoreError::NoSuchPartition { partition, partitions: self.partitions });
        }
        Ok(())
    }

    /// Runs one write (see `transaction`): BEGIN, `body` (the write's statements), the `inside`
    /// hook (a crash point) with the transaction still open, then COMMIT. An error from `body`
    /// drops the transaction, which rolls it back.
    fn write<T>(
        &self,
        inside: InsideHook<'_>,
        body: impl FnOnce(&mut Write<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.write_ending(inside, |write| body(write).map(Ending::Commit))
    }

    /// `write` whose `body` also chooses how the transaction ends: COMMIT, or ROLLBACK (still
    /// after the `inside` hook).
    fn write_ending<T>(
        &self,
        inside: InsideHook<'_>,
        body: impl FnOnce(&mut Write<'_>) -> Result<Ending<T>, StoreError>,
    ) -> Result<T, StoreError> {
        transaction(&mut self.client.borrow_mut(), &self.target, inside, body)
    }

    fn query(&self, sql: &'static str, params: Params<'_>) -> Result<Vec<Row>, StoreError> {
        self.client.borrow_mut().query(sql, params).map_err(fail(&self.target, sql))
    }

    /// Creates the group's rows if missing: total 0, and per partition next offset 0 at epoch 1
    /// owned by `initial_owner` (spec.md §2.4). Idempotent.
    pub fn ensure_group(&mut self, group: &str, initial_owner: &str) -> Result<(), StoreError> {
        let partitions = self.partitions;
        // No crash point names this write: its hook does nothing.
        self.write(&mut || {}, |write| {
            let sql = "INSERT INTO effect (grp, total) VALUES ($1, 0) ON CONFLICT DO NOTHING";
            write.exec(sql, &[&group])?;
            for partition in 0..partitions {
                let sql = "INSERT INTO progress (grp, part, next_offset, epoch, owner) \
                           VALUES ($1, $2, 0, 1, $3) ON CONFLICT DO NOTHING";
                write.exec(sql, &[&group, &i64::from(partition), &initial_owner])?;
            }
            Ok(())
        })
    }

    pub fn groups(&self) -> Result<Vec<String>, StoreError> {
        // The C collation sorts bytewise, as SQLite does.
        let sql = "SELECT grp FROM effect ORDER BY grp COLLATE \"C\"";
        Ok(self.query(sql, &[])?.iter().map(|row| row.get(0)).collect())
    }

    pub fn total(&self, group: &str) -> Result<i64, StoreError> {
        let sql = "SELECT total FROM effect WHERE grp = $1";
        Ok(self.query(sql, &[&group])?.first().map_or(0, |row| row.get(0)))
    }

    pub fn progress(&self, group: &str, partition: u32) -> Result<ProgressRow, StoreError> {
        self.check_partition(partition)?;
        let sql = "SELECT next_offset, epoch, owner, stamp FROM progress WHERE grp = $1 AND part = $2";
        let rows = self.query(sql, &[&group, &i64::from(partition)])?;
        Ok(rows.first().map_or(ProgressRow { next_offset: 0, epoch: 1, owner: String::new(), stamp: None }, |row| {
            ProgressRow {
                next_offset: row.get::<_, i64>(0) as u64,
                epoch: row.get(1),
                owner: row.get(2),
                stamp: row.get::<_, Option<i64>>(3).map(|stamp| stamp as u64),
            }
        }))
    }

    /// The processed-id table of a group, sorted: (partition, offset).
    pub fn processed(&self, group: &str) -> Result<Vec<(u32, u64)>, StoreError> {
        let sql = "SELECT part, log_offset FROM processed WHERE grp = $1 ORDER BY part, log_offset";
        Ok(self
            .query(sql, &[&group])?
            .iter()
            .map(|row| (row.get::<_, i64>(0) as u32, row.get::<_, i64>(1) as u64))
            .collect())
    }

    /// The set strategies' value of a group (see `SqliteStore::value`).
    pub fn value(&self, group: &str) -> Result<Option<i64>, StoreError> {
        let sql = "SELECT value FROM effect WHERE grp = $1";
        Ok(self.query(sql, &[&group])?.first().and_then(|row| row.get(0)))
    }

    /// The `facts` or `outbox` rows (see `SqliteStore::facts`).
    pub fn facts(&self, group: Option<&str>, outbox: bool) -> Result<Vec<Fact>, StoreError> {
        let sql = if outbox {
            "SELECT grp, part, log_offset FROM outbox WHERE $1::TEXT IS NULL OR grp = $1 \
             ORDER BY grp COLLATE \"C\", part, log_offset"
        } else {
            "SELECT grp, part, log_offset FROM facts WHERE $1::TEXT IS NULL OR grp = $1 \
             ORDER BY grp COLLATE \"C\", part, log_offset"
        };
        Ok(self
            .query(sql, &[&group])?
            .iter()
            .map(|row| Fact {
                group: row.get(0),
                partition: row.get::<_, i64>(1) as u32,
                offset: row.get::<_, i64>(2) as u64,
            })
            .collect())
    }

    /// The first outbox row of `group` (see `SqliteStore::first_outbox`).
    pub fn first_outbox(&self, group: &str) -> Result<Option<Fact>, StoreError> {
        let sql = "SELECT grp, part, log_offset FROM outbox WHERE grp = $1 ORDER BY part, log_offset LIMIT 1";
        Ok(self.query(sql, &[&group])?.first().map(|row| Fact {
            group: row.get(0),
            partition: row.get::<_, i64>(1) as u32,
            offset: row.get::<_, i64>(2) as u64,
        }))
    }

    /// The relay's delete of an outbox row (see `SqliteStore::delete_outbox`).
    pub fn delete_outbox(&mut self, fact: &Fact) -> Result<bool, StoreError> {
        self.check_partition(fact.partition)?;
        // No crash point names this write: its hook does nothing.
        self.write(&mut || {}, |write| {
            let sql = "DELETE FROM outbox WHERE grp = $1 AND part = $2 AND log_offset = $3";
            Ok(write.exec(sql, &[&fact.group, &i64::from(fact.partition), &(fact.offset as i64)])? == 1)
        })
    }

    /// The rebalance: assigns the partition to `owner` and bumps its epoch, in one
    /// transaction. Returns the new epoch. The previous owner is not told.
    pub fn claim(&mut self, group: &str, partition: u32, owner: &str) -> Result<i64, StoreError> {
        self.check_partition(partition)?;
        self.ensure_group(group, owner)?;
        // No crash point names this write: its hook does nothing.
        self.write(&mut || {}, |write| {
            let sql = "UPDATE progress SET epoch = epoch + 1, owner = $3 WHERE grp = $1 AND part = $2 RETURNING epoch";
            Ok(write.one(sql, &[&group, &i64::from(partition), &owner])?.get(0))
        })
    }

    /// An owner's start or follow mode's adoption (see `SqliteStore::claim_own`). The rows are
    /// locked `FOR UPDATE` in partition order first, so two starts of one owner queue on them
    /// instead of deadlocking, and a concurrent `claim` that moves a row away first takes it
    /// out of this claim (READ COMMITTED re-checks the `WHERE` on the newest row version).
    pub fn claim_own(&mut self, group: &str, owner: &str, only: Option<u32>) -> Result<Vec<Claimed>, StoreError> {
        if let Some(partition) = only {
            self.check_partition(partition)?;
        }
        let only = only.map(i64::from);
        // No crash point names this write: its hook does nothing.
        self.write(&mut || {}, |write| {
            let sql = "SELECT part FROM progress WHERE grp = $1 AND owner = $2 AND ($3::BIGINT IS NULL OR part = $3) \
                       ORDER BY part FOR UPDATE";
            let locked: Vec<i64> = write.rows(sql, &[&group, &owner, &only])?.iter().map(|row| row.get(0)).collect();
            let sql = "UPDATE progress SET epoch = epoch + 1 WHERE grp = $1 AND owner = $2 AND part = ANY($3) \
                       RETURNING part, epoch, next_offset";
            let mut claimed: Vec<Claimed> = write
                .rows(sql, &[&group, &owner, &locked])?
                .iter()
                .map(|row| Claimed {
                    partition: row.get::<_, i64>(0) as u32,
                    epoch: row.get(1),
                    next_offset: row.get::<_, i64>(2) as u64,
                })
                .collect();
            claimed.sort_by_key(|c| c.partition);
            // The rows stay locked: none moved between the two statements.
            assert_eq!(claimed.len(), locked.len(), "every locked row naming the owner is claimed");
            Ok(claimed)
        })
    }

    /// `apply-effect`: adds each item's delta to the total (`EffectKind::Set`: sets the value,
    /// blindly), skipping processed ids when `unless_processed` (dedup-separate). Returns, per
    /// item, whether it was applied.
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
                let sql = "SELECT 1 FROM processed WHERE grp = $1 AND part = $2 AND log_offset = $3";
                let skip = unless_processed
                    && write.optional(sql, &[&group, &i64::from(partition), &(item.offset as i64)])?.is_some();
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
                let sql = "INSERT INTO processed (grp, part, log_offset) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING";
                write.exec(sql, &[&group, &i64::from(partition), &(*offset as i64)])?;
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
            if let Some(held) = fence {
                lock_and_check_epoch(write, group, partition, held)?;
            }
            write.exec(SET_NEXT_SQL, &[&group, &i64::from(partition), &(next_offset as i64)])?;
            Ok(())
        })
    }

    /// `apply-stamped`: per item, set-if-newer on the stamp and the delta (`EffectKind::Set`: the
    /// value) only if it moved. Under READ COMMITTED a concurrent update of the row makes the
    /// server re-check the `WHERE` on the newest version, so two owners never both move the
    /// stamp past one offset.
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
                    "UPDATE progress SET stamp = $3 WHERE grp = $1 AND part = $2 AND (stamp IS NULL OR stamp < $3)";
                let newer = write.exec(sql, &[&group, &i64::from(partition), &(item.offset as i64)])? == 1;
                if newer {
                    apply_effect(write, group, partition, item, effect)?;
                }
                applied.push(newer);
            }
            Ok(applied)
        })
    }

    /// `apply-deduped`: per item, insert its id and add its delta, unless the id is present (the
    /// id as `SqliteStore::apply_deduped` keys it). A concurrent insert of the same id makes
    /// this one wait for its outcome.
    pub fn apply_deduped(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        key: DedupKey,
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        let id_partition = i64::from(processed_partition(partition, key));
        self.write(inside, |write| {
            let mut applied = Vec::with_capacity(items.len());
            for item in items {
                let sql = "INSERT INTO processed (grp, part, log_offset) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING";
                let fresh = write.exec(sql, &[&group, &id_partition, &(item.offset as i64)])? == 1;
                if fresh {
                    add_delta(write, group, partition, item)?;
                }
                applied.push(fresh);
            }
            Ok(applied)
        })
    }

    /// `apply-atomic`: the effects and the next offset in one transaction (with each applied
    /// record's fact, and its outbox row, as `also` says), which first locks the progress row
    /// (`FOR UPDATE`, whatever the guard) so competing owners serialise on it. `Fenced` aborts
    /// with `StoreError::Fenced` when the stored epoch is not the owner's; `Cas` skips items
    /// below the stored next offset. Returns, per item, whether it was applied.
    pub fn apply_atomic(
        &mut self,
        group: &str,
        partition: u32,
        items: &[Item],
        (guard, also): (Guard, AtomicAlso),
        inside: InsideHook<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        self.write(inside, |write| {
            let sql = "SELECT next_offset, epoch FROM progress WHERE grp = $1 AND part = $2 FOR UPDATE";
            let row = write.one(sql, &[&group, &i64::from(partition)])?;
            let (stored, epoch) = (row.get::<_, i64>(0) as u64, row.get::<_, i64>(1));
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
                    add_delta(write, group, partition, item)?;
                    record_fact(write, (group, partition, item.offset), also)?;
                    next = item.offset + 1;
                }
                applied.push(apply);
            }
            if applied.iter().any(|&a| a) {
                write.exec(SET_NEXT_SQL, &[&group, &i64::from(partition), &(next as i64)])?;
            }
            Ok(applied)
        })
    }

    /// `apply-atomic` on a poison record (see `SqliteStore::poison_attempt`), with the progress
    /// row locked and the `fence` checked first.
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
            lock_row(write, group, partition, fence)?;
            let max_attempts = match policy {
                FailurePolicy::Count { max_attempts } => max_attempts,
                // The effect failed and nothing of the attempt is kept.
                FailurePolicy::Forget => return Ok(Ending::RollBack(PoisonAttempt::Failed { attempts: 0 })),
            };
            let counted = read_attempts(write, group, partition, offset)?.map_or(0, |(attempts, _)| attempts);
            if counted >= max_attempts {
                return Ok(Ending::RollBack(PoisonAttempt::Exhausted { attempts: counted }));
            }
            let sql = "INSERT INTO attempts (grp, part, log_offset, attempts, error) VALUES ($1, $2, $3, 1, $4)
                       ON CONFLICT (grp, part, log_offset) DO UPDATE SET attempts = attempts.attempts + 1, \
                       error = excluded.error
                       RETURNING attempts";
            let attempts: i64 = write.one(sql, &[&group, &i64::from(partition), &(offset as i64), &error])?.get(0);
            Ok(Ending::Commit(PoisonAttempt::Failed { attempts: attempts as u64 }))
        })
    }

    /// `dead-letter` (see `SqliteStore::dead_letter`), with the progress row locked and the
    /// `fence` checked first. Returns the attempts.
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
            lock_row(write, group, partition, fence)?;
            let (attempts, error) = read_attempts(write, group, partition, offset)?.unwrap_or((0, error.to_string()));
            let sql = "INSERT INTO dead_letters (grp, part, log_offset, error, attempts, payload) \
                       VALUES ($1, $2, $3, $4, $5, $6)";
            write
                .exec(sql, &[&group, &i64::from(partition), &(offset as i64), &error, &(attempts as i64), &payload])?;
            write.exec(SET_NEXT_SQL, &[&group, &i64::from(partition), &((offset + 1) as i64)])?;
            Ok(attempts)
        })
    }

    /// `reset-offset` (see `SqliteStore::reset_offset`), with the progress row locked and the
    /// `fence` checked first. Returns the stored next offset it reset from.
    pub fn reset_offset(
        &mut self,
        group: &str,
        partition: u32,
        fence: Option<i64>,
        to: u64,
        inside: InsideHook<'_>,
    ) -> Result<u64, StoreError> {
        self.write(inside, |write| {
            lock_row(write, group, partition, fence)?;
            let sql = "SELECT next_offset FROM progress WHERE grp = $1 AND part = $2";
            let from: i64 = write.one(sql, &[&group, &i64::from(partition)])?.get(0);
            // The table is a set, as the model's: recording the same reset twice keeps one row.
            let sql =
                "INSERT INTO resets (grp, part, from_offset, to_offset) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING";
            write.exec(sql, &[&group, &i64::from(partition), &from, &(to as i64)])?;
            write.exec(SET_NEXT_SQL, &[&group, &i64::from(partition), &(to as i64)])?;
            Ok(from as u64)
        })
    }

    /// `consumer repair` (see `SqliteStore::rewind_to_log_end`), with the progress row locked
    /// first. `None` (and nothing written) when nothing of the group's is at or past `end`.
    pub fn rewind_to_log_end(&mut self, group: &str, partition: u32, end: u64) -> Result<Option<Rewind>, StoreError> {
        self.check_partition(partition)?;
        let (part, end_sql) = (i64::from(partition), end as i64);
        // No crash point names this write: its hook does nothing.
        self.write_ending(&mut || {}, |write| {
            let sql = "SELECT next_offset, stamp FROM progress WHERE grp = $1 AND part = $2 FOR UPDATE";
            let row = write.one(sql, &[&group, &part])?;
            let (from, stamp) = (row.get::<_, i64>(0) as u64, row.get::<_, Option<i64>>(1).map(|stamp| stamp as u64));
            let sql = "DELETE FROM processed WHERE grp = $1 AND part = $2 AND log_offset >= $3";
            let processed_dropped = write.exec(sql, &[&group, &part, &end_sql])?;
            let sql = "DELETE FROM attempts WHERE grp = $1 AND part = $2 AND log_offset >= $3";
            let attempts_dropped = write.exec(sql, &[&group, &part, &end_sql])?;
            let stamp_from = stamp.filter(|&stamp| stamp >= end);
            if from <= end && processed_dropped == 0 && attempts_dropped == 0 && stamp_from.is_none() {
                return Ok(Ending::RollBack(None));
            }
            if stamp_from.is_some() {
                let sql = "UPDATE progress SET stamp = $3 WHERE grp = $1 AND part = $2";
                write.exec(sql, &[&group, &part, &end.checked_sub(1).map(|stamp| stamp as i64)])?;
            }
            if from > end {
                let sql = "INSERT INTO resets (grp, part, from_offset, to_offset) VALUES ($1, $2, $3, $4) \
                           ON CONFLICT DO NOTHING";
                write.exec(sql, &[&group, &part, &(from as i64), &end_sql])?;
                write.exec(SET_NEXT_SQL, &[&group, &part, &end_sql])?;
            }
            let sql = "UPDATE progress SET epoch = epoch + 1 WHERE grp = $1 AND part = $2 RETURNING epoch";
            let epoch: i64 = write.one(sql, &[&group, &part])?.get(0);
            let (group, to) = (group.to_string(), from.min(end));
            let rewind = Rewind { group, partition, from, to, processed_dropped, attempts_dropped, stamp_from, epoch };
            Ok(Ending::Commit(Some(rewind)))
        })
    }

    /// `consumer repair --gap` (see `SqliteStore::record_gap`), with the progress row locked.
    pub fn record_gap(&mut self, group: &str, partition: u32, gap: Range<u64>) -> Result<Option<Reset>, StoreError> {
        self.check_partition(partition)?;
        let part = i64::from(partition);
        // No crash point names this write: its hook does nothing.
        self.write_ending(&mut || {}, |write| {
            let sql = "SELECT next_offset FROM progress WHERE grp = $1 AND part = $2 FOR UPDATE";
            let next = write.one(sql, &[&group, &part])?.get::<_, i64>(0) as u64;
            if next >= gap.end {
                return Ok(Ending::RollBack(None));
            }
            let from = next.max(gap.start);
            let sql = "INSERT INTO resets (grp, part, from_offset, to_offset) VALUES ($1, $2, $3, $4) \
                       ON CONFLICT DO NOTHING";
            write.exec(sql, &[&group, &part, &(from as i64), &(gap.end as i64)])?;
            Ok(Ending::Commit(Some(Reset { group: group.to_string(), partition, from, to: gap.end })))
        })
    }

    /// `commit-txn`'s store transaction (see `SqliteStore::commit_txn`), with the progress row
    /// locked (and under a `fence`, the epoch checked) first.
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
            lock_row(write, group, partition, fence)?;
            for item in items {
                add_delta(write, group, partition, item)?;
            }
            write.exec(SET_NEXT_SQL, &[&group, &i64::from(partition), &(txn.input_end as i64)])?;
            insert_txn(write, txn)
        })
    }

    /// An output section (see `SqliteStore::output_section`): the progress row is locked `FOR
    /// UPDATE` for the whole section (and under a `fence`, the epoch checked), so no claim of a
    /// new epoch and no other section of the partition runs while `body` appends to the output
    /// log; the server rolls the transaction back if the process dies inside.
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
            lock_row(write, group, partition, fence)?;
            let result = body(&mut PgTxns { write, group, partition });
            failed.set(result.is_err());
            Ok(if result.is_ok() { Ending::Commit(result) } else { Ending::RollBack(result) })
        });
        result.map_err(X::from)?
    }

    /// The `txns` rows, sorted by group, partition and first output offset; only `group`'s if
    /// given.
    pub fn txns(&self, group: Option<&str>) -> Result<Vec<TxnRow>, StoreError> {
        let sql = "SELECT grp, part, first_output, epoch, input_offset, input_end, state FROM txns
                   WHERE $1::TEXT IS NULL OR grp = $1 ORDER BY grp COLLATE \"C\", part, first_output";
        let mut txns = Vec::new();
        for row in self.query(sql, &[&group])? {
            let (group, partition, first_output): (String, u32, u64) =
                (row.get(0), row.get::<_, i64>(1) as u32, row.get::<_, i64>(2) as u64);
            let state = parse_state(&group, partition, first_output, row.get(6))?;
            let (epoch, input_offset, input_end) =
                (row.get(3), row.get::<_, i64>(4) as u64, row.get::<_, i64>(5) as u64);
            txns.push(TxnRow { group, partition, first_output, epoch, input_offset, input_end, state });
        }
        Ok(txns)
    }

    /// The reset table, sorted by group, partition and offsets; only `group`'s if given.
    pub fn resets(&self, group: Option<&str>) -> Result<Vec<Reset>, StoreError> {
        let sql = "SELECT grp, part, from_offset, to_offset FROM resets
                   WHERE $1::TEXT IS NULL OR grp = $1 ORDER BY grp COLLATE \"C\", part, from_offset, to_offset";
        Ok(self
            .query(sql, &[&group])?
            .iter()
            .map(|row| Reset {
                group: row.get(0),
                partition: row.get::<_, i64>(1) as u32,
                from: row.get::<_, i64>(2) as u64,
                to: row.get::<_, i64>(3) as u64,
            })
            .collect())
    }

    /// The failed attempts counted for a record (atomic-dlq); 0 when none.
    pub fn attempts(&self, group: &str, partition: u32, offset: u64) -> Result<u64, StoreError> {
        self.check_partition(partition)?;
        let rows = self.query(ATTEMPTS_SQL, &[&group, &i64::from(partition), &(offset as i64)])?;
        Ok(rows.first().map_or(0, |row| row.get::<_, i64>(0) as u64))
    }

    /// Every counted attempt of `group`: (partition, offset, attempts), sorted.
    pub fn all_attempts(&self, group: &str) -> Result<Vec<(u32, u64, u64)>, StoreError> {
        let sql = "SELECT part, log_offset, attempts FROM attempts WHERE grp = $1 ORDER BY part, log_offset";
        let rows = self.query(sql, &[&group])?;
        Ok(rows
            .iter()
            .map(|row| (row.get::<_, i64>(0) as u32, row.get::<_, i64>(1) as u64, row.get::<_, i64>(2) as u64))
            .collect())
    }

    /// The dead-letter table, sorted by group, partition and offset; only `group`'s if given.
    pub fn dead_letters(&self, group: Option<&str>) -> Result<Vec<DeadLetter>, StoreError> {
        let sql = "SELECT grp, part, log_offset, attempts, error, payload FROM dead_letters
                   WHERE $1::TEXT IS NULL OR grp = $1 ORDER BY grp COLLATE \"C\", part, log_offset";
        Ok(self
            .query(sql, &[&group])?
            .iter()
            .map(|row| DeadLetter {
                group: row.get(0),
                partition: row.get::<_, i64>(1) as u32,
                offset: row.get::<_, i64>(2) as u64,
                attempts: row.get::<_, i64>(3) as u64,
                error: row.get(4),
                payload: row.get(5),
            })
            .collect())
    }

    /// The operator's redrive of a dead letter (see `SqliteStore::redrive`). Returns the total.
    pub fn redrive(&mut self, group: &str, partition: u32, offset: u64, delta: i64) -> Result<i64, StoreError> {
        self.check_partition(partition)?;
        // No crash point names this write: its hook does nothing.
        self.write(&mut || {}, |write| {
            let sql = "DELETE FROM dead_letters WHERE grp = $1 AND part = $2 AND log_offset = $3";
            if write.exec(sql, &[&group, &i64::from(partition), &(offset as i64)])? == 0 {
                // Dropping the transaction rolls it back; nothing was written anyway.
                return Err(StoreError::NoDeadLetter { group: group.to_string(), partition, offset });
            }
            add_delta(write, group, partition, &Item { offset, delta })?;
            Ok(write.one("SELECT total FROM effect WHERE grp = $1", &[&group])?.get(0))
        })
    }
}
