//! Read-process-write transactions (spec.md §3.3 and §10 "Transactions"): the
//! strategies txn-fenced and txn-unfenced produce one output record per input record to the
//! output log in a transaction of the transactional id (group, partition) and commit it with
//! the input's next offset; a downstream reader reads the output `read_committed` or
//! `read_uncommitted`.
//!
//! - zombies: an earlier instance of the same transactional id (a second incarnation, or a
//!   rebalance's zombie) is fenced under txn-fenced (its produce or commit refused, its open
//!   transaction aborted by the newer instance's take) and duplicates output under txn-unfenced;
//!   every scenario on SQLite and on PostgreSQL;
//! - a `read_uncommitted` reader reads a record whose transaction is later aborted, a
//!   `read_committed` one never does (the library reader, one record per call);
//! - crash points at every `produce-output` and `commit-txn` `before|inside|after`, then a
//!   restart: the read_committed output holds every input record once, on both backends; the
//!   txn-unfenced trap leaves a crashed transaction open, and read_committed readers stuck;
//! - the output log is refused when missing or another data directory's.

mod common;

use common::{describe, expect_code, pg, stdout, DataDir, CRASHED, FAILED, REFUSED};
use consumer::log::{Log, Storage};
use consumer::strategy::Isolation;
use consumer::txn::{Caught, OutputLog, OutputReader, Read, TxnEnd};

/// The store backends every scenario runs on.
#[derive(Clone, Copy, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

const BACKENDS: [Backend; 2] = [Backend::Sqlite, Backend::Postgres];

/// The delta of every input record.
const DELTA: i64 = 5;

/// An initialised single-partition data directory holding `records` input records of `DELTA`;
/// `None` when the backend cannot run here (PostgreSQL without a server binary, `CI` unset).
fn data_dir(backend: Backend, case: &str, records: u64) -> Option<DataDir> {
    let dir = match backend {
        Backend::Sqlite => DataDir::new(case, 1),
        Backend::Postgres => DataDir::postgres(case, 1, &pg::database()?),
    };
    dir.append(case, 0, DELTA, records);
    Some(dir)
}

/// What a downstream reader of output partition 0 sees now (`consumer read-output --json`):
/// the input offsets of the records it delivers, the LSO and the end.
fn sees(dir: &DataDir, case: &str, isolation: &str) -> (Vec<u64>, u64, u64) {
    let output = dir.run("read-output", &["--partition", "0", "--isolation", isolation, "--json"]);
    expect_code(case, &format!("read-output --isolation {isolation}"), &output, 0);
    let document: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("case '{case}': read-output --json is not JSON ({e})\n{}", describe(&output)));
    let records = document["records"].as_array().unwrap_or_else(|| panic!("case '{case}': no records: {document}"));
    let inputs = records.iter().map(|record| record["input_offset"].as_u64().expect("an input offset")).collect();
    (inputs, document["lso"].as_u64().expect("an LSO"), document["end"].as_u64().expect("an end"))
}

/// One step of a scenario.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Starts worker `slot` as owner `owner` (`consumer worker`): its start claims a new epoch
    /// for the partitions the store assigns to it and takes them.
    Start(usize, &'static str),
    /// Sends a command to worker `slot` and expects its reply.
    Send(usize, &'static str, &'static str),
    /// SIGKILLs worker `slot`.
    Kill(usize),
    /// A rebalance: `consumer claim` hands partition 0 to `owner` at the next epoch.
    Claim(&'static str),
    /// What downstream readers see now: the input offsets a read_committed reader delivers,
    /// those a read_uncommitted reader delivers, and the LSO.
    Sees(&'static [u64], &'static [u64], u64),
    /// Runs `consume --group g --strategy S` with further flags to its exit status; when it
    /// exits 0, what its start's take ended (the one `txn:` line it prints: the text it
    /// contains), or nothing (no such line).
    Consume(&'static [&'static str], i32, Option<&'static str>),
    /// The group's stored next offset now.
    Next(u64),
}

/// A scenario of group g on partition 0: the acts in order, then the group's (total, next
/// offset).
struct Scenario {
    name: &'static str,
    strategy: &'static str,
    records: u64,
    acts: &'static [Act],
    store: (i64, u64),
}

/// Runs one scenario on one backend; `None` when the backend cannot run here.
fn run(backend: Backend, scenario: &Scenario) -> Option<()> {
    let case = format!("{} on {backend:?}", scenario.name);
    let case = case.as_str();
    let dir = data_dir(backend, case, scenario.records)?;
    let mut workers: Vec<Option<common::Worker>> = Vec::new();
    for (step, act) in scenario.acts.iter().enumerate() {
        let at = format!("{case}, act {step} {act:?}");
        match *act {
            Act::Start(slot, owner) => {
                workers.resize_with(workers.len().max(slot + 1), || None);
                workers[slot] = Some(dir.worker(&at, "g", owner, scenario.strategy));
            }
            Act::Send(slot, command, reply) => {
                let worker = workers[slot].as_mut().unwrap_or_else(|| panic!("{at}: no worker {slot}"));
                assert_eq!(worker.send(command), reply, "{at}");
            }
            Act::Kill(slot) => {
                workers[slot].take().unwrap_or_else(|| panic!("{at}: no worker {slot}")).kill();
            }
            Act::Claim(owner) => dir.claim(&at, "g", 0, owner),
            Act::Consume(flags, code, take) => {
                let args = [&["--group", "g", "--strategy", scenario.strategy][..], flags].concat();
                let output = dir.consume(&at, &args, code);
                let printed = stdout(&output);
                let ended: Vec<&str> = printed.lines().filter(|line| line.starts_with("txn: ")).collect();
                let matches = match take {
                    Some(what) => ended.len() == 1 && ended[0].contains(what),
                    None => ended.is_empty(),
                };
                assert!(matches || code != 0, "{at}: the take should have ended {take:?}\n{}", describe(&output));
            }
            Act::Next(next) => assert_eq!(dir.state(&at, "g").1, next, "{at}: the stored next offset"),
            Act::Sees(committed, uncommitted, lso) => {
                let (read_committed, lso_seen, _) = sees(&dir, &at, "read-committed");
                let (read_uncommitted, ..) = sees(&dir, &at, "read-uncommitted");
                assert_eq!(
                    (read_committed.as_slice(), read_uncommitted.as_slice(), lso_seen),
                    (committed, uncommitted, lso),
                    "{at}: (read_committed, read_uncommitted, LSO)"
                );
            }
        }
    }
    assert_eq!(dir.state(case, "g"), scenario.store, "case '{case}': (total, next offset)");
    Some(())
}

use Act::{Claim, Consume, Kill, Next, Sees, Send, Start};

/// The earlier incarnation A of o0 produces record 0's output, then o0 is started again (B).
/// B's take aborts A's open transaction; A's commit is fenced; the output holds record 0 once.
const INCARNATION_FENCED: Scenario = Scenario {
    name: "a second incarnation fences the first (txn-fenced)",
    strategy: "txn-fenced",
    records: 2,
    acts: &[
        Start(0, "o0"),
        Send(0, "fetch 0 0", "ok fetched 1"),
        Send(0, "produce-output 0 0", "ok produced 0 1"),
        // Open: read_committed stops at its record, the LSO.
        Sees(&[], &[0], 0),
        Start(1, "o0"),
        // B's take aborted A's transaction (the marker at offset 1): skipped, no longer in the way.
        Sees(&[], &[0], 2),
        Send(1, "fetch 0 0", "ok fetched 1"),
        Send(1, "produce-output 0 0", "ok produced 2 3"),
        Send(0, "commit-txn 0 0", "ok fenced 2 3"),
        Send(1, "commit-txn 0 0", "ok applied 1 skipped 0"),
        Send(1, "fetch 0 1", "ok fetched 1"),
        Send(1, "produce-output 0 1", "ok produced 4 5"),
        Send(1, "commit-txn 0 1", "ok applied 1 skipped 0"),
        Sees(&[0, 1], &[0, 0, 1], 6),
    ],
    store: (10, 2),
};

/// The same without producer identity: nothing is aborted, the earlier incarnation's commit
/// lands, and read_committed sees input record 0 twice.
const INCARNATION_UNFENCED: Scenario = Scenario {
    name: "a second incarnation duplicates output (txn-unfenced)",
    strategy: "txn-unfenced",
    records: 2,
    acts: &[
        Start(0, "o0"),
        Send(0, "fetch 0 0", "ok fetched 1"),
        Send(0, "produce-output 0 0", "ok produced 0 1"),
        Start(1, "o0"),
        // Nothing aborted: A's transaction is still open, and in the way.
        Sees(&[], &[0], 0),
        Send(1, "fetch 0 0", "ok fetched 1"),
        Send(1, "produce-output 0 0", "ok produced 1 2"),
        Send(1, "commit-txn 0 0", "ok applied 1 skipped 0"),
        Sees(&[], &[0, 0], 0),
        Send(0, "commit-txn 0 0", "ok applied 1 skipped 0"),
        Sees(&[0, 0], &[0, 0], 4),
        Send(1, "fetch 0 1", "ok fetched 1"),
        Send(1, "produce-output 0 1", "ok produced 4 5"),
        Send(1, "commit-txn 0 1", "ok applied 1 skipped 0"),
        Sees(&[0, 0, 1], &[0, 0, 1], 6),
    ],
    store: (15, 2),
};

/// A zombie's produce after the newer incarnation's take is refused, and nothing is appended.
const ZOMBIE_PRODUCE_FENCED: Scenario = Scenario {
    name: "a zombie's produce is refused (txn-fenced)",
    strategy: "txn-fenced",
    records: 1,
    acts: &[
        Start(0, "o0"),
        Send(0, "fetch 0 0", "ok fetched 1"),
        Start(1, "o0"),
        Send(0, "produce-output 0 0", "ok fenced 2 3"),
        Sees(&[], &[], 0),
        Send(1, "fetch 0 0", "ok fetched 1"),
        Send(1, "produce-output 0 0", "ok produced 0 1"),
        Send(1, "commit-txn 0 0", "ok applied 1 skipped 0"),
        Sees(&[0], &[0], 2),
    ],
    store: (5, 1),
};

/// A rebalance's zombie: o0 produced, the partition moves to o1 (`claim`, then `assign`, whose
/// take aborts o0's transaction), and o0's commit is fenced.
const REBALANCE_FENCED: Scenario = Scenario {
    name: "a rebalance's zombie is fenced (txn-fenced)",
    strategy: "txn-fenced",
    records: 1,
    acts: &[
        Start(0, "o0"),
        Start(1, "o1"),
        Send(0, "fetch 0 0", "ok fetched 1"),
        Send(0, "produce-output 0 0", "ok produced 0 1"),
        Claim("o1"),
        // The claim alone ends nothing: the new owner has not taken the partition yet.
        Sees(&[], &[0], 0),
        Send(1, "assign 0", "ok assigned 3"),
        Sees(&[], &[0], 2),
        Send(1, "fetch 0 0", "ok fetched 1"),
        Send(1, "produce-output 0 0", "ok produced 2 3"),
        Send(0, "commit-txn 0 0", "ok fenced 2 3"),
        Send(1, "commit-txn 0 0", "ok applied 1 skipped 0"),
        Sees(&[0], &[0, 0], 4),
    ],
    store: (5, 1),
};

/// The same rebalance without producer identity: both transactions commit.
const REBALANCE_UNFENCED: Scenario = Scenario {
    name: "a rebalance's zombie duplicates output (txn-unfenced)",
    strategy: "txn-unfenced",
    records: 1,
    acts: &[
        Start(0, "o0"),
        Start(1, "o1"),
        Send(0, "fetch 0 0", "ok fetched 1"),
        Send(0, "produce-output 0 0", "ok produced 0 1"),
        Claim("o1"),
        Send(1, "assign 0", "ok assigned 3"),
        Send(1, "fetch 0 0", "ok fetched 1"),
        Send(1, "produce-output 0 0", "ok produced 1 2"),
        Send(1, "commit-txn 0 0", "ok applied 1 skipped 0"),
        Send(0, "commit-txn 0 0", "ok applied 1 skipped 0"),
        Sees(&[0, 0], &[0, 0], 4),
    ],
    store: (10, 1),
};

/// An instance SIGKILLed with its transaction open: the next start's take aborts it.
const KILLED_FENCED: Scenario = Scenario {
    name: "a killed instance's open transaction is aborted by the next start (txn-fenced)",
    strategy: "txn-fenced",
    records: 1,
    acts: &[
        Start(0, "o0"),
        Send(0, "fetch 0 0", "ok fetched 1"),
        Send(0, "produce-output 0 0", "ok produced 0 1"),
        Kill(0),
        Sees(&[], &[0], 0),
        Start(1, "o0"),
        Sees(&[], &[0], 2),
        Send(1, "fetch 0 0", "ok fetched 1"),
        Send(1, "produce-output 0 0", "ok produced 2 3"),
        Send(1, "commit-txn 0 0", "ok applied 1 skipped 0"),
        Sees(&[0], &[0, 0], 4),
    ],
    store: (5, 1),
};

const ZOMBIES: [&Scenario; 6] = [
    &INCARNATION_FENCED,
    &INCARNATION_UNFENCED,
    &ZOMBIE_PRODUCE_FENCED,
    &REBALANCE_FENCED,
    &REBALANCE_UNFENCED,
    &KILLED_FENCED,
];

/// (a), (d): zombies of a transactional id, fenced or duplicating, on both backends.
#[test]
fn zombie_instances_are_fenced_under_txn_fenced_and_duplicate_output_under_txn_unfenced() {
    for backend in BACKENDS {
        for scenario in ZOMBIES {
            // `None`: no PostgreSQL here; `pg::server` printed the skip.
            if run(backend, scenario).is_none() {
                return;
            }
        }
    }
}

/// (b): the library reader, one record per call. A read_uncommitted reader reads record 0's
/// output while its transaction is open; the newer incarnation's take aborts it; a
/// read_committed reader never delivers it and, once the newer transaction commits, delivers
/// that one record and stops at the end.
#[test]
fn read_uncommitted_sees_a_record_that_is_later_aborted_and_read_committed_never_does() {
    let case = "read isolation";
    let dir = data_dir(Backend::Sqlite, case, 1).expect("SQLite runs everywhere");
    let identity = Log::read_identity(&dir.log_dir()).expect("read the identity").expect("an initialised log");
    let output = OutputLog::at(&Storage::Real, &dir.log_dir(), identity);
    let open = |isolation| OutputReader::open(&output, 0, isolation).expect("open a reader");
    let (mut uncommitted, mut committed) = (open(Isolation::ReadUncommitted), open(Isolation::ReadCommitted));
    let mut zombie = dir.worker(case, "g", "o0", "txn-fenced");
    zombie.expect("fetch 0 0", "ok fetched 1");
    zombie.expect("produce-output 0 0", "ok produced 0 1");
    let Read::Record(read) = uncommitted.read().expect("read") else { panic!("read_uncommitted delivers the record") };
    assert_eq!((read.offset, read.input_offset, read.delta, read.ended), (0, 0, DELTA, None), "open when read");
    let caught = Read::Caught(Caught { position: 0, lso: 0, end: 1 });
    assert_eq!(committed.read().expect("read"), caught, "read_committed stops at the LSO");
    let mut newer = dir.worker(case, "g", "o0", "txn-fenced");
    // The take appended the abort marker at 1: the aborted record is skipped, not delivered.
    let caught = Read::Caught(Caught { position: 2, lso: 2, end: 2 });
    assert_eq!(committed.read().expect("read"), caught, "read_committed skips the aborted record");
    let fresh = open(Isolation::ReadUncommitted).read().expect("read");
    assert!(matches!(fresh, Read::Record(ref r) if r.ended == Some(TxnEnd::Abort)), "it was aborted: {fresh:?}");
    newer.expect("fetch 0 0", "ok fetched 1");
    newer.expect("produce-output 0 0", "ok produced 2 3");
    zombie.expect("commit-txn 0 0", "ok fenced 2 3");
    newer.expect("commit-txn 0 0", "ok applied 1 skipped 0");
    let Read::Record(read) = committed.read().expect("read") else { panic!("read_committed delivers the commit") };
    assert_eq!((read.offset, read.txn.epoch, read.ended), (2, 3, Some(TxnEnd::Commit)));
    let caught = Read::Caught(Caught { position: 4, lso: 4, end: 4 });
    assert_eq!(committed.read().expect("read"), caught, "then the end");
}

/// What the restart's take says it ended.
const ABORTED: Option<&str> = Some("aborted the open transaction of epoch 2");
const MARKED: Option<&str> = Some("wrote the missing commit marker of the committed transaction of epoch 2");

/// A crash at `point` (record 1 of 3) under `strategy`, what the output and the store hold
/// then, a restart (`consume`) whose take ends `take`, and what the output holds after it; the
/// total is then every record's once (15) and the whole input committed.
macro_rules! crash {
    ($strategy:literal, $point:literal, $crashed:expr, $next:literal, $take:expr, $restarted:expr) => {
        Scenario {
            name: concat!("a crash at ", $point, " and a restart (", $strategy, ")"),
            strategy: $strategy,
            records: 3,
            acts: &[
                Consume(&["--crash-at", $point], CRASHED, None),
                $crashed,
                Next($next),
                Consume(&[], 0, $take),
                $restarted,
            ],
            store: (3 * DELTA, 3),
        }
    };
}

const CRASHES: [Scenario; 8] = [
    crash!("txn-fenced", "produce-output:before@1", Sees(&[0], &[0], 2), 1, None, Sees(&[0, 1, 2], &[0, 1, 2], 6)),
    // An open transaction (records 0..1 committed, record 1's output appended): the restart's
    // take aborts it, and record 1 is produced again.
    crash!(
        "txn-fenced",
        "produce-output:inside@1",
        Sees(&[0], &[0, 1], 2),
        1,
        ABORTED,
        Sees(&[0, 1, 2], &[0, 1, 1, 2], 8)
    ),
    crash!(
        "txn-fenced",
        "produce-output:after@1",
        Sees(&[0], &[0, 1], 2),
        1,
        ABORTED,
        Sees(&[0, 1, 2], &[0, 1, 1, 2], 8)
    ),
    crash!("txn-fenced", "commit-txn:before@1", Sees(&[0], &[0, 1], 2), 1, ABORTED, Sees(&[0, 1, 2], &[0, 1, 1, 2], 8)),
    // The commit point passed, the marker did not: the store is at 2, read_committed readers
    // stop at record 1's output until the restart's take writes its commit marker.
    crash!("txn-fenced", "commit-txn:inside@1", Sees(&[0], &[0, 1], 2), 2, MARKED, Sees(&[0, 1, 2], &[0, 1, 2], 6)),
    crash!("txn-fenced", "commit-txn:after@1", Sees(&[0, 1], &[0, 1], 4), 2, None, Sees(&[0, 1, 2], &[0, 1, 2], 6)),
    // The trap: no take aborts the crashed transaction, which stays open for ever (there is no
    // transaction timeout): read_committed readers never get past it.
    crash!("txn-unfenced", "produce-output:after@1", Sees(&[0], &[0, 1], 2), 1, None, Sees(&[0], &[0, 1, 1, 2], 2)),
    // A committed transaction's missing marker is written under txn-unfenced too.
    crash!("txn-unfenced", "commit-txn:inside@1", Sees(&[0], &[0, 1], 2), 2, MARKED, Sees(&[0, 1, 2], &[0, 1, 2], 6)),
];

/// (c): every crash point of the transactional steps, then a restart, on both backends.
#[test]
fn crashes_at_every_transactional_point_leave_the_read_committed_output_exactly_once() {
    for backend in BACKENDS {
        for scenario in &CRASHES {
            // `None`: no PostgreSQL here; `pg::server` printed the skip.
            if run(backend, scenario).is_none() {
                return;
            }
        }
    }
}

/// The output log is checked as the input log is: a missing one, or another data directory's,
/// is refused (exit 4) by a transactional owner and by `read-output`; bad input exits 2.
#[test]
fn a_missing_or_foreign_output_log_is_refused() {
    let case = "missing output";
    let dir = data_dir(Backend::Sqlite, case, 1).expect("SQLite runs everywhere");
    let other = data_dir(Backend::Sqlite, "another directory", 1).expect("SQLite runs everywhere");
    let output_dir = dir.path.join("output");
    let consume = ["--group", "g", "--strategy", "txn-fenced"];
    let read = ["--partition", "0"];
    std::fs::rename(&output_dir, dir.path.join("output.away")).expect("move the output log away");
    dir.consume(case, &consume, REFUSED);
    expect_code(case, "read-output", &dir.run("read-output", &read), REFUSED);
    let case = "foreign output";
    std::fs::rename(other.path.join("output"), &output_dir).expect("move another output log in");
    let refused = dir.consume(case, &consume, REFUSED);
    assert!(common::stderr(&refused).contains("output"), "case '{case}': the refusal names the output log");
    expect_code(case, "read-output", &dir.run("read-output", &read), REFUSED);
    // A non-transactional strategy never looks at the output log.
    dir.consume(case, &["--group", "h", "--strategy", "atomic-fenced"], 0);
    let bad = dir.run("read-output", &["--isolation", "read-dirty"]);
    expect_code("bad isolation", "read-output --isolation read-dirty", &bad, FAILED);
    assert_eq!(common::stderr(&bad).lines().count(), 1, "one line: {}", describe(&bad));
}

/// An output append a crash interrupted (bytes past the output partition's acknowledged
/// length) is cut by the next transactional section, reported on one line naming the file, the
/// records kept and the bytes dropped, and the read_committed output stays exactly once.
#[test]
fn an_interrupted_output_append_is_cut_and_reported_by_the_next_owner() {
    let case = "interrupted output append";
    let dir = data_dir(Backend::Sqlite, case, 2).expect("SQLite runs everywhere");
    let consume = ["--group", "g", "--strategy", "txn-fenced"];
    dir.consume(case, &consume, 0);
    let (inputs, _, kept) = sees(&dir, case, "read-committed");
    assert_eq!(inputs, [0, 1], "case '{case}': the first run's output");
    let file = dir.path.join("output").join("partition-0.log");
    let tail = b"partial";
    let mut bytes = std::fs::read(&file).expect("read the output partition");
    bytes.extend_from_slice(tail);
    std::fs::write(&file, &bytes).expect("leave an unacknowledged tail");
    dir.append(case, 0, DELTA, 1);
    let output = dir.consume(case, &consume, 0);
    let expected = format!(
        "repaired: {} had an unacknowledged tail (an append a crash interrupted); kept {kept} record(s), \
         dropped {} byte(s)",
        file.display(),
        tail.len()
    );
    let printed = common::stderr(&output);
    let reported: Vec<&str> = printed.lines().filter(|line| line.starts_with("repaired: ")).collect();
    assert_eq!(reported, [expected], "case '{case}': the cut is reported once\n{}", describe(&output));
    assert_eq!(sees(&dir, case, "read-committed").0, [0, 1, 2], "case '{case}': the output after the cut");
    assert_eq!(dir.state(case, "g"), (3 * DELTA, 3), "case '{case}': (total, next offset)");
}
