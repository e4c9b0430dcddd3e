//! The parallel strategies' windows (`Owner::run_to_end`): fetch until `inflight` records are
//! pending, then complete the whole window, highest first, committing as the target moves,
//! before fetching again. A window that is not drained first (owner shard 6's surviving mutant
//! `owner.rs:850:22: replace |= with &=`, which never marks the window as draining) fetches as
//! soon as a slot frees: parallel-watermark then commits once instead of twice. Each case is a
//! strategy, its window and a log of +1 records in, the exact steps out.

mod common;

use common::Lab;
use consumer::owner::{OnFenced, Settings};
use consumer::strategy::{StepKind, Strategy};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// Runs one owner of `strategy` over `records` records of +1 on one partition to the end, on
/// SQLite; its steps as (kind, offset) and the total.
/// A run ends within `RUN_BOUND` or the test fails: the owner runs on a thread of its own, so
/// a window that never drains (a commit target that loops) is a failure, not a hung test.
fn run(strategy: Strategy, inflight: usize, records: usize) -> (Vec<(StepKind, u64)>, i64) {
    const RUN_BOUND: Duration = Duration::from_secs(60);
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let lab = Lab::new(records);
        let mut owner = lab.owner(Settings { inflight, ..Settings::new(strategy) });
        let steps = owner.run_to_end(OnFenced::Stop).expect("run to the end");
        let steps: Vec<_> = steps.iter().map(|(step, _)| (step.kind, step.offset)).collect();
        // The receiver is gone only when the test already failed.
        let _ = sender.send((steps, lab.total()));
    });
    match receiver.recv_timeout(RUN_BOUND) {
        Ok(run) => run,
        Err(RecvTimeoutError::Timeout) => {
            panic!("{strategy} (inflight {inflight}) did not finish within {RUN_BOUND:?}: a hang")
        }
        Err(RecvTimeoutError::Disconnected) => panic!("{strategy} (inflight {inflight}) panicked (above)"),
    }
}

/// A case: the strategy, its window (`inflight`), the records, and the exact steps.
type Case = (Strategy, usize, usize, &'static [(StepKind, u64)]);

#[test]
fn a_window_is_drained_before_the_next_fetch() {
    use StepKind::{ApplyEffect as A, CommitOffset as C, Fetch as F};
    // (strategy, inflight, records, the steps: (kind, offset; a commit's is the next offset)).
    let cases: [Case; 2] = [
        // Window {0, 1}: 1 then 0, the watermark moves to 2; then window {2}.
        (Strategy::ParallelWatermark, 2, 3, &[(F, 0), (F, 1), (A, 1), (A, 0), (C, 2), (F, 2), (A, 2), (C, 3)]),
        (
            Strategy::ParallelWatermark,
            3,
            4,
            &[(F, 0), (F, 1), (F, 2), (A, 2), (A, 1), (A, 0), (C, 3), (F, 3), (A, 3), (C, 4)],
        ),
    ];
    for (strategy, inflight, records, expected) in cases {
        let (steps, total) = run(strategy, inflight, records);
        assert_eq!(
            steps, expected,
            "{strategy:?}, inflight {inflight}, {records} records: cargo test -p consumer --test windows"
        );
        assert_eq!(total, records as i64, "{strategy:?}: each record once");
    }
}
