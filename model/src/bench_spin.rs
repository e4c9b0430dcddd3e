//! `model bench --vs-spin`: SPIN's verifier on the peer's Promela model
//! (model/bench/spin), then our `model check`, on the same protocol and bounds, one right after
//! the other on one machine; both unique-state counts, wall times and peak memories, and the
//! ratios ours / SPIN.

use crate::bench::{read_check_report, Measurement};
use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use model::config::{defaults, Lifted};
use model::{Config, Strategy};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The peer's model, compiled in so that any copy of the binary has the exact file.
const CONSUMER_PML: &str = include_str!("../bench/spin/consumer.pml");
/// Our unbounded variant of it (no crash or rebalance budget, second incarnations under
/// `-DPAUSES`), the peer of `check --crashes any --rebalances any --pauses any`.
const CONSUMER_UNBOUNDED_PML: &str = include_str!("../bench/spin/consumer_unbounded.pml");

/// pan's settings, the peer's run.sh's `perf()`: exhaustive DFS with every property asserted,
/// `-c0` so pan does not stop at an error (the whole reachable graph), an 8 GiB memory cap.
const GCC_FLAGS: [&str; 3] = ["-O2", "-DSAFETY", "-DMEMLIM=8192"];
const PAN_FLAGS: [&str; 3] = ["-m100000", "-c0", "-n"];

/// `--spin-hash-bits`: pan's table of 2^bits slots (8 bytes each) is allocated before the
/// search, so 2^29 slots (4 GiB) is the most that leaves room for states under `MEMLIM`.
const HASH_BITS_MIN: u8 = 10;
const HASH_BITS_MAX: u8 = 29;

#[derive(Args)]
pub struct SpinArgs {
    /// One of the SPIN comparison's configurations (default fenced-3g); --strategy and the bounds below
    /// override its values.
    #[arg(long, value_enum, requires = "vs_spin")]
    preset: Option<Preset>,
    /// Consumer groups (both sides).
    #[arg(long, allow_hyphen_values = true, requires = "vs_spin", value_parser = crate::count_in::<u8>(0, u64::from(u8::MAX)))]
    groups: Option<u8>,
    /// Owners per group (both sides).
    #[arg(long, allow_hyphen_values = true, requires = "vs_spin", value_parser = crate::count_in::<u8>(0, u64::from(u8::MAX)))]
    owners: Option<u8>,
    /// Records appended to the one partition (both sides).
    #[arg(long, allow_hyphen_values = true, requires = "vs_spin", value_parser = crate::count_in::<u8>(0, u64::from(u8::MAX)))]
    records: Option<u8>,
    /// Crashes in a run (SPIN's K).
    #[arg(long, allow_hyphen_values = true, requires = "vs_spin", conflicts_with = "unbounded", value_parser = crate::count_in::<u8>(0, u64::from(u8::MAX)))]
    crashes: Option<u8>,
    /// Rebalances in a run (SPIN's B).
    #[arg(long, allow_hyphen_values = true, requires = "vs_spin", conflicts_with = "unbounded", value_parser = crate::count_in::<u8>(0, u64::from(u8::MAX)))]
    rebalances: Option<u8>,
    /// No fault budget: SPIN runs consumer_unbounded.pml, ours `check --crashes any --rebalances
    /// any --pauses any` (any number of crashes, rebalances and second incarnations, one earlier
    /// incarnation alive at a time per group).
    #[arg(long, requires = "vs_spin")]
    unbounded: bool,
    /// With --unbounded or the unbounded preset: no second incarnation (SPIN without -DPAUSES,
    /// ours --pauses 0).
    #[arg(long, requires = "vs_spin")]
    no_pauses: bool,
    /// offset-stamp's checkpoint interval (SPIN's K2).
    #[arg(long, allow_hyphen_values = true, requires = "vs_spin", value_parser = crate::count_in::<u8>(0, u64::from(u8::MAX)))]
    commit_every: Option<u8>,
    /// log2 of the slots of pan's hash table (-w; 10..=29; default: the preset's, about its
    /// state count). It matters both ways: the table (8 bytes a slot) is allocated up front and
    /// counted in SPIN's peak memory, and one far smaller than the state count makes long hash
    /// chains that slow pan down.
    #[arg(long, allow_hyphen_values = true, requires = "vs_spin", value_parser = hash_bits_parser())]
    spin_hash_bits: Option<u8>,
    /// Our side with symmetry reduction (one state per class of owners and groups; SPIN's side
    /// has none).
    #[arg(long, requires = "vs_spin")]
    symmetry: bool,
    /// Our side's checker threads (1..=64; default 1).
    #[arg(long, allow_hyphen_values = true, requires = "vs_spin", value_parser = crate::count_in::<u8>(1, 64))]
    threads: Option<u8>,
}

fn hash_bits_parser() -> crate::NonNegative<u8> {
    crate::count_in::<u8>(u64::from(HASH_BITS_MIN), u64::from(HASH_BITS_MAX))
}

/// The SPIN comparison's three target configurations, and one without fault budgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Preset {
    /// atomic-fenced, 3 groups x 2 owners, 4 records, 2 crashes, 2 rebalances (SPIN: 2.42 M
    /// states, -w22).
    #[value(name = "fenced-3g")]
    Fenced3g,
    /// effect-first, 2 groups x 2 owners, 4 records, 2 crashes, 2 rebalances (SPIN: 24.6 M
    /// states, -w25).
    #[value(name = "effect-first-2g")]
    EffectFirst2g,
    /// atomic-fenced, 3 groups x 2 owners, 5 records, 3 crashes, 3 rebalances (SPIN: 40.3 M
    /// states, -w26).
    #[value(name = "fenced-3g-large")]
    Fenced3gLarge,
    /// atomic-fenced, 2 groups x 2 owners, 3 records, any number of crashes, rebalances and
    /// second incarnations (SPIN's consumer_unbounded.pml -DPAUSES: 967 k states, -w20).
    #[value(name = "unbounded")]
    Unbounded,
}

/// The faults of a comparison: consumer.pml's budgets, or none (consumer_unbounded.pml).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Faults {
    /// At most this many crashes (SPIN's K) and rebalances (B) in a run, no pause.
    Bounded { crashes: u8, rebalances: u8 },
    /// Any number of crashes and rebalances; with `pauses`, of second incarnations too.
    Unbounded { pauses: bool },
}

impl Faults {
    /// How the bounds line of the report names them.
    fn describe(self) -> String {
        match self {
            Faults::Bounded { crashes, rebalances } => format!("crashes {crashes} rebalances {rebalances}"),
            Faults::Unbounded { pauses } => {
                format!("crashes any rebalances any pauses {}", if pauses { "any" } else { "0" })
            }
        }
    }
}

/// The bounds both checkers run with: one partition, crashes and rebalances (and, unbounded,
/// second incarnations) the only faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpinBounds {
    pub strategy: Strategy,
    pub groups: u8,
    pub owners: u8,
    pub records: u8,
    pub faults: Faults,
    pub commit_every: u8,
}

impl Preset {
    /// The preset's bounds and pan's -w (the peer's run.sh sized it to about the state count).
    fn bounds(self) -> (SpinBounds, u8) {
        let fenced = SpinBounds {
            strategy: Strategy::AtomicFenced,
            groups: 3,
            owners: 2,
            records: 4,
            faults: Faults::Bounded { crashes: 2, rebalances: 2 },
            commit_every: defaults::COMMIT_EVERY,
        };
        match self {
            Preset::Fenced3g => (fenced, 22),
            Preset::EffectFirst2g => (SpinBounds { strategy: Strategy::EffectFirst, groups: 2, ..fenced }, 25),
            Preset::Fenced3gLarge => {
                (SpinBounds { records: 5, faults: Faults::Bounded { crashes: 3, rebalances: 3 }, ..fenced }, 26)
            }
            Preset::Unbounded => {
                (SpinBounds { groups: 2, records: 3, faults: Faults::Unbounded { pauses: true }, ..fenced }, 20)
            }
        }
    }
}

/// How consumer.pml models one of our rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpinPeer {
    /// consumer.pml's `STRAT`.
    pub strat: u8,
    /// consumer_unbounded.pml's `-DSTORED_EPOCH`: a start resumes at the stored epoch.
    pub stored_epoch: bool,
    /// Printed under the table: which of our rows has SPIN's semantics.
    pub note: Option<&'static str>,
}

/// consumer.pml's model of a row, `None` for the rows it does not have. Both fenced rows map
/// to its atomic-fenced: its restart keeps the stored epoch, as fenced-stored-epoch's does,
/// while our atomic-fenced claims a new epoch at every restart (so that a second live incarnation is fenced).
pub fn spin_peer(strategy: Strategy) -> Option<SpinPeer> {
    let plain = |strat| Some(SpinPeer { strat, stored_epoch: false, note: None });
    match strategy {
        Strategy::EffectFirst => plain(1),
        Strategy::CommitFirst => plain(2),
        Strategy::Atomic => plain(3),
        Strategy::AtomicFenced => Some(SpinPeer {
            strat: 4,
            stored_epoch: false,
            note: Some(
                "note: our atomic-fenced claims a new epoch at every restart (so that a second live incarnation is \
                 fenced); SPIN's restart keeps the \
                 stored epoch, as our fenced-stored-epoch does (--strategy fenced-stored-epoch compares those)",
            ),
        }),
        Strategy::FencedStoredEpoch => Some(SpinPeer {
            strat: 4,
            stored_epoch: false,
            note: Some(
                "note: fenced-stored-epoch restarts with the stored epoch, as SPIN's atomic-fenced (STRAT 4) does",
            ),
        }),
        Strategy::AtomicCas => plain(5),
        Strategy::OffsetStamp => plain(6),
        Strategy::PeriodicCommit
        | Strategy::DedupSeparate
        | Strategy::DedupAtomic
        | Strategy::ParallelMax
        | Strategy::ParallelWatermark
        | Strategy::AtomicDlq
        | Strategy::SkipPoison
        | Strategy::RetryForever
        | Strategy::ProducerIdempotent
        | Strategy::ProducerNewSequence
        | Strategy::ResetEarliest
        | Strategy::ResetSilent
        | Strategy::ResetFail
        | Strategy::LogLossRefuse
        | Strategy::LogLossUnchecked
        | Strategy::LogLossRefuseAll
        | Strategy::AcksLeader
        | Strategy::AcksAll
        | Strategy::AcksAllMinIsr1
        | Strategy::AcksAllMinIsr1Clean
        | Strategy::TxnFenced
        | Strategy::TxnUnfenced
        | Strategy::TxnReadUncommitted
        | Strategy::AtomicPlusEmail
        | Strategy::EmailIdempotencyKey
        | Strategy::EmailNoKey
        | Strategy::BlindSet
        | Strategy::SetIfNewer
        | Strategy::DedupOffsetOnly
        | Strategy::DualWrite
        | Strategy::Outbox
        | Strategy::BrokerEffectFirst
        | Strategy::BrokerCommitFirst
        | Strategy::BrokerRelaxed => None,
    }
}

/// consumer_unbounded.pml's model of a row: consumer.pml's, except that its starts claim a new
/// epoch as our atomic-fenced's do, and `-DSTORED_EPOCH` gives fenced-stored-epoch's.
pub fn unbounded_peer(strategy: Strategy) -> Option<SpinPeer> {
    let peer = spin_peer(strategy)?;
    Some(match strategy {
        Strategy::AtomicFenced => SpinPeer {
            note: Some("note: consumer_unbounded.pml's starts claim a new epoch, as our atomic-fenced's do"),
            ..peer
        },
        Strategy::FencedStoredEpoch => SpinPeer {
            stored_epoch: true,
            note: Some(
                "note: -DSTORED_EPOCH: consumer_unbounded.pml's starts resume at the stored epoch, as \
                 fenced-stored-epoch's do",
            ),
            ..peer
        },
        _ => peer,
    })
}

/// Both sides of one comparison.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    /// The Promela file pan is built from: consumer.pml, or consumer_unbounded.pml without
    /// budgets.
    pub model_file: &'static str,
    /// `spin -D...` flags for it.
    pub spin_defines: Vec<String>,
    /// Our `model check` arguments: every bound and every other fault budget explicit.
    pub check_args: Vec<String>,
    /// Our side's BFS: its threads and whether it reduces by symmetry (in `check_args` too).
    pub threads: u8,
    pub symmetry: bool,
}

impl Plan {
    /// The plan with our side's search settings, in its fields and its arguments alike.
    fn with_search(mut self, threads: u8, symmetry: bool) -> Plan {
        self.check_args.extend(["--threads".to_string(), threads.to_string()]);
        if symmetry {
            self.check_args.push("--symmetry".to_string());
        }
        Plan { threads, symmetry, ..self }
    }
}

/// Maps the bounds to both checkers, refusing (one line) what SPIN's model does not have and
/// what `model check` refuses.
pub fn plan(bounds: &SpinBounds) -> Result<Plan, String> {
    let strategy = bounds.strategy;
    let peer = match bounds.faults {
        Faults::Bounded { .. } => spin_peer(strategy),
        Faults::Unbounded { .. } => unbounded_peer(strategy),
    };
    let Some(peer) = peer else {
        let modelled: Vec<&str> = Strategy::ALL.iter().filter(|s| spin_peer(**s).is_some()).map(|s| s.name()).collect();
        return Err(format!(
            "--vs-spin compares only the strategies SPIN's consumer.pml models ({}), not {strategy}",
            modelled.join(", ")
        ));
    };
    // A lifted budget keeps a count of 1 (as `check`'s `any` does: for pauses, the one paused
    // slot per group consumer_unbounded.pml has too), and its flag says `any`.
    let (crashes, rebalances, pauses, lifted) = match bounds.faults {
        Faults::Bounded { crashes, rebalances } => (crashes, rebalances, 0, Lifted::NONE),
        Faults::Unbounded { pauses } => (1, 1, u8::from(pauses), Lifted { crashes: true, rebalances: true, pauses }),
    };
    // Every field written out (no `..`): a new fault budget must be decided here, never default
    // to a row's non-zero value. SPIN has one partition and no fault but crashes, rebalances and
    // (unbounded) pauses.
    let config = Config {
        strategy,
        groups: bounds.groups,
        owners: bounds.owners,
        partitions: 1,
        records: bounds.records,
        crashes,
        rebalances,
        commit_every: bounds.commit_every,
        inflight: defaults::INFLIGHT.min(bounds.records),
        delta: defaults::DELTA,
        poison: None,
        max_attempts: defaults::MAX_ATTEMPTS,
        ack_losses: 0,
        retentions: 0,
        pauses,
        log_losses: 0,
        leader_failures: 0,
        isr_shrinks: 0,
        lifted,
    };
    config.validate()?;
    if strategy == Strategy::CommitFirst && bounds.owners != 2 {
        return Err(format!(
            "--owners {} is out of range for commit-first against SPIN: consumer.pml's PENDING is written for 2 owners",
            bounds.owners
        ));
    }
    let mut check_args: Vec<String> = vec!["check".into(), "--json".into()];
    check_args.extend(config.flags().split_whitespace().map(String::from));
    let define = |name: &str, value: u8| format!("-D{name}={value}");
    let (model_file, spin_defines) = match bounds.faults {
        Faults::Bounded { crashes, rebalances } => (
            "consumer.pml",
            vec![
                define("STRAT", peer.strat),
                define("R", bounds.records),
                define("K", crashes),
                define("B", rebalances),
                define("G", bounds.groups),
                define("C", bounds.owners),
                define("K2", bounds.commit_every),
            ],
        ),
        Faults::Unbounded { pauses } => {
            let mut defines = vec![
                define("STRAT", peer.strat),
                define("R", bounds.records),
                define("G", bounds.groups),
                define("C", bounds.owners),
                define("K2", bounds.commit_every),
            ];
            defines.extend(pauses.then(|| "-DPAUSES".to_string()));
            defines.extend(peer.stored_epoch.then(|| "-DSTORED_EPOCH".to_string()));
            ("consumer_unbounded.pml", defines)
        }
    };
    Ok(Plan { model_file, spin_defines, check_args, threads: 1, symmetry: false })
}

/// The text of a plan's Promela file.
fn model_text(model_file: &str) -> &'static str {
    if model_file == "consumer_unbounded.pml" {
        CONSUMER_UNBOUNDED_PML
    } else {
        CONSUMER_PML
    }
}

/// The bounds of the command line: the preset's (default fenced-3g), each overridden by its
/// flag; and pan's -w.
fn resolve(args: &SpinArgs, strategies: &[Strategy]) -> anyhow::Result<(SpinBounds, u8)> {
    let (preset, hash_bits) = args.preset.unwrap_or(Preset::Fenced3g).bounds();
    let strategy = match strategies {
        [] => preset.strategy,
        [one] => *one,
        [_, _, ..] => bail!("--vs-spin compares one strategy at a time ({} given)", strategies.len()),
    };
    let faults = match preset.faults {
        // clap refuses --crashes and --rebalances beside --unbounded; beside an unbounded preset
        // a budget would silently mean nothing, so it is refused here.
        Faults::Unbounded { .. } if args.crashes.is_some() || args.rebalances.is_some() => {
            bail!("--crashes and --rebalances are budgets, and the unbounded preset has none: drop them or choose another preset")
        }
        Faults::Unbounded { .. } => Faults::Unbounded { pauses: !args.no_pauses },
        Faults::Bounded { .. } if args.unbounded => Faults::Unbounded { pauses: !args.no_pauses },
        Faults::Bounded { .. } if args.no_pauses => {
            bail!("--no-pauses needs --unbounded or the unbounded preset (the bounded model has no pause)")
        }
        Faults::Bounded { crashes, rebalances } => Faults::Bounded {
            crashes: args.crashes.unwrap_or(crashes),
            rebalances: args.rebalances.unwrap_or(rebalances),
        },
    };
    let bounds = SpinBounds {
        strategy,
        groups: args.groups.unwrap_or(preset.groups),
        owners: args.owners.unwrap_or(preset.owners),
        records: args.records.unwrap_or(preset.records),
        faults,
        commit_every: args.commit_every.unwrap_or(preset.commit_every),
    };
    Ok((bounds, args.spin_hash_bits.unwrap_or(hash_bits)))
}

pub fn run(args: &SpinArgs, strategies: &[Strategy], timeout: Duration) -> anyhow::Result<ExitCode> {
    let (bounds, hash_bits) = resolve(args, strategies)?;
    let plan = plan(&bounds).map_err(anyhow::Error::msg)?.with_search(args.threads.unwrap_or(1), args.symmetry);
    require_tools()?;
    let dir = WorkDir::create(plan.model_file)?;
    let spin = run_spin(&dir.0, plan.model_file, &plan.spin_defines, hash_bits, timeout)?;
    errln!(
        "SPIN: {} states stored, {:.2} s, peak {:.1} MiB{}; now model check",
        spin.pan.states_stored,
        spin.wall_seconds,
        spin.peak_rss_kib as f64 / 1024.0,
        if spin.complete { "" } else { " (incomplete)" }
    )?;
    let mut check_args = plan.check_args.clone();
    check_args.extend(["--timeout".to_string(), timeout.as_secs_f64().to_string()]);
    let ours = run_ours(&dir.0, &check_args, timeout * OURS_DEADLINE_TIMEOUTS)?;
    drop(dir);
    out!("{}", report(&bounds, &plan, hash_bits, &spin, &ours))?;
    // A ratio of an unfinished search says nothing: exit 3, as an incomplete `check` does.
    Ok(if spin.complete && ours.complete { ExitCode::SUCCESS } else { ExitCode::from(3) })
}

/// Our check is killed at this many times --timeout: the timeout stops its exploration, not the
/// shortest-counterexample search after it, which can outgrow the machine's memory.
const OURS_DEADLINE_TIMEOUTS: u32 = 2;

/// Our `check --json` as a child process, killed at `deadline`. A killed run reports the
/// unique states of its last progress line (a lower bound) and the peak RSS seen in /proc.
fn run_ours(dir: &Path, args: &[String], deadline: Duration) -> anyhow::Result<Measurement> {
    let exe = std::env::current_exe().context("cannot find the model binary")?;
    let (out_path, err_path) = (dir.join("check.json"), dir.join("check.err"));
    let stdout = File::create(&out_path).context("cannot create check.json")?;
    let stderr = File::create(&err_path).context("cannot create check.err")?;
    let started = Instant::now();
    let mut child =
        Command::new(exe).args(args).stdout(stdout).stderr(stderr).spawn().context("cannot run model check")?;
    let mut peak_rss_kib = 0;
    let status = loop {
        if let Some(status) = child.try_wait().context("cannot wait for model check")? {
            break Some(status);
        }
        peak_rss_kib = peak_rss_kib.max(vm_hwm_kib(child.id()).unwrap_or(0));
        if started.elapsed() >= deadline {
            child.kill().context("cannot stop model check")?;
            child.wait().context("cannot wait for model check")?;
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let wall_seconds = started.elapsed().as_secs_f64();
    let read = |path: &Path| std::fs::read(path).with_context(|| format!("cannot read {}", path.display()));
    match status {
        Some(status) => read_check_report(&read(&out_path)?, &read(&err_path)?, status.code(), wall_seconds),
        None => Ok(Measurement {
            unique_states: last_progress_unique(&String::from_utf8_lossy(&read(&err_path)?)).unwrap_or(0),
            states: 0,
            seconds: wall_seconds,
            counterexample_seconds: 0.0,
            wall_seconds,
            peak_rss_kib,
            complete: false,
            exit_code: None,
        }),
    }
}

/// A live process's peak RSS (`VmHWM` in /proc/PID/status).
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| line.strip_prefix("VmHWM:"))?.split_whitespace().next()?.parse().ok()
}

/// The unique states of `check`'s last progress line (`  S: N states, M unique, depth D, ...`).
pub fn last_progress_unique(stderr: &str) -> Option<u64> {
    stderr.lines().rev().find_map(|line| {
        let (_, counts) = line.split_once(" states, ")?;
        counts.split(" unique").next()?.trim().parse().ok()
    })
}

/// The programs `--vs-spin` runs, and the Debian package of each.
const TOOLS: [(&str, &str); 4] =
    [("spin", "spin"), ("gcc", "gcc"), ("/usr/bin/time", "time"), ("timeout", "coreutils")];

/// One line naming every missing program and the command that installs them.
fn require_tools() -> anyhow::Result<()> {
    let missing: Vec<(&str, &str)> = TOOLS.into_iter().filter(|(program, _)| !installed(program)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let programs: Vec<&str> = missing.iter().map(|(program, _)| *program).collect();
    let packages: Vec<&str> = missing.iter().map(|(_, package)| *package).collect();
    bail!("--vs-spin needs {} (not found; install with: apt-get install {})", programs.join(", "), packages.join(" "))
}

fn installed(program: &str) -> bool {
    if program.contains('/') {
        return Path::new(program).is_file();
    }
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// pan's build directory under the system's temporary directory, removed when dropped.
struct WorkDir(PathBuf);

impl WorkDir {
    fn create(model_file: &str) -> anyhow::Result<WorkDir> {
        // The process id keeps concurrent runs apart; a leftover of a killed run is replaced.
        let path = std::env::temp_dir().join(format!("onceproof-vs-spin-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).with_context(|| format!("cannot create {}", path.display()))?;
        let dir = WorkDir(path);
        std::fs::write(dir.0.join(model_file), model_text(model_file))
            .with_context(|| format!("cannot write {}", dir.0.display()))?;
        Ok(dir)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One pan run.
#[derive(Debug, PartialEq)]
pub struct SpinRun {
    pub pan: PanReport,
    pub peak_rss_kib: u64,
    /// Wall time of pan alone, measured around it.
    pub wall_seconds: f64,
    /// spin -a and gcc (not counted in the comparison).
    pub build_seconds: f64,
    pub complete: bool,
}

fn run_spin(
    dir: &Path,
    model_file: &str,
    defines: &[String],
    hash_bits: u8,
    timeout: Duration,
) -> anyhow::Result<SpinRun> {
    let build = Instant::now();
    run_quietly(dir, "spin", &[defines, &["-a".to_string(), model_file.to_string()]].concat())?;
    run_quietly(dir, "gcc", &[&GCC_FLAGS[..], &["-o", "pan", "pan.c"]].concat())?;
    let build_seconds = build.elapsed().as_secs_f64();
    let pan_out = File::create(dir.join("pan.out")).context("cannot create pan.out")?;
    let started = Instant::now();
    // /usr/bin/time reports the peak RSS of the process tree it waits for; timeout kills pan
    // at --timeout (and 5 s later for good), exiting 124 or 137.
    let status = Command::new("/usr/bin/time")
        .current_dir(dir)
        .args(["-v", "-o", "time.txt", "timeout", "--kill-after=5"])
        .arg(format!("{}", timeout.as_secs_f64()))
        .arg("./pan")
        .args(PAN_FLAGS)
        .arg(format!("-w{hash_bits}"))
        .stdout(pan_out)
        .stderr(Stdio::null())
        .status()
        .context("cannot run /usr/bin/time ./pan")?;
    let wall_seconds = started.elapsed().as_secs_f64();
    let read =
        |name: &str| std::fs::read_to_string(dir.join(name)).with_context(|| format!("cannot read pan's {name}"));
    let timed_out = matches!(status.code(), Some(124 | 137));
    let pan_text = read("pan.out")?;
    let pan = match parse_pan(&pan_text) {
        Ok(pan) => pan,
        // A pan stopped by timeout prints no summary, only its progress lines.
        Err(_) if timed_out => parse_pan_progress(&pan_text),
        Err(error) => bail!(error),
    };
    let peak_rss_kib = parse_peak_rss_kib(&read("time.txt")?).map_err(anyhow::Error::msg)?;
    let complete = !timed_out && !pan.out_of_memory && status.success();
    Ok(SpinRun { pan, peak_rss_kib, wall_seconds, build_seconds, complete })
}

/// Runs a build step in `dir`; a failure is one line with the last line it printed.
fn run_quietly(dir: &Path, program: &str, args: &[impl AsRef<std::ffi::OsStr>]) -> anyhow::Result<()> {
    let output =
        Command::new(program).current_dir(dir).args(args).output().with_context(|| format!("cannot run {program}"))?;
    if !output.status.success() {
        let text = [output.stdout, output.stderr].concat();
        let text = String::from_utf8_lossy(&text);
        bail!("{program} failed: {}", text.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("").trim());
    }
    Ok(())
}

/// What pan printed at the end of its search.
#[derive(Debug, PartialEq)]
pub struct PanReport {
    /// `states, stored`: the protocol's states plus 1 (pan's state before `init`).
    pub states_stored: u64,
    /// False when pan printed the count rounded (`%9.8g`: from 10^8 on).
    pub states_exact: bool,
    pub errors: u64,
    /// pan's own `elapsed time`.
    pub elapsed_seconds: f64,
    pub out_of_memory: bool,
}

/// Parses pan's summary; an error names the line that is missing.
pub fn parse_pan(text: &str) -> Result<PanReport, String> {
    let before = |suffix: &str| -> Option<&str> {
        text.lines().find_map(|line| line.trim().strip_suffix(suffix)).map(str::trim)
    };
    let after = |prefix: &str| -> Option<&str> {
        text.lines()
            .find_map(|line| line.split_once(prefix))
            .map(|(_, rest)| rest.split_whitespace().next().unwrap_or(""))
    };
    let out_of_memory = text.contains("out of memory");
    let Some(stored) = before("states, stored") else {
        let last = text.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("(nothing)");
        return Err(format!("pan printed no 'states, stored' line; its last line: {}", last.trim()));
    };
    let states: f64 = stored.parse().map_err(|_| format!("pan's state count '{stored}' is not a number"))?;
    let errors = after("errors: ").and_then(|n| n.parse().ok()).ok_or("pan printed no 'errors:' count")?;
    let elapsed_seconds =
        after("pan: elapsed time ").and_then(|s| s.parse().ok()).ok_or("pan printed no 'elapsed time' line")?;
    Ok(PanReport {
        states_stored: states.round() as u64,
        states_exact: !stored.contains(['e', 'E']),
        errors,
        elapsed_seconds,
        out_of_memory,
    })
}

/// An interrupted pan's last progress line (`Depth= D States= 2e+06 ... t= 13.7 ...`): its
/// state count is rounded and a lower bound.
pub fn parse_pan_progress(text: &str) -> PanReport {
    let last = text.lines().rev().find(|line| line.starts_with("Depth=")).unwrap_or("");
    let field = |name: &str| -> f64 {
        last.split_once(name)
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    PanReport {
        states_stored: field("States=").round() as u64,
        states_exact: false,
        errors: text.lines().filter(|line| line.contains("assertion violated")).count() as u64,
        elapsed_seconds: field("t="),
        out_of_memory: text.contains("out of memory"),
    }
}

/// `/usr/bin/time -v`'s `Maximum resident set size (kbytes): N`.
pub fn parse_peak_rss_kib(text: &str) -> Result<u64, String> {
    text.lines()
        .find_map(|line| line.trim().strip_prefix("Maximum resident set size (kbytes):"))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| "/usr/bin/time -v printed no 'Maximum resident set size' line".to_string())
}

fn ratio(ours: f64, spin: f64) -> String {
    if spin > 0.0 {
        format!("{:.2}", ours / spin)
    } else {
        "-".to_string()
    }
}

/// The comparison table and the notes that say what each number is.
pub fn report(bounds: &SpinBounds, plan: &Plan, hash_bits: u8, spin: &SpinRun, ours: &Measurement) -> String {
    let mib = |kib: u64| kib as f64 / 1024.0;
    let approximate = if spin.pan.states_exact { "" } else { "~" };
    let spin_states = format!("{approximate}{}", spin.pan.states_stored);
    let rows = [
        (
            "unique states",
            spin_states,
            // An unfinished search's count is a lower bound.
            format!("{}{}", if ours.complete { "" } else { ">" }, ours.unique_states),
            ratio(ours.unique_states as f64, spin.pan.states_stored as f64),
        ),
        (
            "seconds",
            format!("{:.2}", spin.wall_seconds),
            format!("{:.2}", ours.wall_seconds),
            ratio(ours.wall_seconds, spin.wall_seconds),
        ),
        (
            "peak MiB",
            format!("{:.1}", mib(spin.peak_rss_kib)),
            format!("{:.1}", mib(ours.peak_rss_kib)),
            ratio(mib(ours.peak_rss_kib), mib(spin.peak_rss_kib)),
        ),
    ];
    let mut out = format!(
        "vs SPIN: {}; groups {} owners {} partitions 1 records {} {} commit-every {}; no other fault\n",
        bounds.strategy,
        bounds.groups,
        bounds.owners,
        bounds.records,
        bounds.faults.describe(),
        bounds.commit_every
    );
    out += &format!(
        "SPIN: spin {} -a {}; gcc {}; ./pan {} -w{hash_bits}\n",
        plan.spin_defines.join(" "),
        plan.model_file,
        GCC_FLAGS.join(" "),
        PAN_FLAGS.join(" ")
    );
    out += &format!("ours: model {}\n\n", plan.check_args.join(" "));
    out += &format!("{:<14} {:>12} {:>12} {:>10}\n", "", "SPIN", "onceproof", "ours/SPIN");
    for (label, spin_cell, ours_cell, ratio_cell) in rows {
        out += &format!("{label:<14} {spin_cell:>12} {ours_cell:>12} {ratio_cell:>10}\n");
    }
    out += &format!(
        "\nSPIN: pan's states stored (the protocol's states + 1, its state before init{}), {} errors{}; seconds = \
         pan's wall time (its own: {:.2}; spin -a and gcc took {:.2} more, not counted); -w{hash_bits}: a {:.1} MiB \
         hash table, in its peak\n",
        if spin.pan.states_exact { "" } else { "; pan printed it rounded" },
        spin.pan.errors,
        if spin.complete { "" } else { "; INCOMPLETE (timeout or out of memory)" },
        spin.pan.elapsed_seconds,
        spin.build_seconds,
        ((1u64 << hash_bits) * 8) as f64 / (1024.0 * 1024.0),
    );
    let ours_seconds = match ours.exit_code {
        Some(code) => format!(
            "the whole `model check` (explore {:.2} + counterexamples {:.2}), exit {code}{}",
            ours.seconds,
            ours.counterexample_seconds,
            if ours.complete { "" } else { "; INCOMPLETE (its exploration stopped at --timeout)" }
        ),
        None => "`model check` until it was killed at twice --timeout; INCOMPLETE (unique states of its last \
                 progress line)"
            .to_string(),
    };
    let symmetry = if plan.symmetry { ", with symmetry (one state per class)" } else { "" };
    out += &format!("ours: unique states of a bfs, {} thread(s){symmetry}; seconds = {ours_seconds}\n", plan.threads);
    let peer = match bounds.faults {
        Faults::Bounded { .. } => spin_peer(bounds.strategy),
        Faults::Unbounded { .. } => unbounded_peer(bounds.strategy),
    };
    if let Some(note) = peer.and_then(|peer| peer.note) {
        out += note;
        out += "\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(strategy: Strategy, [groups, owners, records, crashes, rebalances, commit_every]: [u8; 6]) -> SpinBounds {
        SpinBounds { strategy, groups, owners, records, faults: Faults::Bounded { crashes, rebalances }, commit_every }
    }

    fn unbounded(strategy: Strategy, [groups, owners, records, commit_every]: [u8; 4], pauses: bool) -> SpinBounds {
        SpinBounds { strategy, groups, owners, records, faults: Faults::Unbounded { pauses }, commit_every }
    }

    const NO_ARGS: SpinArgs = SpinArgs {
        preset: None,
        groups: None,
        owners: None,
        records: None,
        crashes: None,
        rebalances: None,
        unbounded: false,
        no_pauses: false,
        commit_every: None,
        spin_hash_bits: None,
        symmetry: false,
        threads: None,
    };

    /// Bounds in; consumer.pml's -D flags and our check's arguments out.
    #[test]
    fn bounds_map_to_spins_defines_and_our_check_arguments() {
        let rows: [(SpinBounds, &str, &str); 4] = [
            (
                bounds(Strategy::AtomicFenced, [3, 2, 4, 2, 2, 2]),
                "-DSTRAT=4 -DR=4 -DK=2 -DB=2 -DG=3 -DC=2 -DK2=2",
                "check --json --strategy atomic-fenced --groups 3 --owners 2 --partitions 1 --records 4 --crashes 2 \
                 --rebalances 2 --commit-every 2 --inflight 2 --delta 5 --poison none --max-attempts 2 --ack-losses 0 \
                 --retentions 0 --pauses 0 --log-losses 0 --leader-failures 0 --isr-shrinks 0",
            ),
            (
                bounds(Strategy::EffectFirst, [2, 2, 4, 2, 2, 2]),
                "-DSTRAT=1 -DR=4 -DK=2 -DB=2 -DG=2 -DC=2 -DK2=2",
                "check --json --strategy effect-first --groups 2 --owners 2 --partitions 1 --records 4 --crashes 2 \
                 --rebalances 2 --commit-every 2 --inflight 2 --delta 5 --poison none --max-attempts 2 --ack-losses 0 \
                 --retentions 0 --pauses 0 --log-losses 0 --leader-failures 0 --isr-shrinks 0",
            ),
            (
                bounds(Strategy::OffsetStamp, [1, 3, 5, 0, 3, 3]),
                "-DSTRAT=6 -DR=5 -DK=0 -DB=3 -DG=1 -DC=3 -DK2=3",
                "check --json --strategy offset-stamp --groups 1 --owners 3 --partitions 1 --records 5 --crashes 0 \
                 --rebalances 3 --commit-every 3 --inflight 2 --delta 5 --poison none --max-attempts 2 --ack-losses 0 \
                 --retentions 0 --pauses 0 --log-losses 0 --leader-failures 0 --isr-shrinks 0",
            ),
            (
                // One record: --inflight must stay within --records.
                bounds(Strategy::FencedStoredEpoch, [1, 2, 1, 1, 1, 1]),
                "-DSTRAT=4 -DR=1 -DK=1 -DB=1 -DG=1 -DC=2 -DK2=1",
                "check --json --strategy fenced-stored-epoch --groups 1 --owners 2 --partitions 1 --records 1 \
                 --crashes 1 --rebalances 1 --commit-every 1 --inflight 1 --delta 5 --poison none --max-attempts 2 \
                 --ack-losses 0 --retentions 0 --pauses 0 --log-losses 0 --leader-failures 0 --isr-shrinks 0",
            ),
        ];
        for (bounds, defines, check) in rows {
            let plan = plan(&bounds).unwrap_or_else(|e| panic!("{bounds:?}: {e}"));
            assert_eq!(plan.model_file, "consumer.pml", "{bounds:?}");
            assert_eq!(plan.spin_defines.join(" "), defines, "{bounds:?}");
            assert_eq!(plan.check_args.join(" "), check, "{bounds:?}");
        }
    }

    /// Without budgets: consumer_unbounded.pml (no K or B; -DPAUSES for second incarnations,
    /// -DSTORED_EPOCH for fenced-stored-epoch's starts), and `any` for our budgets.
    #[test]
    fn unbounded_faults_map_to_the_unbounded_model_and_any() {
        let rows: [(SpinBounds, &str, &str); 4] = [
            (
                unbounded(Strategy::AtomicFenced, [2, 2, 3, 2], true),
                "-DSTRAT=4 -DR=3 -DG=2 -DC=2 -DK2=2 -DPAUSES",
                "check --json --strategy atomic-fenced --groups 2 --owners 2 --partitions 1 --records 3 --crashes any \
                 --rebalances any --commit-every 2 --inflight 2 --delta 5 --poison none --max-attempts 2 --ack-losses 0 \
                 --retentions 0 --pauses any --log-losses 0 --leader-failures 0 --isr-shrinks 0",
            ),
            (
                unbounded(Strategy::AtomicFenced, [2, 2, 3, 2], false),
                "-DSTRAT=4 -DR=3 -DG=2 -DC=2 -DK2=2",
                "check --json --strategy atomic-fenced --groups 2 --owners 2 --partitions 1 --records 3 --crashes any \
                 --rebalances any --commit-every 2 --inflight 2 --delta 5 --poison none --max-attempts 2 --ack-losses 0 \
                 --retentions 0 --pauses 0 --log-losses 0 --leader-failures 0 --isr-shrinks 0",
            ),
            (
                unbounded(Strategy::FencedStoredEpoch, [1, 2, 2, 2], true),
                "-DSTRAT=4 -DR=2 -DG=1 -DC=2 -DK2=2 -DPAUSES -DSTORED_EPOCH",
                "check --json --strategy fenced-stored-epoch --groups 1 --owners 2 --partitions 1 --records 2 \
                 --crashes any --rebalances any --commit-every 2 --inflight 2 --delta 5 --poison none --max-attempts 2 \
                 --ack-losses 0 --retentions 0 --pauses any --log-losses 0 --leader-failures 0 --isr-shrinks 0",
            ),
            (
                unbounded(Strategy::OffsetStamp, [2, 2, 3, 3], true),
                "-DSTRAT=6 -DR=3 -DG=2 -DC=2 -DK2=3 -DPAUSES",
                "check --json --strategy offset-stamp --groups 2 --owners 2 --partitions 1 --records 3 --crashes any \
                 --rebalances any --commit-every 3 --inflight 2 --delta 5 --poison none --max-attempts 2 --ack-losses 0 \
                 --retentions 0 --pauses any --log-losses 0 --leader-failures 0 --isr-shrinks 0",
            ),
        ];
        for (bounds, defines, check) in rows {
            let plan = plan(&bounds).unwrap_or_else(|e| panic!("{bounds:?}: {e}"));
            assert_eq!(plan.model_file, "consumer_unbounded.pml", "{bounds:?}");
            assert_eq!(plan.spin_defines.join(" "), defines, "{bounds:?}");
            assert_eq!(plan.check_args.join(" "), check, "{bounds:?}");
        }
        // The same refusals as with budgets.
        for (bounds, start) in [
            (unbounded(Strategy::PeriodicCommit, [1, 2, 2, 2], true), "--vs-spin compares only"),
            (unbounded(Strategy::CommitFirst, [1, 3, 2, 2], true), "--owners 3 is out of range for commit-first"),
            (unbounded(Strategy::AtomicFenced, [4, 2, 3, 2], true), "--groups 4 is out of range"),
        ] {
            let error = plan(&bounds).expect_err(start);
            assert!(error.starts_with(start), "{error}");
        }
        // The fenced rows' notes say whose start semantics SPIN's side has.
        let note = |strategy| unbounded_peer(strategy).and_then(|peer| peer.note).expect("a fenced row has a note");
        assert!(note(Strategy::AtomicFenced).contains("claim a new epoch"));
        assert!(note(Strategy::FencedStoredEpoch).contains("-DSTORED_EPOCH"));
    }

    /// The file pan is built from is the one the plan names, and the unbounded one has the knobs
    /// the plan passes (a renamed macro would otherwise be ignored by spin without a word).
    #[test]
    fn the_unbounded_model_is_compiled_in_with_the_knobs_the_plan_uses() {
        assert_eq!(model_text("consumer.pml"), CONSUMER_PML);
        assert_eq!(model_text("consumer_unbounded.pml"), CONSUMER_UNBOUNDED_PML);
        for knob in [
            "#ifndef STRAT",
            "#ifndef R\n",
            "#ifndef G\n",
            "#ifndef C\n",
            "#ifndef K2",
            "#ifdef PAUSES",
            "STORED_EPOCH",
        ] {
            assert!(CONSUMER_UNBOUNDED_PML.contains(knob), "{knob}");
        }
        // No budget is left in it.
        for budget in ["byte ncrash", "byte nreb", "#ifndef K\n", "#ifndef B\n"] {
            assert!(!CONSUMER_UNBOUNDED_PML.contains(budget), "{budget}");
        }
    }

    #[test]
    fn the_unbounded_preset_and_unbounded_flag_resolve_and_budgets_beside_them_are_refused() {
        let unbounded_preset = SpinArgs { preset: Some(Preset::Unbounded), ..NO_ARGS };
        assert_eq!(
            resolve(&unbounded_preset, &[]).expect("one strategy"),
            (unbounded(Strategy::AtomicFenced, [2, 2, 3, 2], true), 20)
        );
        let no_pauses = SpinArgs { no_pauses: true, ..unbounded_preset };
        assert_eq!(
            resolve(&no_pauses, &[Strategy::AtomicCas]).expect("one strategy"),
            (unbounded(Strategy::AtomicCas, [2, 2, 3, 2], false), 20)
        );
        // --unbounded lifts another preset's budgets and keeps its other bounds.
        let flag = SpinArgs { unbounded: true, records: Some(3), ..NO_ARGS };
        assert_eq!(
            resolve(&flag, &[Strategy::EffectFirst]).expect("one strategy"),
            (unbounded(Strategy::EffectFirst, [3, 2, 3, 2], true), 22)
        );
        let refusals = [
            (SpinArgs { crashes: Some(1), ..unbounded_preset }, "--crashes and --rebalances are budgets"),
            (SpinArgs { rebalances: Some(1), ..unbounded_preset }, "--crashes and --rebalances are budgets"),
            (SpinArgs { no_pauses: true, ..NO_ARGS }, "--no-pauses needs --unbounded"),
        ];
        for (args, start) in refusals {
            let error = resolve(&args, &[]).expect_err(start).to_string();
            assert!(error.starts_with(start) && !error.contains('\n'), "{error}");
        }
    }

    /// The report's header names the unbounded faults and the file pan was built from.
    #[test]
    fn the_report_names_unbounded_faults_and_the_unbounded_model() {
        let bounds = unbounded(Strategy::AtomicFenced, [2, 2, 3, 2], true);
        let plan = plan(&bounds).expect("a valid plan");
        let pan = PanReport {
            states_stored: 967_457,
            states_exact: true,
            errors: 0,
            elapsed_seconds: 3.2,
            out_of_memory: false,
        };
        let spin = SpinRun { pan, peak_rss_kib: 141_000, wall_seconds: 3.3, build_seconds: 1.0, complete: true };
        let ours = Measurement {
            unique_states: 2_000_000,
            states: 9_000_000,
            seconds: 6.0,
            counterexample_seconds: 0.0,
            wall_seconds: 6.6,
            peak_rss_kib: 282_000,
            complete: true,
            exit_code: Some(0),
        };
        let text = report(&bounds, &plan, 20, &spin, &ours);
        assert!(text.starts_with(
            "vs SPIN: atomic-fenced; groups 2 owners 2 partitions 1 records 3 crashes any rebalances any pauses any \
             commit-every 2; no other fault\n"
        ));
        assert!(text.contains("-DPAUSES -a consumer_unbounded.pml;"), "{text}");
        assert!(text.contains("--crashes any --rebalances any"), "{text}");
        assert!(text.contains("claim a new epoch"), "{text}");
        let states = text.lines().find(|line| line.starts_with("unique states")).expect("a states row");
        assert_eq!(states.split_whitespace().collect::<Vec<_>>(), ["unique", "states", "967457", "2000000", "2.07"]);
    }

    /// consumer.pml's six strategies, and our two fenced rows both on its atomic-fenced.
    #[test]
    fn the_six_spin_strategies_are_mapped_and_every_other_row_is_refused() {
        let mapped: Vec<(&str, u8)> =
            Strategy::ALL.iter().filter_map(|s| spin_peer(*s).map(|peer| (s.name(), peer.strat))).collect();
        let mut expected = vec![
            ("commit-first", 2),
            ("effect-first", 1),
            ("offset-stamp", 6),
            ("atomic", 3),
            ("atomic-fenced", 4),
            ("atomic-cas", 5),
            ("fenced-stored-epoch", 4),
        ];
        expected.sort();
        let mut sorted = mapped.clone();
        sorted.sort();
        assert_eq!(sorted, expected);
        for strategy in Strategy::ALL.iter().filter(|s| spin_peer(**s).is_none()) {
            let error = plan(&bounds(*strategy, [1, 2, 2, 1, 1, 2])).expect_err(strategy.name());
            assert!(error.ends_with(&format!("not {strategy}")), "{error}");
            assert!(!error.contains('\n'), "{error}");
        }
        // Both fenced rows print which one has SPIN's restart semantics.
        for strategy in [Strategy::AtomicFenced, Strategy::FencedStoredEpoch] {
            let note = spin_peer(strategy).and_then(|peer| peer.note).expect("a fenced row has a note");
            assert!(note.contains("fenced-stored-epoch"), "{note}");
        }
    }

    #[test]
    fn bounds_that_model_check_or_consumer_pml_refuses_are_one_line() {
        let rows = [
            (bounds(Strategy::AtomicFenced, [4, 2, 4, 2, 2, 2]), "--groups 4 is out of range"),
            (bounds(Strategy::AtomicFenced, [1, 2, 9, 2, 2, 2]), "--records 9 is out of range"),
            (bounds(Strategy::Atomic, [1, 2, 2, 5, 2, 2]), "--crashes 5 is out of range"),
            (bounds(Strategy::OffsetStamp, [1, 2, 2, 1, 1, 3]), "--commit-every 3 is out of range"),
            (bounds(Strategy::CommitFirst, [1, 3, 2, 1, 1, 2]), "--owners 3 is out of range for commit-first"),
        ];
        for (bounds, start) in rows {
            let error = plan(&bounds).expect_err(start);
            assert!(error.starts_with(start), "{error}");
        }
    }

    #[test]
    fn presets_are_issue_16s_configurations_and_flags_override_them() {
        let none = NO_ARGS;
        let rows = [
            (None, bounds(Strategy::AtomicFenced, [3, 2, 4, 2, 2, 2]), 22),
            (Some(Preset::Fenced3g), bounds(Strategy::AtomicFenced, [3, 2, 4, 2, 2, 2]), 22),
            (Some(Preset::EffectFirst2g), bounds(Strategy::EffectFirst, [2, 2, 4, 2, 2, 2]), 25),
            (Some(Preset::Fenced3gLarge), bounds(Strategy::AtomicFenced, [3, 2, 5, 3, 3, 2]), 26),
        ];
        for (preset, expected, bits) in rows {
            let args = SpinArgs { preset, ..none };
            assert_eq!(resolve(&args, &[]).expect("one strategy"), (expected, bits), "{preset:?}");
        }
        let args = SpinArgs { records: Some(2), spin_hash_bits: Some(16), ..none };
        let (resolved, bits) = resolve(&args, &[Strategy::FencedStoredEpoch]).expect("one strategy");
        assert_eq!((resolved, bits), (bounds(Strategy::FencedStoredEpoch, [3, 2, 2, 2, 2, 2]), 16));
        assert!(resolve(&none, &[Strategy::Atomic, Strategy::AtomicCas]).is_err());
    }

    /// `check`'s progress lines on stderr; the last one counts.
    #[test]
    fn a_killed_checks_unique_states_come_from_its_last_progress_line() {
        let rows = [
            (
                "checking effect-first (9 properties)\n  effect-first: 100 states, 40 unique, depth 3, 50 states/s\n  \
                 effect-first: 2500 states, 1234 unique, depth 9, 1250 states/s\n",
                Some(1234),
            ),
            ("checking effect-first (9 properties)\n", None),
            ("", None),
        ];
        for (stderr, unique) in rows {
            assert_eq!(last_progress_unique(stderr), unique, "{stderr}");
        }
    }

    /// pan's summary as SPIN 6.5.2 prints it (the first from the fenced-3g preset).
    #[test]
    fn pans_summary_and_times_peak_are_parsed() {
        let exact = "State-vector 124 byte, depth reached 65, errors: 0\n  2421058 states, stored\n 14867779 states, \
                     matched\n\npan: elapsed time 17.8 seconds\npan: rate 135938.12 states/second\n";
        let rounded = "State-vector 92 byte, depth reached 90, errors: 7\n1.2345679e+08 states, stored\npan: out of \
                       memory\npan: elapsed time 1.5e+02 seconds\n";
        let rows: [(&str, Result<PanReport, &str>); 4] = [
            (
                exact,
                Ok(PanReport {
                    states_stored: 2_421_058,
                    states_exact: true,
                    errors: 0,
                    elapsed_seconds: 17.8,
                    out_of_memory: false,
                }),
            ),
            (
                rounded,
                Ok(PanReport {
                    states_stored: 123_456_790,
                    states_exact: false,
                    errors: 7,
                    elapsed_seconds: 150.0,
                    out_of_memory: true,
                }),
            ),
            (
                "pan: too many processes\n",
                Err("pan printed no 'states, stored' line; its last line: pan: too many processes"),
            ),
            ("errors: 0\n12 states, stored\n", Err("pan printed no 'elapsed time' line")),
        ];
        for (text, expected) in rows {
            assert_eq!(parse_pan(text), expected.map_err(String::from), "{text}");
        }
        let interrupted =
            "Depth=      65 States=    1e+06 Transitions= 6.27e+06 Memory=   136.755\tt=     6.11 R=   2e+05\n\
                           pan:1: assertion violated (applied[0] <= 1)\nDepth=      65 States=    2e+06 Transitions= \
                           1.39e+07 Memory=   235.974\tt=     13.7 R=   1e+05\n";
        let expected = PanReport {
            states_stored: 2_000_000,
            states_exact: false,
            errors: 1,
            elapsed_seconds: 13.7,
            out_of_memory: false,
        };
        assert_eq!(parse_pan_progress(interrupted), expected);
        let time =
            "\tElapsed (wall clock) time (h:mm:ss or m:ss): 0:17.94\n\tMaximum resident set size (kbytes): 285840\n";
        assert_eq!(parse_peak_rss_kib(time), Ok(285_840));
        assert!(parse_peak_rss_kib("Command terminated by signal 9\n").is_err());
    }
}
