//! Power cuts during replication (spec.md §10, "Replication"): a fixed schedule on a
//! replicated log on the simulated disk (appends with `acks=1` and `acks=all`, follower
//! fetches, an ISR shrink and rejoin, a fetch whose process crashes before its state write, a
//! clean election that truncates the promoted replica, appends to the new leader). For every
//! step and every disk operation in it, and right after the step returns, the step halts
//! there, a reader looks at the log (as a consumer would, in that window), the power goes,
//! and everything reopens. Checked:
//!
//! - (a) the state file reads, and holds the state before the step or the one after it (as a
//!   run without a cut has it): never torn, never a third one;
//! - (b) every replica opens as a writer: nothing is damaged (a cut takes unacknowledged tails
//!   only, which the reopen cuts and reports);
//! - (c) the leader's and every ISR member's log end is at least the high watermark, and the
//!   alive follower's log is a prefix of the leader's;
//! - (d) the leader's log holds every record a reader saw and every acknowledged `acks=all`
//!   batch, and, before the election, every acknowledged record;
//! - (e) the consumer-visible end never goes back;
//! - (f) a replica whose log became shorter was truncated on record (the journal says so);
//! - (g) the system converges: the follower catches up, a new `acks=all` append is
//!   acknowledged, and the ISR holds the leader's records, frame for frame.

use super::{mix, PowerError};
use crate::log::{
    encode_delta, Answer, Batch, Log, LogError, LogIdentity, Pending, Producer, Replicate, ReplicatedLog,
    ReplicationError, ReplicationState, SimDisk, SimOp, Storage, WriterMode,
};
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

/// One step of the schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `acks=1` append of batch `b`.
    AppendLeader(u64),
    /// `acks=all` (`min.insync.replicas` 1) append of batch `b`, pending.
    AppendAll(u64),
    /// The pending batch's answer.
    Acknowledge,
    Replicate,
    ShrinkIsr,
    /// A fetch whose process crashes before its state write (no power cut): the follower
    /// then holds records above the high watermark.
    CrashedReplicate,
    /// A clean election.
    FailLeader,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::AppendLeader(batch) => write!(f, "append acks=1 (batch {batch})"),
            Step::AppendAll(batch) => write!(f, "append acks=all (batch {batch})"),
            Step::Acknowledge => f.write_str("acknowledge"),
            Step::Replicate => f.write_str("replicate"),
            Step::ShrinkIsr => f.write_str("shrink-isr"),
            Step::CrashedReplicate => f.write_str("replicate, crashed before its state write"),
            Step::FailLeader => f.write_str("fail-leader (clean)"),
        }
    }
}

/// The schedule, in order; every step but the crashed fetch gets the cuts.
pub const SCHEDULE: [Step; 15] = [
    Step::AppendLeader(0),
    Step::Replicate,
    Step::AppendAll(1),
    Step::Replicate,
    Step::Acknowledge,
    Step::AppendLeader(2),
    Step::ShrinkIsr,
    Step::AppendLeader(3),
    Step::Replicate,
    Step::Replicate,
    Step::AppendLeader(4),
    Step::CrashedReplicate,
    Step::FailLeader,
    Step::AppendAll(5),
    Step::Acknowledge,
];

const RECORDS_PER_BATCH: u64 = 2;
const MIN_INSYNC: u32 = 1;
const PRODUCER: Producer = Producer { id: 1, epoch: 1 };
const FIRST_BATCH_AFTER_ELECTION: u64 = 5;
const ROOT: &str = "/sim";
/// Fetches a convergence may take, at most.
const CATCH_UP_STEPS_MAX: u64 = 64;

/// What the cuts at one step did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepTally {
    pub points: u64,
    pub runs: u64,
    /// Runs whose reopened state is the one before the step.
    pub old_state: u64,
    /// Runs whose reopened state is the one after it (or the step changed none).
    pub new_state: u64,
    /// Runs whose reopen cut an unacknowledged tail of a replica.
    pub tails_cut: u64,
    pub violations: u64,
}

/// The tallies per step of the schedule, and every violation.
#[derive(Debug, Default)]
pub struct Report {
    pub rows: Vec<(usize, Step, StepTally)>,
    pub violations: Vec<String>,
}

impl Report {
    pub fn total(&self) -> StepTally {
        self.rows.iter().fold(StepTally::default(), |sum, (_, _, t)| StepTally {
            points: sum.points + t.points,
            runs: sum.runs + t.runs,
            old_state: sum.old_state + t.old_state,
            new_state: sum.new_state + t.new_state,
            tails_cut: sum.tails_cut + t.tails_cut,
            violations: sum.violations + t.violations,
        })
    }

    pub fn table(&self) -> String {
        let mut out = String::from("replication (a cut at every disk operation of each step)\n");
        let header = ["step", "points", "runs", "old state", "new state", "tails cut", "violations"];
        let _ = writeln!(
            out,
            "{:<50} {:>6} {:>6} {:>9} {:>9} {:>9} {:>10}",
            header[0], header[1], header[2], header[3], header[4], header[5], header[6]
        );
        let rows = self.rows.iter().map(|(index, step, tally)| (format!("{index:>2} {step}"), *tally));
        for (name, t) in rows.chain([("total".to_string(), self.total())]) {
            let _ = writeln!(
                out,
                "{name:<50} {:>6} {:>6} {:>9} {:>9} {:>9} {:>10}",
                t.points, t.runs, t.old_state, t.new_state, t.tails_cut, t.violations
            );
        }
        out
    }
}

/// A replicated log on a fresh simulated disk.
struct World {
    disk: SimDisk,
    storage: Storage,
    dir: PathBuf,
    identity: LogIdentity,
    log: ReplicatedLog,
}

impl World {
    fn new() -> Result<World, PowerError> {
        let disk = SimDisk::new(Path::new(ROOT));
        let storage = Storage::Simulated(disk.clone());
        let dir = Path::new(ROOT).join("log");
        let identity = LogIdentity { id: 0x0e91, partitions: 1 };
        ReplicatedLog::create_on(&storage, &dir, identity, 2)?;
        let log = ReplicatedLog::open_on(&storage, &dir, identity)?.expect("created replicated");
        Ok(World { disk, storage, dir, identity, log })
    }

    fn reader(&self) -> Result<Log, LogError> {
        Log::open_reader_on(&self.storage, &self.dir, self.identity)
    }
}

/// What the producer and a reader saw before the cut.
#[derive(Default)]
struct Seen {
    /// Acknowledged records by offset: payload, and whether `acks=all` acknowledged it.
    acked: BTreeMap<u64, (Vec<u8>, bool)>,
    pending: Option<Pending>,
    /// The records a reader read, below the highest high watermark it saw.
    visible: Vec<Vec<u8>>,
    /// Per replica, its log end before the step.
    ends: Vec<u64>,
}

fn payloads(batch: u64) -> Vec<Vec<u8>> {
    (0..RECORDS_PER_BATCH).map(|i| encode_delta((batch * RECORDS_PER_BATCH + i) as i64 + 1)).collect()
}

/// The idempotent producer and base sequence of a batch. The election truncates batch 4 (an
/// `acks=1` batch above the high watermark), so the producer starts a new epoch after it: its
/// next sequence would be out of order on the new leader.
fn producer(batch: u64) -> (Producer, u32) {
    let (producer, first) = if batch < FIRST_BATCH_AFTER_ELECTION {
        (PRODUCER, 0)
    } else {
        (Producer { epoch: PRODUCER.epoch + 1, ..PRODUCER }, FIRST_BATCH_AFTER_ELECTION)
    };
    (producer, u32::try_from((batch - first) * RECORDS_PER_BATCH).expect("a few records"))
}

/// Performs one step (the crashed fetch halts itself). An error is the step's own.
fn perform(world: &World, step: Step, seen: &mut Seen) -> Result<(), ReplicationError> {
    let log = &world.log;
    match step {
        Step::AppendLeader(b) | Step::AppendAll(b) => {
            let data = payloads(b);
            let batch = Batch { payloads: &data, producer: Some(producer(b)) };
            if step == Step::AppendLeader(b) {
                let append = log.append_leader(0, batch)?;
                seen.acked.extend(append.appended.offsets.zip(data.into_iter().map(|payload| (payload, false))));
            } else {
                seen.pending = Some(log.append_pending(0, batch, MIN_INSYNC)?);
            }
        }
        Step::Acknowledge => {
            let pending = seen.pending.as_ref().expect("a pending batch to acknowledge");
            if let Answer::Acknowledged { .. } = log.acknowledge(pending)? {
                let pending = seen.pending.take().expect("checked above");
                let records = log.replica_read(pending.append.leader, 0, pending.append.appended.offsets.clone())?;
                seen.acked.extend(records.into_iter().map(|record| (record.offset, (record.payload, true))));
            }
        }
        Step::Replicate => {
            log.replicate(0)?;
        }
        Step::ShrinkIsr => {
            log.shrink_isr(0)?;
        }
        Step::CrashedReplicate => {
            let state = world.dir.join("replication.state");
            world.disk.halt_at(crate::log::Halt { op: SimOp::Rename, path: state, after: false });
            let crashed = log.replicate(0);
            assert!(crashed.is_err() && world.disk.halted(), "the crashed fetch wrote its state: {crashed:?}");
        }
        Step::FailLeader => {
            log.fail_leader(0, false)?;
        }
    }
    Ok(())
}

/// A reader looks at the log, as a consumer would: it remembers every record below the
/// highest end it saw.
fn look(reader: &mut Log, seen: &mut Seen) -> Result<(), LogError> {
    let end = reader.end(0)?;
    if end > seen.visible.len() as u64 {
        seen.visible = reader.read_range(0, 0..end)?.into_iter().map(|record| record.payload).collect();
    }
    Ok(())
}

fn replica_ends(world: &World) -> Result<Vec<u64>, LogError> {
    (0..world.log.replicas()).map(|broker| Ok(world.log.replica_view(broker, 0)?.end)).collect()
}

/// The schedule without a cut: per step, the disk operations it makes and the state after it.
fn reference() -> Result<Vec<(u64, ReplicationState)>, PowerError> {
    let world = World::new()?;
    let mut seen = Seen::default();
    let mut steps = Vec::new();
    for step in SCHEDULE {
        let before = world.disk.ops();
        perform(&world, step, &mut seen)?;
        steps.push((world.disk.ops() - before, world.log.state()?));
    }
    let acked_all = seen.acked.values().filter(|(_, all)| *all).count() as u64;
    assert!(seen.pending.is_none() && acked_all == 2 * RECORDS_PER_BATCH, "both acks=all batches are acknowledged");
    Ok(steps)
}

/// Every point of every step, `runs` times each.
pub fn run(seed: u64, runs: u64) -> Result<Report, PowerError> {
    let reference = reference()?;
    let mut report = Report::default();
    for (index, &step) in SCHEDULE.iter().enumerate() {
        if step == Step::CrashedReplicate {
            continue;
        }
        let mut tally = StepTally::default();
        let ops = reference[index].0;
        for op in 0..=ops {
            tally.points += 1;
            for run_index in 0..runs {
                let case = Case { index, op, seed: mix(seed, &[0x4e91, index as u64, op, run_index]) };
                let violations = run_one(&case, &reference, &mut tally)?;
                tally.runs += 1;
                tally.violations += u64::from(!violations.is_empty());
                report.violations.extend(violations.into_iter().map(|why| format!("{case}: {why}")));
            }
        }
        report.rows.push((index, step, tally));
    }
    Ok(report)
}

/// One run: a step, the disk operation it halts before (its operation count: after it
/// returned), the cut's seed.
struct Case {
    index: usize,
    op: u64,
    seed: u64,
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "step {} ({}), disk operation {}, seed {:#x}", self.index, SCHEDULE[self.index], self.op, self.seed)
    }
}

/// Runs the schedule up to the case's step, halts it, cuts the power and checks the reboot.
fn run_one(
    case: &Case,
    reference: &[(u64, ReplicationState)],
    tally: &mut StepTally,
) -> Result<Vec<String>, PowerError> {
    let world = World::new()?;
    let mut seen = Seen::default();
    let mut reader = world.reader()?;
    let mut violations = Vec::new();
    for &step in &SCHEDULE[..case.index] {
        perform(&world, step, &mut seen)?;
        look(&mut reader, &mut seen)?;
    }
    let before = world.log.state()?;
    seen.ends = replica_ends(&world)?;
    let ops = reference[case.index].0;
    if case.op < ops {
        world.disk.halt_at_op(case.op);
    }
    let result = perform(&world, SCHEDULE[case.index], &mut seen);
    match (case.op < ops, result) {
        (true, Err(_)) if world.disk.halted() => {}
        (false, Ok(())) => {}
        (_, result) => violations.push(format!("the step did not stop where it should: {result:?}")),
    }
    if let Err(error) = look(&mut reader, &mut seen) {
        violations.push(format!("a reader in the window failed: {error}"));
    }
    drop(reader);
    world.disk.power_cut(case.seed);
    check_reboot(&world, &seen, (&before, &reference[case.index].1), tally, &mut violations)?;
    Ok(violations)
}

/// The checks (a) to (g) of the module documentation.
fn check_reboot(
    world: &World,
    seen: &Seen,
    (before, after): (&ReplicationState, &ReplicationState),
    tally: &mut StepTally,
    violations: &mut Vec<String>,
) -> Result<(), PowerError> {
    let state = match world.log.state() {
        Ok(state) => state,
        Err(error) => {
            violations.push(format!("(a) the state file does not read: {error}"));
            return Ok(());
        }
    };
    match (state == *before, state == *after) {
        (_, true) => tally.new_state += 1,
        (true, false) => tally.old_state += 1,
        (false, false) => violations.push(format!("(a) the state is neither the old nor the new one: {state:?}")),
    }
    for broker in 0..world.log.replicas() {
        let dir = crate::log::replica_dir(&world.dir, broker);
        match Log::open_writer_on(&world.storage, &dir, world.identity, WriterMode::Checked) {
            Ok((mut writer, repairs)) => {
                tally.tails_cut += u64::from(!repairs.is_empty());
                if let Some(damage) = writer.damage(0)? {
                    violations.push(format!("(b) broker {broker}'s replica is damaged: {}", damage.reason));
                }
            }
            Err(error) => violations.push(format!("(b) broker {broker}'s replica does not open: {error}")),
        }
    }
    if !violations.is_empty() {
        return Ok(());
    }
    check_replicas(world, &state, seen, violations)?;
    converge(world, violations)
}

/// (c) to (f).
fn check_replicas(
    world: &World,
    state: &ReplicationState,
    seen: &Seen,
    violations: &mut Vec<String>,
) -> Result<(), PowerError> {
    let part = &state.partitions[0];
    let leader = part.leader.expect("the schedule always has a leader");
    let ends = replica_ends(world)?;
    let hw = part.high_watermark;
    for &broker in &part.isr {
        if ends[broker as usize] < hw {
            violations.push(format!(
                "(c) ISR member {broker} ends at {}, below the high watermark {hw}",
                ends[broker as usize]
            ));
        }
    }
    let leader_records: Vec<Vec<u8>> =
        world.log.replica_read(leader, 0, 0..ends[leader as usize])?.into_iter().map(|r| r.payload).collect();
    if let Some(follower) = part.follower() {
        let records = world.log.replica_read(follower, 0, 0..ends[follower as usize])?;
        if !leader_records.starts_with(&records.into_iter().map(|r| r.payload).collect::<Vec<_>>()) {
            violations.push(format!("(c) follower {follower}'s log is not a prefix of the leader's"));
        }
    }
    if !leader_records.starts_with(&seen.visible) {
        violations.push(format!("(d) the leader lacks records a reader saw below {}", seen.visible.len()));
    }
    for (&offset, (payload, all)) in &seen.acked {
        let kept = leader_records.get(offset as usize) == Some(payload);
        if !kept && (*all || part.leader_epoch == 0) {
            violations
                .push(format!("(d) acknowledged record {offset} (acks={}) is lost", if *all { "all" } else { "1" }));
        }
    }
    let visible_end = world.reader()?.end(0)?;
    if visible_end < seen.visible.len() as u64 {
        violations.push(format!("(e) the visible end went back from {} to {visible_end}", seen.visible.len()));
    }
    let journal = world.log.journal()?;
    for (broker, (&end, &was)) in ends.iter().zip(&seen.ends).enumerate() {
        if end < was && !journal.contains(&format!("truncated from offset {was}")) {
            violations.push(format!("(f) broker {broker}'s log went from {was} to {end} with no truncation on record"));
        }
    }
    Ok(())
}

/// (g): the follower catches up, a new `acks=all` append is acknowledged, and the ISR holds
/// the leader's records.
fn converge(world: &World, violations: &mut Vec<String>) -> Result<(), PowerError> {
    let log = &world.log;
    let data = payloads(99);
    let pending = match log.append_pending(0, Batch { payloads: &data, producer: None }, MIN_INSYNC) {
        Ok(pending) => pending,
        Err(error) => {
            violations.push(format!("(g) an append after the reboot failed: {error}"));
            return Ok(());
        }
    };
    for _ in 0..CATCH_UP_STEPS_MAX {
        match log.replicate(0)? {
            Replicate::Copied { .. } => {}
            Replicate::CaughtUp { .. } | Replicate::NoFollower => break,
        }
    }
    let answer = log.acknowledge(&pending)?;
    if !matches!(answer, Answer::Acknowledged { .. }) {
        violations.push(format!("(g) the append after the reboot was answered {answer:?}"));
    }
    let state = log.state()?;
    let part = &state.partitions[0];
    let leader = part.leader.expect("a leader");
    let end = log.replica_view(leader, 0)?.end;
    for &broker in &part.isr {
        let frames = log.replica_read(broker, 0, 0..end);
        if broker != leader && frames.ok() != Some(log.replica_read(leader, 0, 0..end)?) {
            violations.push(format!("(g) ISR member {broker} does not hold the leader's records"));
        }
    }
    if part.high_watermark != end {
        violations.push(format!("(g) the high watermark {} is not the caught-up end {end}", part.high_watermark));
    }
    Ok(())
}

impl From<ReplicationError> for PowerError {
    fn from(error: ReplicationError) -> Self {
        PowerError::Replication(error)
    }
}
