//! One owner process (`kafka-lane owner`): a member of a consumer group through rdkafka, which
//! reads the lane's partition 0 through the client and writes to onceproof's SQLite store.
//!
//! It serves one request at a time, one JSON object per line on standard input, one reply per
//! line on standard output (the driver, `driver.rs`, is its only caller):
//!
//! | request | does | reply |
//! |---|---|---|
//! | `join`, `claim`, `wait` | subscribes and (unless `wait` is false) waits for the coordinator to assign partition 0; then takes its lease: store-fenced, the store's epoch (claimed: + 1) and next offset; broker-committed, the broker's committed offset | `epoch`, `position` |
//! | `wait-assigned`, `claim` | the second half of `join` | `epoch`, `position` |
//! | `freeze`, `log_end` (optional) | polls what the log holds below `log_end`, then stops polling, its client still a member | |
//! | `fetch`, `offset` | the record at `offset` (earlier ones are skipped, as a seek would) | `delta` |
//! | `effect`, `offset` | `total += delta` in the store, blind | `outcome` |
//! | `atomic`, `offset` | effect and next offset in one transaction, fenced by the lease's epoch (atomic-fenced) or by the stored next offset (atomic-cas) | `outcome`: `applied` or `fenced` |
//! | `deduped`, `offset` | dedup-atomic: the effect unless the record's id is processed, and the id, in one transaction | `outcome`: `applied` or `skipped` |
//! | `commit`, `next_offset` | OffsetCommit to the broker (its generation check is the only fence); dedup-atomic: the store's next offset | `outcome`: `committed` or `refused`, `detail` |
//! | `stall`, `log_end` | it polls what the log holds below `log_end`, then its client leaves the group (unsubscribe) and it stops polling, but it keeps its lease and what it polled (a zombie) | |
//! | `quit` | exits 0 | |
//!
//! Between requests the owner polls (unless stalled), so that it stays a member; what a poll
//! returns is buffered for the next `fetch`. A stalled owner fetches from that buffer only: its
//! client is no longer subscribed and would return nothing.

use crate::error::LaneError;
use consumer::store::{AtomicAlso, Guard, Item, Store, StoreError, StoreOptions};
use consumer::strategy::{DedupKey, EffectKind};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How a lane owner keeps its progress (the lane's rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneStrategy {
    /// Effect and next offset in one store transaction fenced by the store's epoch; the broker
    /// only carries the records and the group.
    AtomicFenced,
    /// As atomic-fenced, the transaction guarded by the stored next offset (compare-and-set).
    AtomicCas,
    /// Effect and processed id in one store transaction, then the next offset in the store.
    DedupAtomic,
    /// The effect in the store, then the offset committed to the broker.
    EffectFirst,
    /// The offset committed to the broker, then the effect in the store.
    CommitFirst,
}

impl LaneStrategy {
    pub const ALL: [LaneStrategy; 5] = [
        LaneStrategy::AtomicFenced,
        LaneStrategy::AtomicCas,
        LaneStrategy::DedupAtomic,
        LaneStrategy::EffectFirst,
        LaneStrategy::CommitFirst,
    ];

    pub fn name(self) -> &'static str {
        match self {
            LaneStrategy::AtomicFenced => "atomic-fenced",
            LaneStrategy::AtomicCas => "atomic-cas",
            LaneStrategy::DedupAtomic => "dedup-atomic",
            LaneStrategy::EffectFirst => "effect-first",
            LaneStrategy::CommitFirst => "commit-first",
        }
    }

    pub fn parse(text: &str) -> Option<LaneStrategy> {
        LaneStrategy::ALL.into_iter().find(|s| s.name() == text)
    }

    /// Whether the committed offset lives in the broker (else in the store).
    pub fn broker_committed(self) -> bool {
        match self {
            LaneStrategy::AtomicFenced | LaneStrategy::AtomicCas | LaneStrategy::DedupAtomic => false,
            LaneStrategy::EffectFirst | LaneStrategy::CommitFirst => true,
        }
    }
}

/// The group timing every lane client uses. The coordinator holds a JoinGroup for half the
/// session timeout, so a short one keeps each rebalance near a second.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub session_timeout_ms: u32,
    pub max_poll_interval_ms: u32,
}

impl Default for Timing {
    fn default() -> Self {
        Timing { session_timeout_ms: 1_000, max_poll_interval_ms: 1_000 }
    }
}

/// `owner`'s command line (`kafka-lane owner`, `conformance kafka owner`).
#[derive(clap::Args, Clone, Debug)]
pub struct OwnerCli {
    /// The broker's address (HOST:PORT).
    #[arg(long)]
    pub bootstrap: String,
    /// The topic to read (it must exist: the lane never creates one implicitly).
    #[arg(long, default_value = crate::TOPIC)]
    pub topic: String,
    /// The consumer group (also the group's name in the store).
    #[arg(long)]
    pub group: String,
    /// The owner's name (`o0`, ...).
    #[arg(long)]
    pub owner: String,
    /// atomic-fenced (offset in the store, fenced by its epoch), effect-first or commit-first
    /// (offset committed to the broker).
    #[arg(long, value_parser = parse_strategy)]
    pub strategy: LaneStrategy,
    /// onceproof's SQLite store (created by the driver).
    #[arg(long)]
    pub store: PathBuf,
    /// The group's session timeout (librdkafka's `session.timeout.ms`).
    #[arg(long, default_value_t = Timing::default().session_timeout_ms)]
    pub session_timeout_ms: u32,
    /// How long an owner may go without polling before it leaves the group.
    #[arg(long, default_value_t = Timing::default().max_poll_interval_ms)]
    pub max_poll_interval_ms: u32,
    /// The load test's owner: read every assigned partition until standard input closes.
    #[arg(long)]
    pub run: bool,
    /// With `--run`, effect-first: commit after every Nth record of a partition (1: each).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub commit_every: u32,
}

fn parse_strategy(text: &str) -> Result<LaneStrategy, String> {
    LaneStrategy::parse(text).ok_or_else(|| {
        let names: Vec<&str> = LaneStrategy::ALL.iter().map(|s| s.name()).collect();
        format!("'{text}' is not a lane strategy ({})", names.join(", "))
    })
}

/// Runs an owner process as its command line says.
pub fn main(cli: OwnerCli) -> Result<(), LaneError> {
    let timing = Timing { session_timeout_ms: cli.session_timeout_ms, max_poll_interval_ms: cli.max_poll_interval_ms };
    let args = OwnerArgs {
        bootstrap: cli.bootstrap,
        topic: cli.topic,
        group: cli.group,
        owner: cli.owner,
        strategy: cli.strategy,
        store: cli.store,
        timing,
    };
    if cli.run {
        run(args, cli.commit_every)
    } else {
        serve(args)
    }
}

pub struct OwnerArgs {
    pub bootstrap: String,
    pub topic: String,
    pub group: String,
    pub owner: String,
    pub strategy: LaneStrategy,
    pub store: PathBuf,
    pub timing: Timing,
}

/// How long `join` waits for the coordinator's assignment, and `fetch` for a record.
const WAIT_MAX: Duration = Duration::from_secs(30);
/// One poll between requests: short, so that a request waits little.
const POLL_SLICE: Duration = Duration::from_millis(20);

struct Lease {
    epoch: i64,
    position: u64,
    held: BTreeMap<u64, i64>,
}

struct Owner {
    args: OwnerArgs,
    client: LaneConsumer,
    store: Store,
    subscribed: bool,
    stalled: bool,
    buffer: VecDeque<(u64, i64)>,
    lease: Option<Lease>,
}

/// Runs the owner process until `quit` or the end of its input. Never returns normally: it
/// exits without dropping the client (librdkafka's shutdown is not needed by a process about to
/// end, and a killed owner never runs it either).
pub fn serve(args: OwnerArgs) -> Result<(), LaneError> {
    let client = create_client(&args)?;
    let store = Store::open(&args.store, StoreOptions::default())?;
    let mut owner =
        Owner { args, client, store, subscribed: false, stalled: false, buffer: VecDeque::new(), lease: None };
    let requests = crate::driver::lines(std::io::stdin());
    let stdout = std::io::stdout();
    loop {
        let request = match requests.try_recv() {
            Ok(line) => line,
            Err(mpsc::TryRecvError::Empty) => {
                owner.idle();
                continue;
            }
            Err(mpsc::TryRecvError::Disconnected) => std::process::exit(0),
        };
        let parsed = serde_json::from_str::<Value>(&request);
        let quit = parsed.as_ref().is_ok_and(|r| r["op"] == json!("quit"));
        let reply = match parsed {
            Ok(request) => {
                owner.handle(&request).unwrap_or_else(|error| json!({"ok": false, "error": error.to_string()}))
            }
            Err(error) => json!({"ok": false, "error": format!("not a JSON request: {error}")}),
        };
        let mut out = stdout.lock();
        // The driver reads one line per request; a failed write means it is gone.
        if writeln!(out, "{reply}").and_then(|()| out.flush()).is_err() {
            std::process::exit(1);
        }
        if quit {
            std::process::exit(0);
        }
    }
}

impl Owner {
    /// Between requests: a member polls (heartbeats run in librdkafka's threads, but the group
    /// protocol's callbacks and `max.poll.interval.ms` need polls); a stalled one sleeps.
    fn idle(&mut self) {
        if self.subscribed && !self.stalled {
            self.poll_once(POLL_SLICE);
        } else {
            std::thread::sleep(POLL_SLICE);
        }
    }

    fn poll_once(&mut self, timeout: Duration) {
        match self.client.poll(timeout) {
            Some(Ok(message)) => {
                let delta = message
                    .payload()
                    .and_then(|p| std::str::from_utf8(p).ok())
                    .and_then(|t| t.parse::<i64>().ok())
                    .unwrap_or_else(|| {
                        panic!("the lane's records carry a decimal delta (offset {})", message.offset())
                    });
                let offset = u64::try_from(message.offset()).expect("a fetched record has an offset");
                self.buffer.push_back((offset, delta));
            }
            Some(Err(error)) => eprintln!("kafka-lane owner {}: poll: {error}", self.args.owner),
            None => {}
        }
    }

    fn handle(&mut self, request: &Value) -> Result<Value, LaneError> {
        let op = request["op"].as_str().unwrap_or("");
        let offset = request["offset"].as_u64();
        match op {
            "join" => {
                let claim = request["claim"].as_bool().unwrap_or(false);
                self.subscribe()?;
                if request["wait"] == json!(false) {
                    return Ok(json!({"ok": true}));
                }
                self.wait_assigned(claim)
            }
            "wait-assigned" => self.wait_assigned(request["claim"].as_bool().unwrap_or(false)),
            "freeze" => {
                // The application stops (a long pause, a stuck handler) while its client stays
                // a member: librdkafka's own threads go on heartbeating.
                if let Some(log_end) = request["log_end"].as_u64() {
                    self.prefetch(log_end)?;
                }
                self.stalled = true;
                Ok(json!({"ok": true}))
            }
            "fetch" => self.fetch(offset.ok_or_else(|| self.malformed(op))?),
            "effect" => self.effect(offset.ok_or_else(|| self.malformed(op))?),
            "atomic" => self.atomic(offset.ok_or_else(|| self.malformed(op))?),
            "deduped" => self.deduped(offset.ok_or_else(|| self.malformed(op))?),
            "commit" => self.commit(request["next_offset"].as_u64().ok_or_else(|| self.malformed(op))?),
            "stall" => self.stall(request["log_end"].as_u64().ok_or_else(|| self.malformed(op))?),
            "quit" => Ok(json!({"ok": true})),
            other => {
                Err(LaneError::Owner { owner: self.args.owner.clone(), detail: format!("unknown request '{other}'") })
            }
        }
    }

    /// The owner's client leaves the group (an unsubscribe: the coordinator hands the partition
    /// on at once), and the owner stops polling but keeps its lease and whatever it polled: the
    /// application goes on with records its client no longer owns, a zombie.
    fn stall(&mut self, log_end: u64) -> Result<Value, LaneError> {
        self.prefetch(log_end)?;
        if self.subscribed {
            self.client.unsubscribe();
            self.subscribed = false;
            let started = Instant::now();
            // The revoke runs in a poll; records a poll returns now were fetched before it.
            while self.client.assignment().is_ok_and(|list| list.count() > 0) {
                if started.elapsed() > WAIT_MAX {
                    return Err(self.fail(format!("still assigned {WAIT_MAX:?} after leaving the group")));
                }
                self.poll_once(POLL_SLICE);
            }
        }
        self.stalled = true;
        Ok(json!({"ok": true}))
    }

    /// Polls what the log holds below `log_end`, as a client's prefetch would have it: so which
    /// records a zombie or a frozen owner holds depends on the trace, not on timing.
    fn prefetch(&mut self, log_end: u64) -> Result<(), LaneError> {
        let started = Instant::now();
        let position = self.lease.as_ref().map(|lease| lease.position);
        while let Some(position) = position {
            let polled_to = self.buffer.back().map_or(position, |&(offset, _)| offset + 1);
            if polled_to >= log_end || !self.subscribed {
                break;
            }
            if started.elapsed() > WAIT_MAX {
                return Err(self.fail(format!("records up to {log_end} not polled within {WAIT_MAX:?}")));
            }
            self.poll_once(POLL_SLICE);
        }
        Ok(())
    }

    fn malformed(&self, op: &str) -> LaneError {
        LaneError::Owner { owner: self.args.owner.clone(), detail: format!("request '{op}' lacks its offset") }
    }

    fn fail(&self, detail: String) -> LaneError {
        LaneError::Owner { owner: self.args.owner.clone(), detail }
    }

    /// Joins the group (again): a fresh start, its lease and what it polled dropped.
    fn subscribe(&mut self) -> Result<(), LaneError> {
        self.stalled = false;
        self.buffer.clear();
        self.lease = None;
        if !self.subscribed {
            self.client.subscribe(&[self.args.topic.as_str()]).map_err(|e| self.fail(format!("subscribe: {e}")))?;
            self.subscribed = true;
        }
        Ok(())
    }

    /// Waits until the coordinator assigns partition 0, then takes the lease.
    fn wait_assigned(&mut self, claim: bool) -> Result<Value, LaneError> {
        let started = Instant::now();
        while !self.assigned() {
            if started.elapsed() > WAIT_MAX {
                return Err(self.fail(format!("not assigned partition 0 within {WAIT_MAX:?}")));
            }
            self.poll_once(POLL_SLICE);
        }
        let (group, owner) = (self.args.group.clone(), self.args.owner.clone());
        let (epoch, position) = if self.args.strategy.broker_committed() {
            let committed = self.client.committed(WAIT_MAX).map_err(|e| self.fail(format!("committed: {e}")))?;
            let next = match committed.find_partition(&self.args.topic, 0).map(|e| e.offset()) {
                Some(Offset::Offset(next)) => u64::try_from(next).expect("a committed offset is not negative"),
                _ => 0,
            };
            (0, next)
        } else if claim {
            let epoch = self.store.claim(&group, 0, &owner)?;
            (epoch, self.store.progress(&group, 0)?.next_offset)
        } else {
            let row = self.store.progress(&group, 0)?;
            (row.epoch, row.next_offset)
        };
        // Records polled before the lease starts are below its position or re-read: dropped.
        self.buffer.retain(|&(offset, _)| offset >= position);
        self.lease = Some(Lease { epoch, position, held: BTreeMap::new() });
        Ok(json!({"ok": true, "epoch": epoch, "position": position}))
    }

    fn assigned(&self) -> bool {
        self.client.assignment().is_ok_and(|list| list.find_partition(&self.args.topic, 0).is_some())
    }

    fn fetch(&mut self, offset: u64) -> Result<Value, LaneError> {
        let started = Instant::now();
        loop {
            while let Some(&(next, delta)) = self.buffer.front() {
                if next < offset {
                    self.buffer.pop_front();
                    continue;
                }
                if next > offset {
                    return Err(self.fail(format!("fetch {offset}: the client returned offset {next} first")));
                }
                if self.lease.is_none() {
                    return Err(self.fail(format!("fetch {offset} without a lease")));
                }
                self.buffer.pop_front();
                let lease = self.lease.as_mut().expect("checked above");
                lease.held.insert(offset, delta);
                lease.position = offset + 1;
                return Ok(json!({"ok": true, "delta": delta}));
            }
            if self.stalled {
                // A zombie has only what it polled before its client left the group (the
                // driver never asks it for more).
                return Err(
                    self.fail(format!("fetch {offset}: a stalled owner did not poll it before it left the group"))
                );
            }
            if started.elapsed() > WAIT_MAX {
                return Err(self.fail(format!("fetch {offset}: no record within {WAIT_MAX:?}")));
            }
            self.poll_once(POLL_SLICE);
        }
    }

    fn held(&self, offset: u64) -> Result<(i64, i64), LaneError> {
        let lease = self.lease.as_ref().ok_or_else(|| self.fail(format!("offset {offset}: no lease")))?;
        let delta = lease.held.get(&offset).ok_or_else(|| self.fail(format!("offset {offset} is not held")))?;
        Ok((*delta, lease.epoch))
    }

    fn effect(&mut self, offset: u64) -> Result<Value, LaneError> {
        let (delta, _) = self.held(offset)?;
        let group = self.args.group.clone();
        self.store.add_effect(&group, 0, &[Item { offset, delta }], (false, EffectKind::Add), &mut || {})?;
        if self.args.strategy == LaneStrategy::CommitFirst {
            self.lease.as_mut().expect("held checked the lease").held.remove(&offset);
        }
        Ok(json!({"ok": true, "outcome": "applied"}))
    }

    fn atomic(&mut self, offset: u64) -> Result<Value, LaneError> {
        let (delta, epoch) = self.held(offset)?;
        let group = self.args.group.clone();
        let items = [Item { offset, delta }];
        let guard = match self.args.strategy {
            LaneStrategy::AtomicFenced => Guard::Fenced { epoch },
            LaneStrategy::AtomicCas => Guard::Cas,
            LaneStrategy::DedupAtomic | LaneStrategy::EffectFirst | LaneStrategy::CommitFirst => {
                return Err(self.fail(format!("apply-atomic is no step of {}", self.args.strategy.name())))
            }
        };
        let written = self.store.apply_atomic(&group, 0, &items, (guard, AtomicAlso::Nothing), &mut || {});
        match written {
            Ok(_) => {
                self.lease.as_mut().expect("held checked the lease").held.remove(&offset);
                Ok(json!({"ok": true, "outcome": "applied"}))
            }
            Err(StoreError::Fenced { .. }) => {
                // Fenced out: the owner drops the partition, as the model's `fence` does.
                self.lease = None;
                Ok(json!({"ok": true, "outcome": "fenced"}))
            }
            Err(error) => Err(error.into()),
        }
    }

    /// dedup-atomic's transaction: the effect unless the record's id is processed, and the id.
    fn deduped(&mut self, offset: u64) -> Result<Value, LaneError> {
        let (delta, _) = self.held(offset)?;
        let group = self.args.group.clone();
        let applied =
            self.store.apply_deduped(&group, 0, &[Item { offset, delta }], DedupKey::PartitionOffset, &mut || {})?;
        let outcome = if applied.first() == Some(&true) { "applied" } else { "skipped" };
        Ok(json!({"ok": true, "outcome": outcome}))
    }

    fn commit(&mut self, next_offset: u64) -> Result<Value, LaneError> {
        if !self.args.strategy.broker_committed() {
            // dedup-atomic: the next offset in the store, blind, as the model's row writes it.
            let group = self.args.group.clone();
            self.store.commit_offset(&group, 0, None, next_offset, &mut || {})?;
            if let Some(lease) = self.lease.as_mut() {
                lease.held.remove(&next_offset.saturating_sub(1));
            }
            return Ok(json!({"ok": true, "outcome": "committed"}));
        }
        let mut list = TopicPartitionList::new();
        let offset = i64::try_from(next_offset).map_err(|_| self.fail(format!("next offset {next_offset}")))?;
        list.add_partition_offset(&self.args.topic, 0, Offset::Offset(offset))
            .map_err(|e| self.fail(format!("commit list: {e}")))?;
        match self.client.commit(&list, CommitMode::Sync) {
            Ok(()) => {
                // Effect-first's record is done once committed; commit-first's effect is next.
                if self.args.strategy == LaneStrategy::EffectFirst {
                    if let Some(lease) = self.lease.as_mut() {
                        lease.held.remove(&next_offset.saturating_sub(1));
                    }
                }
                Ok(json!({"ok": true, "outcome": "committed"}))
            }
            Err(error) => Ok(json!({"ok": true, "outcome": "refused", "detail": error.to_string()})),
        }
    }
}

/// The load test's owner (`kafka-lane owner --run`): it reads every partition the coordinator
/// assigns it, without requests, until its standard input closes (then it leaves the group) or
/// it is killed. Each assignment and each offset commit is printed as one JSON line.
pub fn run(args: OwnerArgs, commit_every: u32) -> Result<(), LaneError> {
    match args.strategy {
        LaneStrategy::AtomicFenced | LaneStrategy::EffectFirst => {}
        other @ (LaneStrategy::AtomicCas | LaneStrategy::DedupAtomic | LaneStrategy::CommitFirst) => {
            let detail = format!("--run reads with atomic-fenced or effect-first, not {}", other.name());
            return Err(LaneError::Owner { owner: args.owner.clone(), detail });
        }
    }
    let client = create_client(&args)?;
    let mut store = Store::open(&args.store, StoreOptions::default())?;
    client
        .subscribe(&[args.topic.as_str()])
        .map_err(|e| LaneError::Owner { owner: args.owner.clone(), detail: format!("subscribe: {e}") })?;
    let closed = crate::driver::lines(std::io::stdin());
    // Per partition: the lease's epoch and position (atomic-fenced) or nothing (effect-first).
    let mut leases: BTreeMap<i32, (i64, u64)> = BTreeMap::new();
    loop {
        if matches!(closed.try_recv(), Err(mpsc::TryRecvError::Disconnected)) {
            client.unsubscribe();
            std::process::exit(0);
        }
        let polled = client.poll(Duration::from_millis(50));
        let assigned: Vec<i32> = client
            .assignment()
            .map(|list| list.elements().iter().filter(|e| e.topic() == args.topic).map(|e| e.partition()).collect())
            .unwrap_or_default();
        let revoked: Vec<i32> = leases.keys().copied().filter(|p| !assigned.contains(p)).collect();
        for p in revoked {
            leases.remove(&p);
            event(&args, json!({"event": "revoked", "partition": p}));
        }
        for &p in &assigned {
            if leases.contains_key(&p) {
                continue;
            }
            let partition = u32::try_from(p).expect("a partition number is not negative");
            let lease = match args.strategy {
                LaneStrategy::AtomicFenced => {
                    let epoch = store.claim(&args.group, partition, &args.owner)?;
                    (epoch, store.progress(&args.group, partition)?.next_offset)
                }
                LaneStrategy::EffectFirst => (0, 0),
                LaneStrategy::AtomicCas | LaneStrategy::DedupAtomic | LaneStrategy::CommitFirst => {
                    unreachable!("run() refuses it at its start")
                }
            };
            leases.insert(p, lease);
            let line = match args.strategy {
                LaneStrategy::AtomicFenced => {
                    json!({"event": "assigned", "partition": p, "epoch": lease.0, "position": lease.1})
                }
                // The client starts from the broker's committed offset; the owner keeps no lease.
                _ => json!({"event": "assigned", "partition": p}),
            };
            event(&args, line);
        }
        let Some(Ok(message)) = polled else { continue };
        let p = message.partition();
        let offset = u64::try_from(message.offset()).expect("a fetched record has an offset");
        let delta: i64 =
            message.payload().and_then(|b| std::str::from_utf8(b).ok()).and_then(|t| t.parse().ok()).unwrap_or(0);
        let Some(&(epoch, position)) = leases.get(&p) else { continue };
        let partition = u32::try_from(p).expect("not negative");
        let items = [Item { offset, delta }];
        match args.strategy {
            LaneStrategy::AtomicFenced => {
                if offset < position {
                    continue;
                }
                let guard = (Guard::Fenced { epoch }, AtomicAlso::Nothing);
                match store.apply_atomic(&args.group, partition, &items, guard, &mut || {}) {
                    Ok(_) => {
                        leases.insert(p, (epoch, offset + 1));
                    }
                    Err(StoreError::Fenced { .. }) => {
                        event(&args, json!({"event": "fenced", "partition": p, "offset": offset}));
                        leases.remove(&p);
                    }
                    Err(error) => return Err(error.into()),
                }
            }
            LaneStrategy::AtomicCas | LaneStrategy::DedupAtomic | LaneStrategy::CommitFirst => {
                unreachable!("run() refuses it at its start")
            }
            LaneStrategy::EffectFirst => {
                store.add_effect(&args.group, partition, &items, (false, EffectKind::Add), &mut || {})?;
                if !(offset + 1).is_multiple_of(u64::from(commit_every)) {
                    continue;
                }
                let mut list = TopicPartitionList::new();
                let next = i64::try_from(offset + 1).expect("small offsets");
                list.add_partition_offset(&args.topic, p, Offset::Offset(next)).expect("a valid offset");
                let result = match client.commit(&list, CommitMode::Sync) {
                    Ok(()) => "ok".to_string(),
                    Err(error) => error.to_string(),
                };
                event(&args, json!({"event": "commit", "partition": p, "next_offset": offset + 1, "result": result}));
            }
        }
    }
}

fn event(args: &OwnerArgs, mut line: Value) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or(0);
    line["t_us"] = json!(u64::try_from(now).unwrap_or(u64::MAX));
    line["owner"] = json!(args.owner);
    let mut out = std::io::stdout().lock();
    // The load harness reads these lines; a failed write means it is gone.
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(1);
    }
}

/// The owners' client context: librdkafka's log lines go to standard error (rdkafka's default
/// sends them to the `log` crate, which nothing here prints).
pub struct LaneContext {
    owner: String,
}

impl rdkafka::ClientContext for LaneContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
        eprintln!("kafka-lane owner {} librdkafka {level:?} {facility}: {message}", self.owner);
    }
}

impl rdkafka::consumer::ConsumerContext for LaneContext {}

type LaneConsumer = BaseConsumer<LaneContext>;

fn create_client(args: &OwnerArgs) -> Result<LaneConsumer, LaneError> {
    let mut config = ClientConfig::new();
    // librdkafka's own debug contexts (`cgrp,protocol`, ...), on standard error, for a human
    // following a replay.
    if let Ok(contexts) = std::env::var("ONCEPROOF_KAFKA_DEBUG") {
        config.set("debug", contexts).set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
    }
    config
        .set("bootstrap.servers", &args.bootstrap)
        .set("group.id", &args.group)
        .set("client.id", format!("{}-{}", args.group, args.owner))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", args.timing.session_timeout_ms.to_string())
        .set("heartbeat.interval.ms", (args.timing.session_timeout_ms / 4).max(1).to_string())
        .set("max.poll.interval.ms", args.timing.max_poll_interval_ms.to_string())
        .create_with_context(LaneContext { owner: args.owner.clone() })
        .map_err(|e| LaneError::Client { operation: "create the owner's consumer".into(), detail: e.to_string() })
}
