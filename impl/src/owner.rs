//! One owner process of a consumer group: its volatile leases, the steps its strategy allows,
//! and each step's durable write, exactly as the model's owner (spec.md §3, §5). The
//! transactional sequence's steps and takes are in `owner/transactional.rs`.

mod transactional;

use crate::crash::{CrashPlan, When};
use crate::external::{EmailProvider, EmailRequest, ExternalDir, ExternalError, Index};
use crate::log::{decode_delta, Damage, Log, LogError, PartitionView, TailRepair};
use crate::store::{AtomicAlso, Fact, FailurePolicy, Guard, Item, PoisonAttempt, Store, StoreError};
pub use crate::strategy::Stage;
use crate::strategy::{
    BatchWrite, Checkpointing, CommitFence, FencedWrite, GuardKind, LogCheck, OutOfRange, ParallelCommit, PoisonPolicy,
    Rules, Sequence, StartPolicy, Step, StepKind, Strategy,
};
use crate::txn::{OutputLog, Take, TxnError};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;

/// How the owner runs its strategy.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Settings {
    pub strategy: Strategy,
    /// Checkpoint interval of periodic-commit and offset-stamp, in records.
    pub commit_every: u64,
    /// Records one owner may hold at once in the parallel strategies.
    pub inflight: usize,
    /// Records fetched (and written) together by the serial strategies; 1 is the model's case.
    pub batch: usize,
    /// Failed attempts after which atomic-dlq dead-letters a poison record (at least 1).
    pub max_attempts: u64,
    /// What the owner does when retention removed the next record it would fetch.
    pub on_out_of_range: OutOfRange,
    /// The epoch a started owner takes its partitions at: a new one it claims (the default),
    /// or, test only, the stored one (the trap).
    pub start: StartPolicy,
    /// What the owner does when the log lost records its group had consumed.
    pub log_check: LogCheck,
    /// Test only: a deliberately broken variant, to show that conformance can fail.
    pub mutation: Option<Mutation>,
}

/// Deliberate bugs in the real code path, selected only by tests (the hidden `--mutation`
/// flag), so that the conformance harness can be shown to detect a broken consumer. Each one
/// removes one check: the epoch check of one kind of fenced write, the offset comparison of
/// atomic-cas's `apply-atomic`, or the idempotency key of email-idempotency-key's `send-email`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mutation {
    /// The write of this kind does not check the epoch (it writes as if unfenced, on either
    /// backend); every other fenced write stays fenced.
    NoFence(FencedWrite),
    /// A CAS `apply-atomic` does not compare with the stored next offset (it writes blindly).
    NoCas,
    /// `send-email` carries no idempotency key (email-idempotency-key becomes email-no-key).
    NoEmailKey,
}

/// `no-fence` alone, the name before there was one per write kind: `apply-atomic`'s fence.
const NO_FENCE_ALIAS: &str = "no-fence";

impl Mutation {
    /// Every mutation: one per fenced write, in `FencedWrite::ALL`'s order (built from it, so a
    /// new kind of fenced write has its mutation), then `no-cas` and `no-email-key`.
    pub const ALL: [Mutation; FencedWrite::ALL.len() + 2] = {
        let fenced = FencedWrite::ALL.len();
        let mut all = [Mutation::NoCas; FencedWrite::ALL.len() + 2];
        let mut index = 0;
        while index < fenced {
            all[index] = Mutation::NoFence(FencedWrite::ALL[index]);
            index += 1;
        }
        all[fenced] = Mutation::NoCas;
        all[fenced + 1] = Mutation::NoEmailKey;
        all
    };

    /// The name `--mutation` takes (`no-fence:WRITE` for one fenced write).
    pub const fn name(self) -> &'static str {
        match self {
            Mutation::NoFence(write) => match write {
                FencedWrite::ApplyAtomic => "no-fence:apply-atomic",
                FencedWrite::Attempts => "no-fence:attempts",
                FencedWrite::DeadLetter => "no-fence:dead-letter",
                FencedWrite::ResetOffset => "no-fence:reset-offset",
                FencedWrite::ProduceOutput => "no-fence:produce-output",
                FencedWrite::CommitTxn => "no-fence:commit-txn",
                FencedWrite::CommitOffset => "no-fence:commit-offset",
            },
            Mutation::NoCas => "no-cas",
            Mutation::NoEmailKey => "no-email-key",
        }
    }

    /// The guard `apply-atomic` uses under this mutation instead of `guard`.
    fn weaken(self, guard: GuardKind) -> GuardKind {
        let removed = match self {
            Mutation::NoFence(write) => match write {
                FencedWrite::ApplyAtomic => GuardKind::Fenced,
                FencedWrite::Attempts
                | FencedWrite::DeadLetter
                | FencedWrite::ResetOffset
                | FencedWrite::ProduceOutput
                | FencedWrite::CommitTxn
                | FencedWrite::CommitOffset => return guard,
            },
            Mutation::NoCas => GuardKind::Cas,
            Mutation::NoEmailKey => return guard,
        };
        if guard == removed {
            GuardKind::Blind
        } else {
            guard
        }
    }
}

impl fmt::Display for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Mutation {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl std::str::FromStr for Mutation {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == NO_FENCE_ALIAS {
            return Ok(Mutation::NoFence(FencedWrite::ApplyAtomic));
        }
        Mutation::ALL.into_iter().find(|mutation| mutation.name() == text).ok_or_else(|| {
            let names: Vec<&str> = Mutation::ALL.iter().map(|mutation| mutation.name()).collect();
            format!(
                "unknown mutation '{}' (expected one of: {}; {NO_FENCE_ALIAS} is no-fence:apply-atomic)",
                crate::strategy::printable(text),
                names.join(", ")
            )
        })
    }
}

impl Settings {
    /// The defaults of `new`, which the command line's flags share (spec.md §4's defaults).
    pub const COMMIT_EVERY_DEFAULT: u64 = 2;
    pub const INFLIGHT_DEFAULT: usize = 2;
    pub const BATCH_DEFAULT: usize = 1;
    pub const MAX_ATTEMPTS_DEFAULT: u64 = 2;

    pub fn new(strategy: Strategy) -> Settings {
        Settings {
            strategy,
            commit_every: Settings::COMMIT_EVERY_DEFAULT,
            inflight: Settings::INFLIGHT_DEFAULT,
            batch: Settings::BATCH_DEFAULT,
            max_attempts: Settings::MAX_ATTEMPTS_DEFAULT,
            on_out_of_range: OutOfRange::default(),
            start: StartPolicy::default(),
            log_check: LogCheck::default(),
            mutation: None,
        }
    }

    /// The strategy's rules.
    pub fn rules(&self) -> Rules {
        self.strategy.rules()
    }

    /// The guard of `apply-atomic`: the rules', or the one the test-only mutation leaves it.
    fn atomic_guard(&self) -> GuardKind {
        let guard = self.rules().guard;
        self.mutation.map_or(guard, |mutation| mutation.weaken(guard))
    }

    /// The epoch `write` is fenced by: `fence` (the lease's, or none when the rules fence
    /// nothing), or none under the test-only mutation that removes that write's check.
    fn fence(&self, write: FencedWrite, fence: Option<i64>) -> Option<i64> {
        if self.mutation == Some(Mutation::NoFence(write)) {
            None
        } else {
            fence
        }
    }
}

/// A fetched, unfinished batch of records `[offset, end)` with their deltas. A poison record
/// (its payload is not an 8-byte delta) has no delta (`null` in JSON); only the poison
/// strategies fetch one, always as a batch of its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    pub end: u64,
    pub stage: Stage,
    pub deltas: Vec<Option<i64>>,
    /// A poison record's payload, kept from its fetch: its dead letter stores it, and by then
    /// retention may have removed the record from the log (found by the conformance walks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poison_payload: Option<Vec<u8>>,
    /// The transactional sequence: the output offsets of the batch's data records, once
    /// `produce-output` appended them (stage `Produced`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Range<u64>>,
}

impl InFlight {
    /// Whether the batch is a poison record, whose effect fails every time.
    pub fn is_poison(&self) -> bool {
        self.deltas.iter().any(Option::is_none)
    }
}

/// The error a poison record's effect fails with, kept with its attempts and dead letter.
pub const POISON_ERROR: &str = "payload is not an 8-byte delta";

/// Consecutive failed attempts on one record after which `run_to_end` gives up on a
/// retry-forever owner, which would otherwise spin for ever.
pub const STUCK_AFTER: u64 = 100;

/// The owner that holds every partition of a new group at epoch 1 (spec.md §2.4's owner 0).
pub const FIRST_OWNER: &str = "o0";

/// What `run_to_end` does when a fenced write tells the owner it lost a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFenced {
    /// Stop at once, the fenced step last (`consume`): another owner, or a newer incarnation of
    /// this one, holds the partition, and nothing more of this owner's should land.
    Stop,
    /// Drop that partition and go on with the others (`consume --follow`, which takes the
    /// partitions the store assigns to it again in its next round).
    DropPartition,
}

/// The owner's in-memory view of one partition it believes it owns (the model's `Lease`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub epoch: i64,
    pub position: u64,
    pub checkpoint: u64,
    pub records: BTreeMap<u64, InFlight>,
    pub done: BTreeSet<u64>,
}

impl Lease {
    fn fresh(epoch: i64, next_offset: u64) -> Lease {
        Lease { epoch, position: next_offset, checkpoint: next_offset, records: BTreeMap::new(), done: BTreeSet::new() }
    }

    /// Records fetched since the checkpoint and finished. Asked of an idle lease only (a
    /// serial lease with a batch in flight offers that batch's next write before anything that
    /// counts), so every record fetched since the checkpoint is finished.
    fn finished(&self) -> u64 {
        assert!(self.records.is_empty(), "finished() of a lease with records in flight: {self:?}");
        self.position - self.checkpoint
    }
}

/// What a step did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum Outcome {
    Fetched {
        count: u64,
    },
    /// The effect write ran: how many records it applied and how many it recognised as done.
    Applied {
        applied: u64,
        skipped: u64,
    },
    Recorded,
    Committed,
    /// `produce-output`: the batch's output records are at output offsets `first..end`, in the
    /// open transaction.
    Produced {
        first: u64,
        end: u64,
    },
    /// `send-email`: the provider received the batch's emails; `delivered` is how many times it
    /// has delivered the email of the batch's record now (of a batch's records, the most: 1
    /// means each once; a request with a key it had delivered before is not delivered again).
    Emailed {
        delivered: u64,
    },
    /// `write-index`: the batch's facts are in the index, `written` of them new.
    Indexed {
        written: u64,
    },
    /// The fenced transaction aborted: the owner's epoch is stale; it dropped the partition.
    Fenced {
        held: i64,
        current: i64,
    },
    /// A poison record's effect failed; `attempts` is the durable count after the step
    /// (atomic-dlq), 0 for the strategies that count nothing.
    Failed {
        attempts: u64,
    },
    /// atomic-dlq: `max_attempts` were already counted; nothing was attempted or written.
    Exhausted,
    /// atomic-dlq: the record moved to the dead-letter table after `attempts` failed attempts.
    DeadLettered {
        attempts: u64,
    },
    /// `--on-out-of-range earliest`: the next offset moved from `from` (the stored one) to
    /// `to` (the log start), and the reset is recorded.
    Reset {
        from: u64,
        to: u64,
    },
    /// `--on-out-of-range fail`: the lease `position` is below the log `start`; nothing was
    /// written and the owner dropped the partition.
    OutOfRange {
        position: u64,
        start: u64,
    },
    /// `refuse-ahead`: the group's `stored` next offset or the lease `position` is past the log
    /// `end` (or, `--log-check refuse-all`, the partition is damaged); nothing was written and
    /// the owner dropped the partition.
    Refused {
        stored: u64,
        position: u64,
        end: u64,
    },
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Fetched { count } => write!(f, "fetched {count}"),
            Outcome::Applied { applied, skipped } => write!(f, "applied {applied} skipped {skipped}"),
            Outcome::Recorded => write!(f, "recorded"),
            Outcome::Committed => write!(f, "committed"),
            Outcome::Produced { first, end } => write!(f, "produced {first} {end}"),
            Outcome::Emailed { delivered } => write!(f, "emailed {delivered}"),
            Outcome::Indexed { written } => write!(f, "indexed {written}"),
            Outcome::Fenced { held, current } => write!(f, "fenced {held} {current}"),
            Outcome::Failed { attempts } => write!(f, "failed {attempts}"),
            Outcome::Exhausted => write!(f, "exhausted"),
            Outcome::DeadLettered { attempts } => write!(f, "dead-lettered {attempts}"),
            Outcome::Reset { from, to } => write!(f, "reset {from} {to}"),
            Outcome::OutOfRange { position, start } => write!(f, "out-of-range {position} {start}"),
            Outcome::Refused { stored, position, end } => write!(f, "refused {stored} {position} {end}"),
        }
    }
}

impl Outcome {
    /// The owner's stale epoch and the stored one, when the step's transaction was fenced.
    pub fn fenced(&self) -> Option<(i64, i64)> {
        match *self {
            Outcome::Fenced { held, current } => Some((held, current)),
            Outcome::Fetched { .. }
            | Outcome::Applied { .. }
            | Outcome::Recorded
            | Outcome::Committed
            | Outcome::Produced { .. }
            | Outcome::Emailed { .. }
            | Outcome::Indexed { .. }
            | Outcome::Failed { .. }
            | Outcome::Exhausted
            | Outcome::DeadLettered { .. }
            | Outcome::Reset { .. }
            | Outcome::OutOfRange { .. }
            | Outcome::Refused { .. } => None,
        }
    }

    /// Whether a poison record's effect failed in the step (one more in a failure streak).
    pub fn is_failed(&self) -> bool {
        match self {
            Outcome::Failed { .. } => true,
            Outcome::Fetched { .. }
            | Outcome::Applied { .. }
            | Outcome::Recorded
            | Outcome::Committed
            | Outcome::Produced { .. }
            | Outcome::Emailed { .. }
            | Outcome::Indexed { .. }
            | Outcome::Fenced { .. }
            | Outcome::Exhausted
            | Outcome::DeadLettered { .. }
            | Outcome::Reset { .. }
            | Outcome::OutOfRange { .. }
            | Outcome::Refused { .. } => false,
        }
    }
}

#[derive(Debug)]
pub enum OwnerError {
    Store(StoreError),
    Log(LogError),
    /// The output log of the transactional strategies.
    Txn(TxnError),
    /// The email provider or the index (spec.md §3.4's rows).
    External(ExternalError),
    /// The step is not what the strategy allows now (the worker protocol's guard); `enabled`:
    /// the steps allowed on the step's partition.
    NotEnabled {
        step: Step,
        enabled: Vec<Step>,
    },
    /// A record's payload is not an 8-byte delta.
    BadPayload {
        partition: u32,
        offset: u64,
    },
    /// `run_to_end` of a retry-forever owner: the same record failed `failures` times in a row.
    Stuck {
        partition: u32,
        offset: u64,
        failures: u64,
    },
    /// `run_to_end` under `--on-out-of-range fail`: retention removed the next record.
    OutOfRange {
        partition: u32,
        offset: u64,
        start: u64,
    },
    /// The log lost records: the group's `stored` next offset or the owner's `position` is past
    /// the log `end` (or, `--log-check refuse-all`, the partition is damaged). Nothing applied.
    Refused {
        group: String,
        partition: u32,
        stored: u64,
        position: u64,
        end: u64,
    },
}

impl fmt::Display for OwnerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OwnerError::Store(error) => write!(f, "{error}"),
            OwnerError::Log(error) => write!(f, "{error}"),
            OwnerError::Txn(error) => write!(f, "{error}"),
            OwnerError::External(error) => write!(f, "{error}"),
            OwnerError::NotEnabled { step, enabled } => {
                let enabled: Vec<String> = enabled.iter().map(Step::to_string).collect();
                let enabled = if enabled.is_empty() { "none".to_string() } else { enabled.join(", ") };
                write!(f, "step '{step}' is not enabled (enabled: {enabled})")
            }
            OwnerError::BadPayload { partition, offset } => {
                write!(f, "record {offset} of partition {partition} is not an 8-byte delta")
            }
            OwnerError::Stuck { partition, offset, failures } => write!(
                f,
                "stuck: partition {partition} offset {offset} failed {failures} times in a row \
                 (retry-forever never gives up)"
            ),
            OwnerError::OutOfRange { partition, offset, start } => write!(
                f,
                "partition {partition}: offset {offset} is below the log start {start} (retention removed it); \
                 use --on-out-of-range earliest to skip to the start with a recorded reset"
            ),
            OwnerError::Refused { group, partition, stored, position, end } if stored.max(position) > end => write!(
                f,
                "refused: group {group} partition {partition}: stored next offset {stored} (position {position}) \
                 is past the log end {end}: the log lost records the group consumed; nothing applied; \
                 run `consumer repair`"
            ),
            OwnerError::Refused { group, partition, stored, position, end } => write!(
                f,
                "refused: group {group} partition {partition}: the log lost acknowledged records (stored next offset \
                 {stored}, position {position}, log end {end}) and --log-check refuse-all refuses behind the loss too"
            ),
        }
    }
}

impl std::error::Error for OwnerError {}

impl OwnerError {
    /// Whether the error is a refusal to protect data (the command line's exit status 4).
    pub fn is_refusal(&self) -> bool {
        match self {
            OwnerError::Refused { .. } => true,
            OwnerError::Log(error) => error.is_refusal(),
            OwnerError::Txn(error) => error.is_refusal(),
            OwnerError::Store(error) => error.is_refusal(),
            OwnerError::External(_)
            | OwnerError::NotEnabled { .. }
            | OwnerError::BadPayload { .. }
            | OwnerError::Stuck { .. }
            | OwnerError::OutOfRange { .. } => false,
        }
    }
}

impl From<StoreError> for OwnerError {
    fn from(error: StoreError) -> Self {
        OwnerError::Store(error)
    }
}

impl From<LogError> for OwnerError {
    fn from(error: LogError) -> Self {
        OwnerError::Log(error)
    }
}

impl From<TxnError> for OwnerError {
    fn from(error: TxnError) -> Self {
        OwnerError::Txn(error)
    }
}

impl From<ExternalError> for OwnerError {
    fn from(error: ExternalError) -> Self {
        OwnerError::External(error)
    }
}

pub struct Owner {
    store: Store,
    log: Log,
    group: String,
    name: String,
    settings: Settings,
    leases: BTreeMap<u32, Lease>,
    /// The last log end seen per partition (see `log_end`).
    log_ends: BTreeMap<u32, u64>,
    /// The gaps `repair --gap` recorded per partition, as last seen: offsets with no record,
    /// which a lease steps over with a recorded reset instead of reading them.
    log_gaps: BTreeMap<u32, Vec<std::ops::Range<u64>>>,
    crash: CrashPlan,
    /// The transactional sequence's output log (beside the input log); `None` for the others.
    output: Option<OutputLog>,
    /// What the takes of transactional ids did, and the tails the output log's writer cut, the
    /// last `REPORTS_KEPT_MAX` of each (for `consume` to print).
    takes: Vec<Take>,
    output_repairs: Vec<TailRepair>,
    /// The email provider (the email sequences) and the index (dual-write), opened at start;
    /// `None` for the others.
    email: Option<EmailProvider>,
    index: Option<Index>,
    /// A test seam: called in `run_to_end` between the choice of a step and the step, where
    /// another process may change the log (retention past the position, a lost tail) after
    /// the owner looked at it. `None` outside tests.
    before_step: Option<BeforeStep>,
}

/// The hook of `Owner::set_before_step`.
pub type BeforeStep = Box<dyn FnMut(Step) + Send>;

/// How many takes and output-log repairs an owner keeps for its report.
const REPORTS_KEPT_MAX: usize = 64;

/// Serialisable view of an owner's volatile state (the worker's `state` reply).
#[derive(Clone, Debug, Serialize)]
pub struct OwnerState<'a> {
    pub group: &'a str,
    pub owner: &'a str,
    pub strategy: Strategy,
    pub leases: &'a BTreeMap<u32, Lease>,
}

impl Owner {
    /// Starts (or restarts) an owner: the coordinator hands it every partition the store
    /// assigns to it, and it resumes each from the committed checkpoint. Under
    /// `StartPolicy::ClaimEpoch` it claims a new epoch for them in one transaction
    /// (`Store::claim_own`), so an earlier incarnation of this owner still running is a zombie
    /// its next fenced write finds out; under `StoredEpoch` (the trap) it takes the stored one.
    /// The external systems (spec.md §3.4) are those of the log's data directory.
    pub fn start(
        store: Store,
        log: Log,
        group: &str,
        name: &str,
        settings: Settings,
        crash: CrashPlan,
    ) -> Result<Owner, OwnerError> {
        let external = ExternalDir::beside(&log);
        Owner::start_in(store, (log, &external), group, name, settings, crash)
    }

    /// `start` with the external systems of `external` (the power-cut runs keep the log on a
    /// simulated disk and these files in a real directory). Only a strategy that uses one
    /// opens it: the email provider for the email sequences, the index for dual-write.
    pub fn start_in(
        mut store: Store,
        (log, external): (Log, &ExternalDir),
        group: &str,
        name: &str,
        settings: Settings,
        crash: CrashPlan,
    ) -> Result<Owner, OwnerError> {
        let sequence = settings.rules().sequence;
        let email = sequence.email_key().map(|_| external.open_provider()).transpose()?;
        let index = sequence.writes_index().then(|| external.open_index()).transpose()?;
        store.ensure_group(group, FIRST_OWNER)?;
        let leases = match settings.start {
            StartPolicy::ClaimEpoch => store
                .claim_own(group, name)?
                .into_iter()
                .map(|claimed| (claimed.partition, Lease::fresh(claimed.epoch, claimed.next_offset)))
                .collect(),
            StartPolicy::StoredEpoch => {
                let mut leases = BTreeMap::new();
                for partition in 0..store.partitions() {
                    let row = store.progress(group, partition)?;
                    if row.owner == name {
                        leases.insert(partition, Lease::fresh(row.epoch, row.next_offset));
                    }
                }
                leases
            }
        };
        let output = match sequence {
            Sequence::Transactional => Some(OutputLog::beside(&log)),
            Sequence::CommitThenEffect
            | Sequence::EffectThenCommit
            | Sequence::EffectOnly
            | Sequence::EffectRecordCommit
            | Sequence::Stamped
            | Sequence::DedupedThenCommit
            | Sequence::Atomic
            | Sequence::AtomicThenEmail
            | Sequence::EmailThenAtomic { .. }
            | Sequence::AtomicThenIndex
            | Sequence::AtomicWithOutbox => None,
        };
        let (group, name, log_ends) = (group.to_string(), name.to_string(), BTreeMap::new());
        let (takes, output_repairs) = (Vec::new(), Vec::new());
        let mut owner = Owner {
            store,
            log,
            group,
            name,
            settings,
            leases,
            log_ends,
            log_gaps: BTreeMap::new(),
            crash,
            output,
            takes,
            output_repairs,
            email,
            index,
            before_step: None,
        };
        let taken: Vec<u32> = owner.leases.keys().copied().collect();
        for partition in taken {
            owner.take_transactional_id(partition)?;
        }
        Ok(owner)
    }

    pub fn state(&self) -> OwnerState<'_> {
        OwnerState { group: &self.group, owner: &self.name, strategy: self.settings.strategy, leases: &self.leases }
    }

    /// The coordinator's assignment (the worker's `assign`, the model's `rebalance` to a live
    /// owner): after a rebalance named this owner in the store, the owner takes the partition
    /// at the epoch the rebalance claimed, from the committed checkpoint (replacing any stale
    /// lease it held). Returns the epoch, or `None` when the store names another owner.
    pub fn assign(&mut self, partition: u32) -> Result<Option<i64>, OwnerError> {
        let row = self.store.progress(&self.group, partition)?;
        if row.owner != self.name {
            return Ok(None);
        }
        self.leases.insert(partition, Lease::fresh(row.epoch, row.next_offset));
        if !self.take_transactional_id(partition)? {
            return Ok(None);
        }
        Ok(Some(row.epoch))
    }

    /// Test seam: `hook` runs in `run_to_end` after each step is chosen and before it is
    /// taken, so a test can make the race a concurrent process makes (`impl/tests/races.rs`).
    pub fn set_before_step(&mut self, hook: BeforeStep) {
        self.before_step = Some(hook);
    }

    /// Arms one more crash point (the worker's `arm` command).
    pub fn arm(&mut self, point: crate::crash::CrashPoint) {
        self.crash.arm(point);
    }

    pub fn leases(&self) -> &BTreeMap<u32, Lease> {
        &self.leases
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The last takes of transactional ids (oldest first): what each ended.
    pub fn takes(&self) -> &[Take] {
        &self.takes
    }

    /// The last unacknowledged tails the output log's writer cut (oldest first).
    pub fn output_repairs(&self) -> &[TailRepair] {
        &self.output_repairs
    }

    /// The steps the strategy allows now, in a fixed order (by partition).
    ///
    /// The log (start, end, damage) is read afresh whenever the lease could fetch or has
    /// nothing in flight: retention may move the start at any moment, a fetch must never read
    /// below it, and a loss may have moved the end below the group's checkpoint.
    pub fn enabled_steps(&mut self) -> Result<Vec<Step>, OwnerError> {
        let mut steps = Vec::new();
        let partitions: Vec<u32> = self.leases.keys().copied().collect();
        for partition in partitions {
            self.partition_steps(partition, &mut steps)?;
        }
        Ok(steps)
    }

    /// The steps the strategy allows now on one leased partition (none on a partition the
    /// owner holds no lease on). Only that partition's log is read: a partition that cannot be
    /// read (a replicated one without a leader) refuses its own steps, not the other
    /// partitions' (the model's steps on one partition do not look at another's leader).
    fn partition_steps(&mut self, partition: u32, steps: &mut Vec<Step>) -> Result<(), OwnerError> {
        let Some(lease) = self.leases.get(&partition) else { return Ok(()) };
        let (position, needs_view, idle) =
            (lease.position, needs_log_start(&self.settings, lease), lease.records.is_empty());
        // A partition with no leader (a replicated log after an election found none) can be
        // neither read nor judged: its lease fetches nothing (its end is taken to be its
        // position) and refuses nothing, but writes what it holds, and the owner's other
        // partitions go on, as in the model, where an unavailable partition enables no fetch.
        // `run_to_end` refuses it once nothing else is left to do.
        let (bounds, refuse) = if needs_view {
            match self.log.view(partition) {
                Ok(view) => {
                    self.log_ends.insert(partition, view.end);
                    let refuse = idle && self.refuses(partition, position, &view)?;
                    self.log_gaps.insert(partition, view.gaps);
                    ((view.start, view.end), refuse)
                }
                Err(LogError::Unavailable { .. }) => ((0, position), false),
                Err(error) => return Err(error.into()),
            }
        } else {
            // Without a fetch, a policy step or a refusal to decide, the log is not read.
            match self.log_end(partition, position) {
                Ok(end) => ((0, end), false),
                Err(OwnerError::Log(LogError::Unavailable { .. })) => ((0, position), false),
                Err(error) => return Err(error),
            }
        };
        let lease = &self.leases[&partition];
        let gaps = self.log_gaps.get(&partition).map_or(&[][..], Vec::as_slice);
        match gap_bounds(lease, bounds, gaps) {
            GapBounds::Skip(to) => steps.push(Step { kind: StepKind::ResetOffset, partition, offset: to }),
            GapBounds::Read(bounds) => lease_steps(&self.settings, partition, lease, bounds, refuse, steps),
        }
        Ok(())
    }

    /// Whether a lease with nothing in flight at `position` refuses the partition (`refuses`).
    fn refuses(&self, partition: u32, position: u64, view: &PartitionView) -> Result<bool, OwnerError> {
        refuses(self.settings.log_check, (&self.store, &self.group, partition), position, view)
    }

    /// The log end of a partition, as far as `position` needs it, for a lease whose steps do
    /// not depend on it (records in flight, no room to fetch): the last one seen is asked again
    /// (a refresh reads files) only once the owner has caught up with it.
    fn log_end(&mut self, partition: u32, position: u64) -> Result<u64, OwnerError> {
        let known = self.log_ends.get(&partition).copied().unwrap_or(0);
        if position < known {
            return Ok(known);
        }
        let end = self.log.end(partition)?;
        self.log_ends.insert(partition, end);
        Ok(end)
    }

    /// Performs one step if the strategy allows it now; each step but `fetch` is one durable
    /// write. Crash points named in the plan end the process before, inside or after it.
    pub fn perform(&mut self, step: Step) -> Result<Outcome, OwnerError> {
        // Only the step's partition decides whether it is enabled (`partition_steps`).
        let mut enabled = Vec::new();
        self.partition_steps(step.partition, &mut enabled)?;
        if !enabled.contains(&step) {
            return Err(OwnerError::NotEnabled { step, enabled });
        }
        self.perform_enabled(step)
    }

    /// Performs a step already known to be enabled.
    fn perform_enabled(&mut self, step: Step) -> Result<Outcome, OwnerError> {
        let span = self.step_span(step);
        self.crash.at(step.kind, When::Before, span.clone());
        let outcome = match step.kind {
            StepKind::Fetch => self.fetch(step.partition),
            StepKind::CommitOffset => self.commit_offset(step.partition, step.offset),
            StepKind::InsertProcessed => self.insert_processed(step.partition, step.offset),
            StepKind::DeadLetter => self.dead_letter(step.partition, step.offset),
            StepKind::ResetOffset => self.reset_offset(step.partition, step.offset),
            StepKind::FailOutOfRange => self.fail_out_of_range(step.partition, step.offset),
            StepKind::RefuseAhead => self.refuse_ahead(step.partition),
            StepKind::ApplyEffect => self.apply(step, Effect::Plain),
            StepKind::ApplyStamped => self.apply(step, Effect::Stamped),
            StepKind::ApplyDeduped => self.apply(step, Effect::Deduped),
            StepKind::ApplyAtomic => self.apply(step, Effect::Atomic),
            StepKind::ProduceOutput => self.produce_output(step),
            StepKind::CommitTxn => self.commit_txn(step),
            StepKind::SendEmail => self.send_email(step),
            StepKind::WriteIndex => self.write_index(step),
        }?;
        self.crash.at(step.kind, When::After, span);
        Ok(outcome)
    }

    /// The offsets a step concerns, for matching crash points.
    fn step_span(&self, step: Step) -> std::ops::Range<u64> {
        let lease = &self.leases[&step.partition];
        match step.kind {
            StepKind::Fetch
            | StepKind::CommitOffset
            | StepKind::ResetOffset
            | StepKind::FailOutOfRange
            | StepKind::RefuseAhead => step.offset..step.offset + 1,
            // The writes of a batch in flight concern the whole batch.
            StepKind::ApplyEffect
            | StepKind::InsertProcessed
            | StepKind::ApplyStamped
            | StepKind::ApplyDeduped
            | StepKind::ApplyAtomic
            | StepKind::DeadLetter
            | StepKind::ProduceOutput
            | StepKind::CommitTxn
            | StepKind::SendEmail
            | StepKind::WriteIndex => {
                // An enabled write concerns a batch in flight (`serial_steps`, `parallel_steps`).
                let record = lease.records.get(&step.offset);
                step.offset..record.expect("an enabled write step's batch is in flight").end
            }
        }
    }

    /// Runs the strategy until nothing is enabled (every owned partition caught up and
    /// committed) and returns the steps taken. The parallel strategies work in windows: fetch
    /// until `inflight` records are pending, then complete them highest first (the order in
    /// which parallel-max's trap shows), committing whenever the target moves. A retry-forever
    /// owner whose record fails `STUCK_AFTER` times in a row stops with `OwnerError::Stuck`;
    /// an owner that finds retention past its position under `--on-out-of-range fail` stops
    /// with `OwnerError::OutOfRange` (having written nothing for that partition), and one that
    /// refuses a partition whose log lost records stops with `OwnerError::Refused` (refusals
    /// are taken before any other step).
    /// Runs as a long-lived member of the group: takes every partition the store assigns to it
    /// (at start, and after each rebalance), runs its strategy, and returns the number of steps
    /// once every partition of the group is committed up to the log end. Between rounds with
    /// nothing to do it sleeps `idle`. Used by the load test, where owners are killed and
    /// partitions moved while they run.
    pub fn run_following(&mut self, idle: std::time::Duration) -> Result<usize, OwnerError> {
        let mut steps = 0;
        loop {
            self.take_assignments()?;
            steps += self.run_to_end(OnFenced::DropPartition)?.len();
            if self.group_done()? {
                return Ok(steps);
            }
            std::thread::sleep(idle);
        }
    }

    /// The coordinator's assignments, as the store records them: a partition that names this
    /// owner at an epoch newer than its lease (or that it holds no lease on) is taken afresh.
    fn take_assignments(&mut self) -> Result<(), OwnerError> {
        for partition in 0..self.store.partitions() {
            let row = self.store.progress(&self.group, partition)?;
            let stale = self.leases.get(&partition).is_none_or(|lease| lease.epoch < row.epoch);
            if row.owner == self.name && stale {
                self.adopt(partition)?;
            }
        }
        Ok(())
    }

    /// Follow mode's adoption of a partition the store names this owner for. Under
    /// `ClaimEpoch` it claims a new epoch for it, as a start does (one transaction, and only
    /// while the row still names this owner): the row that names this owner may be a newer
    /// incarnation's, and an incarnation it fenced would otherwise adopt that row at the
    /// newer one's epoch and apply alongside it, unfenced. With the claim, two live
    /// incarnations never hold one epoch: they take the partition from each other, and each
    /// one's stale writes are fenced. Under `StoredEpoch` (the trap) it takes the stored epoch.
    fn adopt(&mut self, partition: u32) -> Result<(), OwnerError> {
        match self.settings.start {
            StartPolicy::ClaimEpoch => {
                if let Some(claimed) = self.store.claim_own_partition(&self.group, partition, &self.name)? {
                    self.leases.insert(partition, Lease::fresh(claimed.epoch, claimed.next_offset));
                    self.take_transactional_id(partition)?;
                }
            }
            StartPolicy::StoredEpoch => {
                self.assign(partition)?;
            }
        }
        Ok(())
    }

    /// Whether every partition of the group is committed up to the current log end.
    fn group_done(&mut self) -> Result<bool, OwnerError> {
        for partition in 0..self.store.partitions() {
            if self.store.progress(&self.group, partition)?.next_offset < self.log.end(partition)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Runs the strategy until nothing is enabled (every owned partition caught up and
    /// committed) and returns the steps taken. The parallel strategies work in windows: fetch
    /// until `inflight` records are pending, then complete them highest first (the order in
    /// which parallel-max's trap shows), committing whenever the target moves. A retry-forever
    /// owner whose record fails `STUCK_AFTER` times in a row stops with `OwnerError::Stuck`;
    /// an owner that finds retention past its position under `--on-out-of-range fail` stops
    /// with `OwnerError::OutOfRange` (having written nothing for that partition). A fenced
    /// write drops its partition; under `OnFenced::Stop` the run also ends there, the fenced
    /// step last.
    pub fn run_to_end(&mut self, on_fenced: OnFenced) -> Result<Vec<(Step, Outcome)>, OwnerError> {
        let mut taken = Vec::new();
        let mut draining = false;
        // The record that failed last and how many times in a row.
        let mut failing: Option<(Step, u64)> = None;
        let rules = self.settings.rules();
        let retries_forever = match rules.poison {
            PoisonPolicy::RetryForever => true,
            PoisonPolicy::NotHandled | PoisonPolicy::DeadLetter | PoisonPolicy::Skip => false,
        };
        loop {
            let steps = self.enabled_steps()?;
            let kind_of = |kind| steps.iter().find(|s| s.kind == kind);
            let choice = if let Some(refusal) = kind_of(StepKind::RefuseAhead) {
                Some(refusal)
            } else if rules.checkpoint.is_parallel() {
                let fetch = kind_of(StepKind::Fetch).filter(|_| !draining);
                let highest = steps.iter().rfind(|s| s.kind == StepKind::ApplyEffect);
                let policy = steps.iter().find(|s| matches!(s.kind, StepKind::ResetOffset | StepKind::FailOutOfRange));
                kind_of(StepKind::CommitOffset).or(policy).or(fetch).or(highest)
            } else {
                steps.first()
            };
            let Some(&step) = choice else {
                // Done, unless a partition held has no leader: that is refused (`Unavailable`),
                // never taken for a partition consumed to its end.
                for partition in self.leases.keys().copied().collect::<Vec<_>>() {
                    self.log.view(partition)?;
                }
                return Ok(taken);
            };
            draining |= step.kind == StepKind::ApplyEffect;
            if let Some(hook) = &mut self.before_step {
                hook(step);
            }
            let outcome = match self.perform_enabled(step) {
                Ok(outcome) => outcome,
                // Retention passed the position after the steps were computed: the fetch
                // changed nothing, and the next round sees the new start.
                Err(OwnerError::Log(LogError::OffsetOutOfRange { offset, start, .. }))
                    if step.kind == StepKind::Fetch && offset < start =>
                {
                    continue
                }
                Err(error) => return Err(error),
            };
            if let Outcome::OutOfRange { position, start } = outcome {
                return Err(OwnerError::OutOfRange { partition: step.partition, offset: position, start });
            }
            if let Outcome::Refused { stored, position, end } = outcome {
                let (group, partition) = (self.group.clone(), step.partition);
                return Err(OwnerError::Refused { group, partition, stored, position, end });
            }
            // A failure extends the streak of the same step; any other outcome ends it.
            failing = if outcome.is_failed() {
                let streak = failing.filter(|&(last, _)| last == step).map_or(0, |(_, failures)| failures);
                Some((step, streak + 1))
            } else {
                None
            };
            if let Some((step, failures)) = failing {
                if retries_forever && failures >= STUCK_AFTER {
                    return Err(OwnerError::Stuck { partition: step.partition, offset: step.offset, failures });
                }
            }
            let fenced = outcome.fenced().is_some();
            taken.push((step, outcome));
            if fenced && on_fenced == OnFenced::Stop {
                return Ok(taken);
            }
            // A window is drained once nothing is pending; then the next one is fetched.
            if self.leases.values().all(|lease| lease.records.is_empty()) {
                draining = false;
            }
        }
    }

    fn lease_mut(&mut self, partition: u32) -> &mut Lease {
        self.leases.get_mut(&partition).expect("an enabled step has its lease")
    }

    fn fetch(&mut self, partition: u32) -> Result<Outcome, OwnerError> {
        let position = self.leases[&partition].position;
        // The end seen by `enabled_steps` just before (a fetch is enabled only after a fresh look).
        let log_end = self.log_end(partition, position)?;
        let limit = fetch_count(&self.settings, &self.leases[&partition], log_end);
        // Enabled only below the end and within the interval (`serial_steps`, `parallel_steps`).
        assert!(
            limit > 0,
            "an enabled fetch of partition {partition} reads nothing: position {position}, end {log_end}"
        );
        let tolerates_poison = self.settings.rules().poison.is_handled();
        let mut deltas = Vec::with_capacity(limit as usize);
        let mut poison_payload = None;
        // One refresh of the log for the whole batch, not one per record.
        for (offset, record) in (position..).zip(self.log.read_range(partition, position..position + limit)?) {
            let delta = decode_delta(&record.payload);
            if delta.is_none() && !tolerates_poison {
                return Err(OwnerError::BadPayload { partition, offset });
            }
            // A poison record is a batch of its own, so that a batch's transaction either
            // applies every record of it or fails on its only one.
            if delta.is_none() && !deltas.is_empty() {
                break;
            }
            deltas.push(delta);
            if delta.is_none() {
                poison_payload = Some(record.payload);
                break;
            }
        }
        let count = deltas.len() as u64;
        let lease = self.lease_mut(partition);
        let in_flight = InFlight { end: position + count, stage: Stage::Fetched, deltas, poison_payload, output: None };
        lease.records.insert(position, in_flight);
        lease.position = position + count;
        Ok(Outcome::Fetched { count })
    }

    fn items(&self, partition: u32, offset: u64) -> Vec<Item> {
        let record = &self.leases[&partition].records[&offset];
        let delta = |delta: Option<i64>| {
            delta.expect("only a poison batch lacks a delta, and it never reaches an effect write")
        };
        record.deltas.iter().enumerate().map(|(i, &d)| Item { offset: offset + i as u64, delta: delta(d) }).collect()
    }

    /// The effect writes: apply-effect, apply-stamped, apply-deduped, apply-atomic (`effect`
    /// is `step.kind`'s).
    fn apply(&mut self, step: Step, effect: Effect) -> Result<Outcome, OwnerError> {
        let (partition, offset) = (step.partition, step.offset);
        if self.leases[&partition].records[&offset].is_poison() {
            return self.apply_poison(partition, offset);
        }
        let items = self.items(partition, offset);
        let (group, rules, epoch) = (self.group.clone(), self.settings.rules(), self.leases[&partition].epoch);
        let crash = self.crash.clone();
        let span = offset..offset + items.len() as u64;
        let mut inside = || crash.at(step.kind, When::Inside, span.clone());
        let result = match effect {
            Effect::Plain => {
                // Dedup-separate's effect is skipped for ids already processed; the sequences
                // that never apply a plain effect have no ids to look at either.
                let unless_processed = match rules.sequence {
                    Sequence::EffectRecordCommit => true,
                    Sequence::CommitThenEffect
                    | Sequence::EffectThenCommit
                    | Sequence::EffectOnly
                    | Sequence::Stamped
                    | Sequence::DedupedThenCommit
                    | Sequence::Atomic
                    | Sequence::Transactional
                    | Sequence::AtomicThenEmail
                    | Sequence::EmailThenAtomic { .. }
                    | Sequence::AtomicThenIndex
                    | Sequence::AtomicWithOutbox => false,
                };
                self.store.add_effect(&group, partition, &items, (unless_processed, rules.effect), &mut inside)
            }
            Effect::Stamped => self.store.apply_stamped(&group, partition, &items, rules.effect, &mut inside),
            Effect::Deduped => self.store.apply_deduped(&group, partition, &items, rules.dedup_key, &mut inside),
            Effect::Atomic => {
                let guard = match self.settings.atomic_guard() {
                    GuardKind::Blind => Guard::Blind,
                    GuardKind::Fenced => Guard::Fenced { epoch },
                    GuardKind::Cas => Guard::Cas,
                };
                self.store.apply_atomic(&group, partition, &items, (guard, atomic_also(rules.sequence)), &mut inside)
            }
        };
        let applied = match result {
            Ok(applied) => applied,
            Err(StoreError::Fenced { held, current, .. }) => return Ok(self.fenced(partition, held, current)),
            Err(error) => return Err(error.into()),
        };
        self.after_effect(step, &applied);
        let applied_count = applied.iter().filter(|&&a| a).count() as u64;
        Ok(Outcome::Applied { applied: applied_count, skipped: applied.len() as u64 - applied_count })
    }

    /// Moves the batch to its next stage after its effect write (the model's bookkeeping).
    fn after_effect(&mut self, step: Step, applied: &[bool]) {
        let rules = self.settings.rules();
        let lease = self.lease_mut(step.partition);
        let offset = step.offset;
        let end = lease.records[&offset].end;
        match rules.sequence {
            Sequence::EffectThenCommit | Sequence::DedupedThenCommit => {
                lease.records.get_mut(&offset).expect("in flight").stage = Stage::EffectApplied
            }
            Sequence::EffectRecordCommit => {
                // Ids found processed mean effect and id both landed before: only the commit is left.
                let all_processed = applied.iter().all(|&a| !a);
                lease.records.get_mut(&offset).expect("in flight").stage =
                    if all_processed { Stage::Recorded } else { Stage::EffectApplied };
            }
            // The effect is the batch's last write (commit-first committed before it).
            Sequence::CommitThenEffect | Sequence::Stamped => {
                lease.records.remove(&offset);
            }
            Sequence::EffectOnly => {
                lease.records.remove(&offset);
                match rules.checkpoint {
                    Checkpointing::Parallel(target) => {
                        if offset >= lease.checkpoint {
                            lease.done.insert(offset);
                        }
                        // Parallel-max keeps only the highest completion (spec.md §2.2).
                        match target {
                            ParallelCommit::Max => {
                                let highest = lease.done.last().copied();
                                lease.done.retain(|&done| Some(done) == highest);
                            }
                            ParallelCommit::Watermark => {}
                        }
                    }
                    // The finished records count towards the next periodic checkpoint
                    // (`Lease::finished`); `Rules::check` never pairs per-batch checkpointing
                    // with a sequence that has no commit.
                    Checkpointing::PerBatch | Checkpointing::Periodic => {}
                }
            }
            // One transaction wrote the effect and the next offset (none when every record was
            // skipped: the stored offset is already past them); the transactional sequence's is
            // `commit-txn`'s. The email-first sequences emailed before it, and the outbox's relay
            // takes over from here.
            Sequence::Atomic
            | Sequence::Transactional
            | Sequence::EmailThenAtomic { .. }
            | Sequence::AtomicWithOutbox => {
                lease.records.remove(&offset);
                if applied.iter().any(|&a| a) {
                    lease.checkpoint = end;
                }
            }
            // The store committed; the email or the index write is next, apart from it.
            Sequence::AtomicThenEmail | Sequence::AtomicThenIndex => {
                if applied.iter().any(|&a| a) {
                    lease.records.get_mut(&offset).expect("in flight").stage = Stage::Stored;
                    lease.checkpoint = end;
                } else {
                    lease.records.remove(&offset);
                }
            }
        }
    }

    /// `send-email` (spec.md §3.4): the batch's emails to the provider, outside the store's
    /// transaction, each with its record's identity as its idempotency key when the sequence
    /// says so. The provider records them durably before it answers; `send-email:inside` falls
    /// after that, before the owner hears the answer. email-first sequences move the batch to
    /// `Emailed` (`apply-atomic` next); atomic-plus-email's batch is done.
    fn send_email(&mut self, step: Step) -> Result<Outcome, OwnerError> {
        let (partition, offset) = (step.partition, step.offset);
        let (strategy, sequence) = (self.settings.strategy, self.settings.rules().sequence);
        let keyed = sequence.email_key().unwrap_or_else(|| panic!("invariant: {strategy} sends no email"));
        let unkeyed = self.settings.mutation == Some(Mutation::NoEmailKey);
        let group = self.group.clone();
        let requests: Vec<EmailRequest> = self
            .items(partition, offset)
            .iter()
            .map(|item| EmailRequest::for_record(&group, partition, item.offset, item.delta, keyed && !unkeyed))
            .collect();
        let provider = self.email.as_mut().unwrap_or_else(|| panic!("invariant: {strategy} opened its provider"));
        let delivered = provider.send(&requests)?;
        self.crash.at(StepKind::SendEmail, When::Inside, offset..offset + requests.len() as u64);
        let lease = self.lease_mut(partition);
        if sequence.is_email_first() {
            lease.records.get_mut(&offset).expect("in flight").stage = Stage::Emailed;
        } else {
            lease.records.remove(&offset);
        }
        Ok(Outcome::Emailed { delivered: delivered.into_iter().max().unwrap_or(0) })
    }

    /// `write-index` (dual-write): the batch's facts to the index, in a write of its own (one
    /// index transaction; `write-index:inside` falls before its COMMIT). The batch is done.
    fn write_index(&mut self, step: Step) -> Result<Outcome, OwnerError> {
        let (partition, offset) = (step.partition, step.offset);
        let group = self.group.clone();
        let facts: Vec<Fact> = self
            .items(partition, offset)
            .iter()
            .map(|item| Fact { group: group.clone(), partition, offset: item.offset })
            .collect();
        let crash = self.crash.clone();
        let span = offset..offset + facts.len() as u64;
        let mut inside = || crash.at(StepKind::WriteIndex, When::Inside, span.clone());
        let strategy = self.settings.strategy;
        let index = self.index.as_mut().unwrap_or_else(|| panic!("invariant: {strategy} opened its index"));
        let written = index.write(&facts, &mut inside)?;
        self.lease_mut(partition).records.remove(&offset);
        Ok(Outcome::Indexed { written })
    }

    /// The abort tells the zombie it lost the partition: it stops working on it.
    fn fenced(&mut self, partition: u32, held: i64, current: i64) -> Outcome {
        self.leases.remove(&partition);
        Outcome::Fenced { held, current }
    }

    /// `apply-atomic` on a poison record (the model's `poison_attempt`): one fenced transaction
    /// in which the effect fails. atomic-dlq counts the attempt durably and gives up once
    /// `max_attempts` are counted; skip-poison gives up at once; retry-forever retries.
    fn apply_poison(&mut self, partition: u32, offset: u64) -> Result<Outcome, OwnerError> {
        let (rules, max_attempts, epoch) =
            (self.settings.rules(), self.settings.max_attempts, self.leases[&partition].epoch);
        let policy = match rules.poison {
            PoisonPolicy::DeadLetter => FailurePolicy::Count { max_attempts },
            PoisonPolicy::Skip | PoisonPolicy::RetryForever => FailurePolicy::Forget,
            PoisonPolicy::NotHandled => panic!(
                "invariant: {} holds poison record {offset} of partition {partition}, but its fetch refuses them",
                self.settings.strategy
            ),
        };
        let crash = self.crash.clone();
        let mut inside = || crash.at(StepKind::ApplyAtomic, When::Inside, offset..offset + 1);
        let fence = self.settings.fence(FencedWrite::Attempts, Some(epoch));
        let result =
            self.store.poison_attempt(&self.group, partition, offset, fence, policy, POISON_ERROR, &mut inside);
        let (exhausted, outcome) = match result {
            Ok(PoisonAttempt::Failed { attempts }) => {
                let exhausted = match rules.poison {
                    PoisonPolicy::DeadLetter => attempts >= max_attempts,
                    PoisonPolicy::Skip => true,
                    PoisonPolicy::RetryForever | PoisonPolicy::NotHandled => false,
                };
                (exhausted, Outcome::Failed { attempts })
            }
            Ok(PoisonAttempt::Exhausted { .. }) => (true, Outcome::Exhausted),
            Err(StoreError::Fenced { held, current, .. }) => return Ok(self.fenced(partition, held, current)),
            Err(error) => return Err(error.into()),
        };
        let record = self.lease_mut(partition).records.get_mut(&offset).expect("in flight");
        record.stage = if exhausted { Stage::Exhausted } else { Stage::Fetched };
        Ok(outcome)
    }

    /// `dead-letter` (atomic-dlq): one fenced transaction moving the exhausted record to the
    /// dead-letter table, with its attempts, error and payload, and the next offset past it.
    fn dead_letter(&mut self, partition: u32, offset: u64) -> Result<Outcome, OwnerError> {
        let record = &self.leases[&partition].records[&offset];
        let payload = record.poison_payload.clone().expect("invariant: only a fetched poison record is dead-lettered");
        let epoch = self.leases[&partition].epoch;
        let crash = self.crash.clone();
        let mut inside = || crash.at(StepKind::DeadLetter, When::Inside, offset..offset + 1);
        let fence = self.settings.fence(FencedWrite::DeadLetter, Some(epoch));
        let attempts =
            match self.store.dead_letter(&self.group, partition, offset, fence, &payload, POISON_ERROR, &mut inside) {
                Ok(attempts) => attempts,
                Err(StoreError::Fenced { held, current, .. }) => return Ok(self.fenced(partition, held, current)),
                Err(error) => return Err(error.into()),
            };
        let lease = self.lease_mut(partition);
        lease.records.remove(&offset);
        lease.checkpoint = offset + 1;
        Ok(Outcome::DeadLettered { attempts })
    }

    /// `reset-offset` (`--on-out-of-range earliest`): one fenced transaction recording the
    /// reset from the stored next offset to the log start `to` and moving the next offset
    /// there; the lease resumes at `to`.
    fn reset_offset(&mut self, partition: u32, to: u64) -> Result<Outcome, OwnerError> {
        // A reset is enabled only with nothing in flight and no commit pending
        // (`parallel_steps` offers the commit target first), so no completion is left to keep.
        let lease = &self.leases[&partition];
        assert!(
            lease.done.is_empty(),
            "invariant: a reset of partition {partition} finds completions {:?}",
            lease.done
        );
        let epoch = lease.epoch;
        let crash = self.crash.clone();
        let mut inside = || crash.at(StepKind::ResetOffset, When::Inside, to..to + 1);
        let fence = self.settings.fence(FencedWrite::ResetOffset, Some(epoch));
        let from = match self.store.reset_offset(&self.group, partition, fence, to, &mut inside) {
            Ok(from) => from,
            Err(StoreError::Fenced { held, current, .. }) => return Ok(self.fenced(partition, held, current)),
            Err(error) => return Err(error.into()),
        };
        let lease = self.lease_mut(partition);
        lease.position = to;
        lease.checkpoint = to;
        Ok(Outcome::Reset { from, to })
    }

    /// `fail-out-of-range` (`--on-out-of-range fail`): no write; the owner stops working on
    /// the partition, whose next record retention removed.
    fn fail_out_of_range(&mut self, partition: u32, position: u64) -> Result<Outcome, OwnerError> {
        let start = self.log.start(partition)?;
        self.leases.remove(&partition);
        Ok(Outcome::OutOfRange { position, start })
    }

    /// `refuse-ahead` (the model's `refuse_ahead`): no write; the owner stops working on the
    /// partition, whose log lost records its group (or the owner itself) had consumed.
    fn refuse_ahead(&mut self, partition: u32) -> Result<Outcome, OwnerError> {
        let stored = self.store.progress(&self.group, partition)?.next_offset;
        let end = self.log.end(partition)?;
        let position = self.leases.remove(&partition).expect("an enabled step has its lease").position;
        Ok(Outcome::Refused { stored, position, end })
    }

    fn insert_processed(&mut self, partition: u32, offset: u64) -> Result<Outcome, OwnerError> {
        let offsets: Vec<u64> = self.items(partition, offset).iter().map(|item| item.offset).collect();
        let crash = self.crash.clone();
        let span = offset..offset + offsets.len() as u64;
        let mut inside = || crash.at(StepKind::InsertProcessed, When::Inside, span.clone());
        self.store.insert_processed(&self.group, partition, &offsets, &mut inside)?;
        self.lease_mut(partition).records.get_mut(&offset).expect("in flight").stage = Stage::Recorded;
        Ok(Outcome::Recorded)
    }

    fn commit_offset(&mut self, partition: u32, next_offset: u64) -> Result<Outcome, OwnerError> {
        let crash = self.crash.clone();
        let mut inside = || crash.at(StepKind::CommitOffset, When::Inside, next_offset..next_offset + 1);
        let rules = self.settings.rules();
        let fence = match rules.commit_fence {
            CommitFence::Blind => None,
            CommitFence::Fenced => self.settings.fence(FencedWrite::CommitOffset, Some(self.leases[&partition].epoch)),
        };
        match self.store.commit_offset(&self.group, partition, fence, next_offset, &mut inside) {
            Ok(()) => {}
            Err(StoreError::Fenced { held, current, .. }) => return Ok(self.fenced(partition, held, current)),
            Err(error) => return Err(error.into()),
        }
        let lease = self.lease_mut(partition);
        // Every other commit covers records already fetched; only the silent reset
        // (`earliest-silent`) commits past the position, with nothing in flight.
        let jump = next_offset > lease.position;
        lease.checkpoint = next_offset;
        // A jump past retained records moves the position with the checkpoint.
        lease.position = lease.position.max(next_offset);
        if jump {
            // Offered, like a reset, only with nothing in flight and no commit target pending:
            // no completion is left to keep.
            assert!(
                lease.done.is_empty(),
                "invariant: a jump of partition {partition} finds completions {:?}",
                lease.done
            );
            return Ok(Outcome::Committed);
        }
        match rules.checkpoint {
            Checkpointing::Parallel(_) => lease.done.retain(|&offset| offset >= next_offset),
            // The commit covers finished records only: nothing in flight changes.
            Checkpointing::Periodic => {}
            // The commit is a write of the first batch's sequence. The batch stays in flight when
            // its sequence writes on after the commit (commit-first: the effect is pending).
            Checkpointing::PerBatch => {
                let mut first = lease.records.first_entry().expect("the committed batch is in flight");
                if rules.next_write(Stage::Committed).is_some() {
                    first.get_mut().stage = Stage::Committed;
                } else {
                    first.remove();
                }
            }
        }
        Ok(Outcome::Committed)
    }
}

/// Whether a lease of `group` with nothing in flight at `position` refuses `partition` under
/// `check` (the model's `refuses`). The stored next offset is read only when it can matter: a
/// checked log's end moves back only when the partition is damaged, and every offset stored
/// before was at most the end then.
fn refuses(
    check: LogCheck,
    (store, group, partition): (&Store, &str, u32),
    position: u64,
    view: &PartitionView,
) -> Result<bool, OwnerError> {
    let damaged = view.damage.is_some();
    Ok(match check {
        LogCheck::RefuseAhead => {
            position > view.end || (damaged && store.progress(group, partition)?.next_offset > view.end)
        }
        LogCheck::RefuseAll => damaged,
        LogCheck::Unchecked => false,
    })
}

/// `consume`'s check, before an owner starts (and writes anything, its group's rows
/// included): every partition of `group` against the log, as a fresh lease at the stored next
/// offset would see it. `OwnerError::Refused` for the first `check` refuses; otherwise the
/// damaged partitions it does not refuse (the group is behind the loss), to warn about.
pub fn check_log(store: &Store, log: &mut Log, group: &str, check: LogCheck) -> Result<Vec<(u32, Damage)>, OwnerError> {
    let mut damaged = Vec::new();
    for partition in 0..store.partitions() {
        let view = log.view(partition)?;
        // A group not created yet reads as next offset 0.
        let stored = store.progress(group, partition)?.next_offset;
        if refuses(check, (store, group, partition), stored, &view)? {
            let (group, end) = (group.to_string(), view.end);
            return Err(OwnerError::Refused { group, partition, stored, position: stored, end });
        }
        damaged.extend(view.damage.map(|damage| (partition, damage)));
    }
    Ok(damaged)
}

/// What `apply-atomic` records with the effect under `sequence`: the dual-write rows' facts.
fn atomic_also(sequence: Sequence) -> AtomicAlso {
    match sequence {
        Sequence::AtomicThenIndex => AtomicAlso::Fact,
        Sequence::AtomicWithOutbox => AtomicAlso::FactAndOutbox,
        Sequence::Atomic | Sequence::AtomicThenEmail | Sequence::EmailThenAtomic { .. } => AtomicAlso::Nothing,
        Sequence::CommitThenEffect
        | Sequence::EffectThenCommit
        | Sequence::EffectOnly
        | Sequence::EffectRecordCommit
        | Sequence::Stamped
        | Sequence::DedupedThenCommit
        | Sequence::Transactional => panic!("invariant: {sequence:?} has no apply-atomic"),
    }
}

/// The effect writes, as `perform_enabled` hands them to `apply`: one per effect step kind.
#[derive(Clone, Copy, Debug)]
enum Effect {
    /// `apply-effect`.
    Plain,
    /// `apply-stamped`.
    Stamped,
    /// `apply-deduped`.
    Deduped,
    /// `apply-atomic`, under the rules' guard.
    Atomic,
}

/// What a recorded gap leaves a lease: the bounds to read within, or a skip over the gap.
enum GapBounds {
    Read((u64, u64)),
    /// `reset-offset` to the gap's end: the lease stands in a gap with everything before it
    /// committed. The store records the skip in `resets` (as `repair --gap` already did for
    /// the groups it found), so nothing is skipped silently.
    Skip(u64),
}

/// Gaps are offsets with no record (`repair --gap`): a fetch stops at the next one, and a
/// lease that reached one, with nothing in flight and everything committed, skips it. A log
/// without gaps (every log the model describes) leaves the bounds as they are.
fn gap_bounds(lease: &Lease, (start, end): (u64, u64), gaps: &[std::ops::Range<u64>]) -> GapBounds {
    let Some(gap) = gaps.iter().find(|gap| gap.end > lease.position) else { return GapBounds::Read((start, end)) };
    if gap.start > lease.position {
        return GapBounds::Read((start, end.min(gap.start)));
    }
    let settled = lease.records.is_empty() && lease.done.is_empty() && lease.checkpoint == lease.position;
    if settled && lease.position >= start {
        return GapBounds::Skip(gap.end);
    }
    GapBounds::Read((start, end.min(lease.position)))
}

/// How many records the next fetch takes: one for the parallel strategies; otherwise up to
/// `batch`, within the log and (periodic strategies) within the checkpoint interval.
fn fetch_count(settings: &Settings, lease: &Lease, log_end: u64) -> u64 {
    let count = (log_end - lease.position).min(settings.batch as u64);
    match settings.rules().checkpoint {
        Checkpointing::PerBatch => count,
        Checkpointing::Periodic => count.min(settings.commit_every - lease.finished()),
        // A parallel owner holds each record on its own and completes them in any order.
        Checkpointing::Parallel(_) => 1,
    }
}

/// Whether `lease_steps` needs the log start: when the lease could fetch (a fetch must not
/// read below it) or has nothing in flight (the out-of-range policy may be due).
fn needs_log_start(settings: &Settings, lease: &Lease) -> bool {
    let fetch_room = match settings.rules().checkpoint {
        Checkpointing::Parallel(_) => settings.inflight,
        // A serial owner fetches the next batch once nothing is in flight.
        Checkpointing::PerBatch | Checkpointing::Periodic => 1,
    };
    lease.records.len() < fetch_room
}

/// The step the out-of-range policy takes when the lease has nothing in flight and its
/// position is below the log start (the model's branch `lease.position < log_start`).
fn out_of_range_step(settings: &Settings, partition: u32, lease: &Lease, log_start: u64) -> Step {
    let (kind, offset) = match settings.on_out_of_range {
        OutOfRange::Earliest => (StepKind::ResetOffset, log_start),
        // The trap: a blind commit past the removed records, with no trace of them.
        OutOfRange::EarliestSilent => (StepKind::CommitOffset, log_start),
        OutOfRange::Fail => (StepKind::FailOutOfRange, lease.position),
    };
    Step { kind, partition, offset }
}

/// The model's `lease_actions`: the steps one lease allows under the strategy's rules.
/// `log_start` is only looked at when `needs_log_start` holds. Under every strategy, a lease
/// with nothing in flight that `refuse`s (its log lost records, `Owner::refuses`) allows only
/// `refuse-ahead`, and one whose position retention passed only its out-of-range policy's step.
fn lease_steps(
    settings: &Settings,
    partition: u32,
    lease: &Lease,
    bounds: (u64, u64),
    refuse: bool,
    steps: &mut Vec<Step>,
) {
    let refusal = refuse.then_some(Step { kind: StepKind::RefuseAhead, partition, offset: lease.position });
    match settings.rules().checkpoint {
        Checkpointing::PerBatch => serial_steps(settings, None, partition, lease, (bounds, refusal), steps),
        Checkpointing::Periodic => {
            serial_steps(settings, Some(settings.commit_every), partition, lease, (bounds, refusal), steps)
        }
        Checkpointing::Parallel(target) => parallel_steps(settings, target, partition, lease, (bounds, refusal), steps),
    }
}

/// A serial lease holds at most one batch: its next write, or with nothing in flight a
/// refusal, the out-of-range policy, the next fetch and (with a checkpoint interval
/// `commit_every`) the periodic commit.
fn serial_steps(
    settings: &Settings,
    commit_every: Option<u64>,
    partition: u32,
    lease: &Lease,
    ((log_start, log_end), refusal): ((u64, u64), Option<Step>),
    steps: &mut Vec<Step>,
) {
    if let Some((&offset, record)) = lease.records.first_key_value() {
        return steps.push(batch_step(settings, partition, offset, record));
    }
    if let Some(refusal) = refusal {
        return steps.push(refusal);
    }
    if lease.position < log_start {
        // The next record was retained away: the out-of-range policy decides.
        return steps.push(out_of_range_step(settings, partition, lease, log_start));
    }
    let fetch = Step { kind: StepKind::Fetch, partition, offset: lease.position };
    let Some(commit_every) = commit_every else {
        if lease.position < log_end {
            steps.push(fetch);
        }
        return;
    };
    let finished = lease.finished();
    if finished > 0 && (finished >= commit_every || lease.position == log_end) {
        steps.push(Step { kind: StepKind::CommitOffset, partition, offset: lease.position });
    }
    if finished < commit_every && lease.position < log_end {
        steps.push(fetch);
    }
}

/// A parallel lease: a commit whenever the target moved (before anything else), else a
/// refusal or the out-of-range policy (nothing in flight), a fetch while fewer than
/// `inflight` records are held, and the next write of every record held.
fn parallel_steps(
    settings: &Settings,
    target: ParallelCommit,
    partition: u32,
    lease: &Lease,
    ((log_start, log_end), refusal): ((u64, u64), Option<Step>),
    steps: &mut Vec<Step>,
) {
    if let Some(next_offset) = parallel_commit_target(target, lease) {
        return steps.push(Step { kind: StepKind::CommitOffset, partition, offset: next_offset });
    }
    if let Some(refusal) = refusal.filter(|_| lease.records.is_empty()) {
        return steps.push(refusal);
    }
    if lease.records.is_empty() && lease.position < log_start {
        return steps.push(out_of_range_step(settings, partition, lease, log_start));
    }
    // Records fetched before retention are completed; nothing is fetched below the start.
    if log_start <= lease.position && lease.position < log_end && lease.records.len() < settings.inflight {
        steps.push(Step { kind: StepKind::Fetch, partition, offset: lease.position });
    }
    steps.extend(lease.records.iter().map(|(&offset, record)| batch_step(settings, partition, offset, record)));
}

/// The next write of the batch in flight at `offset`, as the rules' sequence says.
fn batch_step(settings: &Settings, partition: u32, offset: u64, record: &InFlight) -> Step {
    let write: Option<BatchWrite> = settings.rules().next_write(record.stage);
    let write = write.unwrap_or_else(|| {
        panic!(
            "invariant: {} never leaves a batch in stage {:?} (partition {partition}, offset {offset})",
            settings.strategy, record.stage
        )
    });
    write.step(partition, offset, record.end)
}

/// The model's `parallel_commit_target`: highest completion + 1 (parallel-max) or the end of
/// the contiguous completed prefix (parallel-watermark), when above the checkpoint.
fn parallel_commit_target(target: ParallelCommit, lease: &Lease) -> Option<u64> {
    let next_offset = match target {
        ParallelCommit::Max => lease.done.iter().next_back().map_or(lease.checkpoint, |&max| max + 1),
        ParallelCommit::Watermark => {
            let mut next = lease.checkpoint;
            while lease.done.contains(&next) {
                next += 1;
            }
            next
        }
    };
    (next_offset > lease.checkpoint).then_some(next_offset)
}
