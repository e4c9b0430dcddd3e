//! Pinned unique-state counts of small configurations, and their agreement across search modes.

mod common;

use common::small_config;
use model::check::{self, CheckOptions, CheckReport, Search, Verdict};
use model::{Config, ConsumerModel, Strategy};

/// BFS unique states of `small_config(strategy)`, one row per strategy in `Strategy::ALL` order.
/// Any change to the transition relation or to what a state holds moves these numbers, so a
/// change here must be explained by a deliberate change to the model, never just re-pinned.
/// (Moved when every start of an owner claims a new epoch, so a crash and restart
/// no longer leave the epoch where it was, and the state gained paused slots and log losses.
/// The acks and txn rows' counts moved once more when `State::witnessed` grew from 16 to 32
/// bits: their witnesses (bits 16 to 19) had wrapped onto the crash, zombie and replay bits,
/// merging states that differ in what they witnessed; and the acks rows' with a leader
/// failure once more when they gained the `unread-truncated` observation. All moved when a
/// state's witness bits became the last step's only, not every step's so far: states that
/// differ only in what their paths had witnessed are one state now.)
const SMALL_COUNTS: [(Strategy, usize); Strategy::ALL.len()] = [
    (Strategy::CommitFirst, 1048),
    (Strategy::EffectFirst, 1386),
    (Strategy::PeriodicCommit, 1946),
    (Strategy::OffsetStamp, 1254),
    (Strategy::DedupSeparate, 2912),
    (Strategy::DedupAtomic, 896),
    (Strategy::Atomic, 391),
    (Strategy::AtomicFenced, 204),
    (Strategy::AtomicCas, 399),
    (Strategy::ParallelMax, 3214),
    (Strategy::ParallelWatermark, 3819),
    (Strategy::AtomicDlq, 360),
    (Strategy::SkipPoison, 372),
    (Strategy::RetryForever, 344),
    (Strategy::ProducerIdempotent, 739),
    (Strategy::ProducerNewSequence, 1123),
    (Strategy::ResetEarliest, 727),
    (Strategy::ResetSilent, 1046),
    (Strategy::ResetFail, 638),
    (Strategy::FencedStoredEpoch, 166),
    (Strategy::LogLossRefuse, 632),
    (Strategy::LogLossUnchecked, 621),
    (Strategy::LogLossRefuseAll, 742),
    (Strategy::AcksLeader, 2879),
    (Strategy::AcksAll, 5108),
    (Strategy::AcksAllMinIsr1, 8302),
    (Strategy::AcksAllMinIsr1Clean, 5681),
    (Strategy::TxnFenced, 3425),
    (Strategy::TxnUnfenced, 30959),
    (Strategy::TxnReadUncommitted, 3685),
    (Strategy::AtomicPlusEmail, 413),
    (Strategy::EmailIdempotencyKey, 460),
    (Strategy::EmailNoKey, 631),
    (Strategy::BlindSet, 1564),
    (Strategy::SetIfNewer, 1254),
    (Strategy::DedupOffsetOnly, 896),
    (Strategy::DualWrite, 413),
    (Strategy::Outbox, 393),
    (Strategy::BrokerEffectFirst, 988),
    (Strategy::BrokerCommitFirst, 476),
    (Strategy::BrokerRelaxed, 1055),
];

/// BFS unique states of `small_config(strategy)` with two partitions. Only the cheapest
/// strategies are pinned: the others take seconds each in debug mode at this size.
const TWO_PARTITION_COUNTS: [(Strategy, usize); 2] = [(Strategy::Atomic, 7509), (Strategy::AtomicFenced, 3853)];

/// Unique states of a two-group configuration (one record each) without and with symmetry
/// reduction: owners, groups and epochs renamed (spec.md §7; the epochs' renaming took these
/// from 350 and 275). A second group, interchangeable with the first, shows the groups' part.
const TWO_GROUP_COUNTS: [(Strategy, usize, usize); 2] =
    [(Strategy::Atomic, 678, 247), (Strategy::AtomicFenced, 554, 173)];

/// How a search mode's unique-state count must relate to single-threaded BFS's.
#[derive(Clone, Copy, Debug)]
enum Relation {
    /// Every complete search without symmetry visits exactly the reachable states.
    Equal,
    /// Symmetry reduction visits one state per equivalence class, so never more.
    AtMost,
}

/// The search modes compared with single-threaded BFS on every strategy's small configuration.
const MODES: [(&str, Search, usize, bool, Relation); 3] = [
    ("bfs, 2 threads", Search::Bfs, 2, false, Relation::Equal),
    ("dfs", Search::Dfs, 1, false, Relation::Equal),
    ("dfs with symmetry", Search::Dfs, 1, true, Relation::AtMost),
];

fn run(config: Config, search: Search, threads: usize, symmetry: bool) -> CheckReport {
    let options = CheckOptions { search, threads, symmetry, ..CheckOptions::default() };
    let report = check::run(&ConsumerModel::new(config), &options, &mut |_| {});
    // A count is only meaningful when the whole reachable state space was explored.
    assert!(report.complete, "{} {search:?} did not finish", report.config.strategy);
    report
}

fn bfs(config: Config) -> CheckReport {
    run(config, Search::Bfs, 1, false)
}

/// Each property's verdict, without the counterexamples: different searches find different
/// (equally valid) counterexamples, but must agree on every verdict.
fn verdicts(report: &CheckReport) -> Vec<(String, Verdict)> {
    report.properties.iter().map(|p| (p.name.clone(), p.verdict.clone())).collect()
}

#[test]
fn the_small_count_table_covers_every_strategy_once_in_order() {
    let strategies: Vec<Strategy> = SMALL_COUNTS.iter().map(|(s, _)| *s).collect();
    assert_eq!(strategies, Strategy::ALL);
}

#[test]
fn small_configurations_have_their_pinned_state_counts() {
    // Comparing whole tables reports every changed count at once, not just the first.
    let actual: Vec<(Strategy, usize)> =
        Strategy::ALL.iter().map(|&s| (s, bfs(small_config(s)).unique_states)).collect();
    assert_eq!(actual, SMALL_COUNTS);
}

#[test]
fn two_partition_configurations_have_their_pinned_state_counts() {
    let actual: Vec<(Strategy, usize)> = TWO_PARTITION_COUNTS
        .iter()
        .map(|&(s, _)| (s, bfs(Config { partitions: 2, ..small_config(s) }).unique_states))
        .collect();
    assert_eq!(actual, TWO_PARTITION_COUNTS);
}

#[test]
fn every_search_mode_agrees_with_bfs_on_counts_and_verdicts() {
    for strategy in Strategy::ALL {
        let reference = bfs(small_config(strategy));
        for (mode, search, threads, symmetry, relation) in MODES {
            let report = run(small_config(strategy), search, threads, symmetry);
            let context =
                format!("{strategy}, {mode}: {} unique states, bfs {}", report.unique_states, reference.unique_states);
            match relation {
                Relation::Equal => assert_eq!(report.unique_states, reference.unique_states, "{context}"),
                Relation::AtMost => assert!(report.unique_states <= reference.unique_states, "{context}"),
            }
            assert_eq!(verdicts(&report), verdicts(&reference), "{context}");
        }
    }
}

#[test]
fn symmetry_merges_interchangeable_groups_without_changing_verdicts() {
    for (strategy, pinned_bfs, pinned_symmetric) in TWO_GROUP_COUNTS {
        let config = Config { groups: 2, records: 1, commit_every: 1, inflight: 1, ..small_config(strategy) };
        let plain = bfs(config.clone());
        let symmetric = run(config.clone(), Search::Dfs, 1, true);
        assert_eq!((plain.unique_states, symmetric.unique_states), (pinned_bfs, pinned_symmetric), "{strategy}");
        // Our BFS and stateright's DFS store one representative per class: the same count.
        assert_eq!(run(config, Search::Bfs, 1, true).unique_states, pinned_symmetric, "{strategy}: bfs with symmetry");
        assert!(symmetric.unique_states < plain.unique_states, "{strategy}: symmetry reduced nothing");
        assert_eq!(verdicts(&symmetric), verdicts(&plain), "{strategy}");
    }
}

/// BFS unique states with one second incarnation (`paused_config`): the pause's own pinned
/// counts, for the rows it matters most to.
const PAUSED_COUNTS: [(Strategy, usize); 3] =
    [(Strategy::AtomicFenced, 2440), (Strategy::AtomicCas, 10232), (Strategy::FencedStoredEpoch, 2746)];

#[test]
fn paused_configurations_have_their_pinned_state_counts() {
    let actual: Vec<(Strategy, usize)> =
        PAUSED_COUNTS.iter().map(|&(s, _)| (s, bfs(common::paused_config(s)).unique_states)).collect();
    assert_eq!(actual, PAUSED_COUNTS);
}
