//! The delivery lab's replication schedules (seed 001, spec.md §3.2 and §10 "Replication") as
//! real child processes on a replicated log (`init --replicas 2`): each schedule is a list of
//! commands, their exit statuses and what they print, and the replication state `status
//! --json` shows between them. An `acks=all` append waits for the high watermark, so it runs
//! in the background while the steps that answer it run.

mod common;

use common::{describe, expect_code, DataDir, FAILED, REFUSED};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

/// The delta every append of these schedules carries.
const DELTA: &str = "--delta=5";
/// How long a schedule waits for a background append to reach the leader.
const WAIT_MS_MAX: u64 = 20_000;

/// One step of a schedule.
enum Step {
    /// `consumer SUBCOMMAND ARGS...` to completion: its exit status, and lines its stdout or
    /// stderr must contain.
    Run(&'static str, &'static [&'static str], i32, &'static [&'static str]),
    /// `consumer SUBCOMMAND ARGS...` in the background (an append that waits, a follower).
    Spawn(&'static str, &'static [&'static str]),
    /// Waits until the leader's replica of partition 0 ends at this offset.
    LeaderEnd(u64),
    /// Waits for the background command: its exit status and what it printed.
    Join(i32, &'static [&'static str]),
    /// Kills the background command.
    Kill,
    /// Partition 0's replication as `status --json` shows it.
    State { leader: Option<u64>, high_watermark: u64, isr: &'static [u64], ends: &'static [u64] },
    /// `consume` of group `g` (atomic-fenced): exit status, the group's total afterwards.
    Consume(i32, i64),
}

use Step::{Consume, Join, Kill, LeaderEnd, Run, Spawn, State};

const ACKS_1: &[&str] = &[DELTA, "--acks", "1"];
const ACKS_ALL_2: &[&str] = &[DELTA, "--acks", "all", "--min-insync-replicas", "2"];
const ACKS_ALL_1: &[&str] = &[DELTA, "--acks", "all", "--min-insync-replicas", "1"];
const RETRY_ALL_2: &[&str] = &[
    DELTA,
    "--acks",
    "all",
    "--min-insync-replicas",
    "2",
    "--producer-id",
    "7",
    "--producer-epoch",
    "0",
    "--sequence",
    "0",
];

/// The schedules: (name, steps). Every one starts from `init --replicas 2` (broker 0 leads,
/// ISR {0, 1}).
const SCHEDULES: &[(&str, &[Step])] = &[
    (
        // The lab's Lab 1: an acks=1 write acknowledged by the leader alone is lost when the
        // leader fails before the follower fetched it.
        "acks=1: the acknowledged write is lost by the failover",
        &[
            Run("append", ACKS_1, 0, &["acknowledged offset: 0", "consumer-visible end (HW): 0"]),
            State { leader: Some(0), high_watermark: 0, isr: &[0, 1], ends: &[1, 0] },
            Run(
                "fail-leader",
                &[],
                0,
                &["broker 1 is promoted", "its log did not contain offset 0", "records after failover: 0"],
            ),
            State { leader: Some(1), high_watermark: 0, isr: &[1], ends: &[1, 0] },
            Consume(0, 0),
        ],
    ),
    (
        "acks=all, min.insync.replicas 2: the append waits for the follower; the failover keeps it",
        &[
            Spawn("append", ACKS_ALL_2),
            LeaderEnd(1),
            State { leader: Some(0), high_watermark: 0, isr: &[0, 1], ends: &[1, 0] },
            Run("replicate", &["--once"], 0, &["broker 1 copied offsets 0..1", "high watermark 1"]),
            Join(0, &["acknowledged offset: 0", "consumer-visible end (HW): 1"]),
            Run("fail-leader", &[], 0, &["broker 1 is promoted (clean election", "records after failover: 1"]),
            State { leader: Some(1), high_watermark: 1, isr: &[1], ends: &[1, 1] },
            Consume(0, 5),
        ],
    ),
    (
        "acks=all, min.insync.replicas 2: a leader failing before the fetch leaves the write unacknowledged",
        &[
            Spawn("append", ACKS_ALL_2),
            LeaderEnd(1),
            Run("fail-leader", &[], 0, &["its log did not contain offset 0", "records after failover: 0"]),
            Join(REFUSED, &["offsets 0..1 were appended to a leader that failed", "not acknowledged"]),
            State { leader: Some(1), high_watermark: 0, isr: &[1], ends: &[1, 0] },
        ],
    ),
    (
        "acks=all, min.insync.replicas 2: a shrunk ISR refuses the append",
        &[
            Run("append", ACKS_1, 0, &["acknowledged offset: 0"]),
            Run("shrink-isr", &[], 0, &["broker 1 left the ISR", "ISR {0}; high watermark 1"]),
            Run("append", ACKS_ALL_2, REFUSED, &["NotEnoughReplicas", "nothing appended"]),
            State { leader: Some(0), high_watermark: 1, isr: &[0], ends: &[1, 0] },
        ],
    ),
    (
        "acks=all, min.insync.replicas 1: a shrunk ISR, an unclean election, the acknowledged write lost",
        &[
            Spawn("append", ACKS_ALL_1),
            LeaderEnd(1),
            Run("shrink-isr", &[], 0, &["ISR {0}; high watermark 1"]),
            Join(0, &["acknowledged offset: 0", "ISR {0} of min.insync.replicas 1"]),
            Consume(0, 5),
            Run("fail-leader", &["--unclean"], 0, &["UNCLEAN election", "records after failover: 0"]),
            State { leader: Some(1), high_watermark: 0, isr: &[1], ends: &[1, 0] },
            // The group read a committed record the new leader lacks: it is ahead of the log.
            Consume(REFUSED, 5),
        ],
    ),
    (
        "acks=all, min.insync.replicas 1: a clean election finds no replica: unavailable, nothing lost",
        &[
            Spawn("append", ACKS_ALL_1),
            LeaderEnd(1),
            Run("shrink-isr", &[], 0, &["ISR {0}; high watermark 1"]),
            Join(0, &["acknowledged offset: 0"]),
            Run("fail-leader", &[], 0, &["has no leader", "unavailable"]),
            State { leader: None, high_watermark: 1, isr: &[], ends: &[1, 0] },
            Consume(REFUSED, 0),
            Run("append", ACKS_1, REFUSED, &["partition 0 is unavailable"]),
        ],
    ),
    (
        "acks=all: NotEnoughReplicasAfterAppend, then an exact retry returns the original offsets",
        &[
            Spawn("append", RETRY_ALL_2),
            LeaderEnd(1),
            Run("shrink-isr", &[], 0, &["ISR {0}"]),
            Join(REFUSED, &["NotEnoughReplicasAfterAppend", "offsets 0..1 were appended"]),
            Run("append", RETRY_ALL_2, REFUSED, &["NotEnoughReplicas", "nothing appended"]),
            Run("replicate", &[], 0, &["caught up and rejoined the ISR"]),
            Run("append", RETRY_ALL_2, 0, &["duplicate of offsets 0..1", "nothing appended", "acknowledged offset: 0"]),
            State { leader: Some(0), high_watermark: 1, isr: &[0, 1], ends: &[1, 1] },
            Consume(0, 5),
        ],
    ),
    (
        "a consumer reads only below the high watermark",
        &[
            Run("append", ACKS_1, 0, &[]),
            Run("append", ACKS_1, 0, &[]),
            Run("append", ACKS_1, 0, &["acknowledged offset: 2", "consumer-visible end (HW): 0"]),
            Consume(0, 0),
            Run("replicate", &["--once"], 0, &["copied offsets 0..1", "high watermark 1"]),
            Consume(0, 5),
            Run("replicate", &[], 0, &["copied offsets 2..3", "caught up at offset 3"]),
            Consume(0, 15),
        ],
    ),
    (
        "replicate --follow: acks=all appends are acknowledged as it copies them",
        &[
            Spawn("replicate", &["--follow"]),
            Run("append", ACKS_ALL_2, 0, &["acknowledged offset: 0"]),
            Run("append", ACKS_ALL_2, 0, &["acknowledged offset: 1"]),
            Kill,
            State { leader: Some(0), high_watermark: 2, isr: &[0, 1], ends: &[2, 2] },
            Consume(0, 10),
        ],
    ),
];

/// A replicated data directory and the command running in its background, if any.
struct Schedule {
    name: &'static str,
    dir: DataDir,
    background: Option<Child>,
}

impl Schedule {
    fn new(name: &'static str) -> Schedule {
        let dir = DataDir::uninitialised(name);
        let output = dir.run("init", &["--replicas", "2"]);
        expect_code(name, "init --replicas 2", &output, 0);
        Schedule { name, dir, background: None }
    }

    fn step(&mut self, index: usize, step: &Step) {
        match step {
            Step::Run(subcommand, args, code, lines) => {
                let output = self.dir.run(subcommand, args);
                self.expect(index, &format!("{subcommand} {}", args.join(" ")), &output, *code, lines);
            }
            Step::Spawn(subcommand, args) => {
                let mut command = self.dir.command(subcommand, args);
                let child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the binary starts");
                assert!(self.background.replace(child).is_none(), "{}: two background commands", self.name);
            }
            Step::LeaderEnd(end) => self.wait_for_leader_end(*end),
            Step::Join(code, lines) => {
                let child = self.background.take().expect("a background command to join");
                let output = child.wait_with_output().expect("the background command ends");
                self.expect(index, "the background command", &output, *code, lines);
            }
            Step::Kill => {
                let mut child = self.background.take().expect("a background command to kill");
                child.kill().expect("kill");
                child.wait().expect("the killed command ends");
            }
            Step::State { leader, high_watermark, isr, ends } => {
                let replication = self.replication();
                let found_ends: Vec<u64> =
                    replication["replicas"].as_array().unwrap().iter().map(|r| r["end"].as_u64().unwrap()).collect();
                let found = (
                    replication["leader"].as_u64(),
                    replication["high_watermark"].as_u64().unwrap(),
                    replication["isr"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap()).collect::<Vec<_>>(),
                    found_ends,
                );
                let expected = (*leader, *high_watermark, isr.to_vec(), ends.to_vec());
                assert_eq!(found, expected, "{}: step {index}: (leader, hw, ISR, ends)\n{replication}", self.name);
            }
            Step::Consume(code, total) => {
                let output = self.dir.run("consume", &["--group", "g", "--strategy", "atomic-fenced"]);
                self.expect(index, "consume", &output, *code, &[]);
                let found = self.dir.status(self.name)["groups"][0]["total"].as_i64().unwrap_or(0);
                assert_eq!(found, *total, "{}: step {index}: the group's total after consume", self.name);
            }
        }
    }

    fn expect(&self, index: usize, what: &str, output: &Output, code: i32, lines: &[&str]) {
        let case = format!("{} (step {index})", self.name);
        expect_code(&case, what, output, code);
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        for line in lines {
            assert!(text.contains(line), "case '{case}': {what} does not say {line:?}\n{}", describe(output));
        }
        if code != 0 {
            let errors = String::from_utf8_lossy(&output.stderr);
            assert_eq!(errors.lines().count(), 1, "case '{case}': {what} fails with one line\n{}", describe(output));
        }
    }

    /// Partition 0's replication object of `status --json`.
    fn replication(&self) -> serde_json::Value {
        self.dir.status(self.name)["log"][0]["replication"].clone()
    }

    fn wait_for_leader_end(&self, end: u64) {
        let started = Instant::now();
        loop {
            let replication = self.replication();
            let leader = replication["leader"].as_u64().expect("a leader") as usize;
            if replication["replicas"][leader]["end"].as_u64() == Some(end) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_millis(WAIT_MS_MAX),
                "{}: the leader never reached {end}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Schedule {
    fn drop(&mut self) {
        if let Some(mut child) = self.background.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn the_lab_schedules_keep_or_lose_acknowledged_writes_as_their_acks_say() {
    for (name, steps) in SCHEDULES {
        let mut run = Schedule::new(name);
        for (index, step) in steps.iter().enumerate() {
            run.step(index, step);
        }
        assert!(run.background.is_none(), "{name}: a background command was left running");
    }
}

#[test]
fn the_lab_output_is_reproduced() {
    let run = Schedule::new("lab 1");
    let append = run.dir.run("append", ACKS_1);
    let fail = run.dir.run("fail-leader", &["--partition", "0"]);
    let text = format!("{}{}", common::stdout(&append), common::stdout(&fail));
    let lines: Vec<&str> = text.lines().collect();
    for expected in [
        "acknowledged offset: 0",
        "consumer-visible end (HW): 0",
        "broker 1 is promoted (clean election, leader epoch 1); its log did not contain offset 0",
        "records after failover: 0",
    ] {
        assert!(lines.contains(&expected), "no line {expected:?} in\n{text}");
    }
}

/// (case, init arguments or none for `init --replicas 2`, subcommand, arguments, exit, what stderr says)
type BadCase = (&'static str, bool, &'static str, &'static [&'static str], i32, &'static str);

#[test]
fn replication_commands_refuse_what_they_cannot_do_in_one_line() {
    let cases: &[BadCase] = &[
        ("acks=all on a plain log", false, "append", &[DELTA, "--acks", "all"], FAILED, "is not replicated"),
        ("replicate on a plain log", false, "replicate", &[], FAILED, "is not replicated"),
        ("fail-leader on a plain log", false, "fail-leader", &[], FAILED, "is not replicated"),
        ("an unknown acks mode", true, "append", &[DELTA, "--acks", "2"], FAILED, "expected 1 or all"),
        ("min.insync.replicas past the replicas", true, "append", ACKS_ALL_1_3, FAILED, "accepted values are 1..=2"),
        ("shrink-isr with the follower in sync", true, "shrink-isr", &[], FAILED, "is not behind the leader"),
        ("retention on a replicated log", true, "retain", &["--before", "0"], FAILED, "retention is not offered"),
        ("repair on a replicated log", true, "repair", &[], FAILED, "repair is not offered"),
        ("three replicas", false, "init", &["--replicas", "3"], FAILED, "3 is not in 1..=2"),
        ("init --replicas 2 over a plain log", false, "init", &["--replicas", "2"], REFUSED, "has 1 replica(s), but 2"),
        ("init over a replicated log", true, "init", &[], REFUSED, "has 2 replica(s), but 1"),
        (
            "a partition that does not exist",
            true,
            "replicate",
            &["--partition", "3"],
            FAILED,
            "partition 3 does not exist",
        ),
    ];
    for &(case, replicated, subcommand, args, code, says) in cases {
        let dir = DataDir::uninitialised(case);
        let init: &[&str] = if replicated { &["--replicas", "2"] } else { &[] };
        expect_code(case, "init", &dir.run("init", init), 0);
        let output = dir.run(subcommand, args);
        expect_code(case, subcommand, &output, code);
        let errors = common::stderr(&output);
        assert!(errors.contains(says) && errors.lines().count() == 1, "case '{case}': {errors}");
    }
}

const ACKS_ALL_1_3: &[&str] = &[DELTA, "--acks", "all", "--min-insync-replicas", "3"];

#[test]
fn init_over_a_replicated_log_of_the_same_count_keeps_it() {
    let run = Schedule::new("init twice");
    expect_code("init twice", "append", &run.dir.run("append", ACKS_1), 0);
    let identity = run.dir.status("init twice")["log"][0].clone();
    // A new store over the same log: init keeps the log, its records and its identity.
    std::fs::remove_file(run.dir.store_path()).unwrap();
    expect_code("init twice", "init --replicas 2 again", &run.dir.run("init", &["--replicas", "2"]), 0);
    assert_eq!(run.replication()["replicas"][0]["end"].as_u64(), Some(1));
    assert_eq!(run.dir.status("init twice")["log"][0], identity);
}

/// Every strategy consumes a replicated log unchanged, and only below the high watermark: three
/// records on the leader, two of them replicated, each strategy's group applies two (a set's
/// value is then the second record's, `v(1) = 2`, and its total untouched).
#[test]
fn every_strategy_consumes_the_committed_prefix_of_a_replicated_log() {
    let run = Schedule::new("every strategy");
    for _ in 0..3 {
        expect_code("every strategy", "append", &run.dir.run("append", ACKS_1), 0);
    }
    for _ in 0..2 {
        expect_code("every strategy", "replicate --once", &run.dir.run("replicate", &["--once"]), 0);
    }
    for strategy in consumer::strategy::Strategy::ALL {
        let group = format!("g-{strategy}");
        let output = run.dir.run("consume", &["--group", &group, "--strategy", strategy.name()]);
        expect_code(strategy.name(), "consume", &output, 0);
        let row = run.dir.group(strategy.name(), &group);
        let found = (row["total"].as_i64(), row["value"].as_i64(), row["progress"][0]["next_offset"].as_u64());
        let expected = match strategy.rules().effect {
            consumer::strategy::EffectKind::Add => (Some(10), None, Some(2)),
            consumer::strategy::EffectKind::Set => (Some(0), Some(2), Some(2)),
        };
        assert_eq!(found, expected, "{strategy}: (total, value, next offset) below the high watermark 2");
    }
}

/// A partition without a leader refuses its own steps, not the other partitions': a worker
/// holding both fetches and applies partition 1 while partition 0 has none, as the model's
/// steps on one partition never look at another's leader (the acks rows' walks diverged here
/// when every step read every leased partition's log first).
#[test]
fn a_partition_without_a_leader_refuses_only_its_own_steps() {
    let case = "a leaderless partition";
    let dir = common::DataDir::uninitialised(case);
    expect_code(case, "init", &dir.run("init", &["--partitions", "2", "--replicas", "2"]), 0);
    for partition in ["0", "1"] {
        expect_code(case, "append", &dir.run("append", &[DELTA, "--acks", "1", "--partition", partition]), 0);
    }
    expect_code(case, "replicate p1", &dir.run("replicate", &["--once", "--partition", "1"]), 0);
    expect_code(case, "shrink-isr p0", &dir.run("shrink-isr", &["--partition", "0"]), 0);
    let failed = dir.run("fail-leader", &["--partition", "0"]);
    expect_code(case, "fail-leader p0", &failed, 0);
    assert!(describe(&failed).contains("has no leader"), "case '{case}': {}", describe(&failed));
    let mut worker = dir.worker(case, "g", "o0", "atomic-fenced");
    worker.expect("fetch 1 0", "ok fetched 1");
    worker.expect("apply-atomic 1 0", "ok applied 1 skipped 0");
    // Partition 0's lease fetches nothing while it has no leader (the model enables no fetch).
    let refused = worker.send("fetch 0 0");
    assert!(refused.starts_with("err step 'fetch 0 0' is not enabled"), "case '{case}': fetch 0 0 answered {refused}");
    worker.quit();
}
