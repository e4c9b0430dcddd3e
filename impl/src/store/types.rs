//! The types both store backends share: options, errors, rows and the arguments of the
//! writes. A leaf of `store`: it imports neither backend nor the front, so `sqlite.rs` and
//! `postgres.rs` import it and `mod.rs` imports all three without a cycle.

use crate::strategy::DedupKey;
use serde::Serialize;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// The schema version in `PRAGMA user_version` (SQLite) or `meta` (PostgreSQL); a database
/// with another one is refused. Version 4 records the log's identity (`meta.log_id`); version 5
/// adds the transactions of the transactional strategies (`txns`); version 6 the seeds' edge
/// cases (spec.md §3.4): the set strategies' `effect.value` and the dual writes' `facts` and
/// `outbox`.
pub const SCHEMA_VERSION: i64 = 6;

/// The most partitions a store (and its log) may have: `init --partitions` accepts
/// `1..=PARTITIONS_MAX`, and a store whose `meta.partitions` says otherwise is refused on open
/// (`StoreError::BadMeta`) rather than iterated over.
pub const PARTITIONS_MAX: u32 = 64;

/// The longest group or owner name, in bytes.
pub const NAME_BYTES_MAX: usize = 64;

/// Checks a group or owner name: 1 to `NAME_BYTES_MAX` bytes, none of them a control character
/// or white space (a newline would split `status`'s lines, a space its columns). Returns why
/// not, in words that follow the name.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(format!("a name is 1 to {NAME_BYTES_MAX} bytes long, this one is {}", name.len()));
    }
    if let Some(bad) = name.chars().find(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!("a name holds no control character or white space, this one holds {:?}", bad));
    }
    Ok(())
}

/// `meta.partitions`, checked: `1..=PARTITIONS_MAX` (a damaged value would otherwise be
/// iterated over, or wrap).
pub(super) fn check_partitions(target: &str, found: i64) -> Result<u32, StoreError> {
    match u32::try_from(found) {
        Ok(partitions) if (1..=PARTITIONS_MAX).contains(&partitions) => Ok(partitions),
        _ => Err(StoreError::BadMeta {
            target: target.to_string(),
            key: "partitions",
            found,
            expected: format!("1..={PARTITIONS_MAX}"),
        }),
    }
}

/// The totals a delta can be added to without leaving `i64`: `low..=high`. The effect's
/// statement adds only within them (both backends), so an overflow changes no row and is
/// reported as `StoreError::Overflow` instead of becoming SQLite's REAL or PostgreSQL's error.
pub(super) fn totals_accepting(delta: i64) -> (i64, i64) {
    // Only a negative delta narrows the low end and only a positive one the high end. Neither
    // subtraction overflows: each takes a value of the bound's sign (or 0) from that bound.
    (i64::MIN - delta.min(0), i64::MAX - delta.max(0))
}

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

/// SQLite's synchronous level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Synchronous {
    /// Every COMMIT durable before it returns, a power cut included: `EXTRA` in DELETE mode
    /// (the journal's unlink, which is the commit, followed by a sync of its directory),
    /// `FULL` in WAL mode. The store's setting.
    Durable,
    /// `FULL` in either mode: the store's setting before power cuts were judged, whose
    /// DELETE-mode commit a cut right after it takes back. Only `consumer power-cuts` uses
    /// it, to show that.
    Full,
}

#[derive(Clone, Copy, Debug)]
pub struct StoreOptions {
    pub journal: Journal,
    /// How long a writer waits for another process's transaction before giving up.
    pub busy_timeout: Duration,
    pub synchronous: Synchronous,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            journal: Journal::Delete,
            busy_timeout: Duration::from_secs(5),
            synchronous: Synchronous::Durable,
        }
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
    /// `init` found a file at the store's path that is not an SQLite database (a non-empty file
    /// without SQLite's 100-byte header): it is left as it is, never overwritten.
    NotAStore {
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
    /// A `txns` row holds a state this build does not know.
    BadTxnState {
        group: String,
        partition: u32,
        first_output: u64,
        state: String,
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
    /// Adding a record's delta to its group's total would leave `i64`: the write's transaction
    /// is rolled back (nothing of it committed) and the store stays as it was.
    Overflow {
        group: String,
        partition: u32,
        offset: u64,
        total: i64,
        delta: i64,
    },
    /// A `meta` row holds a value this build cannot use (`target`: the SQLite path or the
    /// PostgreSQL target): the store's metadata is damaged, and nothing is read past it.
    BadMeta {
        target: String,
        key: &'static str,
        found: i64,
        expected: String,
    },
    /// The PostgreSQL server did not answer within `waited` (`during` says what waited).
    PgTimeout {
        target: String,
        waited: Duration,
        during: &'static str,
    },
    /// The thread that bounds a PostgreSQL connection's wait could not be started.
    PgThread {
        target: String,
        source: std::io::Error,
    },
}

impl StoreError {
    /// Whether the error is a refusal to protect data (the command line's exit status 4): an
    /// overflowing total is refused rather than committed wrong.
    pub fn is_refusal(&self) -> bool {
        match self {
            StoreError::Overflow { .. } => true,
            StoreError::Sqlite { .. }
            | StoreError::Locked { .. }
            | StoreError::SchemaVersion { .. }
            | StoreError::NotInitialized { .. }
            | StoreError::AlreadyExists { .. }
            | StoreError::NotAStore { .. }
            | StoreError::Fenced { .. }
            | StoreError::NoSuchPartition { .. }
            | StoreError::BadTxnState { .. }
            | StoreError::NoDeadLetter { .. }
            | StoreError::Postgres { .. }
            | StoreError::PgNotInitialized { .. }
            | StoreError::PgAlreadyInitialised { .. }
            | StoreError::PgSchemaVersion { .. }
            | StoreError::BadMeta { .. }
            | StoreError::PgTimeout { .. }
            | StoreError::PgThread { .. } => false,
        }
    }
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
            StoreError::NotAStore { path } => write!(
                f,
                "{} exists and is not an onceproof store (not an SQLite database): init leaves it as it is",
                path.display()
            ),
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
            StoreError::BadTxnState { group, partition, first_output, state } => write!(
                f,
                "transaction of group {group} partition {partition} at output offset {first_output} has the \
                 unknown state '{state}'"
            ),
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
            StoreError::Overflow { group, partition, offset, total, delta } => write!(
                f,
                "overflow: group {group} partition {partition} offset {offset}: total {total} + delta {delta} = {} \
                 does not fit a 64-bit total; nothing of the transaction was committed",
                i128::from(*total) + i128::from(*delta)
            ),
            StoreError::BadMeta { target, key, found, expected } => write!(
                f,
                "database {target}: meta.{key} is {found}, expected {expected} (the store's metadata is damaged)"
            ),
            StoreError::PgTimeout { target, waited, during } => write!(
                f,
                "database {target}: no answer within {:.1} s ({during}; is the server stopped or overloaded?)",
                waited.as_secs_f64()
            ),
            StoreError::PgThread { target, source } => {
                write!(f, "database {target}: cannot start the connection's thread: {source}")
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

/// A partition an owner's start claimed (or that follow mode adopted with a claim): the new
/// epoch of its lease, and the committed next offset it resumes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claimed {
    pub partition: u32,
    pub epoch: i64,
    pub next_offset: u64,
}

/// How a write guards itself: `atomic` writes blindly, `atomic-fenced` checks the epoch,
/// `atomic-cas` serialises on the stored next offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    Blind,
    Fenced { epoch: i64 },
    Cas,
}

/// What `apply-atomic` records besides the effect and the next offset (spec.md §3.4, dual
/// writes), in the same transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicAlso {
    Nothing,
    /// dual-write: each applied record's fact (its index write follows, apart).
    Fact,
    /// outbox: each applied record's fact and its outbox row, which the relay copies to the
    /// index and deletes.
    FactAndOutbox,
}

/// One fact of the dual-write rows: record `offset` of `partition` was applied by `group`. The
/// store's `facts` and `outbox` tables and the index hold them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Fact {
    pub group: String,
    pub partition: u32,
    pub offset: u64,
}

/// The set strategies' value of the record at `offset`: its own value `v(o) = o + 1` (spec.md
/// §3.4), so that an older set is told from a newer one.
pub fn set_value(offset: u64) -> i64 {
    // Offsets are stored as signed 64-bit integers in both backends: below `i64::MAX`.
    i64::try_from(offset).ok().and_then(|offset| offset.checked_add(1)).expect("a stored offset is below i64::MAX")
}

/// The partition column of a processed id: the record's, or (`DedupKey::OffsetOnly`, the trap)
/// 0 for every partition, so that the id is the offset alone (the model's `(0, o)`).
pub(super) fn processed_partition(partition: u32, key: DedupKey) -> u32 {
    match key {
        DedupKey::PartitionOffset => partition,
        DedupKey::OffsetOnly => 0,
    }
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

/// What `Store::rewind_to_log_end` changed in one (group, partition) whose log lost records
/// (`consumer repair`): one transaction, recorded in `resets` when the next offset moved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rewind {
    pub group: String,
    pub partition: u32,
    /// The stored next offset before the rewind.
    pub from: u64,
    /// The next offset after it: the log end when `from` was past it, else `from`.
    pub to: u64,
    /// Processed ids (dedup strategies) at or past the log end, dropped: they named records
    /// the log no longer holds, and would make the records appended there later be skipped.
    pub processed_dropped: u64,
    /// Counted failed attempts (atomic-dlq) at or past the log end, dropped likewise.
    pub attempts_dropped: u64,
    /// The offset stamp before, when it was at or past the log end (it moves just below it).
    pub stamp_from: Option<u64>,
    /// The partition's epoch after the rewind, one higher: an owner still running on it is fenced.
    pub epoch: i64,
}

/// How a transaction of the transactional strategies ended in the store (`txns.state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TxnState {
    /// `commit-txn`'s store transaction committed it: the commit point. Its commit marker
    /// follows in the output log (or a later take of the partition writes it).
    Committed,
    /// A take of the partition aborted it (txn-fenced): its abort marker follows.
    Aborted,
}

impl TxnState {
    /// The value of `txns.state`.
    pub const fn name(self) -> &'static str {
        match self {
            TxnState::Committed => "committed",
            TxnState::Aborted => "aborted",
        }
    }

    /// The state a `txns.state` value names; `None` for another text.
    pub fn from_name(text: &str) -> Option<TxnState> {
        [TxnState::Committed, TxnState::Aborted].into_iter().find(|state| state.name() == text)
    }
}

/// One row of `txns`: a transaction of the transactional id (`group`, `partition`) at producer
/// epoch `epoch`, whose data records start at `first_output` in output partition `partition`
/// and carry the input records `input_offset..input_end`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TxnRow {
    pub group: String,
    pub partition: u32,
    pub first_output: u64,
    pub epoch: i64,
    pub input_offset: u64,
    pub input_end: u64,
    pub state: TxnState,
}

/// The `txns` table of one (group, partition) inside an output section's transaction
/// (`Store::output_section`): what a take of the partition reads and records while it holds
/// the partition's progress row.
pub trait TxnTable {
    /// How the transaction whose data records start at `first_output` ended in the store;
    /// `None` when the store never heard of it (it is open, or its owner died before its commit).
    fn state(&mut self, first_output: u64) -> Result<Option<TxnState>, StoreError>;
    /// Records an abort (a take's, txn-fenced) in the section's transaction.
    fn record_aborted(&mut self, row: &TxnRow) -> Result<(), StoreError>;
}

/// The phases of a write a crash point can name; `Inside` runs after the statements and
/// before COMMIT, so a crash there leaves an uncommitted transaction behind.
pub type InsideHook<'a> = &'a mut dyn FnMut();

/// How a write's transaction ends, after its `inside` hook has run (both backends' `write_ending`).
pub(super) enum Ending<T> {
    Commit(T),
    /// Nothing of the transaction is kept (a poison record's attempt that is not counted).
    RollBack(T),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bounds are exact: a total at a bound takes the delta, one step past it would leave
    /// `i64` (checked against `checked_add`, not against the formula's own arithmetic).
    #[test]
    fn totals_accepting_is_exactly_the_totals_that_do_not_overflow() {
        let cases: [(i64, (i64, i64)); 7] = [
            (i64::MIN, (0, i64::MAX)),
            (-5, (i64::MIN + 5, i64::MAX)),
            (-1, (i64::MIN + 1, i64::MAX)),
            (0, (i64::MIN, i64::MAX)),
            (1, (i64::MIN, i64::MAX - 1)),
            (5, (i64::MIN, i64::MAX - 5)),
            (i64::MAX, (i64::MIN, 0)),
        ];
        for (delta, expected) in cases {
            let (low, high) = totals_accepting(delta);
            assert_eq!((low, high), expected, "delta {delta}");
            assert!(low.checked_add(delta).is_some() && high.checked_add(delta).is_some(), "delta {delta}");
            if let Some(below) = low.checked_sub(1) {
                assert!(below.checked_add(delta).is_none(), "delta {delta}: {below} also takes it");
            }
            if let Some(above) = high.checked_add(1) {
                assert!(above.checked_add(delta).is_none(), "delta {delta}: {above} also takes it");
            }
        }
    }

    #[test]
    fn check_partitions_accepts_1_to_the_maximum_only() {
        let max = i64::from(PARTITIONS_MAX);
        let cases =
            [(i64::MIN, None), (-1, None), (0, None), (1, Some(1)), (max, Some(PARTITIONS_MAX)), (max + 1, None)];
        for (found, expected) in cases {
            let checked = check_partitions("t", found);
            match (expected, checked) {
                (Some(partitions), Ok(got)) => assert_eq!(got, partitions, "found {found}"),
                (None, Err(StoreError::BadMeta { key: "partitions", found: reported, .. })) => {
                    assert_eq!(reported, found)
                }
                (expected, got) => panic!("found {found}: expected {expected:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn check_name_accepts_1_to_the_maximum_bytes_without_spaces_or_controls() {
        let longest = "g".repeat(NAME_BYTES_MAX);
        let too_long = "g".repeat(NAME_BYTES_MAX + 1);
        let cases = [
            ("g", true),
            (longest.as_str(), true),
            ("", false),
            (too_long.as_str(), false),
            ("a b", false),
            ("a\tb", false),
            ("a\nb", false),
            ("a\u{7}b", false),
        ];
        for (name, valid) in cases {
            assert_eq!(check_name(name).is_ok(), valid, "name {name:?}: {:?}", check_name(name));
        }
    }

    #[test]
    fn small_conversions_of_the_rows() {
        assert_eq!([set_value(0), set_value(41)], [1, 42]);
        assert_eq!(processed_partition(3, DedupKey::PartitionOffset), 3);
        assert_eq!(processed_partition(3, DedupKey::OffsetOnly), 0);
        for state in [TxnState::Committed, TxnState::Aborted] {
            assert_eq!(TxnState::from_name(state.name()), Some(state));
        }
        assert_eq!([TxnState::Committed.name(), TxnState::Aborted.name()], ["committed", "aborted"]);
        assert_eq!(TxnState::from_name("open"), None);
        assert_eq!(["delete".parse(), "wal".parse()], [Ok(Journal::Delete), Ok(Journal::Wal)]);
        assert!("WAL".parse::<Journal>().is_err());
    }
}
