//! A log that lost acknowledged records, files, or is another log, as child processes: every
//! such loss is refused in one line with exit 4 and nothing applied, until `consumer repair`
//! says what is lost, makes the log consistent and moves each group past its end back to it
//! (recorded in the resets), after which records appended again are applied exactly once.
//! Also: `init` over a log of another partition count, an unacknowledged tail cut and
//! reported, an older store, the test-only traps (`--log-check unchecked`, `refuse-all`, the
//! unchecked writer), the worker's `refuse-ahead`, and the refusal on PostgreSQL.

mod common;

use common::{describe, pg, snapshot, stderr, stdout, DataDir, FAILED, REFUSED};
use consumer::log::{encode_delta, fault, Log};
use std::fs;

/// Records of +1 appended to every partition (one per append) and consumed by group `g`
/// before each loss.
const RECORDS: u64 = 5;
/// What `consume` runs with unless a case says otherwise.
const CONSUME_G: &[&str] = &["consume", "--group", "g", "--strategy", "atomic-fenced"];

/// The store's effect and progress rows as text, read with SQL rather than `status` (which
/// refuses a log it cannot open).
fn store_rows(dir: &DataDir) -> Vec<String> {
    let effect = "SELECT grp || ' total ' || total FROM effect ORDER BY grp";
    let progress = "SELECT grp || ' p' || part || ' next ' || next_offset || ' epoch ' || epoch || ' owner ' || owner \
                    || ' stamp ' || COALESCE(CAST(stamp AS TEXT), '-') FROM progress ORDER BY grp, part";
    match &dir.store {
        None => {
            let conn = rusqlite::Connection::open(dir.store_path()).expect("open the store");
            let rows = |sql: &str| -> Vec<String> {
                let mut statement = conn.prepare(sql).expect("prepare");
                statement.query_map([], |row| row.get(0)).expect("query").map(|row| row.expect("row")).collect()
            };
            [rows(effect), rows(progress)].concat()
        }
        Some(url) => {
            let mut client = postgres::Client::connect(url, postgres::NoTls).expect("connect to the test cluster");
            let mut rows = |sql: &str| -> Vec<String> {
                client.query(sql, &[]).expect("query").iter().map(|row| row.get(0)).collect()
            };
            [rows(effect), rows(progress)].concat()
        }
    }
}

/// Runs a command that must be refused: exit 4, nothing on stdout, exactly one `error:` line
/// holding every text of `expected`, the store's rows and the log's files unchanged.
fn expect_refused(case: &str, dir: &DataDir, args: &[&str], expected: &[&str]) {
    let (rows, files) = (store_rows(dir), snapshot(&dir.log_dir()));
    let (subcommand, rest) = args.split_first().expect("a subcommand");
    let output = dir.run(subcommand, rest);
    let what = args.join(" ");
    common::expect_code(case, &what, &output, REFUSED);
    assert_eq!(stdout(&output), "", "case '{case}': {what} printed on stdout\n{}", describe(&output));
    let errors = stderr(&output);
    assert_eq!(errors.lines().count(), 1, "case '{case}': {what} must refuse in one line\n{}", describe(&output));
    assert!(errors.starts_with("error: "), "case '{case}': {what}\n{}", describe(&output));
    for text in expected {
        assert!(errors.contains(text), "case '{case}': {what}: '{}' lacks '{text}'", errors.trim_end());
    }
    assert_eq!(store_rows(dir), rows, "case '{case}': {what} changed the store");
    assert!(snapshot(&dir.log_dir()) == files, "case '{case}': {what} changed the log's files");
}

/// Runs a command that must succeed and returns its stdout.
fn expect_ok(case: &str, dir: &DataDir, args: &[&str]) -> String {
    let (subcommand, rest) = args.split_first().expect("a subcommand");
    let output = dir.run(subcommand, rest);
    common::expect_code(case, &args.join(" "), &output, 0);
    stdout(&output)
}

/// Every row of the reset table as (group, partition, from, to).
fn resets(case: &str, dir: &DataDir) -> Vec<(String, u64, u64, u64)> {
    let text = expect_ok(case, dir, &["resets", "--json"]);
    let rows: serde_json::Value = serde_json::from_str(&text).expect("resets --json is JSON");
    let number = |row: &serde_json::Value, key: &str| row[key].as_u64().unwrap_or(u64::MAX);
    let rows = rows["resets"].as_array().expect("an array of resets").iter();
    rows.map(|row| {
        (
            row["group"].as_str().unwrap_or("").to_string(),
            number(row, "partition"),
            number(row, "from"),
            number(row, "to"),
        )
    })
    .collect()
}

/// (total, next offset per partition) of a group, from `status --json`.
fn group_state(case: &str, dir: &DataDir, group: &str) -> (i64, Vec<u64>) {
    let row = dir.group(case, group);
    let offsets = row["progress"].as_array().expect("progress rows").iter();
    (row["total"].as_i64().expect("a total"), offsets.map(|p| p["next_offset"].as_u64().expect("an offset")).collect())
}

/// The loss a case inflicts on a log consumed to its end.
#[derive(Clone, Copy, Debug)]
enum Loss {
    /// `rm -rf log`.
    LogDirectory,
    PartitionFile(u32),
    StartFile(u32),
    AckFile(u32),
    /// One byte flipped in record `offset` of the partition (complete, acknowledged).
    FlippedByte {
        partition: u32,
        offset: u64,
    },
    /// `fault::lose_tail`: the file cut at the frame of record `keep`.
    Tail {
        partition: u32,
        keep: u64,
    },
    /// Another data directory's log copied in its place.
    AnotherLog,
}

/// Bytes of one +N record's frame (40 bytes of head, an 8-byte delta), after the 24-byte header,
/// as documented in `src/log/mod.rs`.
const FRAME: u64 = 48;
const HEADER: u64 = 24;

/// The value of an I/O step of inflicting `loss`, which must not fail.
fn must<T>(case: &str, loss: Loss, result: std::io::Result<T>) -> T {
    result.unwrap_or_else(|e| panic!("case '{case}': inflicting {loss:?}: {e}"))
}

fn inflict(case: &str, dir: &DataDir, loss: Loss) {
    let log = dir.log_dir();
    match loss {
        Loss::LogDirectory => must(case, loss, fs::remove_dir_all(&log)),
        Loss::PartitionFile(p) => must(case, loss, fs::remove_file(log.join(format!("partition-{p}.log")))),
        Loss::StartFile(p) => must(case, loss, fs::remove_file(log.join(format!("partition-{p}.start")))),
        Loss::AckFile(p) => must(case, loss, fs::remove_file(log.join(format!("partition-{p}.ack")))),
        Loss::FlippedByte { partition, offset } => {
            let path = dir.log_file(partition);
            let mut bytes = must(case, loss, fs::read(&path));
            bytes[(HEADER + offset * FRAME + FRAME - 1) as usize] ^= 0x5a;
            must(case, loss, fs::write(&path, bytes));
        }
        Loss::Tail { partition, keep } => {
            fault::lose_tail(&log, partition, keep).unwrap_or_else(|e| panic!("case '{case}': lose_tail: {e}"))
        }
        Loss::AnotherLog => {
            let other = DataDir::new(case, 1);
            must(case, loss, fs::remove_dir_all(&log));
            must(case, loss, fs::rename(other.log_dir(), &log));
        }
    }
}

/// One loss: what is refused after it, what `repair` says (or its refusal), the rewinds it
/// records as (partition, from, to), and each partition's end after it.
struct LossCase {
    name: &'static str,
    partitions: u32,
    loss: Loss,
    /// Commands (without `--dir`) and the texts of their one refusal line.
    refused: &'static [(&'static [&'static str], &'static [&'static str])],
    /// Lines `repair` prints (as substrings), or the texts of its refusal.
    repair: Result<&'static [&'static str], &'static [&'static str]>,
    rewinds: &'static [(u64, u64, u64)],
    ends: &'static [u64],
}

fn run_loss_case(case: &LossCase) {
    let name = case.name;
    let dir = DataDir::new(name, case.partitions);
    // One record per append: a batch is lost whole, so one-record batches show each record.
    for partition in 0..case.partitions {
        for _ in 0..RECORDS {
            dir.append(name, partition, 1, 1);
        }
    }
    dir.consume(name, &CONSUME_G[1..], 0);
    let before = i64::from(case.partitions as u16) * RECORDS as i64;
    inflict(name, &dir, case.loss);
    for (args, expected) in case.refused {
        expect_refused(name, &dir, args, expected);
    }
    let lines = match case.repair {
        Ok(lines) => lines,
        Err(expected) => return expect_refused(name, &dir, &["repair"], expected),
    };
    let said = expect_ok(name, &dir, &["repair"]);
    for line in lines {
        assert!(said.contains(line), "case '{name}': repair did not say '{line}':\n{said}");
    }
    let journal = fs::read_to_string(dir.log_dir().join("repairs.log")).unwrap_or_default();
    // The log's actions, not the groups' moves (recorded in the resets, checked below).
    for line in lines.iter().filter(|line| !line.contains("moved back")) {
        assert!(journal.contains(line), "case '{name}': repairs.log does not record '{line}':\n{journal}");
    }
    let rewinds: Vec<_> = case.rewinds.iter().map(|&(p, from, to)| ("g".to_string(), p, from, to)).collect();
    assert_eq!(resets(name, &dir), rewinds, "case '{name}': the rewinds recorded");
    let again = expect_ok(name, &dir, &["repair"]);
    assert!(again.contains("nothing to repair"), "case '{name}': a second repair changed something:\n{again}");
    // Records appended after the repair are applied exactly once: none is skipped.
    for partition in 0..case.partitions {
        dir.append(name, partition, 100, RECORDS);
    }
    dir.consume(name, &CONSUME_G[1..], 0);
    let expected_offsets: Vec<u64> = case.ends.iter().map(|end| end + RECORDS).collect();
    let expected = (before + 500 * i64::from(case.partitions as u16), expected_offsets);
    assert_eq!(group_state(name, &dir, "g"), expected, "case '{name}': (total, next offsets) after the repair");
}

/// The losses and more: each is refused until `repair`, after which the group goes on
/// without skipping anything it did not account for.
#[test]
fn every_log_loss_is_refused_until_repair_and_then_nothing_is_skipped() {
    const APPEND: &[&str] = &["append", "--delta", "100"];
    const STATUS: &[&str] = &["status"];
    let cases = [
        LossCase {
            name: "the log directory deleted",
            partitions: 1,
            loss: Loss::LogDirectory,
            refused: &[
                (APPEND, &["log/identity", "is missing"]),
                (CONSUME_G, &["log/identity", "is missing"]),
                (STATUS, &["log/identity", "is missing"]),
                (&["retain", "--before", "1"], &["log/identity", "is missing"]),
            ],
            repair: Ok(&[
                "the log directory was missing: made again, empty",
                "group g partition 0: next offset moved back from 5 to the log end 0 (recorded in the resets)",
            ]),
            rewinds: &[(0, 5, 0)],
            ends: &[0],
        },
        LossCase {
            name: "a partition file deleted",
            partitions: 2,
            loss: Loss::PartitionFile(1),
            refused: &[
                (&["append", "--partition", "0", "--delta", "100"], &["log/partition-1.log", "is missing"]),
                (CONSUME_G, &["log/partition-1.log", "is missing"]),
                (STATUS, &["log/partition-1.log", "is missing"]),
            ],
            repair: Ok(&[
                "partition-1.log was missing: made again, empty; acknowledged offsets 0..5 are lost",
                "group g partition 1: next offset moved back from 5 to the log end 0",
            ]),
            rewinds: &[(1, 5, 0)],
            ends: &[5, 0],
        },
        LossCase {
            name: "a start file deleted",
            partitions: 1,
            loss: Loss::StartFile(0),
            refused: &[(CONSUME_G, &["partition-0.start", "is missing"]), (APPEND, &["partition-0.start"])],
            repair: Ok(&["partition-0.start (missing) made again at offset 0"]),
            rewinds: &[],
            ends: &[5],
        },
        LossCase {
            name: "an acknowledgement record deleted",
            partitions: 1,
            loss: Loss::AckFile(0),
            refused: &[(CONSUME_G, &["partition-0.ack", "is missing"]), (APPEND, &["partition-0.ack"])],
            repair: Ok(&["partition-0.ack (missing) rebuilt: the intact records 0..5 are accepted as acknowledged"]),
            rewinds: &[],
            ends: &[5],
        },
        LossCase {
            name: "a flipped byte in the last acknowledged frame",
            partitions: 1,
            loss: Loss::FlippedByte { partition: 0, offset: 4 },
            refused: &[
                (APPEND, &["partition 0 lost acknowledged records", "partition-0.log", "offset 4"]),
                (CONSUME_G, &["refused: group g partition 0: stored next offset 5", "log end 4"]),
                (&["retain", "--before", "1"], &["partition 0 lost acknowledged records"]),
            ],
            repair: Ok(&[
                "lost acknowledged offsets 4..5 (record 4 at byte 216: checksum mismatch)",
                "group g partition 0: next offset moved back from 5 to the log end 4",
            ]),
            rewinds: &[(0, 5, 4)],
            ends: &[4],
        },
        LossCase {
            name: "a flipped byte in the middle of the log",
            partitions: 1,
            loss: Loss::FlippedByte { partition: 0, offset: 2 },
            refused: &[
                (APPEND, &["partition-0.log", "offsets 2..3", "2 records after them intact"]),
                (CONSUME_G, &["stored next offset 5", "log end 2", "nothing applied"]),
            ],
            // Intact records follow the damage: nothing deletes them unasked (`--gap`: below).
            repair: Err(&["partition 0 is damaged", "offsets 2..3", "repair --gap"]),
            rewinds: &[],
            ends: &[],
        },
        LossCase {
            name: "the tail of one partition lost",
            partitions: 2,
            loss: Loss::Tail { partition: 1, keep: 3 },
            refused: &[
                (&["append", "--partition", "1", "--delta", "100"], &["partition 1 lost acknowledged records"]),
                (CONSUME_G, &["group g partition 1: stored next offset 5", "log end 3"]),
            ],
            repair: Ok(&[
                "partition 1: ",
                "lost acknowledged offsets 3..5",
                "group g partition 1: next offset moved back from 5 to the log end 3",
            ]),
            rewinds: &[(1, 5, 3)],
            ends: &[5, 3],
        },
        LossCase {
            name: "another data directory's log in its place",
            partitions: 1,
            loss: Loss::AnotherLog,
            refused: &[
                (CONSUME_G, &["has identity", "it is another log"]),
                (APPEND, &["it is another log"]),
                (STATUS, &["it is another log"]),
            ],
            repair: Err(&["it is another log", "does not repair this"]),
            rewinds: &[],
            ends: &[],
        },
    ];
    for case in &cases {
        run_loss_case(case);
    }
}

/// `count` records of `delta` appended one per `append`, each its own batch.
fn append_one_by_one(case: &str, dir: &DataDir, partition: u32, delta: i64, count: u64) {
    for _ in 0..count {
        dir.append(case, partition, delta, 1);
    }
}

/// `init --partitions N` over a log of another partition count is refused before anything is
/// created; over a log of the same count (its store gone) the log is kept and adopted.
#[test]
fn init_refuses_another_partition_count_over_an_existing_log() {
    let case = "init --partitions 1 over a two-partition log";
    let dir = DataDir::new(case, 2);
    append_one_by_one(case, &dir, 1, 1, 2);
    fs::remove_file(dir.store_path()).expect("remove the store");
    let files = snapshot(&dir.path);
    let output = dir.run("init", &["--partitions", "1"]);
    common::expect_code(case, "init --partitions 1", &output, REFUSED);
    let expected = format!("error: log {} has 2 partition(s), but 1 were expected: refused\n", dir.log_dir().display());
    assert_eq!(stderr(&output), expected, "case '{case}'\n{}", describe(&output));
    assert!(snapshot(&dir.path) == files, "case '{case}': the refused init created or changed files");
    expect_ok(case, &dir, &["init", "--partitions", "2"]);
    let status = dir.status(case);
    assert_eq!(status["log"][1]["end"], 2, "case '{case}': the adopted log keeps its records: {status}");
}

/// An append whose acknowledgement record never became durable (a crash after its data was
/// synced, or its slot damaged later): consumers do not see it until the next writer, which
/// keeps its whole batch (the record is a lower bound), acknowledges it and says so; an
/// incomplete batch (a crash inside the data write) is cut and reported.
#[test]
fn an_unacknowledged_tail_is_kept_whole_or_cut_and_reported() {
    for (case, torn) in [("a whole unacknowledged batch", false), ("a torn unacknowledged batch", true)] {
        let dir = DataDir::new(case, 1);
        append_one_by_one(case, &dir, 0, 1, 2);
        let ack = dir.log_dir().join("partition-0.ack");
        let acknowledged_two = fs::read(&ack).expect("read the acknowledgement record");
        dir.append(case, 0, 1000, 3);
        fs::write(&ack, acknowledged_two).expect("restore the acknowledgement record");
        if torn {
            let file = fs::OpenOptions::new().write(true).open(dir.log_file(0)).expect("open the log file");
            file.set_len(HEADER + 5 * FRAME - 1).expect("tear the last frame");
        }
        let status = dir.status(case);
        assert_eq!((&status["log"][0]["end"], &status["log"][0]["damage"]), (&2.into(), &serde_json::Value::Null));
        dir.consume(case, &CONSUME_G[1..], 0);
        assert_eq!(group_state(case, &dir, "g"), (2, vec![2]), "case '{case}': the unacknowledged batch was read");
        let output = dir.run("append", &["--delta", "7"]);
        common::expect_code(case, "append", &output, 0);
        let path = dir.log_file(0).display().to_string();
        let (expected, appended) = if torn {
            let dropped = 3 * FRAME - 1;
            let said = format!(
                "repaired: {path} had an unacknowledged tail (an append a crash interrupted); kept 2 record(s), \
                 dropped {dropped} byte(s)\n"
            );
            (said, "appended offsets 2..3 to partition 0 (durable)\n")
        } else {
            let said = format!(
                "repaired: {path} held whole batches past its acknowledged end (offsets 2..5: an append whose \
                 acknowledgement a crash or a damaged acknowledgement slot lost): kept and acknowledged\n"
            );
            (said, "appended offsets 5..6 to partition 0 (durable)\n")
        };
        assert_eq!(stderr(&output), expected, "case '{case}'\n{}", describe(&output));
        assert_eq!(stdout(&output), appended, "case '{case}'");
    }
}

/// A damaged batch with intact records after it: consumers read up to it and stop (exit 4,
/// naming the offsets and the records after them); `repair` refuses to delete the intact
/// records; `repair --gap` writes a gap over the damaged batch, records the skip in every
/// group's resets, and the group steps over the gap and applies every intact record after it.
#[test]
fn repair_gap_keeps_the_records_after_a_damaged_batch() {
    let case = "a flipped byte in the middle, repaired with --gap";
    let dir = DataDir::new(case, 1);
    append_one_by_one(case, &dir, 0, 1, 5);
    inflict(case, &dir, Loss::FlippedByte { partition: 0, offset: 2 });
    let output = dir.run("consume", &CONSUME_G[1..]);
    common::expect_code(case, "consume", &output, REFUSED);
    let refusal = "refused: group g partition 0 stopped at offset 2: records 2..3 are damaged";
    assert!(stderr(&output).contains(refusal), "case '{case}'\n{}", describe(&output));
    assert_eq!(group_state(case, &dir, "g"), (2, vec![2]), "case '{case}': read up to the damage");
    expect_refused(case, &dir, &["repair"], &["offsets 2..3", "2 records after them intact", "repair --gap"]);
    let said = expect_ok(case, &dir, &["repair", "--gap"]);
    for text in [
        "offsets 2..3 (1 record, bytes 120..168) are damaged",
        "recorded as a gap; the 2 records after them are kept",
        "group g partition 0: the skip of offsets 2..3 recorded in the resets",
    ] {
        assert!(said.contains(text), "case '{case}': repair --gap did not say '{text}':\n{said}");
    }
    let status = dir.status(case);
    assert_eq!(status["log"][0]["gaps"], serde_json::json!([[2, 3]]), "case '{case}': {status}");
    assert_eq!(status["log"][0]["end"], 5, "case '{case}': {status}");
    let again = expect_ok(case, &dir, &["repair", "--gap"]);
    assert!(again.contains("nothing to repair"), "case '{case}': a second repair changed something:\n{again}");
    let stepped = expect_ok(case, &dir, CONSUME_G);
    assert!(stepped.contains("skipped: partition 0 offsets 2..3"), "case '{case}':\n{stepped}");
    assert_eq!(group_state(case, &dir, "g"), (4, vec![5]), "case '{case}': every intact record applied once");
    assert_eq!(resets(case, &dir), vec![("g".to_string(), 0, 2, 3)], "case '{case}': the skip is accounted for");
    dir.append(case, 0, 100, 2);
    dir.consume(case, &CONSUME_G[1..], 0);
    assert_eq!(group_state(case, &dir, "g"), (204, vec![7]), "case '{case}': appends after the gap applied");
}

/// Schema version 4 records the log's identity: a version-3 store is refused with one line
/// naming both versions rather than opened without it.
#[test]
fn a_version_3_store_is_refused() {
    let case = "a store at schema version 3";
    let dir = DataDir::new(case, 1);
    let conn = rusqlite::Connection::open(dir.store_path()).expect("open the store");
    conn.pragma_update(None, "user_version", 3).expect("set user_version");
    drop(conn);
    for args in [&["status"][..], CONSUME_G, &["append", "--delta", "1"]] {
        let (subcommand, rest) = args.split_first().expect("a subcommand");
        let output = dir.run(subcommand, rest);
        common::expect_code(case, subcommand, &output, FAILED);
        let expected = format!(
            "error: database {} has schema version 3, this build reads version {}\n",
            dir.store_path().display(),
            consumer::store::SCHEMA_VERSION
        );
        assert_eq!(stderr(&output), expected, "case '{case}': {subcommand}\n{}", describe(&output));
    }
}

/// What a group does under one `--log-check` after the log lost records 3 and 4 of 5: group
/// `g` consumed all five (ahead of the loss), group `h` two (behind it).
struct TrapCase {
    name: &'static str,
    check: &'static str,
    g: Ends,
    h: Ends,
}

/// How a group's `consume` ends in a `TrapCase`.
#[derive(Clone, Copy)]
enum Ends {
    /// Exit 0 with (total, next offset).
    Done((i64, u64)),
    /// Read up to the loss, then refused (exit 4) with this text: (total, next offset).
    Stopped((i64, u64), &'static str),
    /// Refused before anything was written, with these texts.
    Refused(&'static [&'static str]),
}

/// refuse-ahead refuses exactly the group ahead of the loss; the traps skip silently
/// (unchecked) or refuse a group with nothing at stake (refuse-all).
#[test]
fn each_log_check_meets_a_lost_tail_its_own_way() {
    let cases = [
        TrapCase {
            name: "refuse-ahead (the default)",
            check: "refuse-ahead",
            g: Ends::Refused(&["refused: group g partition 0: stored next offset 5", "log end 3"]),
            h: Ends::Stopped((3, 3), "refused: group h partition 0 stopped at offset 3: acknowledged records 3..5"),
        },
        TrapCase {
            name: "unchecked: the group ahead finds nothing to do",
            check: "unchecked",
            g: Ends::Done((5, 5)),
            h: Ends::Done((3, 3)),
        },
        TrapCase {
            name: "refuse-all: the group behind is refused too",
            check: "refuse-all",
            g: Ends::Refused(&["stored next offset 5", "log end 3"]),
            h: Ends::Refused(&["refused: group h partition 0: the log lost acknowledged records", "refuse-all"]),
        },
    ];
    for case in &cases {
        let name = case.name;
        let dir = DataDir::new(name, 1);
        append_one_by_one(name, &dir, 0, 1, 2);
        expect_ok(name, &dir, &["consume", "--group", "h", "--strategy", "atomic-fenced"]);
        append_one_by_one(name, &dir, 0, 1, 3);
        dir.consume(name, &CONSUME_G[1..], 0);
        fault::lose_tail(&dir.log_dir(), 0, 3).expect("lose the tail");
        for (group, expected) in [("g", case.g), ("h", case.h)] {
            let args = ["consume", "--group", group, "--strategy", "atomic-fenced", "--log-check", case.check];
            match expected {
                Ends::Done(state) => {
                    expect_ok(name, &dir, &args);
                    assert_eq!(group_state(name, &dir, group), (state.0, vec![state.1]), "case '{name}': {group}");
                }
                Ends::Stopped(state, text) => {
                    let (subcommand, rest) = args.split_first().expect("a subcommand");
                    let output = dir.run(subcommand, rest);
                    common::expect_code(name, "consume", &output, REFUSED);
                    assert!(stderr(&output).contains(text), "case '{name}': {group}\n{}", describe(&output));
                    assert_eq!(stderr(&output).lines().count(), 1, "case '{name}': {group}\n{}", describe(&output));
                    assert_eq!(group_state(name, &dir, group), (state.0, vec![state.1]), "case '{name}': {group}");
                }
                Ends::Refused(texts) => expect_refused(name, &dir, &args, texts),
            }
        }
    }
}

/// The trap the acknowledgement record closes: a writer that trusts the file alone (the
/// test-only unchecked writer) appends again at the end a loss left, below the checkpoint of
/// a group that consumed the lost records, and an unchecked owner skips the new records
/// silently. The checked writer refuses that append.
#[test]
fn a_log_that_grows_again_after_losing_its_tail_is_skipped_silently_by_the_traps() {
    let case = "the unchecked writer and owner";
    let dir = DataDir::new(case, 1);
    append_one_by_one(case, &dir, 0, 1, 5);
    dir.consume(case, &CONSUME_G[1..], 0);
    fault::lose_tail(&dir.log_dir(), 0, 2).expect("lose the tail");
    expect_refused(
        case,
        &dir,
        &["append", "--delta", "100", "--count", "6"],
        &["partition 0 lost acknowledged records"],
    );
    let identity = Log::read_identity(&dir.log_dir()).expect("read the identity").expect("an identity");
    let (mut writer, _) = Log::open_writer_unchecked(&dir.log_dir(), identity).expect("the unchecked writer opens");
    assert_eq!(writer.append_batch(0, &vec![encode_delta(100); 6]).expect("appended again"), 2..8);
    drop(writer);
    let unchecked = ["consume", "--group", "g", "--strategy", "atomic-fenced", "--log-check", "unchecked"];
    expect_ok(case, &dir, &unchecked);
    // Offsets 2..5 of the new records are skipped: only 5..8 count.
    assert_eq!(group_state(case, &dir, "g"), (5 + 300, vec![8]), "case '{case}': the trap skips 300");
}

/// The worker's `refuse-ahead`: only with nothing in flight (a record fetched before the loss
/// is still completed), writes nothing and replies `refused STORED POSITION END`; under
/// `--log-check unchecked` it is never enabled, under `refuse-all` also behind the loss.
#[test]
fn the_worker_refuses_ahead_once_nothing_is_in_flight() {
    let case = "the worker's refuse-ahead";
    let dir = DataDir::new(case, 1);
    append_one_by_one(case, &dir, 0, 1, 5);
    let mut worker = dir.worker(case, "g", "o0", "atomic-fenced");
    for offset in 0..3 {
        worker.expect(&format!("fetch 0 {offset}"), "ok fetched 1");
        worker.expect(&format!("apply-atomic 0 {offset}"), "ok applied 1 skipped 0");
    }
    worker.expect("fetch 0 3", "ok fetched 1");
    fault::lose_tail(&dir.log_dir(), 0, 2).expect("lose the tail");
    worker.expect("refuse-ahead 0 4", "err step 'refuse-ahead 0 4' is not enabled (enabled: apply-atomic 0 3)");
    worker.expect("apply-atomic 0 3", "ok applied 1 skipped 0");
    worker.expect("refuse-ahead 0 4", "ok refused 4 4 2");
    worker.expect("fetch 0 4", "err step 'fetch 0 4' is not enabled (enabled: none)");
    worker.quit();
    assert_eq!(group_state(case, &dir, "g"), (4, vec![4]), "case '{case}': the refusal wrote nothing");
    let mut unchecked = dir.worker_with(case, "g", "o0", "atomic-fenced", &["--log-check", "unchecked"]);
    unchecked.expect("refuse-ahead 0 4", "err step 'refuse-ahead 0 4' is not enabled (enabled: none)");
    unchecked.quit();
    let mut behind = dir.worker_with(case, "h", "o0", "atomic-fenced", &["--log-check", "refuse-all"]);
    behind.expect("refuse-ahead 0 0", "ok refused 0 0 2");
    behind.quit();
    let mut behind = dir.worker(case, "h", "o0", "atomic-fenced");
    behind.expect("fetch 0 0", "ok fetched 1");
    behind.quit();
}

/// The store ahead of the log on PostgreSQL: refused in one line with nothing applied, shown
/// by `status`, and repaired with the rewind recorded.
#[test]
fn the_store_ahead_of_the_log_is_refused_and_repaired_on_postgres() {
    let case = "store ahead of the log on PostgreSQL";
    let Some(url) = pg::database() else { return };
    let dir = DataDir::postgres(case, 1, &url);
    append_one_by_one(case, &dir, 0, 1, 5);
    dir.consume(case, &CONSUME_G[1..], 0);
    fault::lose_tail(&dir.log_dir(), 0, 3).expect("lose the tail");
    expect_refused(case, &dir, CONSUME_G, &["refused: group g partition 0: stored next offset 5", "log end 3"]);
    let text = expect_ok(case, &dir, &["status"]);
    // Epoch 2: the first consume's start claimed it; the refused one claimed nothing.
    assert!(text.contains("next offset 5, epoch 2, owner o0, stamp null: AHEAD of the log end"), "{text}");
    assert!(text.contains("log partition 0: start 0 end 3 of 5 acknowledged: DAMAGED"), "{text}");
    let said = expect_ok(case, &dir, &["repair"]);
    assert!(said.contains("group g partition 0: next offset moved back from 5 to the log end 3"), "{said}");
    assert_eq!(resets(case, &dir), vec![("g".to_string(), 0, 5, 3)], "case '{case}': the rewind recorded");
    dir.append(case, 0, 100, 2);
    dir.consume(case, &CONSUME_G[1..], 0);
    assert_eq!(group_state(case, &dir, "g"), (205, vec![5]), "case '{case}': the new records applied once");
}
