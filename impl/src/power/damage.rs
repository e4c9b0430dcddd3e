//! The damage classes of the power-cut runs (spec.md §10 "Power loss"): damage a power cut
//! alone does not make, put on the simulated disk on purpose at a seeded point, then the cut,
//! the reboot and the checks of `run.rs`, with a refusal counted rather than a violation:
//!
//! - `ack-slot:flipped-byte`: after the k-th acknowledged append (k seeded in `1..BATCHES`,
//!   the owner having consumed the earlier batches and taken a seeded number of steps into the
//!   k-th), a seeded byte of the newest valid slot's record of the acknowledgement record is
//!   flipped on the durable disk ([`SimDisk::flip_durable`]);
//! - `ack-slot:torn-write`: the k-th append is halted after writing its slot, before syncing
//!   it, and that write lands torn ([`SimDisk::tear_last_write`]: a seeded prefix of the new
//!   record, the rest the old bytes); its records were never acknowledged to the producer;
//! - `header:data-file`, `header:start-file`, `header:ack-magic`: after the k-th acknowledged
//!   append, a seeded byte of the partition file's header (its length as `init` made it), of
//!   the start file (all of it is checked), or of the newest slot's magic is flipped.
//!
//! The slot's bytes are found through `fault::newest_ack_slot_on`, not a layout known here.
//! "Silently lost": an acknowledged record the reopened log lacks or holds other bytes of,
//! with no refusal of the log's own open naming the partition; such a loss is a violation.
//! A refusal is counted, its one-line message kept.
//!
//! The classes run for a representative subset of the strategies ([`DAMAGE_STRATEGIES`]):
//! they damage the log, whose recovery is one code path for every strategy; the strategy only
//! decides how the group reacts to what the reopened log holds.

use super::run::{after_cut, Before, Case, Outcome, World, Writer, BATCHES, STEPS_AFTER_HALT_MAX};
use super::{mix, LogPoint, Point, PowerError};
use crate::crash::CrashPlan;
use crate::log::{fault, SplitMix64, WriterMode};
use crate::owner::{OnFenced, Owner};
use crate::strategy::Strategy;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A kind of damage, one row of the table "damage classes".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DamageClass {
    /// A flipped byte in the newest acknowledgement slot's record.
    AckSlotFlip,
    /// The acknowledgement slot's write of an append torn by the cut.
    AckSlotTorn,
    /// A flipped byte in the partition file's header.
    DataHeaderFlip,
    /// A flipped byte in the start file.
    StartFileFlip,
    /// A flipped byte in the newest acknowledgement slot's magic.
    AckMagicFlip,
}

impl DamageClass {
    pub const ALL: [DamageClass; 5] = [
        DamageClass::AckSlotFlip,
        DamageClass::AckSlotTorn,
        DamageClass::DataHeaderFlip,
        DamageClass::StartFileFlip,
        DamageClass::AckMagicFlip,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DamageClass::AckSlotFlip => "ack-slot:flipped-byte",
            DamageClass::AckSlotTorn => "ack-slot:torn-write",
            DamageClass::DataHeaderFlip => "header:data-file",
            DamageClass::StartFileFlip => "header:start-file",
            DamageClass::AckMagicFlip => "header:ack-magic",
        }
    }
}

/// The strategies the damage classes run for, when the configuration has them: an exact one
/// whose effect and checkpoint are one transaction (atomic-fenced), the exact transactional one
/// whose output log is on the same disk (txn-fenced), and one that is not exact and commits
/// before its effect (commit-first). The damage is to the log, whose recovery is one code path
/// for every strategy; the strategy only decides how the group meets what the reopened log
/// holds, and these three meet it the three ways there are.
pub const DAMAGE_STRATEGIES: [Strategy; 3] = [Strategy::AtomicFenced, Strategy::TxnFenced, Strategy::CommitFirst];

/// The strategies of `configured` the damage classes run for: those of [`DAMAGE_STRATEGIES`]
/// it holds, or, holding none of them (a `--strategy` of another), all of `configured`.
pub fn strategies(configured: &[Strategy]) -> Vec<Strategy> {
    let subset: Vec<Strategy> =
        DAMAGE_STRATEGIES.into_iter().filter(|strategy| configured.contains(strategy)).collect();
    if subset.is_empty() {
        configured.to_vec()
    } else {
        subset
    }
}

/// One damage run: the class, and the run (its strategy and seed; `case.point` is the log
/// point where the cut falls: after an append, or, for the torn slot, at `append:ack-written`).
#[derive(Clone, Copy, Debug)]
pub(super) struct DamageCase {
    pub(super) class: DamageClass,
    pub(super) case: Case,
}

/// Every damage class for every strategy of `strategies`, `runs` times, seeded from `seed`.
pub(super) fn cases(seed: u64, runs: u64, strategies: &[Strategy], writer_mode: WriterMode) -> Vec<DamageCase> {
    let mut cases = Vec::new();
    for class in DamageClass::ALL {
        for &strategy in strategies {
            for run_index in 0..runs {
                let seed = mix(seed, &[0xda3a_9e00 + class as u64, strategy as u64, run_index]);
                let point = match class {
                    DamageClass::AckSlotTorn => LogPoint::AckWritten,
                    DamageClass::AckSlotFlip
                    | DamageClass::DataHeaderFlip
                    | DamageClass::StartFileFlip
                    | DamageClass::AckMagicFlip => LogPoint::AckSynced,
                };
                let case = Case { strategy, point: Point::Log(point), seed, writer_mode };
                cases.push(DamageCase { class, case });
            }
        }
    }
    cases
}

/// One damage run, its violations in the outcome (a failure of the system under test is one).
pub(super) fn run(damage: &DamageCase, work: &Path) -> Result<Outcome, PowerError> {
    let world = World::new(work, damage.case.seed)?;
    let mut rng = SplitMix64::new(damage.case.seed);
    let mut outcome = Outcome { refusals_allowed: true, ..Outcome::default() };
    if let Err(error) = damage_and_check(&world, damage, &mut rng, &mut outcome) {
        outcome.violation(format!("the run failed: {error}"));
    }
    world.remove()?;
    Ok(outcome)
}

fn damage_and_check(
    world: &World,
    damage: &DamageCase,
    rng: &mut SplitMix64,
    outcome: &mut Outcome,
) -> Result<(), PowerError> {
    let case = &damage.case;
    // The partition file as `init` made it: its header alone.
    let header_len = world.disk.len(&file(world, "log")).map_err(io_error(file(world, "log")))?;
    let acked_appends = 1 + rng.below(BATCHES - 1);
    let (log, _) = world.writer(case.writer_mode)?;
    let mut writer = Writer { log, acked: BTreeMap::new(), batches_acked: 0 };
    let mut owner = world.owner(case.strategy, CrashPlan::none())?;
    for batch in 0..acked_appends {
        writer.append(batch)?;
        if batch + 1 < acked_appends {
            owner.run_to_end(OnFenced::Stop)?;
        } else {
            owner_steps(&mut owner, rng.below(STEPS_AFTER_HALT_MAX + 1))?;
        }
    }
    let mut before = Before::default();
    let (ack, rng_ack) = (file(world, "ack"), rng.next_u64());
    let mut pick = SplitMix64::new(rng_ack);
    match damage.class {
        DamageClass::AckSlotTorn => {
            // The next append, halted once its slot is written (before the slot's sync), then
            // that write lands torn. Nobody steps in between: a reader's refresh would sync it.
            world.halt_at(LogPoint::AckWritten);
            match writer.append(acked_appends) {
                Err(_) if world.disk.halted() => before.interrupted = Some(acked_appends),
                Err(error) => return Err(error.into()),
                Ok(_) => return Err(PowerError::BadConfig("the torn slot's append was not halted".into())),
            }
            // The tear falls inside the new slot's record (the write may cover more than it).
            let slot = fault::newest_ack_slot_on(&world.storage, &world.log_dir, 0)?.record;
            let keep = 1 + pick.below(slot.end - slot.start - 1);
            let written = world.disk.pending_writes(&ack).map_err(io_error(ack.clone()))?;
            let Some(write) = written.last().filter(|write| write.start <= slot.start && slot.end <= write.end) else {
                let what = format!("the slot's record at {slot:?} is not in the file's last pending write {written:?}");
                return Err(PowerError::BadConfig(what));
            };
            let keep = slot.start - write.start + keep;
            world.disk.tear_last_write(&ack, keep).map_err(io_error(ack.clone()))?;
        }
        DamageClass::AckSlotFlip | DamageClass::AckMagicFlip => {
            let slot = fault::newest_ack_slot_on(&world.storage, &world.log_dir, 0)?;
            let bytes = if damage.class == DamageClass::AckSlotFlip { slot.record } else { slot.magic };
            flip(world, &ack, bytes.start + pick.below(bytes.end - bytes.start), &mut pick)?;
        }
        DamageClass::DataHeaderFlip => flip(world, &file(world, "log"), pick.below(header_len), &mut pick)?,
        DamageClass::StartFileFlip => {
            let start = file(world, "start");
            let len = world.disk.len(&start).map_err(io_error(start.clone()))?;
            flip(world, &start, pick.below(len), &mut pick)?;
        }
    }
    (before.acked, before.batches_acked) = (std::mem::take(&mut writer.acked), writer.batches_acked);
    // Every process dies with the power.
    drop((writer, owner));
    outcome.cut = world.disk.power_cut(rng.next_u64());
    after_cut(world, case, &before, outcome)
}

/// The owner takes up to `steps` steps (fewer when it has none left).
fn owner_steps(owner: &mut Owner, steps: u64) -> Result<(), PowerError> {
    for _ in 0..steps {
        let Some(&step) = owner.enabled_steps()?.first() else { break };
        owner.perform(step)?;
    }
    Ok(())
}

/// Flips a seeded nonzero mask of byte `byte` of `path`'s durable content.
fn flip(world: &World, path: &Path, byte: u64, pick: &mut SplitMix64) -> Result<(), PowerError> {
    let mask = 1 + pick.below(255) as u8;
    world.disk.flip_durable(path, byte, mask).map_err(io_error(path.to_path_buf()))
}

fn file(world: &World, extension: &str) -> PathBuf {
    world.log_dir.join(format!("partition-0.{extension}"))
}

fn io_error(path: PathBuf) -> impl FnOnce(std::io::Error) -> PowerError {
    move |source| PowerError::Io { path, source }
}
