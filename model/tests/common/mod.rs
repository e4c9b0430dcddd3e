//! Shared by the integration tests: the small configuration every exhaustive check here uses.
#![allow(dead_code)] // Each test binary includes this module and uses a part of it.

use model::{Config, Strategy};

/// One group of two owners on one partition of two records, with one crash and one rebalance,
/// and no second incarnation (`paused_config` adds one). An exhaustive debug-mode check of one
/// strategy takes a fraction of a second at these bounds, and every strategy still reaches all
/// of its `sometimes` situations, so no verdict is vacuous.
pub fn small_config(strategy: Strategy) -> Config {
    Config {
        pauses: 0,
        groups: 1,
        owners: 2,
        partitions: 1,
        records: 2,
        crashes: 1,
        rebalances: 1,
        commit_every: 2,
        inflight: 2,
        ..Config::new(strategy)
    }
}

/// `small_config` with one second incarnation (a pause), as the rows about who may write have
/// by default; the state space grows tenfold, so only a few tests use it.
pub fn paused_config(strategy: Strategy) -> Config {
    Config { pauses: 1, ..small_config(strategy) }
}
