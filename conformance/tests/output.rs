//! `conformance replay` with its stdout into `/dev/full` or a closed pipe exits 5 with one
//! line on stderr, never 101 (README "Exit codes").

#[path = "../../tests/support/failed_output.rs"]
mod failed_output;

use failed_output::{expect_output_failed, run_into, SINKS};
use std::process::Command;

#[test]
fn replay_exits_5_when_its_output_cannot_be_written() {
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/traces/acks-all--log-end.json");
    for sink in SINKS {
        let mut command = Command::new(env!("CARGO_BIN_EXE_conformance"));
        command.arg("replay").arg(trace);
        expect_output_failed("conformance replay", sink, &run_into(command, sink));
    }
}
