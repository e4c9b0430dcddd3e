//! The load test in small: owner processes under rebalances and SIGKILLs keep the fenced and
//! serialised strategies exact, and the plain ones show their duplicates. The full-size run
//! (100,000 records) is `consumer load` itself, documented in README.md.

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
