//! The external systems of the seeds' edge cases (spec.md §3.4, §10 "External effects and dual
//! writes"): what lies outside the store's transaction, each a separate SQLite file in the data
//! directory, created by `consumer init`.
//!
//! - `email.rs` — `EmailProvider` (`external.db`): a stand-in email provider that records every
//!   request durably before it answers and drops a request whose idempotency key it received
//!   before (the model's inbox).
//! - `index.rs` — `Index` (`index.db`): the second store of the dual-write rows, a set of facts.
//! - `relay.rs` — `Relay`: the outbox's relay, which copies the first outbox row of a group to
//!   the index (idempotently) and then deletes it.
//! - `summary.rs` — `summarize`: what `consumer status` shows of a group's emails and facts.
//!
//! Files, a DAG: this one (`ExternalDir`, `ExternalError`, the connection rules) <- `email.rs`,
//! `index.rs` <- `relay.rs`, `summary.rs`. Neither file is the store: a write to one never shares a
//! transaction with the store's, which is the point of the rows that use them.

mod email;
mod index;
mod relay;
mod summary;

pub use email::{EmailProvider, EmailRequest, Received};
pub use index::Index;
pub use relay::Relay;
pub use summary::{summarize, EmailSummary, GroupExternals, IndexSummary};

use crate::log::Log;
use crate::store::StoreError;
use rusqlite::{Connection, TransactionBehavior};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The email provider's file in the data directory.
pub const PROVIDER_FILE: &str = "external.db";
/// The index's file in the data directory.
pub const INDEX_FILE: &str = "index.db";
/// How long a write waits for another process's transaction on the same file (several owner
/// processes email at once).
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a data directory's external systems live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalDir {
    dir: PathBuf,
}

impl ExternalDir {
    /// The data directory `dir` (the one holding `log/` and, by default, `store.db`).
    pub fn new(dir: &Path) -> ExternalDir {
        ExternalDir { dir: dir.to_path_buf() }
    }

    /// The data directory of an opened log: the parent of its `log/` directory.
    pub fn beside(log: &Log) -> ExternalDir {
        let (_, log_dir) = log.location();
        ExternalDir { dir: log_dir.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf) }
    }

    pub fn provider_path(&self) -> PathBuf {
        self.dir.join(PROVIDER_FILE)
    }

    pub fn index_path(&self) -> PathBuf {
        self.dir.join(INDEX_FILE)
    }

    /// Creates the provider's and the index's files (`consumer init`); a file that exists is
    /// kept once its version is checked. The directory is synced, so the new files survive a
    /// power cut.
    pub fn create(&self) -> Result<(), ExternalError> {
        EmailProvider::create(&self.provider_path())?;
        Index::create(&self.index_path())?;
        // A new file's directory entry is durable once its directory is synced.
        std::fs::File::open(&self.dir)
            .and_then(|dir| dir.sync_all())
            .map_err(|source| ExternalError::Io { path: self.dir.clone(), source })
    }

    pub fn open_provider(&self) -> Result<EmailProvider, ExternalError> {
        EmailProvider::open(&self.provider_path())
    }

    pub fn open_index(&self) -> Result<Index, ExternalError> {
        Index::open(&self.index_path())
    }
}

#[derive(Debug)]
pub enum ExternalError {
    /// A statement failed; carries the file and the SQL.
    Sqlite {
        path: PathBuf,
        sql: &'static str,
        source: rusqlite::Error,
    },
    /// The file is not there: the data directory was initialised before the external systems
    /// existed, or is not one.
    Missing {
        path: PathBuf,
    },
    /// The file is another kind of file, or of another version.
    Version {
        path: PathBuf,
        found: i64,
        expected: i64,
    },
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The relay's store write or read.
    Store(StoreError),
}

impl fmt::Display for ExternalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExternalError::Sqlite { path, sql, source } => write!(
                f,
                "database {}: {source} (in: {})",
                path.display(),
                sql.split_whitespace().collect::<Vec<_>>().join(" ")
            ),
            ExternalError::Missing { path } => write!(
                f,
                "{} does not exist: the data directory has no external systems (run `consumer init` on a new \
                 directory)",
                path.display()
            ),
            ExternalError::Version { path, found, expected } => {
                write!(f, "database {} has version {found}, this build reads version {expected}", path.display())
            }
            ExternalError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            ExternalError::Store(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for ExternalError {}

impl From<StoreError> for ExternalError {
    fn from(error: StoreError) -> Self {
        ExternalError::Store(error)
    }
}

/// The error of a failed statement on `path`.
fn fail<'a>(path: &'a Path, sql: &'static str) -> impl Fn(rusqlite::Error) -> ExternalError + 'a {
    move |source| ExternalError::Sqlite { path: path.to_path_buf(), sql, source }
}

/// Creates `path` with `schema` at `version` unless it exists; an existing file must be at
/// `version`.
fn create_file(path: &Path, schema: &'static str, version: i64) -> Result<(), ExternalError> {
    let mut conn = connect(path)?;
    let found: i64 =
        conn.pragma_query_value(None, "user_version", |row| row.get(0)).map_err(fail(path, "PRAGMA user_version"))?;
    // Version 0 is a file `init` made and was killed before it committed: the schema and the
    // version commit together, so such a file holds no table and is finished here.
    if found != 0 {
        return open_file(path, version).map(|_| ());
    }
    let tx = conn.transaction().map_err(fail(path, "BEGIN"))?;
    tx.execute_batch(schema).map_err(fail(path, "schema"))?;
    tx.pragma_update(None, "user_version", version).map_err(fail(path, "PRAGMA user_version"))?;
    tx.commit().map_err(fail(path, "COMMIT"))
}

/// Opens `path`, which must exist at `version`.
fn open_file(path: &Path, version: i64) -> Result<Connection, ExternalError> {
    if !path.exists() {
        return Err(ExternalError::Missing { path: path.to_path_buf() });
    }
    let conn = connect(path)?;
    let found: i64 =
        conn.pragma_query_value(None, "user_version", |row| row.get(0)).map_err(fail(path, "PRAGMA user_version"))?;
    if found != version {
        return Err(ExternalError::Version { path: path.to_path_buf(), found, expected: version });
    }
    Ok(conn)
}

/// A connection with the store's durability: DELETE journal, `synchronous=EXTRA` (a COMMIT is
/// durable before it returns, a power cut included: the journal's unlink, the commit, is
/// followed by a sync of its directory), and a busy timeout for the other processes.
fn connect(path: &Path) -> Result<Connection, ExternalError> {
    let conn = Connection::open(path).map_err(fail(path, "open"))?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(fail(path, "busy_timeout"))?;
    conn.pragma_update(None, "journal_mode", "DELETE").map_err(fail(path, "PRAGMA journal_mode"))?;
    conn.pragma_update(None, "synchronous", "EXTRA").map_err(fail(path, "PRAGMA synchronous = EXTRA"))?;
    Ok(conn)
}

/// Runs `body` in one `BEGIN IMMEDIATE` transaction of `conn`, then `inside` (a crash point:
/// the transaction still open), then COMMIT. An error from `body` rolls it back.
fn write<T>(
    conn: &mut Connection,
    path: &Path,
    inside: crate::store::InsideHook<'_>,
    body: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, ExternalError>,
) -> Result<T, ExternalError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(fail(path, "BEGIN IMMEDIATE"))?;
    let value = body(&tx)?;
    inside();
    tx.commit().map_err(fail(path, "COMMIT"))?;
    Ok(value)
}
