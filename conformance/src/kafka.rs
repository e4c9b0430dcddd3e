//! The Kafka-protocol lane's replay (feature `kafka`): a model trace of an atomic-fenced,
//! atomic-cas, dedup-atomic, effect-first, commit-first or broker row replayed step by step
//! against owner processes that read an in-process nisshi-broker through rdkafka, with the
//! broker's group coordinator making every assignment. After every step the store (and, for the broker-committed rows, the broker's
//! committed offset) is compared with the model's state.
//!
//! How model steps become broker steps (docs/kafka-lane.md says why):
//! - `append`: a record produced through the client; `fetch`: the owner's next polled record.
//! - `crash`: SIGKILL of the owner's process; `restart`: a new process, which joins the group
//!   when the model gives it the partition (its session ends the dead member's).
//! - `rebalance` and `pause`: the partition's member polls what the log holds, then its client
//!   leaves the group (an unsubscribe) while the owner keeps its lease and those records (a
//!   zombie: the application goes on with records its client no longer owns); then the new
//!   owner joins and the coordinator assigns it the partition. Only one process of a group is a
//!   member at a time, so that the coordinator's assignment is the model's.
//! - broker-relaxed's `rebalance` (a forming coordinator): the member polls what the log holds
//!   and freezes (it stops polling, its client still a member), and the new owner's JoinGroup
//!   begins the forming; the replay goes on once the group left its stable state. Its `sync`:
//!   the new owner waits for its assignment, which nisshi-broker gives only once the frozen
//!   member's session ended, so a trace must crash the old owner first.
//!
//! Steps the real coordinator cannot be driven into deterministically end a replay as
//! `LeftOut`, named: a rebalance to a crashed owner (the coordinator assigns live members
//! only), a zombie's fetch of a record appended after its client left the group (a poll would
//! rejoin it), a frozen owner's fetch of a record appended after it froze, a sync while the
//! replaced member is still in the group, a restart or a pause while a group forms (either
//! member could be assigned), and every step of rows outside the lane.

use kafka_lane::broker::Broker;
use kafka_lane::client::{Clients, UNLISTED};
use kafka_lane::driver::{create_store, Lane, OwnerProcess};
use kafka_lane::error::LaneError;
use kafka_lane::owner::{LaneStrategy, Timing};
use model::action::Action;
use model::config::Config;
use model::state::State;
use model::strategy::{Coordinator, Strategy};
use model::trace::Trace;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// How long a forming rebalance may take to leave the group's stable state after the new
/// owner's JoinGroup (the coordinator answers within half a session).
const FORMING_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// How a replay on the broker ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaneVerdict {
    /// Every step ran and every state agreed with the model's.
    Conforms,
    /// The broker refused a zombie's offset commit that the model's row lets land: the
    /// broker's generation check, which that row (effect-first, commit-first: an offset table
    /// of the consumer's own) does not have; the broker rows do. Replay stops there.
    BrokerFenced { step: usize, detail: String },
    /// A step the lane cannot drive (see the module's comment); nothing after it ran.
    LeftOut { step: usize, reason: String },
    /// The real system and the model disagree.
    Diverged { step: usize, detail: String },
}

pub struct LaneReport {
    pub verdict: LaneVerdict,
    /// Steps run (and compared) before the verdict.
    pub steps_run: usize,
    pub seconds: f64,
}

/// The lane's strategy for a model row, if the row is on the lane.
pub fn lane_strategy(strategy: Strategy) -> Option<LaneStrategy> {
    match strategy {
        Strategy::AtomicFenced => Some(LaneStrategy::AtomicFenced),
        Strategy::AtomicCas => Some(LaneStrategy::AtomicCas),
        Strategy::DedupAtomic => Some(LaneStrategy::DedupAtomic),
        Strategy::EffectFirst => Some(LaneStrategy::EffectFirst),
        Strategy::CommitFirst => Some(LaneStrategy::CommitFirst),
        // The broker's generation check is the lane's own: these rows model it.
        Strategy::BrokerEffectFirst => Some(LaneStrategy::EffectFirst),
        Strategy::BrokerCommitFirst => Some(LaneStrategy::CommitFirst),
        Strategy::BrokerRelaxed => Some(LaneStrategy::EffectFirst),
        Strategy::PeriodicCommit
        | Strategy::OffsetStamp
        | Strategy::DedupSeparate
        | Strategy::Atomic
        | Strategy::ParallelMax
        | Strategy::ParallelWatermark
        | Strategy::AtomicDlq
        | Strategy::SkipPoison
        | Strategy::RetryForever
        | Strategy::ProducerIdempotent
        | Strategy::ProducerNewSequence
        | Strategy::ResetEarliest
        | Strategy::ResetSilent
        | Strategy::ResetFail
        | Strategy::FencedStoredEpoch
        | Strategy::LogLossRefuse
        | Strategy::LogLossUnchecked
        | Strategy::LogLossRefuseAll
        | Strategy::AcksLeader
        | Strategy::AcksAll
        | Strategy::AcksAllMinIsr1
        | Strategy::AcksAllMinIsr1Clean
        | Strategy::TxnFenced
        | Strategy::TxnUnfenced
        | Strategy::TxnReadUncommitted
        | Strategy::AtomicPlusEmail
        | Strategy::EmailIdempotencyKey
        | Strategy::EmailNoKey
        | Strategy::BlindSet
        | Strategy::SetIfNewer
        | Strategy::DedupOffsetOnly
        | Strategy::DualWrite
        | Strategy::Outbox => None,
    }
}

/// One broker for a run of replays; each trace gets its own topic, groups and store.
pub struct LaneSession {
    broker: Option<Broker>,
    clients: Option<Clients>,
    program: PathBuf,
    program_args: Vec<String>,
    dir: PathBuf,
    timing: Timing,
    replays: usize,
}

impl LaneSession {
    /// Starts a broker on a free loopback port; each trace's store goes under `dir`; the owners
    /// run `program` with `program_args` before `owner` (`conformance kafka owner`).
    pub fn start(program: &Path, program_args: &[&str], dir: &Path) -> Result<LaneSession, LaneError> {
        let listen: SocketAddr = "127.0.0.1:0".parse().expect("a literal address");
        let broker = Broker::start(listen)?;
        let clients = Clients::connect(&broker.bootstrap())?;
        Ok(LaneSession {
            broker: Some(broker),
            clients: Some(clients),
            program: program.to_path_buf(),
            program_args: program_args.iter().map(|a| a.to_string()).collect(),
            dir: dir.to_path_buf(),
            timing: Timing::default(),
            replays: 0,
        })
    }

    pub fn bootstrap(&self) -> String {
        self.broker.as_ref().expect("running").bootstrap()
    }

    /// Stops the broker (the clients end with the process: `Clients::leak`).
    pub fn stop(mut self) -> Result<(), LaneError> {
        if let Some(clients) = self.clients.take() {
            clients.leak();
        }
        self.broker.take().expect("running").stop()
    }

    /// Replays `trace` on the broker.
    pub fn replay(&mut self, trace: &Trace) -> Result<LaneReport, LaneError> {
        let started = Instant::now();
        self.replays += 1;
        let verdict_of =
            |verdict, steps_run| LaneReport { verdict, steps_run, seconds: started.elapsed().as_secs_f64() };
        let Some(strategy) = lane_strategy(trace.config.strategy) else {
            let reason = format!("the row {} is not on the lane", trace.config.strategy.name());
            return Ok(verdict_of(LaneVerdict::LeftOut { step: 0, reason }, 0));
        };
        if let Some((step, reason)) = undrivable(&trace.config, &trace.actions) {
            return Ok(verdict_of(LaneVerdict::LeftOut { step, reason }, 0));
        }
        let run = self.dir.join(format!("trace-{}", self.replays));
        std::fs::create_dir_all(&run).map_err(|error| LaneError::Io { what: run.display().to_string(), error })?;
        let topic = format!("onceproof-{}", self.replays);
        self.clients.as_ref().expect("running").create_topic(&topic, 1)?;
        let names: Vec<String> = (0..trace.config.groups).map(|g| format!("t{}-g{g}", self.replays)).collect();
        let store = run.join("store.db");
        let rows: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "o0")).collect();
        create_store(&store, &rows)?;
        let lane = Lane {
            program: self.program.clone(),
            program_args: self.program_args.clone(),
            bootstrap: self.bootstrap(),
            topic,
            store,
            strategy,
            timing: self.timing,
        };
        let mut replay = Replay {
            lane,
            names,
            coordinator: trace.config.strategy.rules().coordinator,
            processes: BTreeMap::new(),
            member: BTreeMap::new(),
            log_end: 0,
            stalled: BTreeMap::new(),
            frozen: BTreeMap::new(),
            forming: BTreeMap::new(),
        };
        let mut state = State::initial(&trace.config);
        for (index, &action) in trace.actions.iter().enumerate() {
            let step = index + 1;
            let mut enabled = Vec::new();
            model::step::enabled_actions(&trace.config, &state, &mut enabled);
            if !enabled.contains(&action) {
                let detail = format!("{action:?} is not enabled in the model");
                return Ok(verdict_of(LaneVerdict::Diverged { step, detail }, index));
            }
            let next = model::step::next_state(&trace.config, &state, action);
            let clients = self.clients.as_mut().expect("running");
            if let Some(verdict) = replay.step(clients, step, action, &state, &next)? {
                return Ok(verdict_of(verdict, index));
            }
            if let Some(detail) = replay.compare(clients, &next)? {
                return Ok(verdict_of(LaneVerdict::Diverged { step, detail }, step));
            }
            state = next;
        }
        Ok(verdict_of(LaneVerdict::Conforms, trace.actions.len()))
    }
}

/// The first step the lane cannot run, by kind (before anything starts).
fn undrivable(config: &Config, actions: &[Action]) -> Option<(usize, String)> {
    if config.partitions != 1 {
        return Some((0, format!("{} partitions (the lane's owners read one)", config.partitions)));
    }
    actions.iter().enumerate().find_map(|(index, action)| {
        let supported = matches!(
            action,
            Action::Append { .. }
                | Action::Fetch { .. }
                | Action::ApplyEffect { .. }
                | Action::ApplyAtomic { .. }
                | Action::ApplyDeduped { .. }
                | Action::CommitOffset { .. }
                | Action::Crash { .. }
                | Action::Restart { .. }
                | Action::Rebalance { .. }
                | Action::Sync { .. }
                | Action::Pause { .. }
        );
        (!supported).then(|| (index + 1, format!("{action:?} is not a step of the lane")))
    })
}

struct Replay {
    lane: Lane,
    /// The groups' names on the broker and in the store (unique per trace).
    names: Vec<String>,
    /// The running owner processes by (group, model slot).
    processes: BTreeMap<(u8, u8), OwnerProcess>,
    /// Per group, the slot whose process is the group's polling member.
    member: BTreeMap<u8, u8>,
    /// Records appended so far (the lane's partition's end).
    log_end: u64,
    /// The zombies: per (group, slot), the log's end when its client left the group; it holds
    /// the records below it that its lease had not fetched yet.
    stalled: BTreeMap<(u8, u8), u64>,
    /// How the model's coordinator moves a partition: at once, or forming until a sync.
    coordinator: Coordinator,
    /// A forming coordinator's old members: per (group, slot), the log's end when it froze (it
    /// stopped polling, its client still a member).
    frozen: BTreeMap<(u8, u8), u64>,
    /// Per forming group, the slot whose JoinGroup began the forming.
    forming: BTreeMap<u8, u8>,
}

impl Replay {
    /// Starts a group's owners the first time a step touches it: the model's owner of the
    /// partition joins with the stored epoch, the others wait outside the group.
    fn touch(&mut self, group: u8, before: &State) -> Result<(), LaneError> {
        if self.processes.keys().any(|&(g, _)| g == group) {
            return Ok(());
        }
        let owners = &before.groups[usize::from(group)].owners;
        for (slot, owner) in owners.iter().enumerate() {
            let slot = u8::try_from(slot).expect("few owners");
            if !owner.alive {
                continue;
            }
            let mut process = OwnerProcess::start(&self.lane, &self.names[usize::from(group)], &format!("o{slot}"))?;
            if owner.leases.first().is_some_and(|lease| lease.is_some()) {
                process.expect(json!({"op": "join", "claim": false}))?;
                self.member.insert(group, slot);
            }
            self.processes.insert((group, slot), process);
        }
        Ok(())
    }

    fn process(&mut self, group: u8, slot: u8) -> Result<&mut OwnerProcess, LaneError> {
        let name = format!("{}/o{slot}", self.names[usize::from(group)]);
        self.processes
            .get_mut(&(group, slot))
            .ok_or_else(|| LaneError::Owner { owner: name, detail: "no running process".into() })
    }

    /// Stops the group's polling member, if any: it becomes a zombie that keeps its lease.
    fn stall_member(&mut self, group: u8) -> Result<(), LaneError> {
        if let Some(slot) = self.member.remove(&group) {
            if let Some(process) = self.processes.get_mut(&(group, slot)) {
                process.expect(json!({"op": "stall", "log_end": self.log_end}))?;
                self.stalled.insert((group, slot), self.log_end);
            }
        }
        Ok(())
    }

    /// A forming coordinator's rebalance: the group's member freezes (it stops polling, its
    /// client still in the group), then the new owner's JoinGroup begins the forming; returns
    /// once the coordinator left its stable state, so that what the old member commits next
    /// falls while the group forms.
    fn begin_forming(&mut self, clients: &mut Clients, group: u8, to_owner: u8) -> Result<(), LaneError> {
        let name = self.names[usize::from(group)].clone();
        let (stable, _) = clients.group_state(&name)?;
        let old = self.member.remove(&group);
        if let Some(slot) = old {
            let log_end = self.log_end;
            self.process(group, slot)?.expect(json!({"op": "freeze", "log_end": log_end}))?;
            self.frozen.insert((group, slot), log_end);
        }
        self.process(group, to_owner)?.expect(json!({"op": "join", "claim": false, "wait": false}))?;
        self.forming.insert(group, to_owner);
        // nisshi-broker 0.6.0 lists only groups with a committed offset, so the forming of a
        // group with none cannot be seen. Nothing the replay compares depends on it: the old
        // member's next commit lands either way, by its current generation while the group is
        // stable and by the relaxed rule once it forms.
        if old.is_none() || stable == UNLISTED {
            return Ok(());
        }
        let started = Instant::now();
        while clients.group_state(&name)?.0 == stable {
            if started.elapsed() > FORMING_WAIT {
                let detail = format!("{name} still {stable} {FORMING_WAIT:?} after o{to_owner} joined");
                return Err(LaneError::Owner { owner: format!("{name}/o{to_owner}"), detail });
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ok(())
    }

    fn join(&mut self, group: u8, slot: u8) -> Result<(), LaneError> {
        self.process(group, slot)?.expect(json!({"op": "join", "claim": true}))?;
        self.stalled.remove(&(group, slot));
        self.member.insert(group, slot);
        Ok(())
    }

    /// Runs one step; `Some` ends the replay.
    fn step(
        &mut self,
        clients: &mut Clients,
        step: usize,
        action: Action,
        before: &State,
        next: &State,
    ) -> Result<Option<LaneVerdict>, LaneError> {
        if let Some(group) = action.group() {
            self.touch(group, before)?;
        }
        match action {
            Action::Append { partition, delta } => {
                clients.produce(&self.lane.topic, i32::from(partition), delta)?;
                self.log_end += 1;
            }
            Action::Fetch { group, owner, offset, .. } => {
                if let Some(&end) = self.frozen.get(&(group, owner)) {
                    if u64::from(offset) >= end {
                        let reason = format!(
                            "a frozen owner's fetch of offset {offset}, appended after it froze (a poll would end the freeze)"
                        );
                        return Ok(Some(LaneVerdict::LeftOut { step, reason }));
                    }
                }
                if let Some(&end) = self.stalled.get(&(group, owner)) {
                    if u64::from(offset) >= end {
                        let reason = format!(
                            "a zombie's fetch of offset {offset}, appended after its client left the group (which a poll would rejoin)"
                        );
                        return Ok(Some(LaneVerdict::LeftOut { step, reason }));
                    }
                }
                let reply = self.process(group, owner)?.request(json!({"op": "fetch", "offset": offset}))?;
                self.ok(group, owner, &reply)?;
            }
            Action::ApplyEffect { group, owner, offset, .. } => {
                self.process(group, owner)?.expect(json!({"op": "effect", "offset": offset}))?;
            }
            Action::ApplyAtomic { group, owner, offset, .. } => {
                self.process(group, owner)?.expect(json!({"op": "atomic", "offset": offset}))?;
            }
            Action::ApplyDeduped { group, owner, offset, .. } => {
                self.process(group, owner)?.expect(json!({"op": "deduped", "offset": offset}))?;
            }
            Action::CommitOffset { group, owner, partition, next_offset } => {
                let reply = self.process(group, owner)?.expect(json!({"op": "commit", "next_offset": next_offset}))?;
                let refused = reply["outcome"] == json!("refused");
                let detail = reply["detail"].as_str().unwrap_or("").to_string();
                let g = &before.groups[usize::from(group)];
                let lease = g.slot(owner).leases[usize::from(partition)].as_ref();
                let stale = lease.is_some_and(|l| l.epoch != g.store.partitions[usize::from(partition)].epoch);
                // The broker rows' model fences the stale commit: the owner drops its lease.
                let model_fenced = next.groups[usize::from(group)].slot(owner).leases[usize::from(partition)].is_none();
                let verdict = match (refused, stale, model_fenced) {
                    (true, true, true) | (false, _, false) => None,
                    (true, true, false) => Some(LaneVerdict::BrokerFenced {
                        step,
                        detail: format!("a zombie's commit of {next_offset}: {detail}"),
                    }),
                    (true, false, _) => Some(LaneVerdict::Diverged {
                        step,
                        detail: format!("the broker refused the owner's commit: {detail}"),
                    }),
                    (false, _, true) => Some(LaneVerdict::Diverged {
                        step,
                        detail: format!("the broker accepted a commit of {next_offset} that the model's row fences"),
                    }),
                };
                if verdict.is_some() {
                    return Ok(verdict);
                }
            }
            Action::Crash { group, owner } => {
                if self.member.get(&group) == Some(&owner) {
                    self.member.remove(&group);
                }
                self.stalled.remove(&(group, owner));
                self.frozen.remove(&(group, owner));
                if let Some(process) = self.processes.remove(&(group, owner)) {
                    process.kill();
                }
            }
            Action::Restart { group, owner } | Action::Pause { group, owner } if self.forming.contains_key(&group) => {
                let reason = format!(
                    "{action:?} while the group forms: the coordinator may assign the partition to g{group}/o{owner} or to \
                     the member that joined first"
                );
                return Ok(Some(LaneVerdict::LeftOut { step, reason }));
            }
            Action::Restart { group, owner } => {
                let process = OwnerProcess::start(&self.lane, &self.names[usize::from(group)], &format!("o{owner}"))?;
                self.processes.insert((group, owner), process);
                if owns(next, group, owner) {
                    self.join(group, owner)?;
                }
            }
            Action::Rebalance { group, to_owner, .. } => {
                if !next.groups[usize::from(group)].slot(to_owner).alive {
                    let reason =
                        format!("a rebalance to o{to_owner}, which is down: the coordinator assigns live members only");
                    return Ok(Some(LaneVerdict::LeftOut { step, reason }));
                }
                match self.coordinator {
                    Coordinator::Atomic => {
                        self.stall_member(group)?;
                        self.join(group, to_owner)?;
                    }
                    Coordinator::Forming => self.begin_forming(clients, group, to_owner)?,
                }
            }
            Action::Sync { group, partition } => {
                let to_owner = self.forming.remove(&group).expect("the model syncs a forming group only");
                if let Some((&(_, slot), _)) = self.frozen.iter().find(|((g, _), _)| *g == group) {
                    let reason = format!(
                        "the group forms while o{slot}, the member it replaces, is still in it: nisshi-broker 0.6.0 \
                         forms the group only once that member's session ends (a kill)"
                    );
                    return Ok(Some(LaneVerdict::LeftOut { step, reason }));
                }
                if !self.processes.contains_key(&(group, to_owner)) {
                    return Ok(None);
                }
                let reply = self.process(group, to_owner)?.expect(json!({"op": "wait-assigned", "claim": false}))?;
                self.member.insert(group, to_owner);
                let lease = next.groups[usize::from(group)].slot(to_owner).leases[usize::from(partition)].as_ref();
                let position = reply["position"].as_u64();
                if position != lease.map(|lease| u64::from(lease.position)) {
                    let detail =
                        format!("o{to_owner} was assigned at offset {position:?}, the model's lease {lease:?}");
                    return Ok(Some(LaneVerdict::Diverged { step, detail }));
                }
            }
            Action::Pause { group, owner } => {
                let g = &next.groups[usize::from(group)];
                let current = u8::try_from(g.owners.len()).expect("few owners");
                let paused = g.paused.iter().enumerate().find(|(i, slot)| {
                    slot.incarnation_of == Some(owner)
                        && before.groups[usize::from(group)].paused[*i].incarnation_of.is_none()
                });
                let slot = current + u8::try_from(paused.expect("a pause fills a paused slot").0).expect("few slots");
                if self.member.get(&group) == Some(&owner) {
                    self.stall_member(group)?;
                }
                if let Some(process) = self.processes.remove(&(group, owner)) {
                    self.processes.insert((group, slot), process);
                }
                if let Some(end) = self.stalled.remove(&(group, owner)) {
                    self.stalled.insert((group, slot), end);
                }
                let process = OwnerProcess::start(&self.lane, &self.names[usize::from(group)], &format!("o{owner}"))?;
                self.processes.insert((group, owner), process);
                if owns(next, group, owner) {
                    self.join(group, owner)?;
                }
            }
            other => unreachable!("undrivable() refuses {other:?} before the replay starts"),
        }
        Ok(None)
    }

    fn ok(&self, group: u8, owner: u8, reply: &Value) -> Result<(), LaneError> {
        if reply["ok"] == json!(true) {
            return Ok(());
        }
        let name = format!("{}/o{owner}", self.names[usize::from(group)]);
        Err(LaneError::Owner { owner: name, detail: reply["error"].to_string() })
    }

    /// The first difference between the real groups and the model's, in words.
    fn compare(&self, clients: &mut Clients, next: &State) -> Result<Option<String>, LaneError> {
        let store = consumer::store::Store::open(&self.lane.store, consumer::store::StoreOptions::default())?;
        for (g, group) in next.groups.iter().enumerate() {
            let name = &self.names[g];
            let total = store.total(name)?;
            if total != group.store.total {
                return Ok(Some(format!("{name}: the store's total is {total}, the model's {}", group.store.total)));
            }
            let row = &group.store.partitions[0];
            if self.lane.strategy.broker_committed() {
                let committed = clients.committed(&self.lane.topic, name, 0)?.unwrap_or(0);
                if committed != u64::from(row.next_offset) {
                    let model = row.next_offset;
                    return Ok(Some(format!(
                        "{name}: the broker's committed offset is {committed}, the model's {model}"
                    )));
                }
                continue;
            }
            let real = store.progress(name, 0)?;
            let owner = format!("o{}", row.owner);
            let expected = (u64::from(row.next_offset), i64::from(row.epoch), owner.as_str());
            if (real.next_offset, real.epoch, real.owner.as_str()) != expected {
                return Ok(Some(format!(
                    "{name}: the store's next offset, epoch and owner are {} {} {}, the model's {} {} {}",
                    real.next_offset, real.epoch, real.owner, expected.0, expected.1, expected.2
                )));
            }
        }
        Ok(None)
    }
}

/// Whether the model gives `owner` (its current slot) the partition after the step.
fn owns(state: &State, group: u8, owner: u8) -> bool {
    state.groups[usize::from(group)].owners[usize::from(owner)].leases.first().is_some_and(|l| l.is_some())
}
