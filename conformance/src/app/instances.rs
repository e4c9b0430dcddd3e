//! The application's instances: each a process of the user's command, traced in free-running
//! mode (kill points at its writes and syncs under the store), its standard output and error
//! kept in a file per incarnation, given the documented environment.

use crate::killpoints::{Killer, Scope, Strike, TraceError, Traced};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a stopped (SIGTERM) instance may take to close its consumer and exit before it is
/// killed.
pub const STOP_WAIT: Duration = Duration::from_secs(10);

/// What every instance is told, the documented contract (docs/your-kafka-consumer.md).
#[derive(Clone, Debug)]
pub struct Contract {
    pub bootstrap: String,
    pub topic: String,
    pub group: String,
    pub session_timeout_ms: u32,
    pub heartbeat_interval_ms: u32,
    /// The store directory, shared by the instances: the application's database is there.
    pub store: PathBuf,
    /// With `--postgres`: the URL of the run's own PostgreSQL database.
    pub database_url: Option<String>,
}

impl Contract {
    /// The environment variables, in the order the documentation lists them.
    pub fn environment(&self, instance: &str) -> Vec<(&'static str, String)> {
        let mut variables = vec![
            ("ONCEPROOF_BOOTSTRAP", self.bootstrap.clone()),
            ("ONCEPROOF_TOPIC", self.topic.clone()),
            ("ONCEPROOF_GROUP", self.group.clone()),
            ("ONCEPROOF_INSTANCE", instance.to_string()),
            ("ONCEPROOF_SESSION_TIMEOUT_MS", self.session_timeout_ms.to_string()),
            ("ONCEPROOF_HEARTBEAT_INTERVAL_MS", self.heartbeat_interval_ms.to_string()),
            ("ONCEPROOF_STORE", self.store.display().to_string()),
        ];
        if let Some(url) = &self.database_url {
            variables.push(("ONCEPROOF_DATABASE_URL", url.clone()));
        }
        variables
    }
}

/// One incarnation of an instance.
pub struct Instance {
    pub name: String,
    pub incarnation: u32,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    traced: Traced,
    /// Whether the harness stopped or killed it (an end it did not cause is the instance's own).
    ended_by_us: bool,
}

/// Why an instance could not start.
#[derive(Debug)]
pub struct StartError {
    pub instance: String,
    pub program: String,
    pub error: StartProblem,
}

#[derive(Debug)]
pub enum StartProblem {
    /// No such program: a path that is not a file, or a name not on the PATH.
    NotFound,
    /// Its output files or the store could not be opened.
    Io(std::io::Error),
    Trace(TraceError),
}

impl std::fmt::Display for StartProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartProblem::NotFound => write!(f, "no such program (a path that is not a file, or a name not on PATH)"),
            StartProblem::Io(error) => write!(f, "{error}"),
            StartProblem::Trace(error) => write!(f, "{error}"),
        }
    }
}

impl Instance {
    /// Starts incarnation `incarnation` of instance `name`: `command` with the contract's
    /// environment, from the current directory, its streams into `logs`.
    pub fn start(
        command: &[String],
        contract: &Contract,
        name: &str,
        incarnation: u32,
        logs: &Path,
    ) -> Result<Instance, StartError> {
        let label = format!("{name} (incarnation {incarnation})");
        let fail = |error: StartProblem| StartError { instance: label.clone(), program: command[0].clone(), error };
        let stdout = logs.join(format!("{name}.{incarnation}.out"));
        let stderr = logs.join(format!("{name}.{incarnation}.err"));
        let open = |path: &Path| std::fs::File::create(path).map_err(|error| fail(StartProblem::Io(error)));
        let mut built = Command::new(&command[0]);
        built.args(&command[1..]);
        if crate::protocol::missing_program(&built).is_some() {
            return Err(fail(StartProblem::NotFound));
        }
        for (key, value) in contract.environment(name) {
            built.env(key, value);
        }
        // Through `sh`, whose exec cannot fail before the tracer listens (protocol.rs says why).
        let mut process = crate::protocol::through_shell(&built);
        process.stdin(Stdio::null()).stdout(open(&stdout)?).stderr(open(&stderr)?);
        let scope = Scope::directory(&contract.store).map_err(|error| fail(StartProblem::Io(error)))?;
        let traced = Traced::spawn_free(process, scope).map_err(|error| fail(StartProblem::Trace(error)))?;
        Ok(Instance { name: name.to_string(), incarnation, stdout, stderr, traced, ended_by_us: false })
    }

    /// `name.incarnation`, as the log files are named.
    pub fn label(&self) -> String {
        format!("{} (incarnation {})", self.name, self.incarnation)
    }

    pub fn arm(&self, after_calls: u64, syncs_only: bool) {
        self.traced.arm(after_calls, syncs_only);
    }

    /// As `arm`, a freeze (a zombie) instead of a kill.
    pub fn arm_freeze(&self, after_calls: u64, syncs_only: bool, transactions_passed: u64) {
        self.traced.arm_freeze(after_calls, syncs_only, transactions_passed);
    }

    pub fn frozen(&self) -> bool {
        self.traced.frozen()
    }

    pub fn thaw(&self) {
        self.traced.thaw();
    }

    /// Records the time of each of its calls under the store from now (`take_watched`).
    pub fn watch_store_calls(&self) {
        self.traced.watch_store_calls();
    }

    pub fn take_watched(&self) -> Vec<Instant> {
        self.traced.take_watched()
    }

    /// Its state-changing calls under the store so far.
    pub fn store_calls(&self) -> u64 {
        self.traced.store_calls()
    }

    /// Where its freeze struck (without taking it for a kill, as `struck` does).
    pub fn freeze_strike(&self) -> Option<Strike> {
        self.traced.struck()
    }

    /// Takes back an armed kill; `false` when it struck meanwhile.
    pub fn disarm(&self) -> bool {
        self.traced.disarm()
    }

    /// Where the armed kill struck, once it has; the process is ours to have ended then.
    pub fn struck(&mut self) -> Option<Strike> {
        let strike = self.traced.struck();
        if strike.is_some() {
            self.ended_by_us = true;
        }
        strike
    }

    /// How it ended, when it ended on its own (not by a kill or a stop of ours).
    pub fn ended_on_its_own(&mut self) -> Option<String> {
        if self.ended_by_us || self.traced.struck().is_some() {
            return None;
        }
        let ended = self.traced.ended()?;
        Some(ended)
    }

    pub fn ended(&self) -> bool {
        self.traced.ended().is_some()
    }

    /// Waits until the process is reaped, at most `wait`.
    pub fn wait_ended(&self, wait: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < wait {
            if self.ended() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.ended()
    }

    /// A polite stop (SIGTERM: the application closes its consumer, leaving the group), then
    /// SIGKILL if it has not exited within `STOP_WAIT`. Returns whether it exited by itself.
    pub fn stop(&mut self) -> bool {
        self.ended_by_us = true;
        self.traced.disarm();
        self.traced.signal(libc::SIGTERM);
        let polite = self.wait_ended(STOP_WAIT);
        self.traced.kill();
        polite
    }

    /// SIGKILL now (the run is over or interrupted).
    pub fn kill(&mut self) {
        self.ended_by_us = true;
        self.traced.kill();
    }

    /// Whether any process of the instance has a TCP connection to `port` on this machine.
    pub fn connected_to(&self, port: u16) -> bool {
        let sockets = established_sockets(Side::Remote, port);
        !sockets.is_empty() && holds_socket(&self.traced.pids(), &sockets)
    }

    /// A handle that kills this incarnation from another thread.
    pub fn killer(&self) -> Killer {
        self.traced.killer()
    }

    /// Marks it ended by us: the proxy killed it at a commit.
    pub fn killed_by_proxy(&mut self) {
        self.ended_by_us = true;
    }

    /// The last non-empty line it printed and where (stderr first, where errors go), for an
    /// error message.
    pub fn last_line(&self) -> String {
        for path in [&self.stderr, &self.stdout] {
            let text = std::fs::read(path).unwrap_or_default();
            let text = String::from_utf8_lossy(&text);
            if let Some(line) = text.lines().rev().map(str::trim).find(|line| !line.is_empty()) {
                let line: String = line.chars().take(300).collect();
                return format!("its last line ({}): {line}", path.display());
            }
        }
        format!("it printed nothing ({} and {} are empty)", self.stdout.display(), self.stderr.display())
    }
}

/// Whether one of `pids` has one of the sockets `inodes` open.
pub fn holds_socket(pids: &[i32], inodes: &BTreeSet<u64>) -> bool {
    pids.iter().any(|pid| {
        let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
        entries.flatten().any(|entry| {
            let link = std::fs::read_link(entry.path()).unwrap_or_default();
            let text = link.to_string_lossy();
            text.strip_prefix("socket:[")
                .and_then(|rest| rest.strip_suffix(']'))
                .and_then(|inode| inode.parse::<u64>().ok())
                .is_some_and(|inode| inodes.contains(&inode))
        })
    })
}

/// Which end of a connection a port is matched against.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Local,
    Remote,
}

/// The inodes of the established TCP connections whose `side` port is `port` (IPv4 and IPv6).
pub fn established_sockets(side: Side, port: u16) -> BTreeSet<u64> {
    let mut inodes = BTreeSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
            let (Some(local), Some(remote), Some(state), Some(inode)) =
                (fields.get(1), fields.get(2), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let end = match side {
                Side::Local => local,
                Side::Remote => remote,
            };
            let end_port = end.rsplit_once(':').and_then(|(_, hex)| u16::from_str_radix(hex, 16).ok());
            if *state == "01" && end_port == Some(port) {
                if let Ok(inode) = inode.parse() {
                    inodes.insert(inode);
                }
            }
        }
    }
    inodes
}

/// Every incarnation started, by label, with a handle to kill it: what the proxy's hooks read,
/// from the proxy's threads, to name and kill the process behind a client port.
#[derive(Clone, Default)]
pub struct Owners {
    inner: Arc<Mutex<OwnersState>>,
}

#[derive(Default)]
struct OwnersState {
    started: Vec<(String, Killer)>,
    /// Labels the proxy killed, not yet taken by the run.
    killed: Vec<String>,
}

impl Owners {
    fn lock(&self) -> MutexGuard<'_, OwnersState> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn add(&self, label: String, killer: Killer) {
        self.lock().started.push((label, killer));
    }

    /// The label of the live incarnation holding the client end of a connection from `port`.
    pub fn owner_of_port(&self, port: u16) -> Option<(String, Killer)> {
        let sockets = established_sockets(Side::Local, port);
        if sockets.is_empty() {
            return None;
        }
        let started = self.lock().started.clone();
        started.into_iter().rev().find(|(_, killer)| holds_socket(&killer.pids(), &sockets))
    }

    /// The proxy's hooks: name the owner of a port; kill it (and note the label for the run).
    pub fn hooks(&self) -> kafka_lane::proxy::Hooks {
        let (named, killing) = (self.clone(), self.clone());
        kafka_lane::proxy::Hooks {
            owner: Box::new(move |port| named.owner_of_port(port).map(|(label, _)| label)),
            kill: Box::new(move |port| match killing.owner_of_port(port) {
                Some((label, killer)) => {
                    // Noted first: the run must never see the process dead before it knows
                    // the proxy killed it (it would take it for one that ended on its own).
                    killing.lock().killed.push(label);
                    killer.kill();
                    true
                }
                None => false,
            }),
        }
    }

    /// Syncs under the store by every incarnation started.
    pub fn sync_calls(&self) -> u64 {
        self.lock().started.iter().map(|(_, killer)| killer.sync_calls()).sum()
    }

    /// The labels the proxy killed since the last call.
    pub fn take_killed(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().killed)
    }
}
