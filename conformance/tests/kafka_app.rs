//! The front door (`cargo test -p conformance --features kafka --test kafka_app`): the example
//! applications of examples/kafka/, unmodified Python programs on confluent-kafka, run by
//! `conformance kafka app` on a broker it hosts behind its protocol-aware proxy, killed at their
//! store writes and at their OffsetCommits, churned, and judged from their database and the
//! protocol history; and the command's refusals of bad input and its interruption.
#![cfg(all(feature = "kafka", target_os = "linux"))]

#[path = "../../impl/tests/common/pg.rs"]
#[allow(dead_code)]
mod pg;

use pg::tools;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The family's time cap in CI: the four examples' runs and the bad-input cases.
const FAMILY_CAP: Duration = Duration::from_secs(300);

/// Python 3 with confluent-kafka (the real interpreter's path), or `None` after a skip line.
fn python() -> Option<String> {
    let output = Command::new("python3")
        .args(["-c", "import confluent_kafka, sys; print(sys.executable)"])
        .stdin(Stdio::null())
        .output();
    let path = output.ok().filter(|output| output.status.success()).map(|output| output.stdout);
    let path = path.map(|path| String::from_utf8_lossy(&path).trim().to_string()).filter(|p| !p.is_empty());
    tools::require("Python's confluent-kafka", path.is_some()).then(|| path.expect("checked"))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A fresh run directory under cargo's temporary directory.
fn run_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kafka-app").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.parent().expect("a parent")).expect("the parent");
    dir
}

/// `conformance kafka app ARGS -- COMMAND`, from the repository's root.
fn app(args: &[&str], command: &[&str]) -> Command {
    let mut run = Command::new(env!("CARGO_BIN_EXE_conformance"));
    run.current_dir(root()).args(["kafka", "app"]).args(args).arg("--").args(command);
    run.stdin(Stdio::null());
    run
}

fn show(output: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Each example, judged as its design predicts: the exit code and the words of the report.
/// Sixteen kills (about half of them right after a sync, the end of a commit) make each
/// anomaly all but certain: a process-then-commit instance killed right after its transaction's
/// sync applies that record again (one or two records in each of twelve runs of ten kills), a
/// commit-then-process one killed inside its transaction skips it (eight or nine). Four zombies
/// each: the atomic example without its epoch fence applies records again after its partitions
/// moved, the fenced one does not. A zombie frozen while another instance joins is not
/// reassigned in its wait (the broker waits for it to rejoin): with four, it is very unlikely
/// that none is. check_then_write's duplicates come from a zombie frozen between its check
/// and its write (the freeze passing a lock) or from a rebalance's overlap; a broken example
/// whose run shows no anomaly runs once more with the next seed (`SEEDS`). The six runs go in
/// three threads, two one after the other in each: they mostly wait for rebalances.
#[test]
fn each_example_is_judged_as_its_design_predicts() {
    let Some(python) = python() else { return };
    let started = Instant::now();
    let table: [Example; 6] = [
        (
            "process_then_commit.py",
            1,
            &["records applied more than once", "counterexample in row effect-first", "ANOMALY: not every one"],
        ),
        ("commit_then_process.py", 1, &["never applied (skipped)", "counterexample in row commit-first"]),
        ("auto_commit.py", 1, &["records applied more than once", "counterexample in row effect-first"]),
        ("atomic_fenced.py", 0, &["NO ANOMALY: each of the 200 records applied exactly once, by id"]),
        ("atomic_unfenced.py", 1, &["records applied more than once", "ZOMBIE WRITES", "counterexample in row atomic"]),
        ("check_then_write.py", 1, &["records applied more than once", "counterexample in row effect-first"]),
    ];
    let failures: Vec<String> = std::thread::scope(|scope| {
        let pairs: Vec<_> = table
            .chunks(2)
            .map(|pair| {
                scope.spawn(|| pair.iter().flat_map(|example| judge_example(&python, example)).collect::<Vec<_>>())
            })
            .collect();
        pairs.into_iter().flat_map(|pair| pair.join().expect("a runner thread")).collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(started.elapsed() < FAMILY_CAP, "the examples took {:?}, over the family's cap", started.elapsed());
}

/// An example's file, the exit code its design predicts, and words its report must have.
type Example = (&'static str, i32, &'static [&'static str]);

/// The seeds an example broken on purpose is run with until one shows its anomaly: its faults'
/// moments are drawn from the seed, but whether a zombie's freeze lands between a check and a
/// write (one draw in three of how many transactions it lets begin) also depends on the
/// processes' timing, so one seed's run can miss it (about one run in five for
/// check_then_write.py with four zombies). A correct example runs with the first only.
const SEEDS: [&str; 2] = ["1", "2"];

/// Runs one example; the failures, each with the command that reproduces it.
fn judge_example(python: &str, (example, code, words): &Example) -> Vec<String> {
    let started = Instant::now();
    let dir = run_dir(example);
    let dir_text = dir.display().to_string();
    let script = format!("examples/kafka/{example}");
    let spec = "examples/kafka/app.observe.toml";
    let mut tried = Vec::new();
    let (output, args) = loop {
        let seed = SEEDS[tried.len()];
        // No shrink here: the shrink has its own test, on a small schedule.
        let args = [
            "--observe",
            spec,
            "--records",
            "200",
            "--kills",
            "16",
            "--churn",
            "2",
            "--zombies",
            "4",
            "--seed",
            seed,
            "--shrink-candidates",
            "0",
            "--dir",
            &dir_text,
        ];
        let _ = std::fs::remove_dir_all(&dir);
        let output = app(&args, &[python, &script]).output().expect("conformance runs");
        tried.push(seed);
        let missed = *code == 1 && output.status.code() == Some(0);
        if !missed || tried.len() == SEEDS.len() {
            break (output, args.map(str::to_string));
        }
        eprintln!("{example}: no anomaly with seed {seed}, run again with the next");
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let reproduce = format!(
        "reproduce: cargo run -p conformance --features kafka -- kafka app {} -- python3 {script} (seeds tried: {})",
        args.join(" "),
        tried.join(", ")
    );
    if output.status.code() != Some(*code) {
        return vec![format!("{example}: expected exit {code}\n{}\n{reproduce}", show(&output))];
    }
    let mut failures = Vec::new();
    for word in *words {
        if !stdout.contains(word) {
            failures.push(format!("{example}: no {word:?} in the report\n{}\n{reproduce}", show(&output)));
        }
    }
    let struck = stdout.lines().filter(|line| line.starts_with("kill ")).count();
    if struck == 0 {
        failures.push(format!("{example}: no kill struck\n{}\n{reproduce}", show(&output)));
    }
    // Every connection through the proxy: its history has the instances' requests, and no
    // instance was seen connected to the broker itself.
    let history = stdout.lines().find(|line| line.starts_with("protocol history: "));
    let requests = history.and_then(|line| line.split_whitespace().nth(2)).and_then(|n| n.parse::<u64>().ok());
    if requests.is_none_or(|requests| requests == 0)
        || !stdout.contains("no instance was seen connected to the broker around the proxy")
    {
        failures.push(format!("{example}: not every request went through the proxy\n{}\n{reproduce}", show(&output)));
    }
    // A zombie whose partitions moved: the window a fence exists for.
    let moved = stdout.lines().filter(|line| line.starts_with("zombie ") && line.contains("reassigned to")).count();
    if moved == 0 {
        failures
            .push(format!("{example}: no zombie resumed after its partitions moved\n{}\n{reproduce}", show(&output)));
    }
    // The applications that commit to the group meet each protocol fault.
    let protocol = stdout.lines().filter(|line| line.starts_with("protocol fault ")).count();
    if !example.starts_with("atomic_") && protocol < 3 {
        failures.push(format!("{example}: {protocol} protocol faults struck, not 3\n{}\n{reproduce}", show(&output)));
    }
    eprintln!(
        "{example}: exit {code}, {struck} kills and {protocol} protocol faults struck, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    failures
}

/// An anomaly's schedule shrinks, and the shrunk schedule run again brings it back. The
/// process-then-commit example with four kills (any kill right after its transaction's sync
/// applies a record again): the shrink drops the kills it does not need and saves the rest;
/// `--schedule` runs that three times and says in how many the anomaly came back, which must
/// be at least once (a real process's timing is its own, so not every time). Bad schedules
/// and a schedule beside the options it replaces are refused in one line.
#[test]
fn a_shrunk_schedule_brings_its_anomaly_back() {
    let Some(python) = python() else { return };
    let started = Instant::now();
    let command = [python.as_str(), "examples/kafka/process_then_commit.py"];
    let spec = "examples/kafka/app.observe.toml";
    let dir = run_dir("shrink");
    let dir_text = dir.display().to_string();
    let args = [
        "--observe",
        spec,
        "--records",
        "60",
        "--kills",
        "4",
        "--churn",
        "0",
        "--protocol-faults",
        "0",
        "--zombies",
        "0",
        "--dir",
        &dir_text,
    ];
    let reproduce = format!(
        "reproduce: cargo run -p conformance --features kafka -- kafka app {} -- python3 {}",
        args.join(" "),
        command[1]
    );
    let output = app(&args, &command).output().expect("conformance runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{}\n{reproduce}", show(&output));
    let shrunk_line = stdout
        .lines()
        .find(|line| line.starts_with("shrunk: 4 faults to "))
        .unwrap_or_else(|| panic!("no shrink\n{}\n{reproduce}", show(&output)));
    let left: usize = shrunk_line["shrunk: 4 faults to ".len()..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!(left <= 4, "{shrunk_line}");
    let shrunk = dir.join("shrunk.toml");
    let text = std::fs::read_to_string(&shrunk).expect("the shrunk schedule");
    assert_eq!(text.matches("{ kind = ").count(), left, "{text}");
    assert!(stdout.contains(&format!("--schedule {}", shrunk.display())), "no command to run it again\n{stdout}");

    let again = run_dir("shrink-again");
    let again_text = again.display().to_string();
    let shrunk_text = shrunk.display().to_string();
    let args = ["--observe", spec, "--schedule", &shrunk_text, "--runs", "3", "--dir", &again_text];
    let output = app(&args, &command).output().expect("conformance runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let reproduce = format!(
        "reproduce: cargo run -p conformance --features kafka -- kafka app {} -- python3 {}",
        args.join(" "),
        command[1]
    );
    let rate = stdout
        .lines()
        .find_map(|line| line.strip_prefix("the anomaly came back in "))
        .unwrap_or_else(|| panic!("no rate\n{}\n{reproduce}", show(&output)));
    let came_back: u32 = rate.split_whitespace().next().and_then(|n| n.parse().ok()).expect("a count");
    assert!(rate.starts_with(&format!("{came_back} of 3 runs")), "{rate}");
    assert!(came_back >= 1, "the shrunk schedule never brought the anomaly back\n{}\n{reproduce}", show(&output));
    assert_eq!(output.status.code(), Some(1), "{}", show(&output));
    for run in 1..=3 {
        assert!(again.join("runs").join(run.to_string()).join("report.txt").is_file(), "run {run}'s report");
    }
    eprintln!(
        "shrunk 4 faults to {left}; came back in {came_back} of 3 runs; {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(started.elapsed() < FAMILY_CAP, "the shrink and its reruns took {:?}, over the cap", started.elapsed());

    // Refusals: one line, exit 2.
    let bad = run_dir("bad.schedule.toml");
    std::fs::create_dir_all(&bad).expect("a directory");
    let bad = bad.join("bad.schedule.toml");
    std::fs::write(
        &bad,
        "version = 1\nseed = 1\nrecords = 10\npartitions = 2\ninstances = 2\nfaults = [{ kind = \"crash\" }]\n",
    )
    .expect("written");
    let bad_text = bad.display().to_string();
    let table: [(&[&str], &str); 2] = [
        (
            &["--schedule", &shrunk_text, "--kills", "3"],
            "the argument '--schedule <FILE>' cannot be used with '--kills <KILLS>'",
        ),
        (&["--schedule", &bad_text], "unknown variant `crash`"),
    ];
    for (extra, words) in table {
        let dir = run_dir("refused");
        let mut args = vec!["--observe", spec, "--dir"];
        let dir_text = dir.display().to_string();
        args.push(&dir_text);
        args.extend_from_slice(extra);
        let output = app(&args, &command).output().expect("conformance runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let one_line = stderr.lines().count() == 1 && stderr.starts_with("error: ") && stderr.contains(words);
        assert!(
            output.status.code() == Some(2) && one_line,
            "{extra:?}: expected exit 2 and one line with {words:?}\n{}",
            show(&output)
        );
    }
}

/// Node.js with the JavaScript example's packages (scripts/setup.sh), or `None` after a skip line.
fn node() -> Option<()> {
    let modules = root().join("examples/kafka/js/node_modules");
    let script = format!("require('{0}/kafkajs'); require('{0}/pg')", modules.display());
    let found = Command::new("node").args(["-e", &script]).stdin(Stdio::null()).output();
    tools::require("Node.js with kafkajs and pg", found.is_ok_and(|output| output.status.success())).then_some(())
}

/// A second language, client and store: the JavaScript example (kafkajs, node-postgres) on a
/// PostgreSQL database the run makes on a private server. Its writes go to the server, so the
/// kills at store writes and the zombies are not tried and the report says so; the proxy's
/// protocol faults are, and the kill as its OffsetCommit arrives, after its transaction
/// committed, applies records again: the duplicate of process-then-commit, with row
/// effect-first.
#[test]
fn a_javascript_application_on_postgres_is_judged_through_the_proxy() {
    let Some(()) = node() else { return };
    let Some(server) = pg::server() else { return };
    let started = Instant::now();
    let dir = run_dir("js-postgres");
    let dir_text = dir.display().to_string();
    let admin = server.url("postgres");
    let script = "examples/kafka/js/process_then_commit.js";
    let args = [
        "--postgres",
        &admin,
        "--observe",
        "examples/kafka/js/app.observe.toml",
        "--records",
        "100",
        "--kills",
        "2",
        "--churn",
        "2",
        "--zombies",
        "1",
        "--shrink-candidates",
        "0",
        "--dir",
        &dir_text,
    ];
    let output = app(&args, &["node", script]).output().expect("conformance runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let reproduce = format!(
        "reproduce (with a PostgreSQL server at URL): cargo run -p conformance --features kafka -- kafka app {} -- node {script}",
        args.join(" ")
    );
    assert_eq!(output.status.code(), Some(1), "{}\n{reproduce}", show(&output));
    let words = [
        "the store: a PostgreSQL database made for this run",
        "records applied more than once",
        "counterexample in row effect-first",
        "3 protocol faults struck (kill at commit 1, kill after commit answer 1, close after commit sent 1)",
        "not tried: 3 kills at the store's writes and zombies, since a PostgreSQL store's writes go to its server",
        "no instance was seen connected to the broker around the proxy",
    ];
    for word in words {
        assert!(stdout.contains(word), "no {word:?} in the report\n{}\n{reproduce}", show(&output));
    }
    eprintln!("process_then_commit.js on PostgreSQL: exit 1, {:.1} s", started.elapsed().as_secs_f64());
    // A store and a spec that disagree, and a URL the instances could not be given: one line, exit 2.
    let sqlite_spec = "examples/kafka/app.observe.toml";
    let js_spec = "examples/kafka/js/app.observe.toml";
    let table: [(&[&str], &str); 3] = [
        (&["--postgres", &admin, "--observe", sqlite_spec], "reads a SQLite file (give it store = \"postgres\")"),
        (&["--observe", js_spec], "reads a PostgreSQL store: give the server with --postgres URL"),
        (&["--postgres", "mysql://localhost/x", "--observe", js_spec], "not a postgres:// or postgresql:// URL"),
    ];
    for (args, words) in table {
        let refused = run_dir("js-refused");
        let refused_text = refused.display().to_string();
        let mut all = args.to_vec();
        all.extend_from_slice(&["--dir", &refused_text]);
        let output = app(&all, &["node", script]).output().expect("conformance runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let one_line = stderr.lines().count() == 1 && stderr.starts_with("error: ") && stderr.contains(words);
        assert!(
            output.status.code() == Some(2) && one_line,
            "{args:?}: expected exit 2 and {words:?}\n{}",
            show(&output)
        );
    }
    assert!(started.elapsed() < FAMILY_CAP, "the JavaScript run took {:?}, over the cap", started.elapsed());
}

/// Bad input: one line on stderr naming the problem and exit 2, nothing on stdout but the
/// run's header.
#[test]
fn bad_input_is_one_line_naming_the_instance_or_the_spec() {
    let Some(python) = python() else { return };
    let wrong_spec = run_dir("wrong.observe.toml");
    std::fs::create_dir_all(&wrong_spec).expect("a directory");
    let wrong_spec = wrong_spec.join("wrong.observe.toml");
    let text =
        "version = 1\ndatabase = \"app.db\"\n[queries]\ntotal = \"SELECT total FROM totalz WHERE grp = :group\"\n";
    std::fs::write(&wrong_spec, text).expect("the spec");
    let wrong_spec = wrong_spec.display().to_string();
    let connect_only = "import os, socket, time; host, port = os.environ['ONCEPROOF_BOOTSTRAP'].split(':'); \
                        s = socket.create_connection((host, int(port))); print('connected, consuming nothing', flush=True); time.sleep(600)";
    let spec = "examples/kafka/app.observe.toml";
    type Case<'a> = (&'a str, &'a str, Vec<&'a str>, &'a [&'a str]);
    let table: [Case; 5] = [
        ("not found", spec, vec!["/nonexistent/onceproof-app"], &["error: instance app-1 (incarnation 1): cannot start '/nonexistent/onceproof-app': no such program (a path that is not a file, or a name not on PATH)"]),
        ("exits at once", spec, vec!["sh", "-c", "echo boom >&2; exit 3"], &["ended on its own (exit status: 3), where it should run until stopped; its last line (", "app-1.1.err): boom"]),
        ("never connects", spec, vec!["sh", "-c", "echo waiting; exec sleep 600"], &["never connected to the broker at 127.0.0.1:", "in 5 s; its last line (", "app-1.1.out): waiting"]),
        ("never consumes", spec, vec![&python, "-c", connect_only], &["never consumed: its database", "app.db was never created in 5 s; its last line (", "app-1.1.out): connected, consuming nothing"]),
        ("a spec that does not match", &wrong_spec, vec![&python, "examples/kafka/atomic_fenced.py"], &["query 'total': SELECT total FROM totalz WHERE grp = :group: no such table: totalz"]),
    ];
    let mut failures = Vec::new();
    for (name, spec, command, words) in table {
        let dir = run_dir(&name.replace(' ', "-"));
        let dir_text = dir.display().to_string();
        let args = ["--observe", spec, "--records", "20", "--start-timeout", "5", "--dir", &dir_text];
        let output = app(&args, &command).output().expect("conformance runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        let one_line =
            lines.len() == 1 && lines[0].starts_with("error: ") && words.iter().all(|w| lines[0].contains(w));
        if output.status.code() != Some(2) || !one_line {
            failures.push(format!("{name}: expected exit 2 and one line with {words:?}\n{}", show(&output)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Ctrl-C (SIGINT) stops every instance and the broker, removes the run's directory and
/// exits 130.
#[test]
fn an_interrupt_leaves_no_process_and_no_directory() {
    let Some(python) = python() else { return };
    let dir = run_dir("interrupted");
    let dir_text = dir.display().to_string();
    let args = ["--observe", "examples/kafka/app.observe.toml", "--records", "5000", "--dir", &dir_text];
    let mut child = app(&args, &[&python, "examples/kafka/atomic_fenced.py"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("conformance starts");
    let stdout = child.stdout.take().expect("piped");
    let mut reader = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    let consuming = reader.by_ref().map_while(Result::ok).any(|line| line.contains("connected and consuming"));
    assert!(consuming, "the run never started consuming");
    let store = format!("ONCEPROOF_STORE={}", dir.join("store").display());
    assert!(!processes_with(&store).is_empty(), "no instance found by its environment");
    // SAFETY: a plain kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().expect("conformance ends");
    drop(reader);
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut stderr).expect("its stderr");
    assert_eq!(status.code(), Some(130), "exit 128 + SIGINT; stderr: {stderr}");
    let said = "interrupted by signal 2: every instance and the broker stopped, the run's directory removed\n";
    assert_eq!(stderr, said);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !processes_with(&store).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(processes_with(&store), Vec::<String>::new(), "instances left running");
    assert!(!dir.exists(), "{} left behind", dir.display());
}

/// The processes whose environment has `entry` (as root, every process's environment reads).
fn processes_with(entry: &str) -> Vec<String> {
    let mut found = Vec::new();
    for process in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let name = process.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let environ = std::fs::read(process.path().join("environ")).unwrap_or_default();
        if environ.split(|&b| b == 0).any(|item| item == entry.as_bytes()) {
            found.push(name);
        }
    }
    found
}
