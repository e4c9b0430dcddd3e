//! The load test in small: owner processes under rebalances and SIGKILLs keep the fenced and
//! serialised strategies exact, and the plain ones show their duplicates. The full-size run
//! (100,000 records) is `consumer load` itself, documented in docs/real-consumer.md.

use std::process::Command;

#[test]
fn fenced_and_serialised_strategies_stay_exact_under_kills_and_rebalances() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let data = dir.path().join("load");
    let output = Command::new(env!("CARGO_BIN_EXE_consumer"))
        .args(["load", "--records", "4000", "--batch", "20", "--rebalance-ms", "40", "--kill-ms", "60", "--seed", "3"])
        .args([
            "--strategy",
            "atomic-fenced",
            "--strategy",
            "atomic-cas",
            "--strategy",
            "effect-first",
            "--timeout",
            "120",
        ])
        .arg("--dir")
        .arg(&data)
        .output()
        .expect("the consumer binary runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&output.stderr));
    // Each strategy reports one line per group; the two that promise exactness must say so.
    for strategy in ["atomic-fenced", "atomic-cas"] {
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(strategy) && l.contains(" group ")).collect();
        assert_eq!(lines.len(), 2, "{strategy}: one line per group expected in:\n{text}");
        assert!(lines.iter().all(|l| l.ends_with(": exact")), "{strategy} is not exact:\n{text}");
    }
    // The run was really disturbed: at least one kill and more rebalances than the initial ones.
    let survived: Vec<&str> = text.lines().filter(|l| l.contains("survived")).collect();
    assert_eq!(survived.len(), 3, "{text}");
    assert!(survived.iter().all(|l| !l.contains("survived 0 kills")), "no kill happened:\n{text}");
}

#[path = "common/pg.rs"]
#[allow(dead_code)]
mod pg;

#[test]
fn the_load_test_stays_exact_on_postgres_too() {
    let Some(url) = pg::database() else { return };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let data = dir.path().join("load");
    let output = Command::new(env!("CARGO_BIN_EXE_consumer"))
        .args(["load", "--records", "2000", "--batch", "20", "--rebalance-ms", "40", "--kill-ms", "60", "--seed", "5"])
        .args(["--strategy", "atomic-fenced", "--strategy", "atomic-cas", "--timeout", "120", "--store", &url])
        .arg("--dir")
        .arg(&data)
        .output()
        .expect("the consumer binary runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&output.stderr));
    assert!(text.contains("(postgres)"), "the run did not use PostgreSQL:\n{text}");
    let exact = text.lines().filter(|l| l.contains(" group ") && l.ends_with(": exact")).count();
    assert_eq!(exact, 4, "two strategies x two groups must be exact:\n{text}");
}

/// How `load` is stopped in [`no_owner_process_outlives_load`].
#[derive(Clone, Copy, Debug)]
enum Stop {
    Timeout,
    Signal(i32),
}

/// The pids of the running processes whose parent is `parent` (from /proc/*/stat).
fn children_of(parent: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // The fields after the command name, which is in parentheses and may hold spaces.
        let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(1).and_then(|ppid| ppid.parse::<u32>().ok()) == Some(parent) {
            children.push(pid);
        }
    }
    children
}

/// The pids of the processes whose command line names `dir` (the owners get `--dir DIR`).
fn processes_naming(dir: &std::path::Path) -> Vec<u32> {
    let needle = dir.as_os_str().as_encoded_bytes();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if cmdline.split(|&b| b == 0).any(|arg| arg == needle) {
            found.push(pid);
        }
    }
    found
}

/// A timeout, a SIGTERM and a SIGINT each stop `load` with its owner processes killed and
/// reaped: after `load` exits, no process names its data directory (the children it had are
/// gone); the exit code is 2 for the timeout and 128 + the signal's number for a signal. A
/// SIGKILL of `load` itself takes its owners down too (their parent-death signal).
#[test]
fn no_owner_process_outlives_load() {
    let cases = [
        (Stop::Timeout, 2, "not done after 1 s"),
        (Stop::Signal(libc::SIGTERM), 128 + libc::SIGTERM, "stopped by SIGTERM"),
        (Stop::Signal(libc::SIGINT), 128 + libc::SIGINT, "stopped by SIGINT"),
        // No handler runs: the owners die of their PR_SET_PDEATHSIG, and `load` of the signal.
        (Stop::Signal(libc::SIGKILL), 128 + libc::SIGKILL, ""),
    ];
    for (stop, code, message) in cases {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let data = dir.path().join("load");
        let timeout = if matches!(stop, Stop::Timeout) { "1" } else { "600" };
        // Enough records that no run is done within a second; slow kills so children stay put.
        let mut load = Command::new(env!("CARGO_BIN_EXE_consumer"))
            .args(["load", "--records", "200000", "--strategy", "atomic-fenced", "--kill-ms", "600000"])
            .args(["--rebalance-ms", "600000", "--timeout", timeout])
            .arg("--dir")
            .arg(&data)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the consumer binary runs");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        // Wait for its 8 owner processes (2 groups x 4), remembering every child seen.
        let mut seen = std::collections::BTreeSet::new();
        while seen.len() < 8 {
            assert!(std::time::Instant::now() < deadline, "{stop:?}: only {} owners started", seen.len());
            if load.try_wait().expect("try_wait").is_some() {
                break;
            }
            seen.extend(children_of(load.id()));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(seen.len() >= 8, "{stop:?}: load exited before starting its owners");
        if let Stop::Signal(signal) = stop {
            // SAFETY: kill(2) on the pid of our own child, not yet waited for.
            assert_eq!(unsafe { libc::kill(load.id() as i32, signal) }, 0);
        }
        let status = loop {
            if let Some(status) = load.try_wait().expect("try_wait") {
                break status;
            }
            assert!(std::time::Instant::now() < deadline, "{stop:?}: load did not exit in 30 s");
            seen.extend(children_of(load.id()));
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut load.stderr.take().expect("piped"), &mut stderr).expect("stderr");
        // A process killed by a signal has no exit code: the shell's 128 + signal stands for it.
        let code_or_signal =
            status.code().or_else(|| std::os::unix::process::ExitStatusExt::signal(&status).map(|s| 128 + s));
        assert_eq!(code_or_signal, Some(code), "{stop:?}: {stderr}");
        assert!(stderr.contains(message), "{stop:?}: {stderr}");
        // Every child seen is gone (killed and reaped), or its pid now names another process.
        let left: Vec<&u32> =
            seen.iter().filter(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists()).collect();
        // The owners' PR_SET_PDEATHSIG is delivered as `load` dies: give it until the deadline.
        let mut naming = processes_naming(&data);
        while !naming.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            naming = processes_naming(&data);
        }
        assert!(naming.is_empty(), "{stop:?}: owner processes left running: {naming:?} (pids still present: {left:?})");
    }
}
