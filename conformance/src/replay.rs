//! Replays one trace in the model and in the real system side by side, comparing the states
//! after every step and the properties' verdicts at the end.

use crate::error::Error;
use crate::harness::{Harness, Options};
use crate::killpoints::Snapshot;
use model::check::{replay as model_replay, Verdict};
use model::properties::properties_for;
use model::state::{State, Store as ModelStore};
use model::strategy::EffectKind;
use model::trace::Trace;
use model::{Action, ConsumerModel};
use std::collections::HashMap;
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
        let mut text = format!(
            "{} kill points inside {} steps, {judged} ({} distinct stores read)",
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

impl std::ops::AddAssign for Inside {
    fn add_assign(&mut self, other: Inside) {
        self.found += other.found;
        self.judged += other.judged;
        self.sampled_out += other.sampled_out;
        self.reads += other.reads;
        self.steps += other.steps;
        self.writes_unseen += other.writes_unseen;
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
    /// With an observation spec, the store role reported a store the database does not hold
    /// (`error` is `Error::RoleDisagrees`, naming the fields).
    Misreported { step: usize, action: Option<Action>, named: Option<String>, error: Box<Error> },
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
            | ReplayFailure::NotAtomic { step, .. } => *step,
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
            | ReplayFailure::NotAtomic { step, .. } => format!("step {step}"),
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
            | ReplayFailure::NotAtomic { .. } => None,
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
    let mut judge = Judge::default();
    let result = replay_judged(trace, options, &mut judge);
    *tried += judge.inside;
    result.map(|report| ReplayReport { inside: judge.inside, unseen_writes: judge.unseen, ..report })
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
    let mut observed = vec![harness.observe().map_err(|error| fail(0, (None, None), error))?];
    compare(0, (None, None), &expected[0], &observed[0])?;
    // The initial owners' starts: the model's initial state is the one after them.
    judge.step(&mut harness, 0, None, &expected[0], &expected[0])?;
    for (index, action) in trace.actions.iter().enumerate() {
        let step = index + 1;
        let at = || (Some(*action), Some(model::view::action_text(&expected[index], action)));
        let state = harness.apply(action).map_err(|error| fail(step, at(), error))?;
        compare(step, at(), &expected[step], &state)?;
        observed.push(state);
        judge.step(&mut harness, step, Some(*action), &expected[index], &expected[step])?;
    }
    verdicts(&model, trace, &expected, &observed)
}

/// Judges the kill points inside each step: a SIGKILL there must leave the model's store from
/// before the step or from after it (spec.md §11: a step is atomic under crashes). The stores a
/// copy shows are remembered by the copy's bytes, so a copy equal to one read before costs no
/// reader.
#[derive(Default)]
struct Judge {
    inside: Inside,
    unseen: Vec<String>,
    read: HashMap<Snapshot, Vec<ModelStore>>,
}

impl Judge {
    fn step(
        &mut self,
        harness: &mut Harness,
        step: usize,
        action: Option<Action>,
        before: &State,
        after: &State,
    ) -> Result<(), ReplayFailure> {
        let named = action.map(|action| model::view::action_text(before, &action));
        let windows = harness.take_windows();
        let found: usize = windows.iter().map(|window| window.found).sum();
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
        self.inside.sampled_out += windows.iter().map(|window| window.found - window.points.len()).sum::<usize>();
        let points: Vec<_> =
            windows.iter().flat_map(|window| window.points.iter().map(move |p| (p, window.found))).collect();
        let mut unread: Vec<&Snapshot> = Vec::new();
        for (point, _) in &points {
            if !self.read.contains_key(&point.snapshot) && !unread.contains(&&point.snapshot) {
                unread.push(&point.snapshot);
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
            self.read.insert(snapshot.clone(), stores);
        }
        // Every point is judged (the count stays exact); the first that fails is reported.
        let mut first_failure = None;
        for (point, of) in points {
            self.inside.judged += 1;
            let shown = &self.read[&point.snapshot];
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
