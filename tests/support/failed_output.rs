//! Shared by the three tools' output tests (`impl/tests/output.rs`, `model/tests/output.rs`,
//! `conformance/tests/output.rs`): a command run with its stdout into `/dev/full` or into a
//! pipe whose reader is closed, and the check that it exits 5 with one line on stderr, never
//! 101 (a panic).

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The exit status of a command whose output could not be written.
pub const OUTPUT_FAILED: i32 = 5;

/// Each command is quick; a hang fails the test after this long.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Where a command's stdout goes.
#[derive(Clone, Copy, Debug)]
pub enum Sink {
    /// `/dev/full`: every write fails with ENOSPC.
    Full,
    /// A pipe whose read end is closed before the command starts: every write fails with EPIPE.
    ClosedPipe,
}

pub const SINKS: [Sink; 2] = [Sink::Full, Sink::ClosedPipe];

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
    pub fn os_error(self) -> &'static str {
        match self {
            Sink::Full => "(os error 28)",
            Sink::ClosedPipe => "(os error 32)",
        }
    }
}

/// Runs `command` with its stdout into `sink`, within `TIMEOUT`.
pub fn run_into(mut command: Command, sink: Sink) -> Output {
    let mut child =
        command.stdin(Stdio::null()).stdout(sink.stdout()).stderr(Stdio::piped()).spawn().expect("the binary starts");
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

/// The command exited `OUTPUT_FAILED` (never 101, a panic) and its last line on stderr, the
/// only error line (the model's progress lines may come before it), names stdout and the
/// failed write's error.
pub fn expect_output_failed(case: &str, sink: Sink, output: &Output) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(OUTPUT_FAILED), "case '{case}' into {sink:?}: {stderr}");
    let errors: Vec<&str> =
        stderr.lines().filter(|line| line.starts_with("error") || line.contains("panicked")).collect();
    assert_eq!(errors.len(), 1, "case '{case}' into {sink:?}: one error line on stderr, got {stderr:?}");
    assert_eq!(stderr.lines().last(), Some(errors[0]), "case '{case}' into {sink:?}: the error line is the last");
    assert!(
        errors[0].starts_with("error: cannot write to standard output: ")
            && errors[0].contains(sink.os_error())
            && errors[0].ends_with("; the work before it is done"),
        "case '{case}' into {sink:?}: {:?}",
        errors[0]
    );
}
