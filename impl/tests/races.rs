//! The log changing between the owner's look at it and its fetch (`Owner::run_to_end`), as
//! another process can make it: retention passing the position, or the log losing its tail.
//! `Owner::set_before_step` makes the race happen at a chosen step. Retention's race is no
//! error: the fetch changed nothing and the next round judges the new start by the
//! out-of-range policy (owner shards 6 and 7's surviving mutants of the guard on `owner.rs`'s
//! `offset < start`: replaced by `false`, `!=` or `==` they stop with the log's own
//! out-of-range error). A lost tail is no retention: the fetch's error ends the run (replaced
//! by `true` or `||`, the guard would go on as if retention had passed).
//!
//! Each case: a strategy and policy, a log of five +1 records, the race (at which fetch, what
//! it does), and the run's end: the steps' kinds and offsets and the total, or the error.

mod common;

use common::Lab;
use consumer::log::{fault, LogError};
use consumer::owner::{OnFenced, OwnerError, Settings};
use consumer::strategy::{OutOfRange, Step, StepKind, Strategy};

enum Race {
    /// Retention moves the start of partition 0 to this offset.
    Retain(u64),
    /// The partition keeps only this many records.
    LoseTail(u64),
}

enum Ending {
    /// The run ends normally: these steps, this total.
    Done(&'static [(StepKind, u64)], i64),
    /// The run stops with retention past the position under `--on-out-of-range fail`.
    OutOfRange { offset: u64, start: u64 },
    /// The run stops with the fetch's own error: the record is past the log's end.
    FetchFailed,
}

struct Case {
    name: &'static str,
    on_out_of_range: OutOfRange,
    /// The race happens just before the fetch of this offset.
    at_fetch: u64,
    race: Race,
    end: Ending,
}

const RECORDS: usize = 5;

#[test]
fn the_log_changing_under_a_fetch_is_judged_by_the_next_round() {
    use StepKind::{ApplyAtomic as A, Fetch as F, ResetOffset as R};
    let cases = [
        Case {
            name: "retention past the position before the first fetch, fail",
            on_out_of_range: OutOfRange::Fail,
            at_fetch: 0,
            race: Race::Retain(3),
            end: Ending::OutOfRange { offset: 0, start: 3 },
        },
        Case {
            name: "retention past the position before the first fetch, earliest",
            on_out_of_range: OutOfRange::Earliest,
            at_fetch: 0,
            race: Race::Retain(3),
            // The failed fetch is no step taken; the reset is the next round's.
            end: Ending::Done(&[(R, 3), (F, 3), (A, 3), (F, 4), (A, 4)], 2),
        },
        Case {
            name: "retention past the position mid-log, earliest",
            on_out_of_range: OutOfRange::Earliest,
            at_fetch: 2,
            race: Race::Retain(4),
            end: Ending::Done(&[(F, 0), (A, 0), (F, 1), (A, 1), (R, 4), (F, 4), (A, 4)], 3),
        },
        Case {
            name: "the tail lost under the fetch",
            on_out_of_range: OutOfRange::Fail,
            at_fetch: 3,
            race: Race::LoseTail(2),
            end: Ending::FetchFailed,
        },
    ];
    for case in &cases {
        let (result, total) = run(case);
        let name = case.name;
        match (&case.end, result) {
            (Ending::Done(expected, expected_total), Ok(steps)) => {
                let steps: Vec<(StepKind, u64)> = steps.iter().map(|(step, _)| (step.kind, step.offset)).collect();
                assert_eq!(steps, *expected, "{name}: the steps (cargo test -p consumer --test races)");
                assert_eq!(total, *expected_total, "{name}: the total");
            }
            (
                Ending::OutOfRange { offset, start },
                Err(OwnerError::OutOfRange { partition: 0, offset: o, start: s }),
            ) => {
                assert_eq!((o, s), (*offset, *start), "{name}: the position and start it stops at");
                assert_eq!(total, 0, "{name}: nothing applied");
            }
            (Ending::FetchFailed, Err(OwnerError::Log(error))) => {
                assert!(
                    !matches!(error, LogError::OffsetOutOfRange { offset, start, .. } if offset < start),
                    "{name}: {error}"
                );
                assert_eq!(total, 3, "{name}: records 0..3 applied, nothing after the loss");
            }
            (_, other) => panic!("{name}: the run ended with {other:?} (cargo test -p consumer --test races)"),
        }
    }
}

/// One atomic-fenced owner (a new group) over five +1 records, the race made at the case's
/// fetch; the run's result and the group's total.
fn run(case: &Case) -> (Result<Vec<(Step, consumer::owner::Outcome)>, OwnerError>, i64) {
    let mut lab = Lab::new(RECORDS);
    let settings = Settings { on_out_of_range: case.on_out_of_range, ..Settings::new(Strategy::AtomicFenced) };
    let mut owner = lab.owner(settings);
    let (at, dir) = (case.at_fetch, lab.log_dir.clone());
    let mut race = match case.race {
        Race::Retain(before) => Some(Race::Retain(before)),
        Race::LoseTail(keep) => Some(Race::LoseTail(keep)),
    };
    let mut writer = lab.writer.take();
    owner.set_before_step(Box::new(move |step: Step| {
        if step.kind != StepKind::Fetch || step.offset != at {
            return;
        }
        match race.take() {
            Some(Race::Retain(before)) => {
                writer.as_mut().expect("the writer").retain_before(0, before).expect("retention");
            }
            Some(Race::LoseTail(keep)) => {
                drop(writer.take());
                fault::lose_tail(&dir, 0, keep).expect("lose the tail");
            }
            None => {}
        }
    }));
    let result = owner.run_to_end(OnFenced::Stop);
    (result, lab.total())
}
