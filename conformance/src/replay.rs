//! Replays one trace in the model and in the real system side by side, comparing the states
//! after every step and the properties' verdicts at the end.

use crate::error::Error;
use crate::harness::{restart_step, Harness, Options, RaceOrder, RaceOutcome, RacePlan, Restarted, Restarter};
use crate::killpoints::{Snapshot, Window};
use consumer::strategy::Step;
use model::action::Actor;
use model::check::{replay as model_replay, Verdict};
use model::properties::properties_for;
use model::state::{State, Store as ModelStore};
use model::strategy::EffectKind;
use model::trace::Trace;
use model::{Action, ConsumerModel};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;

/// What a conforming replay established.
#[derive(Clone, Debug)]
pub struct ReplayReport {
    pub steps: usize,
    /// The kill points inside steps: found and judged (all zero when not traced).
    pub inside: Inside,
    /// The owner steps that changed the model's store while the consumer changed no file under
    /// its store directory (traced only), each as `step N (ACTION)`.
    pub unseen_writes: Vec<String>,
    /// Every safety property, and whether the real system violated it during the trace.
    pub violated: Vec<(String, bool)>,
    /// For the trace's property: what the real store shows (the doubled total, the skip).
    pub evidence: Option<String>,
}

/// The kill points of one replay (or of many, added up).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inside {
    /// Kill points found inside steps.
    pub found: usize,
    /// Of those, judged: all but the ones sampled out past `killpoints::POINTS_PER_STEP_MAX`.
    pub judged: usize,
    /// Found and not judged: a step's points past `killpoints::POINTS_PER_STEP_MAX`.
    pub sampled_out: usize,
    /// Distinct stores read (copies equal to one read before are judged without a reader).
    pub reads: usize,
    /// Steps with at least one kill point.
    pub steps: usize,
    /// Steps whose model store changes and where the consumer wrote nothing under its store.
    pub writes_unseen: usize,
    /// Distinct copies an owner was restarted on (protocol mode): each kill point judged by
    /// what a restart there makes of it too.
    pub restarts: usize,
    /// Power cuts judged: one at each kill point judged and one after every step.
    pub power_cuts: usize,
    /// Syncs under the store (of a file or a directory) the tracer saw inside steps.
    pub syncs: usize,
    /// Races run (protocol mode): an owner's step held at a transaction's begin while a second
    /// incarnation claimed and took its steps; and the steps raced.
    pub races: usize,
    pub race_steps: usize,
    /// Races where the second incarnation waited on a lock the held one kept (not a race).
    pub races_blocked: usize,
    /// Races not run: a restarted incarnation refused a step the model's restart takes.
    pub races_refused: usize,
}

impl Inside {
    /// What was tried inside steps, for a summary line: `214 kill points inside 61 steps, each
    /// judged (57 stores read)`, or why none was.
    pub fn summary(&self, traced: bool) -> String {
        if !traced {
            return "kill points inside steps: not tried (--inside-step off): crashes fell between steps only"
                .to_string();
        }
        if self.found == 0 {
            return "kill points inside steps: none found: the consumer changed no file under its store directory \
                    (a store elsewhere, PostgreSQL say, cannot be split from outside)"
                .to_string();
        }
        let judged = match self.sampled_out {
            0 => "each judged".to_string(),
            out => format!(
                "{} judged, {out} left out (at most {} per step: a seeded sample of the rest)",
                self.judged,
                crate::killpoints::POINTS_PER_STEP_MAX
            ),
        };
        let restarts = match self.restarts {
            0 => String::new(),
            n => format!(", an owner restarted on {n}"),
        };
        let mut text = format!(
            "{} kill points inside {} steps, {judged} ({} distinct stores read{restarts})",
            self.found, self.steps, self.reads
        );
        if self.writes_unseen > 0 {
            text.push_str(&format!(
                "; {} owner steps changed the model's store with no write under the store directory",
                self.writes_unseen
            ));
        }
        text
    }
}

impl Inside {
    /// What power cuts were judged, for a summary line, or why none was.
    pub fn power_summary(&self, on: bool) -> String {
        if !on {
            return "power cuts: not tried (--power-cuts off): every kill kept what the page cache held".to_string();
        }
        if self.found == 0 {
            return "power cuts: not tried: the consumer changed no file under its store directory (a store \
                    elsewhere is trusted for durability)"
                .to_string();
        }
        format!(
            "power cuts (every change not synced lost) at each kill point and after every step: {} judged, {} \
             syncs traced inside steps",
            self.power_cuts, self.syncs
        )
    }
}

impl Inside {
    /// What races were run, for a summary line, or why none was.
    pub fn race_summary(&self, on: bool) -> String {
        if !on {
            return "owners raced inside steps: not tried (--races off)".to_string();
        }
        if self.races == 0 {
            return format!(
                "owners raced inside steps: none: no hold landed (a store the consumer never locks is not raced){}",
                if self.races_refused > 0 { "; some not run, a restarted owner refusing the model's step" } else { "" }
            );
        }
        let mut blocked = match self.races_blocked {
            0 => String::new(),
            n => format!("; {n} where the second waited on the first's lock, not counted"),
        };
        if self.races_refused > 0 {
            let n = self.races_refused;
            blocked.push_str(&format!("; {n} not run, a restarted owner refusing the model's step"));
        }
        format!(
            "owners raced inside steps: {} races in {} steps (the writer or a second incarnation's claim held at \
             a transaction's begin while the other ran{blocked})",
            self.races, self.race_steps
        )
    }
}

impl std::ops::AddAssign for Inside {
    fn add_assign(&mut self, other: Inside) {
        self.found += other.found;
        self.judged += other.judged;
        self.sampled_out += other.sampled_out;
        self.reads += other.reads;
        self.steps += other.steps;
        self.writes_unseen += other.writes_unseen;
        self.restarts += other.restarts;
        self.power_cuts += other.power_cuts;
        self.syncs += other.syncs;
        self.races += other.races;
        self.race_steps += other.race_steps;
        self.races_blocked += other.races_blocked;
        self.races_refused += other.races_refused;
    }
}

/// Why a replay did not conform. Every variant renders as lines naming the step.
#[derive(Debug)]
pub enum ReplayFailure {
    /// The model no longer accepts the trace (the model changed since it was written).
    ModelUnreachable { step: usize, action: Action },
    /// The real system refused or failed a step the model took. (`named`, in this and the
    /// variants below: the action in words as the model's state before it names its owner,
    /// `model::view::action_text`: `g0/o0'` for an earlier incarnation of o0.)
    RealFailed { step: usize, action: Option<Action>, named: Option<String>, error: Box<Error> },
    /// After a step, the real state differs from the model's: both side by side
    /// (`table`), and the full states' line diff.
    Divergence { step: usize, action: Option<Action>, named: Option<String>, table: String, diff: String },
    /// The property verdicts differ between model and real system, or from the trace's record.
    VerdictMismatch { property: String, model: bool, real: bool, recorded: Option<Verdict> },
    /// The trace records a `sometimes` property as reached (a fault struck, a defence fired),
    /// and the model or the real system did not reach it.
    NotReached { property: String, model: bool, real: bool },
    /// A kill inside a step left a store that is neither the model's before the step nor
    /// after it: `point` is the kill point (`write 3 of 5 (pwrite64 on store.db-journal)`),
    /// `shows` the store in a few words, `table` the three stores side by side.
    NotAtomic {
        step: usize,
        action: Option<Action>,
        named: Option<String>,
        point: String,
        shows: String,
        table: String,
    },
    /// A power cut (every change not synced lost, `killpoints::Durability`) inside a step or
    /// right after it left a store the model never passes through there: `point` is where
    /// (`right after write 3 of 5 (...)`, `right after the step`), `shows` the store in a few
    /// words and the acknowledged step the cut takes back (or that the store matches no state
    /// of the model's), `table` the model's stores beside the one the cut left.
    PowerCutLoses {
        step: usize,
        action: Option<Action>,
        named: Option<String>,
        point: String,
        shows: String,
        table: String,
    },
    /// Two incarnations of an owner raced inside a step left a store the model's fence never
    /// leaves: `race` says who was held where and what the other did, `table` the model's
    /// store beside the real one.
    RaceDiverges { step: usize, action: Option<Action>, named: Option<String>, race: String, table: String },
    /// With an observation spec, the store role reported a store the database does not hold
    /// (`error` is `Error::RoleDisagrees`, naming the fields).
    Misreported { step: usize, action: Option<Action>, named: Option<String>, error: Box<Error> },
    /// An owner restarted on the copy a kill point left took leases, or left a store, that the
    /// model's restart from neither side of the step takes: `differs` says the first
    /// difference in words, `table` the two restarts of the model beside the real one.
    RestartDiverges {
        step: usize,
        action: Option<Action>,
        named: Option<String>,
        point: String,
        /// Who was restarted and what it did differently: `g0/o0 restarted on what the kill
        /// left, the restarted owner took ...`.
        differs: String,
        table: String,
    },
    /// An owner's step opened a file outside the store directory for writing (`call` and the
    /// file's real path): state there is in no copy a kill point takes, so no kill is judged.
    OutsideStore { step: usize, action: Option<Action>, named: Option<String>, call: String, path: String },
    /// An owner maps a store file shared and writable: its stores to memory change the file
    /// between any two instructions, where no traced call is, so no kill among them is tried.
    MappedStore { step: usize, action: Option<Action>, named: Option<String>, file: String },
}

impl ReplayFailure {
    /// Where the replay failed, for a summary line: `step 3`, `the initial state`, `the verdict
    /// of no-duplicate`.
    /// How many of a trace's `steps` steps the real system ran before this failure: up to and
    /// including the failing one, none past a step the model refused, all of them for a verdict
    /// compared at the end.
    pub fn steps_run(&self, steps: usize) -> usize {
        match self {
            ReplayFailure::ModelUnreachable { step, .. } => step.saturating_sub(1),
            ReplayFailure::RealFailed { step, .. }
            | ReplayFailure::Divergence { step, .. }
            | ReplayFailure::Misreported { step, .. }
            | ReplayFailure::NotAtomic { step, .. }
            | ReplayFailure::PowerCutLoses { step, .. }
            | ReplayFailure::RaceDiverges { step, .. }
            | ReplayFailure::RestartDiverges { step, .. }
            | ReplayFailure::OutsideStore { step, .. }
            | ReplayFailure::MappedStore { step, .. } => *step,
            ReplayFailure::VerdictMismatch { .. } | ReplayFailure::NotReached { .. } => steps,
        }
    }

    pub fn place(&self) -> String {
        match self {
            ReplayFailure::ModelUnreachable { step, .. } => format!("step {step} (in the model)"),
            ReplayFailure::RealFailed { step: 0, action: None, .. }
            | ReplayFailure::Divergence { step: 0, action: None, .. }
            | ReplayFailure::Misreported { step: 0, action: None, .. } => "the initial state".to_string(),
            ReplayFailure::RealFailed { step, .. }
            | ReplayFailure::Divergence { step, .. }
            | ReplayFailure::Misreported { step, .. }
            | ReplayFailure::NotAtomic { step, .. }
            | ReplayFailure::PowerCutLoses { step, .. }
            | ReplayFailure::RaceDiverges { step, .. }
            | ReplayFailure::RestartDiverges { step, .. }
            | ReplayFailure::OutsideStore { step, .. }
            | ReplayFailure::MappedStore { step, .. } => format!("step {step}"),
            ReplayFailure::VerdictMismatch { property, .. } | ReplayFailure::NotReached { property, .. } => {
                format!("the verdict of {property}")
            }
        }
    }
}

impl fmt::Display for ReplayFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let step_name = |step: &usize, named: &Option<String>| match named {
            Some(named) => format!("step {step} ({named})"),
            None => "the initial state".to_string(),
        };
        match self {
            ReplayFailure::ModelUnreachable { step, action } => {
                write!(f, "the model no longer accepts step {step} ({action}): regenerate or fix the trace")
            }
            ReplayFailure::RealFailed { step, named, error, .. } => {
                write!(f, "the real system failed {}: {error}", step_name(step, named))
            }
            ReplayFailure::Divergence { step, named, table, diff, .. } => write!(
                f,
                "divergence after {}:\n{table}\nthe full states, model (-) vs real (+):\n{diff}",
                step_name(step, named)
            ),
            ReplayFailure::VerdictMismatch { property, model, real, recorded } => write!(
                f,
                "verdict of {property}: model says {}, real system says {}, the trace records {}",
                word(*model),
                word(*real),
                recorded.as_ref().map_or("nothing", Verdict::word)
            ),
            ReplayFailure::NotReached { property, model, real } => write!(
                f,
                "{property}: the trace records it reached; the model {} it, the real system {} it",
                if *model { "reached" } else { "never reached" },
                if *real { "reached" } else { "never reached" }
            ),
            ReplayFailure::Misreported { step, named, error, .. } => {
                write!(f, "divergence after {}: {error}", step_name(step, named))
            }
            ReplayFailure::NotAtomic { step, named, point, shows, table, .. } => write!(
                f,
                "{} is not atomic: killed after {point}, the store shows {shows}\n{table}",
                step_name(step, named)
            ),
            ReplayFailure::PowerCutLoses { step, named, point, shows, table, .. } => write!(
                f,
                "{} does not survive a power cut: cut {point}, the store shows {shows} (a change is durable once \
                 its file is synced, and a file made, renamed or removed once its directory is)\n{table}",
                step_name(step, named)
            ),
            ReplayFailure::RaceDiverges { step, named, race, table, .. } => write!(
                f,
                "two owners raced inside {}: {race} (a check or a read in one transaction and the write \
                 that trusts it in another, or state kept outside the store's transactions?)\n{table}",
                step_name(step, named)
            ),
            ReplayFailure::RestartDiverges { step, named, point, differs, table, .. } => write!(
                f,
                "a restart inside {} diverges: killed after {point} and {differs} (state kept where the \
                 store's reader does not look, a restart position or what was applied?)\n{table}",
                step_name(step, named)
            ),
            ReplayFailure::OutsideStore { step, named, call, path, .. } => write!(
                f,
                "{} wrote outside the store directory: {call} {path}; a kill's copy of the store directory \
                 does not hold it, so no kill inside a step can be judged (keep every durable file under \
                 init's store directory)",
                step_name(step, named)
            ),
            ReplayFailure::MappedStore { step, named, file, .. } => write!(
                f,
                "an owner maps {file} of its store shared and writable (seen by the end of {}): a kill can fall \
                 between any two of its stores to that memory, where the tracer has no call to stop at, so the \
                 claim cannot be certified (write the store with write calls, as a database does)",
                step_name(step, named)
            ),
        }
    }
}

impl std::error::Error for ReplayFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReplayFailure::RealFailed { error, .. } | ReplayFailure::Misreported { error, .. } => Some(error.as_ref()),
            ReplayFailure::ModelUnreachable { .. }
            | ReplayFailure::Divergence { .. }
            | ReplayFailure::VerdictMismatch { .. }
            | ReplayFailure::NotReached { .. }
            | ReplayFailure::NotAtomic { .. }
            | ReplayFailure::PowerCutLoses { .. }
            | ReplayFailure::RaceDiverges { .. }
            | ReplayFailure::RestartDiverges { .. }
            | ReplayFailure::OutsideStore { .. }
            | ReplayFailure::MappedStore { .. } => None,
        }
    }
}

fn word(violated: bool) -> &'static str {
    if violated {
        "violated"
    } else {
        "holds"
    }
}

/// Replays `trace` against a fresh real system.
pub fn replay(trace: &Trace, options: &Options) -> Result<ReplayReport, ReplayFailure> {
    replay_counted(trace, options, &mut Inside::default())
}

/// `replay`, adding the kill points it tried inside steps to `tried` whether or not the trace
/// conforms (the report's `inside` is this trace's alone).
pub fn replay_counted(trace: &Trace, options: &Options, tried: &mut Inside) -> Result<ReplayReport, ReplayFailure> {
    replay_shared(trace, options, tried, &mut CopyCache::default())
}

/// `replay_counted`, with the restarts on copies that earlier replays made (`restarts`, which
/// this one adds to): a restart is judged by all it depends on (`RestartKey`: the copy, the
/// owner's start request, the log and the steps asked), whichever trace asked it first, so
/// the traces of one run that share a prefix restart an owner on it once.
pub fn replay_shared(
    trace: &Trace,
    options: &Options,
    tried: &mut Inside,
    restarts: &mut CopyCache,
) -> Result<ReplayReport, ReplayFailure> {
    let mut judge = Judge { cache: std::mem::take(restarts), ..Judge::default() };
    let result = replay_judged(trace, options, &mut judge);
    *restarts = std::mem::take(&mut judge.cache);
    *tried += judge.inside;
    result.map(|report| ReplayReport { inside: judge.inside, unseen_writes: judge.unseen, ..report })
}

/// What the replays of one run learnt from copies of the store: the stores each copy showed,
/// by its reader and its bytes, and the restarts made, by what each is judged on, with what
/// each made (`Err`: the index of its job's error, kept for the first trace that meets it).
#[derive(Default)]
pub struct CopyCache {
    /// By the reader (`Harness::reader_identity`), then by the copy's bytes.
    read: HashMap<String, HashMap<Snapshot, Vec<ModelStore>>>,
    /// (Looked up only, never iterated.)
    asked: HashSet<RestartKey>,
    restarted: HashMap<RestartKey, Result<Restarted, usize>>,
    errors: Vec<Option<Error>>,
    /// The races run, by what each depends on.
    raced: HashMap<RaceKey, RaceOutcome>,
}

fn replay_judged(trace: &Trace, options: &Options, judge: &mut Judge) -> Result<ReplayReport, ReplayFailure> {
    let model = ConsumerModel::new(trace.config.clone());
    let expected = model_replay(&model, &trace.actions).map_err(|unreachable| ReplayFailure::ModelUnreachable {
        step: unreachable.step,
        action: unreachable.action,
    })?;
    let fail = |step, (action, named), error| match error {
        Error::RoleDisagrees { .. } => ReplayFailure::Misreported { step, action, named, error: Box::new(error) },
        error => ReplayFailure::RealFailed { step, action, named, error: Box::new(error) },
    };
    let mut harness = Harness::new(&trace.config, options).map_err(|error| fail(0, (None, None), error))?;
    let walked = (|| {
        let mut observed = vec![harness.observe().map_err(|error| fail(0, (None, None), error))?];
        compare(0, (None, None), &expected[0], &observed[0])?;
        // The initial owners' starts: the model's initial state is the one after them.
        let first = trace.actions.first().copied();
        judge.step(&mut harness, &model, (0, None), first, None, (&expected[0], &expected[0]))?;
        for (index, action) in trace.actions.iter().enumerate() {
            let step = index + 1;
            let at = || (Some(*action), Some(model::view::action_text(&expected[index], action)));
            // A restart on a copy reads the live log: the ones asked finish before it changes.
            if !matches!(action.actor(), Actor::Owner { .. }) {
                judge.settle();
            }
            // A race starts from the store before an owner's step.
            let copy_before = match harness.races_copies() && matches!(action.actor(), Actor::Owner { .. }) {
                true => Some(harness.store_copy().map_err(|error| fail(step, at(), error))?),
                false => None,
            };
            let state = harness.apply(action).map_err(|error| fail(step, at(), error))?;
            compare(step, at(), &expected[step], &state)?;
            observed.push(state);
            let next = trace.actions.get(step).copied();
            let sides = (&expected[index], &expected[step]);
            judge.step(&mut harness, &model, (step, Some(*action)), next, copy_before.as_ref(), sides)?;
        }
        Ok(observed)
    })();
    // The restarts asked along the way are judged now, while the harness's directory (where
    // their copies are) still exists; the earlier of two failures is the one reported.
    let restarted = judge.finish();
    let observed = match (walked, restarted) {
        (Ok(observed), Ok(())) => observed,
        (Err(walked), Ok(())) => return Err(walked),
        (Ok(_), Err(restarted)) => return Err(restarted),
        (Err(walked), Err(restarted)) => {
            // At the same step a restart's failure names the cause more narrowly than a race's
            // (which restarts the owner too, and runs its steps against a second one).
            let (at_restart, at_walk) = (restarted.steps_run(usize::MAX), walked.steps_run(usize::MAX));
            let raced = matches!(walked, ReplayFailure::RaceDiverges { .. });
            let earlier = at_restart < at_walk || (at_restart == at_walk && raced);
            return Err(if earlier { restarted } else { walked });
        }
    };
    drop(harness);
    verdicts(&model, trace, &expected, &observed)
}

/// Judges the kill points inside each step: a SIGKILL there must leave the model's store from
/// before the step or from after it (spec.md §11: a step is atomic under crashes). The stores a
/// copy shows are remembered by the copy's bytes (`CopyCache`), so a copy equal to one read
/// before, in this trace or an earlier one of the run, costs no reader.
#[derive(Default)]
struct Judge {
    inside: Inside,
    unseen: Vec<String>,
    /// The restarts asked so far, and what they made once done; the judgements waiting for
    /// them: they run off the replay's path (`RestartQueue`) and are judged, in step order,
    /// when the trace ends.
    cache: CopyCache,
    checks: Vec<RestartCheck>,
    queue: Option<RestartQueue>,
    /// Per step judged so far (0: the set-up), the model's stores after it and its name: what
    /// a power cut that took steps back is compared with.
    history: Vec<(Vec<ModelStore>, Option<String>)>,
}

/// What a race depends on besides the consumer: the store it starts from, the owner's start
/// request, the plan and the log.
#[derive(Clone, PartialEq, Eq, Hash)]
struct RaceKey {
    copy: Snapshot,
    start: String,
    plan: RacePlan,
    log: (Vec<Vec<i64>>, Vec<model::state::Offset>),
}

impl Judge {
    /// Judges the kill points of step `step` (`action`, `None` for the initial owners' starts)
    /// between the model's states `before` and `after`; `next` is the trace's next action.
    fn step(
        &mut self,
        harness: &mut Harness,
        model: &ConsumerModel,
        (step, action): (usize, Option<Action>),
        next: Option<Action>,
        copy_before: Option<&Snapshot>,
        (before, after): (&State, &State),
    ) -> Result<(), ReplayFailure> {
        let named = action.map(|action| model::view::action_text(before, &action));
        let windows = harness.take_windows();
        let reader = harness.reader_identity();
        self.atomic(harness, &reader, (step, action, &named), &windows, (before, after))?;
        self.power_cuts(harness, &reader, (step, action, &named), &windows, (before, after))?;
        if harness.restarts_copies() {
            self.restarts(harness, &reader, model, (step, action, &named), next, &windows, (before, after));
        }
        // After the restarts are asked: a race's failure gives way to a restart's at the same step.
        if let Some(copy) = copy_before {
            self.races(harness, model, (step, action, &named), copy, (before, after))?;
        }
        self.history.push((stores_of(after), named));
        Ok(())
    }

    /// An owner's step that changes the store, raced (protocol mode, `Harness::races_copies`)
    /// in both orders on a copy of the store from before it: the owner restarted and walked to
    /// the step, held at each of its transactions' begins in turn while a second incarnation
    /// claims and takes its steps (`RaceOrder::FirstHeld`), and the second held inside its
    /// start's claim while the first takes the step (`SecondHeld`); `RACE_BEGINS_MAX` holds at
    /// most per order, until one lands nowhere. Released, the store must be what the model
    /// leaves for the same (`model_race`). A fence read in one transaction and written in
    /// another is caught by the first order's hold between the two; a claim that reads in one
    /// transaction and writes in another, by the second's.
    fn races(
        &mut self,
        harness: &Harness,
        model: &ConsumerModel,
        (step, action, named): (usize, Option<Action>, &Option<String>),
        copy: &Snapshot,
        (before, after): (&State, &State),
    ) -> Result<(), ReplayFailure> {
        // An owner's write (a fenced step), not a start's claim: the race is about the write.
        let Some(action) = action.filter(|action| action.owner_write().is_some()) else { return Ok(()) };
        let Actor::Owner { group, owner } = action.actor() else { return Ok(()) };
        if !harness.is_current_slot(owner) || stores_of(before) == stores_of(after) {
            return Ok(());
        }
        let racer = harness.racer(group, owner);
        let (start, log) = (harness.restart_request(group, owner), (before.log.clone(), before.log_start.clone()));
        let mut raced = false;
        for order in [RaceOrder::FirstHeld, RaceOrder::SecondHeld] {
            let Some((plan, expected)) = model_race(model, before, (group, owner), Some(action), order) else {
                continue;
            };
            for begins_passed in 0..RACE_BEGINS_MAX {
                let plan = RacePlan { begins_passed, ..plan.clone() };
                let key = RaceKey { copy: copy.clone(), start: start.clone(), plan: plan.clone(), log: log.clone() };
                let outcome = match self.cache.raced.get(&key) {
                    Some(outcome) => outcome.clone(),
                    None => {
                        let outcome = racer.race(copy, &plan).map_err(|error| ReplayFailure::RealFailed {
                            step,
                            action: Some(action),
                            named: named.clone(),
                            error: Box::new(error),
                        })?;
                        self.cache.raced.insert(key, outcome.clone());
                        outcome
                    }
                };
                let (stores, reply) = match outcome {
                    RaceOutcome::NotHeld => break,
                    RaceOutcome::Blocked => {
                        self.inside.races_blocked += 1;
                        continue;
                    }
                    // The restarts on copies judge a restart that refuses the model's steps.
                    RaceOutcome::Refused(_) => {
                        self.inside.races_refused += 1;
                        break;
                    }
                    RaceOutcome::Raced { stores, reply } => (stores, reply),
                };
                self.inside.races += 1;
                if !raced {
                    raced = true;
                    self.inside.race_steps += 1;
                }
                if stores != expected {
                    let race = race_text((group, owner), &plan, &reply, (&stores, &expected));
                    let all: [&[ModelStore]; 2] = [&expected, &stores];
                    let table = crate::diff::side_by_side(&stores_lines(&expected, &all), &stores_lines(&stores, &all));
                    let (action, named) = (Some(action), named.clone());
                    return Err(ReplayFailure::RaceDiverges { step, action, named, race, table });
                }
            }
        }
        Ok(())
    }

    /// Reads the copies among `snapshots` not read before (by this reader), each once.
    fn read_copies<'a>(
        &mut self,
        harness: &Harness,
        reader: &str,
        (step, action, named): (usize, Option<Action>, &Option<String>),
        snapshots: impl Iterator<Item = &'a Snapshot>,
    ) -> Result<(), ReplayFailure> {
        let read = self.cache.read.entry(reader.to_string()).or_default();
        let mut unread: Vec<&Snapshot> = Vec::new();
        for snapshot in snapshots {
            if !read.contains_key(snapshot) && !unread.contains(&snapshot) {
                unread.push(snapshot);
            }
        }
        let shown = harness.observe_copies(&unread).map_err(|error| ReplayFailure::RealFailed {
            step,
            action,
            named: named.clone(),
            error: Box::new(error),
        })?;
        self.inside.reads += unread.len();
        for (snapshot, stores) in unread.into_iter().zip(shown) {
            read.insert(snapshot.clone(), stores);
        }
        Ok(())
    }

    /// A power cut at each kill point must leave the model's store from before the step or
    /// from after it, and one right after the step (every reply in) the store from after it:
    /// a step acknowledged survives. The cut's store is what the traced syncs made durable
    /// (`killpoints::Durability`); the first that fails names the acknowledged step it loses.
    fn power_cuts(
        &mut self,
        harness: &Harness,
        reader: &str,
        (step, action, named): (usize, Option<Action>, &Option<String>),
        windows: &[(u8, u8, Window)],
        (before, after): (&State, &State),
    ) -> Result<(), ReplayFailure> {
        // A step of the producer's or the coordinator's writes no owner's state: what the
        // store role or the harness wrote in it (a claim, the relay's copy) is taken as durable.
        if action.is_some_and(|action| !matches!(action.actor(), Actor::Owner { .. })) {
            harness.assume_durable().map_err(|error| ReplayFailure::RealFailed {
                step,
                action,
                named: named.clone(),
                error: Box::new(error),
            })?;
        }
        let Some(now) = harness.power_cut() else { return Ok(()) };
        // (where, the cut's store, whether only the after-state will do)
        let mut cuts: Vec<(String, &Snapshot, bool)> = Vec::new();
        for (_, _, window) in windows {
            self.inside.syncs += window.syncs;
            for point in &window.points {
                let Some(cut) = &point.power_cut else { continue };
                let place = format!(
                    "right after {} {} of {} ({point})",
                    point_noun(point.syscall),
                    point.ordinal,
                    window.found
                );
                cuts.push((place, cut, false));
            }
        }
        cuts.push(("right after the step".to_string(), &now, true));
        self.read_copies(harness, reader, (step, action, named), cuts.iter().map(|(_, cut, _)| *cut))?;
        let read = &self.cache.read[reader];
        let (stores_before, stores_after) = (stores_of(before), stores_of(after));
        let mut first_failure = None;
        for (place, cut, acknowledged) in cuts {
            self.inside.power_cuts += 1;
            let shown = &read[cut];
            let survives = *shown == stores_after || (!acknowledged && *shown == stores_before);
            if survives || first_failure.is_some() {
                continue;
            }
            let all: [&[ModelStore]; 3] = [&stores_before, &stores_after, shown];
            first_failure = Some(ReplayFailure::PowerCutLoses {
                step,
                action,
                named: named.clone(),
                point: place,
                shows: format!("{}: {}", stores_text(shown), self.lost(shown, (step, named))),
                table: crate::diff::three_columns(
                    ("model before", &stores_lines(&stores_before, &all)),
                    ("model after", &stores_lines(&stores_after, &all)),
                    ("power cut there", &stores_lines(shown, &all)),
                ),
            });
        }
        first_failure.map_or(Ok(()), Err)
    }

    /// Which acknowledged step a cut that left `shown` took back: the first that changed the
    /// store after the latest state the model passed through that `shown` is.
    fn lost(&self, shown: &[ModelStore], (step, named): (usize, &Option<String>)) -> String {
        let name = |index: usize, named: &Option<String>| match named {
            Some(named) => format!("step {index} ({named})"),
            None => "the set-up".to_string(),
        };
        let Some(matched) = self.history.iter().rposition(|(stores, _)| stores.as_slice() == shown) else {
            return "the store is none the model passed through up to here".to_string();
        };
        let (kept, kept_named) = (&self.history[matched].0, &self.history[matched].1);
        let lost = self.history[matched + 1..]
            .iter()
            .enumerate()
            .find(|(_, (stores, _))| stores != kept)
            .map_or_else(|| name(step, named), |(offset, (_, lost_named))| name(matched + 1 + offset, lost_named));
        let kept = match matched {
            0 => "as set up".to_string(),
            _ => format!("as after {}", name(matched, kept_named)),
        };
        format!("{lost}, acknowledged, is lost: the store reads {kept}")
    }

    /// Every kill point must leave the model's store from before the step or from after it.
    fn atomic(
        &mut self,
        harness: &Harness,
        reader: &str,
        (step, action, named): (usize, Option<Action>, &Option<String>),
        windows: &[(u8, u8, Window)],
        (before, after): (&State, &State),
    ) -> Result<(), ReplayFailure> {
        let named = named.clone();
        let mut outside = windows.iter().flat_map(|(_, _, window)| &window.outside);
        if let Some((call, path)) = outside.find(|(_, path)| !harness.is_onceproof_file(path)) {
            let (call, path) = (call.to_string(), path.display().to_string());
            return Err(ReplayFailure::OutsideStore { step, action, named, call, path });
        }
        if let Some(file) = windows.iter().find_map(|(_, _, window)| window.mapped.first()) {
            let file = file.display().to_string();
            return Err(ReplayFailure::MappedStore { step, action, named, file });
        }
        let found: usize = windows.iter().map(|(_, _, window)| window.found).sum();
        let (stores_before, stores_after) = (stores_of(before), stores_of(after));
        let traced = harness.traced();
        if found == 0 {
            let owner_write = action.is_some_and(|action| {
                matches!(action.actor(), model::action::Actor::Owner { .. }) && !matches!(action, Action::Crash { .. })
            });
            if traced && owner_write && stores_before != stores_after {
                self.inside.writes_unseen += 1;
                let named = named.map_or_else(String::new, |named| format!(" ({named})"));
                self.unseen.push(format!("step {step}{named}"));
            }
            return Ok(());
        }
        self.inside.found += found;
        self.inside.steps += 1;
        self.inside.sampled_out += windows.iter().map(|(_, _, w)| w.found - w.points.len()).sum::<usize>();
        let points: Vec<_> =
            windows.iter().flat_map(|(_, _, window)| window.points.iter().map(move |p| (p, window.found))).collect();
        self.read_copies(harness, reader, (step, action, &named), points.iter().map(|(point, _)| &point.snapshot))?;
        let read = &self.cache.read[reader];
        // Every point is judged (the count stays exact); the first that fails is reported.
        let mut first_failure = None;
        for (point, of) in points {
            self.inside.judged += 1;
            let shown = &read[&point.snapshot];
            if *shown == stores_before || *shown == stores_after || first_failure.is_some() {
                continue;
            }
            let place = format!("{} {} of {of} ({point})", point_noun(point.syscall), point.ordinal);
            first_failure = Some(ReplayFailure::NotAtomic {
                step,
                action,
                named: named.clone(),
                point: place,
                shows: stores_text(shown),
                table: {
                    let all: [&[ModelStore]; 3] = [&stores_before, &stores_after, shown];
                    crate::diff::three_columns(
                        ("model before", &stores_lines(&stores_before, &all)),
                        ("model after", &stores_lines(&stores_after, &all)),
                        ("killed there", &stores_lines(shown, &all)),
                    )
                },
            });
        }
        first_failure.map_or(Ok(()), Err)
    }

    /// Every kill point of an owner's step is judged again by what a restart makes of it: the
    /// owner (a current incarnation) started on the copy must take the leases, and leave the
    /// store, that the model's restart takes from the state the copy shows (before the step or
    /// after it), and its next steps must leave what the model's leave: the trace's next action
    /// where the restart enables it, else the first the model enables for it. A restart
    /// position kept where the store's reader does not look (a file of its own) shows here,
    /// whatever the store's rows say, and one the owner reports but does not act on shows in
    /// its next steps. The restarts are asked here and judged by `finish`.
    #[allow(clippy::too_many_arguments)]
    fn restarts(
        &mut self,
        harness: &Harness,
        reader: &str,
        model: &ConsumerModel,
        (step, action, named): (usize, Option<Action>, &Option<String>),
        next: Option<Action>,
        windows: &[(u8, u8, Window)],
        (before, after): (&State, &State),
    ) {
        let owners: BTreeSet<(u8, u8)> = windows
            .iter()
            .filter(|(_, slot, window)| harness.is_current_slot(*slot) && !window.points.is_empty())
            .map(|(group, slot, _)| (*group, *slot))
            .collect();
        let sides = [stores_of(before), stores_of(after)];
        let read = &self.cache.read[reader];
        for (group, slot) in owners {
            let expected = [before, after].map(|state| model_restart(model, state, group, slot, next));
            let mut check = RestartCheck {
                step,
                action,
                named: named.clone(),
                owner: (group, slot),
                points: Vec::new(),
                expected: expected.clone(),
            };
            let mut asked: [(Vec<Snapshot>, Vec<RestartKey>); 2] = Default::default();
            let points = windows
                .iter()
                .filter(|(g, o, _)| (*g, *o) == (group, slot))
                .flat_map(|(_, _, window)| window.points.iter().map(move |point| (point, window.found)));
            for (point, of) in points {
                // The side of the step a copy shows: after when it shows the after-state (a
                // step that changed no store restarts alike from both).
                let shown = read[&point.snapshot].clone();
                let side = usize::from(shown == sides[1]);
                let key = RestartKey {
                    shown,
                    residue: harness.restart_residue(&point.snapshot),
                    owner: (group, slot),
                    start: harness.restart_request(group, slot),
                    next: expected[side].1.clone(),
                    log: (before.log.clone(), before.log_start.clone()),
                };
                if self.cache.asked.insert(key.clone()) {
                    asked[side].0.push(point.snapshot.clone());
                    asked[side].1.push(key.clone());
                }
                let place = format!("{} {} of {of} ({point})", point_noun(point.syscall), point.ordinal);
                check.points.push((place, side, key));
            }
            for (side, (snapshots, keys)) in asked.into_iter().enumerate() {
                if snapshots.is_empty() {
                    continue;
                }
                self.inside.restarts += snapshots.len();
                let job = RestartJob {
                    restarter: harness.restarter(group, slot),
                    snapshots,
                    keys,
                    next: expected[side].1.clone(),
                };
                self.queue.get_or_insert_with(RestartQueue::start).submit(job);
            }
            self.checks.push(check);
        }
    }

    /// Waits for every restart asked so far, keeping what each made.
    fn settle(&mut self) {
        let Some(queue) = &mut self.queue else { return };
        for (keys, result) in queue.wait() {
            let cache = &mut self.cache;
            match result {
                Ok(results) => cache.restarted.extend(keys.into_iter().zip(results.into_iter().map(Ok))),
                Err(error) => {
                    cache.restarted.extend(keys.into_iter().map(|key| (key, Err(cache.errors.len()))));
                    cache.errors.push(Some(error));
                }
            }
        }
    }

    /// Waits for the restarts asked and judges them, in step order: the first that fails.
    fn finish(&mut self) -> Result<(), ReplayFailure> {
        self.settle();
        self.queue = None;
        for check in std::mem::take(&mut self.checks) {
            check.judge(&self.cache.restarted, &mut self.cache.errors)?;
        }
        Ok(())
    }
}

/// The restarts of one owner's kill points in one step, waiting to be judged.
struct RestartCheck {
    step: usize,
    action: Option<Action>,
    named: Option<String>,
    /// (group, slot).
    owner: (u8, u8),
    /// Each point's place in words, the side of the step its copy shows (0 before, 1 after)
    /// and what its restart is judged on.
    points: Vec<(String, usize, RestartKey)>,
    /// The model's restart from before the step and from after it, with the steps asked next.
    expected: [(Restarted, Vec<Step>); 2],
}

impl RestartCheck {
    /// The restart must be the model's from the side of the step the copy shows: leases from
    /// after beside a store from before is a restart position kept elsewhere.
    fn judge(
        self,
        restarted: &HashMap<RestartKey, Result<Restarted, usize>>,
        errors: &mut [Option<Error>],
    ) -> Result<(), ReplayFailure> {
        let (step, action, (group, slot)) = (self.step, self.action, self.owner);
        for (point, side, key) in &self.points {
            let real = match &restarted[key] {
                Ok(real) => real,
                Err(index) => {
                    let error = errors[*index].take().unwrap_or(Error::Unsupported("a restart on a copy that failed"));
                    return Err(ReplayFailure::RealFailed { step, action, named: self.named, error: Box::new(error) });
                }
            };
            let (from, steps) = &self.expected[*side];
            if real.agrees_with(from) {
                continue;
            }
            return Err(ReplayFailure::RestartDiverges {
                step,
                action,
                named: self.named.clone(),
                point: point.clone(),
                table: crate::diff::three_columns(
                    ("model's restart from before", &restart_lines(&self.expected[0].0, group)),
                    ("from after", &restart_lines(&self.expected[1].0, group)),
                    ("restarted there", &restart_lines(real, group)),
                ),
                differs: format!(
                    "{}/{} restarted on what the kill left, {}",
                    crate::harness::group_name(group),
                    crate::harness::owner_name(slot),
                    restart_difference(from, real, steps)
                ),
            });
        }
        Ok(())
    }
}

/// Restarts on copies of one owner, asked next of each (`Restarter::restart_all`).
struct RestartJob {
    restarter: Restarter,
    snapshots: Vec<Snapshot>,
    keys: Vec<RestartKey>,
    next: Vec<Step>,
}

type RestartResult = (Vec<RestartKey>, Result<Vec<Restarted>, Error>);

/// Runs the restarts on copies on a thread of their own, one job after another in the order
/// asked, while the replay goes on: a restart is mostly a process's start, and the replay's
/// steps mostly wait on the consumer's replies.
struct RestartQueue {
    jobs: Option<std::sync::mpsc::Sender<RestartJob>>,
    results: std::sync::mpsc::Receiver<RestartResult>,
    worker: Option<std::thread::JoinHandle<()>>,
    /// Jobs submitted and not yet waited for.
    waiting: usize,
}

impl RestartQueue {
    fn start() -> RestartQueue {
        let (jobs, asked) = std::sync::mpsc::channel::<RestartJob>();
        let (answer, results) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            for job in asked {
                let result = job.restarter.restart_all(&job.snapshots, &job.next);
                if answer.send((job.keys, result)).is_err() {
                    return;
                }
            }
        });
        RestartQueue { jobs: Some(jobs), results, worker: Some(worker), waiting: 0 }
    }

    fn submit(&mut self, job: RestartJob) {
        let jobs = self.jobs.as_ref().expect("a queue takes jobs until it is dropped");
        jobs.send(job).expect("the restart worker runs until its queue is dropped");
        self.waiting += 1;
    }

    /// The results of every job submitted and not yet waited for, once the worker has run
    /// them.
    fn wait(&mut self) -> Vec<RestartResult> {
        let waiting = std::mem::take(&mut self.waiting);
        (0..waiting).map(|_| self.results.recv().expect("the restart worker answers every job")).collect()
    }

    fn stop(&mut self) {
        self.jobs = None;
        if let Some(worker) = self.worker.take() {
            worker.join().expect("the restart worker does not panic");
        }
    }
}

impl Drop for RestartQueue {
    /// The copies live in the harness's directory: the worker is done before the harness goes.
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a restart on a copy is judged by: the stores the copy shows, the rest of its files,
/// the owner (group, slot) and all it is told at its start, the steps it is asked next and the
/// log they read (its records and start).
#[derive(Clone, PartialEq, Eq, Hash)]
struct RestartKey {
    shown: Vec<ModelStore>,
    residue: Snapshot,
    owner: (u8, u8),
    /// The owner's start request but for the paths of the harness's directory.
    start: String,
    next: Vec<Step>,
    log: (Vec<Vec<i64>>, Vec<model::state::Offset>),
}

/// How many steps a restarted owner is asked after its start, at most: enough for a fetch and
/// the write that follows it (a position kept elsewhere may only show in the write).
const RESTART_STEPS_MAX: usize = 3;

/// The model's restart of `owner` (a current slot) of `group` after a crash in `state`: the
/// leases it takes, the stores after its start, and what its next steps leave, with those
/// steps as the real owner is sent them. Each next step is `trace_next` when the state enables
/// it, else the first step the model enables for the owner that touches only the store and
/// the log (`harness::restart_step`); the steps end after the first that changes a store, at
/// `RESTART_STEPS_MAX`, or where the model enables none.
fn model_restart(
    model: &ConsumerModel,
    state: &State,
    group: u8,
    owner: u8,
    trace_next: Option<Action>,
) -> (Restarted, Vec<Step>) {
    let config = &model.config;
    let crashed = model::step::next_state(config, state, Action::Crash { group, owner });
    let started = model::step::next_state(config, &crashed, Action::Restart { group, owner });
    let mut steps = Vec::new();
    let restarted = model_steps(model, &started, (group, owner), (trace_next, false), &mut steps);
    (restarted, steps)
}

/// What the owner leaves in `state` and after its next steps (`model_restart`), pushing each
/// step onto `steps`; `ended`: no further step is asked.
fn model_steps(
    model: &ConsumerModel,
    state: &State,
    (group, owner): (u8, u8),
    (trace_next, ended): (Option<Action>, bool),
    steps: &mut Vec<Step>,
) -> Restarted {
    let leases = state.groups[usize::from(group)].owners[usize::from(owner)].leases.clone();
    let stores = stores_of(state);
    let mut enabled = Vec::new();
    if !ended && steps.len() < RESTART_STEPS_MAX {
        model::step::enabled_actions(&model.config, state, &mut enabled);
    }
    let askable = |action: &Action| {
        matches!(action.actor(), Actor::Owner { group: g, owner: o } if (g, o) == (group, owner))
            && restart_step(action, state).is_some()
    };
    let chosen = trace_next
        .filter(|action| enabled.contains(action) && askable(action))
        .or_else(|| enabled.iter().copied().find(|action| askable(action)));
    let next = chosen.map(|action| {
        steps.push(restart_step(&action, state).expect("an askable step has a real step"));
        let after = model::step::next_state(&model.config, state, action);
        let wrote = stores_of(&after) != stores;
        Ok(Box::new(model_steps(model, &after, (group, owner), (None, wrote), steps)))
    });
    Restarted { leases, stores: Some(stores), next }
}

/// Most transaction begins a raced step is held at (0, 1, ...); a step that runs unheld at one
/// is not raced further.
const RACE_BEGINS_MAX: u64 = 4;

/// The steps an owner is asked from `state` on (chosen as `model_steps` chooses them: the
/// trace's next where enabled, else the first the model enables), up to and including the
/// first that changes a store: the real steps, that step's action, and the states before and
/// after it. `None` when none changes a store within `RESTART_STEPS_MAX` steps.
fn model_walk(
    config: &model::Config,
    state: &State,
    (group, owner): (u8, u8),
    trace_next: Option<Action>,
) -> Option<(Vec<Step>, Action, State, State)> {
    let (mut state, mut steps) = (state.clone(), Vec::new());
    for _ in 0..RESTART_STEPS_MAX {
        let mut enabled = Vec::new();
        model::step::enabled_actions(config, &state, &mut enabled);
        let askable = |action: &Action| {
            matches!(action.actor(), Actor::Owner { group: g, owner: o } if (g, o) == (group, owner))
                && restart_step(action, &state).is_some()
        };
        let chosen = trace_next
            .filter(|action| enabled.contains(action) && askable(action))
            .or_else(|| enabled.iter().copied().find(|action| askable(action)))?;
        steps.push(restart_step(&chosen, &state)?);
        let after = model::step::next_state(config, &state, chosen);
        if stores_of(&after) != stores_of(&state) {
            return Some((steps, chosen, state, after));
        }
        state = after;
    }
    None
}

/// The model's race at an owner's step from `before`: the owner restarted (a first
/// incarnation) and walked to its first store-changing step (`model_walk`), then started again
/// (a pause: the second incarnation claims, the first becomes an earlier one) and walked to its
/// own, then the first's held step taken by the earlier incarnation (fenced, in a fenced row):
/// the plan and the stores it leaves. `None` where the model has no such race.
fn model_race(
    model: &ConsumerModel,
    before: &State,
    (group, owner): (u8, u8),
    trace_next: Option<Action>,
    order: RaceOrder,
) -> Option<(RacePlan, Vec<ModelStore>)> {
    // A paused slot more than the trace's, free, for the first incarnation.
    let mut config = model.config.clone();
    config.pauses = config.pauses.checked_add(1)?;
    let free = State::initial(&config).groups.first()?.paused.last()?.clone();
    let mut state = before.clone();
    for group in &mut state.groups {
        group.paused.push(free.clone());
    }
    let crashed = model::step::next_state(&config, &state, Action::Crash { group, owner });
    let started = model::step::next_state(&config, &crashed, Action::Restart { group, owner });
    let (mut first, raced_action, at_raced, after_raced) = model_walk(&config, &started, (group, owner), trace_next)?;
    let raced = first.pop()?;
    if order == RaceOrder::SecondHeld {
        // The first's step lands while it is current; then the second's start claims.
        let paused = model::step::next_state(&config, &after_raced, Action::Pause { group, owner });
        return Some((RacePlan { order, first, raced, begins_passed: 0, second: Vec::new() }, stores_of(&paused)));
    }
    let paused = model::step::next_state(&config, &at_raced, Action::Pause { group, owner });
    let (second, _, _, after_second) = model_walk(&config, &paused, (group, owner), Some(raced_action))?;
    let owners = after_second.groups[usize::from(group)].owners.len();
    let mut enabled = Vec::new();
    model::step::enabled_actions(&config, &after_second, &mut enabled);
    let earlier = enabled.into_iter().find(|action| {
        matches!(action.actor(), Actor::Owner { group: g, owner: o } if g == group && usize::from(o) >= owners)
            && restart_step(action, &after_second) == Some(raced)
    })?;
    let end = model::step::next_state(&config, &after_second, earlier);
    Some((RacePlan { order, first, raced, begins_passed: 0, second }, stores_of(&end)))
}

/// A race that diverged, in words: who was held where, what the other did, what the first's
/// step replied, and the store against the model's.
fn race_text(
    (group, owner): (u8, u8),
    plan: &RacePlan,
    reply: &str,
    (real, model): (&[ModelStore], &[ModelStore]),
) -> String {
    let who = format!("g{group}/o{owner}");
    let steps = |steps: &[Step]| steps.iter().map(Step::to_string).collect::<Vec<_>>().join(", ");
    let (first, raced, begin) = (steps(&plan.first), plan.raced, plan.begins_passed + 1);
    let (real, model) = (stores_text(real), stores_text(model));
    match plan.order {
        RaceOrder::FirstHeld => format!(
            "{who} restarted on the store from before the step and asked [{first}], then held as its {raced} began \
             transaction {begin} of it; meanwhile {who} started again (a second incarnation, which claims) and ran \
             [{}]; released, the first's {raced} replied {reply}, and the store shows {real} where the model's fence \
             leaves {model}",
            steps(&plan.second)
        ),
        RaceOrder::SecondHeld => format!(
            "{who} restarted on the store from before the step and asked [{first}]; {who} started again (a second \
             incarnation) and held as its start began transaction {begin}; meanwhile the first's {raced} replied \
             {reply}; released, the second's start claimed, and the store shows {real} where the model (the first's \
             write, then the second's claim) leaves {model}"
        ),
    }
}

/// A restart's leases (the restarted owner's) and its group's partition rows, one per line,
/// then the same after its next step when one was asked.
fn restart_lines(restarted: &Restarted, group: u8) -> String {
    let mut lines: Vec<String> = restarted.leases.iter().enumerate().map(|(p, lease)| lease_text(p, lease)).collect();
    if restarted.stores.is_none() {
        lines.push("(its store not read:".to_string());
        lines.push(" no observation spec)".to_string());
    }
    if let Some(store) = restarted.stores.as_ref().and_then(|stores| stores.get(usize::from(group))) {
        lines.push(format!("total {}", store.total));
        for (p, row) in store.partitions.iter().enumerate() {
            lines.push(format!("p{p} row next {} epoch {} owner o{}", row.next_offset, row.epoch, row.owner));
        }
    }
    match &restarted.next {
        None => {}
        Some(Ok(next)) => {
            lines.push("after its next step:".to_string());
            lines.push(restart_lines(next, group));
        }
        Some(Err(refusal)) => {
            lines.push("its next step refused:".to_string());
            lines.push(refusal.clone());
        }
    }
    lines.join("\n")
}

fn lease_text(partition: usize, lease: &Option<model::state::Lease>) -> String {
    match lease {
        None => format!("p{partition} no lease"),
        Some(lease) => {
            let records =
                if lease.records.is_empty() { String::new() } else { format!(" records {:?}", lease.records) };
            format!("p{partition} lease at {} epoch {}{records}", lease.position, lease.epoch)
        }
    }
}

/// The first difference between the model's restart and the real one, in words; `next` are
/// the steps the restarted owner was asked after its start.
fn restart_difference(model: &Restarted, real: &Restarted, next: &[Step]) -> String {
    let text = |stores: &Option<Vec<ModelStore>>| stores.as_deref().map_or_else(|| "unread".to_string(), stores_text);
    let (mut model, mut real) = (model, real);
    for taken in 0..=next.len() {
        let (who, left) = match taken {
            0 => ("the restarted owner".to_string(), "its start left".to_string()),
            _ => {
                let steps: Vec<String> = next[..taken].iter().map(Step::to_string).collect();
                let after = format!("after its steps {}", steps.join(", "));
                (format!("{after}, the restarted owner"), format!("{after}, it left"))
            }
        };
        for (p, (expected, got)) in model.leases.iter().zip(&real.leases).enumerate() {
            if expected != got {
                let (got, expected) = (lease_text(p, got), lease_text(p, expected));
                return format!("{who} took {got} where the model's takes {expected}");
            }
        }
        if real.stores.is_some() && real.stores != model.stores {
            return format!("{left} {} where the model's leaves {}", text(&real.stores), text(&model.stores));
        }
        match (&model.next, &real.next) {
            (Some(Ok(model_next)), Some(Ok(real_next))) => (model, real) = (model_next, real_next),
            (Some(_), Some(Err(refusal))) => return format!("{who} was refused its step {}: {refusal}", next[taken]),
            (None, None) | (Some(_), None) | (None, Some(_)) | (Some(Err(_)), Some(Ok(_))) => break,
        }
    }
    "the restart differs from the model's in what it was asked".to_string()
}

/// Every group's durable store in a model state: what a kill can leave, and all it can.
pub(crate) fn stores_of(state: &State) -> Vec<ModelStore> {
    state.groups.iter().map(|group| group.store.clone()).collect()
}

/// What a kill point's call is, in a word: `write 3 of 5`, `sync 2 of 5`, `rename 4 of 5`.
fn point_noun(syscall: &str) -> &'static str {
    match syscall {
        "fsync" | "fdatasync" | "sync_file_range" | "msync" => "sync",
        "unlink" | "unlinkat" | "rmdir" => "removal",
        "rename" | "renameat" | "renameat2" | "link" | "linkat" | "symlink" | "symlinkat" => "rename",
        "open" | "openat" | "creat" | "mkdir" | "mkdirat" => "creation",
        "truncate" | "ftruncate" | "fallocate" => "resize",
        _ => "write",
    }
}

/// The stores in a few words: `g0 total 5, p0 next offset 0`.
fn stores_text(stores: &[ModelStore]) -> String {
    let groups = stores.iter().enumerate().map(|(g, store)| {
        let rows = store.partitions.iter().enumerate().map(|(p, row)| format!("p{p} next offset {}", row.next_offset));
        format!("g{g} total {}, {}", store.total, rows.collect::<Vec<_>>().join(", "))
    });
    groups.collect::<Vec<_>>().join("; ")
}

/// The stores one line per group and field, for the side-by-side table: the total and the
/// partition rows always, the other fields where any of `all` has them (so the three columns'
/// lines stay aligned).
fn stores_lines(stores: &[ModelStore], all: &[&[ModelStore]]) -> String {
    let mut lines = Vec::new();
    for (g, store) in stores.iter().enumerate() {
        lines.push(format!("g{g} total {}", store.total));
        for (p, row) in store.partitions.iter().enumerate() {
            let stamp = row.stamp.map_or(String::new(), |stamp| format!(" stamp {stamp}"));
            lines.push(format!("g{g} p{p} next {} epoch {} owner o{}{stamp}", row.next_offset, row.epoch, row.owner));
        }
        let rest = rest_fields(store);
        for (index, (name, text, _)) in rest.iter().enumerate() {
            let shown = all.iter().any(|stores| stores.get(g).is_some_and(|other| !rest_fields(other)[index].2));
            if shown {
                lines.push(format!("g{g} {name} {text}"));
            }
        }
    }
    lines.join("\n")
}

/// A store's fields besides the total and the rows: name, text, and whether it is empty.
fn rest_fields(store: &ModelStore) -> [(&'static str, String, bool); 7] {
    [
        ("processed", format!("{:?}", store.processed), store.processed.is_empty()),
        ("attempts", format!("{:?}", store.attempts), store.attempts.is_empty()),
        ("dead letters", format!("{:?}", store.dead_letters), store.dead_letters.is_empty()),
        ("resets", format!("{:?}", store.resets), store.resets.is_empty()),
        ("value", format!("{:?}", store.value), store.value.is_none()),
        ("facts", format!("{:?}", store.facts), store.facts.is_empty()),
        ("outbox", format!("{:?}", store.outbox), store.outbox.is_empty()),
    ]
}

/// Compares the model's state after a step with the real one, given the step's action and its
/// words (both `None` for the initial state).
fn compare(
    step: usize,
    (action, named): (Option<Action>, Option<String>),
    expected: &State,
    actual: &State,
) -> Result<(), ReplayFailure> {
    if expected == actual {
        return Ok(());
    }
    Err(ReplayFailure::Divergence {
        step,
        action,
        named,
        table: crate::diff::side_by_side(&format!("{expected:#?}"), &format!("{actual:#?}")),
        diff: crate::diff::lines(&format!("{:#?}", expected.full()), &format!("{:#?}", actual.full())),
    })
}

/// Evaluates every safety property on the real states, compares with the model's verdicts
/// and with the verdict the trace records, and describes the real evidence.
fn verdicts(
    model: &ConsumerModel,
    trace: &Trace,
    expected: &[State],
    observed: &[State],
) -> Result<ReplayReport, ReplayFailure> {
    let mut violated = Vec::new();
    for property in properties_for(&model.config).into_iter().filter(model::properties::is_safety) {
        let breaks = |states: &[State]| states.iter().any(|state| !(property.condition)(model, state));
        let (in_model, in_real) = (breaks(expected), breaks(observed));
        let recorded = trace.property.as_deref().filter(|name| *name == property.name).and(trace.verdict.clone());
        let recorded_violated = recorded.as_ref().map(|v| *v == Verdict::Violated);
        if in_model != in_real || recorded_violated.is_some_and(|v| v != in_real) {
            return Err(ReplayFailure::VerdictMismatch {
                property: property.name.to_string(),
                model: in_model,
                real: in_real,
                recorded,
            });
        }
        violated.push((property.name.to_string(), in_real));
    }
    if trace.verdict == Some(Verdict::Reached) {
        let name = trace.property.as_deref().unwrap_or("");
        let property = model::check::property_named(model, name).ok_or_else(|| ReplayFailure::NotReached {
            property: name.to_string(),
            model: false,
            real: false,
        })?;
        let reaches = |states: &[State]| states.iter().any(|state| (property.condition)(model, state));
        let (in_model, in_real) = (reaches(expected), reaches(observed));
        if !(in_model && in_real) {
            return Err(ReplayFailure::NotReached { property: name.to_string(), model: in_model, real: in_real });
        }
    }
    let last = observed.last().expect("at least the initial state");
    let effect = trace.config.strategy.rules().effect;
    let evidence = trace.property.as_deref().map(|property| evidence(property, last, effect));
    let (inside, unseen_writes) = (Inside::default(), Vec::new());
    Ok(ReplayReport { steps: trace.actions.len(), inside, unseen_writes, violated, evidence })
}

/// What the real store shows for a property, in the store's own terms: the total beside what
/// each applied record once would make it, or (the set rows, whose total stays 0) the value
/// beside the highest applied offset's.
fn evidence(property: &str, state: &State, effect: EffectKind) -> String {
    let mut lines = Vec::new();
    for (g, group) in state.groups.iter().enumerate() {
        let rows: Vec<String> = group
            .store
            .partitions
            .iter()
            .enumerate()
            .map(|(p, row)| format!("p{p} next offset {} epoch {}", row.next_offset, row.epoch))
            .collect();
        let effect_text = match effect {
            EffectKind::Add => {
                let applied: i64 = state
                    .log
                    .iter()
                    .zip(&group.ghost.applied)
                    .flat_map(|(log, counts)| {
                        log.iter().zip(counts).map(|(&delta, &count)| delta * i64::from(count.min(1)))
                    })
                    .sum();
                format!("total {} (each applied record once would be {applied})", group.store.total)
            }
            EffectKind::Set => {
                let newest = group.ghost.applied.iter().flat_map(|counts| counts.iter().rposition(|&count| count > 0));
                let shown = |value: Option<usize>| value.map_or_else(|| "none".to_string(), |value| value.to_string());
                let stored = shown(group.store.value.map(usize::from));
                format!("value {stored} (the highest applied offset's would be {})", shown(newest.max().map(|o| o + 1)))
            }
        };
        let mut line = format!("g{g}: {effect_text}; {}", rows.join(", "));
        line.push_str(&external_evidence(group, effect));
        lines.push(line);
    }
    format!("{property}: {}", lines.join("; "))
}

/// The evidence of spec.md §3.4's rows, where a group has it: the set value, the emails
/// delivered per record, and the store's facts beside its outbox and the index.
fn external_evidence(group: &model::state::Group, effect: EffectKind) -> String {
    let mut text = String::new();
    match (effect, group.store.value) {
        // The set rows' value is in the line already.
        (EffectKind::Set, _) | (EffectKind::Add, None) => {}
        (EffectKind::Add, Some(value)) => text.push_str(&format!("; value {value}")),
    }
    if !group.inbox.is_empty() {
        let emails: Vec<String> = group.inbox.iter().map(|((p, o), n)| format!("p{p}/{o} x{n}")).collect();
        text.push_str(&format!("; emails delivered {}", emails.join(", ")));
    }
    if !group.store.facts.is_empty() || !group.index.is_empty() {
        let list = |facts: &model::collections::SortedSet<(u8, u8)>| {
            facts.iter().map(|(p, o)| format!("p{p}/{o}")).collect::<Vec<_>>().join(" ")
        };
        let (facts, outbox, index) = (list(&group.store.facts), list(&group.store.outbox), list(&group.index));
        text.push_str(&format!("; facts [{facts}], outbox [{outbox}], index [{index}]"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use consumer::strategy::StepKind;
    use model::strategy::Strategy;

    /// The steps a restarted owner (g0/o0 of atomic-fenced) is asked after its start: a fetch and
    /// the write after it while the log has a record past its checkpoint, none at the log's end,
    /// and the trace's next step first when the restart allows it.
    #[test]
    fn a_restart_is_asked_the_models_next_steps_up_to_its_first_write() {
        let append = Action::Append { partition: 0, delta: 5 };
        let fetch = |offset| Action::Fetch { group: 0, owner: 0, partition: 0, offset };
        let apply = |offset| Action::ApplyAtomic { group: 0, owner: 0, partition: 0, offset };
        let step = |kind, offset| Step { kind, partition: 0, offset };
        let table: [(&[Action], Option<Action>, &[Step]); 4] = [
            (&[], None, &[]),
            (&[append], None, &[step(StepKind::Fetch, 0), step(StepKind::ApplyAtomic, 0)]),
            (&[append, fetch(0), apply(0)], None, &[]),
            // A next step of the trace that a restart from here cannot take is not asked.
            (
                &[append, append, fetch(0), apply(0)],
                Some(fetch(2)),
                &[step(StepKind::Fetch, 1), step(StepKind::ApplyAtomic, 1)],
            ),
        ];
        let model = ConsumerModel::new(model::Config::new(Strategy::AtomicFenced));
        for (actions, trace_next, expected) in table {
            let mut state = model::check::replay(&model, &[]).expect("the initial state").remove(0);
            for action in actions {
                state = model::step::next_state(&model.config, &state, *action);
            }
            let (restarted, steps) = model_restart(&model, &state, 0, 0, trace_next);
            assert_eq!(steps, expected, "after {actions:?}");
            let mut asked = 0;
            let mut next = &restarted.next;
            while let Some(Ok(after)) = next {
                asked += 1;
                next = &after.next;
            }
            assert_eq!(asked, expected.len(), "after {actions:?}: one result per step asked");
        }
    }
}
