//! The ITF of a trace (`model::itf`), read back with the `itf` crate (Informal Systems' reader
//! of Apalache and Quint traces) into Rust types: every state equals the model's state the
//! trace's actions replay to, and the actions are in `mbt::actionTaken` / `mbt::nondetPicks`.

mod common;

use common::small_config;
use model::check::{self, CheckOptions, Verdict};
use model::state::{OutEntry, Stage, State};
use model::trace::Trace;
use model::{Action, ConsumerModel, Strategy};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Quint's `Option`, as the ITF writes every `Option` of the state.
#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(tag = "tag", content = "value")]
enum Opt<T> {
    Some(T),
    None,
}

fn opt<T>(value: Option<T>) -> Opt<T> {
    value.map_or(Opt::None, Opt::Some)
}

/// One ITF state as a reader who knows only spec.md §8.2's mapping decodes it. Unknown fields
/// are refused, so a var or field the writer adds must be read here too.
#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct ItfState {
    #[serde(rename = "mbt::actionTaken")]
    action_taken: String,
    #[serde(rename = "mbt::nondetPicks")]
    picks: Picks,
    log: Vec<Vec<i64>>,
    sends: Vec<Vec<u8>>,
    log_start: Vec<u8>,
    damaged: Vec<bool>,
    producer: Vec<Producer>,
    replicas: Vec<Replicas>,
    output: Vec<Vec<Entry>>,
    reader: Vec<u8>,
    groups: Vec<Group>,
    faults: Faults,
    witnessed: BTreeSet<String>,
}

#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Picks {
    group: Opt<u8>,
    owner: Opt<u8>,
    partition: Opt<u8>,
    offset: Opt<u8>,
    next_offset: Opt<u8>,
    delta: Opt<i64>,
    before: Opt<u8>,
    keep: Opt<u8>,
    to_owner: Opt<u8>,
}

#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Producer {
    sent: u8,
    unacked: Opt<u8>,
}

#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Replicas {
    logs: Vec<Vec<u8>>,
    leader: Opt<u8>,
    hw: u8,
    isr: Vec<bool>,
    alive: Vec<bool>,
    in_flight: Opt<u8>,
    acked: BTreeSet<u8>,
}

#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(tag = "tag", content = "value")]
enum Entry {
    Data { input: u8, epoch: u8 },
    Marker { input: u8, epoch: u8, commit: bool },
}

#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Group {
    store: Store,
    inbox: BTreeMap<(u8, u8), u8>,
    index: BTreeSet<(u8, u8)>,
    owners: Vec<Owner>,
    paused: Vec<Owner>,
    forming: Vec<Opt<u8>>,
    ghost: Ghost,
}

#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Store {
    total: i64,
    partitions: Vec<Row>,
    processed: BTreeSet<(u8, u8)>,
    attempts: BTreeMap<(u8, u8), u8>,
    dead_letters: BTreeSet<(u8, u8, u8)>,
    resets: BTreeSet<(u8, u8, u8)>,
    value: Opt<u8>,
    facts: BTreeSet<(u8, u8)>,
    outbox: BTreeSet<(u8, u8)>,
}

#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    next_offset: u8,
    epoch: u8,
    owner: u8,
    stamp: Opt<u8>,
}

#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Owner {
    alive: bool,
    leases: Vec<Opt<Lease>>,
    incarnation_of: Opt<u8>,
}

#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Lease {
    epoch: u8,
    position: u8,
    checkpoint: u8,
    records: BTreeMap<u8, String>,
    done: BTreeSet<u8>,
}

#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Ghost {
    applied: Vec<Vec<u8>>,
    high_water: Vec<u8>,
    stale_write_landed: bool,
    foreign_write: bool,
    failures: Vec<u8>,
    lost_sum: i64,
    unjustified_refusal: bool,
    read_truncated: bool,
    read_aborted: bool,
}

#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Faults {
    crashes_used: u8,
    rebalances_used: u8,
    pauses_used: u8,
    ack_losses_used: u8,
    retentions_used: u8,
    log_losses_used: u8,
    leader_failures_used: u8,
    isr_shrinks_used: u8,
}

/// What the ITF of `state` must decode to, built from the model's state field by field (the
/// test's side of the mapping: written apart from `model::itf`, from spec.md §8.2).
fn expected_state(state: &State, action: Option<&Action>) -> ItfState {
    let kind = |a: &Action| serde_json::to_value(a).unwrap()["kind"].as_str().unwrap().to_string();
    ItfState {
        action_taken: action.map_or("init".to_string(), kind),
        picks: expected_picks(action),
        log: state.log.clone(),
        sends: state.sends.clone(),
        log_start: state.log_start.clone(),
        damaged: state.damaged.clone(),
        producer: state.producer.iter().map(|p| Producer { sent: p.sent, unacked: opt(p.unacked) }).collect(),
        replicas: state
            .replicas
            .iter()
            .map(|r| Replicas {
                logs: r.logs.to_vec(),
                leader: opt(r.leader),
                hw: r.hw,
                isr: r.isr.to_vec(),
                alive: r.alive.to_vec(),
                in_flight: opt(r.in_flight),
                acked: (0..16).filter(|bit| r.acked & (1 << bit) != 0).collect(),
            })
            .collect(),
        output: state.output.iter().map(|entries| entries.iter().map(entry).collect()).collect(),
        reader: state.reader.clone(),
        groups: state.groups.iter().map(expected_group).collect(),
        faults: Faults {
            crashes_used: state.crashes_used,
            rebalances_used: state.rebalances_used,
            pauses_used: state.pauses_used,
            ack_losses_used: state.ack_losses_used,
            retentions_used: state.retentions_used,
            log_losses_used: state.log_losses_used,
            leader_failures_used: state.leader_failures_used,
            isr_shrinks_used: state.isr_shrinks_used,
        },
        witnessed: (model::state::Witness::ALL.iter())
            .filter(|&&witness| state.has_witnessed(witness))
            .map(|witness| witness.name().to_string())
            .collect(),
    }
}

fn expected_group(group: &model::state::Group) -> Group {
    let store = &group.store;
    let row = |row: &model::state::PartitionRow| Row {
        next_offset: row.next_offset,
        epoch: row.epoch,
        owner: row.owner,
        stamp: opt(row.stamp),
    };
    Group {
        store: Store {
            total: store.total,
            partitions: store.partitions.iter().map(row).collect(),
            processed: store.processed.iter().copied().collect(),
            attempts: store.attempts.iter().map(|(&k, &v)| (k, v)).collect(),
            dead_letters: store.dead_letters.iter().copied().collect(),
            resets: store.resets.iter().copied().collect(),
            value: opt(store.value),
            facts: store.facts.iter().copied().collect(),
            outbox: store.outbox.iter().copied().collect(),
        },
        inbox: group.inbox.iter().map(|(&k, &v)| (k, v)).collect(),
        index: group.index.iter().copied().collect(),
        owners: group.owners.iter().map(expected_owner).collect(),
        paused: group.paused.iter().map(expected_owner).collect(),
        forming: group.forming.iter().map(|&to| opt(to)).collect(),
        ghost: Ghost {
            applied: group.ghost.applied.clone(),
            high_water: group.ghost.high_water.clone(),
            stale_write_landed: group.ghost.stale_write_landed,
            foreign_write: group.ghost.foreign_write,
            failures: group.ghost.failures.clone(),
            lost_sum: group.ghost.lost_sum,
            unjustified_refusal: group.ghost.unjustified_refusal,
            read_truncated: group.ghost.read_truncated,
            read_aborted: group.ghost.read_aborted,
        },
    }
}

fn expected_owner(owner: &model::state::Owner) -> Owner {
    let lease = |lease: &model::state::Lease| Lease {
        epoch: lease.epoch,
        position: lease.position,
        checkpoint: lease.checkpoint,
        records: lease.records.iter().map(|(&o, &stage)| (o, stage_name(stage).to_string())).collect(),
        done: lease.done.iter().copied().collect(),
    };
    Owner {
        alive: owner.alive,
        leases: owner.leases.iter().map(|l| opt(l.as_ref().map(lease))).collect(),
        incarnation_of: opt(owner.incarnation_of),
    }
}

/// A stage's name as spec.md §8.2 gives it.
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

fn entry(entry: &OutEntry) -> Entry {
    match *entry {
        OutEntry::Data { input, epoch } => Entry::Data { input, epoch },
        OutEntry::Marker { input, epoch, commit } => Entry::Marker { input, epoch, commit },
    }
}

/// The action's fields as the JSON trace writes them, each in its pick; the others `None`.
fn expected_picks(action: Option<&Action>) -> Picks {
    let fields = action.map_or(serde_json::json!({}), |a| serde_json::to_value(a).unwrap());
    let u8_field = |name: &str| opt(fields.get(name).map(|v| u8::try_from(v.as_u64().unwrap()).unwrap()));
    Picks {
        group: u8_field("group"),
        owner: u8_field("owner"),
        partition: u8_field("partition"),
        offset: u8_field("offset"),
        next_offset: u8_field("next_offset"),
        delta: opt(fields.get("delta").map(|v| v.as_i64().unwrap())),
        before: u8_field("before"),
        keep: u8_field("keep"),
        to_owner: u8_field("to_owner"),
    }
}

/// Writes the ITF of `trace`, reads it back with the `itf` crate and asserts the metadata and
/// that every state is the model's (one per action, plus the initial one); the states read.
fn round_trip(trace: &Trace) -> Vec<ItfState> {
    let name = trace.file_name();
    let text = model::itf::to_json(trace).unwrap_or_else(|e| panic!("{name}: {e}"));
    let itf = itf::trace_from_str::<ItfState>(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
    assert_eq!(itf.meta.format.as_deref(), Some("ITF"), "{name}");
    assert_eq!(itf.meta.format_description.as_deref(), Some(model::itf::FORMAT_DESCRIPTION), "{name}");
    assert_eq!(itf.meta.source.as_deref(), Some(name.as_str()));
    let verdict = trace.verdict.as_ref().map_or("none", Verdict::word);
    let property = trace.property.as_deref().unwrap_or("none");
    assert_eq!(itf.meta.other.get("verdict").map(String::as_str), Some(verdict), "{name}");
    assert_eq!(itf.meta.other.get("property").map(String::as_str), Some(property), "{name}");
    let command = format!("model check {}", trace.config.flags());
    assert_eq!(itf.meta.other.get("command"), Some(&command), "{name}");
    assert_eq!(itf.vars, model::itf::VARS, "{name}");
    let states = check::replay(&ConsumerModel::new(trace.config.clone()), &trace.actions).expect("the trace replays");
    assert_eq!(itf.states.len(), trace.actions.len() + 1, "{name}");
    let taken = std::iter::once(None).chain(trace.actions.iter().map(Some));
    for (index, ((read, state), action)) in itf.states.iter().zip(&states).zip(taken).enumerate() {
        assert_eq!(read.meta.index, Some(index as u64), "{name}");
        assert_eq!(read.value, expected_state(state, action), "{name}: state {index}");
    }
    itf.states.into_iter().map(|state| state.value).collect()
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces")
}

fn corpus_trace(file: &str) -> Trace {
    let text = std::fs::read_to_string(corpus_dir().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    Trace::from_json(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// What a row expects of its last state.
struct Last {
    /// Each group's stored total.
    totals: &'static [i64],
    /// Each group's stored next offset per partition.
    next_offsets: &'static [&'static [u8]],
    /// Group 0's application counts per partition and offset.
    applied: &'static [&'static [u8]],
}

/// The kinds of `mbt::actionTaken`, state by state, and the last state's values.
fn assert_row(source: &str, states: &[ItfState], kinds: &[&str], last: &Last) {
    let taken: Vec<&str> = states.iter().map(|s| s.action_taken.as_str()).collect();
    assert_eq!(taken, kinds, "{source}");
    let end = states.last().expect("a trace has its initial state");
    let totals: Vec<i64> = end.groups.iter().map(|g| g.store.total).collect();
    assert_eq!(totals, last.totals, "{source}");
    let next: Vec<Vec<u8>> =
        end.groups.iter().map(|g| g.store.partitions.iter().map(|row| row.next_offset).collect()).collect();
    assert_eq!(next, last.next_offsets, "{source}");
    assert_eq!(end.groups[0].ghost.applied, last.applied, "{source}");
}

/// Corpus traces that use every encoding: a duplicate (the totals), transactions (the output
/// partition's sum), a replicated partition (its replicas), the dead-letter table (a set of
/// triples and a map), a paused incarnation (a paused slot), retention with a recorded reset.
#[test]
fn itf_of_corpus_traces_reads_back_as_the_replayed_states() {
    #[rustfmt::skip]
    let rows: [(&str, &[&str], Last); 6] = [
        (
            "effect-first--no-duplicate.json",
            &["init", "append", "fetch", "apply-effect", "rebalance", "fetch", "apply-effect"],
            Last { totals: &[10, 0], next_offsets: &[&[0], &[0]], applied: &[&[2, 0, 0]] },
        ),
        (
            "txn-unfenced--effectively-once.json",
            &["init", "append", "fetch", "produce-output", "pause", "fetch", "produce-output", "commit-txn", "commit-txn"],
            Last { totals: &[10], next_offsets: &[&[1]], applied: &[&[2, 0]] },
        ),
        (
            "acks-all--leader-failed.json",
            &["init", "fail-leader"],
            Last { totals: &[0], next_offsets: &[&[0]], applied: &[&[0, 0]] },
        ),
        (
            "atomic-dlq--dead-lettered.json",
            &["init", "append", "append", "fetch", "apply-atomic", "fetch", "apply-atomic", "apply-atomic", "dead-letter"],
            Last { totals: &[5], next_offsets: &[&[2]], applied: &[&[1, 0, 0]] },
        ),
        (
            "atomic-cas--paused-write.json",
            &["init", "append", "fetch", "pause", "apply-atomic"],
            Last { totals: &[5], next_offsets: &[&[1]], applied: &[&[1, 0, 0]] },
        ),
        (
            "reset-earliest--reset-recorded.json",
            &["init", "append", "retain", "reset-offset"],
            Last { totals: &[0], next_offsets: &[&[1]], applied: &[&[0, 0, 0]] },
        ),
    ];
    for (file, kinds, last) in rows {
        let states = round_trip(&corpus_trace(file));
        assert_row(file, &states, kinds, &last);
    }
}

/// The counterexamples `model check --traces DIR --format itf` writes for a strategy (its
/// small configuration): as many as it violates properties, each reading back as its replay.
#[test]
fn itf_of_check_counterexamples_reads_back_as_the_replayed_states() {
    let rows = [
        (
            Strategy::EffectFirst,
            vec!["no-duplicate", "effectively-once", "monotonic-checkpoint", "fenced-writes", "no-silent-skip"],
        ),
        (Strategy::AtomicCas, vec!["fenced-writes"]),
        (Strategy::AtomicFenced, vec![]),
    ];
    for (strategy, violated) in rows {
        let model = ConsumerModel::new(small_config(strategy));
        let report = check::run(&model, &CheckOptions::default(), &mut |_| {});
        let traces = Trace::counterexamples(&report);
        let properties: Vec<&str> = traces.iter().filter_map(|t| t.property.as_deref()).collect();
        assert_eq!(properties, violated, "{strategy}");
        for trace in &traces {
            let states = round_trip(trace);
            let end = states.last().expect("a trace has its initial state");
            let kinds: Vec<&str> = states.iter().map(|s| s.action_taken.as_str()).collect();
            assert_eq!(kinds[0], "init", "{strategy}");
            assert!(end.groups.iter().all(|g| g.store.partitions.len() == 1), "{strategy}");
        }
    }
}

/// Every trace of the corpus (violations and witnesses of every row) has an ITF the `itf`
/// crate reads back as the trace's replay.
#[test]
fn every_corpus_trace_has_an_itf_that_reads_back() {
    let mut files: Vec<String> = std::fs::read_dir(corpus_dir())
        .expect("the corpus is readable")
        .map(|entry| entry.expect("a directory entry").file_name().into_string().expect("a UTF-8 name"))
        .filter(|name| name.ends_with(".json") && !name.ends_with(".itf.json"))
        .collect();
    files.sort();
    assert!(files.len() > 300, "the corpus has {} traces", files.len());
    for file in files {
        round_trip(&corpus_trace(&file));
    }
}

/// The ITF file sits beside its JSON trace: the JSON's stem and `.itf.json`.
#[test]
fn the_itf_file_is_named_after_the_json_trace() {
    let trace = corpus_trace("effect-first--no-duplicate.json");
    assert_eq!(model::itf::file_name(&trace), "effect-first--no-duplicate.itf.json");
}
