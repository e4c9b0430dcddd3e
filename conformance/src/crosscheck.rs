//! The kill points inside steps checked against this consumer's named crash points.
//!
//! This consumer names the places a crash can fall inside a step (`--crash-at STEP:WHEN`,
//! `consumer::crash`): `before` its first write, `inside` its transaction (statements run,
//! COMMIT not) and `after` its COMMIT. The tracer finds the kill points from outside, one per
//! state-changing call. Both must tell the same story: a named crash run with the tracer on
//! dies after `m` of the step's calls, so it sits between kill points `m` and `m + 1`, and the
//! store it leaves is the one kill point `m` shows; every kill point between two named points
//! (or between the step's start and the first, or the last and the step's end) shows the store
//! of one of the two. A third store is a *finding*: a place where a crash leaves a state that
//! no named point predicts.
//!
//! Process mode only (the worker's `arm`), on a SQLite store. For each step with kill points,
//! each named point is reached by replaying the trace's prefix on a fresh system, arming the
//! acting owner and taking the step: the cost grows with the square of a trace's length.

use crate::driver::Mode;
use crate::error::{Error, WorkerError};
use crate::harness::{step_kind, Harness, Options};
use crate::replay::stores_of;
use consumer::crash::When;
use consumer::strategy::StepKind;
use model::check::replay as model_replay;
use model::state::{State, Store as ModelStore};
use model::trace::Trace;
use model::{Action, ConsumerModel};

/// What a cross-check of one trace (or of many, added up) established.
#[derive(Clone, Debug, Default)]
pub struct CrossCheck {
    /// Steps with kill points, each compared with its named points.
    pub steps: usize,
    /// Kill points judged against the named points around them.
    pub kill_points: usize,
    /// Named crash points reached (run to their death with the tracer on).
    pub named: usize,
    /// Named points armed that the step's path does not pass (a fenced write has no inside).
    pub not_reached: usize,
    /// Each kill point showing a store that neither named point around it leaves, in words.
    pub findings: Vec<String>,
}

impl CrossCheck {
    fn add(&mut self, other: CrossCheck) {
        self.steps += other.steps;
        self.kill_points += other.kill_points;
        self.named += other.named;
        self.not_reached += other.not_reached;
        self.findings.extend(other.findings);
    }
}

/// A named point of one step: the calls the step made before it, its name, the store it leaves.
struct Named {
    calls: usize,
    name: String,
    stores: Vec<ModelStore>,
}

/// Cross-checks every step of `trace` that has kill points (`options`: process mode, kill
/// points inside steps on, SQLite).
pub fn cross_check(trace: &Trace, options: &Options) -> Result<CrossCheck, Error> {
    if options.mode != Mode::Process || !options.inside_step || options.postgres.is_some() {
        return Err(Error::Unsupported("a cross-check outside process mode with kill points on a SQLite store"));
    }
    let model = ConsumerModel::new(trace.config.clone());
    let expected = model_replay(&model, &trace.actions)
        .map_err(|_| Error::Unsupported("a cross-check of a trace the model does not accept"))?;
    let mut harness = Harness::new(&trace.config, options)?;
    harness.take_windows();
    let mut total = CrossCheck::default();
    for (index, action) in trace.actions.iter().enumerate() {
        harness.apply(action)?;
        let windows = harness.take_windows();
        let Some(kind) = step_kind(action) else { continue };
        let points: Vec<_> = windows.iter().flat_map(|(_, _, window)| &window.points).collect();
        if points.is_empty() {
            continue;
        }
        let snapshots: Vec<_> = points.iter().map(|point| &point.snapshot).collect();
        let shown = harness.observe_copies(&snapshots)?;
        let named = named_points(trace, options, index, action, kind, &expected)?;
        let mut step = CrossCheck { steps: 1, named: named.len() - 2, ..CrossCheck::default() };
        step.not_reached = When::around(kind).len() + 2 - named.len();
        for (point, stores) in points.iter().zip(&shown) {
            step.kill_points += 1;
            let Err((low, high)) = agrees(&named, point.ordinal, stores) else { continue };
            {
                step.findings.push(format!(
                    "step {} ({}): kill point {} of {} ({point}) lies between {} and {} and shows {:?}; \
                     they leave {:?} and {:?}",
                    index + 1,
                    model::view::action_text(&expected[index], action),
                    point.ordinal,
                    windows.iter().map(|(_, _, window)| window.found).sum::<usize>(),
                    low.name,
                    high.name,
                    stores,
                    low.stores,
                    high.stores
                ));
            }
        }
        total.add(step);
    }
    Ok(total)
}

/// Whether kill point `ordinal` showing `stores` agrees with the named points around it (`named`
/// sorted by calls, the step's start first and its end last): `Err` with the two it lies
/// between when it shows a third store. Killed right where a named point dies (the same
/// number of calls made), it must show that point's store exactly.
fn agrees<'a>(named: &'a [Named], ordinal: usize, stores: &[ModelStore]) -> Result<(), (&'a Named, &'a Named)> {
    let below = named.iter().rposition(|named| named.calls <= ordinal).expect("the start is at 0 calls");
    let (low, high) = (&named[below], &named[below + 1]);
    let exact = low.calls == ordinal && low.calls > 0;
    let fits = match exact {
        true => *stores == low.stores,
        false => *stores == low.stores || *stores == high.stores,
    };
    if fits {
        Ok(())
    } else {
        Err((low, high))
    }
}

/// The step's start (the model's store before it, after 0 calls), each named point the step
/// reaches, and its end (the model's store after it), in the order of their calls.
fn named_points(
    trace: &Trace,
    options: &Options,
    index: usize,
    action: &Action,
    kind: StepKind,
    expected: &[State],
) -> Result<Vec<Named>, Error> {
    let mut named = vec![Named { calls: 0, name: "the step's start".into(), stores: stores_of(&expected[index]) }];
    for &when in When::around(kind) {
        let point = consumer::crash::CrashPoint { kind, when, offset: None };
        if let Some((calls, stores)) = crash_at(trace, options, index, action, &point.to_string())? {
            named.push(Named { calls, name: format!("--crash-at {point}"), stores });
        }
    }
    named.push(Named { calls: usize::MAX, name: "the step's end".into(), stores: stores_of(&expected[index + 1]) });
    named.sort_by_key(|named| named.calls);
    Ok(named)
}

/// Replays the trace's first `index` steps on a fresh system, arms the acting owner at `point`
/// and takes step `index + 1` traced: the calls the step made before the owner died there, and
/// the store it left, read from a copy. `None` when the step finished without reaching it.
fn crash_at(
    trace: &Trace,
    options: &Options,
    index: usize,
    action: &Action,
    point: &str,
) -> Result<Option<(usize, Vec<ModelStore>)>, Error> {
    let model::action::Actor::Owner { group, owner } = action.actor() else {
        return Err(Error::Unsupported("a named crash point of a step no owner takes"));
    };
    let mut harness = Harness::new(&trace.config, options)?;
    for earlier in &trace.actions[..index] {
        harness.apply(earlier)?;
    }
    harness.take_windows();
    harness.arm(group, owner, point)?;
    match harness.apply(action) {
        Ok(_) => return Ok(None),
        Err(Error::Worker { source: WorkerError::Ended, .. }) => {}
        Err(other) => return Err(other),
    }
    let calls = harness.take_windows().iter().map(|(_, _, window)| window.found).sum();
    let snapshot = harness.store_snapshot()?;
    let stores = harness.observe_copies(&[&snapshot])?.remove(0);
    Ok(Some((calls, stores)))
}

/// Cross-checks each trace in turn, adding up; `report` gets a line per trace.
pub fn cross_check_all(
    traces: &[(String, Trace)],
    options: &Options,
    report: &mut dyn FnMut(&str),
) -> Result<CrossCheck, Error> {
    let mut total = CrossCheck::default();
    for (name, trace) in traces {
        let checked = cross_check(trace, options)?;
        report(&format!(
            "{name}: {} steps, {} kill points, {} named points, {} findings",
            checked.steps,
            checked.kill_points,
            checked.named,
            checked.findings.len()
        ));
        total.add(checked);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::{agrees, Named};
    use model::state::{State, Store};
    use model::{Config, Strategy};

    fn store(total: i64) -> Vec<Store> {
        let mut store = State::initial(&Config::new(Strategy::AtomicFenced)).groups[0].store.clone();
        store.total = total;
        vec![store]
    }

    /// A step of 6 calls whose `before` dies after 0, `inside` after 3 and `after` after 6: a
    /// kill point between two named points shows one of their stores, one where a named point
    /// dies shows that one's exactly, and a third store is a finding naming the two.
    #[test]
    fn a_kill_point_must_show_the_store_of_a_named_point_around_it() {
        let named = |calls, name: &str, total| Named { calls, name: name.into(), stores: store(total) };
        let points = [
            named(0, "start", 0),
            named(0, "before", 0),
            named(3, "inside", 0),
            named(6, "after", 5),
            named(usize::MAX, "end", 5),
        ];
        let table = [
            (1, 0, Ok(())),
            (2, 0, Ok(())),
            (3, 0, Ok(())),
            (3, 5, Err(("inside", "after"))),
            (4, 0, Ok(())),
            (5, 5, Ok(())),
            (5, 7, Err(("inside", "after"))),
            (6, 5, Ok(())),
            (6, 0, Err(("after", "end"))),
            (7, 5, Ok(())),
        ];
        for (ordinal, total, expected) in table {
            let verdict =
                agrees(&points, ordinal, &store(total)).map_err(|(low, high)| (low.name.as_str(), high.name.as_str()));
            assert_eq!(verdict, expected, "kill point {ordinal} showing total {total}");
        }
    }
}
