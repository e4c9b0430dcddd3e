//! Shared by the integration tests: the small configuration every exhaustive check here uses.

use model::{Config, Strategy};

/// One group of two owners on one partition of two records, with one crash and one rebalance.
/// An exhaustive debug-mode check of one strategy takes a fraction of a second at these bounds,
/// and every strategy still reaches all of its `sometimes` situations, so no verdict is vacuous.
pub fn small_config(strategy: Strategy) -> Config {
    Config {
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
