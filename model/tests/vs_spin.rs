//! `model bench --vs-spin` end to end: SPIN's pan on the peer model, then `model check`, as
//! child processes. Runs when spin, gcc and /usr/bin/time are installed (`bash
//! scripts/setup.sh` installs them); without one it prints `skipped: spin not installed (bash
//! scripts/setup.sh installs it)` (or gcc's, or time's), and fails instead of skipping when `CI`
//! is set. (The refusals that need no spin are rows of the bad-input table of docs/errors.md,
//! run by cli.rs.)

#[path = "../../tests/support/tools.rs"]
mod tools;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The whole run's cap, so that a hung pan or check cannot hang CI: the bench's own
/// `--timeout` stops each search at 60 s, and this kills the bench itself past 120 s.
const TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// pan's `states, stored` for atomic-fenced, 1 group x 2 owners, 2 records, 1 crash, 1
/// rebalance. Obtained once by hand with SPIN 6.5.2 and gcc 12:
/// `spin -DSTRAT=4 -DR=2 -DK=1 -DB=1 -DG=1 -DC=2 -a consumer.pml; gcc -O2 -DSAFETY -o pan pan.c;
/// ./pan -m100000 -c0 -n -w16` printed `132 states, stored`; the peer's independent
/// ref_count.py (`4 R=2 K=1 B=1 G=1`) counts 131 protocol states, and pan adds its pre-init state.
const SPIN_STATES_TINY: u64 = 132;

/// pan's `states, stored` for consumer_unbounded.pml's atomic-fenced, 1 group x 2 owners, 2
/// records, any number of crashes, rebalances and second incarnations. Obtained once by hand:
/// `spin -DSTRAT=4 -DR=2 -DG=1 -DC=2 -DK2=2 -DPAUSES -a consumer_unbounded.pml`, the same gcc and
/// pan flags, printed `597 states, stored`; model/bench/spin/ref_count_unbounded.py, an
/// independent BFS written from the README's description (`4 R=2 G=1 pauses=1`), counts 596.
const SPIN_STATES_TINY_UNBOUNDED: u64 = 597;

/// What `bench --vs-spin` runs and is missing here (spin, gcc, /usr/bin/time), `and`-joined;
/// empty when it can run.
fn missing_tools() -> String {
    let checked = [
        ("spin", tools::runs("spin", &["-V"])),
        ("gcc", tools::runs("gcc", &["--version"])),
        ("/usr/bin/time", Path::new("/usr/bin/time").is_file()),
    ];
    let names: Vec<&str> = checked.iter().filter(|(_, installed)| !installed).map(|(name, _)| *name).collect();
    names.join(" and ")
}

/// The cells of the table row that starts with `label`: SPIN's, ours and the ratio.
fn row<'a>(stdout: &'a str, label: &str) -> Vec<&'a str> {
    let line =
        stdout.lines().find(|line| line.starts_with(label)).unwrap_or_else(|| panic!("no '{label}' row in:\n{stdout}"));
    line[label.len()..].split_whitespace().collect()
}

/// Runs `model bench --vs-spin` with `args` under TEST_TIMEOUT and checks its table: pan's
/// state count is `spin_states`, ours a positive count, both times and memories numbers.
/// Returns stdout; `None` when spin is not installed (outside CI).
fn run_bench(args: &[&str], spin_states: u64) -> Option<String> {
    let missing = missing_tools();
    if !tools::require(&missing, missing.is_empty()) {
        return None;
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_model"))
        .args(["bench", "--vs-spin"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the model binary runs");
    let started = Instant::now();
    while child.try_wait().expect("the bench can be waited for").is_none() {
        if started.elapsed() > TEST_TIMEOUT {
            let _ = child.kill();
            panic!("model bench --vs-spin ran longer than {TEST_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().expect("the bench's output is read");
    let stdout = String::from_utf8(output.stdout).expect("stdout is UTF-8");
    let stderr = String::from_utf8(output.stderr).expect("stderr is UTF-8");
    assert_eq!(output.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let states = row(&stdout, "unique states");
    assert_eq!(states.len(), 3, "{stdout}");
    assert_eq!(states[0], spin_states.to_string(), "{stdout}");
    let ours: u64 = states[1].parse().unwrap_or_else(|_| panic!("our count is a number: {stdout}"));
    assert!(ours > 0, "{stdout}");
    for label in ["seconds", "peak MiB"] {
        let cells = row(&stdout, label);
        assert_eq!(cells.len(), 3, "{stdout}");
        for cell in &cells[..2] {
            assert!(cell.parse::<f64>().is_ok_and(|value| value >= 0.0), "{label}: {cell}\n{stdout}");
        }
    }
    Some(stdout)
}

#[test]
fn vs_spin_prints_pans_state_count_and_ours_for_a_tiny_configuration() {
    let args = ["--strategy", "atomic-fenced", "--groups", "1", "--records", "2", "--crashes", "1"];
    let Some(stdout) = run_bench(
        &[&args[..], &["--rebalances", "1", "--spin-hash-bits", "16", "--timeout", "60"]].concat(),
        SPIN_STATES_TINY,
    ) else {
        return;
    };
    assert!(stdout.contains("fenced-stored-epoch"), "atomic-fenced prints the semantics note:\n{stdout}");
}

/// The unbounded variant against `check --crashes any --rebalances any --pauses any`.
#[test]
fn vs_spin_compares_a_tiny_unbounded_configuration() {
    let args = ["--unbounded", "--strategy", "atomic-fenced", "--groups", "1", "--records", "2"];
    let Some(stdout) =
        run_bench(&[&args[..], &["--spin-hash-bits", "16", "--timeout", "60"]].concat(), SPIN_STATES_TINY_UNBOUNDED)
    else {
        return;
    };
    assert!(stdout.contains("-a consumer_unbounded.pml"), "{stdout}");
    assert!(stdout.contains("--crashes any --rebalances any"), "{stdout}");
    assert!(stdout.contains("--pauses any"), "{stdout}");
}
