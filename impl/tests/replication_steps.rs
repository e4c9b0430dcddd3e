//! The replicated log through the library, one step at a time (as a conformance harness drives
//! spec.md §3.2's `append`, `acknowledge`, `replicate`, `shrink-isr` and `fail-leader`): the
//! answers of a pending `acks=all` batch, a reader bounded by the high watermark that follows
//! an election, the explicit and recorded truncation of a promoted replica (and its record cut by
//! the power), and each replica keeping the plain log's rules.

mod common;

use consumer::log::{
    encode_delta, fault, replica_dir, Answer, Batch, Cut, ElectionKind, Halt, Log, LogError, LogIdentity, Producer,
    Replicate, ReplicatedLog, ReplicationError, SimDisk, SimOp, Storage, WriterMode,
};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

const IDENTITY: LogIdentity = LogIdentity { id: 0x5eed, partitions: 1 };
const PRODUCER: Producer = Producer { id: 3, epoch: 0 };

fn replicated(storage: &Storage, dir: &Path) -> ReplicatedLog {
    ReplicatedLog::create_on(storage, dir, IDENTITY, 2).unwrap();
    ReplicatedLog::open_on(storage, dir, IDENTITY).unwrap().expect("a replicated log")
}

fn real() -> (tempfile::TempDir, PathBuf, ReplicatedLog) {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("log");
    let log = replicated(&Storage::Real, &dir);
    (temp, dir, log)
}

fn payloads(delta: i64) -> Vec<Vec<u8>> {
    vec![encode_delta(delta)]
}

fn set(brokers: &[u32]) -> BTreeSet<u32> {
    brokers.iter().copied().collect()
}

/// `(leader, high watermark, ISR)` of partition 0.
fn replication(log: &ReplicatedLog) -> (Option<u32>, u64, BTreeSet<u32>) {
    let state = log.state().unwrap();
    let part = &state.partitions[0];
    (part.leader, part.high_watermark, part.isr.clone())
}

#[test]
fn a_pending_batch_is_answered_once_the_high_watermark_covers_it() {
    let (_temp, _dir, log) = real();
    let data = payloads(5);
    let pending = log.append_pending(0, Batch { payloads: &data, producer: None }, 2).unwrap();
    assert_eq!(pending.append.appended.offsets, 0..1);
    assert_eq!(log.acknowledge(&pending).unwrap(), Answer::Waiting { high_watermark: 0 });
    match log.replicate(0).unwrap() {
        Replicate::Copied { follower: 1, offsets, rejoined: false, high_watermark: 1, .. } => assert_eq!(offsets, 0..1),
        other => panic!("{other:?}"),
    }
    assert_eq!(log.acknowledge(&pending).unwrap(), Answer::Acknowledged { high_watermark: 1, isr: set(&[0, 1]) });
}

/// `acks=all` waits for the high watermark no longer than its timeout: with no fetch it gives
/// up with `AckTimeout` (appended, not acknowledged: a refusal), and the retry with the same
/// producer and sequence, once a fetch covered the batch, is acknowledged as the original
/// append. The wait runs on a thread with 30 s of patience, so a wait that never ends fails
/// here instead of hanging the test.
#[test]
fn acks_all_gives_up_at_its_timeout_and_the_retry_finds_the_original() {
    let (_temp, dir, log) = real();
    let data = payloads(5);
    let timeout = Duration::from_millis(200);
    let waiting = data.clone();
    let (answer, _) = common::within(Duration::from_secs(30), move || {
        log.append_all(0, Batch { payloads: &waiting, producer: Some((PRODUCER, 0)) }, 2, timeout)
    })
    .expect("append_all gave up within 30 s");
    let error = answer.expect_err("nobody fetched: not acknowledged");
    match &error {
        ReplicationError::AckTimeout { partition: 0, offsets, high_watermark: 0, waited_ms } => {
            assert_eq!(offsets, &(0..1));
            assert!(*waited_ms >= 200, "gave up after {waited_ms} ms, before its 200 ms");
        }
        other => panic!("expected AckTimeout, got {other}"),
    }
    assert!(error.is_refusal() && error.appended() == Some(&(0..1)), "{error}");
    let log = ReplicatedLog::open(&dir, IDENTITY).unwrap().expect("a replicated log");
    log.replicate(0).unwrap();
    let retry = log.append_all(0, Batch { payloads: &data, producer: Some((PRODUCER, 0)) }, 2, timeout).unwrap();
    assert_eq!(retry.append.appended.offsets, 0..1);
    assert!(retry.append.appended.duplicate, "the retry found the original batch");
    assert_eq!((retry.high_watermark, retry.isr), (1, set(&[0, 1])));
}

/// The state file is replaced (one generation on) only when a step changes it: an append
/// that does not move the high watermark and a fetch that finds the follower caught up leave
/// it byte for byte, so a reader that sees a new generation knows something changed.
#[test]
fn a_step_that_changes_nothing_leaves_the_state_file_as_it_is() {
    let (_temp, dir, log) = real();
    let path = dir.join("replication.state");
    let generation = || log.state().unwrap().generation;
    let before = (generation(), std::fs::read(&path).unwrap());
    log.append_leader(0, Batch { payloads: &payloads(1), producer: None }).unwrap();
    assert_eq!((generation(), std::fs::read(&path).unwrap()), before, "an append below the ISR's ends");
    assert!(matches!(log.replicate(0).unwrap(), Replicate::Copied { high_watermark: 1, .. }));
    let copied = (generation(), std::fs::read(&path).unwrap());
    assert_eq!(copied.0, before.0 + 1, "the high watermark moved: one replacement");
    assert!(matches!(log.replicate(0).unwrap(), Replicate::CaughtUp { end: 1, rejoined: false, .. }));
    assert_eq!((generation(), std::fs::read(&path).unwrap()), copied, "a fetch with nothing to copy");
}

/// A fetch copies the leader's next batch whole (a batch is never split across fetches, so a
/// follower holds whole batches only): a batch of three, then one of one, takes two fetches,
/// and the follower's records are the leader's.
#[test]
fn a_fetch_copies_the_leaders_next_batch_whole() {
    let (_temp, _dir, log) = real();
    let three: Vec<Vec<u8>> = (1..=3).map(encode_delta).collect();
    let one = payloads(4);
    log.append_leader(0, Batch { payloads: &three, producer: Some((PRODUCER, 0)) }).unwrap();
    log.append_leader(0, Batch { payloads: &one, producer: None }).unwrap();
    for (offsets, high_watermark) in [(0..3, 3), (3..4, 4)] {
        match log.replicate(0).unwrap() {
            Replicate::Copied { follower: 1, offsets: copied, high_watermark: moved, .. } => {
                assert_eq!((copied, moved), (offsets, high_watermark))
            }
            other => panic!("fetch of {offsets:?}: {other:?}"),
        }
    }
    let records = |broker| log.replica_read(broker, 0, 0..4).unwrap();
    assert_eq!(records(1), records(0));
}

/// Makes the replicas `brokers` of `dir` as a replicated `init` makes them one by one (before
/// its state and identity files).
fn replicas(dir: &Path, brokers: &[u32]) {
    for &broker in brokers {
        Log::create(&replica_dir(dir, broker), IDENTITY).unwrap();
    }
}

/// `init`'s read-only check of the replica count, over each directory an `init` can leave:
/// none, a plain log, a replicated one, and a replicated `init` killed after its first replica
/// or after both (before its identity file): the killed one is finished by an `init` of as
/// many replicas, and one that made both replicas is refused to a plain `init`.
#[test]
fn init_checks_the_replica_count_of_whatever_an_init_left() {
    // (what is in the directory, the replica counts `init` may ask for, and the count it may
    // not ask for with the count it finds instead).
    type Row = (&'static str, fn(&Path), &'static [u32], Option<(u32, u32)>);
    let rows: [Row; 5] = [
        ("nothing", |_| {}, &[1, 2], None),
        ("a plain log", |dir| Log::create(dir, IDENTITY).unwrap(), &[1], Some((2, 1))),
        ("a replicated log", |dir| ReplicatedLog::create(dir, IDENTITY, 2).unwrap(), &[2], Some((1, 2))),
        ("a replicated init killed after replica 0", |dir| replicas(dir, &[0]), &[2], None),
        ("a replicated init killed after both replicas", |dir| replicas(dir, &[0, 1]), &[2], Some((1, 2))),
    ];
    for (case, make, accepted, refused) in rows {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join("log");
        make(&dir);
        for &count in accepted {
            assert!(ReplicatedLog::check_init(&dir, count).is_ok(), "{case}: init --replicas {count} refused");
        }
        if let Some((expected, found)) = refused {
            match ReplicatedLog::check_init(&dir, expected) {
                Err(LogError::ReplicaCount { path, found: at, expected: asked }) => {
                    assert_eq!((path, at, asked), (dir.clone(), found, expected), "{case}")
                }
                other => panic!("{case}: init --replicas {expected}: {other:?}"),
            }
        }
    }
}

/// `init`'s identity for a replicated `init` killed before its identity file (its last
/// write): the replicas' own, so that the rerun finishes the same log; refused when another
/// partition count is asked, or when a replica holds records (nothing can tell which log
/// they belong to).
#[test]
fn init_takes_the_identity_of_the_replicas_a_killed_init_made() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("log");
    replicas(&dir, &[0, 1]);
    assert_eq!(Log::identity_for_init(&dir, 1).unwrap(), IDENTITY);
    match Log::identity_for_init(&dir, 2) {
        Err(LogError::PartitionCount { found: 1, expected: 2, .. }) => {}
        other => panic!("two partitions asked of replicas of one: {other:?}"),
    }
    let (mut replica, _) = Log::open_writer(&replica_dir(&dir, 1), IDENTITY).unwrap();
    replica.append(0, &encode_delta(1)).unwrap();
    drop(replica);
    match Log::identity_for_init(&dir, 1) {
        Err(LogError::Unidentified { path }) => assert_eq!(path, dir),
        other => panic!("a replica holding records: {other:?}"),
    }
    let empty = temp.path().join("other");
    replicas(&empty, &[0]);
    ReplicatedLog::create(&empty, Log::identity_for_init(&empty, 1).unwrap(), 2).expect("the rerun finishes the log");
    assert_eq!(Log::read_identity(&empty).unwrap(), Some(IDENTITY));
}

/// Appends `deltas` to broker `broker`'s replica as a plain log would, behind the replication
/// steps' back (a replica altered from outside: no step makes a follower diverge).
fn append_to_replica(dir: &Path, broker: u32, deltas: &[i64]) {
    let (mut replica, _) = Log::open_writer(&replica_dir(dir, broker), IDENTITY).unwrap();
    for &delta in deltas {
        replica.append(0, &encode_delta(delta)).unwrap();
    }
}

/// A follower that is not a prefix of its leader is refused by a fetch, which copies nothing
/// and changes no state: longer than the leader, or its last record another than the
/// leader's at that offset (at the leader's end or behind it). A replica cannot diverge
/// through the steps; these are replicas altered from outside.
#[test]
fn a_fetch_refuses_a_follower_that_is_not_a_prefix_of_its_leader() {
    // (the leader's records, the follower's, why the follower is refused)
    let rows: [(&[i64], &[i64], &str); 3] = [
        (&[1], &[1, 2], "its log ends at 2, past the leader's end 1"),
        (&[1, 2], &[1, 9], "its record 1 differs from the leader's"),
        (&[1, 2, 3], &[1, 9], "its record 1 differs from the leader's"),
    ];
    for (leader, follower, why) in rows {
        let (_temp, dir, log) = real();
        append_to_replica(&dir, 0, leader);
        append_to_replica(&dir, 1, follower);
        let state = std::fs::read(dir.join("replication.state")).unwrap();
        match log.replicate(0) {
            Err(ReplicationError::Diverged { partition: 0, broker: 1, reason }) => assert_eq!(reason, why),
            other => panic!("{follower:?} following {leader:?}: {other:?}"),
        }
        assert_eq!(log.replica_view(1, 0).unwrap().end, follower.len() as u64, "{follower:?}: nothing copied");
        assert_eq!(std::fs::read(dir.join("replication.state")).unwrap(), state, "{follower:?}: the state");
    }
}

/// A clean election refuses to promote an ISR member whose log ends below the high watermark
/// (it lost committed records behind the steps' back): the state names no new leader.
#[test]
fn a_clean_election_refuses_an_in_sync_follower_below_the_high_watermark() {
    let (_temp, dir, log) = real();
    log.append_leader(0, Batch { payloads: &payloads(1), producer: None }).unwrap();
    log.replicate(0).unwrap();
    assert_eq!(replication(&log), (Some(0), 1, set(&[0, 1])));
    fault::lose_tail(&replica_dir(&dir, 1), 0, 0).unwrap();
    let state = std::fs::read(dir.join("replication.state")).unwrap();
    match log.fail_leader(0, false) {
        Err(ReplicationError::Diverged { partition: 0, broker: 1, reason }) => {
            assert_eq!(reason, "it is in the ISR, yet its log ends at 0, below the high watermark 1")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(dir.join("replication.state")).unwrap(), state);
}

#[test]
fn a_shrunk_isr_answers_not_enough_replicas_after_append_and_the_retry_finds_the_original() {
    let (_temp, _dir, log) = real();
    let data = payloads(5);
    let batch = Batch { payloads: &data, producer: Some((PRODUCER, 0)) };
    let pending = log.append_pending(0, batch, 2).unwrap();
    let shrunk = log.shrink_isr(0).unwrap();
    assert_eq!((shrunk.follower, shrunk.follower_end, shrunk.leader_end, shrunk.high_watermark), (1, 0, 1, 1));
    assert_eq!(log.acknowledge(&pending).unwrap(), Answer::NotEnoughReplicasAfterAppend { isr: set(&[0]) });
    match log.append_pending(0, batch, 2) {
        Err(ReplicationError::NotEnoughReplicas { isr, min_insync: 2, .. }) => assert_eq!(isr, set(&[0])),
        other => panic!("{other:?}"),
    }
    assert!(matches!(log.replicate(0).unwrap(), Replicate::Copied { rejoined: true, .. }));
    let retry = log.append_pending(0, batch, 2).unwrap();
    assert!(retry.append.appended.duplicate);
    assert_eq!(retry.append.appended.offsets, 0..1);
    assert_eq!(log.acknowledge(&retry).unwrap(), Answer::Acknowledged { high_watermark: 1, isr: set(&[0, 1]) });
    assert_eq!(log.replica_view(0, 0).unwrap().end, 1, "the retry appended nothing");
}

#[test]
fn a_batch_the_election_lost_is_answered_lost_and_a_kept_one_acknowledged() {
    let (_temp, _dir, log) = real();
    let (first, second) = (payloads(1), payloads(2));
    let kept = log.append_pending(0, Batch { payloads: &first, producer: None }, 1).unwrap();
    log.replicate(0).unwrap();
    let lost = log.append_pending(0, Batch { payloads: &second, producer: None }, 1).unwrap();
    let election = log.fail_leader(0, false).unwrap();
    assert_eq!((election.kind, election.promoted, election.leader_end), (ElectionKind::Clean, Some(1), 1));
    assert_eq!(log.acknowledge(&lost).unwrap(), Answer::Lost { leader: Some(1) });
    assert_eq!(log.acknowledge(&kept).unwrap(), Answer::Acknowledged { high_watermark: 1, isr: set(&[1]) });
    // The new leader, alone in the ISR, moves the high watermark with its appends.
    let third = payloads(3);
    let append = log.append_leader(0, Batch { payloads: &third, producer: None }).unwrap();
    assert_eq!((append.leader, append.appended.offsets, append.high_watermark), (1, 1..2, 2));
    assert!(matches!(log.replicate(0).unwrap(), Replicate::NoFollower));
}

#[test]
fn a_reader_sees_the_leader_below_the_high_watermark_across_an_election() {
    let (_temp, dir, log) = real();
    let mut reader = Log::open_reader(&dir, IDENTITY).unwrap();
    for delta in [1, 2, 3] {
        log.append_leader(0, Batch { payloads: &payloads(delta), producer: None }).unwrap();
    }
    assert_eq!(reader.end(0).unwrap(), 0, "nothing is committed yet");
    assert!(matches!(reader.read(0, 0), Err(LogError::OffsetOutOfRange { end: 0, .. })));
    log.replicate(0).unwrap();
    log.replicate(0).unwrap();
    assert_eq!(reader.end(0).unwrap(), 2);
    let records = reader.read_range(0, 0..2).unwrap();
    assert_eq!(records.iter().map(|r| r.payload.clone()).collect::<Vec<_>>(), vec![encode_delta(1), encode_delta(2)]);
    // The election truncates nothing below the high watermark; the reader follows it.
    log.fail_leader(0, false).unwrap();
    assert_eq!(replication(&log), (Some(1), 2, set(&[1])));
    assert_eq!(reader.view(0).unwrap().end, 2);
    log.append_leader(0, Batch { payloads: &payloads(9), producer: None }).unwrap();
    assert_eq!(reader.read(0, 2).unwrap().payload, encode_delta(9), "the new leader's record at offset 2");
    // No replica left to elect: the partition is unavailable to the same reader.
    let election = log.fail_leader(0, true).unwrap();
    assert_eq!((election.kind, election.promoted), (ElectionKind::NoLeader, None));
    let error = reader.end(0).unwrap_err();
    assert!(matches!(error, LogError::Unavailable { partition: 0, .. }) && error.is_refusal(), "{error}");
    let error = log.append_leader(0, Batch { payloads: &payloads(1), producer: None }).unwrap_err();
    assert!(error.is_refusal(), "{error}");
}

#[test]
fn a_promoted_replica_past_the_high_watermark_is_truncated_explicitly_and_on_record() {
    // The follower copied a record, and its step stopped before the state said so (a crash):
    // it holds a record above the high watermark.
    let disk = SimDisk::new(Path::new("/sim"));
    let storage = Storage::Simulated(disk.clone());
    let dir = Path::new("/sim/log");
    let log = replicated(&storage, dir);
    log.append_leader(0, Batch { payloads: &payloads(4), producer: None }).unwrap();
    disk.halt_at(Halt { op: SimOp::Rename, path: dir.join("replication.state"), after: false });
    assert!(log.replicate(0).is_err() && disk.halted());
    assert_eq!((log.replica_view(1, 0).unwrap().end, replication(&log).1), (1, 0));
    let election = log.fail_leader(0, false).unwrap();
    assert_eq!((election.kind, election.truncated.clone(), election.leader_end), (ElectionKind::Clean, 0..1, 0));
    let journal = log.journal().unwrap();
    assert!(journal.contains("truncated from offset 1 to the high watermark 0"), "{journal}");
    // The truncation is not damage: the replica opens as a writer with its record gone.
    let view = log.replica_view(1, 0).unwrap();
    assert_eq!((view.end, view.acked_end, view.damage), (0, 0, None));
    let (writer, repairs) = Log::open_writer_on(&storage, &replica_dir(dir, 1), IDENTITY, WriterMode::Checked).unwrap();
    assert!(repairs.is_empty());
    drop(writer);
}

/// A clean election of a replica that ends at the high watermark truncates nothing and writes
/// nothing to it: its files stay byte for byte (no acknowledgement record rewritten for a cut
/// of no records).
#[test]
fn a_clean_election_with_nothing_to_truncate_leaves_the_promoted_replica_as_it_is() {
    let (_temp, dir, log) = real();
    log.append_leader(0, Batch { payloads: &payloads(1), producer: None }).unwrap();
    log.replicate(0).unwrap();
    let before = common::snapshot(&replica_dir(&dir, 1));
    let election = log.fail_leader(0, false).unwrap();
    assert_eq!((election.kind, election.promoted, election.truncated.clone()), (ElectionKind::Clean, Some(1), 1..1));
    assert_eq!(common::snapshot(&replica_dir(&dir, 1)), before, "the promoted replica was written");
}

/// The replication journal records every ISR change and election, one line each, word for
/// word, before the step's change: here a follower leaving the ISR and rejoining it, a clean
/// election with nothing to truncate, an election that finds nobody, and (in a second log) an
/// unclean election that loses a committed record.
#[test]
fn the_journal_records_every_isr_change_and_election_word_for_word() {
    let (_temp, _dir, log) = real();
    log.append_leader(0, Batch { payloads: &payloads(1), producer: None }).unwrap();
    log.shrink_isr(0).unwrap();
    log.replicate(0).unwrap();
    log.fail_leader(0, false).unwrap();
    log.fail_leader(0, false).unwrap();
    let expected = [
        "partition 0: broker 1 left the ISR at offset 0, behind the leader, broker 0, at 1",
        "partition 0: broker 1 caught up with the leader, broker 0, at offset 1 and rejoined the ISR",
        "partition 0 leader epoch 1: broker 0 failed (log end 1, high watermark 1); broker 1 promoted by a clean \
         election",
        "partition 0 leader epoch 2: broker 1 failed (log end 1); no alive in-sync replica to promote: the \
         partition has no leader (unavailable)",
    ];
    assert_eq!(log.journal().unwrap(), expected.map(|line| format!("{line}\n")).concat());

    let (_temp, _dir, log) = real();
    log.append_leader(0, Batch { payloads: &payloads(1), producer: None }).unwrap();
    log.shrink_isr(0).unwrap();
    log.fail_leader(0, true).unwrap();
    let expected = [
        "partition 0: broker 1 left the ISR at offset 0, behind the leader, broker 0, at 1",
        "partition 0 leader epoch 1: broker 0 failed (log end 1, high watermark 1); broker 1, out of sync at log \
         end 0, promoted by an UNCLEAN election: committed records 0..1 are lost",
    ];
    assert_eq!(log.journal().unwrap(), expected.map(|line| format!("{line}\n")).concat());

    // A follower out of the ISR that copied the last record, its step stopped before the
    // state said it rejoined: promoted uncleanly, it loses nothing, and the line says so.
    let disk = SimDisk::new(Path::new("/sim"));
    let dir = Path::new("/sim/log");
    let log = replicated(&Storage::Simulated(disk.clone()), dir);
    log.append_leader(0, Batch { payloads: &payloads(1), producer: None }).unwrap();
    log.shrink_isr(0).unwrap();
    disk.halt_at(Halt { op: SimOp::Rename, path: dir.join("replication.state"), after: false });
    assert!(log.replicate(0).is_err() && disk.halted());
    assert_eq!((log.replica_view(1, 0).unwrap().end, replication(&log)), (1, (Some(0), 1, set(&[0]))));
    assert_eq!(log.fail_leader(0, true).unwrap().kind, ElectionKind::Unclean);
    let last = "partition 0 leader epoch 1: broker 0 failed (log end 1, high watermark 1); broker 1, out of sync at \
                log end 1, promoted by an UNCLEAN election\n";
    assert!(log.journal().unwrap().ends_with(last), "{}", log.journal().unwrap());
}

#[test]
fn each_replica_keeps_the_plain_logs_rules_and_the_whole_log_refuses_plain_writes() {
    let (_temp, dir, log) = real();
    log.append_leader(0, Batch { payloads: &payloads(1), producer: None }).unwrap();
    log.replicate(0).unwrap();
    log.append_leader(0, Batch { payloads: &payloads(2), producer: None }).unwrap();
    assert!(matches!(Log::open_writer(&dir, IDENTITY), Err(LogError::Replicated { .. })));
    assert!(matches!(Log::repair(&dir, IDENTITY, |_| {}), Err(LogError::Replicated { .. })));
    // The follower lost an acknowledged record: it is damaged, and the fetch refuses it.
    fault::lose_tail(&replica_dir(&dir, 1), 0, 0).unwrap();
    let error = log.replicate(0).unwrap_err();
    assert!(matches!(&error, ReplicationError::Log(LogError::Damaged { partition: 0, .. })) && error.is_refusal());
    // So does a clean election's promotion of it; the state is left as it was.
    let error = log.fail_leader(0, false).unwrap_err();
    assert!(error.is_refusal(), "{error}");
    assert_eq!(replication(&log), (Some(0), 1, set(&[0, 1])));
}

/// A log error met by a replication step is passed on as it is: the same one line, the same
/// source (an I/O error stays reachable through `source()`), the same refusal status. Here
/// the follower's partition file is a symbolic link to itself (`ELOOP`).
#[test]
fn a_log_error_in_a_step_is_passed_on_transparently() {
    let (_temp, dir, log) = real();
    log.append_leader(0, Batch { payloads: &payloads(1), producer: None }).unwrap();
    let looped = replica_dir(&dir, 1).join("partition-0.log");
    std::fs::remove_file(&looped).unwrap();
    std::os::unix::fs::symlink(&looped, &looped).unwrap();
    let error = log.replicate(0).unwrap_err();
    let ReplicationError::Log(inner @ LogError::Io { path, .. }) = &error else { panic!("{error}") };
    assert_eq!(path, &looped);
    assert_eq!(error.to_string(), inner.to_string());
    let source = std::error::Error::source(&error).and_then(|cause| cause.downcast_ref::<std::io::Error>());
    assert_eq!(source.map(|io| io.raw_os_error()), Some(Some(40)), "ELOOP is the source: {error}");
    assert!(!error.is_refusal() && error.appended().is_none(), "{error}");
}

#[test]
fn another_log_in_a_replica_is_refused() {
    let (_temp, dir, _log) = real();
    let other = LogIdentity { id: 0xbad, partitions: 1 };
    let replica = replica_dir(&dir, 1);
    std::fs::remove_dir_all(&replica).unwrap();
    Log::create(&replica, other).unwrap();
    let error = ReplicatedLog::open(&dir, IDENTITY).unwrap_err();
    assert!(matches!(error, LogError::IdentityMismatch { .. }) && error.is_refusal(), "{error}");
    assert!(Log::open_reader(&dir, IDENTITY).is_err());
}

/// The follower's replica of a log whose leader then fails. The follower holds record 0, the
/// high watermark; records 1 and 2 reach the leader, then the follower in two fetches whose state
/// updates were lost (written here as two plain appends to the follower's replica), so the
/// replica's last two acknowledgements end at 2 and 3. The promotion's truncation to 1 is
/// stopped between the write of its acknowledgement record and that record's sync, and the
/// power goes with `seed`. Returns the cut and the replica's acknowledged end once it reopens
/// as a plain log.
fn truncation_cut_by_power(seed: u64) -> (Cut, u64) {
    let disk = SimDisk::new(Path::new("/sim"));
    let storage = Storage::Simulated(disk.clone());
    let dir = Path::new("/sim/log");
    let log = replicated(&storage, dir);
    log.append_leader(0, Batch { payloads: &payloads(1), producer: None }).unwrap();
    log.replicate(0).unwrap();
    let replica = replica_dir(dir, 1);
    let data = [payloads(2), payloads(3)];
    for payloads in &data {
        log.append_leader(0, Batch { payloads, producer: None }).unwrap();
    }
    let (mut follower, _) = Log::open_writer_on(&storage, &replica, IDENTITY, WriterMode::Checked).unwrap();
    for payloads in &data {
        follower.append(0, &payloads[0]).unwrap();
    }
    drop(follower);
    assert_eq!((log.replica_view(1, 0).unwrap().acked_end, replication(&log).1), (3, 1));
    let ack_path = replica.join("partition-0.ack");
    disk.halt_at(Halt { op: SimOp::Write, path: ack_path.clone(), after: true });
    assert!(log.fail_leader(0, false).is_err());
    assert_eq!(disk.halted_op(), Some((SimOp::Write, ack_path)), "seed {seed}");
    drop(log);
    let cut = disk.power_cut(seed);
    // The replica as a plain log (the replicated log's open would redo the recorded truncation).
    let mut replica = Log::open_reader_on(&storage, &replica, IDENTITY).unwrap();
    (cut, replica.view(0).unwrap().acked_end)
}

#[test]
fn a_truncation_record_cut_by_the_power_leaves_the_replica_as_it_was_or_as_cut_never_older() {
    // The acknowledgement file keeps two slots, and a new record goes to the slot of the
    // older one: a record the power drops, tears or garbles leaves the newest intact one, the
    // replica's state before the election (end 3); a kept record is the truncation's (end 1).
    // Never the record before the newest (end 2, a state no step left).
    common::every_cut_leaves_one_of([1, 3], truncation_cut_by_power);
}

/// `ONCEREP1`, the replica count, the partition count and the generation, then per partition
/// (leader, or `u32::MAX` for none; leader epoch; high watermark; ISR bits; alive bits), then
/// the crc32c of every byte before it: `src/log/replication/state.rs`'s documented layout,
/// encoded independently of it.
fn encode_state(replicas: u32, generation: u64, partitions: &[(u32, u32, u64, u32, u32)]) -> Vec<u8> {
    let mut bytes = b"ONCEREP1".to_vec();
    bytes.extend_from_slice(&replicas.to_le_bytes());
    bytes.extend_from_slice(&(partitions.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&generation.to_le_bytes());
    for &(leader, epoch, high_watermark, isr, alive) in partitions {
        bytes.extend_from_slice(&leader.to_le_bytes());
        bytes.extend_from_slice(&epoch.to_le_bytes());
        bytes.extend_from_slice(&high_watermark.to_le_bytes());
        bytes.extend_from_slice(&isr.to_le_bytes());
        bytes.extend_from_slice(&alive.to_le_bytes());
    }
    bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
    bytes
}

/// A replicated log of two partitions made to differ in every field (partition 0 after a
/// clean election, partition 1 with a replicated record): its state file is the documented
/// layout, and `state()` reads back exactly what it holds.
fn two_partitions_that_differ(dir: &Path) -> (ReplicatedLog, Vec<u8>) {
    let identity = LogIdentity { id: 0x5eed, partitions: 2 };
    ReplicatedLog::create_on(&Storage::Real, dir, identity, 2).unwrap();
    let log = ReplicatedLog::open(dir, identity).unwrap().expect("a replicated log");
    log.append_leader(1, Batch { payloads: &payloads(1), producer: None }).unwrap();
    log.replicate(1).unwrap();
    log.fail_leader(0, false).unwrap();
    let state = log.state().unwrap();
    // Partition 0: broker 1 leads in epoch 1, alone; partition 1: broker 0, high watermark 1.
    let parts = [(1, 1, 0, 0b10, 0b10), (0, 0, 1, 0b11, 0b11)];
    let written = std::fs::read(dir.join("replication.state")).unwrap();
    assert_eq!(written, encode_state(2, state.generation, &parts), "the documented layout, {state:?}");
    let read: Vec<_> = state.partitions.iter().map(|p| (p.leader, p.leader_epoch, p.high_watermark)).collect();
    assert_eq!(read, vec![(Some(1), 1, 0), (Some(0), 0, 1)]);
    let sets: Vec<_> = state.partitions.iter().map(|p| (p.isr.clone(), p.alive.clone())).collect();
    assert_eq!(sets, vec![(set(&[1]), set(&[1])), (set(&[0, 1]), set(&[0, 1]))]);
    (log, written)
}

/// Every damage to the replication state file is refused by every open, naming the file
/// and why, and leaves it as it is; a state that is well formed but breaks an invariant of
/// the replication (a broker that does not exist, an ISR member that failed, a leader out of
/// the ISR) is damage too. A partition without a leader is a valid state. A missing file is
/// refused as missing, an unreadable one as an I/O error.
#[test]
fn the_replication_state_file_is_the_documented_layout_or_refused_untouched() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("log");
    let (_log, written) = two_partitions_that_differ(&dir);
    let identity = LogIdentity { id: 0x5eed, partitions: 2 };
    let generation = u64::from_le_bytes(written[16..24].try_into().unwrap());
    let state = |p0: (u32, u32, u64, u32, u32)| encode_state(2, generation, &[p0, (0, 0, 1, 0b11, 0b11)]);
    let cut = |len: usize| written[..len].to_vec();
    // (case, the file's content, what the refusal says; "" for a valid state)
    let mut cases: Vec<(String, Vec<u8>, &str)> = vec![
        ("empty".into(), cut(0), "it does not start with ONCEREP1"),
        ("the magic alone".into(), cut(8), "it does not start with ONCEREP1"),
        ("the head alone".into(), cut(24), "it does not start with ONCEREP1"),
        ("the head and 3 bytes".into(), cut(27), "it does not start with ONCEREP1"),
        ("the checksum's last byte cut".into(), cut(written.len() - 1), "75 bytes cannot hold 2 partitions"),
        ("a byte appended".into(), [written.clone(), vec![0]].concat(), "77 bytes cannot hold 2 partitions"),
        ("another file's magic".into(), [b"ONCEACK1".to_vec(), written[8..].to_vec()].concat(), "ONCEREP1"),
        ("one replica".into(), encode_state(1, generation, &[(0, 0, 0, 1, 1); 2]), "1 replicas (supported: 2..=2)"),
        ("three replicas".into(), encode_state(3, generation, &[(0, 0, 0, 1, 1); 2]), "3 replicas (supported"),
        ("a broker 2 alive".into(), state((1, 1, 0, 0b10, 0b110)), "partition 0: a broker outside 0..2"),
        ("leader 2".into(), state((2, 1, 0, 0b11, 0b11)), "partition 0: a broker outside 0..2"),
        ("an ISR member failed".into(), state((1, 1, 0, 0b11, 0b10)), "partition 0: an ISR member is not alive"),
        ("a leader out of the ISR".into(), state((0, 1, 0, 0b10, 0b11)), "partition 0: the leader 0 is not in the ISR"),
        ("no leader".into(), state((u32::MAX, 1, 0, 0b10, 0b10)), ""),
    ];
    for byte in 0..written.len() {
        let mut flipped = written.clone();
        flipped[byte] ^= 0x01;
        // The partition count's bytes make the length wrong; the magic's, another file.
        let says = match byte {
            0..=7 => "it does not start with ONCEREP1",
            12..=15 => "cannot hold",
            _ => "checksum mismatch",
        };
        cases.push((format!("byte {byte} flipped"), flipped, says));
    }
    let path = dir.join("replication.state");
    for (case, bytes, says) in cases {
        std::fs::write(&path, &bytes).unwrap();
        match (ReplicatedLog::open(&dir, identity), says) {
            (Ok(Some(log)), "") => assert_eq!(log.state().unwrap().partitions[0].leader, None, "{case}"),
            (Err(LogError::Corrupt { path: p, reason, .. }), _) if !says.is_empty() => {
                assert_eq!(p, path, "{case}");
                assert!(reason.contains(says), "{case}: '{reason}' does not say '{says}'");
            }
            (other, _) => panic!("{case}: expected '{says}', got {:?}", other.map(|log| log.map(|log| log.state()))),
        }
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{case}: the file was changed");
    }
    // Well formed, with no partition: the log's identity names two.
    std::fs::write(&path, encode_state(2, generation, &[])).unwrap();
    let error = ReplicatedLog::open(&dir, identity).expect_err("a state of no partition");
    assert!(matches!(error, LogError::PartitionCount { found: 0, expected: 2, .. }), "{error}");
    // Missing (the replicas are there) is refused as missing, naming it; unreadable (a
    // symbolic link to itself) is an I/O error naming it, not a missing file.
    std::fs::remove_file(&path).unwrap();
    let error = ReplicatedLog::open(&dir, identity).expect_err("a missing state file");
    assert!(matches!(&error, LogError::Missing { path: p, .. } if *p == path), "{error}");
    assert!(!path.exists(), "nothing makes it again");
    std::os::unix::fs::symlink(&path, &path).unwrap();
    let error = ReplicatedLog::open(&dir, identity).expect_err("an unreadable state file");
    assert!(matches!(&error, LogError::Io { path: p, .. } if *p == path), "{error}");
}

/// A step's outcome (the replication lock's path if it gave up) and the milliseconds it took,
/// or `None` if it did not return within `patience`.
fn step_within(log: ReplicatedLog, patience: Duration) -> Option<(Result<(), LogError>, u128)> {
    common::within(patience, move || {
        log.replicate(0).map(|_| ()).map_err(|error| match error {
            ReplicationError::Log(error) => error,
            other => panic!("{other}"),
        })
    })
}

/// Every step waits for another process's step to release the replication lock, at most
/// 10 s (`LOCK_WAIT_MS_MAX`): past that it gives up with `Locked`, naming the lock; a lock
/// released within the wait is taken. The lock is held here as another process holds it.
#[test]
fn a_step_waits_for_the_replication_lock_ten_seconds_at_most() {
    let (_temp, dir, _log) = real();
    let path = dir.join("replication.lock");
    let held = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).unwrap();
    held.lock().unwrap();
    let open = || ReplicatedLog::open(&dir, IDENTITY).unwrap().expect("a replicated log");
    let patience = Duration::from_secs(30);
    let (outcome, waited_ms) = step_within(open(), patience).expect("a step waiting for a held lock returns");
    assert!(matches!(&outcome, Err(LogError::Locked { path: p }) if *p == path), "{outcome:?}");
    assert!((10_000..patience.as_millis()).contains(&waited_ms), "gave up after {waited_ms} ms");
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        drop(held);
    });
    let (outcome, _) = step_within(open(), patience).expect("the waiting step returns");
    assert!(outcome.is_ok(), "the lock was released within the wait: {outcome:?}");
    releaser.join().unwrap();
}
