//! The trace file format: round trips, rejection of bad files, and replay of what a trace holds.

mod common;

use common::small_config;
use model::check::{self, CheckOptions, Unreachable, Verdict};
use model::config::DELTA_MAX;
use model::properties::{is_safety, properties_for};
use model::trace::{Trace, TRACE_FORMAT, TRACE_VERSION};
use model::{Action, Config, ConsumerModel};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, RngSeed, TestCaseError};
use serde_json::{json, Value};
use stateright::Model;

/// Every counterexample of a strategy's small configuration, as the trace `model check
/// --traces` would write for it.
fn counterexample_traces(strategy: model::Strategy) -> Vec<Trace> {
    let model = ConsumerModel::new(small_config(strategy));
    let report = check::run(&model, &CheckOptions::default(), &mut |_| {});
    report
        .properties
        .iter()
        .filter(|p| p.verdict == Verdict::Violated)
        .map(|p| {
            let description = format!("{strategy} violates {} in {} steps", p.name, p.actions.len());
            Trace::new(model.config.clone(), Some(&p.name), Some(Verdict::Violated), description, p.actions.clone())
        })
        .collect()
}

#[test]
fn counterexample_traces_survive_a_json_round_trip_and_still_replay() {
    // Commit-first violates six properties and atomic-cas one, so that both a long list of
    // traces and a single one are written, read back and replayed.
    for (strategy, violations) in [(model::Strategy::CommitFirst, 6), (model::Strategy::AtomicCas, 1)] {
        let traces = counterexample_traces(strategy);
        assert_eq!(traces.len(), violations, "{strategy}");
        for trace in traces {
            let read = Trace::from_json(&trace.to_json()).unwrap_or_else(|e| panic!("{}: {e}", trace.file_name()));
            assert_eq!(read, trace);
            let property = read.property.as_deref().expect("a counterexample names its property");
            assert_eq!(read.file_name(), format!("{strategy}--{property}.json"));
            // What was read back must still demonstrate the violation, not merely parse.
            let model = ConsumerModel::new(read.config.clone());
            let states = check::replay(&model, &read.actions).expect("a saved counterexample replays");
            let checked = check::property_named(&model, property).expect("the trace names a property of its config");
            assert!(
                check::is_discovery(&model, &checked, states.last().expect("replay yields states")),
                "{}",
                read.file_name()
            );
        }
    }
}

/// Any action of a configuration's vocabulary: every kind, any offset and delta, and the
/// groups, owners (paused slots included) and partitions the configuration has (a trace naming
/// others is refused: `bad_trace_files_are_refused_with_a_message_naming_the_problem`). The
/// format must carry whatever it is given, enabled in the model or not.
fn any_action(config: &Config) -> impl Strategy<Value = Action> {
    let (g, o, p) = (0..config.groups, 0..config.owners + config.pauses, 0..config.partitions);
    let (to, delta) = (0..config.owners, any::<i64>());
    let step = (g.clone(), o.clone(), p.clone(), any::<u8>());
    let lease = (g.clone(), o.clone(), p.clone());
    prop_oneof![
        (p.clone(), delta).prop_map(|(partition, delta)| Action::Append { partition, delta }),
        (p.clone(), delta).prop_map(|(partition, delta)| Action::AppendAckLost { partition, delta }),
        (p.clone(), delta).prop_map(|(partition, delta)| Action::RetryAppend { partition, delta }),
        step.clone().prop_map(|(group, owner, partition, offset)| Action::Fetch { group, owner, partition, offset }),
        step.clone().prop_map(|(group, owner, partition, offset)| Action::ApplyEffect {
            group,
            owner,
            partition,
            offset
        }),
        step.clone().prop_map(|(group, owner, partition, offset)| Action::InsertProcessed {
            group,
            owner,
            partition,
            offset
        }),
        step.clone().prop_map(|(group, owner, partition, next_offset)| Action::CommitOffset {
            group,
            owner,
            partition,
            next_offset
        }),
        step.clone().prop_map(|(group, owner, partition, offset)| Action::ApplyStamped {
            group,
            owner,
            partition,
            offset
        }),
        step.clone().prop_map(|(group, owner, partition, offset)| Action::ApplyDeduped {
            group,
            owner,
            partition,
            offset
        }),
        step.clone().prop_map(|(group, owner, partition, offset)| Action::ApplyAtomic {
            group,
            owner,
            partition,
            offset
        }),
        step.prop_map(|(group, owner, partition, offset)| Action::DeadLetter { group, owner, partition, offset }),
        (p.clone(), any::<u8>()).prop_map(|(partition, before)| Action::Retain { partition, before }),
        lease.clone().prop_map(|(group, owner, partition)| Action::ResetOffset { group, owner, partition }),
        lease.clone().prop_map(|(group, owner, partition)| Action::FailOutOfRange { group, owner, partition }),
        lease.prop_map(|(group, owner, partition)| Action::RefuseAhead { group, owner, partition }),
        (g.clone(), o.clone()).prop_map(|(group, owner)| Action::Crash { group, owner }),
        (g.clone(), o.clone()).prop_map(|(group, owner)| Action::Restart { group, owner }),
        (g.clone(), o).prop_map(|(group, owner)| Action::Pause { group, owner }),
        (g, p.clone(), to).prop_map(|(group, partition, to_owner)| Action::Rebalance { group, partition, to_owner }),
        (p, any::<u8>()).prop_map(|(partition, keep)| Action::LoseTail { partition, keep }),
    ]
}

/// A property of `config` with a verdict it can have (`violated` or `holds` for a safety
/// property, `reached` for a `sometimes` one), or none; the reader refuses every other pair.
fn property_and_verdict(config: &Config) -> impl Strategy<Value = (Option<String>, Option<Verdict>)> {
    let properties: Vec<(String, bool)> =
        properties_for(config).iter().map(|p| (p.name.to_string(), is_safety(p))).collect();
    let named = proptest::sample::select(properties).prop_flat_map(|(name, safety)| {
        let verdicts = if safety {
            vec![None, Some(Verdict::Violated), Some(Verdict::Holds)]
        } else {
            vec![None, Some(Verdict::Reached)]
        };
        proptest::sample::select(verdicts).prop_map(move |verdict| (Some(name.clone()), verdict))
    });
    prop_oneof![Just((None, None)), named]
}

/// A configuration `Config::validate` accepts: the reader refuses every other one.
fn valid_config() -> impl Strategy<Value = Config> {
    let strategies = proptest::sample::select(model::Strategy::ALL.to_vec());
    let delta = prop_oneof![Just(DELTA_MAX), Just(-DELTA_MAX), -DELTA_MAX..=DELTA_MAX]
        .prop_filter("delta 0 is invalid", |d| *d != 0);
    (strategies, 1..=3u8, 1..=3u8, 1..=2u8, 1..=8u8, 0..=4u8, 0..=4u8, delta).prop_flat_map(
        |(strategy, groups, owners, partitions, records, crashes, rebalances, delta)| {
            let budgets = (0..=2u8, 0..=2u8, 0..=2u8, 0..=2u8);
            (1..=records, 1..=records, proptest::option::of(0..records), 1..=3u8, budgets).prop_map(
                move |(commit_every, inflight, poison, max_attempts, (ack_losses, retentions, pauses, log_losses))| {
                    let rules = strategy.rules();
                    let replicated = rules.replication != model::strategy::Replication::Single;
                    let transactional = rules.sequence == model::strategy::Sequence::Transactional;
                    // The largest crash and rebalance budgets stand for `any` where a row takes
                    // it, with the count `any` keeps in memory (the row's default, at least 1).
                    let row = Config::new(strategy);
                    let liftable = model::abstraction::covers(strategy).is_ok();
                    let lifted = model::config::Lifted {
                        crashes: liftable && crashes == 4,
                        rebalances: liftable && rebalances == 4,
                        pauses: liftable && pauses == 2 && crashes == 4,
                    };
                    let pick = |count: u8, lift: bool, default: u8| if lift { default.max(1) } else { count };
                    let crashes = pick(crashes, lifted.crashes, row.crashes);
                    let rebalances = pick(rebalances, lifted.rebalances, row.rebalances);
                    let pauses = pick(pauses, lifted.pauses, row.pauses);
                    Config {
                        strategy,
                        // The transactional rows have one group (Config::validate).
                        groups: if transactional { 1 } else { groups },
                        owners,
                        partitions,
                        records,
                        crashes,
                        rebalances,
                        commit_every,
                        inflight,
                        delta,
                        // Only the strategies that handle poison records accept one.
                        poison: poison.filter(|_| strategy.handles_poison()),
                        max_attempts,
                        ack_losses,
                        retentions,
                        pauses,
                        log_losses,
                        // Replication budgets only where a partition is replicated (else refused).
                        leader_failures: if replicated { ack_losses } else { 0 },
                        isr_shrinks: if replicated { retentions } else { 0 },
                        lifted,
                    }
                },
            )
        },
    )
}

/// A valid trace: a valid configuration, a property and verdict it can have, any actions of
/// its vocabulary.
fn valid_trace() -> impl Strategy<Value = Trace> {
    let parts = valid_config().prop_flat_map(|config| {
        let actions = proptest::collection::vec(any_action(&config), 0..40);
        (Just(config.clone()), property_and_verdict(&config), actions)
    });
    (parts, ".*").prop_map(|((config, (property, verdict), actions), description)| {
        Trace::new(config, property.as_deref(), verdict, description, actions)
    })
}

/// Fixed seed and no regression files: the same cases on every run and every machine.
fn deterministic(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(0x0dd_ba11),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(deterministic(256))]

    #[test]
    fn any_trace_survives_a_json_round_trip(trace in valid_trace()) {
        let read = Trace::from_json(&trace.to_json());
        prop_assert!(read.is_ok(), "{:?}", read.err().map(|e| e.to_string()));
        // A lifted budget (`any`) is read back as the faults the path uses.
        let mut expected = trace;
        expected.config = expected.config.concretised(&expected.actions);
        prop_assert_eq!(read.ok(), Some(expected));
    }
}

/// The reader on any input never panics: it reads a trace (which then survives a round trip,
/// and replays through the model to a state or to the step that is not enabled), or it says
/// why in one line.
fn reads_or_refuses_in_one_line(bytes: &[u8]) -> Result<(), TestCaseError> {
    match Trace::from_slice(bytes) {
        Ok(trace) => {
            let again = Trace::from_json(&trace.to_json()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&again, &trace);
            let _ = check::replay(&ConsumerModel::new(trace.config.clone()), &trace.actions);
        }
        Err(error) => {
            let line = error.to_string();
            prop_assert!(!line.is_empty() && !line.contains('\n') && !line.contains('\r'), "{:?}", line);
        }
    }
    Ok(())
}

/// Names a trace reader knows, so that arbitrary objects often reach its nested parts.
const KEYS: [&str; 24] = [
    "format",
    "version",
    "tool",
    "config",
    "property",
    "verdict",
    "description",
    "actions",
    "kind",
    "group",
    "owner",
    "partition",
    "offset",
    "next_offset",
    "delta",
    "to_owner",
    "strategy",
    "groups",
    "owners",
    "partitions",
    "records",
    "crashes",
    "pauses",
    "poison",
];

/// Any JSON value, a few levels deep, with object keys often a trace's own.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        proptest::sample::select(vec!["onceproof-trace", "atomic", "append", "crash", "violated", "none"])
            .prop_map(Value::from),
    ];
    let key = prop_oneof![proptest::sample::select(KEYS.to_vec()).prop_map(String::from), "[a-z_]{0,8}"];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(key.clone(), inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Every JSON pointer into `value` (the root is "").
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{index}"), out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                pointers(item, format!("{at}/{}", key.replace('~', "~0").replace('/', "~1")), out);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
    out.push(at);
}

proptest! {
    #![proptest_config(deterministic(1024))]

    /// Arbitrary bytes: mostly not JSON, sometimes not UTF-8.
    #[test]
    fn the_reader_survives_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        reads_or_refuses_in_one_line(&bytes)?;
    }

    /// A valid trace file with a few bytes overwritten: mostly broken JSON, sometimes a trace
    /// with one value changed.
    #[test]
    fn the_reader_survives_a_damaged_trace_file(
        trace in valid_trace(),
        damage in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = trace.to_json().into_bytes();
        for (at, byte) in damage {
            let len = bytes.len();
            bytes[at % len] = byte;
        }
        reads_or_refuses_in_one_line(&bytes)?;
    }

    /// Arbitrary JSON values: the reader refuses what is not a trace.
    #[test]
    fn the_reader_survives_any_json_value(value in any_json()) {
        reads_or_refuses_in_one_line(value.to_string().as_bytes())?;
    }

    /// A valid trace with one part (the whole, a field, an action, a field of an action or of
    /// the config, ...) replaced by any JSON value: every level of the reader is reached.
    #[test]
    fn the_reader_survives_a_valid_trace_with_one_part_replaced(
        trace in valid_trace(),
        at in any::<usize>(),
        replacement in any_json(),
    ) {
        let mut value: Value = serde_json::from_str(&trace.to_json()).expect("a trace is JSON");
        let mut all = Vec::new();
        pointers(&value, String::new(), &mut all);
        let pointer = &all[at % all.len()];
        *value.pointer_mut(pointer).expect("a pointer found in the value") = replacement;
        reads_or_refuses_in_one_line(value.to_string().as_bytes())?;
    }
}

proptest! {
    #![proptest_config(deterministic(64))]

    /// A random walk through a small model, saved and read back, replays to the same states:
    /// the format loses nothing replay depends on.
    #[test]
    fn a_saved_random_walk_replays_to_the_same_states(
        strategy in proptest::sample::select(model::Strategy::ALL.to_vec()),
        choices in proptest::collection::vec(any::<usize>(), 0..30),
    ) {
        let model = ConsumerModel::new(small_config(strategy));
        let mut state = model.init_states().remove(0);
        let mut walked = vec![state.clone()];
        let mut actions = Vec::new();
        for choice in choices {
            let mut enabled = Vec::new();
            model.actions(&state, &mut enabled);
            let Some(&action) = enabled.get(choice % enabled.len().max(1)) else { break };
            state = model.next_state(&state, action).expect("enabled actions have a successor");
            walked.push(state.clone());
            actions.push(action);
        }
        let trace = Trace::new(model.config.clone(), None, None, "a random walk".to_string(), actions);
        let read = Trace::from_json(&trace.to_json()).expect("a written trace reads back");
        let replayed = check::replay(&ConsumerModel::new(read.config), &read.actions);
        prop_assert_eq!(replayed, Ok(walked));
    }
}

/// A valid trace as a JSON value, for the bad-input cases to break one thing at a time.
fn valid_trace_json() -> Value {
    let actions =
        vec![Action::Append { partition: 0, delta: 5 }, Action::Fetch { group: 0, owner: 0, partition: 0, offset: 0 }];
    let trace = Trace::new(small_config(model::Strategy::Atomic), None, None, "one append".to_string(), actions);
    serde_json::from_str(&trace.to_json()).expect("a trace is JSON")
}

/// A bad trace file: either text as it is, or a valid trace with one edit.
enum BadInput {
    Text(&'static str),
    Edit(fn(&mut Value)),
}

#[test]
fn bad_trace_files_are_refused_with_a_message_naming_the_problem() {
    let cases: [(&str, BadInput, &str); 37] = [
        ("not JSON", BadInput::Text("this is not json"), "not a valid trace"),
        ("empty file", BadInput::Text(""), "not a valid trace"),
        ("JSON but not an object", BadInput::Text("[1, 2]"), "format is '<missing>'"),
        (
            "wrong format name",
            BadInput::Edit(|v| v["format"] = json!("other-trace")),
            "format is 'other-trace', expected 'onceproof-trace'",
        ),
        (
            "format missing",
            BadInput::Edit(|v| drop(v.as_object_mut().unwrap().remove("format"))),
            "format is '<missing>'",
        ),
        (
            "version 2",
            BadInput::Edit(|v| {
                v["version"] = json!(2);
                drop(v.as_object_mut().unwrap().remove("tool"));
            }),
            concat!(
                "trace format version 2 is not supported: onceproof-model ",
                env!("CARGO_PKG_VERSION"),
                " reads version 1"
            ),
        ),
        (
            "version 2 of another tool",
            BadInput::Edit(|v| {
                v["version"] = json!(2);
                v["tool"] = json!("onceproof-model 9.0.0");
            }),
            concat!(
                "trace format version 2 (written by onceproof-model 9.0.0) is not supported: onceproof-model ",
                env!("CARGO_PKG_VERSION"),
                " reads version 1"
            ),
        ),
        ("version as a string", BadInput::Edit(|v| v["version"] = json!("1")), "trace format version \"1\""),
        (
            "missing field",
            BadInput::Edit(|v| drop(v.as_object_mut().unwrap().remove("actions"))),
            "missing field `actions`",
        ),
        ("unknown field", BadInput::Edit(|v| v["comment"] = json!("hi")), "unknown field `comment`"),
        (
            "unknown field inside config",
            BadInput::Edit(|v| v["config"]["colour"] = json!("red")),
            "not a valid trace: config: unknown field `colour`",
        ),
        (
            "unknown field inside an action",
            BadInput::Edit(|v| v["actions"][0]["colour"] = json!("red")),
            "not a valid trace: step 1: unknown field `colour`, expected `partition` or `delta`",
        ),
        (
            "a newline in an unknown field's name",
            BadInput::Edit(|v| v["actions"][0]["two\nlines"] = json!(1)),
            "step 1: unknown field `two\\nlines`",
        ),
        (
            "an action field of another kind",
            BadInput::Edit(|v| v["actions"][0]["group"] = json!(0)),
            "step 1: unknown field `group`",
        ),
        ("actions not a list", BadInput::Edit(|v| v["actions"] = json!({})), "not a valid trace: invalid type: map"),
        (
            "unknown property",
            BadInput::Edit(|v| v["property"] = json!("no-such-property")),
            "property 'no-such-property' is not checked for this config (its properties: no-duplicate, ",
        ),
        (
            "a property of another row",
            BadInput::Edit(|v| v["property"] = json!("bounded-retries")),
            "property 'bounded-retries' is not checked for this config",
        ),
        (
            "a verdict with no property",
            BadInput::Edit(|v| v["verdict"] = json!("violated")),
            "the verdict violated names no property",
        ),
        (
            "a safety property reached",
            BadInput::Edit(|v| {
                v["property"] = json!("no-duplicate");
                v["verdict"] = json!("reached");
            }),
            "the verdict of 'no-duplicate' is reached; a trace records it violated or holds",
        ),
        (
            "a fault witness violated",
            BadInput::Edit(|v| {
                v["property"] = json!("crash-after-write");
                v["verdict"] = json!("violated");
            }),
            "the verdict of 'crash-after-write' is violated; a trace records it reached",
        ),
        (
            "an unknown verdict",
            BadInput::Edit(|v| {
                v["property"] = json!("no-duplicate");
                v["verdict"] = json!("unknown");
            }),
            "the verdict of 'no-duplicate' is unknown",
        ),
        (
            "an action of group 9",
            BadInput::Edit(|v| v["actions"][1]["group"] = json!(9)),
            "step 2 (g9/o0 fetches p0 offset 0): group 9 is out of range: the config has groups 0..=0",
        ),
        (
            "an action of owner 9",
            BadInput::Edit(|v| v["actions"][1]["owner"] = json!(9)),
            "step 2 (g0/o9 fetches p0 offset 0): owner 9 is out of range: the config has owners 0..=1 and no \
             paused slots",
        ),
        (
            "an action on partition 9",
            BadInput::Edit(|v| v["actions"][0]["partition"] = json!(9)),
            "step 1 (append (+5) to p9): partition 9 is out of range: the config has partitions 0..=0",
        ),
        (
            "a rebalance to owner 2",
            BadInput::Edit(|v| {
                v["actions"][1] = json!({"kind": "rebalance", "group": 0, "partition": 0, "to_owner": 2})
            }),
            "step 2 (rebalance g0 p0 to o2): a rebalance to owner 2 is out of range: the config has owners 0..=1",
        ),
        (
            "a paused slot the config does not have",
            BadInput::Edit(|v| {
                v["config"]["pauses"] = json!(1);
                v["actions"][1]["owner"] = json!(3);
            }),
            "owner 3 is out of range: the config has owners 0..=1 and paused slots 2..=2",
        ),
        (
            "unknown strategy",
            BadInput::Edit(|v| v["config"]["strategy"] = json!("exactly-once")),
            "unknown strategy 'exactly-once'",
        ),
        (
            "unknown action kind",
            BadInput::Edit(|v| v["actions"][0]["kind"] = json!("teleport")),
            "unknown variant `teleport`",
        ),
        (
            "records 0",
            BadInput::Edit(|v| v["config"]["records"] = json!(0)),
            "the trace's config is invalid: --records 0 is out of range",
        ),
        ("too many groups", BadInput::Edit(|v| v["config"]["groups"] = json!(9)), "--groups 9 is out of range"),
        ("bound past a u8", BadInput::Edit(|v| v["config"]["owners"] = json!(256)), "not a valid trace"),
        (
            "commit interval past the records",
            BadInput::Edit(|v| v["config"]["commit_every"] = json!(3)),
            "--commit-every 3 is out of range",
        ),
        ("delta 0", BadInput::Edit(|v| v["config"]["delta"] = json!(0)), "--delta 0"),
        (
            "a delta whose totals could overflow",
            BadInput::Edit(|v| v["config"]["delta"] = json!(i64::MAX)),
            "--delta 9223372036854775807 is out of range: accepted values are -1000000000000..=1000000000000 except 0",
        ),
        (
            "more crashes than 8-bit epochs allow",
            BadInput::Edit(|v| v["config"]["crashes"] = json!(127)),
            "--crashes 127 is out of range: accepted values are 0..=126 (epochs and application counts are 8-bit)",
        ),
        (
            "more groups than model check accepts",
            BadInput::Edit(|v| v["config"]["groups"] = json!(4)),
            "--groups 4 is out of range: accepted values are 1..=3 (as in model check)",
        ),
        (
            "a poison record for a strategy without poison handling",
            BadInput::Edit(|v| v["config"]["poison"] = json!(0)),
            "--poison 0 does not apply to atomic",
        ),
    ];
    for (name, input, expected) in cases {
        let text = match input {
            BadInput::Text(text) => text.to_string(),
            BadInput::Edit(edit) => {
                let mut value = valid_trace_json();
                edit(&mut value);
                value.to_string()
            }
        };
        match Trace::from_json(&text) {
            Ok(trace) => panic!("{name}: accepted as {trace:?}"),
            Err(error) => {
                let message = error.to_string();
                assert!(message.contains(expected), "{name}: '{message}' lacks '{expected}'");
                // Errors are printed as one line after "error:" by the command line.
                assert!(!message.contains('\n'), "{name}: '{message}' spans lines");
            }
        }
    }
}

#[test]
fn the_unedited_trace_of_the_bad_input_cases_is_accepted() {
    // Without this, every bad-input case could fail for a reason unrelated to its edit.
    let text = valid_trace_json().to_string();
    let trace = Trace::from_json(&text).expect("the unedited trace is valid");
    assert_eq!((trace.format.as_str(), trace.version), (TRACE_FORMAT, TRACE_VERSION));
}

/// spec.md §8.2: the format version decides whether a trace is read, not the tool that wrote
/// it; traces written before the `tool` field existed have none, and are read.
#[test]
fn traces_of_any_tool_version_are_read_and_written_ones_name_this_one() {
    let written = valid_trace_json();
    assert_eq!(written["tool"], json!(format!("onceproof-model {}", env!("CARGO_PKG_VERSION"))));
    assert_eq!(written["tool"], json!(model::TOOL));
    for tool in [None, Some("onceproof-model 9.9.9"), Some("someone else's tool")] {
        let mut value = written.clone();
        match tool {
            Some(tool) => value["tool"] = json!(tool),
            None => drop(value.as_object_mut().expect("an object").remove("tool")),
        }
        let trace = Trace::from_json(&value.to_string()).unwrap_or_else(|e| panic!("{tool:?}: {e}"));
        assert_eq!(trace.tool.as_deref(), tool);
        // Read back as it was: a trace without a tool is written without one.
        assert_eq!(Trace::from_json(&trace.to_json()).expect("a round trip"), trace);
    }
}

/// An owner step names a paused slot as `owners + i` (spec.md §2.2): the reader accepts every
/// slot the configuration has, current and paused.
#[test]
fn owner_steps_may_name_every_slot_paused_ones_included() {
    let config = Config { pauses: 2, ..small_config(model::Strategy::AtomicFenced) };
    let actions: Vec<Action> = (0..4).map(|owner| Action::Crash { group: 0, owner }).collect();
    let trace = Trace::new(config, None, None, "every slot".to_string(), actions);
    assert_eq!(Trace::from_json(&trace.to_json()).expect("slots 0..=3 exist"), trace);
}

#[test]
fn replay_names_the_first_step_that_is_not_enabled() {
    let append = Action::Append { partition: 0, delta: 5 };
    let fetch = |owner, offset| Action::Fetch { group: 0, owner, partition: 0, offset };
    let rebalance_to = |to_owner| Action::Rebalance { group: 0, partition: 0, to_owner };
    // Each case's first two steps are enabled and its third is not, for the reason given.
    let cases: Vec<(&str, model::Strategy, Vec<Action>)> = vec![
        ("the same record fetched twice", model::Strategy::Atomic, vec![append, fetch(0, 0), fetch(0, 0)]),
        (
            "a step of another strategy",
            model::Strategy::Atomic,
            vec![append, fetch(0, 0), Action::ApplyEffect { group: 0, owner: 0, partition: 0, offset: 0 }],
        ),
        ("an append past the record bound", model::Strategy::EffectFirst, vec![append, append, append]),
        (
            "a second rebalance past the budget",
            model::Strategy::EffectFirst,
            vec![append, rebalance_to(1), rebalance_to(0)],
        ),
        (
            "a crash of an owner holding nothing",
            model::Strategy::CommitFirst,
            vec![append, fetch(0, 0), Action::Crash { group: 0, owner: 1 }],
        ),
        (
            "a different delta than the config's",
            model::Strategy::Atomic,
            vec![append, append, Action::Append { partition: 0, delta: 6 }],
        ),
    ];
    for (name, strategy, actions) in cases {
        let third = actions[2];
        let trace = Trace::new(small_config(strategy), None, None, name.to_string(), actions);
        // The actions go through the file format first, as those of a hand-edited trace would.
        let read = Trace::from_json(&trace.to_json()).expect("the trace itself is well formed");
        let error = check::replay(&ConsumerModel::new(read.config), &read.actions).expect_err(name);
        assert_eq!(error, Unreachable { step: 3, action: third }, "{name}");
        assert!(error.to_string().starts_with("step 3 ("), "{name}: {error}");
    }
    // A group the config does not have: the reader refuses such a file (see the bad trace
    // files), and `replay`, given the actions directly, names the step too.
    let crash = Action::Crash { group: 1, owner: 0 };
    let model = ConsumerModel::new(small_config(model::Strategy::Atomic));
    let error = check::replay(&model, &[append, fetch(0, 0), crash]).expect_err("group 1 does not exist");
    assert_eq!(error, Unreachable { step: 3, action: crash });
}
