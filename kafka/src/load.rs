//! The lane's load test: owner processes of one group on the broker, each reading whichever
//! partitions the coordinator assigns it (`kafka-lane owner --run`), while the harness produces
//! records and, at seeded random points, kills an owner (SIGKILL) and starts a new one, or lets
//! one leave the group. At the end every partition is drained and the store's total is
//! compared with the exact sum: atomic-fenced must be exact, effect-first's duplicates are
//! counted. Every offset commit the owners made is collected, and the broker's relaxed commit
//! fence is searched for: an accepted commit below one accepted before it on the same partition.

use crate::client::Clients;
use crate::driver::Lane;
use crate::error::LaneError;
use crate::owner::{LaneStrategy, Timing};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args, Clone, Debug)]
pub struct LoadArgs {
    /// Owner processes in the group at any time.
    #[arg(long, default_value_t = 3)]
    pub owners: u32,
    /// Records to produce (delta 1 each).
    #[arg(long, default_value_t = 2000)]
    pub records: u32,
    /// Partitions of the load topic.
    #[arg(long, default_value_t = 4)]
    pub partitions: u32,
    /// Disruptions, every 400-1200 ms: each kills an owner (SIGKILL) and starts another, or
    /// (every third) lets one leave the group and starts another.
    #[arg(long, default_value_t = 6)]
    pub disruptions: u32,
    /// atomic-fenced or effect-first.
    #[arg(long, default_value = "atomic-fenced")]
    pub strategy: String,
    /// effect-first: commit after every Nth record of a partition (1: each; more widens the
    /// window a kill can fall in between effects and their commit).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub commit_every: u32,
    /// The seed of the disruptions' owners and times.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// An existing broker (HOST:PORT) instead of one in this process; `--topic` must then exist.
    #[arg(long)]
    pub bootstrap: Option<String>,
    /// With `--bootstrap`: the existing topic to read (records are produced to it).
    #[arg(long)]
    pub topic: Option<String>,
    /// The working directory (the store); a new temporary one by default.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// What a load run measured.
#[derive(Debug)]
pub struct LoadReport {
    pub records: u32,
    pub total: i64,
    pub seconds: f64,
    pub kills: u32,
    pub leaves: u32,
    pub assignments: u32,
    pub commits: u32,
    pub refused_commits: u32,
    /// Accepted commits below an earlier accepted one on the same partition, with the timeline.
    pub regressions: Vec<String>,
}

/// A tiny seeded generator (xorshift64*): the run's choices depend on the seed only.
struct Seeded(u64);

impl Seeded {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % bound.max(1)
    }
}

/// One owner in run mode; its event lines are collected by a reader thread.
struct Runner {
    child: Child,
    name: String,
}

/// An owner still running when the load test ends, or fails half-way, is killed and reaped:
/// nothing is left running.
impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Which partitions each owner holds now, from its assigned and revoked events.
fn holding(events: &Mutex<Vec<Value>>) -> BTreeMap<String, usize> {
    let mut held: BTreeMap<String, std::collections::BTreeSet<u64>> = BTreeMap::new();
    for event in events.lock().expect("no reader panicked").iter() {
        let (owner, p) = (event["owner"].as_str().unwrap_or("").to_string(), event["partition"].as_u64().unwrap_or(0));
        match event["event"].as_str() {
            Some("assigned") => {
                held.entry(owner).or_default().insert(p);
            }
            Some("revoked") => {
                held.entry(owner).or_default().remove(&p);
            }
            _ => {}
        }
    }
    held.into_iter().map(|(owner, set)| (owner, set.len())).collect()
}

pub fn run(args: &LoadArgs) -> Result<(), LaneError> {
    let program = std::env::current_exe().map_err(|error| LaneError::Io { what: "the lane's binary".into(), error })?;
    let report = load(args, &program)?;
    let exact = i64::from(report.records);
    let outcome = match report.total.cmp(&exact) {
        std::cmp::Ordering::Equal => "exact".to_string(),
        std::cmp::Ordering::Greater => format!("{} duplicate applications", report.total - exact),
        std::cmp::Ordering::Less => format!("{} records lost", exact - report.total),
    };
    println!(
        "{} records, total {} ({outcome}); {:.1} s, {:.0} records/s; {} kills, {} leaves, {} assignments; {} commits, {} refused",
        report.records,
        report.total,
        report.seconds,
        f64::from(report.records) / report.seconds,
        report.kills,
        report.leaves,
        report.assignments,
        report.commits,
        report.refused_commits
    );
    if report.regressions.is_empty() {
        println!(
            "no accepted commit went below an earlier accepted one (the relaxed fence's stale commit was not seen)"
        );
    } else {
        println!("the relaxed fence's stale commit landed {} times:", report.regressions.len());
        for line in &report.regressions {
            println!("  {line}");
        }
    }
    Ok(())
}

/// Runs the load test; the owners are `program owner --run ...` (the `kafka-lane` binary).
pub fn load(args: &LoadArgs, program: &std::path::Path) -> Result<LoadReport, LaneError> {
    let strategy = match LaneStrategy::parse(&args.strategy) {
        Some(s @ (LaneStrategy::AtomicFenced | LaneStrategy::EffectFirst)) => s,
        _ => {
            let detail = format!("--strategy '{}': the load test runs atomic-fenced or effect-first", args.strategy);
            return Err(LaneError::Usage { detail });
        }
    };
    if args.partitions == 0 || args.owners == 0 || !args.records.is_multiple_of(args.partitions * args.commit_every) {
        let detail = format!(
            "--records {} must be a positive multiple of --partitions {} times --commit-every {} (so that every partition's last record is committed), with --owners at least 1",
            args.records, args.partitions, args.commit_every
        );
        return Err(LaneError::Usage { detail });
    }
    let temporary = match &args.dir {
        Some(_) => None,
        None => Some(std::env::temp_dir().join(format!("onceproof-kafka-load-{}", std::process::id()))),
    };
    let dir = args.dir.clone().or_else(|| temporary.clone()).expect("one of the two");
    std::fs::create_dir_all(&dir).map_err(|error| LaneError::Io { what: dir.display().to_string(), error })?;
    let broker = match &args.bootstrap {
        Some(_) => None,
        None => Some(crate::broker::Broker::start("127.0.0.1:0".parse().expect("literal"))?),
    };
    let bootstrap = args.bootstrap.clone().unwrap_or_else(|| broker.as_ref().expect("started").bootstrap());
    let mut clients = Clients::connect(&bootstrap)?;
    let topic = match (&args.bootstrap, &args.topic) {
        (Some(_), Some(topic)) => {
            clients.require_topic(topic)?;
            topic.clone()
        }
        (Some(_), None) => {
            return Err(LaneError::Usage {
                detail: "--bootstrap names an existing broker: pass --topic with --bootstrap".into(),
            })
        }
        (None, _) => {
            clients.create_topic("onceproof-load", i32::try_from(args.partitions).expect("few partitions"))?;
            "onceproof-load".to_string()
        }
    };
    let partitions = args.partitions;
    let store = dir.join("store.db");
    let _ = std::fs::remove_file(&store);
    {
        use consumer::log::LogIdentity;
        use consumer::store::{Store, StoreOptions};
        let identity = LogIdentity { id: 0x6c6f_6164, partitions };
        let mut created = Store::create(&store, identity, StoreOptions::default())?;
        created.ensure_group("load", "none")?;
    }
    let lane = Lane {
        program: program.to_path_buf(),
        program_args: Vec::new(),
        bootstrap: bootstrap.clone(),
        topic: topic.clone(),
        store: store.clone(),
        strategy,
        timing: Timing::default(),
    };
    let events = Arc::new(Mutex::new(Vec::<Value>::new()));
    let mut seeded = Seeded(args.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut owners: Vec<Runner> = Vec::new();
    let mut serial = 0u32;
    let started = Instant::now();
    for _ in 0..args.owners {
        owners.push(start_runner(&lane, args.commit_every, &mut serial, &events)?);
    }
    let (mut kills, mut leaves) = (0, 0);
    // Disruptions come at seeded intervals of 400-1200 ms, while records are produced and after,
    // so that they strike owners with a backlog (between an effect and its commit, say).
    let interval = |seeded: &mut Seeded| Duration::from_millis(400 + seeded.below(800));
    let mut next_disruption = Instant::now() + interval(&mut seeded);
    let mut record = 0;
    while record < args.records || kills + leaves < args.disruptions {
        if record < args.records {
            clients.produce(&topic, i32::try_from(record % partitions).expect("few partitions"), 1)?;
            record += 1;
        } else {
            std::thread::sleep(next_disruption.saturating_duration_since(Instant::now()));
        }
        if kills + leaves < args.disruptions && Instant::now() >= next_disruption {
            // The victim: an owner holding a partition when there is one, so that the disruption
            // moves work (a new owner still joining holds nothing).
            let held = holding(&events);
            let holders: Vec<usize> =
                (0..owners.len()).filter(|&i| held.get(&owners[i].name).is_some_and(|&n| n > 0)).collect();
            let pool = if holders.is_empty() { (0..owners.len()).collect() } else { holders };
            let victim = pool[usize::try_from(seeded.below(pool.len() as u64)).expect("small")];
            let mut runner = owners.remove(victim);
            if (kills + leaves + 1) % 3 == 0 {
                // A leave: standard input closes, the owner unsubscribes (LeaveGroup) and exits.
                drop(runner.child.stdin.take());
                let _ = runner.child.wait();
                leaves += 1;
            } else {
                let _ = runner.child.kill();
                let _ = runner.child.wait();
                kills += 1;
            }
            owners.push(start_runner(&lane, args.commit_every, &mut serial, &events)?);
            next_disruption = Instant::now() + interval(&mut seeded);
        }
    }
    drain(&mut clients, &lane, partitions, u64::from(args.records))?;
    let seconds = started.elapsed().as_secs_f64();
    drop(owners);
    let total = consumer::store::Store::open(&store, consumer::store::StoreOptions::default())?.total("load")?;
    let events = events.lock().expect("no reader panicked").clone();
    if let Ok(path) = std::env::var("ONCEPROOF_KAFKA_EVENTS") {
        let lines: Vec<String> = events.iter().map(|e| e.to_string()).collect();
        let _ = std::fs::write(path, lines.join("\n"));
    }
    let report = summarise(&events, args.records, total, seconds, (kills, leaves));
    clients.leak();
    if let Some(broker) = broker {
        broker.stop()?;
    }
    if let Some(dir) = temporary {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(report)
}

fn start_runner(
    lane: &Lane,
    commit_every: u32,
    serial: &mut u32,
    events: &Arc<Mutex<Vec<Value>>>,
) -> Result<Runner, LaneError> {
    *serial += 1;
    let name = format!("o{serial}");
    let mut child = Command::new(&lane.program)
        .arg("owner")
        .args(["--run", "--bootstrap", &lane.bootstrap, "--topic", &lane.topic, "--group", "load"])
        .args(["--owner", &name, "--strategy", lane.strategy.name(), "--commit-every", &commit_every.to_string()])
        .arg("--store")
        .arg(&lane.store)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|error| LaneError::Io { what: format!("start {}", lane.program.display()), error })?;
    let stdout = child.stdout.take().expect("piped");
    let events = Arc::clone(events);
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(event) = serde_json::from_str::<Value>(&line) {
                events.lock().expect("no reader panicked").push(event);
            }
        }
    });
    Ok(Runner { child, name })
}

/// Waits until every partition's progress reaches its end: the store's next offsets
/// (atomic-fenced) or the broker's committed offsets (effect-first).
fn drain(clients: &mut Clients, lane: &Lane, partitions: u32, records: u64) -> Result<(), LaneError> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let per_partition =
        |p: u32| records / u64::from(partitions) + u64::from(u64::from(p) < records % u64::from(partitions));
    loop {
        let mut done = true;
        for p in 0..partitions {
            let end = per_partition(p);
            let next = if lane.strategy.broker_committed() {
                clients.committed(&lane.topic, "load", i32::try_from(p).expect("few"))?.unwrap_or(0)
            } else {
                let store = consumer::store::Store::open(&lane.store, consumer::store::StoreOptions::default())?;
                store.progress("load", p)?.next_offset
            };
            done &= next >= end;
        }
        if done {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(LaneError::Client {
                operation: "drain the load topic".into(),
                detail: "not every partition reached its end within 120 s".into(),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn summarise(events: &[Value], records: u32, total: i64, seconds: f64, (kills, leaves): (u32, u32)) -> LoadReport {
    let mut ordered: Vec<&Value> = events.iter().collect();
    ordered.sort_by_key(|e| e["t_us"].as_u64().unwrap_or(0));
    let (mut assignments, mut commits, mut refused) = (0, 0, 0);
    let mut highest: BTreeMap<u64, (u64, String)> = BTreeMap::new();
    let mut regressions = Vec::new();
    for event in ordered {
        match event["event"].as_str() {
            Some("assigned") => assignments += 1,
            Some("commit") => {
                commits += 1;
                if event["result"] != "ok" {
                    refused += 1;
                    continue;
                }
                let (p, next) = (event["partition"].as_u64().unwrap_or(0), event["next_offset"].as_u64().unwrap_or(0));
                let line = format!("t={} us {} committed {next} on partition {p}", event["t_us"], event["owner"]);
                if let Some((high, earlier)) = highest.get(&p) {
                    if next < *high {
                        regressions.push(format!("{earlier}; then {line}"));
                        continue;
                    }
                }
                highest.insert(p, (next, line));
            }
            _ => {}
        }
    }
    LoadReport { records, total, seconds, kills, leaves, assignments, commits, refused_commits: refused, regressions }
}
