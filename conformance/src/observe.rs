//! Observing a consumer's store by its own SQL (`--observe FILE`), instead of trusting its
//! store role to report what the store holds.
//!
//! The user writes a small TOML file (version 1) naming the SQLite database in the store
//! directory and, per field of the model's durable store (spec.md §2.1), one query with
//! `:group` bound to the group's name. The harness copies the database's files (the database,
//! its `-journal`, `-wal` and `-shm`) and runs the queries on the copy with `PRAGMA
//! query_only`: the consumer's own files are never opened, so a hot journal a kill left is
//! rolled back in the copy (as the consumer's next open would) and nothing the harness does
//! can change what the consumer finds.
//!
//! ```toml
//! version = 1
//! database = "store.db"
//! [queries]
//! total = "SELECT total FROM totals WHERE grp = :group"
//! partitions = "SELECT part AS partition, next_offset, epoch, owner FROM progress WHERE grp = :group"
//! ```

use crate::killpoints::{Scope, Snapshot};
use consumer::protocol::{Attempts, Observed, Processed, ProgressRow, Reset};
use model::strategy::{EffectKind, OutOfRangePolicy, PoisonPolicy, Sequence, Strategy};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};

mod postgres;

/// The version of the observation spec's format this build reads.
pub const SPEC_VERSION: u64 = 1;

/// The largest observation spec read: a few queries, not a data file.
const SPEC_BYTES_MAX: u64 = 64 * 1024;

/// The most rows one query may return for one group: the model's stores are tiny, so more is
/// a query that does not filter by group or partition.
const ROWS_MAX: usize = 4_096;

/// The fields of the model's durable store, one query each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Query {
    Total,
    Partitions,
    Processed,
    Attempts,
    DeadLetters,
    Resets,
    Value,
    Facts,
    Outbox,
    /// The ids of the records applied, in the order applied (`kafka app` only: an application's
    /// own table of what it did, where a record applied twice shows twice).
    Applied,
}

/// What a column's values must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// An integer, never NULL.
    Integer,
    /// Text, never NULL (an owner's name).
    Text,
    /// An integer or NULL.
    IntegerOrNull,
}

#[derive(Clone, Copy, Debug)]
struct Column {
    name: &'static str,
    kind: Kind,
    /// A column that may be left out (its value is then NULL).
    optional: bool,
}

const fn column(name: &'static str, kind: Kind) -> Column {
    Column { name, kind, optional: false }
}

const PAIR: &[Column] = &[column("partition", Kind::Integer), column("offset", Kind::Integer)];
const COUNTED: &[Column] =
    &[column("partition", Kind::Integer), column("offset", Kind::Integer), column("attempts", Kind::Integer)];

const TOTAL: &[Column] = &[column("total", Kind::Integer)];
const APPLIED: &[Column] = &[column("id", Kind::Integer)];

/// The most rows `applied` may return: `kafka app`'s records (at most 100,000), each applied
/// a few times at the most.
const APPLIED_ROWS_MAX: usize = 1_000_000;
const VALUE: &[Column] = &[column("value", Kind::IntegerOrNull)];
const PROGRESS: &[Column] = &[
    column("partition", Kind::Integer),
    column("next_offset", Kind::Integer),
    column("epoch", Kind::Integer),
    column("owner", Kind::Text),
    Column { name: "stamp", kind: Kind::IntegerOrNull, optional: true },
];
const RESETS: &[Column] =
    &[column("partition", Kind::Integer), column("from_offset", Kind::Integer), column("to_offset", Kind::Integer)];

impl Query {
    pub const ALL: [Query; 10] = [
        Query::Total,
        Query::Partitions,
        Query::Processed,
        Query::Attempts,
        Query::DeadLetters,
        Query::Resets,
        Query::Value,
        Query::Facts,
        Query::Outbox,
        Query::Applied,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Query::Total => "total",
            Query::Partitions => "partitions",
            Query::Processed => "processed",
            Query::Attempts => "attempts",
            Query::DeadLetters => "dead_letters",
            Query::Resets => "resets",
            Query::Value => "value",
            Query::Facts => "facts",
            Query::Outbox => "outbox",
            Query::Applied => "applied",
        }
    }

    fn columns(self) -> &'static [Column] {
        match self {
            Query::Total => TOTAL,
            Query::Partitions => PROGRESS,
            Query::Processed | Query::Facts | Query::Outbox => PAIR,
            Query::Attempts | Query::DeadLetters => COUNTED,
            Query::Resets => RESETS,
            Query::Value => VALUE,
            Query::Applied => APPLIED,
        }
    }

    /// How many rows the query returns per group: `(least, most)`.
    fn rows(self, partitions: u32) -> (usize, usize) {
        match self {
            Query::Total => (1, 1),
            Query::Value => (0, 1),
            Query::Partitions => (partitions as usize, partitions as usize),
            Query::Processed | Query::Attempts | Query::DeadLetters | Query::Resets | Query::Facts | Query::Outbox => {
                (0, ROWS_MAX)
            }
            Query::Applied => (0, APPLIED_ROWS_MAX),
        }
    }

    /// Whether the model's store of `strategy` uses this field (or, for `partitions`, which
    /// every row uses, its stamp column): the queries a spec must give for the row.
    fn used_by(self, strategy: Strategy) -> bool {
        let rules = strategy.rules();
        match self {
            Query::Total | Query::Partitions => true,
            Query::Processed => {
                matches!(rules.sequence, Sequence::EffectRecordCommit | Sequence::DedupedThenCommit)
            }
            Query::Attempts | Query::DeadLetters => match rules.poison {
                PoisonPolicy::DeadLetter => true,
                PoisonPolicy::Unhandled | PoisonPolicy::Skip | PoisonPolicy::RetryForever => false,
            },
            Query::Resets => match rules.out_of_range {
                OutOfRangePolicy::Earliest => true,
                OutOfRangePolicy::Fail | OutOfRangePolicy::Silent => false,
            },
            Query::Value => match rules.effect {
                EffectKind::Set => true,
                EffectKind::Add => false,
            },
            Query::Facts => matches!(rules.sequence, Sequence::AtomicThenIndex | Sequence::AtomicWithOutbox),
            Query::Outbox => matches!(rules.sequence, Sequence::AtomicWithOutbox),
            // No row's store has it; `require` refuses it for a row.
            Query::Applied => false,
        }
    }
}

/// Whether the row's partition rows carry an offset stamp the spec must read.
fn stamped(strategy: Strategy) -> bool {
    matches!(strategy.rules().sequence, Sequence::Stamped)
}

/// A problem with an observation spec, or with what its queries return: one line naming the
/// spec, the query and the column where there is one.
#[derive(Debug)]
pub struct ObserveError {
    pub spec: PathBuf,
    pub query: Option<Query>,
    pub column: Option<&'static str>,
    pub problem: String,
}

impl fmt::Display for ObserveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "observation spec {}: ", self.spec.display())?;
        match (self.query, self.column) {
            (Some(query), Some(column)) => write!(f, "query '{}', column '{column}': ", query.name())?,
            (Some(query), None) => write!(f, "query '{}': ", query.name())?,
            (None, _) => {}
        }
        write!(f, "{}", self.problem)
    }
}

impl std::error::Error for ObserveError {}

/// The file as written: unknown keys are refused (a misspelt query would otherwise be left out).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    version: u64,
    /// `sqlite` (the default) or `postgres` (`kafka app --postgres` only).
    store: Option<String>,
    database: Option<String>,
    queries: BTreeMap<String, String>,
}

/// Where the queries run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    /// A SQLite database in the store directory, read from a copy of its files.
    Sqlite,
    /// The PostgreSQL database `kafka app --postgres` creates for the run, read through a
    /// read-only transaction.
    Postgres,
}

/// A loaded observation spec: where the database is in the store directory, and the queries.
#[derive(Clone, Debug)]
pub struct ObserveSpec {
    /// The file, as named on the command line (for messages and reproduce lines).
    pub path: PathBuf,
    /// The database, relative to the store directory (SQLite; empty for PostgreSQL).
    database: PathBuf,
    pub store: Store,
    queries: BTreeMap<Query, String>,
}

impl ObserveSpec {
    /// Reads and checks the file: its version, a relative database path, known query names.
    pub fn load(path: &Path) -> Result<ObserveSpec, ObserveError> {
        let fail = |problem: String| ObserveError { spec: path.to_path_buf(), query: None, column: None, problem };
        let length = std::fs::metadata(path).map_err(|error| fail(format!("cannot read: {error}")))?.len();
        if length > SPEC_BYTES_MAX {
            return Err(fail(format!("{length} bytes, more than the {SPEC_BYTES_MAX} an observation spec may have")));
        }
        let text = std::fs::read_to_string(path).map_err(|error| fail(format!("cannot read: {error}")))?;
        let file: SpecFile = toml::from_str(&text).map_err(|error| fail(one_line(&error.to_string())))?;
        if file.version != SPEC_VERSION {
            return Err(fail(format!("version {} (this build reads version {SPEC_VERSION})", file.version)));
        }
        let (store, database) = match (file.store.as_deref(), file.database) {
            (None | Some("sqlite"), None) => {
                return Err(fail("no database: a SQLite store names its file (database = \"app.db\")".to_string()));
            }
            (None | Some("sqlite"), Some(database)) => {
                let path = PathBuf::from(&database);
                let plain = path.components().all(|c| matches!(c, Component::Normal(_)));
                if database.is_empty() || !plain {
                    let problem = format!(
                        "database '{database}' must be a path inside the store directory (relative, without '..')"
                    );
                    return Err(fail(problem));
                }
                (Store::Sqlite, path)
            }
            (Some("postgres"), None) => (Store::Postgres, PathBuf::new()),
            (Some("postgres"), Some(database)) => {
                let problem = format!(
                    "database '{database}' with store = \"postgres\": the run creates the database, give no file"
                );
                return Err(fail(problem));
            }
            (Some(other), _) => return Err(fail(format!("store '{other}' (the stores are sqlite, postgres)"))),
        };
        let mut queries = BTreeMap::new();
        for (name, sql) in file.queries {
            let Some(query) = Query::ALL.into_iter().find(|query| query.name() == name) else {
                let known: Vec<&str> = Query::ALL.iter().map(|query| query.name()).collect();
                return Err(fail(format!("unknown query '{name}' (the queries are {})", known.join(", "))));
            };
            queries.insert(query, sql);
        }
        Ok(ObserveSpec { path: path.to_path_buf(), database, store, queries })
    }

    /// Refuses a spec without a query the claimed row's store uses (a field left out would be
    /// read as empty, and the model's rows there would show as a divergence of the consumer).
    pub fn require(&self, strategy: Strategy) -> Result<(), ObserveError> {
        if self.store == Store::Postgres {
            let problem = "store = \"postgres\" is read by `kafka app --postgres` only: a model row's store is SQLite";
            return Err(self.error(None, None, problem.to_string()));
        }
        if self.queries.contains_key(&Query::Applied) {
            let problem = "query 'applied' is read by `kafka app` only: a model row's store has no such field";
            return Err(self.error(Some(Query::Applied), None, problem.to_string()));
        }
        for query in Query::ALL {
            if query.used_by(strategy) && !self.queries.contains_key(&query) {
                return Err(self.error(None, None, format!("no query '{}', which row {strategy} uses", query.name())));
            }
        }
        Ok(())
    }

    fn error(&self, query: Option<Query>, column: Option<&'static str>, problem: String) -> ObserveError {
        ObserveError { spec: self.path.clone(), query, column, problem }
    }

    /// Reads every group's store from a copy of the database's files in `store_dir`, made in
    /// `scratch` (emptied first): the consumer's files are only read.
    pub fn observe(
        &self,
        store_dir: &Path,
        scratch: &Path,
        groups: &[String],
        strategy: Strategy,
        partitions: u32,
    ) -> Result<Vec<Observed>, ObserveError> {
        self.copy_database(store_dir, scratch)?;
        self.observe_copy(scratch, groups, strategy, partitions)
    }

    /// Copies the database's files from `store_dir` into `scratch` (emptied first).
    fn copy_database(&self, store_dir: &Path, scratch: &Path) -> Result<(), ObserveError> {
        let (parent, name) = self.database_place(store_dir)?;
        let copy_problem = |error: std::io::Error| format!("cannot copy the database's files: {error}");
        let scope = Scope::files(&parent, &name).map_err(|error| self.error(None, None, copy_problem(error)))?;
        let snapshot = Snapshot::take(&scope).map_err(|error| self.error(None, None, copy_problem(error)))?;
        if !snapshot.entries.contains_key(Path::new(&name)) {
            let problem = format!("no database {} in the store directory", parent.join(&name).display());
            return Err(self.error(None, None, problem));
        }
        let copy = scratch.join(self.database.parent().unwrap_or(Path::new("")));
        let reset = std::fs::remove_dir_all(scratch)
            .or_else(|error| if error.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(error) })
            .and_then(|()| std::fs::create_dir_all(&copy))
            .and_then(|()| snapshot.write_to(&copy));
        reset.map_err(|error| self.error(None, None, format!("cannot write a copy in {}: {error}", scratch.display())))
    }

    /// Reads every group's store from `copy`, a directory that is already a copy of the store
    /// (a kill point's): the database there is opened read-write, so that a hot journal is
    /// rolled back, and queried with `PRAGMA query_only`.
    pub fn observe_copy(
        &self,
        copy: &Path,
        groups: &[String],
        strategy: Strategy,
        partitions: u32,
    ) -> Result<Vec<Observed>, ObserveError> {
        let db = self.open_copy(copy)?;
        groups.iter().map(|group| self.observe_group(&db, group, strategy, partitions)).collect()
    }

    /// Opens the database in `copy` read-write (a hot journal is rolled back), then query-only.
    fn open_copy(&self, copy: &Path) -> Result<Connection, ObserveError> {
        let path = copy.join(&self.database);
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let open_problem = |error: rusqlite::Error| format!("cannot open the copy {}: {error}", path.display());
        let db =
            Connection::open_with_flags(&path, flags).map_err(|error| self.error(None, None, open_problem(error)))?;
        db.execute_batch("PRAGMA query_only = ON")
            .map_err(|error| self.error(None, None, format!("PRAGMA query_only = ON: {error}")))?;
        Ok(db)
    }

    /// `kafka app`'s use: refuses a spec whose queries are not `total` (required) and
    /// `applied` (optional), the two an application's database is judged by.
    pub fn require_app(&self) -> Result<(), ObserveError> {
        if !self.queries.contains_key(&Query::Total) {
            return Err(self.error(None, None, "no query 'total', which `kafka app` judges by".to_string()));
        }
        for query in self.queries.keys() {
            match query {
                Query::Total | Query::Applied => {}
                Query::Partitions
                | Query::Processed
                | Query::Attempts
                | Query::DeadLetters
                | Query::Resets
                | Query::Value
                | Query::Facts
                | Query::Outbox => {
                    let problem = "is for the model's rows: `kafka app` reads 'total' and 'applied' only";
                    return Err(self.error(Some(*query), None, problem.to_string()));
                }
            }
        }
        Ok(())
    }

    /// Where the database is, in `store_dir`.
    pub fn database_path(&self, store_dir: &Path) -> PathBuf {
        store_dir.join(&self.database)
    }

    /// The database's files relative to the store directory: the database and its journal,
    /// write-ahead log and WAL index, as SQLite names them.
    pub fn database_files(&self) -> [PathBuf; 4] {
        let name = self.database.as_os_str().to_string_lossy();
        ["", "-journal", "-wal", "-shm"].map(|suffix| PathBuf::from(format!("{name}{suffix}")))
    }

    /// Whether the spec reads the applied ids.
    pub fn has_applied(&self) -> bool {
        self.queries.contains_key(&Query::Applied)
    }

    /// `kafka app`'s observation: `group`'s total and (where the spec reads them) the ids
    /// applied in order, from a copy of the database's files made in `scratch`.
    pub fn observe_app(&self, store_dir: &Path, scratch: &Path, group: &str) -> Result<AppObserved, ObserveError> {
        self.copy_database(store_dir, scratch)?;
        let db = self.open_copy(scratch)?;
        let total_sql = self.queries.get(&Query::Total).expect("require_app checked it");
        let rows = self.run(&db, Query::Total, total_sql, group, 0)?;
        let read = Values { spec: self, query: Query::Total, group, partitions: 0 };
        let total = read.int(&rows[0], "total")?;
        let applied = match self.queries.get(&Query::Applied) {
            None => None,
            Some(sql) => {
                let rows = self.run(&db, Query::Applied, sql, group, 0)?;
                let read = Values { spec: self, query: Query::Applied, group, partitions: 0 };
                Some(rows.iter().map(|row| read.int(row, "id")).collect::<Result<_, _>>()?)
            }
        };
        Ok(AppObserved { total, applied })
    }

    fn database_place(&self, store_dir: &Path) -> Result<(PathBuf, String), ObserveError> {
        let full = store_dir.join(&self.database);
        let name = full.file_name().map(|name| name.to_string_lossy().into_owned());
        let parent = full.parent().map(Path::to_path_buf);
        match (parent, name) {
            (Some(parent), Some(name)) => Ok((parent, name)),
            _ => Err(self.error(None, None, format!("database '{}' names no file", self.database.display()))),
        }
    }

    fn observe_group(
        &self,
        db: &Connection,
        group: &str,
        strategy: Strategy,
        partitions: u32,
    ) -> Result<Observed, ObserveError> {
        let mut observed = Observed::default();
        for (&query, sql) in &self.queries {
            let rows = self.run(db, query, sql, group, partitions)?;
            let read = Values { spec: self, query, group, partitions };
            let pair =
                |row: &Row| Ok(Processed { partition: read.partition(row)?, offset: read.unsigned(row, "offset")? });
            let counted = |row: &Row| {
                let (partition, offset) = (read.partition(row)?, read.unsigned(row, "offset")?);
                Ok(Attempts { partition, offset, attempts: read.unsigned(row, "attempts")? })
            };
            let reset = |row: &Row| {
                let (from, to) = (read.unsigned(row, "from_offset")?, read.unsigned(row, "to_offset")?);
                Ok(Reset { partition: read.partition(row)?, from, to })
            };
            match query {
                Query::Total => observed.total = read.int(&rows[0], "total")?,
                Query::Value => observed.value = rows.first().and_then(|row| row.get("value").flatten()),
                Query::Partitions => observed.partitions = read.progress_rows(&rows, strategy)?,
                Query::Processed => observed.processed = rows.iter().map(pair).collect::<Result<_, _>>()?,
                Query::Facts => observed.facts = rows.iter().map(pair).collect::<Result<_, _>>()?,
                Query::Outbox => observed.outbox = rows.iter().map(pair).collect::<Result<_, _>>()?,
                Query::Attempts => observed.attempts = rows.iter().map(counted).collect::<Result<_, _>>()?,
                Query::DeadLetters => observed.dead_letters = rows.iter().map(counted).collect::<Result<_, _>>()?,
                Query::Resets => observed.resets = rows.iter().map(reset).collect::<Result<_, _>>()?,
                Query::Applied => unreachable!("`require` refuses 'applied' for a model row"),
            }
        }
        observed.processed.sort();
        observed.facts.sort();
        observed.outbox.sort();
        observed.attempts.sort();
        observed.dead_letters.sort();
        observed.resets.sort();
        Ok(observed)
    }

    /// Runs one query for `group`: its columns by name, each value of the column's kind, and a
    /// row count in the query's bounds.
    fn run(
        &self,
        db: &Connection,
        query: Query,
        sql: &str,
        group: &str,
        partitions: u32,
    ) -> Result<Vec<Row>, ObserveError> {
        let fail = |column: Option<&'static str>, problem: String| self.error(Some(query), column, problem);
        let mut statement =
            db.prepare(sql).map_err(|error| fail(None, format!("{sql}: {}", one_line(&error.to_string()))))?;
        match statement.parameter_index(":group") {
            Ok(Some(_)) if statement.parameter_count() == 1 => {}
            Ok(_) | Err(_) => {
                let problem = format!("{sql}: must take exactly one parameter, :group (every query reads one group)");
                return Err(fail(None, problem));
            }
        }
        let names: Vec<String> = statement.column_names().into_iter().map(str::to_string).collect();
        let columns = query.columns();
        for name in &names {
            if !columns.iter().any(|column| column.name == name) {
                let expected: Vec<&str> = columns.iter().map(|column| column.name).collect();
                let problem = format!("returns a column '{name}' (the columns are {})", expected.join(", "));
                return Err(fail(None, problem));
            }
        }
        for column in columns.iter().filter(|column| !column.optional) {
            if !names.iter().any(|name| name == column.name) {
                let problem = format!("not returned (the query returns {})", names.join(", "));
                return Err(fail(Some(column.name), problem));
            }
        }
        let (least, most) = query.rows(partitions);
        let mut rows = Vec::new();
        let mut results = statement
            .query(rusqlite::named_params! {":group": group})
            .map_err(|error| fail(None, format!("{sql}: {}", one_line(&error.to_string()))))?;
        while let Some(result) =
            results.next().map_err(|error| fail(None, format!("{sql}: {}", one_line(&error.to_string()))))?
        {
            if rows.len() == most {
                return Err(fail(None, format!("more than {most} rows for {group}")));
            }
            let mut row = Row::default();
            for (index, name) in names.iter().enumerate() {
                let column = columns.iter().find(|column| column.name == name).expect("checked above");
                let value = result.get_ref(index).map_err(|error| fail(Some(column.name), error.to_string()))?;
                match (column.kind, value) {
                    (Kind::Integer | Kind::IntegerOrNull, ValueRef::Integer(value)) => {
                        row.integers.insert(column.name, Some(value));
                    }
                    (Kind::IntegerOrNull, ValueRef::Null) => {
                        row.integers.insert(column.name, None);
                    }
                    (Kind::Text, ValueRef::Text(text)) => row.owner = Some(String::from_utf8_lossy(text).into_owned()),
                    (Kind::Integer | Kind::IntegerOrNull | Kind::Text, other) => {
                        let expected = match column.kind {
                            Kind::Integer => "an integer",
                            Kind::IntegerOrNull => "an integer or NULL",
                            Kind::Text => "text",
                        };
                        let problem = format!("{} for {group}, where {expected} is expected", kind_name(other));
                        return Err(fail(Some(column.name), problem));
                    }
                }
            }
            rows.push(row);
        }
        if rows.len() < least {
            return Err(fail(None, format!("{} rows for {group}, where {least} are expected", rows.len())));
        }
        Ok(rows)
    }
}

/// What `kafka app` reads of one group: its total, and the ids applied in order where the
/// spec has an `applied` query.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppObserved {
    pub total: i64,
    pub applied: Option<Vec<i64>>,
}

/// One row a query returned: its integer columns (None: NULL) and its text column.
#[derive(Default)]
struct Row {
    integers: BTreeMap<&'static str, Option<i64>>,
    owner: Option<String>,
}

impl Row {
    /// The integer column's value (`None` when the query has no such column).
    fn get(&self, column: &str) -> Option<Option<i64>> {
        self.integers.get(column).copied()
    }
}

/// Reads one query's rows for one group as the model's values, each error naming the query,
/// the column and the group.
struct Values<'a> {
    spec: &'a ObserveSpec,
    query: Query,
    group: &'a str,
    partitions: u32,
}

impl Values<'_> {
    fn fail(&self, column: &'static str, problem: String) -> ObserveError {
        self.spec.error(Some(self.query), Some(column), problem)
    }

    fn int(&self, row: &Row, column: &'static str) -> Result<i64, ObserveError> {
        row.get(column).flatten().ok_or_else(|| self.fail(column, format!("NULL for {}", self.group)))
    }

    fn unsigned(&self, row: &Row, column: &'static str) -> Result<u64, ObserveError> {
        let value = self.int(row, column)?;
        u64::try_from(value).map_err(|_| self.fail(column, format!("{value} for {}: negative", self.group)))
    }

    fn partition(&self, row: &Row) -> Result<u32, ObserveError> {
        let value = self.unsigned(row, "partition")?;
        let partitions = self.partitions;
        u32::try_from(value).ok().filter(|&p| p < partitions).ok_or_else(|| {
            self.fail("partition", format!("{value} for {}: the log has {partitions} partitions", self.group))
        })
    }

    /// The partition rows in partition order: exactly one per partition.
    fn progress_rows(&self, rows: &[Row], strategy: Strategy) -> Result<Vec<ProgressRow>, ObserveError> {
        let mut by_partition: BTreeMap<u32, ProgressRow> = BTreeMap::new();
        for row in rows {
            let index = self.partition(row)?;
            // A stamp the row does not use is compared like any other field (the model's is
            // none); one the row uses must be read.
            let stamp = match row.get("stamp") {
                None if stamped(strategy) => {
                    return Err(self.fail("stamp", format!("not returned, and row {strategy} stamps its offsets")));
                }
                None | Some(None) => None,
                Some(Some(stamp)) => {
                    Some(u64::try_from(stamp).map_err(|_| self.fail("stamp", format!("negative for {}", self.group)))?)
                }
            };
            let owner = row.owner.clone().unwrap_or_default();
            let (next_offset, epoch) = (self.unsigned(row, "next_offset")?, self.int(row, "epoch")?);
            if by_partition.insert(index, ProgressRow { next_offset, epoch, owner, stamp }).is_some() {
                return Err(self.fail("partition", format!("two rows for partition {index} of {}", self.group)));
            }
        }
        Ok(by_partition.into_values().collect())
    }
}

fn kind_name(value: ValueRef<'_>) -> &'static str {
    match value {
        ValueRef::Null => "NULL",
        ValueRef::Integer(_) => "an integer",
        ValueRef::Real(_) => "a real",
        ValueRef::Text(_) => "text",
        ValueRef::Blob(_) => "a blob",
    }
}

/// A library's message as one line (toml's errors span several, with a caret under the spot).
fn one_line(text: &str) -> String {
    text.lines().map(str::trim).filter(|line| !line.is_empty()).collect::<Vec<_>>().join(" ")
}
