//! The seeds' edge cases (spec.md §3.4 and §10 "External effects and dual writes"):
//! each trap the model refutes, reproduced with real child processes, next to the defence the
//! model verifies. Every scenario is data, run by one helper (`run`) on SQLite and on
//! PostgreSQL.
//!
//! - external effects: atomic-plus-email loses the email of a crash between the store's commit
//!   and the email; email-no-key emails twice after a crash between the email and the commit,
//!   email-idempotency-key once (the provider drops the repeated key); every crash point of
//!   `apply-atomic` and `send-email`, and a second incarnation's email;
//! - sets: a zombie's older blind set overwrites a newer value; set-if-newer keeps the newest;
//! - dedup scope: dedup-offset-only skips partition 1's record as a duplicate of partition 0's,
//!   dedup-atomic applies it;
//! - dual writes: dual-write's index misses a fact after a crash between `apply-atomic` and
//!   `write-index`, for good; outbox's relay makes the stores agree after a crash at every
//!   point of `apply-atomic` and between the relay's copy and its delete.

mod common;

use common::{describe, expect_code, pg, stderr, DataDir, CRASHED, FAILED};
use consumer::external::{EmailProvider, EmailRequest};

/// The store backends every scenario runs on.
#[derive(Clone, Copy, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

const BACKENDS: [Backend; 2] = [Backend::Sqlite, Backend::Postgres];

/// The delta of every record.
const DELTA: i64 = 5;

/// One step of a scenario on group g.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// `consumer append`: this many records of `DELTA` to the partition.
    Append(u32, u64),
    /// Starts worker `slot` as owner `owner` of the scenario's strategy (its start claims a new
    /// epoch for the partitions the store assigns to it).
    Start(usize, &'static str),
    /// Sends a command to worker `slot` and expects its reply.
    Send(usize, &'static str, &'static str),
    /// SIGKILLs worker `slot` (the model's crash of that incarnation).
    Kill(usize),
    /// A rebalance: `consumer claim` hands the partition to the owner at the next epoch.
    Claim(u32, &'static str),
    /// `consume --group g --strategy S` with further flags, to its exit status.
    Consume(&'static [&'static str], i32),
    /// `consumer relay` with flags, to its exit status.
    Relay(&'static [&'static str], i32),
    /// The group's total.
    Total(i64),
    /// The group's value (the set strategies).
    Value(Option<i64>),
    /// A partition's stored next offset.
    Next(u32, u64),
    /// The provider's requests for partition 0, per record offset: (offset, delivered, dropped
    /// as a repeat of its key), every record with a request and no other.
    Emails(&'static [(u64, u64, u64)]),
    /// The offsets of partition 0's facts in the store, in the index, and in the outbox.
    Facts(&'static [u64], &'static [u64], &'static [u64]),
}

use Act::{Append, Claim, Consume, Emails, Facts, Kill, Next, Relay, Send, Start, Total, Value};

struct Scenario {
    name: &'static str,
    strategy: &'static str,
    partitions: u32,
    acts: &'static [Act],
}

/// Runs one scenario on one backend; `None` when the backend cannot run here.
fn run(backend: Backend, scenario: &Scenario) -> Option<()> {
    let case = format!("{} on {backend:?}", scenario.name);
    let dir = match backend {
        Backend::Sqlite => DataDir::new(&case, scenario.partitions),
        Backend::Postgres => DataDir::postgres(&case, scenario.partitions, &pg::database()?),
    };
    let mut workers: Vec<Option<common::Worker>> = Vec::new();
    for (step, act) in scenario.acts.iter().enumerate() {
        let at = format!("{case}, act {step} {act:?}");
        match *act {
            Append(partition, count) => dir.append(&at, partition, DELTA, count),
            Start(slot, owner) => {
                workers.resize_with(workers.len().max(slot + 1), || None);
                workers[slot] = Some(dir.worker(&at, "g", owner, scenario.strategy));
            }
            Send(slot, command, reply) => {
                let worker = workers[slot].as_mut().unwrap_or_else(|| panic!("{at}: no worker {slot}"));
                assert_eq!(worker.send(command), reply, "{at}");
            }
            Kill(slot) => {
                // Dropping a worker SIGKILLs it and waits for it.
                assert!(workers.get_mut(slot).and_then(Option::take).is_some(), "{at}: no worker {slot}");
            }
            Claim(partition, owner) => dir.claim(&at, "g", partition, owner),
            Consume(flags, code) => {
                dir.consume(&at, &[&["--group", "g", "--strategy", scenario.strategy][..], flags].concat(), code);
            }
            Relay(flags, code) => expect_code(&at, "relay", &dir.run("relay", flags), code),
            Total(total) => assert_eq!(dir.state(&at, "g").0, total, "{at}: the total"),
            Value(value) => assert_eq!(dir.group(&at, "g")["value"].as_i64(), value, "{at}: the value"),
            Next(partition, next) => {
                let row = &dir.group(&at, "g")["progress"][partition as usize];
                assert_eq!(row["next_offset"].as_u64(), Some(next), "{at}: the next offset of {partition}");
            }
            Emails(expected) => {
                assert_eq!(emails(&dir, &at), expected, "{at}: (offset, delivered, dropped)");
                check_email_status(&dir, &at, expected);
            }
            Facts(store, index, outbox) => {
                let found = facts(&dir, &at);
                assert_eq!(found, [store.to_vec(), index.to_vec(), outbox.to_vec()], "{at}: store, index, outbox");
                check_index_status(&dir, &at, (store, index, outbox));
            }
        }
    }
    Some(())
}

/// `consumer emails --json`, per offset of partition 0: (offset, delivered, dropped).
fn emails(dir: &DataDir, case: &str) -> Vec<(u64, u64, u64)> {
    let output = dir.run("emails", &["--json"]);
    expect_code(case, "emails --json", &output, 0);
    let document: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("case '{case}': emails --json is not JSON ({e})\n{}", describe(&output)));
    let requests = document["emails"]
        .as_array()
        .unwrap_or_else(|| panic!("case '{case}': emails --json has no array 'emails'\n{}", describe(&output)));
    let mut counts = std::collections::BTreeMap::<u64, (u64, u64)>::new();
    for request in requests.iter().filter(|request| request["group"] == "g" && request["partition"] == 0) {
        let offset = request["offset"].as_u64().unwrap_or_else(|| panic!("case '{case}': no offset: {request}"));
        let count = counts.entry(offset).or_default();
        if request["delivered"] == true {
            count.0 += 1;
        } else {
            count.1 += 1;
        }
    }
    counts.into_iter().map(|(offset, (delivered, dropped))| (offset, delivered, dropped)).collect()
}

/// `status --json` summarises the provider's requests as `expected` says (one partition):
/// requests, delivered, dropped, records delivered more than once, records below the next
/// offset never delivered; `null` when the group sent nothing.
fn check_email_status(dir: &DataDir, case: &str, expected: &[(u64, u64, u64)]) {
    let group = dir.group(case, "g");
    let next_offset = group["progress"][0]["next_offset"].as_u64().unwrap_or_else(|| panic!("{case}: {group}"));
    let summary = if expected.is_empty() {
        serde_json::Value::Null
    } else {
        let delivered: u64 = expected.iter().map(|&(_, delivered, _)| delivered).sum();
        let dropped: u64 = expected.iter().map(|&(_, _, dropped)| dropped).sum();
        let duplicated = expected.iter().filter(|&&(_, delivered, _)| delivered > 1).count();
        let emailed = expected.iter().filter(|&&(offset, delivered, _)| offset < next_offset && delivered > 0).count();
        serde_json::json!({
            "requests": delivered + dropped, "delivered": delivered, "dropped": dropped,
            "duplicated": duplicated, "never_delivered": next_offset - emailed as u64
        })
    };
    assert_eq!(group["emails"], summary, "{case}: status's emails");
}

/// `status --json` says whether the stores agree, as the facts (store, index, outbox) of
/// partition 0 say: the facts lost are the store's the index lacks and no outbox row holds;
/// `null` when there is no fact anywhere.
fn check_index_status(dir: &DataDir, case: &str, (store, index, outbox): (&[u64], &[u64], &[u64])) {
    let summary = if store.is_empty() && index.is_empty() && outbox.is_empty() {
        serde_json::Value::Null
    } else {
        let lost = store.iter().filter(|fact| !index.contains(fact) && !outbox.contains(fact)).count();
        serde_json::json!({
            "store": store.len(), "outbox": outbox.len(), "index": index.len(), "lost": lost, "agree": store == index
        })
    };
    assert_eq!(dir.group(case, "g")["index"], summary, "{case}: status's facts");
}

/// `consumer index --json`: the offsets of partition 0's facts in the store, the index and the
/// outbox.
fn facts(dir: &DataDir, case: &str) -> [Vec<u64>; 3] {
    let output = dir.run("index", &["--json"]);
    expect_code(case, "index --json", &output, 0);
    let document: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("case '{case}': index --json is not JSON ({e})\n{}", describe(&output)));
    ["store", "index", "outbox"].map(|part| {
        let rows = document[part].as_array().unwrap_or_else(|| panic!("case '{case}': no {part}: {document}"));
        rows.iter()
            .filter(|fact| fact["group"] == "g" && fact["partition"] == 0)
            .map(|fact| fact["offset"].as_u64().unwrap_or_else(|| panic!("case '{case}': no offset: {fact}")))
            .collect()
    })
}

/// Runs every scenario on both backends (PostgreSQL skipped, with the reason printed, when it
/// cannot run here and `CI` is unset).
fn run_all(scenarios: &[Scenario]) {
    for backend in BACKENDS {
        for scenario in scenarios {
            // `None`: no PostgreSQL here; `pg::server` printed the skip.
            if run(backend, scenario).is_none() {
                return;
            }
        }
    }
}

/// Two records; a crash at `point`; the emails then; a restart to the end (the store exact:
/// total 10, next offset 2); the emails then.
macro_rules! email_crash {
    ($strategy:literal, $point:literal, $crashed:expr, $finished:expr) => {
        Scenario {
            name: concat!($strategy, ": a crash at ", $point, ", then a restart"),
            strategy: $strategy,
            partitions: 1,
            acts: &[
                Append(0, 2),
                Consume(&["--crash-at", $point], CRASHED),
                Emails($crashed),
                Consume(&[], 0),
                Total(2 * DELTA),
                Next(0, 2),
                Emails($finished),
            ],
        }
    };
}

/// Each record's email once, nothing dropped.
const ONCE_EACH: &[(u64, u64, u64)] = &[(0, 1, 0), (1, 1, 0)];
/// Record 0's email lost: the crash fell between the store's commit and the email.
const LOST: &[(u64, u64, u64)] = &[(1, 1, 0)];
/// Record 0's email delivered twice: the replay sent it again without a key.
const TWICE: &[(u64, u64, u64)] = &[(0, 2, 0), (1, 1, 0)];
/// Record 0's email sent twice, the repeat dropped by its key: delivered once.
const DROPPED: &[(u64, u64, u64)] = &[(0, 1, 1), (1, 1, 0)];
const NONE: &[(u64, u64, u64)] = &[];
const FIRST: &[(u64, u64, u64)] = &[(0, 1, 0)];

const EMAIL_CRASHES: [Scenario; 16] = [
    // atomic-plus-email: the email follows the store's commit. A crash before the commit
    // replays the record (emailed once); one after it and before the provider answers loses
    // the email for good: the store is exact, the email is not.
    email_crash!("atomic-plus-email", "apply-atomic:inside@0", NONE, ONCE_EACH),
    email_crash!("atomic-plus-email", "apply-atomic:after@0", NONE, LOST),
    email_crash!("atomic-plus-email", "send-email:before@0", NONE, LOST),
    email_crash!("atomic-plus-email", "send-email:inside@0", FIRST, ONCE_EACH),
    // email-no-key: the email goes first. Every crash after the provider received it and
    // before the commit replays the record and emails it again.
    email_crash!("email-no-key", "send-email:before@0", NONE, ONCE_EACH),
    email_crash!("email-no-key", "send-email:inside@0", FIRST, TWICE),
    email_crash!("email-no-key", "send-email:after@0", FIRST, TWICE),
    email_crash!("email-no-key", "apply-atomic:before@0", FIRST, TWICE),
    email_crash!("email-no-key", "apply-atomic:inside@0", FIRST, TWICE),
    email_crash!("email-no-key", "apply-atomic:after@0", FIRST, ONCE_EACH),
    // email-idempotency-key: the same replays send the same key, and the provider drops it.
    email_crash!("email-idempotency-key", "send-email:before@0", NONE, ONCE_EACH),
    email_crash!("email-idempotency-key", "send-email:inside@0", FIRST, DROPPED),
    email_crash!("email-idempotency-key", "send-email:after@0", FIRST, DROPPED),
    email_crash!("email-idempotency-key", "apply-atomic:before@0", FIRST, DROPPED),
    email_crash!("email-idempotency-key", "apply-atomic:inside@0", FIRST, DROPPED),
    email_crash!("email-idempotency-key", "apply-atomic:after@0", FIRST, ONCE_EACH),
];

#[test]
fn a_crash_between_commit_and_email_loses_it_and_one_between_email_and_commit_repeats_it_without_a_key() {
    run_all(&EMAIL_CRASHES);
}

/// A second incarnation of o0 emails the record its earlier incarnation emailed and then
/// applies it; the earlier one's `apply-atomic` is fenced: the store counts the record once
/// either way, the provider delivers it twice without a key, once with one.
macro_rules! email_incarnation {
    ($strategy:literal, $second_email:literal, $emails:expr) => {
        Scenario {
            name: concat!($strategy, ": a second incarnation emails the record again"),
            strategy: $strategy,
            partitions: 1,
            acts: &[
                Append(0, 1),
                Start(0, "o0"),
                Send(0, "fetch 0 0", "ok fetched 1"),
                Send(0, "send-email 0 0", "ok emailed 1"),
                Start(1, "o0"),
                Send(1, "fetch 0 0", "ok fetched 1"),
                Send(1, "send-email 0 0", $second_email),
                Send(1, "apply-atomic 0 0", "ok applied 1 skipped 0"),
                Send(0, "apply-atomic 0 0", "ok fenced 2 3"),
                Total(DELTA),
                Emails($emails),
            ],
        }
    };
}

const EMAIL_INCARNATIONS: [Scenario; 2] = [
    email_incarnation!("email-no-key", "ok emailed 2", &[(0, 2, 0)]),
    email_incarnation!("email-idempotency-key", "ok emailed 1", &[(0, 1, 1)]),
];

#[test]
fn a_second_incarnation_emails_again_without_a_key_and_is_dropped_with_one() {
    run_all(&EMAIL_INCARNATIONS);
}

const SETS: [Scenario; 2] = [
    // o0 fetches offset 0, the partition moves to o1, which sets offsets 0 and 1 (value 2);
    // the zombie o0 then writes its older set blindly: the value goes back to 1, and its
    // commit moves the checkpoint back too.
    Scenario {
        name: "blind-set: a zombie's older set overwrites the newer value",
        strategy: "blind-set",
        partitions: 1,
        acts: &[
            Append(0, 2),
            Start(0, "o0"),
            Send(0, "fetch 0 0", "ok fetched 1"),
            Claim(0, "o1"),
            Start(1, "o1"),
            Send(1, "fetch 0 0", "ok fetched 1"),
            Send(1, "apply-effect 0 0", "ok applied 1 skipped 0"),
            Send(1, "commit-offset 0 1", "ok committed"),
            Send(1, "fetch 0 1", "ok fetched 1"),
            Send(1, "apply-effect 0 1", "ok applied 1 skipped 0"),
            Send(1, "commit-offset 0 2", "ok committed"),
            Value(Some(2)),
            Send(0, "apply-effect 0 0", "ok applied 1 skipped 0"),
            Value(Some(1)),
            Send(0, "commit-offset 0 1", "ok committed"),
            Next(0, 1),
            Total(0),
        ],
    },
    // The same schedule: the zombie's stamped set of offset 0 finds the stamp at 1 and is
    // skipped; the value stays the newest.
    Scenario {
        name: "set-if-newer: a zombie's older set is skipped",
        strategy: "set-if-newer",
        partitions: 1,
        acts: &[
            Append(0, 2),
            Start(0, "o0"),
            Send(0, "fetch 0 0", "ok fetched 1"),
            Claim(0, "o1"),
            Start(1, "o1"),
            Send(1, "fetch 0 0", "ok fetched 1"),
            Send(1, "apply-stamped 0 0", "ok applied 1 skipped 0"),
            Send(1, "fetch 0 1", "ok fetched 1"),
            Send(1, "apply-stamped 0 1", "ok applied 1 skipped 0"),
            Send(1, "commit-offset 0 2", "ok committed"),
            Value(Some(2)),
            Send(0, "apply-stamped 0 0", "ok applied 0 skipped 1"),
            Value(Some(2)),
            Total(0),
        ],
    },
];

#[test]
fn a_zombies_older_blind_set_overwrites_a_newer_value_and_set_if_newer_keeps_the_newest() {
    run_all(&SETS);
}

/// One record at offset 0 of each of two partitions: keyed by the offset alone, the second
/// is taken for a duplicate of the first and skipped; keyed by (partition, offset), both apply.
macro_rules! dedup_scope {
    ($strategy:literal, $second:literal, $total:expr) => {
        Scenario {
            name: concat!($strategy, ": offset 0 of two partitions"),
            strategy: $strategy,
            partitions: 2,
            acts: &[
                Append(0, 1),
                Append(1, 1),
                Start(0, "o0"),
                Send(0, "fetch 0 0", "ok fetched 1"),
                Send(0, "apply-deduped 0 0", "ok applied 1 skipped 0"),
                Send(0, "commit-offset 0 1", "ok committed"),
                Send(0, "fetch 1 0", "ok fetched 1"),
                Send(0, "apply-deduped 1 0", $second),
                Send(0, "commit-offset 1 1", "ok committed"),
                Next(1, 1),
                Total($total),
            ],
        }
    };
}

const DEDUP_SCOPES: [Scenario; 2] = [
    dedup_scope!("dedup-offset-only", "ok applied 0 skipped 1", DELTA),
    dedup_scope!("dedup-atomic", "ok applied 1 skipped 0", 2 * DELTA),
];

#[test]
fn dedup_keyed_by_the_offset_alone_skips_another_partitions_record() {
    run_all(&DEDUP_SCOPES);
}

/// Two records; a crash at `point`; the facts then (store, index, outbox); a restart to the
/// end, and for the outbox its relay until the outbox is empty; the facts then.
macro_rules! dual_crash {
    ($strategy:literal, $point:literal, $crashed:expr, $finished:expr) => {
        Scenario {
            name: concat!($strategy, ": a crash at ", $point, ", then a restart and the relay"),
            strategy: $strategy,
            partitions: 1,
            acts: &[
                Append(0, 2),
                Consume(&["--crash-at", $point], CRASHED),
                $crashed,
                Consume(&[], 0),
                Relay(&[], 0),
                Total(2 * DELTA),
                $finished,
            ],
        }
    };
}

/// The stores agree: both facts in the store and in the index, the outbox empty.
const AGREE: Act = Facts(&[0, 1], &[0, 1], &[]);
/// The index misses record 0's fact, and nothing will ever write it.
const DISAGREE: Act = Facts(&[0, 1], &[1], &[]);

const DUAL_CRASHES: [Scenario; 8] = [
    // dual-write: a crash after `apply-atomic` committed and before `write-index` committed
    // leaves the fact in the store only; the restart resumes past it.
    dual_crash!("dual-write", "apply-atomic:inside@0", Facts(&[], &[], &[]), AGREE),
    dual_crash!("dual-write", "apply-atomic:after@0", Facts(&[0], &[], &[]), DISAGREE),
    dual_crash!("dual-write", "write-index:before@0", Facts(&[0], &[], &[]), DISAGREE),
    dual_crash!("dual-write", "write-index:inside@0", Facts(&[0], &[], &[]), DISAGREE),
    dual_crash!("dual-write", "write-index:after@0", Facts(&[0], &[0], &[]), AGREE),
    // outbox: the fact and its outbox row commit together or not at all; the relay copies
    // every row, so the stores agree once it is done, wherever the owner crashed.
    dual_crash!("outbox", "apply-atomic:before@0", Facts(&[], &[], &[]), AGREE),
    dual_crash!("outbox", "apply-atomic:inside@0", Facts(&[], &[], &[]), AGREE),
    dual_crash!("outbox", "apply-atomic:after@0", Facts(&[0], &[], &[0]), AGREE),
];

const RELAY_CRASH: Scenario = Scenario {
    name: "outbox: the relay crashes between its copy and its delete, then copies again",
    strategy: "outbox",
    partitions: 1,
    acts: &[
        Append(0, 2),
        Consume(&[], 0),
        Facts(&[0, 1], &[], &[0, 1]),
        Relay(&["--crash-after-copy"], CRASHED),
        // Copied, not deleted: the next step copies it again (changing nothing) and deletes it.
        Facts(&[0, 1], &[0], &[0, 1]),
        Relay(&["--once"], 0),
        Facts(&[0, 1], &[0], &[1]),
        Relay(&[], 0),
        AGREE,
        Relay(&[], 0),
        AGREE,
    ],
};

#[test]
fn a_dual_writes_index_misses_a_fact_after_a_crash_and_the_outbox_relay_makes_the_stores_agree() {
    run_all(&DUAL_CRASHES);
    run_all(std::slice::from_ref(&RELAY_CRASH));
}

/// The provider alone, through the library: a key it delivered is dropped however often it
/// comes back; without a key every request is delivered; everything is recorded in order.
#[test]
fn the_provider_drops_a_repeated_key_and_delivers_every_request_without_one() {
    let temp = tempfile::tempdir().expect("a temp dir");
    let path = temp.path().join("external.db");
    EmailProvider::create(&path).expect("create the provider");
    let mut provider = EmailProvider::open(&path).expect("open the provider");
    let keyed = EmailRequest::for_record("g", 0, 3, DELTA, true);
    let plain = EmailRequest::for_record("g", 0, 4, DELTA, false);
    assert_eq!(keyed.key.as_deref(), Some("g/0/3"), "the key is the record's identity");
    assert_eq!(provider.send(&[keyed.clone(), plain.clone()]).expect("send"), [1, 1]);
    assert_eq!(provider.send(&[keyed.clone(), plain.clone()]).expect("send"), [1, 2]);
    assert_eq!(provider.send(std::slice::from_ref(&keyed)).expect("send"), [1]);
    // Another group's record at the same offset is another key.
    assert_eq!(provider.send(&[EmailRequest::for_record("h", 0, 3, DELTA, true)]).expect("send"), [1]);
    let received = provider.received(Some("g")).expect("received");
    let seen: Vec<(u64, bool)> = received.iter().map(|request| (request.offset, request.delivered)).collect();
    assert_eq!(seen, [(3, true), (4, true), (3, false), (4, true), (3, false)]);
    assert_eq!(provider.deliveries("g", 0, 3).expect("deliveries"), 1);
    // Created again (`init` over the directory), the file and its requests are kept.
    EmailProvider::create(&path).expect("create over it");
    assert_eq!(EmailProvider::open(&path).expect("open").received(None).expect("received").len(), 6);
}

/// The store refuses a database of an older schema (before `value`, `facts` and `outbox`)
/// with one line naming both versions; a data directory without its external systems is
/// refused, with one line naming the file, by the strategies that use them, and only by those.
#[test]
fn an_older_store_and_missing_external_systems_are_refused_with_one_line() {
    let case = "older schema";
    let dir = DataDir::new(case, 1);
    dir.append(case, 0, DELTA, 1);
    let connection = rusqlite::Connection::open(dir.store_path()).expect("open the store");
    connection.pragma_update(None, "user_version", 5).expect("set an older version");
    drop(connection);
    let output = dir.run("status", &[]);
    expect_code(case, "status", &output, FAILED);
    let line = stderr(&output);
    assert_eq!(line.lines().count(), 1, "case '{case}': one line\n{}", describe(&output));
    assert!(line.contains("schema version 5, this build reads version 6"), "case '{case}': {line}");

    let case = "missing external systems";
    let dir = DataDir::new(case, 1);
    dir.append(case, 0, DELTA, 1);
    std::fs::remove_file(dir.path.join("external.db")).expect("remove the provider");
    std::fs::remove_file(dir.path.join("index.db")).expect("remove the index");
    for strategy in ["atomic-plus-email", "email-idempotency-key", "email-no-key", "dual-write"] {
        let output = dir.consume(case, &["--group", "g", "--strategy", strategy], FAILED);
        let line = stderr(&output);
        assert_eq!(line.lines().count(), 1, "case '{case}' {strategy}: one line\n{}", describe(&output));
        assert!(line.contains("does not exist") && line.contains(".db"), "case '{case}' {strategy}: {line}");
    }
    for command in ["emails", "index", "relay"] {
        expect_code(case, command, &dir.run(command, &[]), FAILED);
    }
    // The outbox's owner writes only the store: the relay is what needs the index.
    dir.consume(case, &["--group", "g", "--strategy", "outbox"], 0);
    assert_eq!(dir.state(case, "g"), (DELTA, 1), "case '{case}': the outbox strategy consumed");
}

/// The model's shortest counterexample of each refuted row (`model check --strategy S`), step
/// by step with worker processes (a pause is a second worker of the same owner, a crash a
/// SIGKILL), next to the same schedule under the row's defence.
const MODEL_COUNTEREXAMPLES: [Scenario; 7] = [
    // external-exactly-once in 4 steps: append, fetch, apply (next offset 1), crash. The
    // restart has nothing left to do: record 0's email is never sent.
    Scenario {
        name: "atomic-plus-email: the model's counterexample (a crash after the store's commit)",
        strategy: "atomic-plus-email",
        partitions: 1,
        acts: &[
            Append(0, 1),
            Start(0, "o0"),
            Send(0, "fetch 0 0", "ok fetched 1"),
            Send(0, "apply-atomic 0 0", "ok applied 1 skipped 0"),
            Kill(0),
            Consume(&[], 0),
            Next(0, 1),
            Emails(NONE),
        ],
    },
    // external-exactly-once in 6 steps: fetch, email, a second incarnation fetches and emails
    // again. With the key the provider drops the repeat.
    Scenario {
        name: "email-no-key: the model's counterexample (a second incarnation)",
        strategy: "email-no-key",
        partitions: 1,
        acts: &[
            Append(0, 1),
            Start(0, "o0"),
            Send(0, "fetch 0 0", "ok fetched 1"),
            Send(0, "send-email 0 0", "ok emailed 1"),
            Start(1, "o0"),
            Send(1, "fetch 0 0", "ok fetched 1"),
            Send(1, "send-email 0 0", "ok emailed 2"),
            Emails(&[(0, 2, 0)]),
        ],
    },
    Scenario {
        name: "email-idempotency-key: the same schedule",
        strategy: "email-idempotency-key",
        partitions: 1,
        acts: &[
            Append(0, 1),
            Start(0, "o0"),
            Send(0, "fetch 0 0", "ok fetched 1"),
            Send(0, "send-email 0 0", "ok emailed 1"),
            Start(1, "o0"),
            Send(1, "fetch 0 0", "ok fetched 1"),
            Send(1, "send-email 0 0", "ok emailed 1"),
            Emails(&[(0, 1, 1)]),
        ],
    },
    // latest-wins in 10 steps: o0 sets offset 0; its second incarnation resumes at 0; the
    // first commits, fetches and sets offset 1 (value 2); the second sets offset 0 again:
    // value 1, though offset 1 was applied.
    Scenario {
        name: "blind-set: the model's counterexample (a second incarnation replays an older set)",
        strategy: "blind-set",
        partitions: 1,
        acts: &[
            Append(0, 2),
            Start(0, "o0"),
            Send(0, "fetch 0 0", "ok fetched 1"),
            Send(0, "apply-effect 0 0", "ok applied 1 skipped 0"),
            Start(1, "o0"),
            Send(1, "fetch 0 0", "ok fetched 1"),
            Send(0, "commit-offset 0 1", "ok committed"),
            Send(0, "fetch 0 1", "ok fetched 1"),
            Send(0, "apply-effect 0 1", "ok applied 1 skipped 0"),
            Value(Some(2)),
            Send(1, "apply-effect 0 0", "ok applied 1 skipped 0"),
            Value(Some(1)),
        ],
    },
    Scenario {
        name: "set-if-newer: the same schedule, the older set skipped",
        strategy: "set-if-newer",
        partitions: 1,
        acts: &[
            Append(0, 2),
            Start(0, "o0"),
            Send(0, "fetch 0 0", "ok fetched 1"),
            Send(0, "apply-stamped 0 0", "ok applied 1 skipped 0"),
            Start(1, "o0"),
            Send(1, "fetch 0 0", "ok fetched 1"),
            Send(0, "fetch 0 1", "ok fetched 1"),
            Send(0, "apply-stamped 0 1", "ok applied 1 skipped 0"),
            Value(Some(2)),
            Send(1, "apply-stamped 0 0", "ok applied 0 skipped 1"),
            Value(Some(2)),
        ],
    },
    // stores-agree in 5 steps: o0 applies record 0 (its fact in the store), is started again
    // (the new incarnation resumes at 1: nothing to do), and the first incarnation crashes
    // before its index write. Quiescent, and the index lacks the fact.
    Scenario {
        name: "dual-write: the model's counterexample (the incarnation holding the index write crashes)",
        strategy: "dual-write",
        partitions: 1,
        acts: &[
            Append(0, 1),
            Start(0, "o0"),
            Send(0, "fetch 0 0", "ok fetched 1"),
            Send(0, "apply-atomic 0 0", "ok applied 1 skipped 0"),
            Start(1, "o0"),
            Kill(0),
            Consume(&[], 0),
            Facts(&[0], &[], &[]),
        ],
    },
    Scenario {
        name: "outbox: the same schedule, then the relay",
        strategy: "outbox",
        partitions: 1,
        acts: &[
            Append(0, 1),
            Start(0, "o0"),
            Send(0, "fetch 0 0", "ok fetched 1"),
            Send(0, "apply-atomic 0 0", "ok applied 1 skipped 0"),
            Start(1, "o0"),
            Kill(0),
            Consume(&[], 0),
            Facts(&[0], &[], &[0]),
            Relay(&[], 0),
            Facts(&[0], &[0], &[]),
        ],
    },
];

#[test]
fn the_models_shortest_counterexamples_replay_with_real_processes_and_the_defences_hold() {
    run_all(&MODEL_COUNTEREXAMPLES);
}
