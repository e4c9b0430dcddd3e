//! Owner handles: one real owner, either a child process in the consumer's worker mode or an
//! in-process `consumer::owner::Owner`, driven one durable step at a time.

use consumer::crash::CrashPlan;
use consumer::log::Log;
use consumer::owner::{Lease, Mutation, Outcome, Owner, Settings};
use consumer::store::{Location, Store, StoreOptions};
use consumer::strategy::Step;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// Where owners run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Each owner is a child process serving `consumer::worker`; a crash is SIGKILL.
    Process,
    /// Each owner is an `Owner` in this process; a crash drops it (between steps, where the
    /// model's crashes fall, nothing else is lost).
    InProcess,
}

/// What identifies one owner of one group, and how it runs.
#[derive(Clone, Debug)]
pub struct OwnerSpec {
    /// A PostgreSQL store's URL; `None`: the SQLite file in `dir`.
    pub store: Option<String>,
    /// The executable serving the worker mode (process mode only); `None`: found as below.
    pub worker_exe: Option<PathBuf>,
    pub dir: PathBuf,
    pub group: String,
    pub owner: String,
    pub settings: Settings,
}

/// One running owner.
pub trait OwnerHandle {
    /// Performs one step; `Err` carries the real owner's refusal or failure as one line.
    fn step(&mut self, step: Step) -> Result<Outcome, String>;
    /// The coordinator's assignment after a rebalance named this owner.
    fn assign(&mut self, partition: u32) -> Result<(), String>;
    /// The owner's volatile state: its leases by partition.
    fn leases(&mut self) -> Result<BTreeMap<u32, Lease>, String>;
    /// Ends the owner as a crash would.
    fn kill(self: Box<Self>);
}

/// Starts an owner (a start is a restart: it resumes from the committed checkpoints).
pub fn start(mode: Mode, spec: &OwnerSpec) -> Result<Box<dyn OwnerHandle>, String> {
    match mode {
        Mode::Process => Ok(Box::new(ProcessOwner::spawn(spec)?)),
        Mode::InProcess => Ok(Box::new(InProcessOwner::start(spec)?)),
    }
}

pub fn store_path(dir: &Path) -> PathBuf {
    dir.join("store.db")
}

pub fn log_dir(dir: &Path) -> PathBuf {
    dir.join("log")
}

struct InProcessOwner {
    owner: Owner,
}

impl InProcessOwner {
    fn start(spec: &OwnerSpec) -> Result<InProcessOwner, String> {
        let location = match &spec.store {
            Some(url) => Location::parse(url),
            None => Location::Sqlite(store_path(&spec.dir)),
        };
        let store = Store::open_at(&location, StoreOptions::default()).map_err(|e| e.to_string())?;
        let log = Log::open_reader(&log_dir(&spec.dir), store.partitions()).map_err(|e| e.to_string())?;
        let owner = Owner::start(store, log, &spec.group, &spec.owner, spec.settings, CrashPlan::none())
            .map_err(|e| e.to_string())?;
        Ok(InProcessOwner { owner })
    }
}

impl OwnerHandle for InProcessOwner {
    fn step(&mut self, step: Step) -> Result<Outcome, String> {
        self.owner.perform(step).map_err(|e| e.to_string())
    }

    fn assign(&mut self, partition: u32) -> Result<(), String> {
        self.owner.assign(partition).map(|_| ()).map_err(|e| e.to_string())
    }

    fn leases(&mut self) -> Result<BTreeMap<u32, Lease>, String> {
        Ok(self.owner.leases().clone())
    }

    fn kill(self: Box<Self>) {}
}

/// A child process running this executable's hidden `worker` subcommand, which serves
/// `consumer::worker` on stdin/stdout: the consumer's worker mode, in a process of its own.
struct ProcessOwner {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl ProcessOwner {
    fn spawn(spec: &OwnerSpec) -> Result<ProcessOwner, String> {
        let exe = match &spec.worker_exe {
            Some(exe) => exe.clone(),
            None => worker_executable()?,
        };
        let settings = &spec.settings;
        let mut command = Command::new(exe);
        command
            .arg("worker")
            .arg("--dir")
            .arg(&spec.dir)
            .args(["--group", &spec.group, "--owner", &spec.owner, "--strategy", settings.strategy.name()])
            .args(["--commit-every", &settings.commit_every.to_string(), "--inflight", &settings.inflight.to_string()])
            .args(["--max-attempts", &settings.max_attempts.to_string()])
            .args(["--on-out-of-range", settings.on_out_of_range.name()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(url) = &spec.store {
            command.args(["--store", url]);
        }
        if let Some(mutation) = settings.mutation {
            command.args(["--mutation", mutation_name(mutation)]);
        }
        let mut child = command.spawn().map_err(|e| format!("cannot start a worker process: {e}"))?;
        let input = child.stdin.take().expect("stdin is piped");
        let output = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut owner = ProcessOwner { child, input, output };
        let ready = owner.read_line()?;
        if !ready.starts_with("ready ") {
            return Err(format!("the worker did not start: {ready}"));
        }
        Ok(owner)
    }

    fn read_line(&mut self) -> Result<String, String> {
        let mut line = String::new();
        let read = self.output.read_line(&mut line).map_err(|e| format!("worker output: {e}"))?;
        if read == 0 {
            return Err("the worker process ended unexpectedly".to_string());
        }
        Ok(line.trim_end().to_string())
    }

    fn request(&mut self, command: &str) -> Result<String, String> {
        writeln!(self.input, "{command}").and_then(|_| self.input.flush()).map_err(|e| format!("worker input: {e}"))?;
        let reply = self.read_line()?;
        match reply.strip_prefix("err ") {
            Some(error) => Err(error.to_string()),
            None => Ok(reply),
        }
    }
}

impl OwnerHandle for ProcessOwner {
    fn step(&mut self, step: Step) -> Result<Outcome, String> {
        let reply = self.request(&step.to_string())?;
        parse_outcome(&reply).ok_or_else(|| format!("unreadable worker reply '{reply}'"))
    }

    fn assign(&mut self, partition: u32) -> Result<(), String> {
        self.request(&format!("assign {partition}")).map(|_| ())
    }

    fn leases(&mut self) -> Result<BTreeMap<u32, Lease>, String> {
        let reply = self.request("state")?;
        let json = reply.strip_prefix("state ").ok_or_else(|| format!("unreadable state reply '{reply}'"))?;
        let value: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("worker state: {e}"))?;
        let leases = value.get("leases").cloned().unwrap_or_default();
        let by_name: BTreeMap<String, Lease> =
            serde_json::from_value(leases).map_err(|e| format!("worker leases: {e}"))?;
        by_name
            .into_iter()
            .map(|(partition, lease)| {
                partition.parse().map(|p| (p, lease)).map_err(|_| format!("partition key '{partition}'"))
            })
            .collect()
    }

    fn kill(mut self: Box<Self>) {
        // SIGKILL: the process gets no chance to finish anything, exactly like a crash.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ProcessOwner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parses a worker reply (`ok fetched 1`, `ok applied 1 skipped 0`, `ok fenced 1 2`, ...).
pub fn parse_outcome(reply: &str) -> Option<Outcome> {
    let words: Vec<&str> = reply.split_whitespace().collect();
    let number = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
    match words.as_slice() {
        ["ok", "fetched", _] => Some(Outcome::Fetched { count: number(2)? }),
        ["ok", "applied", _, "skipped", _] => Some(Outcome::Applied { applied: number(2)?, skipped: number(4)? }),
        ["ok", "recorded"] => Some(Outcome::Recorded),
        ["ok", "committed"] => Some(Outcome::Committed),
        ["ok", "fenced", held, current] => {
            Some(Outcome::Fenced { held: held.parse().ok()?, current: current.parse().ok()? })
        }
        ["ok", "failed", _] => Some(Outcome::Failed { attempts: number(2)? }),
        ["ok", "exhausted"] => Some(Outcome::Exhausted),
        ["ok", "dead-lettered", _] => Some(Outcome::DeadLettered { attempts: number(2)? }),
        ["ok", "reset", _, _] => Some(Outcome::Reset { from: number(2)?, to: number(3)? }),
        ["ok", "out-of-range", _, _] => Some(Outcome::OutOfRange { position: number(2)?, start: number(3)? }),
        _ => None,
    }
}

pub fn mutation_name(mutation: Mutation) -> &'static str {
    match mutation {
        Mutation::NoFence => "no-fence",
        Mutation::NoCas => "no-cas",
    }
}

/// The executable whose `worker` subcommand serves the consumer's worker mode: this one when
/// it is the conformance binary, else the conformance binary Cargo built next to this
/// executable's directory (test executables live in target/<profile>/deps).
fn worker_executable() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    if exe.file_stem().is_some_and(|stem| stem == "conformance") {
        return Ok(exe);
    }
    // Test executables live in target/<profile>/deps; the binary is one level up.
    let candidate = exe.parent().and_then(Path::parent).map(|dir| dir.join("conformance"));
    match candidate {
        Some(path) if path.exists() => Ok(path),
        _ => Err("cannot find the conformance binary to run workers".to_string()),
    }
}
