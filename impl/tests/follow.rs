//! Follow mode (`consume --follow`, the load test's owners): a long-lived owner takes what the
//! store assigns to it, when it is assigned, and nothing else.
//!
//! One owner follows a two-partition group whose partition 1 is assigned to an owner that
//! never runs: it consumes partition 0, then waits (rounds of 5 ms) until partition 1 is
//! handed to it, takes it and finishes. While it waits, it must not take partition 0 again
//! until partition 0 is moved away and back, and then it must: under a claimed epoch every
//! take bumps the epoch, so the partition's epoch says how often it was taken. Its step count is compared with two plain `consume` runs doing the same work in a
//! twin directory.

mod common;

use common::{describe, expect_code, stdout, DataDir};
use std::time::{Duration, Instant};

const STRATEGY: &str = "atomic-fenced";
const RECORDS: u64 = 3;
const DELTA: i64 = 5;
/// How long the test waits for the follower to finish partition 0, and for it to exit.
const WAIT_MAX: Duration = Duration::from_secs(60);
/// Idle rounds the follower gets (at 5 ms each) before partition 1 is handed over.
const IDLE: Duration = Duration::from_millis(200);

/// A data directory with `RECORDS` records on each of two partitions, partition 0 assigned to
/// owner a and partition 1 to owner b.
fn setup(case: &str) -> DataDir {
    let dir = DataDir::new(case, 2);
    for partition in 0..2 {
        dir.append(case, partition, DELTA, RECORDS);
    }
    dir.claim(case, "g", 0, "a");
    dir.claim(case, "g", 1, "b");
    dir
}

/// (next offset, epoch, owner) of every partition of group g.
fn rows(dir: &DataDir, case: &str) -> Vec<(u64, u64, String)> {
    let group = dir.group(case, "g");
    let rows = group["progress"].as_array().unwrap_or_else(|| panic!("case '{case}': no progress in {group}"));
    let field = |row: &serde_json::Value, name: &str| row[name].as_u64().unwrap_or_else(|| panic!("{name} in {row}"));
    rows.iter().map(|row| (field(row, "next_offset"), field(row, "epoch"), row["owner"].to_string())).collect()
}

/// The step count `consume` printed ("N steps; group g total T").
fn steps(case: &str, output: &std::process::Output) -> u64 {
    let printed = stdout(output);
    let count = printed.lines().find_map(|line| line.split_once(" steps; ")).map(|(count, _)| count.parse().ok());
    count.flatten().unwrap_or_else(|| panic!("case '{case}': no step count\n{}", describe(output)))
}

#[test]
fn a_follower_takes_a_partition_when_it_is_assigned_and_never_retakes_its_own() {
    let case = "follow";
    let dir = setup(case);
    let args = ["--follow", "--group", "g", "--owner", "a", "--strategy", STRATEGY];
    let mut follower = dir.command("consume", &args).stdout(std::process::Stdio::piped()).spawn().expect("spawn");
    let started = Instant::now();
    while rows(&dir, case)[0].0 < RECORDS {
        assert!(started.elapsed() < WAIT_MAX, "case '{case}': partition 0 not consumed in {WAIT_MAX:?}");
        assert!(follower.try_wait().expect("poll the follower").is_none(), "case '{case}': the follower exited early");
        std::thread::sleep(Duration::from_millis(5));
    }
    let taken = rows(&dir, case)[0].1;
    std::thread::sleep(IDLE);
    let idle = rows(&dir, case);
    assert_eq!(idle[0].1, taken, "case '{case}': the idle follower took partition 0 again: {idle:?}");
    assert!(follower.try_wait().expect("poll the follower").is_none(), "case '{case}': it stopped before p1 was done");
    // Partition 0 moves away and back: the follower's lease is stale now, and it must take
    // the partition afresh (a third epoch) even with nothing left to write on it.
    dir.claim(case, "g", 0, "b");
    dir.claim(case, "g", 0, "a");
    std::thread::sleep(IDLE);
    dir.claim(case, "g", 1, "a");
    let handed = Instant::now();
    while follower.try_wait().expect("poll the follower").is_none() {
        if handed.elapsed() > WAIT_MAX {
            follower.kill().expect("kill the follower");
            panic!(
                "case '{case}': the follower did not finish within {WAIT_MAX:?} of the handover: {:?}",
                rows(&dir, case)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let output = follower.wait_with_output().expect("the follower's output");
    expect_code(case, "consume --follow", &output, 0);
    let done = rows(&dir, case);
    assert_eq!((done[0].0, done[1].0), (RECORDS, RECORDS), "case '{case}': both partitions consumed: {done:?}");
    assert_eq!(done[0].1, taken + 3, "case '{case}': partition 0 moved twice, then taken once: {done:?}");
    // The handover bumps the epoch, and the follower's take claims the next one.
    assert_eq!(done[1].1, idle[1].1 + 2, "case '{case}': partition 1 taken once at a claimed epoch: {done:?}");
    assert_eq!(dir.group(case, "g")["total"].as_i64(), Some(2 * RECORDS as i64 * DELTA), "case '{case}': the total");
    // The same work in two plain runs: partition 0, then partition 1 once handed over.
    let twin_case = "follow, twin";
    let twin = setup(twin_case);
    let plain = ["--group", "g", "--owner", "a", "--strategy", STRATEGY];
    let first = steps(twin_case, &twin.consume(twin_case, &plain, 0));
    twin.claim(twin_case, "g", 1, "a");
    let second = steps(twin_case, &twin.consume(twin_case, &plain, 0));
    assert!(first > 0 && second > 0, "case '{twin_case}': {first} and {second} steps");
    assert_eq!(
        steps(case, &output),
        first + second,
        "case '{case}': the follower's steps are the plain runs' together"
    );
}
