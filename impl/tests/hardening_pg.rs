//! The PostgreSQL rows of docs/errors.md's "Bad input and the one line it gets" (`$PG` in their command),
//! as child processes against this test binary's private cluster: an overflowing total, `init`
//! of an initialised database, damaged metadata (`meta.partitions = -1`) and a server that
//! accepts connections and never answers (its postmaster stopped with SIGSTOP). Skips, printing
//! why, only when no PostgreSQL server binary exists; with `CI` set it fails instead.

mod common;

use common::readme_bad_input::{readme_bad_input_rows, BadInputRow};
use common::{pg, run_bad_input_row};
use std::path::Path;
use std::process::Command;

/// Held by each test while it runs: one of them stops the cluster's postmaster, which would
/// stall the other's connections.
static CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The data directories the rows name, each with its own fresh database.
const DIRS: [&str; 3] = ["pg-overflow", "pg-meta", "pg-stopped"];

/// `consumer ARGS... --store URL` in `cwd`, which must succeed.
fn run_in(cwd: &Path, url: &str, args: &[&str]) {
    let output = Command::new(common::BIN)
        .args(args)
        .args(["--store", url])
        .current_dir(cwd)
        .output()
        .expect("the consumer binary starts");
    assert_eq!(output.status.code(), Some(0), "consumer {}\n{}", args.join(" "), common::describe(&output));
}

/// The target a message names for `url` (`postgres:///NAME?host=SOCKET&user=postgres`, as
/// `pg::Server::url` makes it): `postgres://postgres@SOCKET/NAME`.
fn target(url: &str) -> String {
    let (name, query) = url.trim_start_matches("postgres:///").split_once('?').expect("a URL with a query");
    let host = query.split('&').find_map(|pair| pair.strip_prefix("host=")).expect("a host in the URL");
    format!("postgres://postgres@{host}/{name}")
}

/// Makes `dir` in `root` on a fresh database as docs/errors.md says; returns its URL.
fn prepare(root: &Path, dir: &str) -> String {
    let url = pg::database().expect("the cluster runs");
    run_in(root, &url, &["init", "--dir", dir]);
    match dir {
        "pg-overflow" => {
            run_in(root, &url, &["append", "--dir", dir, "--delta", "9223372036854775807", "--count", "2"])
        }
        "pg-meta" => {
            let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connect to the test database");
            let changed = client
                .execute("UPDATE meta SET value = -1 WHERE key = 'partitions'", &[])
                .expect("damage meta.partitions");
            assert_eq!(changed, 1, "meta has a partitions row");
        }
        "pg-stopped" => {}
        other => panic!("docs/errors.md names no PostgreSQL directory {other}"),
    }
    url
}

/// Sends `signal` (STOP or CONT) to the cluster's postmaster.
fn signal_postmaster(server: &pg::Server, signal: &str) {
    let pid = server.postmaster_pid().to_string();
    let status = Command::new("kill").args([&format!("-{signal}"), &pid]).status().expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Runs `row` with `$PG` and `$TARGET` replaced by its directory's database; the `pg-stopped`
/// row with the postmaster stopped, resumed whatever the row does.
fn run_row(row: &BadInputRow, root: &Path, urls: &[(&str, String)], server: &pg::Server) {
    let dir = row.dir().expect("every PostgreSQL row names its --dir");
    let url = &urls.iter().find(|(name, _)| *name == dir).unwrap_or_else(|| panic!("no directory {dir}")).1;
    let target = target(url);
    let replace = [("$PG", url.as_str()), ("$TARGET", target.as_str())];
    if dir != "pg-stopped" {
        run_bad_input_row(row, root, &replace);
        return;
    }
    signal_postmaster(server, "STOP");
    let started = std::time::Instant::now();
    let outcome = std::panic::catch_unwind(|| run_bad_input_row(row, root, &replace));
    let waited = started.elapsed();
    signal_postmaster(server, "CONT");
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    eprintln!("the stopped server held `{}` {:.2} s", row.command.join(" "), waited.as_secs_f64());
    // --busy-timeout 2 and the second of grace: the server's silence ends the wait, nothing else.
    assert!(waited.as_secs_f64() < 6.0, "the stopped server held the command {waited:?}");
}

#[test]
fn every_postgres_bad_input_row_of_the_readme_gets_its_one_line() {
    let Some(server) = pg::server() else { return };
    let _cluster = CLUSTER.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let root = scratch.path();
    let urls: Vec<(&str, String)> = DIRS.iter().map(|&dir| (dir, prepare(root, dir))).collect();
    let rows: Vec<_> = readme_bad_input_rows("consumer").into_iter().filter(BadInputRow::is_postgres).collect();
    for dir in DIRS {
        assert!(rows.iter().any(|row| row.dir() == Some(dir)), "no row of docs/errors.md runs on {dir}");
    }
    for row in &rows {
        run_row(row, root, &urls, server);
    }
    // After the refusals every store still reads: the overflow committed nothing.
    let output = Command::new(common::BIN)
        .args(["status", "--json", "--dir", "pg-overflow", "--store", &urls[0].1])
        .current_dir(root)
        .output()
        .expect("the consumer binary starts");
    assert_eq!(output.status.code(), Some(0), "{}", common::describe(&output));
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).expect("status --json is JSON");
    let groups = status["groups"].as_array().expect("groups");
    let group = groups.iter().find(|group| group["group"] == "g").expect("group g");
    assert_eq!(group["total"].as_i64(), Some(i64::MAX), "{status}");
    assert_eq!(group["progress"][0]["next_offset"].as_u64(), Some(1), "{status}");
}

/// Two `init`s of two data directories on one database at once: one initialises it, the other
/// queues on the advisory lock, finds the store and is refused in one line (exit 2).
#[test]
fn of_two_concurrent_inits_on_one_database_the_loser_prints_one_line() {
    if pg::server().is_none() {
        return;
    }
    let _cluster = CLUSTER.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let scratch = tempfile::tempdir().expect("a scratch directory");
    for round in 0..3 {
        let url = pg::database().expect("the cluster runs");
        let racers: Vec<_> = (0..2)
            .map(|racer| {
                Command::new(common::BIN)
                    .args(["init", "--dir"])
                    .arg(scratch.path().join(format!("r{round}-{racer}")))
                    .args(["--store", &url])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("the consumer binary starts")
            })
            .collect();
        let mut outputs: Vec<_> = racers.into_iter().map(|racer| racer.wait_with_output().expect("ends")).collect();
        outputs.sort_by_key(|output| output.status.code());
        let [winner, loser] = &outputs[..] else { panic!("two racers") };
        assert_eq!(winner.status.code(), Some(0), "round {round}\n{}", common::describe(winner));
        assert_eq!(loser.status.code(), Some(2), "round {round}\n{}", common::describe(loser));
        let line = format!("error: database {} is already initialised\n", target(&url));
        assert_eq!(common::stderr(loser), line, "round {round}");
    }
}
