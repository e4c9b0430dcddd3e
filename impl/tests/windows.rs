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
fn run(settings: Settings, records: usize) -> (Vec<(StepKind, u64)>, i64) {
    const RUN_BOUND: Duration = Duration::from_secs(60);
    let (strategy, inflight, batch) = (settings.strategy, settings.inflight, settings.batch);
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let lab = Lab::new(records);
        let mut owner = lab.owner(settings);
        let steps = owner.run_to_end(OnFenced::Stop).expect("run to the end");
        let steps: Vec<_> = steps.iter().map(|(step, _)| (step.kind, step.offset)).collect();
        // The receiver is gone only when the test already failed.
        let _ = sender.send((steps, lab.total()));
    });
    match receiver.recv_timeout(RUN_BOUND) {
        Ok(run) => run,
        Err(RecvTimeoutError::Timeout) => {
            panic!("{strategy} (inflight {inflight}, batch {batch}) did not finish within {RUN_BOUND:?}: a hang")
        }
        Err(RecvTimeoutError::Disconnected) => {
            panic!("{strategy} (inflight {inflight}, batch {batch}) panicked (above)")
        }
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
        let (steps, total) = run(Settings { inflight, ..Settings::new(strategy) }, records);
        assert_eq!(
            steps, expected,
            "{strategy:?}, inflight {inflight}, {records} records: cargo test -p consumer --test windows"
        );
        assert_eq!(total, records as i64, "{strategy:?}: each record once");
    }
}

/// A periodic owner's batch stops at its checkpoint interval: with `--commit-every 3` and
/// `--batch 2`, the second fetch takes one record (the interval's last), the commit follows at
/// 3, and the next batch starts a new interval (owner shard 12's `fetch_count` mutant, `- with
/// +`, let a batch run past the interval: the commit came at 4).
#[test]
fn a_periodic_batch_stops_at_the_checkpoint_interval() {
    use StepKind::{ApplyEffect as A, CommitOffset as C, Fetch as F};
    let settings = Settings { commit_every: 3, batch: 2, ..Settings::new(Strategy::PeriodicCommit) };
    let (steps, total) = run(settings, 5);
    assert_eq!(steps, [(F, 0), (A, 0), (F, 2), (A, 2), (C, 3), (F, 3), (A, 3), (C, 5)]);
    assert_eq!(total, 5);
}
