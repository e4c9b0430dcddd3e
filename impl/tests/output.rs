//! A failed write to stdout (a closed pipe, a full disk) never panics: the command exits 5
//! with one line on stderr, and the work before the write is done (README "Exit codes").
//! Data-driven: every row runs into `/dev/full` and into a pipe whose reader is closed.

#[allow(dead_code)]
mod common;

use common::{describe, DataDir};
use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The exit status of a command whose output could not be written.
const OUTPUT_FAILED: i32 = 5;

/// Each test's commands are quick; a hang fails the test after this long.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Where a command's stdout goes.
#[derive(Clone, Copy, Debug)]
enum Sink {
    /// `/dev/full`: every write fails with ENOSPC.
    Full,
    /// A pipe whose read end is closed before the command starts: every write fails with EPIPE.
    ClosedPipe,
}

const SINKS: [Sink; 2] = [Sink::Full, Sink::ClosedPipe];

impl Sink {
    fn stdout(self) -> Stdio {
        match self {
            Sink::Full => Stdio::from(
                std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full opens for writing"),
            ),
            Sink::ClosedPipe => {
                let (reader, writer) = std::io::pipe().expect("a pipe");
                drop(reader);
                Stdio::from(writer)
            }
        }
    }

    /// The error the failed write reports.
    fn os_error(self) -> &'static str {
        match self {
            Sink::Full => "(os error 28)",
            Sink::ClosedPipe => "(os error 32)",
        }
    }
}

/// Runs `command` with its stdout into `sink`, within `TIMEOUT`.
fn run_into(mut command: Command, sink: Sink) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(sink.stdout())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the consumer binary starts");
    let mut pipe = child.stderr.take().expect("stderr is piped");
    let stderr = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    });
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child's status can be read") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} still ran after {TIMEOUT:?}: killed (a hang)");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output { status, stdout: Vec::new(), stderr: stderr.join().expect("stderr is read") }
}

/// The command exited `OUTPUT_FAILED` (never 101, a panic) with one line on stderr naming
/// stdout and the failed write's error.
fn expect_output_failed(case: &str, sink: Sink, output: &Output) {
    assert_eq!(output.status.code(), Some(OUTPUT_FAILED), "case '{case}' into {sink:?}: {}", describe(output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "case '{case}' into {sink:?}: one line on stderr, got {stderr:?}");
    assert!(
        lines[0].starts_with("error: cannot write to standard output: ")
            && lines[0].contains(sink.os_error())
            && lines[0].ends_with("; the work before it is done"),
        "case '{case}' into {sink:?}: {:?}",
        lines[0]
    );
}

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
