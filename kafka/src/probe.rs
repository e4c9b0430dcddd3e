//! `kafka-lane probe-relaxed`: does the broker's relaxed commit fence show through a real
//! client? An owner's application stops while its client stays a member (`freeze`); a second
//! owner joins, which puts the group into a rebalance; the frozen owner then commits an offset
//! with the generation it had. nisshi-broker 0.6.0 accepts an older generation from a current
//! member while the group is forming (`offset_commit_fence`, `generation_must_match` false):
//! this probe reports what the broker answered, with the group's state at each step.

use crate::client::Clients;
use crate::driver::{create_store, Lane, OwnerProcess};
use crate::error::LaneError;
use crate::owner::{LaneStrategy, Timing};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// What the probe saw.
#[derive(Debug)]
pub struct ProbeReport {
    /// One line per step: milliseconds since the start, the step, what came back.
    pub timeline: Vec<String>,
    /// The group's state when the frozen owner committed.
    pub state_at_commit: String,
    /// Whether the broker accepted the frozen owner's commit.
    pub stale_commit_accepted: bool,
    /// The offset the broker held after it, and where the new owner started.
    pub committed_after: Option<u64>,
    pub new_owner_position: u64,
}

/// How long the probe waits for the group to leave its stable state.
const REBALANCE_WAIT: Duration = Duration::from_secs(15);

pub fn relaxed(program: &Path, program_args: &[String], dir: &Path) -> Result<ProbeReport, LaneError> {
    let started = Instant::now();
    let mut timeline = Vec::new();
    let mut note = |line: String| {
        let line = format!("{:>6} ms  {line}", started.elapsed().as_millis());
        if std::env::var_os("ONCEPROOF_KAFKA_PROBE_TRACE").is_some() {
            eprintln!("{line}");
        }
        timeline.push(line);
    };
    let broker = crate::broker::Broker::start("127.0.0.1:0".parse().expect("a literal address"))?;
    let mut clients = Clients::connect(&broker.bootstrap())?;
    let (topic, group) = ("probe", "probe");
    clients.create_topic(topic, 1)?;
    for _ in 0..3 {
        clients.produce(topic, 0, 1)?;
    }
    std::fs::create_dir_all(dir).map_err(|error| LaneError::Io { what: dir.display().to_string(), error })?;
    let store = dir.join("store.db");
    let _ = std::fs::remove_file(&store);
    create_store(&store, &[(group, "o0")])?;
    let lane = Lane {
        program: program.to_path_buf(),
        program_args: program_args.to_vec(),
        bootstrap: broker.bootstrap(),
        topic: topic.to_string(),
        store,
        strategy: LaneStrategy::EffectFirst,
        timing: Timing { session_timeout_ms: 6_000, max_poll_interval_ms: 30_000 },
    };
    let mut o0 = OwnerProcess::start(&lane, group, "o0")?;
    note(format!("o0 join: {}", o0.expect(json!({"op": "join", "claim": false}))?));
    o0.expect(json!({"op": "fetch", "offset": 0}))?;
    o0.expect(json!({"op": "effect", "offset": 0}))?;
    note(format!("o0 commit 1: {}", o0.expect(json!({"op": "commit", "next_offset": 1}))?["outcome"]));
    o0.expect(json!({"op": "fetch", "offset": 1}))?;
    o0.expect(json!({"op": "effect", "offset": 1}))?;
    let (stable, members) = clients.group_state(group)?;
    note(format!("group {stable}, members {members:?}; o0 holds offset 1, applied, not committed"));
    o0.expect(json!({"op": "freeze"}))?;
    note("o0 freezes: its application stops, its client stays a member".to_string());
    let mut o1 = OwnerProcess::start(&lane, group, "o1")?;
    o1.expect(json!({"op": "join", "claim": false, "wait": false}))?;
    note("o1 joins (JoinGroup sent)".to_string());
    let mut state = stable.clone();
    while state == stable && started.elapsed() < REBALANCE_WAIT + Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
        state = clients.group_state(group)?.0;
    }
    note(format!("group {state}"));
    let reply = o0.expect(json!({"op": "commit", "next_offset": 2}))?;
    let accepted = reply["outcome"] == json!("committed");
    note(format!("o0 commits 2 with the generation it had: {} {}", reply["outcome"], reply["detail"]));
    let committed_after = clients.committed(topic, group, 0)?;
    note(format!("broker's committed offset: {committed_after:?}"));
    o0.kill();
    note("o0 is killed (SIGKILL): its session ends after session.timeout.ms".to_string());
    let assigned = o1.expect(json!({"op": "wait-assigned", "claim": false}))?;
    let position = assigned["position"].as_u64().unwrap_or(0);
    note(format!("o1 assigned, starts at offset {position}"));
    o1.kill();
    clients.leak();
    broker.stop()?;
    Ok(ProbeReport {
        timeline,
        state_at_commit: state,
        stale_commit_accepted: accepted,
        committed_after,
        new_owner_position: position,
    })
}
