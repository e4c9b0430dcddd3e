//! The parallel strategies' windows (`Owner::run_to_end`): fetch until `inflight` records are
//! pending, then complete the whole window, highest first, committing as the target moves,
//! before fetching again. A window that is not drained first (owner shard 6's surviving mutant
//! `owner.rs:850:22: replace |= with &=`, which never marks the window as draining) fetches as
//! soon as a slot frees: parallel-watermark then commits once instead of twice. Each case is a
//! strategy, its window and a log of +1 records in, the exact steps out.

use consumer::crash::CrashPlan;
use consumer::log::{encode_delta, Log};
use consumer::owner::{OnFenced, Owner, Settings};
use consumer::store::{Location, Store, StoreOptions};
use consumer::strategy::{StepKind, Strategy};

/// Runs one owner of `strategy` over `records` records of +1 on one partition to the end, on
/// SQLite; its steps as (kind, offset) and the total.
fn run(strategy: Strategy, inflight: usize, records: usize) -> (Vec<(StepKind, u64)>, i64) {
    let temp = tempfile::tempdir().expect("a temporary directory");
    let location = Location::Sqlite(temp.path().join("store.db"));
    let log_dir = temp.path().join("log");
    let identity = Log::init(&log_dir, 1).expect("create the log");
    Store::create_at(&location, identity, StoreOptions::default()).expect("create the store");
    let (mut writer, _) = Log::open_writer(&log_dir, identity).expect("open the log");
    writer.append_batch(0, &vec![encode_delta(1); records]).expect("append");
    let store = Store::open_at(&location, StoreOptions::default()).expect("open the store");
    let log = Log::open_reader(&log_dir, identity).expect("open the log");
    let settings = Settings { inflight, ..Settings::new(strategy) };
    let mut owner = Owner::start(store, log, "g", "o0", settings, CrashPlan::none()).expect("start the owner");
    let steps = owner.run_to_end(OnFenced::Stop).expect("run to the end");
    let total = Store::open_at(&location, StoreOptions::default()).expect("open").total("g").expect("total");
    (steps.iter().map(|(step, _)| (step.kind, step.offset)).collect(), total)
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
