//! The lane's bad input (`cargo test -p kafka-lane --features kafka`): an address in use, a
//! broker that does not answer, a topic that does not exist. Each is one line on standard
//! error, exit 2, and no owner process left running.
#![cfg(feature = "kafka")]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LANE: &str = env!("CARGO_BIN_EXE_kafka-lane");

/// A bad-input case: the arguments, and what its one line must say.
struct Case {
    args: Vec<String>,
    says: &'static str,
}

/// Runs `kafka-lane ARGS`; returns its exit code and standard error.
fn run(args: &[String]) -> (Option<i32>, String) {
    let started = Instant::now();
    let output = Command::new(LANE).args(args).output().expect("kafka-lane runs");
    assert!(started.elapsed() < Duration::from_secs(30), "kafka-lane {args:?} took {:?}", started.elapsed());
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// The lines of `stderr` that are the lane's own (librdkafka may log its failed connection
/// attempts before the error).
fn lane_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|line| line.starts_with("kafka-lane:")).collect()
}

/// Owner processes still running whose command line names `marker`.
fn owners_running(marker: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
        .filter(|cmdline| cmdline.contains("kafka-lane") && cmdline.contains(" owner ") && cmdline.contains(marker))
        .count()
}

/// A broker in its own process (`kafka-lane broker`), killed when dropped.
struct BrokerProcess {
    child: Child,
    bootstrap: String,
}

impl BrokerProcess {
    fn start(topic: &str) -> BrokerProcess {
        let mut child = Command::new(LANE)
            .args(["broker", "--create-topic", topic])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("kafka-lane broker starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("the broker prints its address");
        let bootstrap = line.trim().strip_prefix("listening on ").expect("listening on ADDRESS").to_string();
        BrokerProcess { child, bootstrap }
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    // A port another process listens on.
    let taken = TcpListener::bind("127.0.0.1:0").expect("a free port");
    let taken_address = taken.local_addr().expect("bound").to_string();
    // A port nothing listens on: bound, then released.
    let closed_address =
        TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("bound").to_string();
    let broker = BrokerProcess::start("present");
    let cases = [
        Case { args: strings(&["broker", "--listen", &taken_address]), says: "is in use by another process" },
        Case {
            args: strings(&["load", "--bootstrap", &closed_address, "--topic", "present", "--records", "12"]),
            says: "cannot connect to a Kafka broker at",
        },
        Case {
            args: strings(&["load", "--bootstrap", &broker.bootstrap, "--topic", "absent", "--records", "12"]),
            says: "the topic 'absent' does not exist on the broker at",
        },
        Case {
            args: strings(&["load", "--bootstrap", &broker.bootstrap, "--records", "12"]),
            says: "pass --topic with --bootstrap",
        },
        Case {
            args: strings(&["load", "--records", "10", "--partitions", "4"]),
            says: "--records 10 must be a positive multiple of --partitions 4",
        },
        Case {
            args: strings(&["load", "--strategy", "commit-first"]),
            says: "the load test runs atomic-fenced or effect-first",
        },
    ];
    for case in &cases {
        let (code, stderr) = run(&case.args);
        let lines = lane_lines(&stderr);
        assert_eq!(code, Some(2), "kafka-lane {:?}: exit {code:?}, stderr:\n{stderr}", case.args);
        assert_eq!(lines.len(), 1, "kafka-lane {:?}: one line, got:\n{stderr}", case.args);
        assert!(
            lines[0].contains(case.says),
            "kafka-lane {:?}: {:?} does not say {:?}",
            case.args,
            lines[0],
            case.says
        );
        assert_eq!(owners_running(&broker.bootstrap) + owners_running(&closed_address), 0, "owners left running");
    }
    drop(taken);
}
