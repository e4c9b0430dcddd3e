//! Every fence witnessed: for every row and every kind of fenced write it performs, a trace in
//! which a stale owner, a zombie after a rebalance and an earlier incarnation after a pause,
//! attempts exactly that write and is fenced, so that a consumer missing that one check
//! diverges there (spec.md §11).
//!
//! `fenced_steps` finds those steps on any model path, `targets` lists what a row must
//! witness (from the model's rules, by exhaustive matches), and `witnesses` searches the
//! model for the shortest path to each target the other corpus traces lack: the corpus's
//! `ROW--zombie-fenced--WRITE.json` and `ROW--paused-fenced--WRITE.json` files, written by
//! `regenerate`. The paths are the model's, found breadth first in its fixed action order;
//! the verdicts are the model's too.

use crate::error::ScenarioError;
use consumer::strategy::FencedWrite;
use model::check::Verdict;
use model::strategy::{CommitFence, Guard, OutOfRangePolicy, PoisonPolicy, Sequence, StartPolicy, Write};
use model::trace::Trace;
use model::{Action, Config, ConsumerModel, State, Strategy};
use stateright::Model;
use std::collections::HashSet;
use std::fmt;

/// Who the stale owner is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stale {
    /// A current owner slot after a rebalance moved the partition on (the old owner is not
    /// told): spec.md §3's zombie.
    Zombie,
    /// A paused slot: the earlier incarnation of an owner started again (`gG/oO'`, spec.md
    /// §2.2), whose successor's start claimed a new epoch.
    EarlierIncarnation,
}

impl Stale {
    pub const ALL: [Stale; 2] = [Stale::Zombie, Stale::EarlierIncarnation];

    pub const fn name(self) -> &'static str {
        match self {
            Stale::Zombie => "zombie",
            Stale::EarlierIncarnation => "earlier-incarnation",
        }
    }

    /// The model's observation that a fence of this kind struck: the property a witness
    /// records as reached.
    const fn property(self) -> &'static str {
        match self {
            Stale::Zombie => "zombie-fenced",
            Stale::EarlierIncarnation => "paused-fenced",
        }
    }
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A step of a path at which a stale owner attempts a fenced write and is fenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FencedStep {
    /// The step's number, from 1 (as a replay's divergence names it).
    pub step: usize,
    pub write: FencedWrite,
    pub stale: Stale,
}

/// The real consumer's fenced write that `action` is under `config`'s rules, if it is one: the
/// model fences exactly these (`step::is_fenced_out`) when the row's guard is `Fenced`.
pub fn fenced_write(config: &Config, action: &Action) -> Option<FencedWrite> {
    let write = action.owner_write()?;
    let rules = config.strategy.rules();
    let commit_checked = match rules.commit_fence {
        CommitFence::Generation => true,
        CommitFence::Blind => false,
    };
    if commit_checked && write.write == Write::CommitOffset {
        return Some(FencedWrite::CommitOffset);
    }
    match rules.guard {
        Guard::Fenced => {}
        Guard::Blind | Guard::Cas => return None,
    }
    match write.write {
        // A poison record's `apply-atomic` is its failed attempt: another transaction.
        Write::ApplyAtomic if config.poison == Some(write.value) => Some(FencedWrite::Attempts),
        Write::ApplyAtomic => Some(FencedWrite::ApplyAtomic),
        Write::DeadLetter => Some(FencedWrite::DeadLetter),
        Write::ResetOffset => Some(FencedWrite::ResetOffset),
        Write::ProduceOutput => Some(FencedWrite::ProduceOutput),
        Write::CommitTxn => Some(FencedWrite::CommitTxn),
        Write::ApplyEffect
        | Write::InsertProcessed
        | Write::CommitOffset
        | Write::ApplyStamped
        | Write::ApplyDeduped
        | Write::SendEmail
        | Write::WriteIndex => None,
    }
}

/// Whether `action`, taken in `state`, is a stale owner's fenced write, and whose.
fn fenced_at(config: &Config, state: &State, action: &Action) -> Option<(FencedWrite, Stale)> {
    let fenced = fenced_write(config, action)?;
    let (group, owner, partition) = action.owner_write()?.lease;
    let group = &state.groups[usize::from(group)];
    let slot = group.slot(owner);
    let lease = slot.leases[usize::from(partition)].as_ref()?;
    if lease.epoch == group.store.partitions[usize::from(partition)].epoch {
        return None;
    }
    let stale = match slot.incarnation_of {
        Some(_) => Stale::EarlierIncarnation,
        None => Stale::Zombie,
    };
    Some((fenced, stale))
}

/// Every step of `actions` (a path of `config`'s model) at which a stale owner attempts a
/// fenced write and is fenced.
pub fn fenced_steps(config: &Config, actions: &[Action]) -> Result<Vec<FencedStep>, model::check::Unreachable> {
    let states = model::check::replay(&ConsumerModel::new(config.clone()), actions)?;
    let steps = actions.iter().zip(&states).enumerate();
    Ok(steps
        .filter_map(|(index, (action, before))| {
            fenced_at(config, before, action).map(|(write, stale)| FencedStep { step: index + 1, write, stale })
        })
        .collect())
}

/// The fenced writes a row performs: its guard (or the broker's commit check) fences them, and
/// its rules reach them.
pub fn writes_of(strategy: Strategy) -> Vec<FencedWrite> {
    let rules = strategy.rules();
    let mut writes = Vec::new();
    match rules.commit_fence {
        CommitFence::Generation => writes.push(FencedWrite::CommitOffset),
        CommitFence::Blind => {}
    }
    match rules.guard {
        Guard::Fenced => {}
        Guard::Blind | Guard::Cas => return writes,
    }
    match rules.sequence {
        Sequence::Atomic
        | Sequence::AtomicThenEmail
        | Sequence::EmailThenAtomic { .. }
        | Sequence::AtomicThenIndex
        | Sequence::AtomicWithOutbox => writes.push(FencedWrite::ApplyAtomic),
        Sequence::Transactional => writes.extend([FencedWrite::ProduceOutput, FencedWrite::CommitTxn]),
        Sequence::CommitThenEffect
        | Sequence::EffectThenCommit
        | Sequence::Effect
        | Sequence::EffectRecordCommit
        | Sequence::Stamped
        | Sequence::DedupedThenCommit => {}
    }
    match rules.poison {
        PoisonPolicy::DeadLetter => writes.extend([FencedWrite::Attempts, FencedWrite::DeadLetter]),
        PoisonPolicy::Skip | PoisonPolicy::RetryForever => writes.push(FencedWrite::Attempts),
        PoisonPolicy::Unhandled => {}
    }
    match rules.out_of_range {
        OutOfRangePolicy::Earliest => writes.push(FencedWrite::ResetOffset),
        OutOfRangePolicy::Fail | OutOfRangePolicy::Silent => {}
    }
    writes
}

/// The stale owners a row's fences must be shown to stop: a zombie always; an earlier
/// incarnation only where every start claims a new epoch (fenced-stored-epoch's earlier
/// incarnation holds its successor's epoch, unfenced: the trap its counterexample shows).
pub fn stale_owners_of(strategy: Strategy) -> Vec<Stale> {
    match strategy.rules().start {
        StartPolicy::ClaimEpoch => Stale::ALL.to_vec(),
        StartPolicy::StoredEpoch => vec![Stale::Zombie],
    }
}

/// One thing the corpus must witness: a stale owner of `row` fenced at `write`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    pub row: Strategy,
    pub write: FencedWrite,
    pub stale: Stale,
}

impl Target {
    /// The corpus file that witnesses it when no other trace of the row does:
    /// `ROW--PROPERTY--WRITE.json`, the witness of the fence's observation (`zombie-fenced`,
    /// `paused-fenced`) at that write, beside the row's own witness of it, `ROW--PROPERTY.json`.
    pub fn file_name(&self) -> String {
        format!("{}--{}--{}.json", self.row, self.stale.property(), self.write)
    }

    /// Whether `name` is the file name of a fence witness.
    pub fn is_witness_file(name: &str) -> bool {
        targets().iter().any(|target| target.file_name() == name)
    }

    /// Small bounds of the row's model that have this stale owner and this write: one
    /// group, no crash, and only the faults the target needs (a rebalance and a second owner
    /// for a zombie, a pause for an earlier incarnation, a retention for a reset; the
    /// poison record, when the row has one, stays where the row's defaults put it).
    pub fn config(&self) -> Config {
        let mut config = Config::new(self.row);
        config.groups = 1;
        config.crashes = 0;
        config.ack_losses = 0;
        config.log_losses = 0;
        config.leader_failures = 0;
        config.isr_shrinks = 0;
        config.retentions = match self.write {
            FencedWrite::ResetOffset => 1,
            FencedWrite::ApplyAtomic
            | FencedWrite::Attempts
            | FencedWrite::DeadLetter
            | FencedWrite::ProduceOutput
            | FencedWrite::CommitTxn
            | FencedWrite::CommitOffset => 0,
        };
        match self.stale {
            Stale::Zombie => {
                config.owners = config.owners.max(2);
                config.rebalances = 1;
                config.pauses = 0;
            }
            Stale::EarlierIncarnation => {
                config.rebalances = 0;
                config.pauses = 1;
            }
        }
        config
    }
}

/// Every target of every row, in `Strategy::ALL`'s order, then `FencedWrite::ALL`'s, then
/// `Stale::ALL`'s.
pub fn targets() -> Vec<Target> {
    let mut targets = Vec::new();
    for row in Strategy::ALL {
        let writes = writes_of(row);
        for write in FencedWrite::ALL.into_iter().filter(|write| writes.contains(write)) {
            for stale in stale_owners_of(row) {
                targets.push(Target { row, write, stale });
            }
        }
    }
    targets
}

/// Whether `trace` witnesses `target`: a trace of its row in which a stale owner of its kind
/// is fenced at its write.
pub fn witnesses_target(trace: &Trace, target: &Target) -> bool {
    trace.config.strategy == target.row
        && fenced_steps(&trace.config, &trace.actions)
            .is_ok_and(|steps| steps.iter().any(|step| step.write == target.write && step.stale == target.stale))
}

/// The states a search visits at most: the targets' bounds are small (one group, no crash),
/// so each is found within a few thousand; a target past this is a bug of the bounds.
pub const SEARCH_STATES_MAX: usize = 1_000_000;

/// The shortest path of `config`'s model whose last step is a stale owner of kind `stale`
/// fenced at `write`: breadth first, in the model's fixed action order, so the same path on
/// every run. The visited set is only asked whether a state was seen; the order comes from the
/// queue alone.
pub fn shortest(config: &Config, write: FencedWrite, stale: Stale) -> Result<Vec<Action>, ScenarioError> {
    config.validate_for_replay().map_err(ScenarioError::Config)?;
    let model = ConsumerModel::new(config.clone());
    // Each discovered state's parent (an index into `parents`, none for an initial state) and
    // the action that reached it.
    let mut parents: Vec<(Option<usize>, Option<Action>)> = Vec::new();
    let mut level: Vec<(usize, State)> = Vec::new();
    let mut seen: HashSet<State> = HashSet::new();
    for state in model.init_states() {
        if seen.insert(state.clone()) {
            parents.push((None, None));
            level.push((parents.len() - 1, state));
        }
    }
    let mut actions = Vec::new();
    while !level.is_empty() {
        let mut next_level = Vec::new();
        for (index, state) in &level {
            actions.clear();
            model.actions(state, &mut actions);
            for action in &actions {
                if fenced_at(config, state, action) == Some((write, stale)) {
                    let mut path = vec![*action];
                    let mut at = Some(*index);
                    while let Some(node) = at {
                        let (parent, reached_by) = parents[node];
                        path.extend(reached_by);
                        at = parent;
                    }
                    path.reverse();
                    return Ok(path);
                }
                let Some(next) = model.next_state(state, *action) else { continue };
                if seen.len() == SEARCH_STATES_MAX {
                    return Err(ScenarioError::NotFound { states: SEARCH_STATES_MAX });
                }
                if seen.insert(next.clone()) {
                    parents.push((Some(*index), Some(*action)));
                    next_level.push((parents.len() - 1, next));
                }
            }
        }
        level = next_level;
    }
    Err(ScenarioError::NotFound { states: seen.len() })
}

/// The trace of `target`: its shortest path, recording the model's observation of the fence
/// (`zombie-fenced` or `paused-fenced`) as reached, once the model's states on that path
/// reach it.
pub fn witness(target: &Target) -> Result<Trace, ScenarioError> {
    let config = target.config();
    let actions = shortest(&config, target.write, target.stale)?;
    let model = ConsumerModel::new(config.clone());
    let property = target.stale.property();
    let found = model::check::property_named(&model, property)
        .ok_or_else(|| ScenarioError::NoProperty(property.to_string()))?;
    let states = model::check::replay(&model, &actions).map_err(ScenarioError::Unreachable)?;
    if !states.iter().any(|state| model::check::is_discovery(&model, &found, state)) {
        return Err(ScenarioError::Unobserved { property: property.to_string() });
    }
    let description = format!(
        "{} of {}'s {}: the stale owner's {} is fenced (nothing written), so a consumer without that \
         check diverges at step {}",
        match target.stale {
            Stale::Zombie => "a zombie after a rebalance",
            Stale::EarlierIncarnation => "an earlier incarnation after a pause",
        },
        target.row,
        target.write,
        target.write,
        actions.len()
    );
    Ok(Trace::new(config, Some(property), Some(Verdict::Reached), description, actions))
}

/// The fence witnesses `regenerate` adds to `others` (the rest of the corpus): one for each
/// target no trace of `others` witnesses, by file name.
pub fn witnesses(others: &[Trace]) -> Result<Vec<(String, Trace)>, (Target, ScenarioError)> {
    let mut found = Vec::new();
    for target in targets() {
        if others.iter().any(|trace| witnesses_target(trace, &target)) {
            continue;
        }
        let trace = witness(&target).map_err(|error| (target, error))?;
        found.push((target.file_name(), trace));
    }
    Ok(found)
}
