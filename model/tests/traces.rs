//! The trace file format: round trips, rejection of bad files, and replay of what a trace holds.

mod common;

use common::small_config;
use model::check::{self, CheckOptions, Unreachable, Verdict};
use model::trace::{Trace, TRACE_FORMAT, TRACE_VERSION};
use model::{Action, Config, ConsumerModel};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, RngSeed};
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

/// Any action value at all, in range or not: the format must carry whatever it is given.
fn any_action() -> impl Strategy<Value = Action> {
    let ids = || (any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>());
    prop_oneof![
        (any::<u8>(), any::<i64>()).prop_map(|(partition, delta)| Action::Append { partition, delta }),
        ids().prop_map(|(group, owner, partition, offset)| Action::Fetch { group, owner, partition, offset }),
        ids().prop_map(|(group, owner, partition, offset)| Action::ApplyEffect { group, owner, partition, offset }),
        ids().prop_map(|(group, owner, partition, offset)| Action::InsertProcessed { group, owner, partition, offset }),
        ids().prop_map(|(group, owner, partition, next_offset)| Action::CommitOffset {
            group,
            owner,
            partition,
            next_offset
        }),
        ids().prop_map(|(group, owner, partition, offset)| Action::ApplyStamped { group, owner, partition, offset }),
        ids().prop_map(|(group, owner, partition, offset)| Action::ApplyDeduped { group, owner, partition, offset }),
        ids().prop_map(|(group, owner, partition, offset)| Action::ApplyAtomic { group, owner, partition, offset }),
        (any::<u8>(), any::<u8>()).prop_map(|(group, owner)| Action::Crash { group, owner }),
        (any::<u8>(), any::<u8>()).prop_map(|(group, owner)| Action::Restart { group, owner }),
        (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(group, partition, to_owner)| Action::Rebalance {
            group,
            partition,
            to_owner
        }),
    ]
}

fn any_verdict() -> impl Strategy<Value = Option<Verdict>> {
    proptest::option::of(prop_oneof![
        Just(Verdict::Holds),
        Just(Verdict::Violated),
        Just(Verdict::Reached),
        Just(Verdict::Unreached),
        Just(Verdict::Unknown),
    ])
}

/// A configuration `Config::validate` accepts: the reader refuses every other one.
fn valid_config() -> impl Strategy<Value = Config> {
    let strategies = proptest::sample::select(model::Strategy::ALL.to_vec());
    (
        strategies,
        1..=3u8,
        1..=3u8,
        1..=2u8,
        1..=8u8,
        0..=4u8,
        0..=4u8,
        any::<i64>().prop_filter("delta 0 is invalid", |d| *d != 0),
    )
        .prop_flat_map(|(strategy, groups, owners, partitions, records, crashes, rebalances, delta)| {
            let budgets = (0..=2u8, 0..=2u8, 0..=2u8, 0..=2u8);
            (1..=records, 1..=records, proptest::option::of(0..records), 1..=3u8, budgets).prop_map(
                move |(commit_every, inflight, poison, max_attempts, (ack_losses, retentions, pauses, log_losses))| {
                    let rules = strategy.rules();
                    let replicated = rules.replication != model::strategy::Replication::Single;
                    let transactional = rules.sequence == model::strategy::Sequence::Transactional;
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
                    }
                },
            )
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
    fn any_trace_survives_a_json_round_trip(
        config in valid_config(),
        property in proptest::option::of("[a-z-]{1,20}"),
        verdict in any_verdict(),
        description in ".*",
        actions in proptest::collection::vec(any_action(), 0..40),
    ) {
        let trace = Trace::new(config, property.as_deref(), verdict, description, actions);
        let read = Trace::from_json(&trace.to_json());
        prop_assert!(read.is_ok(), "{:?}", read.err().map(|e| e.to_string()));
        prop_assert_eq!(read.ok(), Some(trace));
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
    let actions = vec![Action::Append { partition: 0, delta: 5 }];
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
    let cases: [(&str, BadInput, &str); 16] = [
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
            BadInput::Edit(|v| v["version"] = json!(2)),
            "trace format version 2 is not supported (this build reads version 1)",
        ),
        (
            "missing field",
            BadInput::Edit(|v| drop(v.as_object_mut().unwrap().remove("actions"))),
            "missing field `actions`",
        ),
        ("unknown field", BadInput::Edit(|v| v["comment"] = json!("hi")), "unknown field `comment`"),
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
            "a step of a group that does not exist",
            model::Strategy::Atomic,
            vec![append, fetch(0, 0), Action::Crash { group: 1, owner: 0 }],
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
}
