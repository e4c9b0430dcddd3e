//! `model check` with its stdout into `/dev/full` or a closed pipe exits 5 with one line on
//! stderr, never 101 (docs/errors.md "Exit codes").

#[path = "../../tests/support/failed_output.rs"]
mod failed_output;

use failed_output::{expect_output_failed, run_into, SINKS};
use std::process::Command;

#[test]
fn check_exits_5_when_its_output_cannot_be_written() {
    let rows: &[&[&str]] = &[
        &["--strategy", "effect-first", "--groups", "1", "--records", "2"],
        &["--strategy", "effect-first", "--groups", "1", "--records", "2", "--json"],
    ];
    for args in rows {
        for sink in SINKS {
            let mut command = Command::new(env!("CARGO_BIN_EXE_model"));
            command.arg("check").args(*args);
            let case = format!("model check {}", args.join(" "));
            expect_output_failed(&case, sink, &run_into(command, sink));
        }
    }
}
