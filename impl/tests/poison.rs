//! Poison records and the dead-letter table as child processes: atomic-dlq, skip-poison and
//! retry-forever consuming a log with a record whose effect fails every time, crashes around
//! their failed attempts and dead letters, the operator's redrive, and the worker protocol.

mod common;

use common::{describe, stderr, stdout, DataDir, GroupState, CRASHED, FAILED};

/// One record of a scenario's log.
#[derive(Clone, Copy, Debug)]
enum Record {
    /// A normal record adding its delta to the total.
    Delta(i64),
    /// A record whose payload is not an 8-byte delta (`append-poison`).
    Poison,
}

/// The log every scenario but the schema check uses: +5, poison, +5.
const FIVE_POISON_FIVE: &[Record] = &[Record::Delta(5), Record::Poison, Record::Delta(5)];

/// The error a poison record's effect fails with, as the store keeps it.
const POISON_ERROR: &str = "payload is not an 8-byte delta";

/// A single-partition data directory holding `records`, appended one command each.
fn data_dir(case: &str, records: &[Record]) -> DataDir {
    let dir = DataDir::new(case, 1);
    for record in records {
        match *record {
            Record::Delta(delta) => dir.append(case, 0, delta, 1),
            Record::Poison => {
                let output = dir.run("append-poison", &["--partition", "0"]);
                common::expect_code(case, "append-poison", &output, 0);
            }
        }
    }
    dir
}

/// The dead-letter table of group `g` as (offset, attempts), checking every row's partition
/// and error text on the way.
fn dead_letters(case: &str, dir: &DataDir) -> Vec<(u64, u64)> {
    let output = dir.run("dead-letters", &["--group", "g", "--json"]);
    common::expect_code(case, "dead-letters --json", &output, 0);
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("case '{case}': dead-letters --json is not JSON: {e}\n{}", describe(&output)));
    let rows = rows["dead_letters"]
        .as_array()
        .unwrap_or_else(|| panic!("case '{case}': dead-letters --json has no array: {rows}"));
    rows.iter()
        .map(|row| {
            assert_eq!(row["group"], "g", "case '{case}': a dead letter of another group: {row}");
            assert_eq!(row["partition"], 0, "case '{case}': a dead letter of another partition: {row}");
            assert_eq!(row["error"], POISON_ERROR, "case '{case}': the dead letter's error: {row}");
            let offset = row["offset"].as_u64().unwrap_or_else(|| panic!("case '{case}': no offset in {row}"));
            let attempts = row["attempts"].as_u64().unwrap_or_else(|| panic!("case '{case}': no attempts in {row}"));
            (offset, attempts)
        })
        .collect()
}

/// The durable attempt count of group `g`'s record at `offset` in partition 0, read straight
/// from the store (0 when no attempt was counted). The caller reopens the store through the
/// CLI first, so that any transaction a crash left behind is rolled back.
fn attempts(case: &str, dir: &DataDir, offset: u64) -> u64 {
    let conn =
        rusqlite::Connection::open(dir.store_path()).unwrap_or_else(|e| panic!("case '{case}': open the store: {e}"));
    let sql = "SELECT attempts FROM attempts WHERE grp = 'g' AND part = 0 AND log_offset = ?1";
    let counted: Option<u64> = conn
        .query_row(sql, [offset], |row| row.get(0))
        .map(Some)
        .or_else(|e| if e == rusqlite::Error::QueryReturnedNoRows { Ok(None) } else { Err(e) })
        .unwrap_or_else(|e| panic!("case '{case}': read the attempts of offset {offset}: {e}"));
    counted.unwrap_or(0)
}

/// One `consume` of the +5, poison, +5 log from the start.
struct ConsumeCase {
    name: &'static str,
    strategy: &'static str,
    /// Flags besides the group and the strategy.
    extra: &'static [&'static str],
    code: i32,
    /// A text stderr must contain (the whole of it is one line when the exit is 2).
    error: Option<&'static str>,
    /// (total, next_offset) afterwards.
    after: GroupState,
    /// The dead-letter table afterwards: (offset, attempts).
    dead_letters: &'static [(u64, u64)],
}

/// atomic-dlq moves the poison record aside after `--max-attempts` failures and moves on;
/// skip-poison moves on leaving no trace (only the missing dead letter in `status` shows it);
/// retry-forever never moves on; every other strategy refuses the payload outright.
#[test]
fn each_poison_strategy_meets_the_poison_record_its_own_way() {
    let cases = [
        ConsumeCase {
            name: "atomic-dlq dead-letters the record after two attempts and consumes the rest",
            strategy: "atomic-dlq",
            extra: &[],
            code: 0,
            error: None,
            after: (10, 3),
            dead_letters: &[(1, 2)],
        },
        ConsumeCase {
            name: "atomic-dlq with --max-attempts 1 gives up after the first failure",
            strategy: "atomic-dlq",
            extra: &["--max-attempts", "1"],
            code: 0,
            error: None,
            after: (10, 3),
            dead_letters: &[(1, 1)],
        },
        ConsumeCase {
            name: "atomic-dlq with --max-attempts 3 tries three times",
            strategy: "atomic-dlq",
            extra: &["--max-attempts", "3"],
            code: 0,
            error: None,
            after: (10, 3),
            dead_letters: &[(1, 3)],
        },
        ConsumeCase {
            name: "atomic-dlq with --batch 3 fetches the poison record as a batch of its own",
            strategy: "atomic-dlq",
            extra: &["--batch", "3"],
            code: 0,
            error: None,
            after: (10, 3),
            dead_letters: &[(1, 2)],
        },
        ConsumeCase {
            name: "skip-poison commits past the record silently: no dead letter",
            strategy: "skip-poison",
            extra: &[],
            code: 0,
            error: None,
            after: (10, 3),
            dead_letters: &[],
        },
        ConsumeCase {
            name: "retry-forever is stopped after 100 failures in a row and never passes the record",
            strategy: "retry-forever",
            extra: &[],
            code: FAILED,
            error: Some("error: stuck: partition 0 offset 1 failed 100 times in a row (retry-forever never gives up)"),
            after: (5, 1),
            dead_letters: &[],
        },
        ConsumeCase {
            name: "atomic-fenced does not handle poison: the payload is an error",
            strategy: "atomic-fenced",
            extra: &[],
            code: FAILED,
            error: Some("error: record 1 of partition 0 is not an 8-byte delta"),
            after: (5, 1),
            dead_letters: &[],
        },
        ConsumeCase {
            name: "atomic-dlq refuses --max-attempts 0",
            strategy: "atomic-dlq",
            extra: &["--max-attempts", "0"],
            code: FAILED,
            error: Some("--max-attempts"),
            after: (0, 0),
            dead_letters: &[],
        },
    ];
    for case in &cases {
        let name = case.name;
        let dir = data_dir(name, FIVE_POISON_FIVE);
        // The group exists from the start, so that a refused run still has a state to read.
        dir.claim(name, "g", 0, "o0");
        let mut args = vec!["--group", "g", "--strategy", case.strategy];
        args.extend_from_slice(case.extra);
        let output = dir.consume(name, &args, case.code);
        if let Some(error) = case.error {
            let text = stderr(&output);
            assert!(text.contains(error), "case '{name}': stderr should contain '{error}'\n{}", describe(&output));
            assert_eq!(text.lines().count(), 1, "case '{name}': the error should be one line\n{}", describe(&output));
        }
        assert_eq!(dir.state(name, "g"), case.after, "case '{name}': (total, next_offset)");
        assert_eq!(dead_letters(name, &dir), case.dead_letters, "case '{name}': the dead-letter table");
        let group = dir.group(name, "g");
        assert_eq!(
            group["dead_letters"].as_u64(),
            Some(case.dead_letters.len() as u64),
            "case '{name}': status reports the dead letters: {group}"
        );
    }
}

/// One crash of the first run, then a worker restart scripted command by command.
struct CrashCase {
    name: &'static str,
    strategy: &'static str,
    crash: &'static str,
    /// Whether the crash left SQLite's rollback journal behind (it died inside a transaction).
    journal_left: bool,
    /// (total, next_offset), counted attempts of offset 1 and dead letters after the crash.
    after_crash: (GroupState, u64, &'static [(u64, u64)]),
    /// The restarted owner's commands and their exact replies.
    restart: &'static [(&'static str, &'static str)],
    /// The same after the restart.
    after_restart: (GroupState, u64, &'static [(u64, u64)]),
}

/// The attempt count is durable and counted in the failed attempt's own transaction: a crash
/// after an attempt is not forgotten (the restart makes exactly the attempts that are left),
/// and a crash inside a transaction leaves nothing of it.
#[test]
fn failed_attempts_and_dead_letters_survive_crashes_exactly() {
    let cases = [
        CrashCase {
            name: "atomic-dlq crashes after its first failed attempt: one attempt is left",
            strategy: "atomic-dlq",
            crash: "apply-atomic:after@1",
            journal_left: false,
            after_crash: ((5, 1), 1, &[]),
            restart: &[
                ("fetch 0 1", "ok fetched 1"),
                ("apply-atomic 0 1", "ok failed 2"),
                ("dead-letter 0 1", "ok dead-lettered 2"),
                ("fetch 0 2", "ok fetched 1"),
                ("apply-atomic 0 2", "ok applied 1 skipped 0"),
            ],
            after_restart: ((10, 3), 2, &[(1, 2)]),
        },
        CrashCase {
            name: "atomic-dlq crashes inside its first attempt: the count rolls back with it",
            strategy: "atomic-dlq",
            crash: "apply-atomic:inside@1",
            journal_left: true,
            after_crash: ((5, 1), 0, &[]),
            restart: &[
                ("fetch 0 1", "ok fetched 1"),
                ("apply-atomic 0 1", "ok failed 1"),
                ("apply-atomic 0 1", "ok failed 2"),
                ("dead-letter 0 1", "ok dead-lettered 2"),
            ],
            after_restart: ((5, 2), 2, &[(1, 2)]),
        },
        CrashCase {
            name: "atomic-dlq crashes inside its dead-letter transaction: the exhausted record is \
                   dead-lettered on restart",
            strategy: "atomic-dlq",
            crash: "dead-letter:inside@1",
            journal_left: true,
            after_crash: ((5, 1), 2, &[]),
            restart: &[
                ("fetch 0 1", "ok fetched 1"),
                ("apply-atomic 0 1", "ok exhausted"),
                ("dead-letter 0 1", "ok dead-lettered 2"),
                ("fetch 0 2", "ok fetched 1"),
                ("apply-atomic 0 2", "ok applied 1 skipped 0"),
            ],
            after_restart: ((10, 3), 2, &[(1, 2)]),
        },
        CrashCase {
            name: "skip-poison crashes inside its blind commit: the restart fails and skips again",
            strategy: "skip-poison",
            crash: "commit-offset:inside@2",
            journal_left: true,
            after_crash: ((5, 1), 0, &[]),
            restart: &[
                ("fetch 0 1", "ok fetched 1"),
                ("apply-atomic 0 1", "ok failed 0"),
                ("commit-offset 0 2", "ok committed"),
                ("fetch 0 2", "ok fetched 1"),
                ("apply-atomic 0 2", "ok applied 1 skipped 0"),
            ],
            after_restart: ((10, 3), 0, &[]),
        },
    ];
    for case in &cases {
        let name = case.name;
        let dir = data_dir(name, FIVE_POISON_FIVE);
        dir.consume(name, &["--group", "g", "--strategy", case.strategy, "--crash-at", case.crash], CRASHED);
        assert_eq!(
            dir.journal_path().exists(),
            case.journal_left,
            "case '{name}': a rollback journal should be left exactly when the crash was inside a transaction"
        );
        let check = |when: &str, (state, counted, letters): (GroupState, u64, &[(u64, u64)])| {
            assert_eq!(dir.state(name, "g"), state, "case '{name}': (total, next_offset) {when}");
            assert_eq!(attempts(name, &dir, 1), counted, "case '{name}': the attempts counted for offset 1 {when}");
            assert_eq!(dead_letters(name, &dir), letters, "case '{name}': the dead-letter table {when}");
        };
        check("after the crash", case.after_crash);

        let mut worker = dir.worker(name, "g", "o0", case.strategy);
        for (command, reply) in case.restart {
            worker.expect(command, reply);
        }
        worker.quit();
        check("after the restart", case.after_restart);

        // A consume restart finishes whatever the scripted restart left, and changes nothing else.
        dir.consume(name, &["--group", "g", "--strategy", case.strategy], 0);
        let (_, counted, letters) = case.after_restart;
        check("after a final consume", ((10, 3), counted, letters));
    }
}

/// The case the mission names: `consume` crashes inside the dead-letter transaction, and the
/// restart, finding the attempts already counted, dead-letters the record without a third try.
#[test]
fn a_consume_crashed_inside_the_dead_letter_restarts_into_one_dead_letter() {
    let case = "atomic-dlq consume crashed at dead-letter:inside@1, restarted by consume";
    let dir = data_dir(case, FIVE_POISON_FIVE);
    dir.consume(case, &["--group", "g", "--strategy", "atomic-dlq", "--crash-at", "dead-letter:inside@1"], CRASHED);
    assert_eq!(dir.state(case, "g"), (5, 1), "case '{case}': nothing of the dead-letter transaction survives");
    assert!(dead_letters(case, &dir).is_empty(), "case '{case}': no dead letter after the crash");
    let output = dir.consume(case, &["--group", "g", "--strategy", "atomic-dlq"], 0);
    assert!(
        stdout(&output).contains("dead-lettered: partition 0 offset 1 after 2 failed attempt(s)"),
        "case '{case}': the restart reports its dead letter\n{}",
        describe(&output)
    );
    assert_eq!(dir.state(case, "g"), (10, 3), "case '{case}': (total, next_offset) after the restart");
    assert_eq!(attempts(case, &dir, 1), 2, "case '{case}': the restart made no third attempt");
    assert_eq!(dead_letters(case, &dir), [(1, 2)], "case '{case}': exactly one dead letter");
}

/// One `redrive` command after atomic-dlq consumed +5, poison, +5 (total 10, offset 1
/// dead-lettered), in sequence.
struct RedriveStep {
    what: &'static str,
    args: &'static [&'static str],
    code: i32,
    /// The one error line of a refused redrive.
    error: Option<&'static str>,
    /// The group's total afterwards.
    total: i64,
    /// The dead-letter table afterwards.
    dead_letters: &'static [(u64, u64)],
}

/// A redrive applies the corrected record in the same transaction that removes its dead
/// letter: it counts once, and repeating it is refused rather than counted again.
#[test]
fn a_redrive_applies_a_dead_letter_exactly_once() {
    let case = "atomic-dlq redrive of offset 1";
    let dir = data_dir(case, FIVE_POISON_FIVE);
    dir.consume(case, &["--group", "g", "--strategy", "atomic-dlq"], 0);
    let steps = [
        RedriveStep {
            what: "a redrive of a record that was never dead-lettered",
            args: &["--group", "g", "--partition", "0", "--offset", "0", "--delta", "7"],
            code: FAILED,
            error: Some("error: no dead letter for group g partition 0 offset 0"),
            total: 10,
            dead_letters: &[(1, 2)],
        },
        RedriveStep {
            what: "a redrive of a partition that does not exist",
            args: &["--group", "g", "--partition", "5", "--offset", "1", "--delta", "7"],
            code: FAILED,
            error: Some("error: partition 5 does not exist (the store has 1)"),
            total: 10,
            dead_letters: &[(1, 2)],
        },
        RedriveStep {
            what: "the redrive of offset 1 with delta 7",
            args: &["--group", "g", "--partition", "0", "--offset", "1", "--delta", "7"],
            code: 0,
            error: None,
            total: 17,
            dead_letters: &[],
        },
        RedriveStep {
            what: "a second redrive of offset 1",
            args: &["--group", "g", "--partition", "0", "--offset", "1", "--delta", "7"],
            code: FAILED,
            error: Some("error: no dead letter for group g partition 0 offset 1"),
            total: 17,
            dead_letters: &[],
        },
    ];
    for step in &steps {
        let name = format!("{case}: {}", step.what);
        let name = name.as_str();
        let output = dir.run("redrive", step.args);
        common::expect_code(name, "redrive", &output, step.code);
        if let Some(error) = step.error {
            assert_eq!(
                stderr(&output),
                format!("{error}\n"),
                "case '{name}': the one error line\n{}",
                describe(&output)
            );
            assert_eq!(stdout(&output), "", "case '{name}': a refused redrive prints nothing on stdout");
        }
        assert_eq!(dir.state(name, "g"), (step.total, 3), "case '{name}': (total, next_offset)");
        assert_eq!(dead_letters(name, &dir), step.dead_letters, "case '{name}': the dead-letter table");
    }
}

/// One line of a worker script.
#[derive(Clone, Copy, Debug)]
enum Line {
    /// A command and its exact reply.
    Send(&'static str, &'static str),
    /// A rebalance (`consumer claim`) of partition 0 to this owner, outside the worker.
    Claim(&'static str),
    /// The stage the worker's `state` reports for the batch at this offset of partition 0.
    Stage(u64, &'static str),
    /// The worker's `state` no longer holds partition 0.
    Dropped,
}

/// One worker session of o0 on +5, poison, +5.
struct WorkerCase {
    name: &'static str,
    strategy: &'static str,
    extra: &'static [&'static str],
    script: &'static [Line],
    /// (total, next_offset), counted attempts of offset 1 and dead letters at the end.
    after: (GroupState, u64, &'static [(u64, u64)]),
}

/// The protocol's replies for poison records follow the model step by step: each failed
/// attempt, the exhaustion, the dead letter, and the fence of a zombie's dead letter.
#[test]
fn the_worker_replies_to_poison_steps() {
    use Line::{Claim, Dropped, Send, Stage};
    const HEAD: [Line; 3] = [
        Send("fetch 0 0", "ok fetched 1"),
        Send("apply-atomic 0 0", "ok applied 1 skipped 0"),
        Send("fetch 0 1", "ok fetched 1"),
    ];
    let cases = [
        WorkerCase {
            name: "atomic-dlq with max 2: failed 1, failed 2, dead-lettered 2",
            strategy: "atomic-dlq",
            extra: &[],
            script: &[
                HEAD[0],
                HEAD[1],
                HEAD[2],
                Stage(1, "fetched"),
                Send("apply-atomic 0 1", "ok failed 1"),
                Send("dead-letter 0 1", "err step 'dead-letter 0 1' is not enabled (enabled: apply-atomic 0 1)"),
                Send("apply-atomic 0 1", "ok failed 2"),
                Stage(1, "exhausted"),
                Send("dead-letter 0 1", "ok dead-lettered 2"),
                Send("fetch 0 2", "ok fetched 1"),
                Send("apply-atomic 0 2", "ok applied 1 skipped 0"),
            ],
            after: ((10, 3), 2, &[(1, 2)]),
        },
        WorkerCase {
            name: "atomic-dlq with max 3: three failures before the dead letter",
            strategy: "atomic-dlq",
            extra: &["--max-attempts", "3"],
            script: &[
                HEAD[0],
                HEAD[1],
                HEAD[2],
                Send("apply-atomic 0 1", "ok failed 1"),
                Send("apply-atomic 0 1", "ok failed 2"),
                Stage(1, "fetched"),
                Send("apply-atomic 0 1", "ok failed 3"),
                Send("dead-letter 0 1", "ok dead-lettered 3"),
            ],
            after: ((5, 2), 3, &[(1, 3)]),
        },
        WorkerCase {
            name: "atomic-dlq zombie: the dead letter after a claim to o1 is fenced",
            strategy: "atomic-dlq",
            extra: &[],
            script: &[
                HEAD[0],
                HEAD[1],
                HEAD[2],
                Send("apply-atomic 0 1", "ok failed 1"),
                Send("apply-atomic 0 1", "ok failed 2"),
                Claim("o1"),
                Send("dead-letter 0 1", "ok fenced 2 3"),
                Dropped,
            ],
            after: ((5, 1), 2, &[]),
        },
        WorkerCase {
            name: "atomic-dlq zombie: a failed attempt after a claim to o1 is fenced and not counted",
            strategy: "atomic-dlq",
            extra: &[],
            script: &[
                HEAD[0],
                HEAD[1],
                HEAD[2],
                Send("apply-atomic 0 1", "ok failed 1"),
                Claim("o1"),
                Send("apply-atomic 0 1", "ok fenced 2 3"),
                Dropped,
            ],
            after: ((5, 1), 1, &[]),
        },
        WorkerCase {
            name: "skip-poison: one failure, then a blind commit past the record",
            strategy: "skip-poison",
            extra: &[],
            script: &[
                HEAD[0],
                HEAD[1],
                HEAD[2],
                Send("apply-atomic 0 1", "ok failed 0"),
                Stage(1, "exhausted"),
                Send("commit-offset 0 2", "ok committed"),
            ],
            after: ((5, 2), 0, &[]),
        },
        WorkerCase {
            name: "skip-poison zombie: the blind commit lands despite the claim to o1",
            strategy: "skip-poison",
            extra: &[],
            script: &[
                HEAD[0],
                HEAD[1],
                HEAD[2],
                Send("apply-atomic 0 1", "ok failed 0"),
                Claim("o1"),
                Send("commit-offset 0 2", "ok committed"),
            ],
            after: ((5, 2), 0, &[]),
        },
        WorkerCase {
            name: "retry-forever: every attempt fails and nothing is counted",
            strategy: "retry-forever",
            extra: &[],
            script: &[
                HEAD[0],
                HEAD[1],
                HEAD[2],
                Send("apply-atomic 0 1", "ok failed 0"),
                Send("apply-atomic 0 1", "ok failed 0"),
                Send("apply-atomic 0 1", "ok failed 0"),
                Stage(1, "fetched"),
            ],
            after: ((5, 1), 0, &[]),
        },
    ];
    for case in &cases {
        let name = case.name;
        let dir = data_dir(name, FIVE_POISON_FIVE);
        let mut worker = dir.worker_with(name, "g", "o0", case.strategy, case.extra);
        for line in case.script {
            match *line {
                Send(command, reply) => worker.expect(command, reply),
                Claim(owner) => dir.claim(name, "g", 0, owner),
                Stage(offset, stage) => {
                    let state = worker.state();
                    let record = &state["leases"]["0"]["records"][offset.to_string()];
                    assert_eq!(record["stage"], stage, "case '{name}': the stage of the batch at {offset}: {state}");
                    let poison = offset == 1;
                    let expected = if poison { serde_json::json!([null]) } else { serde_json::json!([5]) };
                    assert_eq!(
                        record["deltas"], expected,
                        "case '{name}': the deltas of the batch at {offset}: {state}"
                    );
                }
                Dropped => {
                    let state = worker.state();
                    assert!(
                        state["leases"].get("0").is_none(),
                        "case '{name}': the fenced owner should drop partition 0: {state}"
                    );
                }
            }
        }
        worker.quit();
        let (state, counted, letters) = case.after;
        assert_eq!(dir.state(name, "g"), state, "case '{name}': (total, next_offset)");
        assert_eq!(attempts(name, &dir, 1), counted, "case '{name}': the attempts counted for offset 1");
        assert_eq!(dead_letters(name, &dir), letters, "case '{name}': the dead-letter table");
    }
}

/// The dead-letter and attempts tables are schema version 2: a version-1 store is refused
/// with one line rather than read without them.
#[test]
fn a_version_1_store_is_refused() {
    let case = "a store at schema version 1";
    let dir = data_dir(case, &[Record::Delta(5)]);
    let conn =
        rusqlite::Connection::open(dir.store_path()).unwrap_or_else(|e| panic!("case '{case}': open the store: {e}"));
    conn.pragma_update(None, "user_version", 1).unwrap_or_else(|e| panic!("case '{case}': set user_version: {e}"));
    drop(conn);
    for (subcommand, args) in
        [("status", &[][..]), ("dead-letters", &[][..]), ("consume", &["--group", "g", "--strategy", "atomic-dlq"][..])]
    {
        let output = dir.run(subcommand, args);
        common::expect_code(case, subcommand, &output, FAILED);
        let expected = format!(
            "error: database {} has schema version 1, this build reads version {}\n",
            dir.store_path().display(),
            consumer::store::SCHEMA_VERSION
        );
        assert_eq!(
            stderr(&output),
            expected,
            "case '{case}': {subcommand} refuses the store in one line\n{}",
            describe(&output)
        );
    }
}
