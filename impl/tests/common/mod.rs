//! Shared by the scenario tests: fresh data directories driven through the `consumer` binary,
//! their state read back with `status --json`, and worker processes spoken to line by line.

// Each test binary includes this module but uses only some of its helpers.
#![allow(dead_code)]

pub mod pg;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Output, Stdio};

#[path = "../../../tests/support/readme_bad_input.rs"]
pub mod readme_bad_input;
use readme_bad_input::BadInputRow;

/// The binary under test, built by Cargo for the integration tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_consumer");

/// The exit status of a deliberate crash (`--crash-at`).
pub const CRASHED: i32 = 9;
/// The exit status of `consume` when a fenced write told it it is a zombie (a refusal to
/// protect data).
pub const FENCED: i32 = 4;
/// The exit status of every rejected input or failed operation.
pub const FAILED: i32 = 2;
/// The exit status of a refusal to protect data: the log lost acknowledged records (or a file,
/// or is another log), or the store is ahead of it.
pub const REFUSED: i32 = 4;

/// What a scenario reads back from the store: a group's `total` and the `next_offset` of its
/// partition 0 (the committed checkpoint).
pub type GroupState = (i64, u64);

/// The library-level tests' fixture: a fresh SQLite store and a one-partition log holding
/// `records` records of +1, for an `Owner` driven in process (group `g`, owner `o0`).
pub struct Lab {
    _temp: tempfile::TempDir,
    pub location: consumer::store::Location,
    pub log_dir: PathBuf,
    identity: consumer::log::LogIdentity,
    /// The log's writer: a test may move it into a hook, or drop it to free the log's lock.
    pub writer: Option<consumer::log::Log>,
}

impl Lab {
    pub fn new(records: usize) -> Lab {
        use consumer::log::{encode_delta, Log};
        use consumer::store::{Location, Store, StoreOptions};
        let temp = tempfile::tempdir().expect("a temporary directory");
        let location = Location::Sqlite(temp.path().join("store.db"));
        let log_dir = temp.path().join("log");
        let identity = Log::init(&log_dir, 1).expect("create the log");
        Store::create_at(&location, identity, StoreOptions::default()).expect("create the store");
        let (mut writer, _) = Log::open_writer(&log_dir, identity).expect("open the log");
        writer.append_batch(0, &vec![encode_delta(1); records]).expect("append");
        Lab { _temp: temp, location, log_dir, identity, writer: Some(writer) }
    }

    /// An owner `o0` of group `g` with `settings`, started on the lab's store and log.
    pub fn owner(&self, settings: consumer::owner::Settings) -> consumer::owner::Owner {
        use consumer::store::{Store, StoreOptions};
        let store = Store::open_at(&self.location, StoreOptions::default()).expect("open the store");
        let log = consumer::log::Log::open_reader(&self.log_dir, self.identity).expect("open the log");
        let crash = consumer::crash::CrashPlan::none();
        consumer::owner::Owner::start(store, log, "g", "o0", settings, crash).expect("start the owner")
    }

    /// Group `g`'s total, read afresh.
    pub fn total(&self) -> i64 {
        use consumer::store::{Store, StoreOptions};
        Store::open_at(&self.location, StoreOptions::default()).expect("open").total("g").expect("total")
    }
}

/// How long a command the tests expect to finish may take. The slowest finishes in seconds; a
/// command still running after this is hung (a bug in the consumer, or a planted one: a
/// retry-forever owner that never counts its failures), and the test fails naming it instead
/// of waiting for ever.
pub const RUN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// `command.output()`, but a process still running after `timeout` is killed and the test
/// fails, naming the command and showing what it printed so far.
pub fn output_within(mut command: Command, timeout: std::time::Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the consumer binary starts");
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = read(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = read(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let deadline = std::time::Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child's status can be read") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let (out, err) = (stdout.join().unwrap_or_default(), stderr.join().unwrap_or_default());
            panic!(
                "{command:?} still ran after {timeout:?}: killed (a hang)\n--- stdout ---\n{}--- stderr ---\n{}",
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&err)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let (stdout, stderr) = (stdout.join().expect("stdout is read"), stderr.join().expect("stderr is read"));
    Output { status, stdout, stderr }
}

/// Renders a finished process for a failure message, so the cause is visible without rerunning.
pub fn describe(output: &Output) -> String {
    format!(
        "status {:?}\n--- stdout ---\n{}--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("the consumer writes UTF-8")
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("the consumer writes UTF-8")
}

/// Asserts an exit status, naming the case and showing both output streams when it differs.
pub fn expect_code(case: &str, what: &str, output: &Output, code: i32) {
    assert_eq!(output.status.code(), Some(code), "case '{case}': {what} should exit {code}\n{}", describe(output));
}

/// One on-disk data directory (log and store) in its own temporary directory, removed on drop.
pub struct DataDir {
    _temp: tempfile::TempDir,
    pub path: PathBuf,
    /// The `--store` every command is given (a PostgreSQL URL); none for the SQLite default.
    pub store: Option<String>,
}

impl DataDir {
    /// A directory nobody has initialised yet.
    pub fn uninitialised(case: &str) -> DataDir {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("case '{case}': cannot create a temp dir: {e}"));
        let path = temp.path().join("data");
        DataDir { _temp: temp, path, store: None }
    }

    /// An initialised directory whose store is the PostgreSQL database at `url`: every
    /// command, `init` included, is given `--store URL`; the log lives in the directory.
    pub fn postgres(case: &str, partitions: u32, url: &str) -> DataDir {
        let mut dir = DataDir::uninitialised(case);
        dir.store = Some(url.to_string());
        let output = dir.run("init", &["--partitions", &partitions.to_string()]);
        expect_code(case, "init --store URL", &output, 0);
        dir
    }

    /// An initialised directory with the CLI's defaults: DELETE journal, synchronous FULL.
    pub fn new(case: &str, partitions: u32) -> DataDir {
        let dir = DataDir::uninitialised(case);
        let output = dir.run("init", &["--partitions", &partitions.to_string()]);
        expect_code(case, "init", &output, 0);
        dir
    }

    /// An initialised single-partition directory holding `count` records of `delta`.
    pub fn with_records(case: &str, delta: i64, count: u64) -> DataDir {
        let dir = DataDir::new(case, 1);
        dir.append(case, 0, delta, count);
        dir
    }

    pub fn store_path(&self) -> PathBuf {
        self.path.join("store.db")
    }

    /// The rollback journal SQLite leaves behind when a writer dies before COMMIT.
    pub fn journal_path(&self) -> PathBuf {
        self.path.join("store.db-journal")
    }

    pub fn log_dir(&self) -> PathBuf {
        self.path.join("log")
    }

    pub fn log_file(&self, partition: u32) -> PathBuf {
        self.path.join("log").join(format!("partition-{partition}.log"))
    }

    /// The command line of `consumer SUBCOMMAND --dir DIR ARGS...`, not yet started.
    pub fn command(&self, subcommand: &str, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command.arg(subcommand).arg("--dir").arg(&self.path).args(args);
        if let Some(url) = &self.store {
            command.arg("--store").arg(url);
        }
        command
    }

    /// Runs `consumer SUBCOMMAND --dir DIR ARGS...` to completion, within `RUN_TIMEOUT`.
    pub fn run(&self, subcommand: &str, args: &[&str]) -> Output {
        output_within(self.command(subcommand, args), RUN_TIMEOUT)
    }

    pub fn append(&self, case: &str, partition: u32, delta: i64, count: u64) {
        let output = self.run(
            "append",
            &["--partition", &partition.to_string(), &format!("--delta={delta}"), "--count", &count.to_string()],
        );
        expect_code(case, "append", &output, 0);
    }

    /// Runs `consume` with `args` and checks its exit status.
    pub fn consume(&self, case: &str, args: &[&str], code: i32) -> Output {
        let output = self.run("consume", args);
        expect_code(case, &format!("consume {}", args.join(" ")), &output, code);
        output
    }

    /// The rebalance: hands the partition to `owner` at the next epoch.
    pub fn claim(&self, case: &str, group: &str, partition: u32, owner: &str) {
        let output = self.run("claim", &["--group", group, "--partition", &partition.to_string(), "--owner", owner]);
        expect_code(case, &format!("claim {group} {partition} {owner}"), &output, 0);
    }

    /// The whole `status --json` document. Reopening the store this way is also what rolls
    /// back a transaction a crashed process left uncommitted.
    pub fn status(&self, case: &str) -> serde_json::Value {
        let output = self.run("status", &["--json"]);
        expect_code(case, "status --json", &output, 0);
        serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("case '{case}': status --json is not JSON: {e}\n{}", describe(&output)))
    }

    /// One group's object of `status --json`; the group must exist.
    pub fn group(&self, case: &str, group: &str) -> serde_json::Value {
        let status = self.status(case);
        let groups = status["groups"]
            .as_array()
            .unwrap_or_else(|| panic!("case '{case}': status has no groups array: {status}"));
        groups
            .iter()
            .find(|g| g["group"] == group)
            .cloned()
            .unwrap_or_else(|| panic!("case '{case}': group {group} is not in the store: {status}"))
    }

    /// (total, next_offset of partition 0) of a group.
    pub fn state(&self, case: &str, group: &str) -> GroupState {
        let row = self.group(case, group);
        let total = row["total"].as_i64().unwrap_or_else(|| panic!("case '{case}': no total in {row}"));
        let next = row["progress"][0]["next_offset"]
            .as_u64()
            .unwrap_or_else(|| panic!("case '{case}': no next_offset in {row}"));
        (total, next)
    }

    /// A group's partition-0 progress row (next_offset, epoch, owner, stamp).
    pub fn progress(&self, case: &str, group: &str) -> serde_json::Value {
        self.group(case, group)["progress"][0].clone()
    }

    /// Starts `consumer worker` for one owner and waits for its `ready` line.
    pub fn worker(&self, case: &str, group: &str, owner: &str, strategy: &str) -> Worker {
        let mut command = self.command("worker", &["--group", group, "--owner", owner, "--strategy", strategy]);
        Worker::spawn(case, command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()))
    }

    /// Starts `consumer worker` for one owner with further flags (e.g. `--max-attempts 3`).
    pub fn worker_with(&self, case: &str, group: &str, owner: &str, strategy: &str, extra: &[&str]) -> Worker {
        let mut command = self.command("worker", &["--group", group, "--owner", owner, "--strategy", strategy]);
        command.args(extra);
        Worker::spawn(case, command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()))
    }
}

/// One worker process (`consumer worker`): a command line in, a reply line out.
pub struct Worker {
    case: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    fn spawn(case: &str, command: &mut Command) -> Worker {
        let mut child = command.spawn().expect("the consumer binary starts");
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut worker = Worker { case: case.to_string(), child, stdin, stdout };
        let ready = worker.read_line("(start)");
        assert!(ready.starts_with("ready {"), "case '{case}': the worker's first line is not `ready JSON`: {ready}");
        worker
    }

    fn read_line(&mut self, after: &str) -> String {
        let mut line = String::new();
        let read = self
            .stdout
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("case '{}': reading the worker: {e}", self.case));
        if read == 0 {
            // The worker ended: its stderr says why (it is small, the protocol goes to stdout).
            let status = self.child.wait().ok();
            let mut errors = String::new();
            if let Some(stderr) = self.child.stderr.as_mut() {
                let _ = stderr.read_to_string(&mut errors);
            }
            panic!("case '{}': the worker ended after '{after}' (status {status:?}); stderr: {errors}", self.case);
        }
        line.trim_end().to_string()
    }

    /// Sends one command and returns its reply line.
    pub fn send(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}")
            .unwrap_or_else(|e| panic!("case '{}': writing '{command}' to the worker: {e}", self.case));
        self.stdin.flush().unwrap_or_else(|e| panic!("case '{}': flushing '{command}' to the worker: {e}", self.case));
        self.read_line(command)
    }

    /// Sends one command and asserts its exact reply.
    pub fn expect(&mut self, command: &str, reply: &str) {
        let got = self.send(command);
        assert_eq!(got, reply, "case '{}': worker reply to '{command}'", self.case);
    }

    /// The owner's volatile state, from the `state` command's JSON.
    pub fn state(&mut self) -> serde_json::Value {
        let reply = self.send("state");
        let json =
            reply.strip_prefix("state ").unwrap_or_else(|| panic!("case '{}': not a state reply: {reply}", self.case));
        serde_json::from_str(json)
            .unwrap_or_else(|e| panic!("case '{}': the state reply is not JSON ({e}): {reply}", self.case))
    }

    /// Sends a command that must end the worker (an armed crash point) with exit status `code`
    /// before it replies.
    pub fn send_expecting_exit(&mut self, command: &str, code: i32) {
        writeln!(self.stdin, "{command}")
            .unwrap_or_else(|e| panic!("case '{}': writing '{command}' to the worker: {e}", self.case));
        self.stdin.flush().unwrap_or_else(|e| panic!("case '{}': flushing '{command}' to the worker: {e}", self.case));
        let mut rest = String::new();
        self.stdout
            .read_to_string(&mut rest)
            .unwrap_or_else(|e| panic!("case '{}': reading the worker: {e}", self.case));
        assert_eq!(rest, "", "case '{}': the worker replied to '{command}' instead of ending", self.case);
        let status = self.child.wait().unwrap_or_else(|e| panic!("case '{}': reaping the worker: {e}", self.case));
        assert_eq!(status.code(), Some(code), "case '{}': the worker's exit after '{command}'", self.case);
    }

    /// SIGKILLs the worker (a real crash: no exit code, no destructor) and reaps it.
    pub fn kill(&mut self) -> ExitStatus {
        self.child.kill().unwrap_or_else(|e| panic!("case '{}': SIGKILL failed: {e}", self.case));
        let status = self.child.wait().unwrap_or_else(|e| panic!("case '{}': reaping the worker: {e}", self.case));
        assert_eq!(
            status.signal(),
            Some(9),
            "case '{}': the worker should have died of SIGKILL, not {status:?}",
            self.case
        );
        status
    }

    /// Ends the worker through the protocol and checks it exits cleanly.
    pub fn quit(&mut self) {
        self.expect("quit", "ok bye");
        let status = self.child.wait().unwrap_or_else(|e| panic!("case '{}': reaping the worker: {e}", self.case));
        assert_eq!(status.code(), Some(0), "case '{}': the worker should exit 0 after quit", self.case);
    }
}

impl Drop for Worker {
    /// A failing test must not leave a worker behind waiting on its stdin.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every file under `root` with its bytes, sorted by path: a rejected command must leave it as
/// is. A symbolic link is not followed: its bytes are `->` and its target.
pub fn snapshot(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries {
            let entry = entry.expect("a directory entry is readable");
            let (path, kind) = (entry.path(), entry.file_type().expect("a directory entry has a type"));
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_symlink() {
                let target =
                    std::fs::read_link(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
                files.push((path, format!("-> {}", target.display()).into_bytes()));
            } else {
                let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
                files.push((path, bytes));
            }
        }
    }
    files.sort();
    files
}

impl BadInputRow {
    /// The data directory the row names (`--dir NAME`), if any.
    pub fn dir(&self) -> Option<&str> {
        let at = self.command.iter().position(|arg| arg == "--dir")?;
        self.command.get(at + 1).map(String::as_str)
    }

    /// Whether the row runs against PostgreSQL (`$PG` in its command).
    pub fn is_postgres(&self) -> bool {
        self.command.iter().any(|arg| arg.contains("$PG"))
    }
}

/// Runs one row of docs/errors.md (`consumer` and its arguments) in `cwd`, with each `(from, to)` of
/// `replace` substituted in its arguments and its line: the row's exit code, exactly the row's
/// line on stderr, nothing on stdout.
pub fn run_bad_input_row(row: &BadInputRow, cwd: &Path, replace: &[(&str, &str)]) {
    let substitute = |text: &str| replace.iter().fold(text.to_string(), |text, (from, to)| text.replace(from, to));
    let args: Vec<String> = row.command[1..].iter().map(|arg| substitute(arg)).collect();
    let output = Command::new(BIN).args(&args).current_dir(cwd).output().expect("the consumer binary starts");
    let command = row.command.join(" ");
    assert_eq!(output.status.code(), Some(row.exit), "{command}\n{}", describe(&output));
    assert_eq!(String::from_utf8_lossy(&output.stderr), format!("{}\n", substitute(&row.line)), "{command}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "", "{command}");
}

/// Runs `cut_at` for seeds 0..64: each run stops a step after it wrote an acknowledgement
/// record, before its sync, cuts the power with the seed and returns the cut and the
/// acknowledged end a reader then finds. Every run must leave one of `ends` (the state before
/// the record, or the record's own), both must occur, and at least 8 seeds must have torn or
/// garbled a write, so that the check is not vacuous.
pub fn every_cut_leaves_one_of(ends: [u64; 2], cut_at: impl Fn(u64) -> (consumer::log::Cut, u64)) {
    let mut found = std::collections::BTreeSet::new();
    let mut damaged_seeds = 0;
    for seed in 0..64 {
        let (cut, acked_end) = cut_at(seed);
        assert!(
            ends.contains(&acked_end),
            "seed {seed}: acknowledged end {acked_end} after {cut:?}, not one of {ends:?}"
        );
        found.insert(acked_end);
        damaged_seeds += u32::from(cut.torn + cut.garbled > 0);
    }
    assert_eq!(found, ends.into_iter().collect(), "the record survived some cuts and not others");
    assert!(damaged_seeds >= 8, "{damaged_seeds} seeds damaged a write");
}

/// Runs `f` on a thread: what it returned and the milliseconds it took, or `None` when it had
/// not returned after `patience` (a wait that never ends then fails its test instead of
/// hanging it; the thread is left behind).
pub fn within<T: Send + 'static>(
    patience: std::time::Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<(T, u128)> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let started = std::time::Instant::now();
        let outcome = f();
        let _ = sender.send((outcome, started.elapsed().as_millis()));
    });
    receiver.recv_timeout(patience).ok()
}
