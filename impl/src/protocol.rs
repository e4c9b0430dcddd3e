//! The open owner protocol (PROTOCOL.md, spec.md §12), version 1: newline-delimited JSON on
//! stdin/stdout, with which a conformance harness drives *any* consumer one model step at a
//! time. This module holds its messages (shared by this consumer and the harness) and this
//! consumer's implementation of it (`serve`, the `consumer serve` subcommand).
//!
//! A process plays one role, given by its first message, `init`:
//! - `owner`: one owner of one group. It starts as `consumer consume` would (taking its
//!   partitions at a claimed or the stored epoch) and serves `step`, `assign`, `leases`, `arm`
//!   and `quit`.
//! - `store`: the harness's window on the consumer's durable state. It serves `setup` (create
//!   the store and a group, as `consumer init` does), `claim` (the coordinator's rebalance),
//!   `observe` (the group's durable state in the model's terms) and `quit`. The harness starts
//!   a fresh one after every kill, so that what it observes is what survived.
//!
//! Every request carries an `id`; its reply carries `in_reply_to` with that id and a `type`
//! that is the request's plus `_ok`, or `error` with a `code`, `definite` (whether the request
//! certainly did nothing) and a one-line `text`.

use crate::crash::{CrashPlan, CrashPoint};
use crate::external::{ExternalDir, Relay};
use crate::log::Log;
use crate::owner::{Outcome, Owner, OwnerError, Settings};
use crate::store::{Location, Store, StoreError, StoreOptions};
use crate::strategy::{LogCheck, OutOfRange, Stage, StartPolicy, Step, StepKind, Strategy};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

/// The protocol version this module speaks; `init` names the one the harness speaks.
pub const VERSION: u64 = 1;

/// The longest request line read (a fetch of one record is about 200 bytes); a longer line is
/// refused as malformed rather than buffered without bound.
pub const LINE_BYTES_MAX: usize = 64 * 1024;

/// One message, either way: an id (requests) or the id replied to (replies), and the body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<u64>,
    #[serde(flatten)]
    pub body: Body,
}

/// Every message type of version 1 (PROTOCOL.md lists their fields).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Body {
    Init(Init),
    InitOk {
        protocol: u64,
    },
    Step(StepRequest),
    StepOk(Outcome),
    Assign {
        partition: u32,
    },
    AssignOk {
        /// The epoch the owner took the partition at; `null` when the store names another owner.
        epoch: Option<i64>,
    },
    Leases,
    LeasesOk {
        leases: Vec<Lease>,
    },
    Arm {
        point: String,
    },
    ArmOk,
    Setup {
        group: String,
        owner: String,
    },
    SetupOk,
    Claim {
        group: String,
        partition: u32,
        owner: String,
    },
    ClaimOk {
        epoch: i64,
    },
    Observe {
        group: String,
    },
    ObserveOk(Observed),
    /// The outbox's relay, one step: the group's first outbox row copied to the consumer's
    /// second system and deleted from the outbox.
    Relay {
        group: String,
    },
    RelayOk {
        /// The row relayed; `null` when the outbox was empty.
        relayed: Option<Processed>,
    },
    Quit,
    QuitOk,
    Error(ErrorBody),
}

impl Body {
    /// The message's `type`, as on the wire.
    pub fn type_name(&self) -> &'static str {
        match self {
            Body::Init(_) => "init",
            Body::InitOk { .. } => "init_ok",
            Body::Step(_) => "step",
            Body::StepOk(_) => "step_ok",
            Body::Assign { .. } => "assign",
            Body::AssignOk { .. } => "assign_ok",
            Body::Leases => "leases",
            Body::LeasesOk { .. } => "leases_ok",
            Body::Arm { .. } => "arm",
            Body::ArmOk => "arm_ok",
            Body::Setup { .. } => "setup",
            Body::SetupOk => "setup_ok",
            Body::Claim { .. } => "claim",
            Body::ClaimOk { .. } => "claim_ok",
            Body::Observe { .. } => "observe",
            Body::ObserveOk(_) => "observe_ok",
            Body::Relay { .. } => "relay",
            Body::RelayOk { .. } => "relay_ok",
            Body::Quit => "quit",
            Body::QuitOk => "quit_ok",
            Body::Error(_) => "error",
        }
    }
}

/// The role a process plays, for its whole life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Owner,
    Store,
}

/// The first request to every process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Init {
    pub protocol: u64,
    pub role: Role,
    /// A directory the consumer owns: its store lives there, in whatever form it likes.
    pub store: PathBuf,
    /// The log's data directory (onceproof's format). A consumer may read it directly (frames
    /// are CRC-32C checked, PROTOCOL.md); the records also come in every `fetch` request.
    pub log: PathBuf,
    pub partitions: u32,
    /// The consumer strategy claimed: its sequence of writes (`atomic-fenced`, ...).
    pub strategy: String,
    /// The model row the trace belongs to (informational: `reset-earliest` runs atomic-fenced
    /// with `on_out_of_range: earliest`).
    pub row: String,
    /// The owner role's identity (absent for the store role).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// How an owner takes its partitions when it starts: `claim` a new epoch or take the
    /// `stored` one (the trap of fenced-stored-epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    pub settings: InitSettings,
}

/// The row's policies, as the consumer's flags name them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitSettings {
    pub commit_every: u64,
    pub inflight: u64,
    pub max_attempts: u64,
    pub on_out_of_range: String,
    pub log_check: String,
}

/// One owner step: the model's action, with the offset it names, and what the log holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRequest {
    /// The step's name (`fetch`, `apply-atomic`, `commit-offset`, ...).
    pub step: String,
    pub partition: u32,
    pub offset: u64,
    /// `fetch` only: the record at `offset`, as the log holds it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub records: Vec<WireRecord>,
    /// The partition's log as the harness sees it before the step: its first retained offset
    /// and its end (absent while a replicated partition has no leader).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogBounds>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogBounds {
    pub start: u64,
    pub end: u64,
}

/// A record of the log: its delta, or `poison: true` for a record whose effect always fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireRecord {
    pub offset: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<i64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub poison: bool,
}

/// An owner's view of one partition it believes it owns (the model's lease); batch 1, so a
/// record in flight is named by its offset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub partition: u32,
    pub epoch: i64,
    /// The next offset to fetch.
    pub position: u64,
    /// The next offset of the last checkpoint this owner wrote or took.
    pub checkpoint: u64,
    /// Records fetched and not finished, by offset, with how far each got.
    pub records: Vec<LeaseRecord>,
    /// The parallel strategies: offsets finished above the checkpoint.
    pub done: Vec<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    pub offset: u64,
    pub stage: Stage,
}

/// A group's durable state, read from the consumer's store (the model's `Store`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    pub total: i64,
    /// One row per partition, in partition order.
    pub partitions: Vec<ProgressRow>,
    #[serde(default)]
    pub processed: Vec<Processed>,
    #[serde(default)]
    pub attempts: Vec<Attempts>,
    #[serde(default)]
    pub dead_letters: Vec<Attempts>,
    #[serde(default)]
    pub resets: Vec<Reset>,
    /// The blind-set rows' value (`null` until a record set it).
    #[serde(default)]
    pub value: Option<i64>,
    #[serde(default)]
    pub facts: Vec<Processed>,
    #[serde(default)]
    pub outbox: Vec<Processed>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressRow {
    pub next_offset: u64,
    pub epoch: i64,
    pub owner: String,
    #[serde(default)]
    pub stamp: Option<u64>,
}

/// A record's identity: a processed id, a fact, an outbox row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Processed {
    pub partition: u32,
    pub offset: u64,
}

/// A poison record's counted attempts, or its dead letter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Attempts {
    pub partition: u32,
    pub offset: u64,
    pub attempts: u64,
}

/// A recorded reset of the next offset (out of range, `earliest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Reset {
    pub partition: u32,
    pub from: u64,
    pub to: u64,
}

/// An error reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    /// True when the request certainly had no effect; false when it may have (a storage
    /// error after a write was sent, say): Maelstrom's definite and indefinite errors.
    pub definite: bool,
    pub text: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorCode {
    /// Not JSON, an unknown type, a missing field, or a request out of order.
    Malformed,
    /// A request, role, strategy, setting or protocol version this consumer does not implement.
    NotSupported,
    /// The step is not enabled in the owner's state (nothing was done).
    NotEnabled,
    /// The consumer refuses, to protect data (its start or the step would lose or repeat work).
    Refused,
    /// The store failed; the request may or may not have taken effect.
    Storage,
}

impl ErrorCode {
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::Malformed => "malformed",
            ErrorCode::NotSupported => "not-supported",
            ErrorCode::NotEnabled => "not-enabled",
            ErrorCode::Refused => "refused",
            ErrorCode::Storage => "storage",
        }
    }
}

impl Lease {
    /// This consumer's lease in the protocol's terms; `None` for a record batch of more than
    /// one record (the protocol runs batch 1): its first offset and end are returned instead.
    pub fn of(partition: u32, lease: &crate::owner::Lease) -> Result<Lease, (u64, u64)> {
        let mut records = Vec::new();
        for (&offset, record) in &lease.records {
            if record.end != offset + 1 {
                return Err((offset, record.end));
            }
            records.push(LeaseRecord { offset, stage: record.stage });
        }
        Ok(Lease {
            partition,
            epoch: lease.epoch,
            position: lease.position,
            checkpoint: lease.checkpoint,
            records,
            done: lease.done.iter().copied().collect(),
        })
    }
}

/// A refusal to answer a request: the reply's code, definiteness and text.
struct Refusal(ErrorCode, bool, String);

impl Refusal {
    fn definite(code: ErrorCode, text: impl Into<String>) -> Refusal {
        Refusal(code, true, text.into())
    }

    /// A failure of the store, the log or an external system, on one line: the request may or
    /// may not have taken effect.
    fn storage(error: &dyn std::fmt::Display) -> Refusal {
        Refusal(ErrorCode::Storage, false, one_line(error))
    }
}

/// An error's text on one line: a reply is one line.
fn one_line(error: &dyn std::fmt::Display) -> String {
    error.to_string().replace('\n', " ")
}

impl From<OwnerError> for Refusal {
    fn from(error: OwnerError) -> Refusal {
        match error {
            OwnerError::NotEnabled { .. } => Refusal(ErrorCode::NotEnabled, true, one_line(&error)),
            error if error.is_refusal() => Refusal(ErrorCode::Refused, true, one_line(&error)),
            error => Refusal::storage(&error),
        }
    }
}

impl From<StoreError> for Refusal {
    fn from(error: StoreError) -> Refusal {
        Refusal::storage(&error)
    }
}

impl From<crate::external::ExternalError> for Refusal {
    fn from(error: crate::external::ExternalError) -> Refusal {
        Refusal::storage(&error)
    }
}

impl From<crate::log::LogError> for Refusal {
    fn from(error: crate::log::LogError) -> Refusal {
        Refusal::storage(&error)
    }
}

/// What a process serves after its `init`.
enum Served {
    Owner(Box<Owner>),
    Store(Box<StoreRole>),
}

/// The store role: the store is created by the first `setup` (it may not exist at `init`).
struct StoreRole {
    location: Location,
    log: PathBuf,
    store: Option<Store>,
    /// The outbox row's relay (its own store connection, as `consumer relay` has), opened by
    /// the first `relay`.
    relay: Option<Relay>,
}

/// Serves the protocol on `input`/`output` until `quit` or end of input. A malformed line gets
/// an `error` reply (with `in_reply_to` when its id could be read) and serving goes on; an
/// `init` that cannot be served, a malformed one included (a field missing, say), gets its
/// error and ends the process (exit status 2 from `consumer serve`). A malformed `init` after
/// the first one is a malformed second request, and serving goes on.
pub fn serve(input: impl BufRead, mut output: impl Write) -> std::io::Result<Result<(), String>> {
    let mut served: Option<Served> = None;
    for line in bounded_lines(input) {
        let line = line?;
        let (id, body) = match parse_request(&line) {
            Ok(request) => request,
            Err((id, refusal)) => {
                let text = refusal.2.clone();
                reply(&mut output, id, refused(refusal))?;
                if served.is_none() && is_init(&line) {
                    return Ok(Err(text));
                }
                continue;
            }
        };
        let answer = match (&mut served, body) {
            (None, Body::Init(init)) => match start(&init) {
                Ok(started) => {
                    served = Some(started);
                    Body::InitOk { protocol: VERSION }
                }
                Err(refusal) => {
                    let text = refusal.2.clone();
                    reply(&mut output, id, refused(refusal))?;
                    return Ok(Err(text));
                }
            },
            (None, body) => refused(Refusal::definite(
                ErrorCode::Malformed,
                format!("'{}' before init: the first request must be init", body.type_name()),
            )),
            (Some(_), Body::Init(_)) => refused(Refusal::definite(ErrorCode::Malformed, "a second init")),
            (Some(_), Body::Quit) => {
                reply(&mut output, id, Body::QuitOk)?;
                return Ok(Ok(()));
            }
            (Some(Served::Owner(owner)), body) => owner_request(owner, body).unwrap_or_else(refused),
            (Some(Served::Store(store)), body) => store_request(store, body).unwrap_or_else(refused),
        };
        reply(&mut output, id, answer)?;
    }
    Ok(Ok(()))
}

/// Lines of at most `LINE_BYTES_MAX` bytes; a longer one is an `InvalidData` error (the
/// harness wrote garbage, and nothing it says next can be trusted).
fn bounded_lines(mut input: impl BufRead) -> impl Iterator<Item = std::io::Result<String>> {
    std::iter::from_fn(move || {
        let mut line = Vec::new();
        let limit = u64::try_from(LINE_BYTES_MAX).expect("small") + 1;
        match std::io::Read::take(&mut input, limit).read_until(b'\n', &mut line) {
            Ok(0) => None,
            Ok(_) if line.len() > LINE_BYTES_MAX => Some(Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a request line longer than {LINE_BYTES_MAX} bytes"),
            ))),
            Ok(_) => Some(String::from_utf8(line).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))),
            Err(error) => Some(Err(error)),
        }
    })
}

/// Whether `line` is a JSON object of type `init` (however malformed otherwise).
fn is_init(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line)
        .is_ok_and(|value| value.get("type").and_then(serde_json::Value::as_str) == Some("init"))
}

fn parse_request(line: &str) -> Result<(Option<u64>, Body), (Option<u64>, Refusal)> {
    let value: serde_json::Value = serde_json::from_str(line)
        .map_err(|e| (None, Refusal::definite(ErrorCode::Malformed, format!("not a JSON object: {e}"))))?;
    let id = value.get("id").and_then(serde_json::Value::as_u64);
    let message: Message = serde_json::from_value(value)
        .map_err(|e| (id, Refusal::definite(ErrorCode::Malformed, format!("not a request of version 1: {e}"))))?;
    match message.id {
        Some(id) => Ok((Some(id), message.body)),
        None => Err((None, Refusal::definite(ErrorCode::Malformed, "a request without an id"))),
    }
}

fn refused(Refusal(code, definite, text): Refusal) -> Body {
    Body::Error(ErrorBody { code, definite, text })
}

fn reply(output: &mut impl Write, id: Option<u64>, body: Body) -> std::io::Result<()> {
    let message = Message { id: None, in_reply_to: id, body };
    let line = serde_json::to_string(&message).expect("a reply always serialises");
    writeln!(output, "{line}")?;
    output.flush()
}

fn start(init: &Init) -> Result<Served, Refusal> {
    if init.protocol != VERSION {
        let text = format!("protocol version {} (this consumer speaks {VERSION})", init.protocol);
        return Err(Refusal::definite(ErrorCode::NotSupported, text));
    }
    let location = Location::Sqlite(store_file(&init.store));
    match init.role {
        Role::Store => {
            Ok(Served::Store(Box::new(StoreRole { location, log: init.log.clone(), store: None, relay: None })))
        }
        Role::Owner => {
            let (group, name) = match (&init.group, &init.owner) {
                (Some(group), Some(owner)) => (group, owner),
                _ => return Err(Refusal::definite(ErrorCode::Malformed, "an owner's init names its group and owner")),
            };
            let settings = settings(init)?;
            let store = Store::open_at(&location, StoreOptions::default())?;
            let log = Log::open_reader(&init.log, store.log_identity())?;
            let owner = Owner::start(store, log, group, name, settings, CrashPlan::none())?;
            Ok(Served::Owner(Box::new(owner)))
        }
    }
}

/// This consumer keeps its store in one SQLite file in the directory it was given.
pub fn store_file(dir: &Path) -> PathBuf {
    dir.join("store.db")
}

fn settings(init: &Init) -> Result<Settings, Refusal> {
    let unsupported = |what: &str, value: &str| {
        Refusal::definite(ErrorCode::NotSupported, format!("{what} '{}'", crate::strategy::printable(value)))
    };
    let strategy: Strategy = init.strategy.parse().map_err(|_| unsupported("strategy", &init.strategy))?;
    let s = &init.settings;
    let on_out_of_range: OutOfRange =
        s.on_out_of_range.parse().map_err(|_| unsupported("on_out_of_range", &s.on_out_of_range))?;
    let log_check: LogCheck = s.log_check.parse().map_err(|_| unsupported("log_check", &s.log_check))?;
    let start = init.start.as_deref().unwrap_or("claim");
    let start: StartPolicy = start.parse().map_err(|_| unsupported("start", start))?;
    let inflight = usize::try_from(s.inflight).map_err(|_| unsupported("inflight", &s.inflight.to_string()))?;
    Ok(Settings {
        commit_every: s.commit_every,
        inflight,
        batch: 1,
        max_attempts: s.max_attempts,
        on_out_of_range,
        start,
        log_check,
        ..Settings::new(strategy)
    })
}

fn owner_request(owner: &mut Owner, body: Body) -> Result<Body, Refusal> {
    match body {
        Body::Step(request) => {
            let kind: StepKind =
                request.step.parse().map_err(|e: String| Refusal::definite(ErrorCode::NotSupported, e))?;
            let step = Step { kind, partition: request.partition, offset: request.offset };
            Ok(Body::StepOk(owner.perform(step)?))
        }
        Body::Assign { partition } => Ok(Body::AssignOk { epoch: owner.assign(partition)? }),
        Body::Leases => {
            let mut leases = Vec::new();
            for (&partition, lease) in owner.leases() {
                let lease = Lease::of(partition, lease).map_err(|(offset, end)| {
                    let text =
                        format!("partition {partition} holds a batch {offset}..{end}: the protocol runs batch 1");
                    Refusal::definite(ErrorCode::NotSupported, text)
                })?;
                leases.push(lease);
            }
            Ok(Body::LeasesOk { leases })
        }
        Body::Arm { point } => {
            let point: CrashPoint = point.parse().map_err(|e: String| Refusal::definite(ErrorCode::Malformed, e))?;
            owner.arm(point);
            Ok(Body::ArmOk)
        }
        body => Err(wrong_role(&body, "owner")),
    }
}

fn wrong_role(body: &Body, role: &str) -> Refusal {
    Refusal::definite(ErrorCode::Malformed, format!("'{}' is no request of the {role} role", body.type_name()))
}

fn store_request(role: &mut StoreRole, body: Body) -> Result<Body, Refusal> {
    match body {
        Body::Setup { group, owner } => {
            let store = match role.store.take() {
                Some(store) => store,
                None => open_or_create(&role.location, &role.log)?,
            };
            let store = role.store.insert(store);
            store.ensure_group(&group, &owner)?;
            Ok(Body::SetupOk)
        }
        Body::Claim { group, partition, owner } => {
            let epoch = opened(role)?.claim(&group, partition, &owner)?;
            Ok(Body::ClaimOk { epoch })
        }
        Body::Observe { group } => Ok(Body::ObserveOk(observe(opened(role)?, &group)?)),
        Body::Relay { group } => {
            let relay = match role.relay.take() {
                Some(relay) => relay,
                None => {
                    // The index lives beside the log, as `consumer init` makes it.
                    let dir = role.log.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf);
                    let store = Store::open_at(&role.location, StoreOptions::default())?;
                    Relay::new(store, ExternalDir::new(&dir).open_index()?)
                }
            };
            let relay = role.relay.insert(relay);
            let relayed = relay.relay_one(&group)?.map(|f| Processed { partition: f.partition, offset: f.offset });
            Ok(Body::RelayOk { relayed })
        }
        body => Err(wrong_role(&body, "store")),
    }
}

fn opened(role: &mut StoreRole) -> Result<&mut Store, Refusal> {
    if role.store.is_none() {
        role.store = Some(Store::open_at(&role.location, StoreOptions::default())?);
    }
    Ok(role.store.as_mut().expect("opened above"))
}

fn open_or_create(location: &Location, log: &Path) -> Result<Store, Refusal> {
    match Store::check_absent(location, StoreOptions::default()) {
        Ok(()) => {
            let identity = Log::read_identity(log)?.ok_or_else(|| {
                Refusal::definite(
                    ErrorCode::Refused,
                    format!("no log at {}: the harness creates it first", log.display()),
                )
            })?;
            Ok(Store::create_at(location, identity, StoreOptions::default())?)
        }
        Err(_) => Ok(Store::open_at(location, StoreOptions::default())?),
    }
}

/// A group's durable state in the protocol's (the model's) terms: what the store role replies
/// to `observe`, and what conformance reads from a store it opens itself (one abstraction
/// function for both, so the two paths cannot drift apart).
pub fn observe(store: &Store, group: &str) -> Result<Observed, StoreError> {
    let mut partitions = Vec::new();
    for partition in 0..store.partitions() {
        let row = store.progress(group, partition)?;
        partitions.push(ProgressRow {
            next_offset: row.next_offset,
            epoch: row.epoch,
            owner: row.owner,
            stamp: row.stamp,
        });
    }
    let processed = store.processed(group)?.into_iter().map(|(partition, offset)| Processed { partition, offset });
    let attempts = store.all_attempts(group)?.into_iter();
    let dead_letters = store.dead_letters(Some(group))?.into_iter();
    let resets = store.resets(Some(group))?.into_iter();
    let fact = |f: crate::store::Fact| Processed { partition: f.partition, offset: f.offset };
    Ok(Observed {
        total: store.total(group)?,
        partitions,
        processed: processed.collect(),
        attempts: attempts.map(|(partition, offset, attempts)| Attempts { partition, offset, attempts }).collect(),
        dead_letters: dead_letters
            .map(|d| Attempts { partition: d.partition, offset: d.offset, attempts: d.attempts })
            .collect(),
        resets: resets.map(|r| Reset { partition: r.partition, from: r.from, to: r.to }).collect(),
        value: store.value(group)?,
        facts: store.facts(Some(group))?.into_iter().map(fact).collect(),
        outbox: store.outbox(Some(group))?.into_iter().map(fact).collect(),
    })
}
