//! Both store backends, one script: every `Store` call the consumer makes, run in the same
//! order on an SQLite store and on a PostgreSQL one. Each step's result must be the one the
//! table expects (on both backends), and after each step both stores must hold the same rows:
//! groups, totals, values, progress rows, processed ids, facts, outbox, transactions, resets,
//! counted attempts and dead letters. So a wrong statement in either backend fails the step
//! that exposes it, naming it, whether the other backend agrees with the table or not.
//!
//! The SQLite half runs everywhere; the PostgreSQL half skips (printing why) only when no
//! server binary exists, and with `CI` set it fails instead (`common::pg`).

mod common;

use consumer::log::LogIdentity;
use consumer::store::{
    AtomicAlso, Fact, FailurePolicy, Guard, Item, Location, Store, StoreError, StoreOptions, TxnRow, TxnState,
};
use consumer::strategy::{DedupKey, EffectKind};
use std::fmt::Debug;

/// The log both stores are made for: two partitions.
const LOG: LogIdentity = LogIdentity { id: 0x5eed, partitions: 2 };

/// One call of the `Store` API with its arguments. Items are (offset, delta).
#[derive(Clone, Copy, Debug)]
enum Op {
    EnsureGroup(&'static str, &'static str),
    Claim(&'static str, u32, &'static str),
    ClaimOwn(&'static str, &'static str),
    ClaimOwnPartition(&'static str, u32, &'static str),
    AddEffect(&'static str, u32, &'static [(u64, i64)], bool, EffectKind),
    InsertProcessed(&'static str, u32, &'static [u64]),
    /// The fence (the broker rows' check of the held epoch), or none: blind.
    CommitOffset(&'static str, u32, Option<i64>, u64),
    ApplyStamped(&'static str, u32, &'static [(u64, i64)], EffectKind),
    ApplyDeduped(&'static str, u32, &'static [(u64, i64)], DedupKey),
    ApplyAtomic(&'static str, u32, &'static [(u64, i64)], Guard, AtomicAlso),
    FirstOutbox(&'static str),
    DeleteOutbox(&'static str, u32, u64),
    /// (group, partition, offset, epoch, policy, error)
    PoisonAttempt(&'static str, u32, u64, i64, FailurePolicy, &'static str),
    Attempts(&'static str, u32, u64),
    /// (group, partition, offset, epoch, payload, error)
    DeadLetter(&'static str, u32, u64, i64, &'static [u8], &'static str),
    Redrive(&'static str, u32, u64, i64),
    /// (group, partition, epoch, to)
    ResetOffset(&'static str, u32, i64, u64),
    RewindToLogEnd(&'static str, u32, u64),
    /// (items, fence, group, partition, first_output, epoch): the input range is the items'.
    CommitTxn(&'static [(u64, i64)], Option<i64>, &'static str, u32, u64, i64),
    /// An output section of (group, partition) under `fence` that records an abort of the
    /// transaction at `aborted` (epoch 1, input 0..1) and reads the state of each of `reads`
    /// before and after it; with `fail`, its body then returns an error (the section rolls
    /// back: the abort is not kept).
    OutputSection(&'static str, u32, Option<i64>, u64, &'static [u64], bool),
}

/// The script and what each step returns (`Debug` of the result, errors backend-neutral).
const STEPS: &[(Op, &str)] = {
    use AtomicAlso::{Fact as WithFact, FactAndOutbox, Nothing};
    use DedupKey::{OffsetOnly, PartitionOffset};
    use EffectKind::{Add, Set};
    use Op::*;
    &[
        (EnsureGroup("g", "o1"), "Ok(()) inside 0"),
        (EnsureGroup("g", "o9"), "Ok(()) inside 0"),
        (Claim("g", 0, "o2"), "Ok(2) inside 0"),
        (Claim("g", 2, "o2"), "Err(NoSuchPartition { partition: 2, partitions: 2 }) inside 0"),
        // atomic-fenced: a stale epoch lands nothing; the current one lands the batch.
        (
            ApplyAtomic("g", 0, &[(0, 5), (1, 7)], Guard::Fenced { epoch: 1 }, WithFact),
            "Err(Fenced { group: \"g\", partition: 0, held: 1, current: 2 }) inside 0",
        ),
        (ApplyAtomic("g", 0, &[(0, 5), (1, 7)], Guard::Fenced { epoch: 2 }, WithFact), "Ok([true, true]) inside 1"),
        // atomic-cas skips what is below the stored next offset.
        (ApplyAtomic("g", 0, &[(1, 7), (2, 1)], Guard::Cas, FactAndOutbox), "Ok([false, true]) inside 1"),
        (ApplyAtomic("g", 1, &[(0, 4)], Guard::Blind, Nothing), "Ok([true]) inside 1"),
        (ApplyAtomic("g", 1, &[], Guard::Blind, Nothing), "Ok([]) inside 1"),
        (FirstOutbox("g"), "Ok(Some(Fact { group: \"g\", partition: 0, offset: 2 })) inside 0"),
        (FirstOutbox("h"), "Ok(None) inside 0"),
        (DeleteOutbox("g", 0, 2), "Ok(true) inside 0"),
        (DeleteOutbox("g", 0, 2), "Ok(false) inside 0"),
        // dedup-separate: the effect skips recorded ids only when asked to.
        (AddEffect("g", 0, &[(3, 2), (4, 2)], true, Add), "Ok([true, true]) inside 1"),
        (InsertProcessed("g", 0, &[3]), "Ok(()) inside 1"),
        (AddEffect("g", 0, &[(3, 2), (4, 2)], true, Add), "Ok([false, true]) inside 1"),
        (AddEffect("g", 0, &[(3, 2)], false, Add), "Ok([true]) inside 1"),
        // The broker rows' commit: a stale epoch writes nothing; the current one commits.
        (
            CommitOffset("g", 0, Some(1), 9),
            "Err(Fenced { group: \"g\", partition: 0, held: 1, current: 2 }) inside 0",
        ),
        (CommitOffset("g", 0, Some(2), 5), "Ok(()) inside 1"),
        (CommitOffset("g", 0, None, 5), "Ok(()) inside 1"),
        // offset-stamp: only offsets above the stamp apply.
        (ApplyStamped("g", 1, &[(1, 3), (2, 3)], Add), "Ok([true, true]) inside 1"),
        (ApplyStamped("g", 1, &[(2, 3), (3, 3)], Add), "Ok([false, true]) inside 1"),
        // The set rows: the value is the record's own, v(o) = o + 1.
        (EnsureGroup("s", "o1"), "Ok(()) inside 0"),
        (ApplyStamped("s", 0, &[(4, 0), (2, 0)], Set), "Ok([true, false]) inside 1"),
        (AddEffect("s", 0, &[(1, 0)], false, Set), "Ok([true]) inside 1"),
        // dedup-atomic, and the trap keyed by the offset alone.
        (ApplyDeduped("g", 1, &[(4, 1), (5, 1)], PartitionOffset), "Ok([true, true]) inside 1"),
        (ApplyDeduped("g", 1, &[(5, 1), (6, 1)], PartitionOffset), "Ok([false, true]) inside 1"),
        (ApplyDeduped("g", 0, &[(5, 1)], OffsetOnly), "Ok([true]) inside 1"),
        (ApplyDeduped("g", 1, &[(5, 1)], OffsetOnly), "Ok([false]) inside 1"),
        // An overflowing total is refused and nothing of the batch lands.
        (
            ApplyAtomic("g", 0, &[(5, 1), (6, i64::MAX)], Guard::Blind, Nothing),
            "Err(Overflow { group: \"g\", partition: 0, offset: 6, total: 39, delta: 9223372036854775807 }) inside 0",
        ),
        (
            AddEffect("g", 0, &[(6, i64::MIN), (7, i64::MIN)], false, Add),
            "Err(Overflow { group: \"g\", partition: 0, offset: 7, total: -9223372036854775770, delta: -9223372036854775808 }) inside 0",
        ),
        // atomic-dlq: counted attempts up to the maximum, then dead-lettered.
        (PoisonAttempt("g", 0, 6, 2, FailurePolicy::Count { max_attempts: 2 }, "boom 1"), "Ok(Failed { attempts: 1 }) inside 1"),
        (PoisonAttempt("g", 0, 6, 2, FailurePolicy::Count { max_attempts: 2 }, "boom 2"), "Ok(Failed { attempts: 2 }) inside 1"),
        (PoisonAttempt("g", 0, 6, 2, FailurePolicy::Count { max_attempts: 2 }, "boom 3"), "Ok(Exhausted { attempts: 2 }) inside 1"),
        (PoisonAttempt("g", 0, 7, 2, FailurePolicy::Forget, "gone"), "Ok(Failed { attempts: 0 }) inside 1"),
        (
            PoisonAttempt("g", 0, 7, 1, FailurePolicy::Count { max_attempts: 2 }, "zombie"),
            "Err(Fenced { group: \"g\", partition: 0, held: 1, current: 2 }) inside 0",
        ),
        (PoisonAttempt("g", 1, 9, 1, FailurePolicy::Count { max_attempts: 3 }, "later"), "Ok(Failed { attempts: 1 }) inside 1"),
        (Attempts("g", 0, 6), "Ok(2) inside 0"),
        (Attempts("g", 0, 7), "Ok(0) inside 0"),
        (DeadLetter("g", 0, 6, 2, b"payload 6", "unused"), "Ok(2) inside 1"),
        (DeadLetter("g", 0, 8, 2, b"payload 8", "never counted"), "Ok(0) inside 1"),
        (
            DeadLetter("g", 0, 9, 1, b"payload 9", "zombie"),
            "Err(Fenced { group: \"g\", partition: 0, held: 1, current: 2 }) inside 0",
        ),
        (Redrive("g", 0, 6, 10), "Ok(48) inside 0"),
        (Redrive("g", 0, 6, 10), "Err(NoDeadLetter { group: \"g\", partition: 0, offset: 6 }) inside 0"),
        // earliest: the reset is recorded once however often it happens.
        (ResetOffset("g", 0, 2, 3), "Ok(9) inside 1"),
        (ResetOffset("g", 0, 1, 3), "Err(Fenced { group: \"g\", partition: 0, held: 1, current: 2 }) inside 0"),
        (CommitOffset("g", 0, None, 9), "Ok(()) inside 1"),
        (ResetOffset("g", 0, 2, 3), "Ok(9) inside 1"),
        // repair: ids, attempts and the stamp at or past the end go, an offset past it moves back.
        // (dedup-atomic and offset-stamp leave partition 1's next offset at 1: they commit apart.)
        (
            RewindToLogEnd("g", 1, 4),
            "Ok(Some(Rewind { group: \"g\", partition: 1, from: 1, to: 1, processed_dropped: 3, attempts_dropped: 1, stamp_from: None, epoch: 2 })) inside 0",
        ),
        (RewindToLogEnd("g", 1, 4), "Ok(None) inside 0"),
        (
            RewindToLogEnd("g", 0, 3),
            "Ok(Some(Rewind { group: \"g\", partition: 0, from: 3, to: 3, processed_dropped: 2, attempts_dropped: 1, stamp_from: None, epoch: 3 })) inside 0",
        ),
        (ApplyStamped("g", 1, &[(5, 1)], Add), "Ok([true]) inside 1"),
        (
            RewindToLogEnd("g", 1, 5),
            "Ok(Some(Rewind { group: \"g\", partition: 1, from: 1, to: 1, processed_dropped: 0, attempts_dropped: 0, stamp_from: Some(5), epoch: 3 })) inside 0",
        ),
        (
            RewindToLogEnd("g", 1, 0),
            "Ok(Some(Rewind { group: \"g\", partition: 1, from: 1, to: 0, processed_dropped: 0, attempts_dropped: 0, stamp_from: Some(4), epoch: 4 })) inside 0",
        ),
        // An owner's start claims the rows that name it.
        (ClaimOwn("g", "o2"), "Ok([Claimed { partition: 0, epoch: 4, next_offset: 3 }]) inside 0"),
        (ClaimOwn("g", "o3"), "Ok([]) inside 0"),
        (ClaimOwnPartition("g", 1, "o1"), "Ok(Some(Claimed { partition: 1, epoch: 5, next_offset: 0 })) inside 0"),
        (ClaimOwnPartition("g", 1, "o2"), "Ok(None) inside 0"),
        // The transactional rows: the commit point and an output section's abort.
        (EnsureGroup("t", "o1"), "Ok(()) inside 0"),
        (CommitTxn(&[(0, 5), (1, 6)], Some(1), "t", 0, 0, 1), "Ok(()) inside 1"),
        (CommitTxn(&[(2, 5)], Some(0), "t", 0, 3, 0), "Err(Fenced { group: \"t\", partition: 0, held: 0, current: 1 }) inside 0"),
        (CommitTxn(&[(0, 7)], None, "t", 1, 0, 1), "Ok(()) inside 1"),
        // A section whose body fails rolls back (the abort it recorded is not kept) and skips
        // its hook: a crash point inside it is for sections that commit.
        (OutputSection("t", 0, Some(1), 7, &[7], true), "Err(NoDeadLetter { group: \"[None, Some(Aborted)]\", partition: 0, offset: 7 }) inside 0"),
        (OutputSection("t", 0, Some(1), 3, &[0, 3, 9], false), "Ok([Some(Committed), None, None, Some(Committed), Some(Aborted), None]) inside 1"),
        (OutputSection("t", 0, Some(0), 4, &[4], false), "Err(Fenced { group: \"t\", partition: 0, held: 0, current: 1 }) inside 0"),
        (OutputSection("t", 1, None, 5, &[0, 5], false), "Ok([Some(Committed), None, Some(Committed), Some(Aborted)]) inside 1"),
    ]
};

/// A step's result, the same text on both backends: the store's own errors keep their fields
/// (none names the backend), a failed statement is `backend error` (which differs, and should).
fn neutral<T: Debug>(result: Result<T, StoreError>) -> String {
    match result {
        Ok(value) => format!("Ok({value:?})"),
        Err(
            error @ (StoreError::Fenced { .. }
            | StoreError::NoSuchPartition { .. }
            | StoreError::NoDeadLetter { .. }
            | StoreError::Overflow { .. }
            | StoreError::BadTxnState { .. }),
        ) => format!("Err({error:?})"),
        Err(error) => format!("backend error: {error}"),
    }
}

fn items(pairs: &[(u64, i64)]) -> Vec<Item> {
    pairs.iter().map(|&(offset, delta)| Item { offset, delta }).collect()
}

/// Runs one step on `store`: its result, then how often the write's `inside` hook ran (the
/// crash points' seam: once per write that reached its COMMIT or ROLLBACK, never for a read
/// or a refused write).
fn run(store: &mut Store, op: Op) -> String {
    let mut inside_runs = 0;
    let result = call(store, op, &mut || inside_runs += 1);
    format!("{result} inside {inside_runs}")
}

fn call(store: &mut Store, op: Op, hook: &mut dyn FnMut()) -> String {
    match op {
        Op::EnsureGroup(group, owner) => neutral(store.ensure_group(group, owner)),
        Op::Claim(group, partition, owner) => neutral(store.claim(group, partition, owner)),
        Op::ClaimOwn(group, owner) => neutral(store.claim_own(group, owner)),
        Op::ClaimOwnPartition(group, partition, owner) => neutral(store.claim_own_partition(group, partition, owner)),
        Op::AddEffect(group, partition, pairs, unless_processed, effect) => {
            neutral(store.add_effect(group, partition, &items(pairs), (unless_processed, effect), hook))
        }
        Op::InsertProcessed(group, partition, offsets) => {
            neutral(store.insert_processed(group, partition, offsets, hook))
        }
        Op::CommitOffset(group, partition, fence, next) => {
            neutral(store.commit_offset(group, partition, fence, next, hook))
        }
        Op::ApplyStamped(group, partition, pairs, effect) => {
            neutral(store.apply_stamped(group, partition, &items(pairs), effect, hook))
        }
        Op::ApplyDeduped(group, partition, pairs, key) => {
            neutral(store.apply_deduped(group, partition, &items(pairs), key, hook))
        }
        Op::ApplyAtomic(group, partition, pairs, guard, also) => {
            neutral(store.apply_atomic(group, partition, &items(pairs), (guard, also), hook))
        }
        Op::FirstOutbox(group) => neutral(store.first_outbox(group)),
        Op::DeleteOutbox(group, partition, offset) => {
            neutral(store.delete_outbox(&Fact { group: group.to_string(), partition, offset }))
        }
        Op::PoisonAttempt(group, partition, offset, epoch, policy, error) => {
            neutral(store.poison_attempt(group, partition, offset, Some(epoch), policy, error, hook))
        }
        Op::Attempts(group, partition, offset) => neutral(store.attempts(group, partition, offset)),
        Op::DeadLetter(group, partition, offset, epoch, payload, error) => {
            neutral(store.dead_letter(group, partition, offset, Some(epoch), payload, error, hook))
        }
        Op::Redrive(group, partition, offset, delta) => neutral(store.redrive(group, partition, offset, delta)),
        Op::ResetOffset(group, partition, epoch, to) => {
            neutral(store.reset_offset(group, partition, Some(epoch), to, hook))
        }
        Op::RewindToLogEnd(group, partition, end) => neutral(store.rewind_to_log_end(group, partition, end)),
        Op::CommitTxn(pairs, fence, group, partition, first_output, epoch) => {
            let input_offset = pairs.first().map_or(0, |&(offset, _)| offset);
            let input_end = pairs.last().map_or(0, |&(offset, _)| offset + 1);
            let txn = TxnRow {
                group: group.to_string(),
                partition,
                first_output,
                epoch,
                input_offset,
                input_end,
                state: TxnState::Committed,
            };
            neutral(store.commit_txn(&items(pairs), fence, &txn, hook))
        }
        Op::OutputSection(group, partition, fence, aborted, reads, fail) => {
            let row = TxnRow {
                group: group.to_string(),
                partition,
                first_output: aborted,
                epoch: 1,
                input_offset: 0,
                input_end: 1,
                state: TxnState::Aborted,
            };
            neutral(store.output_section((group, partition), fence, hook, |txns| {
                let mut states = Vec::new();
                for &first_output in reads {
                    states.push(txns.state(first_output)?);
                }
                txns.record_aborted(&row)?;
                for &first_output in reads {
                    states.push(txns.state(first_output)?);
                }
                if fail {
                    return Err(StoreError::NoDeadLetter { group: format!("{states:?}"), partition, offset: aborted });
                }
                Ok(states)
            }))
        }
    }
}

/// Every row a store holds, as text: what both backends must agree on after each step.
fn rows(store: &Store) -> String {
    let mut text = String::new();
    let groups = store.groups().expect("groups");
    text += &format!("groups {groups:?}\n");
    for group in &groups {
        let g = group.as_str();
        text +=
            &format!("{g}: total {:?} value {:?}\n", store.total(g).expect("total"), store.value(g).expect("value"));
        for partition in 0..store.partitions() {
            text += &format!("  progress {partition}: {:?}\n", store.progress(g, partition).expect("progress"));
        }
        text += &format!("  processed {:?}\n", store.processed(g).expect("processed"));
        text += &format!("  attempts {:?}\n", store.all_attempts(g).expect("attempts"));
        text += &format!("  facts {:?}\n", store.facts(Some(g)).expect("facts"));
        text += &format!("  outbox {:?}\n", store.outbox(Some(g)).expect("outbox"));
        text += &format!("  txns {:?}\n", store.txns(Some(g)).expect("txns"));
        text += &format!("  resets {:?}\n", store.resets(Some(g)).expect("resets"));
        text += &format!("  dead letters {:?}\n", store.dead_letters(Some(g)).expect("dead letters"));
    }
    text += &format!("all facts {:?}\n", store.facts(None).expect("facts"));
    text += &format!("all txns {:?}\n", store.txns(None).expect("txns"));
    text
}

#[test]
fn both_backends_give_every_call_the_same_result_and_keep_the_same_rows() {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let path = scratch.path().join("store.db");
    let mut sqlite = Store::create(&path, LOG, StoreOptions::default()).expect("create the SQLite store");
    let mut postgres = common::pg::database().map(|url| {
        Store::create_at(&Location::Postgres(url), LOG, StoreOptions::default()).expect("create the PostgreSQL store")
    });
    for (index, &(op, expected)) in STEPS.iter().enumerate() {
        let step = format!("step {index} ({op:?})");
        assert_eq!(run(&mut sqlite, op), expected, "{step} on SQLite");
        let Some(postgres) = postgres.as_mut() else { continue };
        assert_eq!(run(postgres, op), expected, "{step} on PostgreSQL");
        assert_eq!(rows(postgres), rows(&sqlite), "{step}: the PostgreSQL rows (left) differ from SQLite's (right)");
    }
    // The end state, pinned (not only compared): a wrong statement both backends shared would
    // show here.
    assert_eq!(rows(&sqlite), END, "the end state");
}

/// Every row after the last step (`rows`), one fact per line.
const END: &str = "\
groups [\"g\", \"s\", \"t\"]
g: total 49 value None
  progress 0: ProgressRow { next_offset: 3, epoch: 4, owner: \"o2\", stamp: None }
  progress 1: ProgressRow { next_offset: 0, epoch: 5, owner: \"o1\", stamp: None }
  processed []
  attempts []
  facts [Fact { group: \"g\", partition: 0, offset: 0 }, Fact { group: \"g\", partition: 0, offset: 1 }, Fact { group: \"g\", partition: 0, offset: 2 }]
  outbox []
  txns []
  resets [Reset { group: \"g\", partition: 0, from: 9, to: 3 }, Reset { group: \"g\", partition: 1, from: 1, to: 0 }]
  dead letters [DeadLetter { group: \"g\", partition: 0, offset: 8, attempts: 0, error: \"never counted\", payload: [112, 97, 121, 108, 111, 97, 100, 32, 56] }]
s: total 0 value Some(2)
  progress 0: ProgressRow { next_offset: 0, epoch: 1, owner: \"o1\", stamp: Some(4) }
  progress 1: ProgressRow { next_offset: 0, epoch: 1, owner: \"o1\", stamp: None }
  processed []
  attempts []
  facts []
  outbox []
  txns []
  resets []
  dead letters []
t: total 18 value None
  progress 0: ProgressRow { next_offset: 2, epoch: 1, owner: \"o1\", stamp: None }
  progress 1: ProgressRow { next_offset: 1, epoch: 1, owner: \"o1\", stamp: None }
  processed []
  attempts []
  facts []
  outbox []
  txns [TxnRow { group: \"t\", partition: 0, first_output: 0, epoch: 1, input_offset: 0, input_end: 2, state: Committed }, TxnRow { group: \"t\", partition: 0, first_output: 3, epoch: 1, input_offset: 0, input_end: 1, state: Aborted }, TxnRow { group: \"t\", partition: 1, first_output: 0, epoch: 1, input_offset: 0, input_end: 1, state: Committed }, TxnRow { group: \"t\", partition: 1, first_output: 5, epoch: 1, input_offset: 0, input_end: 1, state: Aborted }]
  resets []
  dead letters []
all facts [Fact { group: \"g\", partition: 0, offset: 0 }, Fact { group: \"g\", partition: 0, offset: 1 }, Fact { group: \"g\", partition: 0, offset: 2 }]
all txns [TxnRow { group: \"t\", partition: 0, first_output: 0, epoch: 1, input_offset: 0, input_end: 2, state: Committed }, TxnRow { group: \"t\", partition: 0, first_output: 3, epoch: 1, input_offset: 0, input_end: 1, state: Aborted }, TxnRow { group: \"t\", partition: 1, first_output: 0, epoch: 1, input_offset: 0, input_end: 1, state: Committed }, TxnRow { group: \"t\", partition: 1, first_output: 5, epoch: 1, input_offset: 0, input_end: 1, state: Aborted }]
";
