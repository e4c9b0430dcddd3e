//! Owner handles: one real owner, either a child process in the consumer's worker mode or an
//! in-process `consumer::owner::Owner`, driven one durable step at a time.

use crate::error::{Error, Unobservable, WorkerError};
use crate::killpoints::{Durability, Scope, Window};
use crate::protocol::{Launch, Process, ProtocolError, ProtocolOwner};
use consumer::crash::CrashPlan;
use consumer::log::Log;
use consumer::owner::{Mutation, Outcome, Owner, OwnerError, Settings};
use consumer::protocol::Lease;
use consumer::store::{Location, Store, StoreOptions};
use consumer::strategy::Step;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

/// Where owners run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Each owner is a child process serving `consumer::worker`; a crash is SIGKILL.
    Process,
    /// Each owner is an `Owner` in this process; a crash drops it (between steps, where the
    /// model's crashes fall, nothing else is lost).
    InProcess,
    /// Each owner is a child process of any consumer speaking the open protocol
    /// (PROTOCOL.md, `crate::protocol`); a crash is SIGKILL, and the consumer's durable state
    /// is read through a fresh process of its store role after every kill.
    Protocol,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Process => "process",
            Mode::InProcess => "in-process",
            Mode::Protocol => "protocol",
        }
    }
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
    /// Protocol mode: the consumer's command and what its `init` says.
    pub launch: Option<Launch>,
    /// Process mode: trace the worker and record the kill points inside its steps.
    pub inside_step: bool,
    /// The store's durable view, followed from the owner's syncs (power cuts judged only).
    pub durability: Option<Durability>,
}

/// One running owner.
pub trait OwnerHandle {
    /// Performs one step; `Err` carries the real owner's refusal or failure.
    fn step(&mut self, step: Step) -> Result<Outcome, Error>;
    /// The coordinator's assignment after a rebalance named this owner.
    fn assign(&mut self, partition: u32) -> Result<(), Error>;
    /// The owner's volatile state: its leases by partition (batch 1, in the protocol's terms).
    fn leases(&mut self) -> Result<BTreeMap<u32, Lease>, Error>;
    /// Ends the owner as a crash would.
    fn kill(self: Box<Self>);
    /// Arms a named crash point (`STEP:WHEN[@OFFSET]`): the owner kills itself there, inside a
    /// later step (this consumer's `--crash-at`, the protocol's `arm`).
    fn arm(&mut self, point: &str) -> Result<(), Error>;
    /// What the windows of the model steps since the last call found: the kill points inside
    /// them (none unless the owner runs traced).
    fn take_windows(&mut self) -> Vec<Window>;
    /// A `pause` made this owner an earlier incarnation (its successor runs under the same
    /// name): from now on its errors name it `gG/oO'`, as spec.md §2.2 spells it.
    fn paused(&mut self);
}

/// Starts an owner (a start is a restart: it resumes from the committed checkpoints).
pub fn start(mode: Mode, spec: &OwnerSpec) -> Result<Box<dyn OwnerHandle>, Error> {
    match mode {
        Mode::Process => Ok(Box::new(ProcessOwner::spawn(spec)?)),
        Mode::InProcess => Ok(Box::new(InProcessOwner::start(spec)?)),
        Mode::Protocol => {
            let launch = spec.launch.as_ref().ok_or(Error::Unsupported("a protocol owner without a command"))?;
            Ok(Box::new(ProtocolOwner::spawn(launch, spec)?))
        }
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
    group: String,
    name: String,
}

impl InProcessOwner {
    fn start(spec: &OwnerSpec) -> Result<InProcessOwner, Error> {
        let fail =
            |source| Error::Owner { group: spec.group.clone(), owner: spec.owner.clone(), source: Box::new(source) };
        let location = match &spec.store {
            Some(url) => Location::parse(url),
            None => Location::Sqlite(store_path(&spec.dir)),
        };
        let store = Store::open_at(&location, StoreOptions::default()).map_err(|e| fail(OwnerError::from(e)))?;
        let log = Log::open_reader(&log_dir(&spec.dir), store.log_identity()).map_err(|e| fail(OwnerError::from(e)))?;
        let owner =
            Owner::start(store, log, &spec.group, &spec.owner, spec.settings, CrashPlan::none()).map_err(fail)?;
        Ok(InProcessOwner { owner, group: spec.group.clone(), name: spec.owner.clone() })
    }

    fn fail(&self, source: OwnerError) -> Error {
        Error::Owner { group: self.group.clone(), owner: self.name.clone(), source: Box::new(source) }
    }
}

impl OwnerHandle for InProcessOwner {
    fn step(&mut self, step: Step) -> Result<Outcome, Error> {
        self.owner.perform(step).map_err(|e| self.fail(e))
    }

    fn assign(&mut self, partition: u32) -> Result<(), Error> {
        self.owner.assign(partition).map(|_| ()).map_err(|e| self.fail(e))
    }

    fn leases(&mut self) -> Result<BTreeMap<u32, Lease>, Error> {
        wire_leases(self.owner.leases(), &self.group, &self.name)
    }

    fn kill(self: Box<Self>) {}

    fn arm(&mut self, _: &str) -> Result<(), Error> {
        Err(Error::Unsupported("a named crash point in process (it ends the process)"))
    }

    /// In process, nothing can be killed inside a step.
    fn take_windows(&mut self) -> Vec<Window> {
        Vec::new()
    }

    fn paused(&mut self) {
        self.name.push('\'');
    }
}

/// A child process running this executable's hidden `worker` subcommand, which serves
/// `consumer::worker` on stdin/stdout: the consumer's worker mode, in a process of its own.
struct ProcessOwner {
    process: Process,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
    group: String,
    name: String,
    /// Seeds the sample of each step's window (the n-th request of this process).
    next_seed: u64,
}

impl ProcessOwner {
    fn spawn(spec: &OwnerSpec) -> Result<ProcessOwner, Error> {
        let fail = |source| Error::Worker { group: spec.group.clone(), owner: spec.owner.clone(), source };
        let exe = match &spec.worker_exe {
            Some(exe) => exe.clone(),
            None => worker_executable().map_err(fail)?,
        };
        let settings = &spec.settings;
        let mut command = Command::new(&exe);
        command
            .arg("worker")
            .arg("--dir")
            .arg(&spec.dir)
            .args(["--group", &spec.group, "--owner", &spec.owner, "--strategy", settings.strategy.name()])
            .args(["--commit-every", &settings.commit_every.to_string(), "--inflight", &settings.inflight.to_string()])
            .args(["--max-attempts", &settings.max_attempts.to_string()])
            .args(["--on-out-of-range", settings.on_out_of_range.name()])
            .args(["--start-epoch", settings.start.name()])
            .args(["--log-check", settings.log_check.name()])
            .stderr(Stdio::inherit());
        if let Some(url) = &spec.store {
            command.args(["--store", url]);
        }
        if let Some(mutation) = settings.mutation {
            command.args(["--mutation", mutation_name(mutation)]);
        }
        // This consumer's store is `store.db` (and its journal) beside the log; a PostgreSQL
        // store has no file to copy, so its owners are never traced.
        let scope = match (spec.inside_step, &spec.store) {
            (true, None) => Some(
                Scope::files(&spec.dir, "store.db")
                    .map_err(Error::io(&spec.dir, "resolve"))?
                    .with_durability(spec.durability.clone()),
            ),
            (true, Some(_)) | (false, _) => None,
        };
        let text = exe.display().to_string();
        let (process, input, output) = match Process::start_command(command, &text, scope.as_ref()) {
            Ok(started) => started,
            Err(ProtocolError::Spawn { source, .. }) => return Err(fail(WorkerError::Spawn { exe, source })),
            Err(error) => return Err(Error::Protocol { who: format!("{}/{}", spec.group, spec.owner), source: error }),
        };
        let output = BufReader::new(output);
        let (group, name) = (spec.group.clone(), spec.owner.clone());
        let mut owner = ProcessOwner { process, input, output, group, name, next_seed: 1 };
        // Its start (which claims epochs on a restart) is a window of its own, open since the
        // process started.
        let ready = owner.read_line().map_err(fail)?;
        let who = format!("{}/{}", spec.group, spec.owner);
        owner.process.close_window().map_err(|source| Error::Protocol { who, source })?;
        if !ready.starts_with("ready ") {
            return Err(fail(WorkerError::NotReady { line: ready }));
        }
        Ok(owner)
    }

    fn fail(&self, source: WorkerError) -> Error {
        Error::Worker { group: self.group.clone(), owner: self.name.clone(), source }
    }

    fn read_line(&mut self) -> Result<String, WorkerError> {
        let mut line = String::new();
        let read = self.output.read_line(&mut line).map_err(WorkerError::Read)?;
        if read == 0 {
            return Err(WorkerError::Ended);
        }
        Ok(line.trim_end().to_string())
    }

    /// Sends one command line and returns the reply line; an `err` reply is `Refused`.
    fn request(&mut self, command: &str) -> Result<String, WorkerError> {
        writeln!(self.input, "{command}")
            .and_then(|_| self.input.flush())
            .map_err(|source| WorkerError::Write { command: command.to_string(), source })?;
        let reply = self.read_line()?;
        match reply.strip_prefix("err ") {
            Some(message) => Err(WorkerError::Refused { command: command.to_string(), message: message.to_string() }),
            None => Ok(reply),
        }
    }

    fn state(&mut self) -> Result<BTreeMap<u32, consumer::owner::Lease>, WorkerError> {
        let command = "state";
        let line = self.request(command)?;
        let Some(json) = line.strip_prefix("state ") else {
            return Err(WorkerError::UnreadableReply { command: command.to_string(), line });
        };
        let leases = serde_json::from_str::<serde_json::Value>(json)
            .map(|value| value.get("leases").cloned().unwrap_or_default())
            .and_then(serde_json::from_value::<BTreeMap<String, consumer::owner::Lease>>);
        let by_name = match leases {
            Ok(by_name) => by_name,
            Err(source) => return Err(WorkerError::State { line, source }),
        };
        let mut by_partition = BTreeMap::new();
        for (key, lease) in by_name {
            let Ok(partition) = key.parse() else {
                return Err(WorkerError::PartitionKey { key, line });
            };
            by_partition.insert(partition, lease);
        }
        Ok(by_partition)
    }
}

impl ProcessOwner {
    /// A request that is a model step: traced, its kill points are kept for the harness.
    fn step_request(&mut self, command: &str) -> Result<String, Error> {
        self.next_seed += 1;
        self.process.open_window(self.next_seed);
        let reply = self.request(command).map_err(|e| self.fail(e));
        let who = format!("{}/{}", self.group, self.name);
        self.process.close_window().map_err(|source| Error::Protocol { who, source })?;
        reply
    }
}

impl OwnerHandle for ProcessOwner {
    fn step(&mut self, step: Step) -> Result<Outcome, Error> {
        let command = step.to_string();
        let reply = self.step_request(&command)?;
        parse_outcome(&reply).ok_or_else(|| self.fail(WorkerError::UnreadableReply { command, line: reply }))
    }

    fn assign(&mut self, partition: u32) -> Result<(), Error> {
        self.step_request(&format!("assign {partition}")).map(|_| ())
    }

    fn take_windows(&mut self) -> Vec<Window> {
        self.process.take_windows()
    }

    fn arm(&mut self, point: &str) -> Result<(), Error> {
        self.request(&format!("arm {point}")).map(|_| ()).map_err(|e| self.fail(e))
    }

    fn leases(&mut self) -> Result<BTreeMap<u32, Lease>, Error> {
        let leases = self.state().map_err(|e| self.fail(e))?;
        wire_leases(&leases, &self.group, &self.name)
    }

    fn kill(mut self: Box<Self>) {
        // SIGKILL: the process gets no chance to finish anything, exactly like a crash.
        self.process.kill();
    }

    fn paused(&mut self) {
        self.name.push('\'');
    }
}

impl Drop for ProcessOwner {
    fn drop(&mut self) {
        self.process.kill();
    }
}

/// This consumer's leases in the protocol's terms (batch 1: a larger batch is unobservable).
fn wire_leases(
    leases: &BTreeMap<u32, consumer::owner::Lease>,
    group: &str,
    owner: &str,
) -> Result<BTreeMap<u32, Lease>, Error> {
    let mut wire = BTreeMap::new();
    for (&partition, lease) in leases {
        let lease = Lease::of(partition, lease).map_err(|(offset, end)| Unobservable::Batch {
            group: group.to_string(),
            owner: owner.to_string(),
            offset,
            end,
        })?;
        wire.insert(partition, lease);
    }
    Ok(wire)
}

/// Parses a worker reply (`ok fetched 1`, `ok applied 1 skipped 0`, `ok fenced 1 2`,
/// `ok produced 0 1`, ...).
pub fn parse_outcome(reply: &str) -> Option<Outcome> {
    let words: Vec<&str> = reply.split_whitespace().collect();
    let number = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
    match words.as_slice() {
        ["ok", "fetched", _] => Some(Outcome::Fetched { count: number(2)? }),
        ["ok", "applied", _, "skipped", _] => Some(Outcome::Applied { applied: number(2)?, skipped: number(4)? }),
        ["ok", "recorded"] => Some(Outcome::Recorded),
        ["ok", "committed"] => Some(Outcome::Committed),
        ["ok", "produced", _, _] => Some(Outcome::Produced { first: number(2)?, end: number(3)? }),
        ["ok", "emailed", _] => Some(Outcome::Emailed { delivered: number(2)? }),
        ["ok", "indexed", _] => Some(Outcome::Indexed { written: number(2)? }),
        ["ok", "fenced", held, current] => {
            Some(Outcome::Fenced { held: held.parse().ok()?, current: current.parse().ok()? })
        }
        ["ok", "failed", _] => Some(Outcome::Failed { attempts: number(2)? }),
        ["ok", "exhausted"] => Some(Outcome::Exhausted),
        ["ok", "dead-lettered", _] => Some(Outcome::DeadLettered { attempts: number(2)? }),
        ["ok", "reset", _, _] => Some(Outcome::Reset { from: number(2)?, to: number(3)? }),
        ["ok", "out-of-range", _, _] => Some(Outcome::OutOfRange { position: number(2)?, start: number(3)? }),
        ["ok", "refused", _, _, _] => {
            Some(Outcome::Refused { stored: number(2)?, position: number(3)?, end: number(4)? })
        }
        _ => None,
    }
}

/// The name `--mutation` takes for `mutation` (`consumer::owner::Mutation::name`).
pub fn mutation_name(mutation: Mutation) -> &'static str {
    mutation.name()
}

/// The executable whose `worker` subcommand serves the consumer's worker mode: this one when
/// it is the conformance binary, else the conformance binary Cargo built next to this
/// executable's directory (test executables live in target/<profile>/deps).
pub(crate) fn worker_executable() -> Result<PathBuf, WorkerError> {
    let exe = std::env::current_exe().map_err(WorkerError::CurrentExe)?;
    if exe.file_stem().is_some_and(|stem| stem == "conformance") {
        return Ok(exe);
    }
    // Test executables live in target/<profile>/deps; the binary is one level up.
    let candidate = exe.parent().and_then(Path::parent).map(|dir| dir.join("conformance"));
    match candidate {
        Some(path) if path.exists() => Ok(path),
        candidate => Err(WorkerError::NoExecutable { candidate }),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_outcome;
    use consumer::owner::Outcome;

    /// Every outcome the worker replies with (`ok OUTCOME`, the consumer's `Display`) parses
    /// back to itself; a new outcome fails to compile here until it is listed.
    #[test]
    fn every_worker_reply_parses_back_to_its_outcome() {
        let outcomes = [
            Outcome::Fetched { count: 1 },
            Outcome::Applied { applied: 1, skipped: 0 },
            Outcome::Recorded,
            Outcome::Committed,
            Outcome::Produced { first: 3, end: 4 },
            Outcome::Emailed { delivered: 2 },
            Outcome::Indexed { written: 1 },
            Outcome::Fenced { held: 1, current: 2 },
            Outcome::Failed { attempts: 2 },
            Outcome::Exhausted,
            Outcome::DeadLettered { attempts: 2 },
            Outcome::Reset { from: 0, to: 2 },
            Outcome::OutOfRange { position: 0, start: 1 },
            Outcome::Refused { stored: 2, position: 2, end: 1 },
        ];
        for outcome in outcomes {
            match outcome {
                Outcome::Fetched { .. }
                | Outcome::Applied { .. }
                | Outcome::Recorded
                | Outcome::Committed
                | Outcome::Produced { .. }
                | Outcome::Emailed { .. }
                | Outcome::Indexed { .. }
                | Outcome::Fenced { .. }
                | Outcome::Failed { .. }
                | Outcome::Exhausted
                | Outcome::DeadLettered { .. }
                | Outcome::Reset { .. }
                | Outcome::OutOfRange { .. }
                | Outcome::Refused { .. } => {}
            }
            assert_eq!(parse_outcome(&format!("ok {outcome}")), Some(outcome.clone()), "{outcome}");
        }
        assert_eq!(parse_outcome("ok produced 3"), None);
    }
}
