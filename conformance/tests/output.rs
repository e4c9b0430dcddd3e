//! `conformance replay` and `test --json` with their stdout into `/dev/full` or a closed pipe
//! exit 5 with one line on stderr, never 101 (README "Exit codes").

#[path = "../../tests/support/failed_output.rs"]
mod failed_output;

use failed_output::{expect_output_failed, run_into, SINKS};
use std::process::Command;

#[test]
fn replay_and_test_json_exit_5_when_their_output_cannot_be_written() {
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/traces/acks-all--log-end.json");
    let out = concat!(env!("CARGO_TARGET_TMPDIR"), "/output-test-json");
    let walks = ["--strategy", "atomic-fenced", "--walks", "2", "--seed", "3", "--mode", "in-process", "--out", out];
    let cases: [(&str, Vec<&str>); 2] = [
        ("conformance replay", vec!["replay", trace]),
        ("conformance test --json", [&["test", "--json"][..], &walks].concat()),
    ];
    for (case, args) in cases {
        for sink in SINKS {
            let mut command = Command::new(env!("CARGO_BIN_EXE_conformance"));
            command.args(&args);
            expect_output_failed(case, sink, &run_into(command, sink));
        }
    }
}
