//! The conformance library's errors: typed, carrying the consumer's and the model's own errors
//! with the context they lack (the file, the owner, the worker's line).
//!
//! Every error renders as one self-contained line, its cause's message included, as the
//! consumer's errors do (`Error::Replay` alone adds the replay's diff and reproduce lines);
//! `source()` still exposes the typed cause. Print them with `{}`: anyhow's `{:#}` would
//! repeat each cause.

use crate::replay::ReplayFailure;
use consumer::external::ExternalError;
use consumer::log::{LogError, ReplicationError};
use consumer::owner::OwnerError;
use consumer::store::StoreError;
use consumer::txn::TxnError;
use model::check::{Unreachable, Verdict};
use model::trace::TraceError;
use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// An error of the conformance library.
#[derive(Debug)]
pub enum Error {
    /// A file system operation on `path` failed; `doing` is the verb (`read`, `create`, ...).
    Io { path: PathBuf, doing: &'static str, source: io::Error },
    /// A path named on the command line does not exist.
    NoSuchPath { path: PathBuf },
    /// A trace file is not a trace this build replays.
    Trace { path: PathBuf, source: TraceError },
    /// A trace file's actions are not a run of the model (`source` names the first step).
    NotInModel { path: PathBuf, source: Unreachable },
    /// A scenario of `scenarios::all` does not replay in the model as written.
    Scenario { name: String, source: ScenarioError },
    /// A corpus file did not conform; `reproduce` is the command that replays it again.
    Replay { path: PathBuf, reproduce: String, failure: Box<ReplayFailure> },
    /// The harness's own store: creating it, a rebalance's claim, or reading it back. (Boxed,
    /// as `Owner`'s source: they are the largest errors, and every `Result` here carries one.)
    Store(Box<StoreError>),
    /// The email provider's or the index's file (spec.md §10, external effects) failed; the
    /// error carries the file and the SQL.
    External(Box<ExternalError>),
    /// The harness's own log: the producer's appends, retention, or reading it back.
    Log(LogError),
    /// The harness's own replicated log (the acks rows): an append, an acknowledgement or a
    /// broker's step the real log refused or failed.
    Replication(Box<ReplicationError>),
    /// The harness's downstream reader of the output log (the txn rows).
    Txn(Box<TxnError>),
    /// The model answers the `acks=all` send in flight to `partition`; the real log says it is
    /// still waiting for the high watermark.
    AckWaiting { partition: u8, high_watermark: u64 },
    /// The model answers a send to `partition` the harness has none in flight for.
    NothingInFlight { partition: u8 },
    /// The model's downstream reader takes output record `offset` of `partition`; the real
    /// reader did something else (`found`).
    Reader { partition: u8, offset: u8, found: String },
    /// An in-process owner could not start, or refused or failed a step.
    Owner { group: String, owner: String, source: Box<OwnerError> },
    /// A worker process could not start, or refused a step, or broke the line protocol.
    Worker { group: String, owner: String, source: WorkerError },
    /// A consumer process of the open protocol (PROTOCOL.md): `who` is the owner (`g0/o1`, or
    /// `g0/o0'` for an earlier incarnation of o0 still running after a pause) or `store`.
    Protocol { who: String, source: crate::protocol::ProtocolError },
    /// The harness could not reach the PostgreSQL server behind `--postgres`.
    PostgresConnect(postgres::Error),
    /// A statement of the harness itself (creating a replay's database) failed.
    Postgres { sql: String, source: postgres::Error },
    /// The `--postgres` URL has no `scheme://`, so its database name cannot be replaced.
    PostgresUrl,
    /// The model acted with an owner the harness does not have running.
    NotRunning { group: String, owner: String },
    /// The model's `fail-out-of-range` names a partition the real owner holds no lease on.
    NoLease { group: String, owner: String, partition: u32 },
    /// The model retries an append the harness, as the producer, has no unacknowledged send for.
    NothingToRetry { partition: u8 },
    /// The real state has no model counterpart: the abstraction function cannot map it.
    Unobservable(Unobservable),
    /// The observation spec (`--observe`) cannot be used, or its queries returned what no
    /// model store is.
    Observe(Box<crate::observe::ObserveError>),
    /// With an observation spec, the store role's `observe` and the database disagree:
    /// `role` and `database` are the differing fields, in a few words each.
    RoleDisagrees { group: String, role: String, database: String },
    /// The model took a step the harness cannot make happen in the real system.
    Unsupported(&'static str),
    /// An output path that exists and is not what would be written (`kind`: "regular file" or
    /// "directory"): refused, never replaced.
    NotReplaced { given: String, path: PathBuf, kind: &'static str },
    /// `keep`: a name that is not a plain trace file name (`why` says what it has).
    KeepName { name: String, why: &'static str },
    /// `keep`: a kept trace of that name exists with other contents.
    KeptDiffers { path: PathBuf },
}

impl Error {
    /// For `map_err`: an I/O error on `path` while `doing` something to it.
    pub fn io<'a>(path: &'a Path, doing: &'static str) -> impl FnOnce(io::Error) -> Error + 'a {
        move |source| Error::Io { path: path.to_path_buf(), doing, source }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, doing, source } => write!(f, "{}: cannot {doing}: {source}", path.display()),
            Error::NoSuchPath { path } => write!(f, "{}: no such file or directory", path.display()),
            Error::Trace { path, source } => write!(f, "{}: {source}", path.display()),
            Error::NotInModel { path, source } => write!(f, "{}: not a run of the model: {source}", path.display()),
            Error::Scenario { name, source } => write!(f, "scenario {name}: {source}"),
            Error::Replay { path, reproduce, failure } => {
                write!(f, "{}: {failure}\nreproduce: {reproduce}", path.display())
            }
            Error::Store(source) => write!(f, "{source}"),
            Error::External(source) => write!(f, "{source}"),
            Error::Log(source) => write!(f, "{source}"),
            Error::Replication(source) => write!(f, "{source}"),
            Error::Txn(source) => write!(f, "{source}"),
            Error::AckWaiting { partition, high_watermark } => write!(
                f,
                "the send in flight to partition {partition} is answered in the model, but the real log is still \
                 waiting for the high watermark ({high_watermark}) to cover it"
            ),
            Error::NothingInFlight { partition } => write!(f, "no send in flight to partition {partition} to answer"),
            Error::Reader { partition, offset, found } => write!(
                f,
                "the model's downstream reader takes entry {offset} of output partition {partition}; the real reader \
                 {found}"
            ),
            Error::Owner { group, owner, source } => write!(f, "{group}/{owner}: {source}"),
            Error::Worker { group, owner, source } => write!(f, "{group}/{owner} (worker process): {source}"),
            Error::Protocol { who, source } => write!(f, "{who} (protocol process): {source}"),
            Error::PostgresConnect(source) => write!(f, "cannot reach PostgreSQL: {source}"),
            Error::Postgres { sql, source } => write!(f, "{sql}: {source}"),
            Error::PostgresUrl => write!(f, "the PostgreSQL URL has no scheme (postgres://...)"),
            Error::NotRunning { group, owner } => write!(f, "the owner {group}/{owner} is not running"),
            Error::NoLease { group, owner, partition } => {
                write!(f, "the owner {group}/{owner} holds no lease on partition {partition}")
            }
            Error::Unsupported(what) => write!(f, "the harness cannot perform {what} on the real system"),
            Error::NotReplaced { given, path, kind } => {
                write!(f, "`{given}`: {} exists and is not a {kind}; refused", path.display())
            }
            Error::KeepName { name, why } => write!(f, "cannot keep a trace as '{name}': {why}"),
            Error::KeptDiffers { path } => {
                write!(f, "{} is kept already, with other contents: give the trace another --name", path.display())
            }
            Error::NothingToRetry { partition } => {
                write!(f, "no unacknowledged send to partition {partition} to retry")
            }
            Error::Unobservable(source) => write!(f, "{source}"),
            Error::Observe(source) => write!(f, "{source}"),
            Error::RoleDisagrees { group, role, database } => {
                write!(f, "the store role reports {group} {role}; the database holds {database}")
            }
        }
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Trace { source, .. } => Some(source),
            Error::NotInModel { source, .. } => Some(source),
            Error::Scenario { source, .. } => Some(source),
            Error::Replay { failure, .. } => Some(failure.as_ref()),
            Error::Store(source) => Some(source.as_ref()),
            Error::External(source) => Some(source.as_ref()),
            Error::Log(source) => Some(source),
            Error::Replication(source) => Some(source.as_ref()),
            Error::Txn(source) => Some(source.as_ref()),
            Error::Owner { source, .. } => Some(source.as_ref()),
            Error::Worker { source, .. } => Some(source),
            Error::Protocol { source, .. } => Some(source),
            Error::PostgresConnect(source) | Error::Postgres { source, .. } => Some(source),
            Error::Unobservable(source) => Some(source),
            Error::Observe(source) => Some(source.as_ref()),
            Error::NoSuchPath { .. }
            | Error::RoleDisagrees { .. }
            | Error::PostgresUrl
            | Error::NotRunning { .. }
            | Error::NoLease { .. }
            | Error::NothingToRetry { .. }
            | Error::AckWaiting { .. }
            | Error::NothingInFlight { .. }
            | Error::Reader { .. }
            | Error::Unsupported(_)
            | Error::NotReplaced { .. }
            | Error::KeepName { .. }
            | Error::KeptDiffers { .. } => None,
        }
    }
}

impl From<ExternalError> for Error {
    fn from(error: ExternalError) -> Error {
        Error::External(Box::new(error))
    }
}

impl From<StoreError> for Error {
    fn from(error: StoreError) -> Error {
        Error::Store(Box::new(error))
    }
}

impl From<LogError> for Error {
    fn from(error: LogError) -> Error {
        Error::Log(error)
    }
}

impl From<crate::observe::ObserveError> for Error {
    fn from(error: crate::observe::ObserveError) -> Error {
        Error::Observe(Box::new(error))
    }
}

impl From<Unobservable> for Error {
    fn from(error: Unobservable) -> Error {
        Error::Unobservable(error)
    }
}

/// A worker process's failure, as seen over the line protocol of `consumer::worker`.
#[derive(Debug)]
pub enum WorkerError {
    /// This executable's own path is unknown, so the conformance binary cannot be found.
    CurrentExe(io::Error),
    /// Neither this executable nor `candidate` (next to it) is the conformance binary.
    NoExecutable {
        candidate: Option<PathBuf>,
    },
    Spawn {
        exe: PathBuf,
        source: io::Error,
    },
    /// The first line was not `ready JSON`.
    NotReady {
        line: String,
    },
    /// Sending `command` failed.
    Write {
        command: String,
        source: io::Error,
    },
    Read(io::Error),
    /// The worker's output ended: the process is gone.
    Ended,
    /// The worker replied `err MESSAGE` to `command` (a refused or failed step).
    Refused {
        command: String,
        message: String,
    },
    /// A reply to `command` that is not an outcome of the protocol.
    UnreadableReply {
        command: String,
        line: String,
    },
    /// The `state` reply's JSON does not parse as leases.
    State {
        line: String,
        source: serde_json::Error,
    },
    /// A lease keyed by something that is not a partition number.
    PartitionKey {
        key: String,
        line: String,
    },
}

impl fmt::Display for WorkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkerError::CurrentExe(source) => write!(f, "cannot find this executable: {source}"),
            WorkerError::NoExecutable { candidate: Some(path) } => {
                write!(f, "cannot find the conformance binary to run workers (not at {})", path.display())
            }
            WorkerError::NoExecutable { candidate: None } => {
                write!(f, "cannot find the conformance binary to run workers")
            }
            WorkerError::Spawn { exe, source } => {
                write!(f, "cannot start a worker process ({}): {source}", exe.display())
            }
            WorkerError::NotReady { line } => write!(f, "the worker did not start: {line}"),
            WorkerError::Write { command, source } => write!(f, "worker input ('{command}'): {source}"),
            WorkerError::Read(source) => write!(f, "worker output: {source}"),
            WorkerError::Ended => write!(f, "the worker process ended unexpectedly"),
            // The message names the step already (it is the owner's own error line).
            WorkerError::Refused { message, .. } => write!(f, "{message}"),
            WorkerError::UnreadableReply { command, line } => {
                write!(f, "unreadable worker reply '{line}' to '{command}'")
            }
            WorkerError::State { line, source } => write!(f, "unreadable state reply '{line}': {source}"),
            WorkerError::PartitionKey { key, line } => {
                write!(f, "partition key '{key}' is not a number in the state reply '{line}'")
            }
        }
    }
}

impl StdError for WorkerError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            WorkerError::CurrentExe(source)
            | WorkerError::Spawn { source, .. }
            | WorkerError::Write { source, .. }
            | WorkerError::Read(source) => Some(source),
            WorkerError::State { source, .. } => Some(source),
            WorkerError::NoExecutable { .. }
            | WorkerError::NotReady { .. }
            | WorkerError::Ended
            | WorkerError::Refused { .. }
            | WorkerError::UnreadableReply { .. }
            | WorkerError::PartitionKey { .. } => None,
        }
    }
}

/// A concrete state the abstraction function cannot map to a model `State`.
#[derive(Debug)]
pub enum Unobservable {
    /// Retention moved the log start past the records the harness appended.
    LogStartPastAppended { partition: u32, start: u64, appended: usize },
    /// A record is neither an 8-byte delta nor the harness's poison payload.
    UnknownPayload { partition: u32, offset: u64 },
    /// A value does not fit the model's 8 bits; `what` names it.
    TooWide { what: &'static str, value: i128 },
    /// A stored owner name is not `oN`.
    OwnerName { name: String },
    /// An owner reports a lease on a partition the configuration does not have.
    NoSuchPartition { group: String, owner: String, partition: u32 },
    /// An owner holds a batch of more than one record (traces use batch 1).
    Batch { group: String, owner: String, offset: u64, end: u64 },
    /// A protocol consumer's observed store has `rows` progress rows, not one per partition.
    PartitionRows { rows: usize, partitions: u8 },
    /// An owner of the open protocol reports two leases on one partition.
    TwoLeases { group: String, owner: String, partition: u32 },
    /// A replicated partition's state the model's `Replicas` cannot hold (`what` says why).
    Replication { partition: u32, what: String },
    /// A replica's file holds no frame the harness can read at `offset`.
    Frame { path: PathBuf, offset: u64, reason: String },
    /// The consumer-visible log of `partition` ends at `end`, past what its leader holds.
    Visible { partition: u32, end: u64 },
    /// A record of the output log has no model counterpart (`reason` says why).
    Output { partition: u32, offset: u64, reason: String },
}

impl fmt::Display for Unobservable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unobservable::LogStartPastAppended { partition, start, appended } => write!(
                f,
                "the log start {start} of partition {partition} is past what was appended ({appended} records)"
            ),
            Unobservable::UnknownPayload { partition, offset } => {
                write!(f, "record {offset} of partition {partition} is neither a delta nor poison")
            }
            Unobservable::TooWide { what, value } => write!(f, "{what} {value} does not fit the model's 8 bits"),
            Unobservable::OwnerName { name } => write!(f, "owner '{name}' is not one of the model's o0, o1, ..."),
            Unobservable::NoSuchPartition { group, owner, partition } => {
                write!(f, "{group}/{owner} reports a lease on partition {partition}, which does not exist")
            }
            Unobservable::Batch { group, owner, offset, end } => {
                write!(f, "{group}/{owner} holds a batch {offset}..{end}, traces use batch 1")
            }
            Unobservable::PartitionRows { rows, partitions } => {
                write!(f, "the observed store has {rows} progress rows for {partitions} partitions")
            }
            Unobservable::TwoLeases { group, owner, partition } => {
                write!(f, "{group}/{owner} reports two leases on partition {partition}")
            }
            Unobservable::Replication { partition, what } => write!(f, "replicated partition {partition}: {what}"),
            Unobservable::Frame { path, offset, reason } => {
                write!(f, "{}: no readable frame of record {offset}: {reason}", path.display())
            }
            Unobservable::Visible { partition, end } => {
                write!(f, "partition {partition}'s readable end {end} is past its leader's replica")
            }
            Unobservable::Output { partition, offset, reason } => {
                write!(f, "record {offset} of output partition {partition}: {reason}")
            }
        }
    }
}

impl StdError for Unobservable {}

/// Why a hand-written scenario does not hold in the model as written.
#[derive(Debug)]
pub enum ScenarioError {
    /// The configuration is not one the model replays (the model's reason).
    Config(String),
    /// A step is not enabled in the model.
    Unreachable(Unreachable),
    /// The scenario names a property the model does not check for its configuration.
    NoProperty(String),
    /// The model's verdict differs from the one the scenario records: `discovered`, whether
    /// the path violates the (safety) property or reaches the (`sometimes`) one.
    Verdict { property: String, discovered: bool, recorded: Verdict },
    /// A fence witness's search (`fences::shortest`) visited `states` states and found no stale
    /// owner fenced at the write it looks for.
    NotFound { states: usize },
    /// A fence witness's path does not reach the model's observation of the fence.
    Unobserved { property: String },
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScenarioError::Config(reason) => write!(f, "{reason}"),
            ScenarioError::Unreachable(unreachable) => write!(f, "{unreachable}"),
            ScenarioError::NoProperty(name) => write!(f, "no property {name}"),
            ScenarioError::Verdict { property, discovered, recorded } => write!(
                f,
                "the model {} {property} on this path, the scenario records {}",
                if *discovered { "discovers" } else { "never discovers" },
                recorded.word()
            ),
            ScenarioError::NotFound { states } => {
                write!(f, "the model reaches no stale owner fenced at that write within {states} states")
            }
            ScenarioError::Unobserved { property } => write!(f, "the path does not reach {property}"),
        }
    }
}

impl StdError for ScenarioError {}

#[cfg(test)]
mod tests {
    use super::{Error, Unobservable, WorkerError};
    use std::error::Error as _;
    use std::path::PathBuf;

    /// Each error is one line that names its context and includes its cause, and `source()`
    /// exposes the typed cause where there is one.
    #[test]
    fn errors_render_as_one_line_with_their_context() {
        let not_enabled = "step 'apply-atomic 0 0' is not enabled (enabled: fetch 0 0)";
        let table: Vec<(Error, &str, bool)> = vec![
            (
                Error::Io {
                    path: PathBuf::from("/t/a.json"),
                    doing: "read",
                    source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
                },
                "/t/a.json: cannot read: permission denied",
                true,
            ),
            (Error::NoSuchPath { path: PathBuf::from("/no/such") }, "/no/such: no such file or directory", false),
            (
                Error::Worker {
                    group: "g0".to_string(),
                    owner: "o1".to_string(),
                    source: WorkerError::Refused {
                        command: "apply-atomic 0 0".to_string(),
                        message: not_enabled.into(),
                    },
                },
                "g0/o1 (worker process): step 'apply-atomic 0 0' is not enabled (enabled: fetch 0 0)",
                true,
            ),
            (
                Error::Worker {
                    group: "g1".to_string(),
                    owner: "o0".to_string(),
                    source: WorkerError::UnreadableReply {
                        command: "fetch 0 1".to_string(),
                        line: "ok what".to_string(),
                    },
                },
                "g1/o0 (worker process): unreadable worker reply 'ok what' to 'fetch 0 1'",
                true,
            ),
            (
                Error::NotRunning { group: "g0".to_string(), owner: "o1".to_string() },
                "the owner g0/o1 is not running",
                false,
            ),
            (
                consumer::external::ExternalError::Missing { path: PathBuf::from("/d/index.db") }.into(),
                "/d/index.db does not exist: the data directory has no external systems (run `consumer init` on a \
                 new directory)",
                true,
            ),
            (
                Unobservable::TooWide { what: "epoch", value: 300 }.into(),
                "epoch 300 does not fit the model's 8 bits",
                true,
            ),
        ];
        for (error, line, has_source) in table {
            assert_eq!(error.to_string(), line);
            assert_eq!(error.source().is_some(), has_source, "source() of {error:?}");
        }
    }
}
