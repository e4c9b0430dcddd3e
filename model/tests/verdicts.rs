//! Verdicts of small configurations, replayable (counter)examples, minimisation, and spec.md's table.

mod common;

use common::small_config;
use model::check::{self, CheckOptions, CheckReport, PropertyOutcome, Verdict};
use model::properties::SAFETY;
use model::{Action, ConsumerModel, State, Strategy};
use stateright::{Checker, Model, Path};
use std::sync::OnceLock;

/// Safety verdicts of `small_config(strategy)`, cells in `SAFETY` order (`n/a`: the property
/// is not checked in that configuration). They differ from spec.md's default-bounds table
/// where two records are too few for a trap (periodic-commit and offset-stamp keep their
/// checkpoints monotonic here, and so does skip-poison).
const SMALL_VERDICTS: [(Strategy, [&str; SAFETY.len()]); Strategy::ALL.len()] = [
    (
        Strategy::CommitFirst,
        [
            "violated", "violated", "violated", "violated", "holds", "violated", "violated", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::EffectFirst,
        [
            "violated", "holds", "violated", "violated", "holds", "violated", "violated", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::PeriodicCommit,
        [
            "violated", "holds", "violated", "holds", "holds", "violated", "violated", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::OffsetStamp,
        [
            "holds", "holds", "holds", "holds", "holds", "violated", "holds", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::DedupSeparate,
        [
            "violated", "holds", "violated", "violated", "holds", "violated", "violated", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::DedupAtomic,
        [
            "holds", "holds", "holds", "violated", "holds", "violated", "holds", "n/a", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::Atomic,
        [
            "violated", "holds", "violated", "violated", "holds", "violated", "violated", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::AtomicFenced,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::AtomicCas,
        [
            "holds", "holds", "holds", "holds", "holds", "violated", "holds", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::ParallelMax,
        [
            "violated", "violated", "violated", "violated", "holds", "violated", "violated", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::ParallelWatermark,
        [
            "violated", "holds", "violated", "violated", "holds", "violated", "violated", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::AtomicDlq,
        [
            "holds", "violated", "violated", "holds", "holds", "holds", "holds", "holds", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::SkipPoison,
        [
            "holds", "violated", "violated", "holds", "holds", "violated", "violated", "violated", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::RetryForever,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "violated", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::ProducerIdempotent,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "holds", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::ProducerNewSequence,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "violated", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::ResetEarliest,
        [
            "holds", "violated", "violated", "holds", "holds", "holds", "holds", "n/a", "n/a", "holds", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::ResetSilent,
        [
            "violated", "violated", "violated", "violated", "holds", "violated", "violated", "n/a", "n/a", "violated",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::ResetFail,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "n/a", "holds", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::FencedStoredEpoch,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::LogLossRefuse,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "n/a", "n/a", "holds", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::LogLossUnchecked,
        [
            "holds", "violated", "violated", "holds", "holds", "holds", "violated", "n/a", "n/a", "n/a", "holds",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::LogLossRefuseAll,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "n/a", "n/a", "violated", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::AcksLeader,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "n/a", "n/a", "n/a", "violated",
            "holds", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::AcksAll,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "n/a", "n/a", "n/a", "holds",
            "holds", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::AcksAllMinIsr1,
        [
            "holds", "violated", "violated", "holds", "holds", "holds", "violated", "n/a", "n/a", "n/a", "n/a",
            "violated", "violated", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::AcksAllMinIsr1Clean,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "n/a", "n/a", "n/a", "holds",
            "holds", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::TxnFenced,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
            "holds", "holds", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::TxnUnfenced,
        [
            "violated", "holds", "violated", "violated", "holds", "violated", "violated", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "violated", "holds", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::TxnReadUncommitted,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
            "holds", "violated", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::AtomicPlusEmail,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "violated", "n/a", "n/a",
        ],
    ),
    (
        Strategy::EmailIdempotencyKey,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "holds", "n/a", "n/a",
        ],
    ),
    (
        Strategy::EmailNoKey,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "violated", "n/a", "n/a",
        ],
    ),
    (
        Strategy::BlindSet,
        [
            "violated", "holds", "violated", "violated", "holds", "violated", "violated", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "violated", "n/a",
        ],
    ),
    (
        Strategy::SetIfNewer,
        [
            "holds", "holds", "holds", "holds", "holds", "violated", "holds", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "holds", "n/a",
        ],
    ),
    (
        Strategy::DedupOffsetOnly,
        [
            "holds", "holds", "holds", "violated", "holds", "violated", "holds", "n/a", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::DualWrite,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "violated",
        ],
    ),
    (
        Strategy::Outbox,
        [
            "holds", "holds", "holds", "holds", "holds", "holds", "holds", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "holds",
        ],
    ),
    (
        Strategy::BrokerEffectFirst,
        [
            "violated", "holds", "violated", "holds", "holds", "violated", "violated", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::BrokerCommitFirst,
        [
            "holds", "violated", "violated", "holds", "holds", "violated", "violated", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
    (
        Strategy::BrokerRelaxed,
        [
            "violated", "holds", "violated", "holds", "holds", "violated", "violated", "n/a", "n/a", "n/a", "n/a",
            "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a",
        ],
    ),
];

/// Every strategy's BFS report on its small configuration, computed once and shared by the
/// tests of this file, which only read it.
fn small_reports() -> &'static [(ConsumerModel, CheckReport)] {
    static REPORTS: OnceLock<Vec<(ConsumerModel, CheckReport)>> = OnceLock::new();
    REPORTS.get_or_init(|| {
        Strategy::ALL
            .iter()
            .map(|&strategy| {
                let model = ConsumerModel::new(small_config(strategy));
                let report = check::run(&model, &CheckOptions::default(), &mut |_| {});
                (model, report)
            })
            .collect()
    })
}

/// Replays `actions` from the initial state with stateright's own path reconstruction (not the
/// crate's `replay`, so that the two cannot share a bug) and checks that the last state, and
/// only the last, is a discovery of `property`: a violation of an `always` property or the
/// situation of a `sometimes` one.
fn assert_replays_to_first_discovery(model: &ConsumerModel, property: &str, actions: &[Action]) {
    let context = format!("{} / {property} ({} steps)", model.config.strategy, actions.len());
    let checked = check::property_named(model, property).unwrap_or_else(|| panic!("{context}: unknown property"));
    let init = State::initial(&model.config);
    let path = Path::from_actions(model, init, actions).unwrap_or_else(|| panic!("{context}: does not replay"));
    let states = path.into_states();
    let (last, before) = states.split_last().expect("a path has at least its initial state");
    assert!(check::is_discovery(model, &checked, last), "{context}: the last state is no discovery");
    // A minimised (counter)example ends at its first discovering state: any step after it
    // would be noise a reader has to wade through.
    let early = before.iter().position(|state| check::is_discovery(model, &checked, state));
    assert_eq!(early, None, "{context}: an earlier state is already a discovery");
}

fn outcomes_with(verdict: Verdict) -> Vec<(&'static ConsumerModel, &'static PropertyOutcome)> {
    small_reports()
        .iter()
        .flat_map(|(model, report)| report.properties.iter().map(move |outcome| (model, outcome)))
        .filter(|(_, outcome)| outcome.verdict == verdict)
        .collect()
}

#[test]
fn small_configurations_have_the_pinned_safety_verdicts() {
    let actual: Vec<(Strategy, Vec<&str>)> = small_reports()
        .iter()
        .map(|(model, report)| {
            assert!(report.complete, "{}: BFS did not finish", model.config.strategy);
            let cells = SAFETY
                .iter()
                .map(|name| report.outcome(name).map_or("n/a", |outcome| outcome.verdict.word()))
                .collect();
            (model.config.strategy, cells)
        })
        .collect();
    let expected: Vec<(Strategy, Vec<&str>)> = SMALL_VERDICTS.iter().map(|(s, cells)| (*s, cells.to_vec())).collect();
    assert_eq!(actual, expected);
}

#[test]
fn every_sometimes_property_is_reached_on_small_configurations() {
    for (model, report) in small_reports() {
        for outcome in report.properties.iter().filter(|p| p.expectation == "sometimes") {
            assert_eq!(outcome.verdict, Verdict::Reached, "{} / {}", model.config.strategy, outcome.name);
        }
    }
}

#[test]
fn every_counterexample_replays_to_a_violating_state() {
    let violated = outcomes_with(Verdict::Violated);
    // As many counterexamples as the table has violated cells: fewer would mean the loop below
    // silently skipped some, none that it checked nothing.
    let violated_cells = SMALL_VERDICTS.iter().flat_map(|(_, cells)| cells).filter(|&&cell| cell == "violated").count();
    assert_eq!(violated.len(), violated_cells);
    for (model, outcome) in violated {
        assert_eq!(outcome.expectation, "always");
        assert_replays_to_first_discovery(model, &outcome.name, &outcome.actions);
    }
}

#[test]
fn every_example_replays_to_a_state_in_its_situation() {
    let reached = outcomes_with(Verdict::Reached);
    assert!(!reached.is_empty());
    for (model, outcome) in reached {
        assert_eq!(outcome.expectation, "sometimes");
        assert_replays_to_first_discovery(model, &outcome.name, &outcome.actions);
    }
}

#[test]
fn properties_that_hold_carry_no_counterexample() {
    for (model, outcome) in outcomes_with(Verdict::Holds) {
        assert!(outcome.actions.is_empty(), "{} / {}", model.config.strategy, outcome.name);
    }
}

/// Shorthands for the hand-written inputs of `minimize`: group 0, the default delta of 5.
fn append() -> Action {
    Action::Append { partition: 0, delta: 5 }
}
fn fetch(owner: u8, offset: u8) -> Action {
    Action::Fetch { group: 0, owner, partition: 0, offset }
}
fn apply_atomic(owner: u8, offset: u8) -> Action {
    Action::ApplyAtomic { group: 0, owner, partition: 0, offset }
}
fn apply_effect(owner: u8, offset: u8) -> Action {
    Action::ApplyEffect { group: 0, owner, partition: 0, offset }
}
fn commit(owner: u8, next_offset: u8) -> Action {
    Action::CommitOffset { group: 0, owner, partition: 0, next_offset }
}
fn rebalance_to(owner: u8) -> Action {
    Action::Rebalance { group: 0, partition: 0, to_owner: owner }
}
fn crash(owner: u8) -> Action {
    Action::Crash { group: 0, owner }
}

#[test]
fn minimize_cuts_hand_written_discoveries_down_to_their_known_minimum() {
    // Each input is a valid discovery padded with steps it does not need (before, between and
    // after the essential ones); the expected length is the shortest discovery there is.
    let cases: Vec<(Strategy, &str, Vec<Action>, usize)> = vec![
        // A zombie's transaction lands after the rebalance: append, fetch, rebalance, write.
        (
            Strategy::Atomic,
            "fenced-writes",
            vec![append(), fetch(0, 0), append(), rebalance_to(1), fetch(1, 0), apply_atomic(0, 0), apply_atomic(1, 0)],
            4,
        ),
        // The new owner applies again what the old one applied but never committed.
        (
            Strategy::EffectFirst,
            "no-duplicate",
            vec![
                append(),
                fetch(0, 0),
                apply_effect(0, 0),
                append(),
                rebalance_to(1),
                fetch(1, 0),
                apply_effect(1, 0),
                commit(1, 1),
            ],
            6,
        ),
        // Commit-first commits, then crashes before the effect: the record is skipped.
        (Strategy::CommitFirst, "contiguous-prefix", vec![append(), append(), fetch(0, 0), commit(0, 1), crash(0)], 4),
        // An input that is already minimal must come back unchanged in length.
        (Strategy::Atomic, "fenced-writes", vec![append(), fetch(0, 0), rebalance_to(1), apply_atomic(0, 0)], 4),
        // A `sometimes` situation is minimised the same way: the log end needs both records
        // appended, fetched and applied, and nothing else.
        (
            Strategy::AtomicFenced,
            "log-end",
            vec![append(), fetch(0, 0), append(), apply_atomic(0, 0), fetch(0, 1), apply_atomic(0, 1), crash(0)],
            6,
        ),
    ];
    for (strategy, property, actions, minimum) in cases {
        let model = ConsumerModel::new(small_config(strategy));
        let checked = check::property_named(&model, property).expect("a property of the configuration");
        let input_len = actions.len();
        let minimised = check::minimize(&model, &checked, actions);
        assert_eq!(minimised.len(), minimum, "{strategy} / {property} from {input_len} steps: {minimised:?}");
        assert_replays_to_first_discovery(&model, property, &minimised);
    }
}

#[test]
fn minimize_never_lengthens_a_checker_discovery_and_keeps_it_a_discovery() {
    // Stateright's raw DFS discoveries are long, unminimised paths, so they are realistic inputs.
    for strategy in Strategy::ALL {
        let model = ConsumerModel::new(small_config(strategy));
        let mut discoveries: Vec<(&str, Vec<Action>)> = model
            .clone()
            .checker()
            .spawn_dfs()
            .join()
            .discoveries()
            .into_iter()
            .map(|(name, path)| (name, path.into_actions()))
            .collect();
        discoveries.sort_by_key(|(name, _)| *name);
        assert!(!discoveries.is_empty(), "{strategy}: the checker discovered nothing");
        for (name, raw) in discoveries {
            let property = check::property_named(&model, name).expect("discoveries name the model's properties");
            let minimised = check::minimize(&model, &property, raw.clone());
            assert!(
                minimised.len() <= raw.len(),
                "{strategy} / {name}: {} steps became {}",
                raw.len(),
                minimised.len()
            );
            assert_replays_to_first_discovery(&model, name, &minimised);
            // Deterministic, and a fixed point: minimising again changes nothing.
            assert_eq!(check::minimize(&model, &property, raw), minimised, "{strategy} / {name}: not deterministic");
            assert_eq!(
                check::minimize(&model, &property, minimised.clone()),
                minimised,
                "{strategy} / {name}: not a fixed point"
            );
        }
    }
}

#[test]
fn spec_md_has_a_row_for_every_strategy_consistent_with_the_property_definitions() {
    let table = model::expected::from_spec().expect("spec.md's expected table parses");
    assert_eq!(table.len(), Strategy::ALL.len() * SAFETY.len());
    for strategy in Strategy::ALL {
        for name in SAFETY {
            assert!(table.contains_key(&(strategy, name)), "no expected verdict for {strategy} / {name}");
        }
        // effectively-once is defined as no-duplicate and contiguous-prefix together, so a
        // table that disagrees with that expects something the checker can never find.
        let conjunction =
            table[&(strategy, "no-duplicate")].zip(table[&(strategy, "contiguous-prefix")]).map(|(a, b)| a && b);
        assert_eq!(table[&(strategy, "effectively-once")], conjunction, "{strategy}");
    }
}

/// spec.md §5 describes every strategy in a table row of its own (`| `name` | writes | aim |`),
/// and no other: a new row of the verdict table needs its description.
#[test]
fn spec_md_describes_every_strategy_in_its_strategy_table() {
    let spec = model::expected::SPEC;
    let start = spec.find("## 5. Strategies").expect("spec.md has §5");
    let end = start + spec[start..].find("\n## ").expect("§5 ends");
    let described: Vec<&str> =
        spec[start..end].lines().filter_map(|line| line.strip_prefix("| `")?.split('`').next()).collect();
    let names: Vec<&str> = Strategy::ALL.iter().map(|s| s.name()).collect();
    assert_eq!(described, names, "spec.md §5's strategy table must list Strategy::ALL, in order");
}

const BEGIN: &str = "<!-- expected-verdicts:begin -->";
const END: &str = "<!-- expected-verdicts:end -->";
/// The table's header, from `SAFETY`: the tests below follow new columns by themselves.
fn header() -> String {
    format!("| strategy | {} |", SAFETY.join(" | "))
}

fn row(strategy: &str, cells: &[&str]) -> String {
    format!("| {strategy} | {} |", cells.join(" | "))
}

/// A row per strategy, every cell `holds`: parsing checks the shape, not the truth.
fn valid_rows() -> Vec<String> {
    Strategy::ALL.iter().map(|s| row(s.name(), &["holds"; SAFETY.len()])).collect()
}

/// A spec document with prose around the table, as spec.md has.
fn spec(begin: &str, header: &str, rows: &[String], end: &str) -> String {
    format!(
        "# spec\n\nSome prose.\n{begin}\n{header}\n|{}\n{}\n{end}\nMore prose.\n",
        "---|".repeat(SAFETY.len() + 1),
        rows.join("\n")
    )
}

fn rows_with(edit: impl FnOnce(&mut Vec<String>)) -> Vec<String> {
    let mut rows = valid_rows();
    edit(&mut rows);
    rows
}

#[test]
fn expected_parse_accepts_well_formed_tables_and_rejects_each_malformed_one() {
    let atomic = Strategy::ALL.iter().position(|&s| s == Strategy::Atomic).expect("atomic is a strategy");
    let header = header();
    let reordered_header = header.replace("no-duplicate | contiguous-prefix", "contiguous-prefix | no-duplicate");
    let short_header = header.replace(&format!(" {} |", SAFETY[SAFETY.len() - 1]), "");
    // atomic's row of spec.md itself, its name in backticks.
    let table = model::expected::from_spec().expect("spec.md's table");
    let word = |cell: Option<bool>| cell.map_or("n/a", |holds| if holds { "holds" } else { "violated" });
    let atomic_cells: Vec<&str> = SAFETY.iter().map(|name| word(table[&(Strategy::Atomic, *name)])).collect();
    let mut maybe = vec!["holds"; SAFETY.len()];
    maybe[SAFETY.iter().position(|&n| n == "fenced-writes").expect("a column")] = "maybe";
    let cells_error = format!("the expected row of atomic has {} cells, expected {}", SAFETY.len(), SAFETY.len() + 1);
    let cases: Vec<(&str, String, Result<(), &str>)> = vec![
        ("well formed", spec(BEGIN, &header, &valid_rows(), END), Ok(())),
        (
            "strategy names in backticks",
            spec(BEGIN, &header, &rows_with(|rows| rows[atomic] = row("`atomic`", &atomic_cells)), END),
            Ok(()),
        ),
        ("missing begin marker", spec("", &header, &valid_rows(), END), Err("no expected-verdicts:begin marker")),
        ("missing end marker", spec(BEGIN, &header, &valid_rows(), ""), Err("no expected-verdicts:end marker")),
        ("markers with nothing between", format!("{BEGIN}\n{END}\n"), Err("the expected table has no header")),
        ("header in another order", spec(BEGIN, &reordered_header, &valid_rows(), END), Err("header must be")),
        ("header without a column", spec(BEGIN, &short_header, &valid_rows(), END), Err("header must be")),
        (
            "unknown strategy",
            spec(BEGIN, &header, &rows_with(|rows| rows.push(row("exactly-once", &["holds"; SAFETY.len()]))), END),
            Err("unknown strategy 'exactly-once'"),
        ),
        (
            "cell neither holds nor violated",
            spec(BEGIN, &header, &rows_with(|rows| rows[atomic] = row("atomic", &maybe)), END),
            Err("expected cell 'maybe' for atomic / fenced-writes is not holds, violated or n/a"),
        ),
        (
            "row with a missing cell",
            spec(BEGIN, &header, &rows_with(|rows| rows[atomic] = row("atomic", &["holds"; SAFETY.len() - 1])), END),
            Err(cells_error.as_str()),
        ),
        (
            "duplicated row",
            spec(BEGIN, &header, &rows_with(|rows| rows.push(row("atomic", &["holds"; SAFETY.len()]))), END),
            Err("the expected table has two rows for atomic"),
        ),
        (
            "missing row",
            spec(BEGIN, &header, &rows_with(|rows| rows.retain(|r| !r.starts_with("| reset-fail "))), END),
            Err("the expected table has no row for reset-fail"),
        ),
    ];
    for (name, text, expected) in cases {
        match (model::expected::parse(&text), expected) {
            (Ok(table), Ok(())) => assert_eq!(table.len(), Strategy::ALL.len() * SAFETY.len(), "{name}"),
            (Err(error), Err(part)) => assert!(error.contains(part), "{name}: error '{error}' lacks '{part}'"),
            (Ok(_), Err(part)) => panic!("{name}: parsed, but should fail with '{part}'"),
            (Err(error), Ok(())) => panic!("{name}: should parse, failed with '{error}'"),
        }
    }
}

/// The safety verdicts of a report, by name.
fn safety_verdicts(report: &CheckReport) -> Vec<(String, Verdict)> {
    let safety = report.properties.iter().filter(|p| SAFETY.contains(&p.name.as_str()));
    safety.map(|p| (p.name.clone(), p.verdict.clone())).collect()
}

fn check_paused(strategy: Strategy) -> CheckReport {
    check::run(&ConsumerModel::new(common::paused_config(strategy)), &CheckOptions::default(), &mut |_| {})
}

/// Claiming an epoch at every start, and its trap: under a second live incarnation, atomic-fenced (every
/// start claims a new epoch) keeps every guarantee, and the same consumer resuming at the
/// stored epoch applies a record twice, with no stale write for `fenced-writes` to see.
#[test]
fn a_second_incarnation_is_fenced_only_when_every_start_claims_an_epoch() {
    let fenced = check_paused(Strategy::AtomicFenced);
    assert!(fenced.properties.iter().all(|p| p.verdict != Verdict::Violated), "{:?}", safety_verdicts(&fenced));
    let fenced_writes = fenced.outcome("paused-write").map(|o| o.verdict.clone());
    assert_eq!(fenced_writes, Some(Verdict::Reached), "the pause must strike: the earlier incarnation writes");
    let trap = check_paused(Strategy::FencedStoredEpoch);
    let verdict = |name: &str| trap.outcome(name).map(|o| o.verdict.clone());
    assert_eq!(verdict("no-duplicate"), Some(Verdict::Violated));
    assert_eq!(verdict("fenced-writes"), Some(Verdict::Holds));
}

/// spec.md §4: the rows without a default pause are those whose every cell a second
/// incarnation could break is already violated by a rebalance's zombie. A pause must then
/// change none of their verdicts: checked here at the small bounds.
#[test]
fn rows_without_a_default_pause_keep_their_verdicts_under_one() {
    for strategy in Strategy::ALL.into_iter().filter(|s| s.rules().defaults.pauses == 0) {
        let (_, plain) = &small_reports()[Strategy::ALL.iter().position(|&s| s == strategy).expect("a row")];
        let paused = check_paused(strategy);
        assert_eq!(safety_verdicts(&paused), safety_verdicts(plain), "{strategy} under a pause");
    }
}
