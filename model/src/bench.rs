//! `model bench`: unique states, states per second and peak memory per strategy and search mode;
//! `--vs-spin` compares one strategy with SPIN instead (`bench_spin`).

use anyhow::{bail, Context};
use clap::Args;
use model::Strategy;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct BenchArgs {
    /// Also run the large configuration: one group, 4 records, 2 crashes, 2 rebalances. (With
    /// two groups those bounds reach 43 million unique states and 5 GiB for effect-first alone.)
    #[arg(long, conflicts_with = "vs_spin")]
    large: bool,
    /// Run SPIN's verifier on its peer model (model/bench/spin/consumer.pml, or without budgets
    /// consumer_unbounded.pml), then `model check`, on one strategy and the same bounds; print both state counts, wall times and peak
    /// memories and the ratios. Needs spin, gcc and /usr/bin/time (`apt-get install spin`);
    /// exit 3 when either search did not finish within --timeout (our check is killed at twice
    /// it: the timeout stops its exploration, not its counterexample search).
    #[arg(long)]
    vs_spin: bool,
    #[command(flatten)]
    spin: crate::bench_spin::SpinArgs,
    /// Only these strategies (default: all; with --vs-spin one, default the preset's).
    #[arg(long, value_parser = crate::parse_strategy)]
    strategy: Vec<Strategy>,
    /// Seconds allowed per run before it is reported as unfinished (0 < SECONDS <= 604800).
    #[arg(long, value_name = "SECONDS", default_value = "300", allow_hyphen_values = true,
          value_parser = crate::parse_seconds)]
    timeout: Duration,
}

/// One measured run: a child `model check --json` process, so that each peak RSS is its own.
pub struct Measurement {
    pub unique_states: u64,
    pub states: u64,
    /// The exploration's seconds, as `check` reports them.
    pub seconds: f64,
    pub counterexample_seconds: f64,
    /// The whole child process, measured around it: start, exploration, counterexamples, output.
    pub wall_seconds: f64,
    pub peak_rss_kib: u64,
    pub complete: bool,
    pub exit_code: Option<i32>,
}

const MODES: [(&str, &[&str]); 5] = [
    ("bfs 1 thread", &["--search", "bfs", "--threads", "1"]),
    ("bfs 2 threads", &["--search", "bfs", "--threads", "2"]),
    ("bfs + symmetry", &["--search", "bfs", "--threads", "2", "--symmetry"]),
    ("dfs 1 thread", &["--search", "dfs", "--threads", "1"]),
    ("dfs + symmetry", &["--search", "dfs", "--threads", "1", "--symmetry"]),
];

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if args.vs_spin {
        return crate::bench_spin::run(&args.spin, &args.strategy, args.timeout);
    }
    let strategies = if args.strategy.is_empty() { Strategy::ALL.to_vec() } else { args.strategy.clone() };
    let mut configs: Vec<(&str, Vec<&str>)> = vec![("default", vec![])];
    if args.large {
        configs.push(("large", vec!["--groups", "1", "--records", "4", "--crashes", "2", "--rebalances", "2"]));
    }
    outln!(
        "{:<8} {:<19} {:<15} {:>9} {:>10} {:>8} {:>10} {:>8} {:>8}",
        "config",
        "strategy",
        "mode",
        "unique",
        "states",
        "explore",
        "states/s",
        "cex s",
        "peak MiB"
    )?;
    for (config_name, bounds) in &configs {
        for strategy in &strategies {
            for (mode_name, mode) in MODES {
                let m = measure(*strategy, bounds, mode, args.timeout)?;
                outln!(
                    "{:<8} {:<19} {:<15} {:>9} {:>10} {:>8.2} {:>10.0} {:>8.2} {:>8.1}{}",
                    config_name,
                    strategy.name(),
                    mode_name,
                    m.unique_states,
                    m.states,
                    m.seconds,
                    m.states as f64 / m.seconds.max(1e-9),
                    m.counterexample_seconds,
                    m.peak_rss_kib as f64 / 1024.0,
                    if m.complete { "" } else { "  (timed out)" }
                )?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn measure(strategy: Strategy, bounds: &[&str], mode: &[&str], timeout: Duration) -> anyhow::Result<Measurement> {
    let mut args: Vec<String> =
        ["check", "--json", "--strategy", strategy.name(), "--timeout"].map(String::from).to_vec();
    args.push(timeout.as_secs_f64().to_string());
    args.extend(bounds.iter().chain(mode).map(|arg| arg.to_string()));
    run_check_child(&args)
}

/// Runs this binary with `args` (a `check --json`) as a child process and reads its report.
pub fn run_check_child(args: &[String]) -> anyhow::Result<Measurement> {
    let exe = std::env::current_exe().context("cannot find the model binary")?;
    let started = Instant::now();
    let output = Command::new(exe).args(args).output().context("cannot run model check")?;
    let wall_seconds = started.elapsed().as_secs_f64();
    read_check_report(&output.stdout, &output.stderr, output.status.code(), wall_seconds)
}

/// A finished `check --json` child's report (exit 2, bad input, is an error with its line).
pub fn read_check_report(
    stdout: &[u8],
    stderr: &[u8],
    exit_code: Option<i32>,
    wall_seconds: f64,
) -> anyhow::Result<Measurement> {
    if exit_code == Some(2) {
        bail!("model check failed: {}", String::from_utf8_lossy(stderr).lines().last().unwrap_or(""));
    }
    let document: serde_json::Value = serde_json::from_slice(stdout).context("model check printed no JSON")?;
    let report = &document["reports"][0];
    let number = |value: &serde_json::Value| value.as_u64().unwrap_or(0);
    Ok(Measurement {
        unique_states: number(&report["unique_states"]),
        states: number(&report["states"]),
        seconds: report["seconds"].as_f64().unwrap_or(0.0),
        counterexample_seconds: report["counterexample_seconds"].as_f64().unwrap_or(0.0),
        wall_seconds,
        peak_rss_kib: number(&document["peak_rss_kib"]),
        complete: report["complete"].as_bool().unwrap_or(false),
        exit_code,
    })
}
