//! The consumer's hardening against bad input, as child processes: an overflowing total refused in its
//! transaction with the store still readable, `init` killed at seeded random moments (no store,
//! or a whole one, and `init` finishes it), concurrent `init`s (the loser: one line), concurrent
//! appenders waiting for the log's writer lock, and names refused. The exact lines of bad input
//! are the table of docs/errors.md (`cli.rs`); PostgreSQL's rows are `hardening_pg.rs`.

mod common;

use common::{describe, expect_code, stderr, DataDir, FAILED, REFUSED};
use consumer::log::SplitMix64;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The line of an overflowing record `offset` after the other one brought the total to
/// `i64::MAX`.
fn overflow_line(offset: u64) -> String {
    format!(
        "error: overflow: group g partition 0 offset {offset}: total 9223372036854775807 + delta 9223372036854775807 \
         = 18446744073709551614 does not fit a 64-bit total; nothing of the transaction was committed\n"
    )
}

/// One strategy (and batch) meeting two records of `i64::MAX`: the total it commits before the
/// refusal (record 0's effect, or nothing when both are one transaction).
struct OverflowCase {
    strategy: &'static str,
    batch: &'static str,
    total: i64,
    /// The record whose delta overflows: 1, or 0 where parallel-max applies its window's
    /// records last first.
    offset: u64,
    /// The exit status of a second `consume`: refused again, or 0 for commit-first and
    /// parallel-max, whose checkpoint passed the refused record (their losses, as their
    /// verdicts say).
    again: i32,
}

/// Every effect write of both kinds of sequence (`add_effect`, `apply_stamped`,
/// `apply_deduped`, `apply_atomic` under each guard, `commit_txn`, the parallel effects) refuses
/// the overflow inside its transaction, exits 4 with one line, and leaves a store that `status`
/// reads (it failed for every group after SQLite stored the sum as a REAL); a second `consume`
/// is refused the same way and changes nothing.
#[test]
fn an_overflowing_total_is_refused_in_its_transaction_and_the_store_stays_readable() {
    let max = i64::MAX;
    let cases = [
        OverflowCase { strategy: "atomic-fenced", batch: "1", total: max, offset: 1, again: REFUSED },
        OverflowCase { strategy: "atomic-fenced", batch: "2", total: 0, offset: 1, again: REFUSED },
        OverflowCase { strategy: "atomic-cas", batch: "1", total: max, offset: 1, again: REFUSED },
        OverflowCase { strategy: "atomic", batch: "1", total: max, offset: 1, again: REFUSED },
        OverflowCase { strategy: "effect-first", batch: "1", total: max, offset: 1, again: REFUSED },
        OverflowCase { strategy: "commit-first", batch: "1", total: max, offset: 1, again: 0 },
        OverflowCase { strategy: "offset-stamp", batch: "1", total: max, offset: 1, again: REFUSED },
        OverflowCase { strategy: "dedup-separate", batch: "1", total: max, offset: 1, again: REFUSED },
        OverflowCase { strategy: "dedup-atomic", batch: "1", total: max, offset: 1, again: REFUSED },
        OverflowCase { strategy: "parallel-max", batch: "1", total: max, offset: 0, again: 0 },
        OverflowCase { strategy: "txn-fenced", batch: "1", total: max, offset: 1, again: REFUSED },
    ];
    for case in &cases {
        let name = format!("{} batch {}", case.strategy, case.batch);
        let dir = DataDir::new(&name, 1);
        dir.append(&name, 0, max, 2);
        let args = ["--group", "g", "--strategy", case.strategy, "--batch", case.batch];
        let first = dir.consume(&name, &args, REFUSED);
        assert_eq!(stderr(&first), overflow_line(case.offset), "case '{name}'");
        let before = dir.group(&name, "g");
        assert_eq!(before["total"].as_i64(), Some(case.total), "case '{name}': {before}");
        let again = dir.consume(&name, &args, case.again);
        if case.again == REFUSED {
            assert_eq!(stderr(&again), overflow_line(case.offset), "case '{name}': the second consume");
        }
        let after = dir.group(&name, "g");
        assert_eq!(
            (&after["total"], &after["progress"][0]["next_offset"]),
            (&before["total"], &before["progress"][0]["next_offset"]),
            "case '{name}'"
        );
        // The plain status too, which read the REAL back and failed.
        expect_code(&name, "status", &dir.run("status", &[]), 0);
    }
}

/// A variant of `init` that a kill may interrupt, and its arguments.
const INIT_VARIANTS: [&[&str]; 3] = [&[], &["--partitions", "2", "--journal", "wal"], &["--replicas", "2"]];
/// Kills per variant.
const KILLS: usize = 10;

fn init(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(common::BIN);
    command.arg("init").arg("--dir").arg(dir).args(args);
    command
}

fn status(dir: &Path) -> Output {
    Command::new(common::BIN).arg("status").arg("--dir").arg(dir).output().expect("the consumer binary starts")
}

/// `init` SIGKILLed at seeded random moments within its own duration leaves either no store
/// (`status`: "not initialised", exit 2, one line), and then `init` finishes the directory,
/// or a whole one (`status` exit 0, and `init` refuses it); never a half schema that `status`
/// calls not initialised while `init` says it exists.
#[test]
fn init_killed_at_random_moments_leaves_no_store_or_a_whole_one_and_init_finishes_it() {
    let mut random = SplitMix64::new(12);
    let mut interrupted = 0;
    for (variant, args) in INIT_VARIANTS.iter().enumerate() {
        let scratch = tempfile::tempdir().expect("a scratch directory");
        let started = Instant::now();
        let whole = init(&scratch.path().join("timed"), args).output().expect("the consumer binary starts");
        assert_eq!(whole.status.code(), Some(0), "{}", describe(&whole));
        let duration_us = started.elapsed().as_micros() as u64;
        for kill in 0..KILLS {
            let case = format!("init {args:?}, kill {kill}");
            let dir = scratch.path().join(format!("d{variant}-{kill}"));
            let mut child = init(&dir, args).stdout(Stdio::null()).spawn().expect("the consumer binary starts");
            std::thread::sleep(Duration::from_micros(random.below(duration_us + 1)));
            let _ = child.kill();
            let _ = child.wait();
            let found = status(&dir);
            let complete = match found.status.code() {
                Some(0) => true,
                Some(FAILED) => {
                    let line = format!(
                        "error: database {}/store.db is not initialised (run `consumer init`)\n",
                        dir.display()
                    );
                    assert_eq!(stderr(&found), line, "case '{case}'");
                    false
                }
                _ => panic!("case '{case}': status after the kill\n{}", describe(&found)),
            };
            interrupted += usize::from(!complete);
            let again = init(&dir, args).output().expect("the consumer binary starts");
            if complete {
                assert_eq!(again.status.code(), Some(FAILED), "case '{case}'\n{}", describe(&again));
                assert_eq!(stderr(&again), format!("error: database {}/store.db exists already\n", dir.display()));
            } else {
                assert_eq!(again.status.code(), Some(0), "case '{case}': init finishes it\n{}", describe(&again));
            }
            expect_code(&case, "status after init", &status(&dir), 0);
        }
    }
    let kills = INIT_VARIANTS.len() * KILLS;
    eprintln!("{interrupted} of {kills} kills left no store; init finished every one of them");
    assert!(interrupted > 0, "no kill fell inside an init: the test tested nothing");
}

/// Two `init`s of one directory at once: one initialises it, the other waits for it and is
/// refused in one line (it printed 22 lines holding the schema's SQL).
#[test]
fn of_two_concurrent_inits_the_loser_prints_one_line() {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    for round in 0..5 {
        let dir = scratch.path().join(format!("d{round}"));
        let racers: Vec<_> = (0..2)
            .map(|_| init(&dir, &[]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("starts"))
            .collect();
        let mut outputs: Vec<Output> =
            racers.into_iter().map(|racer| racer.wait_with_output().expect("the racer ends")).collect();
        outputs.sort_by_key(|output| output.status.code());
        let [winner, loser] = &outputs[..] else { unreachable!("two racers") };
        assert_eq!(winner.status.code(), Some(0), "round {round}\n{}", describe(winner));
        assert_eq!(loser.status.code(), Some(FAILED), "round {round}\n{}", describe(loser));
        assert_eq!(stderr(loser), format!("error: database {}/store.db exists already\n", dir.display()));
        expect_code("concurrent init", "status", &status(&dir), 0);
    }
}

/// Appenders in separate processes queue on the log's writer lock for up to `--busy-timeout`
/// (it was a try-lock: 71 of 120 such appends failed at once), and every record lands once.
#[test]
fn concurrent_appenders_wait_for_the_writer_lock_and_all_succeed() {
    const APPENDERS: usize = 4;
    const APPENDS: usize = 15;
    let dir = DataDir::new("concurrent appends", 1);
    let appenders: Vec<_> = (0..APPENDERS)
        .map(|_| {
            let path = dir.path.clone();
            std::thread::spawn(move || {
                (0..APPENDS)
                    .map(|_| {
                        Command::new(common::BIN)
                            .args(["append", "--delta", "1", "--busy-timeout", "30", "--dir"])
                            .arg(&path)
                            .output()
                            .expect("the consumer binary starts")
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for appender in appenders {
        for output in appender.join().expect("the appender ran") {
            expect_code("concurrent appends", "append --busy-timeout 30", &output, 0);
        }
    }
    let status = dir.status("concurrent appends");
    assert_eq!(status["log"][0]["end"].as_u64(), Some((APPENDERS * APPENDS) as u64), "{status}");
    dir.consume("concurrent appends", &["--group", "g", "--strategy", "atomic-fenced"], 0);
    assert_eq!(dir.state("concurrent appends", "g"), ((APPENDERS * APPENDS) as i64, (APPENDERS * APPENDS) as u64));
}

/// The name bounds are inclusive and printable letters of any script are names: a 64-byte
/// group, a non-ASCII owner; `status` gives the group one line and each partition one.
#[test]
fn names_of_64_bytes_and_of_any_script_are_accepted() {
    let case = "names";
    let dir = DataDir::with_records(case, 5, 2);
    let group = "g".repeat(consumer::store::NAME_BYTES_MAX);
    dir.claim(case, &group, 0, "owner-é");
    dir.consume(case, &["--group", &group, "--owner", "owner-é", "--strategy", "atomic-fenced"], 0);
    assert_eq!(dir.state(case, &group), (10, 2));
    let output = dir.run("status", &[]);
    expect_code(case, "status", &output, 0);
    let lines: Vec<String> = common::stdout(&output).lines().map(str::to_string).collect();
    assert!(lines.iter().any(|line| line.starts_with(&format!("group {group}: total 10"))), "{lines:?}");
    assert!(lines.iter().any(|line| line.contains("owner owner-é")), "{lines:?}");
    for bad in ["", "a\nb", "a b", "tab\there", "bell\u{7}"] {
        assert!(consumer::store::check_name(bad).is_err(), "{bad:?} is not a name");
    }
    assert!(consumer::store::check_name(&"g".repeat(consumer::store::NAME_BYTES_MAX + 1)).is_err());
}

/// Every `--json` document names the tool that wrote it and its version, as the model's and
/// the conformance binary's do: `status`, `dead-letters`, `resets`, `read-output`, `emails`, `index`.
#[test]
fn every_json_output_names_the_tool_and_its_version() {
    let case = "json tool";
    let dir = DataDir::with_records(case, 5, 1);
    let tool = format!("onceproof-consumer {}", env!("CARGO_PKG_VERSION"));
    let commands: [(&str, &[&str], &str); 6] = [
        ("status", &["--json"], "groups"),
        ("dead-letters", &["--json"], "dead_letters"),
        ("resets", &["--json"], "resets"),
        ("read-output", &["--json"], "records"),
        ("emails", &["--json"], "emails"),
        ("index", &["--json"], "index"),
    ];
    for (subcommand, args, field) in commands {
        let output = dir.run(subcommand, args);
        expect_code(case, subcommand, &output, 0);
        let document: serde_json::Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{subcommand} --json is not JSON: {e}\n{}", describe(&output)));
        assert_eq!(document["tool"].as_str(), Some(tool.as_str()), "{subcommand} --json: {document}");
        assert!(document[field].is_array(), "{subcommand} --json has no array '{field}': {document}");
    }
}
