//! Which steps an owner offers (`Owner::perform` refuses the others, as the worker and the
//! open protocol do): a table of a strategy, a log, the steps taken, then one step asked, and
//! whether it is refused as not enabled. A periodic owner with a full interval commits before
//! it fetches again, a parallel owner fetches only while its window has room, and nothing
//! fetches at the log's end (owner shard 14's timeouts: `owner.rs:1406:17` and `1406:50`, `<`
//! replaced by `<=` in `serial_steps`, and `1432:36`, `&&` by `||` in `parallel_steps`, offered
//! those fetches).

mod common;

use common::Lab;
use consumer::owner::{OwnerError, Settings};
use consumer::strategy::{Step, StepKind, Strategy};

struct Case {
    name: &'static str,
    strategy: Strategy,
    commit_every: u64,
    records: usize,
    taken: &'static [(StepKind, u64)],
    asked: (StepKind, u64),
    /// Whether `asked` is enabled.
    enabled: bool,
}

#[test]
fn an_owner_offers_only_the_steps_its_rules_enable() {
    use StepKind::{ApplyEffect as A, CommitOffset as C, Fetch as F};
    let cases = [
        Case {
            name: "periodic-commit with a full interval must commit first",
            strategy: Strategy::PeriodicCommit,
            commit_every: 2,
            records: 3,
            taken: &[(F, 0), (A, 0), (F, 1), (A, 1)],
            asked: (F, 2),
            enabled: false,
        },
        Case {
            name: "periodic-commit with a full interval commits",
            strategy: Strategy::PeriodicCommit,
            commit_every: 2,
            records: 3,
            taken: &[(F, 0), (A, 0), (F, 1), (A, 1)],
            asked: (C, 2),
            enabled: true,
        },
        Case {
            name: "periodic-commit fetches within the interval",
            strategy: Strategy::PeriodicCommit,
            commit_every: 2,
            records: 3,
            taken: &[(F, 0), (A, 0)],
            asked: (F, 1),
            enabled: true,
        },
        Case {
            name: "periodic-commit at the log's end fetches nothing",
            strategy: Strategy::PeriodicCommit,
            commit_every: 2,
            records: 2,
            taken: &[(F, 0), (A, 0), (F, 1), (A, 1), (C, 2)],
            asked: (F, 2),
            enabled: false,
        },
        Case {
            name: "parallel-max at the log's end fetches nothing",
            strategy: Strategy::ParallelMax,
            commit_every: 2,
            records: 1,
            taken: &[(F, 0), (A, 0), (C, 1)],
            asked: (F, 1),
            enabled: false,
        },
        Case {
            name: "parallel-max with a full window fetches nothing",
            strategy: Strategy::ParallelMax,
            commit_every: 2,
            records: 3,
            taken: &[(F, 0), (F, 1)],
            asked: (F, 2),
            enabled: false,
        },
        Case {
            name: "parallel-max fetches while its window has room",
            strategy: Strategy::ParallelMax,
            commit_every: 2,
            records: 3,
            taken: &[(F, 0)],
            asked: (F, 1),
            enabled: true,
        },
    ];
    for case in &cases {
        let name = case.name;
        let lab = Lab::new(case.records);
        let mut owner = lab.owner(Settings { commit_every: case.commit_every, ..Settings::new(case.strategy) });
        let step = |(kind, offset): (StepKind, u64)| Step { kind, partition: 0, offset };
        for &taken in case.taken {
            owner.perform(step(taken)).unwrap_or_else(|e| panic!("{name}: {:?}: {e}", taken));
        }
        match (owner.perform(step(case.asked)), case.enabled) {
            (Ok(_), true) | (Err(OwnerError::NotEnabled { .. }), false) => {}
            (outcome, enabled) => panic!(
                "{name}: {:?} should be {}: {outcome:?} (cargo test -p consumer --test enabled)",
                case.asked,
                if enabled { "taken" } else { "refused as not enabled" }
            ),
        }
    }
}
