//! Replays one trace in the model and in the real system side by side, comparing the states
//! after every step and the properties' verdicts at the end.

use crate::error::Error;
use crate::harness::{Harness, Options};
use model::check::{replay as model_replay, Verdict};
use model::properties::properties_for;
use model::state::State;
use model::strategy::EffectKind;
use model::trace::Trace;
use model::{Action, ConsumerModel};
use std::fmt;

/// What a conforming replay established.
#[derive(Clone, Debug)]
pub struct ReplayReport {
    pub steps: usize,
    /// Every safety property, and whether the real system violated it during the trace.
    pub violated: Vec<(String, bool)>,
    /// For the trace's property: what the real store shows (the doubled total, the skip).
    pub evidence: Option<String>,
}

/// Why a replay did not conform. Every variant renders as lines naming the step.
#[derive(Debug)]
pub enum ReplayFailure {
    /// The model no longer accepts the trace (the model changed since it was written).
    ModelUnreachable { step: usize, action: Action },
    /// The real system refused or failed a step the model took.
    RealFailed { step: usize, action: Option<Action>, error: Box<Error> },
    /// After a step, the real state differs from the model's: both side by side
    /// (`table`), and the full states' line diff.
    Divergence { step: usize, action: Option<Action>, table: String, diff: String },
    /// The property verdicts differ between model and real system, or from the trace's record.
    VerdictMismatch { property: String, model: bool, real: bool, recorded: Option<Verdict> },
    /// The trace records a `sometimes` property as reached (a fault struck, a defence fired),
    /// and the model or the real system did not reach it.
    NotReached { property: String, model: bool, real: bool },
}

impl ReplayFailure {
    /// Where the replay failed, for a summary line: `step 3`, `the initial state`, `the verdict
    /// of no-duplicate`.
    pub fn place(&self) -> String {
        match self {
            ReplayFailure::ModelUnreachable { step, .. } => format!("step {step} (in the model)"),
            ReplayFailure::RealFailed { step: 0, action: None, .. }
            | ReplayFailure::Divergence { step: 0, action: None, .. } => "the initial state".to_string(),
            ReplayFailure::RealFailed { step, .. } | ReplayFailure::Divergence { step, .. } => format!("step {step}"),
            ReplayFailure::VerdictMismatch { property, .. } | ReplayFailure::NotReached { property, .. } => {
                format!("the verdict of {property}")
            }
        }
    }
}

impl fmt::Display for ReplayFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let step_name = |step: &usize, action: &Option<Action>| match action {
            Some(action) => format!("step {step} ({action})"),
            None => "the initial state".to_string(),
        };
        match self {
            ReplayFailure::ModelUnreachable { step, action } => {
                write!(f, "the model no longer accepts step {step} ({action}): regenerate or fix the trace")
            }
            ReplayFailure::RealFailed { step, action, error } => {
                write!(f, "the real system failed {}: {error}", step_name(step, action))
            }
            ReplayFailure::Divergence { step, action, table, diff } => write!(
                f,
                "divergence after {}:\n{table}\nthe full states, model (-) vs real (+):\n{diff}",
                step_name(step, action)
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
        }
    }
}

impl std::error::Error for ReplayFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReplayFailure::RealFailed { error, .. } => Some(error.as_ref()),
            ReplayFailure::ModelUnreachable { .. }
            | ReplayFailure::Divergence { .. }
            | ReplayFailure::VerdictMismatch { .. }
            | ReplayFailure::NotReached { .. } => None,
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
    let model = ConsumerModel::new(trace.config.clone());
    let expected = model_replay(&model, &trace.actions).map_err(|unreachable| ReplayFailure::ModelUnreachable {
        step: unreachable.step,
        action: unreachable.action,
    })?;
    let fail = |step, action, error| ReplayFailure::RealFailed { step, action, error: Box::new(error) };
    let mut harness = Harness::new(&trace.config, options).map_err(|error| fail(0, None, error))?;
    let mut observed = vec![harness.observe().map_err(|error| fail(0, None, error))?];
    compare(0, None, &expected[0], &observed[0])?;
    for (index, action) in trace.actions.iter().enumerate() {
        let step = index + 1;
        let state = harness.apply(action).map_err(|error| fail(step, Some(*action), error))?;
        compare(step, Some(*action), &expected[step], &state)?;
        observed.push(state);
    }
    verdicts(&model, trace, &expected, &observed)
}

fn compare(step: usize, action: Option<Action>, expected: &State, actual: &State) -> Result<(), ReplayFailure> {
    if expected == actual {
        return Ok(());
    }
    Err(ReplayFailure::Divergence {
        step,
        action,
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
    Ok(ReplayReport { steps: trace.actions.len(), violated, evidence })
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
