//! What people look at: every property judged along one path (with the reason in words at the
//! step where it first fails or is first reached), and the state as a person reads it. Used by
//! the SVG timeline, the explorer's own page and `check --html`; pure, no I/O.

use crate::action::Action;
use crate::properties::{is_discovery, is_held_unapplied, role_of, Role};
use crate::state::{Group, Lease, Stage, State, Witness};
use crate::ConsumerModel;
use stateright::{Expectation, Model};
use std::fmt::Write;

/// One property judged on one path.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PathVerdict {
    pub name: &'static str,
    /// "always" or "sometimes".
    pub expectation: &'static str,
    /// "safety", "fault witness" or "observation".
    pub role: &'static str,
    pub outcome: PathOutcome,
}

/// What a path shows of one property. `step` counts actions: 0 is the initial state.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum PathOutcome {
    /// An `always` property true in every state of the path (so far: the path may go on).
    HoldsSoFar,
    /// An `always` property false from step `step` on (its first failure).
    Violated { step: usize, reason: String },
    /// A `sometimes` property true at step `step` (its first time).
    Reached { step: usize, reason: String },
    /// A `sometimes` property true nowhere on the path.
    NotReached,
}

impl PathOutcome {
    /// The step the outcome names, if any.
    pub fn step(&self) -> Option<usize> {
        match self {
            PathOutcome::Violated { step, .. } | PathOutcome::Reached { step, .. } => Some(*step),
            PathOutcome::HoldsSoFar | PathOutcome::NotReached => None,
        }
    }
}

/// Judges every property of `model` on `path`: its states (the first the initial one) and the
/// action that led from each state to the next (`path[i].1` leads from `path[i].0`).
pub fn judge_path(model: &ConsumerModel, path: &[(State, Option<Action>)]) -> Vec<PathVerdict> {
    let properties = model.properties();
    properties
        .iter()
        .map(|property| {
            let first = path.iter().position(|(state, _)| is_discovery(model, property, state));
            let reason = |step: usize| {
                let before = step.checked_sub(1).map(|b| (&path[b].0, path[b].1));
                explain(model, property.name, before, &path[step].0)
            };
            let outcome = match (&property.expectation, first) {
                (Expectation::Always | Expectation::Eventually, None) => PathOutcome::HoldsSoFar,
                (Expectation::Always | Expectation::Eventually, Some(step)) => {
                    PathOutcome::Violated { step, reason: reason(step) }
                }
                (Expectation::Sometimes, None) => PathOutcome::NotReached,
                (Expectation::Sometimes, Some(step)) => PathOutcome::Reached { step, reason: reason(step) },
            };
            let expectation = match property.expectation {
                Expectation::Always => "always",
                Expectation::Eventually => "eventually",
                Expectation::Sometimes => "sometimes",
            };
            let role = match role_of(property.name) {
                Role::Safety => "safety",
                Role::FaultWitness => "fault witness",
                Role::Observation => "observation",
            };
            PathVerdict { name: property.name, expectation, role, outcome }
        })
        .collect()
}

/// Where `name` first fails on `path` and why, in the words of the timeline and the explorer
/// (`judge_path`): the CLI's and the HTML report's line under a counterexample. `None` when
/// the path keeps `name` (not a counterexample of it).
pub fn first_violation(model: &ConsumerModel, path: &[(State, Option<Action>)], name: &str) -> Option<(usize, String)> {
    let verdicts = judge_path(model, path);
    match verdicts.into_iter().find(|verdict| verdict.name == name)?.outcome {
        PathOutcome::Violated { step, reason } => Some((step, reason)),
        PathOutcome::HoldsSoFar | PathOutcome::Reached { .. } | PathOutcome::NotReached => None,
    }
}

/// Why `name` is discovered at `state`, reached from `before` by its action: for a safety
/// property the first offending record or row in words, for a `sometimes` property the step.
pub fn explain(model: &ConsumerModel, name: &str, before: Option<(&State, Option<Action>)>, state: &State) -> String {
    let step = before.and_then(|(b, action)| action.map(|a| model.describe_step(b, &a)));
    let total_before = |g: usize| before.map_or(0, |(b, _)| b.groups[g].store.total);
    let found = match name {
        "no-duplicate" => duplicate(state, total_before),
        "contiguous-prefix" => skipped(state),
        "effectively-once" => duplicate(state, total_before).or_else(|| skipped(state)),
        "monotonic-checkpoint" => moved_back(state),
        "group-isolation" => isolation_broken(model, state),
        "fenced-writes" => zombie_landed(model, before),
        "no-silent-skip" | "reset-accounted" => unaccounted(state),
        "bounded-retries" => over_retried(model, state),
        "latest-wins" => latest_lost(state),
        "stores-agree" => stores_differ(state),
        "external-exactly-once" => emails_wrong(state),
        "no-duplicate-append" => appended_twice(state),
        "refusal-justified" => {
            flagged(state, |g| g.ghost.unjustified_refusal, "g{} refused while its group was not ahead of the log")
        }
        "committed-read" => {
            flagged(state, |g| g.ghost.read_truncated, "g{} applied a record that then left the leader's log")
        }
        "no-aborted-read" => {
            flagged(state, |g| g.ghost.read_aborted, "g{}'s downstream reader read a record of an aborted transaction")
        }
        _ => None,
    };
    match (found, role_of(name), step) {
        (Some(found), _, _) => found,
        (None, Role::Safety, Some(step)) => format!("{name} fails after: {step}"),
        (None, Role::Safety, None) => format!("{name} fails in the initial state"),
        (None, Role::FaultWitness | Role::Observation, Some(step)) => step,
        (None, Role::FaultWitness | Role::Observation, None) => "in the initial state".to_string(),
    }
}

fn duplicate(state: &State, total_before: impl Fn(usize) -> i64) -> Option<String> {
    groups_partitions(state).find_map(|(g, group, p)| {
        let offset = group.ghost.applied[p].iter().position(|&count| count > 1)?;
        let count = group.ghost.applied[p][offset];
        let times = if count == 2 { "twice".to_string() } else { format!("{count} times") };
        let total = group.store.total;
        Some(format!("g{g} p{p} offset {offset} applied {times}: total {} -> {total}", total_before(g)))
    })
}

fn skipped(state: &State) -> Option<String> {
    groups_partitions(state).find_map(|(g, group, p)| {
        let next = group.store.partitions[p].next_offset;
        let below = usize::from(next).min(state.log[p].len());
        let offset = (0..below).find(|&o| group.ghost.applied[p][o] == 0 && !is_held_unapplied(group, p, o as u8))?;
        Some(format!("g{g} checkpoint of p{p} is {next} but offset {offset} was never applied: skipped"))
    })
}

fn unaccounted(state: &State) -> Option<String> {
    groups_partitions(state).find_map(|(g, group, p)| {
        let next = group.store.partitions[p].next_offset;
        let below = usize::from(next).min(state.log[p].len());
        let offset = (0..below).find(|&o| {
            let (count, o8) = (group.ghost.applied[p][o], o as u8);
            let dead = group.store.is_dead_lettered(p as u8, o8);
            let accounted = dead || group.store.is_reset_over(p as u8, o8) || is_held_unapplied(group, p, o8);
            !((count == 1 && !dead) || (count == 0 && accounted))
        })?;
        let count = group.ghost.applied[p][offset];
        Some(format!(
            "g{g} p{p} offset {offset}, below checkpoint {next}, applied {count} times and not accounted for \
             (no dead letter, no recorded reset)"
        ))
    })
}

fn moved_back(state: &State) -> Option<String> {
    groups_partitions(state).find_map(|(g, group, p)| {
        let (now, high) = (group.store.partitions[p].next_offset, group.ghost.high_water[p]);
        (now < high).then(|| format!("g{g} checkpoint of p{p} moved back {high} -> {now}"))
    })
}

fn isolation_broken(model: &ConsumerModel, state: &State) -> Option<String> {
    state.groups.iter().enumerate().find_map(|(g, group)| {
        if group.ghost.foreign_write {
            return Some(format!("a step of another group changed g{g}'s store"));
        }
        let applications: i64 = group.ghost.applied.iter().flatten().map(|&count| i64::from(count)).sum();
        let own = model.config.delta.checked_mul(applications)?.checked_add(group.ghost.lost_sum)?;
        (group.store.total != own)
            .then(|| format!("g{g} total {} but its own applications sum to {own}", group.store.total))
    })
}

fn zombie_landed(model: &ConsumerModel, before: Option<(&State, Option<Action>)>) -> Option<String> {
    let (state, action) = before?;
    let action = action?;
    let (group, owner, partition) = action.lease_step()?;
    let stored = state.groups[usize::from(group)].store.partitions[usize::from(partition)].epoch;
    let lease = state.lease(group, owner, partition)?;
    let who = model.who(state, &action);
    Some(format!("zombie write landed: {who} wrote with epoch {} < {stored}", lease.epoch))
}

fn over_retried(model: &ConsumerModel, state: &State) -> Option<String> {
    let max = model.config.max_attempts;
    groups_partitions(state).find_map(|(g, group, p)| {
        let failures = group.ghost.failures[p];
        (failures > max).then(|| format!("g{g} p{p}: the poison record was attempted {failures} times (max {max})"))
    })
}

fn latest_lost(state: &State) -> Option<String> {
    state.groups.iter().enumerate().find_map(|(g, group)| {
        let applied = group.ghost.applied.iter().flat_map(|a| a.iter().enumerate().filter(|(_, &c)| c > 0));
        let expected = applied.map(|(o, _)| o as u8 + 1).max();
        (group.store.value != expected).then(|| {
            format!("g{g} holds value {:?} but the highest applied offset sets {expected:?}", group.store.value)
        })
    })
}

fn stores_differ(state: &State) -> Option<String> {
    state.groups.iter().enumerate().find_map(|(g, group)| {
        (group.index != group.store.facts).then(|| {
            let list = |facts: Vec<String>| facts.join(", ");
            let facts = list(group.store.facts.iter().map(|(p, o)| format!("p{p}/{o}")).collect());
            let index = list(group.index.iter().map(|(p, o)| format!("p{p}/{o}")).collect());
            format!("g{g} is at rest but its index holds {{{index}}} and its store {{{facts}}}")
        })
    })
}

fn emails_wrong(state: &State) -> Option<String> {
    state.groups.iter().enumerate().find_map(|(g, group)| {
        let twice = group.inbox.iter().find(|(_, &count)| count > 1);
        twice.map(|((p, o), _)| format!("g{g} p{p} offset {o}: the email was sent more than once"))
    })
}

fn appended_twice(state: &State) -> Option<String> {
    state.sends.iter().enumerate().find_map(|(p, sends)| {
        let twice = sends.iter().enumerate().find(|(i, send)| sends[..*i].contains(send))?;
        Some(format!("p{p}: send {} appears twice in the log (again at offset {})", twice.1, twice.0))
    })
}

/// `what` of the first group whose ghost flag `set` is up, `{}` standing for its number.
fn flagged(state: &State, set: impl Fn(&Group) -> bool, what: &str) -> Option<String> {
    let g = state.groups.iter().position(set)?;
    Some(what.replacen("{}", &g.to_string(), 1))
}

/// Every (group, partition) of a state, groups first.
fn groups_partitions(state: &State) -> impl Iterator<Item = (usize, &Group, usize)> {
    state.groups.iter().enumerate().flat_map(|(g, group)| (0..group.store.partitions.len()).map(move |p| (g, group, p)))
}

/// The state as a person reads it: the log, per group the total and each partition's row, per
/// owner its leases with in-flight records and their stages, the ghost summarised in one line,
/// the faults spent and the situations the step into it reached (`State::witnessed`). (`{:?}`
/// of a `State` is the full form.)
pub fn compact(state: &State) -> String {
    let mut out = String::new();
    for (p, deltas) in state.log.iter().enumerate() {
        let records: Vec<String> = deltas.iter().enumerate().map(|(o, d)| format!("{o}:{d:+}")).collect();
        let start =
            state
                .log_start
                .get(p)
                .map_or(String::new(), |&s| if s > 0 { format!(" (start {s})") } else { String::new() });
        let _ = writeln!(out, "log p{p}: [{}]{start}", records.join(" "));
    }
    for (g, group) in state.groups.iter().enumerate() {
        let rows: Vec<String> = (group.store.partitions.iter().enumerate())
            .map(|(p, row)| {
                let stamp = row.stamp.map_or(String::new(), |s| format!(" stamp {s}"));
                let forming = group.forming[p].map_or(String::new(), |to| format!(" (forming: to o{to})"));
                format!("p{p} next {} epoch {} owner o{}{stamp}{forming}", row.next_offset, row.epoch, row.owner)
            })
            .collect();
        let _ = writeln!(out, "g{g}: total {} | {}", group.store.total, rows.join(" | "));
        for (o, owner) in group.slots() {
            let _ = writeln!(out, "  {}", owner_line(g as u8, group, o, owner));
        }
        let _ = writeln!(out, "  ghost: {}", ghost_line(group));
    }
    let faults = [
        ("crashes", state.crashes_used),
        ("rebalances", state.rebalances_used),
        ("pauses", state.pauses_used),
        ("lost acks", state.ack_losses_used),
        ("retentions", state.retentions_used),
        ("log losses", state.log_losses_used),
        ("leader failures", state.leader_failures_used),
        ("ISR shrinks", state.isr_shrinks_used),
    ];
    let spent: Vec<String> = faults.iter().filter(|(_, n)| *n > 0).map(|(name, n)| format!("{name} {n}")).collect();
    let _ = writeln!(out, "faults spent: {}", if spent.is_empty() { "none".to_string() } else { spent.join(", ") });
    let reached: Vec<&str> = Witness::ALL.iter().filter(|&&w| state.has_witnessed(w)).map(|w| w.name()).collect();
    let reached = if reached.is_empty() { "nothing".to_string() } else { reached.join(", ") };
    let _ = write!(out, "this step reached: {reached}");
    out
}

/// The owner in slot `slot` of group `group` as spec.md §2.2 spells it: `gG/oO`, or `gG/oO'`
/// for the earlier incarnation of owner O a paused slot holds. (A free paused slot, which runs
/// no owner, is named by its slot number.)
pub fn owner_name(state: &State, group: u8, slot: u8) -> String {
    let slots = state.groups.get(usize::from(group)).map(|g| g.owners.iter().chain(&g.paused));
    match slots.and_then(|mut slots| slots.nth(usize::from(slot))).and_then(|owner| owner.incarnation_of) {
        Some(of) => format!("g{group}/o{of}'"),
        None => format!("g{group}/o{slot}"),
    }
}

/// The action in words as in `state` (the state it is taken in), its acting owner named by
/// `owner_name`: `g0/o0' applies p0 offset 0 ...` where `Action`'s `Display` says `g0/o2`.
pub fn action_text(state: &State, action: &Action) -> String {
    match action.actor() {
        crate::action::Actor::Owner { group, owner } => action.named(&owner_name(state, group, owner)).to_string(),
        crate::action::Actor::Producer | crate::action::Actor::Coordinator => action.to_string(),
    }
}

fn owner_line(g: u8, group: &Group, o: u8, owner: &crate::state::Owner) -> String {
    let name = match owner.incarnation_of {
        Some(of) => format!("g{g}/o{of}' (earlier incarnation)"),
        None if usize::from(o) >= group.owners.len() => {
            return format!("paused slot {}: free", usize::from(o) - group.owners.len())
        }
        None => format!("o{o}"),
    };
    if !owner.alive {
        return format!("{name}: crashed");
    }
    let leases: Vec<String> =
        owner.leases.iter().enumerate().filter_map(|(p, lease)| lease.as_ref().map(|l| lease_text(p, l))).collect();
    match leases.is_empty() {
        true => format!("{name}: alive, owns nothing"),
        false => format!("{name}: {}", leases.join("; ")),
    }
}

fn lease_text(p: usize, lease: &Lease) -> String {
    let records: Vec<String> = lease.records.iter().map(|(o, stage)| format!("{o} {}", stage_name(*stage))).collect();
    let done = match lease.done.is_empty() {
        true => String::new(),
        false => format!(", done {:?}", lease.done.iter().collect::<Vec<_>>()),
    };
    format!(
        "p{p} epoch {} position {} checkpoint {}, in flight {{{}}}{done}",
        lease.epoch,
        lease.position,
        lease.checkpoint,
        records.join(", ")
    )
}

fn ghost_line(group: &Group) -> String {
    let applied: Vec<String> = group.ghost.applied.iter().enumerate().map(|(p, a)| format!("p{p} {a:?}")).collect();
    let mut line = format!("applied {}", applied.join(" "));
    let flags = [
        (group.ghost.stale_write_landed, "a stale write landed"),
        (group.ghost.foreign_write, "another group wrote here"),
        (group.ghost.unjustified_refusal, "an unjustified refusal"),
        (group.ghost.read_truncated, "read a truncated record"),
        (group.ghost.read_aborted, "read an aborted record"),
    ];
    for (_, text) in flags.iter().filter(|(set, _)| *set) {
        let _ = write!(line, "; {text}");
    }
    line
}

/// A stage as the compact state prints it.
pub fn stage_name(stage: Stage) -> &'static str {
    match stage {
        Stage::Fetched => "fetched",
        Stage::Committed => "committed",
        Stage::EffectApplied => "effect applied",
        Stage::Recorded => "recorded",
        Stage::Exhausted => "exhausted",
        Stage::Produced => "produced",
        Stage::Stored => "stored",
        Stage::Emailed => "emailed",
    }
}
