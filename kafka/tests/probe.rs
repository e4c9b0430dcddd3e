//! The broker's relaxed commit fence through the client (`cargo test -p kafka-lane --features
//! kafka --test probe`): a member whose application froze while its client stayed in the group
//! commits with its old generation while another member's join rebalances the group, and
//! nisshi-broker 0.6.0 accepts it; the new member then starts after that commit.
#![cfg(feature = "kafka")]

use kafka_lane::probe::relaxed;
use std::path::Path;
use std::time::{Duration, Instant};

/// The probe's time cap: about 15 s (two joins held half a 6 s session, one session expiry).
const PROBE_CAP: Duration = Duration::from_secs(90);

#[test]
fn a_frozen_members_stale_commit_lands_during_the_rebalance() {
    let program = Path::new(env!("CARGO_BIN_EXE_kafka-lane"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("probe-relaxed");
    let started = Instant::now();
    let report = relaxed(program, &[], &dir).expect("the probe runs");
    for line in &report.timeline {
        println!("{line}");
    }
    // nisshi-broker names its forming state with a leader `Unknown` (ConsumerGroupState's
    // catch-all); the group must have left `Stable` before the commit.
    assert_ne!(report.state_at_commit, "Stable", "the commit fell outside a rebalance");
    assert!(
        report.stale_commit_accepted,
        "the broker refused the frozen member's commit:\n{}",
        report.timeline.join("\n")
    );
    assert_eq!(report.committed_after, Some(2), "the broker's committed offset after the stale commit");
    assert_eq!(report.new_owner_position, 2, "the new member starts at the committed offset");
    assert!(started.elapsed() < PROBE_CAP, "the probe ran past its cap of {PROBE_CAP:?}");
}
