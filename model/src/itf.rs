//! A trace in the Informal Trace Format (ITF, Apalache ADR-015): the trace's actions replayed
//! through the model, every state written out, so that tools made for TLA+ and Quint traces
//! (Apalache's and Quint's viewers, the `itf` crate, model-based testing drivers) open it.
//!
//! The encoding (spec.md §8.2, "ITF traces"):
//!
//! - every integer is `{"#bigint": "N"}`, as Apalache writes them: no reader has to know which
//!   ones could pass 2^53 (a total is an `i64`);
//! - a vector indexed by partition, group, owner slot or offset is a JSON array (a Quint list,
//!   0-based), a `SortedSet` a `{"#set": [...]}`, a `SortedMap` a `{"#map": [[k, v], ...]}`, a
//!   tuple key such as (partition, offset) a `{"#tup": [...]}`, a struct a record;
//! - an `Option` and the `OutEntry` sum are Quint's sum types: `{"tag": "Some", "value": v}`,
//!   `{"tag": "None", "value": {"#tup": []}}`, `{"tag": "Data", "value": {...}}`;
//! - a `Stage` is its kebab-case name, the witness bits the set of the names of the
//!   `sometimes` properties reached (`Witness::name`);
//! - `mbt::actionTaken` is the kind of the action into the state (`init` for state 0), as the
//!   JSON trace names it, and `mbt::nondetPicks` its fields, Quint's MBT convention: a record of
//!   every field any kind has (`PICKS`), `Some` for the action's own and `None` for the others,
//!   so that every state has one record type.
//!
//! Every field of `State` is written: the fault counters together in the record `faults`,
//! every other one as a var of its own name. The destructurings below have no `..`, so a new
//! field fails to compile here until it is written.

use crate::check::{self, Unreachable, Verdict};
use crate::state::Witness;
use crate::state::{Ghost, Group, Lease, OutEntry, Owner, PartitionRow, ProducerState, Replicas, Stage, Store};
use crate::trace::Trace;
use crate::{Action, ConsumerModel, State};
use serde_json::{json, Map, Value};

/// What `#meta.format-description` points at.
pub const FORMAT_DESCRIPTION: &str = "https://apalache-mc.org/docs/adr/015adr-trace.html";

/// The var of the action taken into each state (Quint's MBT name), and its value in state 0.
pub const ACTION_TAKEN: &str = "mbt::actionTaken";
pub const INIT: &str = "init";

/// The var of the action's parameters (Quint's MBT name).
pub const NONDET_PICKS: &str = "mbt::nondetPicks";

/// Every field an action of some kind has, by its name in the JSON traces: the fields of
/// `mbt::nondetPicks`. (`nondet_picks` refuses an action with any other.)
pub const PICKS: [&str; 9] =
    ["group", "owner", "partition", "offset", "next_offset", "delta", "before", "keep", "to_owner"];

/// The vars of every state, in the order `vars` lists them.
pub const VARS: [&str; 13] = [
    ACTION_TAKEN,
    NONDET_PICKS,
    "log",
    "sends",
    "log_start",
    "damaged",
    "producer",
    "replicas",
    "output",
    "reader",
    "groups",
    "faults",
    "witnessed",
];

/// The ITF file name of a trace: the JSON trace's stem and `.itf.json`
/// (`STRATEGY--PROPERTY.itf.json`), so that both sort together.
pub fn file_name(trace: &Trace) -> String {
    let json = trace.file_name();
    let stem = json.strip_suffix(".json").unwrap_or(&json);
    format!("{stem}.itf.json")
}

/// The ITF document of `trace`: its actions replayed from the initial state of its
/// configuration, one ITF state per state visited (so one more than there are actions).
pub fn from_trace(trace: &Trace) -> Result<Value, Unreachable> {
    let model = ConsumerModel::new(trace.config.clone());
    let states = check::replay(&model, &trace.actions)?;
    let taken = std::iter::once(None).chain(trace.actions.iter().map(Some));
    let states: Vec<Value> =
        states.iter().zip(taken).enumerate().map(|(index, (state, action))| itf_state(index, action, state)).collect();
    Ok(json!({ "#meta": meta(trace), "vars": VARS, "states": states }))
}

/// `from_trace` as the file's text: pretty JSON with one state per line, so that a trace reads
/// (and diffs) state by state, as the JSON trace does action by action.
pub fn to_json(trace: &Trace) -> Result<String, Unreachable> {
    let document = from_trace(trace)?;
    let states = document["states"].as_array().map_or(&[][..], Vec::as_slice);
    let states: Vec<String> = states.iter().map(|state| format!("    {state}")).collect();
    Ok(format!(
        "{{\n  \"#meta\": {},\n  \"vars\": {},\n  \"states\": [\n{}\n  ]\n}}\n",
        document["#meta"],
        document["vars"],
        states.join(",\n")
    ))
}

/// `#meta`: the format, and what the trace shows and how to get it again. Only strings: the
/// `itf` crate reads the fields it does not know as strings.
fn meta(trace: &Trace) -> Value {
    let command = format!("model check {}", trace.config.flags());
    json!({
        "format": "ITF",
        "format-description": FORMAT_DESCRIPTION,
        "source": trace.file_name(),
        "description": format!("{}; reproduce with: {command}", trace.description),
        "strategy": trace.config.strategy.to_string(),
        "property": trace.property.as_deref().unwrap_or("none"),
        "verdict": trace.verdict.as_ref().map_or("none", Verdict::word),
        "command": command,
        "tool": trace.tool.as_deref().unwrap_or(crate::TOOL),
    })
}

/// One ITF state: its index, the action into it, and every field of `state`.
fn itf_state(index: usize, action: Option<&Action>, state: &State) -> Value {
    let State {
        log,
        sends,
        producer,
        ack_losses_used,
        log_start,
        retentions_used,
        groups,
        crashes_used,
        rebalances_used,
        pauses_used,
        log_losses_used,
        leader_failures_used,
        isr_shrinks_used,
        replicas,
        output,
        reader,
        damaged,
        witnessed,
    } = state;
    let faults = json!({
        "crashes_used": int(*crashes_used),
        "rebalances_used": int(*rebalances_used),
        "pauses_used": int(*pauses_used),
        "ack_losses_used": int(*ack_losses_used),
        "retentions_used": int(*retentions_used),
        "log_losses_used": int(*log_losses_used),
        "leader_failures_used": int(*leader_failures_used),
        "isr_shrinks_used": int(*isr_shrinks_used),
    });
    let mut vars = Map::new();
    vars.insert("#meta".to_string(), json!({ "index": index }));
    vars.insert(ACTION_TAKEN.to_string(), json!(action.map_or(INIT.to_string(), kind)));
    vars.insert(NONDET_PICKS.to_string(), nondet_picks(action));
    vars.insert("log".to_string(), list(log, |deltas| list(deltas, |&delta| int(delta))));
    vars.insert("sends".to_string(), list(sends, |sends| list(sends, |&send| int(send))));
    vars.insert("log_start".to_string(), list(log_start, |&start| int(start)));
    vars.insert("damaged".to_string(), json!(damaged));
    vars.insert("producer".to_string(), list(producer, producer_state));
    vars.insert("replicas".to_string(), list(replicas, replicas_value));
    vars.insert("output".to_string(), list(output, |entries| list(entries, out_entry)));
    vars.insert("reader".to_string(), list(reader, |&position| int(position)));
    vars.insert("groups".to_string(), list(groups, group));
    vars.insert("faults".to_string(), faults);
    vars.insert("witnessed".to_string(), witnessed_names(*witnessed));
    Value::Object(vars)
}

/// The action's kind as the JSON trace writes it (`fetch`, `apply-atomic`, ...).
fn kind(action: &Action) -> String {
    let value = serde_json::to_value(action).expect("an action always serialises");
    value["kind"].as_str().expect("invariant: an action serialises with its kind").to_string()
}

/// Every field of `PICKS`, `Some` with the action's value where it has the field.
fn nondet_picks(action: Option<&Action>) -> Value {
    let fields = match action {
        Some(action) => serde_json::to_value(action).expect("an action always serialises"),
        None => json!({}),
    };
    let fields = fields.as_object().expect("invariant: an action serialises as an object");
    let unknown = fields.keys().find(|name| *name != "kind" && !PICKS.contains(&name.as_str()));
    assert!(unknown.is_none(), "invariant: PICKS lists every action field ({unknown:?} is missing)");
    let picks: Map<String, Value> = PICKS
        .iter()
        .map(|&name| {
            let pick = fields.get(name).and_then(Value::as_i64);
            (name.to_string(), option(pick.map(int)))
        })
        .collect();
    Value::Object(picks)
}

fn producer_state(producer: &ProducerState) -> Value {
    let ProducerState { sent, unacked } = producer;
    json!({ "sent": int(*sent), "unacked": option(unacked.map(int)) })
}

fn replicas_value(replicas: &Replicas) -> Value {
    let Replicas { logs, leader, hw, isr, alive, in_flight, acked } = replicas;
    let acked: Vec<Value> = (0..u16::BITS).filter(|bit| acked & (1 << bit) != 0).map(int).collect();
    json!({
        "logs": list(logs, |log| list(log, |&send| int(send))),
        "leader": option(leader.map(int)),
        "hw": int(*hw),
        "isr": isr,
        "alive": alive,
        "in_flight": option(in_flight.map(int)),
        "acked": set(acked),
    })
}

fn out_entry(entry: &OutEntry) -> Value {
    match *entry {
        OutEntry::Data { input, epoch } => variant("Data", json!({ "input": int(input), "epoch": int(epoch) })),
        OutEntry::Marker { input, epoch, commit } => {
            variant("Marker", json!({ "input": int(input), "epoch": int(epoch), "commit": commit }))
        }
    }
}

fn group(group: &Group) -> Value {
    let Group { store, inbox, index, owners, paused, forming, ghost } = group;
    json!({
        "store": store_value(store),
        "inbox": map(inbox.iter().map(|(&key, &count)| (pair(key), int(count)))),
        "index": set(index.iter().map(|&key| pair(key)).collect()),
        "owners": list(owners, owner),
        "paused": list(paused, owner),
        "forming": list(forming, |to| option(to.map(int))),
        "ghost": ghost_value(ghost),
    })
}

fn store_value(store: &Store) -> Value {
    let Store { total, partitions, processed, attempts, dead_letters, resets, value, facts, outbox } = store;
    let triples = |items: Vec<(u8, u8, u8)>| set(items.into_iter().map(|(a, b, c)| tuple(&[a, b, c])).collect());
    json!({
        "total": int(*total),
        "partitions": list(partitions, partition_row),
        "processed": set(processed.iter().map(|&key| pair(key)).collect()),
        "attempts": map(attempts.iter().map(|(&key, &count)| (pair(key), int(count)))),
        "dead_letters": triples(dead_letters.iter().copied().collect()),
        "resets": triples(resets.iter().copied().collect()),
        "value": option(value.map(int)),
        "facts": set(facts.iter().map(|&key| pair(key)).collect()),
        "outbox": set(outbox.iter().map(|&key| pair(key)).collect()),
    })
}

fn partition_row(row: &PartitionRow) -> Value {
    let PartitionRow { next_offset, epoch, owner, stamp } = row;
    json!({
        "next_offset": int(*next_offset),
        "epoch": int(*epoch),
        "owner": int(*owner),
        "stamp": option(stamp.map(int)),
    })
}

fn owner(owner: &Owner) -> Value {
    let Owner { alive, leases, incarnation_of } = owner;
    json!({
        "alive": alive,
        "leases": list(leases, |lease| option(lease.as_ref().map(lease_value))),
        "incarnation_of": option(incarnation_of.map(int)),
    })
}

fn lease_value(lease: &Lease) -> Value {
    let Lease { epoch, position, checkpoint, records, done } = lease;
    json!({
        "epoch": int(*epoch),
        "position": int(*position),
        "checkpoint": int(*checkpoint),
        "records": map(records.iter().map(|(&offset, &stage)| (int(offset), json!(stage_name(stage))))),
        "done": set(done.iter().map(|&offset| int(offset)).collect()),
    })
}

fn ghost_value(ghost: &Ghost) -> Value {
    let Ghost {
        applied,
        high_water,
        stale_write_landed,
        foreign_write,
        failures,
        lost_sum,
        unjustified_refusal,
        read_truncated,
        read_aborted,
    } = ghost;
    json!({
        "applied": list(applied, |counts| list(counts, |&count| int(count))),
        "high_water": list(high_water, |&offset| int(offset)),
        "stale_write_landed": stale_write_landed,
        "foreign_write": foreign_write,
        "failures": list(failures, |&count| int(count)),
        "lost_sum": int(*lost_sum),
        "unjustified_refusal": unjustified_refusal,
        "read_truncated": read_truncated,
        "read_aborted": read_aborted,
    })
}

/// A stage's name in an ITF lease (kebab-case, as the JSON traces name kinds).
fn stage_name(stage: Stage) -> &'static str {
    match stage {
        Stage::Fetched => "fetched",
        Stage::Committed => "committed",
        Stage::EffectApplied => "effect-applied",
        Stage::Recorded => "recorded",
        Stage::Exhausted => "exhausted",
        Stage::Produced => "produced",
        Stage::Stored => "stored",
        Stage::Emailed => "emailed",
    }
}

/// The names of the witnesses whose bits are set.
fn witnessed_names(witnessed: u32) -> Value {
    let named = Witness::ALL.iter().fold(0u32, |bits, &witness| bits | 1 << witness as u32);
    assert!(witnessed & !named == 0, "invariant: Witness::ALL names every witness bit");
    let names = Witness::ALL.iter().filter(|&&witness| witnessed & (1 << witness as u32) != 0);
    set(names.map(|witness| json!(witness.name())).collect())
}

/// Every integer, as Apalache writes them.
fn int(value: impl Into<i64>) -> Value {
    json!({ "#bigint": value.into().to_string() })
}

fn list<T>(items: &[T], each: impl Fn(&T) -> Value) -> Value {
    Value::Array(items.iter().map(each).collect())
}

/// A set of values the caller gives in a deterministic order (the state's sorted sets).
fn set(items: Vec<Value>) -> Value {
    json!({ "#set": items })
}

fn map(entries: impl Iterator<Item = (Value, Value)>) -> Value {
    let entries: Vec<Value> = entries.map(|(key, value)| json!([key, value])).collect();
    json!({ "#map": entries })
}

fn tuple(items: &[u8]) -> Value {
    json!({ "#tup": items.iter().map(|&item| int(item)).collect::<Vec<_>>() })
}

/// A (partition, offset) key.
fn pair((partition, offset): (u8, u8)) -> Value {
    tuple(&[partition, offset])
}

/// A Quint sum type's value.
fn variant(tag: &str, value: Value) -> Value {
    json!({ "tag": tag, "value": value })
}

/// An `Option` as Quint's sum type (its `None` carries the unit, the empty tuple).
fn option(value: Option<Value>) -> Value {
    match value {
        Some(value) => variant("Some", value),
        None => variant("None", json!({ "#tup": [] })),
    }
}
