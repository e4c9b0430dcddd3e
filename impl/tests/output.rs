//! A failed write to stdout (a closed pipe, a full disk) never panics: the command exits 5
//! with one line on stderr, and the work before the write is done (docs/errors.md "Exit codes").
//! Data-driven: every row runs into `/dev/full` and into a pipe whose reader is closed.

mod common;

#[path = "../../tests/support/failed_output.rs"]
mod failed_output;

use common::{describe, DataDir};
use failed_output::{expect_output_failed, run_into, SINKS};

/// The log's end of partition 0, from `status --json`.
fn log_end(dir: &DataDir) -> u64 {
    dir.status("log end")["log"][0]["end"].as_u64().expect("status --json has the log's end")
}

#[test]
fn every_reading_command_exits_5_when_its_output_cannot_be_written() {
    let dir = DataDir::with_records("output", 1, 2);
    let rows: &[(&str, &[&str])] = &[
        ("status", &[]),
        ("status", &["--json"]),
        ("read-output", &[]),
        ("read-output", &["--json"]),
        ("emails", &[]),
        ("emails", &["--json"]),
        ("index", &[]),
        ("index", &["--json"]),
    ];
    for (subcommand, args) in rows {
        for sink in SINKS {
            let case = format!("{subcommand} {}", args.join(" "));
            expect_output_failed(&case, sink, &run_into(dir.command(subcommand, args), sink));
        }
    }
    assert_eq!(log_end(&dir), 2, "reading commands append nothing");
}

#[test]
fn an_append_whose_output_fails_is_durable_and_its_idempotent_retry_is_a_duplicate() {
    let dir = DataDir::new("append output", 1);
    for (sink, end) in SINKS.into_iter().zip(1..) {
        expect_output_failed("append", sink, &run_into(dir.command("append", &["--delta", "1"]), sink));
        assert_eq!(log_end(&dir), end, "append into {sink:?}: the record was appended before the output failed");
    }
    for (sink, sequence) in SINKS.into_iter().zip(0..) {
        let args = ["--delta", "1", "--producer-id", "7", "--producer-epoch", "0", "--sequence", &sequence.to_string()];
        let before = log_end(&dir);
        expect_output_failed("append --producer-id", sink, &run_into(dir.command("append", &args), sink));
        assert_eq!(log_end(&dir), before + 1, "idempotent append into {sink:?}: appended");
        // The producer that took exit 5 for a failure retries with its producer id: nothing
        // is appended twice.
        let retry = dir.run("append", &args);
        assert_eq!(retry.status.code(), Some(0), "retry after {sink:?}: {}", describe(&retry));
        let said = String::from_utf8_lossy(&retry.stdout);
        assert!(said.starts_with("duplicate of offsets"), "retry after {sink:?}: {said:?}");
        assert_eq!(log_end(&dir), before + 1, "retry after {sink:?}: nothing appended");
    }
}
