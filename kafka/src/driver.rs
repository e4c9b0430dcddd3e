//! The harness's side of owner processes: each `kafka-lane owner` is started with its group,
//! name, strategy and store, asked one request at a time, and killed with SIGKILL.

use crate::error::LaneError;
use crate::owner::{LaneStrategy, Timing};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long one request may take: a join waits for the coordinator (about a second per
/// rebalance, 30 s at most inside the owner), a fetch for its record.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(45);

/// Where the owners connect and keep their store.
#[derive(Clone, Debug)]
pub struct Lane {
    /// The binary the owners run, and the arguments before `owner`'s own (`kafka-lane`, `[]`;
    /// `conformance`, `["kafka"]`).
    pub program: PathBuf,
    pub program_args: Vec<String>,
    pub bootstrap: String,
    pub topic: String,
    pub store: PathBuf,
    pub strategy: LaneStrategy,
    pub timing: Timing,
}

/// One running owner process.
pub struct OwnerProcess {
    pub name: String,
    child: Child,
    stdin: ChildStdin,
    replies: mpsc::Receiver<String>,
}

impl OwnerProcess {
    pub fn start(lane: &Lane, group: &str, owner: &str) -> Result<OwnerProcess, LaneError> {
        let name = format!("{group}/{owner}");
        let mut child = Command::new(&lane.program)
            .args(&lane.program_args)
            .arg("owner")
            .args(["--bootstrap", &lane.bootstrap, "--topic", &lane.topic, "--group", group, "--owner", owner])
            .args(["--strategy", lane.strategy.name()])
            .arg("--store")
            .arg(&lane.store)
            .args(["--session-timeout-ms", &lane.timing.session_timeout_ms.to_string()])
            .args(["--max-poll-interval-ms", &lane.timing.max_poll_interval_ms.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|error| LaneError::Io { what: format!("start {}", lane.program.display()), error })?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let replies = lines(stdout);
        Ok(OwnerProcess { name, child, stdin, replies })
    }

    /// Sends one request and returns its reply; an error reply (`"ok": false`) is returned as
    /// it is, for the caller to judge.
    pub fn request(&mut self, request: Value) -> Result<Value, LaneError> {
        let fail = |detail: String| LaneError::Owner { owner: self.name.clone(), detail };
        writeln!(self.stdin, "{request}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| fail(format!("{request}: {e}")))?;
        let line = self.replies.recv_timeout(REPLY_TIMEOUT).map_err(|_| {
            let status = self.child.try_wait().ok().flatten();
            fail(format!("no reply to {request} within {REPLY_TIMEOUT:?} (exit status {status:?})"))
        })?;
        serde_json::from_str(&line).map_err(|e| fail(format!("reply {line:?} to {request}: {e}")))
    }

    /// As `request`, failing on an error reply.
    pub fn expect(&mut self, request: Value) -> Result<Value, LaneError> {
        let reply = self.request(request.clone())?;
        if reply["ok"] == json!(true) {
            Ok(reply)
        } else {
            Err(LaneError::Owner { owner: self.name.clone(), detail: format!("{request}: {}", reply["error"]) })
        }
    }

    /// SIGKILL, and the process reaped.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for OwnerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lines of `input`, read by a thread of their own: a receiver can wait with a timeout
/// (the driver's replies) or be polled between other work (an owner's requests).
pub fn lines(input: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(input).lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    receive
}

/// Creates onceproof's store for the lane: one partition, group `group` with its progress row
/// (next offset 0, epoch 1) naming `initial_owner`.
pub fn create_store(path: &Path, groups: &[(&str, &str)]) -> Result<(), LaneError> {
    use consumer::log::LogIdentity;
    use consumer::store::{Store, StoreOptions};
    let identity = LogIdentity { id: 0x6b61_666b_615f_6c6e, partitions: 1 };
    let mut store = Store::create(path, identity, StoreOptions::default())?;
    for (group, owner) in groups {
        store.ensure_group(group, owner)?;
    }
    Ok(())
}
