//! The replication commands of the `consumer` CLI (spec.md §10, "Replication"): `append` on a
//! replicated log (`--acks 1|all --min-insync-replicas N`), `replicate`, `shrink-isr`,
//! `fail-leader`, and the replication lines of `status`. Their output uses the delivery lab's
//! words ("acknowledged offset", "consumer-visible end (HW)", "records after failover").

use anyhow::bail;
use clap::Args;
use consumer::log::{
    Acks, Appended, Batch, Election, ElectionKind, LeaderAppend, LogError, Producer, Replicate, ReplicatedLog,
    ReplicationState,
};
use std::collections::BTreeSet;
use std::ops::Range;
use std::process::ExitCode;
use std::time::Duration;

/// `replicate --follow` looks again after this long when nothing was left to copy.
const FOLLOW_IDLE_MS: u64 = 5;
/// Steps of one partition's catch-up (`replicate` without `--once`), at most.
const CATCH_UP_STEPS_MAX: u64 = 1_000_000;

#[derive(Args)]
pub struct ReplicateArgs {
    #[command(flatten)]
    pub dir: crate::DirArgs,
    /// Only this partition (default: every partition).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::count_in::<u32>(0, u64::from(u32::MAX)))]
    pub partition: Option<u32>,
    /// One follower fetch per partition: the leader's next batch (one record in the model).
    #[arg(long, conflicts_with = "follow")]
    pub once: bool,
    /// Keep fetching as the leaders grow, until no partition has an alive follower (or the
    /// process is killed).
    #[arg(long)]
    pub follow: bool,
}

#[derive(Args)]
pub struct ShrinkIsrArgs {
    #[command(flatten)]
    pub dir: crate::DirArgs,
    /// The replicated partition.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0, value_parser = crate::count_in::<u32>(0, u64::from(u32::MAX)))]
    pub partition: u32,
}

#[derive(Args)]
pub struct FailLeaderArgs {
    #[command(flatten)]
    pub dir: crate::DirArgs,
    /// The replicated partition.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0, value_parser = crate::count_in::<u32>(0, u64::from(u32::MAX)))]
    pub partition: u32,
    /// With no alive in-sync replica, promote the out-of-sync follower as it is (losing the
    /// committed records it lacks) instead of leaving the partition without a leader.
    #[arg(long)]
    pub unclean: bool,
}

/// What `append` asks of a replicated log.
pub struct AppendRequest<'a> {
    pub partition: u32,
    pub payloads: &'a [Vec<u8>],
    pub producer: Option<(Producer, u32)>,
    pub acks: Acks,
    pub min_insync: u32,
    pub timeout: Duration,
    pub crash_after_append: bool,
}

/// The replicated log of `dir`; a plain log is refused for the replication steps.
pub fn open(dir: &crate::DirArgs) -> anyhow::Result<ReplicatedLog> {
    let store = dir.open_store()?;
    match ReplicatedLog::open(&dir.log_dir(), store.log_identity())? {
        Some(log) => Ok(log),
        None => Err(consumer::log::ReplicationError::NotReplicated { path: dir.log_dir() }.into()),
    }
}

/// `append` on a replicated log: `acks=1` to the leader, or `acks=all` waiting up to the
/// busy timeout for the high watermark. A refusal or an unacknowledged append exits 4.
pub fn append(log: &ReplicatedLog, request: AppendRequest) -> anyhow::Result<ExitCode> {
    let batch = Batch { payloads: request.payloads, producer: request.producer };
    let (append, high_watermark, how) = match request.acks {
        Acks::Leader => {
            let append = log.append_leader(request.partition, batch)?;
            let high_watermark = append.high_watermark;
            (append, high_watermark, "acks=1: acknowledged by the leader alone".to_string())
        }
        Acks::All => {
            let acked = log.append_all(request.partition, batch, request.min_insync, request.timeout)?;
            let how = format!(
                "acks=all: acknowledged, ISR {} of min.insync.replicas {}",
                brokers(&acked.isr),
                request.min_insync
            );
            (acked.append, acked.high_watermark, how)
        }
    };
    crate::report_repairs(&append.repairs)?;
    if request.crash_after_append {
        // The lost acknowledgement: acknowledged, but the caller never hears of it.
        consumer::crash::crash_now();
    }
    print_append(&append, &how)?;
    print_offsets("acknowledged", &append.appended.offsets)?;
    outln!("consumer-visible end (HW): {high_watermark}")?;
    Ok(ExitCode::SUCCESS)
}

fn print_append(append: &LeaderAppend, how: &str) -> Result<(), crate::out::OutputError> {
    let Appended { offsets, duplicate } = &append.appended;
    let (partition, leader) = (append.partition, append.leader);
    if *duplicate {
        outln!(
            "duplicate of offsets {}..{} of partition {partition} (the leader, broker {leader}, holds them; nothing \
             appended; {how})",
            offsets.start,
            offsets.end
        )?;
    } else {
        outln!(
            "appended offsets {}..{} to partition {partition} on the leader, broker {leader} ({how})",
            offsets.start,
            offsets.end
        )?;
    }
    Ok(())
}

/// `acknowledged offset: 0` for one record (the lab's line), `offsets: a..b` for more.
fn print_offsets(what: &str, offsets: &Range<u64>) -> Result<(), crate::out::OutputError> {
    if offsets.end == offsets.start + 1 {
        outln!("{what} offset: {}", offsets.start)?;
    } else {
        outln!("{what} offsets: {}..{}", offsets.start, offsets.end)?;
    }
    Ok(())
}

/// `{0, 1}`.
fn brokers(set: &BTreeSet<u32>) -> String {
    let names: Vec<String> = set.iter().map(u32::to_string).collect();
    format!("{{{}}}", names.join(", "))
}

pub fn replicate(args: ReplicateArgs) -> anyhow::Result<ExitCode> {
    let log = open(&args.dir)?;
    let partitions: Vec<u32> = match args.partition {
        Some(partition) => vec![partition],
        None => (0..log.identity().partitions).collect(),
    };
    if args.follow {
        return follow(&log, partitions);
    }
    for partition in partitions {
        if args.once {
            print_step(partition, &log.replicate(partition)?)?;
        } else {
            catch_up(&log, partition)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Fetches until the follower is at the leader's end, printing each copy.
fn catch_up(log: &ReplicatedLog, partition: u32) -> anyhow::Result<()> {
    for _ in 0..CATCH_UP_STEPS_MAX {
        let step = log.replicate(partition)?;
        print_step(partition, &step)?;
        match step {
            Replicate::Copied { .. } => {}
            Replicate::CaughtUp { .. } | Replicate::NoFollower => return Ok(()),
        }
    }
    bail!("partition {partition}: the follower did not catch up in {CATCH_UP_STEPS_MAX} fetches")
}

/// `--follow`: fetches as the leaders grow; a partition leaves the loop when it has no alive
/// follower or no leader (neither comes back).
fn follow(log: &ReplicatedLog, mut partitions: Vec<u32>) -> anyhow::Result<ExitCode> {
    while !partitions.is_empty() {
        let mut copied = false;
        let mut done = Vec::new();
        for &partition in &partitions {
            match log.replicate(partition) {
                Ok(step @ Replicate::Copied { .. }) => {
                    print_step(partition, &step)?;
                    copied = true;
                }
                Ok(Replicate::CaughtUp { .. }) => {}
                Ok(step @ Replicate::NoFollower) => {
                    print_step(partition, &step)?;
                    done.push(partition);
                }
                Err(consumer::log::ReplicationError::Log(LogError::Unavailable { .. })) => {
                    outln!("partition {partition}: no leader: nothing to follow")?;
                    done.push(partition);
                }
                Err(error) => return Err(error.into()),
            }
        }
        partitions.retain(|partition| !done.contains(partition));
        if !copied {
            std::thread::sleep(Duration::from_millis(FOLLOW_IDLE_MS));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_step(partition: u32, step: &Replicate) -> Result<(), crate::out::OutputError> {
    match step {
        Replicate::Copied { follower, offsets, rejoined, high_watermark, repairs } => {
            crate::report_repairs(repairs)?;
            let rejoined = if *rejoined { "; it caught up and rejoined the ISR" } else { "" };
            outln!(
                "partition {partition}: broker {follower} copied offsets {}..{} from the leader{rejoined}; high \
                 watermark {high_watermark}",
                offsets.start,
                offsets.end
            )?;
        }
        Replicate::CaughtUp { follower, end, rejoined, high_watermark, repairs } => {
            crate::report_repairs(repairs)?;
            let rejoined = if *rejoined { " and rejoined the ISR" } else { "" };
            outln!(
                "partition {partition}: broker {follower} is caught up at offset {end}{rejoined}; high watermark \
                 {high_watermark}"
            )?;
        }
        Replicate::NoFollower => outln!("partition {partition}: no alive follower: nothing to replicate")?,
    }
    Ok(())
}

pub fn shrink_isr(args: ShrinkIsrArgs) -> anyhow::Result<ExitCode> {
    let log = open(&args.dir)?;
    let shrunk = log.shrink_isr(args.partition)?;
    let isr = &log.state()?.partitions[args.partition as usize].isr;
    outln!(
        "partition {}: broker {} left the ISR (its log ends at {}, the leader's at {}); ISR {}; high watermark {}",
        args.partition,
        shrunk.follower,
        shrunk.follower_end,
        shrunk.leader_end,
        brokers(isr),
        shrunk.high_watermark
    )?;
    Ok(ExitCode::SUCCESS)
}

pub fn fail_leader(args: FailLeaderArgs) -> anyhow::Result<ExitCode> {
    let log = open(&args.dir)?;
    let election = log.fail_leader(args.partition, args.unclean)?;
    crate::report_repairs(&election.repairs)?;
    print_election(args.partition, &election)?;
    Ok(ExitCode::SUCCESS)
}

fn print_election(partition: u32, election: &Election) -> Result<(), crate::out::OutputError> {
    let Election { failed, failed_end, kind, promoted, truncated, leader_end, high_watermark, leader_epoch, .. } =
        election;
    outln!("partition {partition}: broker {failed} failed (its log ended at offset {failed_end})")?;
    let Some(promoted) = promoted else {
        outln!(
            "no alive in-sync replica: partition {partition} has no leader (leader epoch {leader_epoch}): it is \
             unavailable, reads and appends are refused (`--unclean` would promote the out-of-sync follower)"
        )?;
        return Ok(());
    };
    let how = match kind {
        ElectionKind::Clean => "clean election",
        ElectionKind::Unclean => "UNCLEAN election: an out-of-sync replica",
        ElectionKind::NoLeader => "no election",
    };
    let lacks = if failed_end > leader_end {
        let missing = *leader_end..*failed_end;
        if missing.end == missing.start + 1 {
            format!("; its log did not contain offset {}", missing.start)
        } else {
            format!("; its log did not contain offsets {}..{}", missing.start, missing.end)
        }
    } else {
        String::new()
    };
    outln!("broker {promoted} is promoted ({how}, leader epoch {leader_epoch}){lacks}")?;
    if !truncated.is_empty() {
        outln!(
            "its replica was truncated from offset {} to the high watermark {} (records never committed)",
            truncated.end,
            truncated.start
        )?;
    }
    outln!("records after failover: {leader_end}")?;
    outln!("consumer-visible end (HW): {high_watermark}")?;
    Ok(())
}

/// `status`'s replication object of one partition: the state and each replica's log.
pub fn partition_status(
    log: &ReplicatedLog,
    state: &ReplicationState,
    partition: u32,
) -> anyhow::Result<serde_json::Value> {
    let part = &state.partitions[partition as usize];
    let mut replicas = Vec::new();
    for broker in 0..log.replicas() {
        let view = log.replica_view(broker, partition)?;
        let role = match (part.leader == Some(broker), part.alive.contains(&broker), part.isr.contains(&broker)) {
            (true, _, _) => "leader",
            (false, false, _) => "failed",
            (false, true, true) => "in sync",
            (false, true, false) => "out of sync",
        };
        replicas.push(serde_json::json!({
            "broker": broker, "role": role, "end": view.end, "acked_end": view.acked_end,
            "damage": view.damage.map(|damage| damage.reason)
        }));
    }
    Ok(serde_json::json!({
        "leader": part.leader, "leader_epoch": part.leader_epoch, "high_watermark": part.high_watermark,
        "isr": part.isr, "alive": part.alive, "replicas": replicas
    }))
}

/// The human lines of one partition's replication object.
pub fn print_partition_status(replication: &serde_json::Value) -> Result<(), crate::out::OutputError> {
    let set = |value: &serde_json::Value| {
        let brokers: Vec<String> = value.as_array().into_iter().flatten().map(ToString::to_string).collect();
        format!("{{{}}}", brokers.join(", "))
    };
    let leader = match replication["leader"].as_u64() {
        Some(leader) => format!("broker {leader}"),
        None => "none (UNAVAILABLE)".to_string(),
    };
    outln!(
        "  replication: leader {leader} (leader epoch {}), high watermark {}, ISR {}, alive {}",
        replication["leader_epoch"],
        replication["high_watermark"],
        set(&replication["isr"]),
        set(&replication["alive"])
    )?;
    for replica in replication["replicas"].as_array().into_iter().flatten() {
        let damage = match replica["damage"].as_str() {
            Some(reason) => format!(" of {} acknowledged: DAMAGED ({reason})", replica["acked_end"]),
            None => String::new(),
        };
        outln!(
            "  replica {} ({}): log end {}{damage}",
            replica["broker"],
            replica["role"].as_str().unwrap_or(""),
            replica["end"]
        )?;
    }
    Ok(())
}
