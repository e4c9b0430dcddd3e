//! The harness's side of the open owner protocol (PROTOCOL.md): any consumer, started as a
//! shell command, driven one model step at a time over newline-delimited JSON. An owner is one
//! process (`ProtocolOwner`, a crash is its SIGKILL); the consumer's durable state is read and
//! the coordinator's claims are made through a process of the store role (`ProtocolStore`),
//! started afresh after every kill so that what the harness compares is what survived.

use crate::driver::{log_dir, OwnerHandle, OwnerSpec};
use crate::error::{Error, Unobservable};
use crate::killpoints::{Scope, TraceError, Traced, Window};
use consumer::log::{decode_delta, Log};
use consumer::owner::Outcome;
use consumer::protocol::{
    Body, ErrorBody, ErrorCode, Init, InitSettings, Lease, LogBounds, Message, Observed, Role, StepRequest, WireRecord,
    VERSION,
};
use consumer::strategy::{Step, StepKind};
use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

/// The longest reply line read; a longer one is a broken consumer, not a state to compare.
const REPLY_BYTES_MAX: u64 = 1024 * 1024;

/// How long the harness waits for one reply by default (`--reply-timeout-ms`). A step is a few
/// fsyncs, a start a process's start-up: seconds at worst on a loaded machine. Past the wait
/// the consumer is taken for frozen, killed and reported, so a hang cannot stall a replay.
pub const REPLY_TIMEOUT_MS_DEFAULT: u64 = 30_000;

/// A consumer's failure as seen over the protocol.
#[derive(Debug)]
pub enum ProtocolError {
    /// `sh -c 'exec COMMAND'` could not be started.
    Spawn {
        command: String,
        source: io::Error,
    },
    /// Sending `request` failed (the process is gone).
    Write {
        request: String,
        source: io::Error,
    },
    Read {
        request: String,
        source: io::Error,
    },
    /// No reply to `request` within the wait: the consumer is frozen (it was killed).
    Silent {
        request: String,
        waited_ms: u64,
    },
    /// The process's output ended before it replied to `request`: it exited or crashed.
    Ended {
        request: String,
        status: String,
    },
    /// A reply line that is not a message of version 1.
    Unreadable {
        request: String,
        line: String,
        reason: String,
    },
    /// A reply that answers another request, or is of the wrong type.
    Unexpected {
        request: String,
        line: String,
    },
    /// An `error` reply.
    Refused {
        request: String,
        error: ErrorBody,
    },
    /// The consumer could not be started traced, or its store not copied at a kill point.
    Trace {
        command: String,
        error: TraceError,
    },
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolError::Spawn { command, source } => write!(f, "cannot start '{command}': {source}"),
            ProtocolError::Write { request, source } => write!(f, "cannot send {request}: {source}"),
            ProtocolError::Read { request, source } => write!(f, "cannot read the reply to {request}: {source}"),
            ProtocolError::Silent { request, waited_ms } => write!(
                f,
                "no reply to {request} within {waited_ms} ms: the consumer is taken for frozen and killed \
                 (--reply-timeout-ms sets the wait)"
            ),
            ProtocolError::Ended { request, status } => {
                write!(f, "the process ended ({status}) without replying to {request}")
            }
            ProtocolError::Unreadable { request, line, reason } => {
                write!(f, "unreadable reply '{line}' to {request}: {reason}")
            }
            ProtocolError::Unexpected { request, line } => write!(f, "reply '{line}' does not answer {request}"),
            ProtocolError::Refused { request, error } => {
                let definite = if error.definite { "definite" } else { "indefinite" };
                write!(f, "{request} refused ({}, {definite}): {}", error.code.name(), error.text)
            }
            ProtocolError::Trace { command, error } => write!(f, "'{command}': {error}"),
        }
    }
}

impl std::error::Error for ProtocolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProtocolError::Spawn { source, .. }
            | ProtocolError::Write { source, .. }
            | ProtocolError::Read { source, .. } => Some(source),
            ProtocolError::Trace { error, .. } => Some(error),
            ProtocolError::Silent { .. }
            | ProtocolError::Ended { .. }
            | ProtocolError::Unreadable { .. }
            | ProtocolError::Unexpected { .. }
            | ProtocolError::Refused { .. } => None,
        }
    }
}

impl ProtocolError {
    /// The error code of an `error` reply, if this is one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ProtocolError::Refused { error, .. } => Some(error.code),
            ProtocolError::Spawn { .. }
            | ProtocolError::Write { .. }
            | ProtocolError::Read { .. }
            | ProtocolError::Silent { .. }
            | ProtocolError::Ended { .. }
            | ProtocolError::Unreadable { .. }
            | ProtocolError::Unexpected { .. }
            | ProtocolError::Trace { .. } => None,
        }
    }
}

/// One consumer process: requests out, replies in, one at a time.
struct Peer {
    process: Process,
    input: ChildStdin,
    /// The reply lines, read by a thread of their own so that a wait can end (`reply_timeout`).
    replies: Receiver<Line>,
    reply_timeout: Duration,
    next_id: u64,
    /// A reply line received while only looking whether one had come (`Peer::replied_within`).
    early: Option<Line>,
}

/// A request sent whose reply is still to be read (`Peer::send`, `Peer::receive`).
pub(crate) struct Sent {
    id: u64,
    request: String,
    expected: String,
}

/// A consumer process as started: plainly, or under the tracer (kill points inside steps).
pub(crate) enum Process {
    Plain(Child),
    /// `windows`: what the windows of the requests that were model steps found (the kill points
    /// inside them), until the harness takes them.
    Traced {
        traced: Box<Traced>,
        scope: Scope,
        command: String,
        windows: Vec<Window>,
    },
}

impl Process {
    fn start(command: &str, trace: Option<&Scope>) -> Result<(Process, ChildStdin, ChildStdout), ProtocolError> {
        Process::start_command(shell_command(command), command, trace)
    }

    /// Starts `built` (`command`, as messages name it), its stdin and stdout piped, traced when
    /// `trace` names the store's scope.
    pub(crate) fn start_command(
        mut built: Command,
        command: &str,
        trace: Option<&Scope>,
    ) -> Result<(Process, ChildStdin, ChildStdout), ProtocolError> {
        let Some(scope) = trace else {
            let mut child = built
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|source| ProtocolError::Spawn { command: command.to_string(), source })?;
            let input = child.stdin.take().expect("stdin is piped");
            let output = child.stdout.take().expect("stdout is piped");
            return Ok((Process::Plain(child), input, output));
        };
        // `sh` would say so too (exit 127, a line on stderr), but a refusal naming the program
        // is clearer: look for it first, as the shell would.
        if let Some(missing) = missing_program(&built) {
            let source = io::Error::new(io::ErrorKind::NotFound, format!("{missing} is not on the PATH"));
            return Err(ProtocolError::Spawn { command: command.to_string(), source });
        }
        let built = through_shell(&built);
        let (traced, input, output) = Traced::spawn(built, scope.clone())
            .map_err(|error| ProtocolError::Trace { command: command.to_string(), error })?;
        let command = command.to_string();
        let traced = Process::Traced { traced: Box::new(traced), scope: scope.clone(), command, windows: Vec::new() };
        Ok((traced, input, output))
    }

    /// Starts recording the kill points of one model step's request (traced only; a traced
    /// process's start opens one by itself). `seed` picks the sample of a full window.
    pub(crate) fn open_window(&self, seed: u64) {
        if let Process::Traced { traced, scope, .. } = self {
            traced.open_window(scope, seed);
        }
    }

    /// Ends the open window and keeps what it found for `take_windows`.
    pub(crate) fn close_window(&mut self) -> Result<(), ProtocolError> {
        let Process::Traced { traced, command, windows, .. } = self else { return Ok(()) };
        let window = traced.close_window().map_err(|error| ProtocolError::Trace { command: command.clone(), error })?;
        windows.push(window);
        Ok(())
    }

    /// The windows closed since the last call.
    pub(crate) fn take_windows(&mut self) -> Vec<Window> {
        match self {
            Process::Traced { windows, .. } => std::mem::take(windows),
            Process::Plain(_) => Vec::new(),
        }
    }

    /// How the process ended, once it has.
    pub(crate) fn status(&mut self) -> String {
        match self {
            Process::Plain(child) => match child.wait() {
                Ok(status) => status.to_string(),
                Err(error) => format!("status unknown: {error}"),
            },
            Process::Traced { traced, .. } => traced.status(),
        }
    }

    /// SIGKILL (a traced process with every thread and child it started).
    pub(crate) fn kill(&mut self) {
        match self {
            Process::Plain(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Process::Traced { traced, .. } => traced.kill(),
        }
    }
}

/// `sh -c 'exec "$0" "$@"' PROGRAM ARGS...`: the same process once `sh` has exec'd it, but an
/// exec that fails is `sh`'s to report (exit 126 or 127, a line on stderr). The traced child's
/// own exec is then always `/bin/sh`'s: a failed exec in the child, before the tracer has set
/// its options, could not report itself (its write would be stopped by the filter with no
/// tracer listening).
pub(crate) fn through_shell(built: &Command) -> Command {
    let mut shell = Command::new("/bin/sh");
    shell.arg("-c").arg(r#"exec "$0" "$@""#).arg(built.get_program()).args(built.get_args());
    if let Some(dir) = built.get_current_dir() {
        shell.current_dir(dir);
    }
    for (name, value) in built.get_envs() {
        match value {
            Some(value) => shell.env(name, value),
            None => shell.env_remove(name),
        };
    }
    shell.stderr(Stdio::inherit());
    shell
}

/// The program of a command started directly, when it names none that exists: a name without
/// a slash searched on the PATH, a path checked as it is.
pub(crate) fn missing_program(command: &Command) -> Option<String> {
    let program = Path::new(command.get_program());
    if program.components().count() > 1 {
        return (!program.is_file()).then(|| program.display().to_string());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path).any(|dir| dir.join(program).is_file());
    (!found).then(|| program.display().to_string())
}

/// What the reader thread saw: a line (its end of line included), the end of the output, or
/// a read error. It stops after anything but a whole line.
enum Line {
    Whole(Vec<u8>),
    Cut(Vec<u8>),
    End,
    Failed(io::Error),
}

/// Reads the consumer's output line by line until it ends; the thread ends with it (a
/// killed process closes its output) or when the peer is gone.
fn read_lines(output: ChildStdout, replies: mpsc::Sender<Line>) {
    let mut output = BufReader::new(output);
    loop {
        let mut line = Vec::new();
        let read = match (&mut output).take(REPLY_BYTES_MAX).read_until(b'\n', &mut line) {
            Ok(0) => Line::End,
            Ok(_) if line.ends_with(b"\n") => Line::Whole(line),
            Ok(_) => Line::Cut(line),
            Err(error) => Line::Failed(error),
        };
        let last = !matches!(read, Line::Whole(_));
        if replies.send(read).is_err() || last {
            return;
        }
    }
}

impl Peer {
    /// Starts `sh -c 'exec COMMAND'` (so the consumer is the child itself, and SIGKILL reaches
    /// it) and sends `init`.
    /// Traced (`trace`: the store's scope), the process's start until its reply to `init` is a
    /// window of its own: an owner's start is a model step (a restart claims its epochs).
    fn spawn(command: &str, init: Init, reply_timeout_ms: u64, trace: Option<&Scope>) -> Result<Peer, ProtocolError> {
        let mut peer = Peer::launch(command, reply_timeout_ms, trace)?;
        let sent = peer.send(Body::Init(init))?;
        peer.finish_init(sent)?;
        Ok(peer)
    }

    /// Starts the process, sending nothing yet (`spawn` sends `init` and waits for its reply).
    fn launch(command: &str, reply_timeout_ms: u64, trace: Option<&Scope>) -> Result<Peer, ProtocolError> {
        let (process, input, output) = Process::start(command, trace)?;
        let (sender, replies) = mpsc::channel();
        // Detached: it ends when the output does, and a grandchild holding the pipe open must
        // not keep the harness waiting for a join.
        std::thread::spawn(move || read_lines(output, sender));
        let reply_timeout = Duration::from_millis(reply_timeout_ms);
        Ok(Peer { process, input, replies, reply_timeout, next_id: 1, early: None })
    }

    /// The reply to `init`, which ends the window `Process::start` opened with the process.
    fn finish_init(&mut self, sent: Sent) -> Result<(), ProtocolError> {
        let reply = self.receive(sent);
        self.process.close_window()?;
        match reply? {
            Body::InitOk { protocol: VERSION } => Ok(()),
            other => Err(ProtocolError::Unexpected { request: "init".into(), line: format!("{other:?}") }),
        }
    }

    /// A request that is (part of) a model step: traced, its kill points are recorded from the
    /// request until its reply, and kept for the harness.
    fn request_in_window(&mut self, body: Body) -> Result<Body, ProtocolError> {
        self.process.open_window(self.next_id);
        let reply = self.request(body);
        self.process.close_window()?;
        reply
    }

    /// Sends one request and returns its reply's body; an `error` reply is `Refused`.
    fn request(&mut self, body: Body) -> Result<Body, ProtocolError> {
        let sent = self.send(body)?;
        self.receive(sent)
    }

    /// Sends one request without waiting for its reply (`receive` reads it).
    fn send(&mut self, body: Body) -> Result<Sent, ProtocolError> {
        let id = self.next_id;
        self.next_id += 1;
        let request = describe(&body);
        let expected = format!("{}_ok", body.type_name());
        let line = serde_json::to_string(&Message { id: Some(id), in_reply_to: None, body })
            .expect("a request always serialises");
        writeln!(self.input, "{line}")
            .and_then(|()| self.input.flush())
            .map_err(|source| ProtocolError::Write { request: request.clone(), source })?;
        Ok(Sent { id, request, expected })
    }

    /// Whether a reply line came within `wait` (kept for `receive`).
    fn replied_within(&mut self, wait: Duration) -> bool {
        if self.early.is_none() {
            self.early = self.replies.recv_timeout(wait).ok();
        }
        self.early.is_some()
    }

    /// The reply to a request `send` sent (waiting up to the reply timeout).
    fn receive(&mut self, sent: Sent) -> Result<Body, ProtocolError> {
        let Sent { id, request, expected } = sent;
        let line = self.read_line(&request)?;
        let message: Message = serde_json::from_str(&line).map_err(|e| ProtocolError::Unreadable {
            request: request.clone(),
            line: line.clone(),
            reason: e.to_string(),
        })?;
        if message.in_reply_to != Some(id) {
            return Err(ProtocolError::Unexpected { request, line });
        }
        match message.body {
            Body::Error(error) => Err(ProtocolError::Refused { request, error }),
            body if body.type_name() == expected => Ok(body),
            _ => Err(ProtocolError::Unexpected { request, line }),
        }
    }

    fn read_line(&mut self, request: &str) -> Result<String, ProtocolError> {
        let request = request.to_string();
        let received = match self.early.take() {
            Some(line) => Ok(line),
            None => self.replies.recv_timeout(self.reply_timeout),
        };
        let line = match received {
            Ok(Line::Whole(line)) => line,
            Ok(Line::Cut(line)) => {
                let reason = if line.len() as u64 >= REPLY_BYTES_MAX {
                    format!("no end of line within {REPLY_BYTES_MAX} bytes")
                } else {
                    "the output ended within the line".to_string()
                };
                let line = String::from_utf8_lossy(&line).trim_end().to_string();
                return Err(ProtocolError::Unreadable { request, line, reason });
            }
            Ok(Line::Failed(source)) => return Err(ProtocolError::Read { request, source }),
            Ok(Line::End) | Err(RecvTimeoutError::Disconnected) => {
                let status = self.process.status();
                return Err(ProtocolError::Ended { request, status });
            }
            Err(RecvTimeoutError::Timeout) => {
                self.kill();
                let waited_ms = u64::try_from(self.reply_timeout.as_millis()).unwrap_or(u64::MAX);
                return Err(ProtocolError::Silent { request, waited_ms });
            }
        };
        Ok(String::from_utf8_lossy(&line).trim_end().to_string())
    }

    /// SIGKILL: the process gets no chance to finish anything, exactly like a crash.
    fn kill(&mut self) {
        self.process.kill();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A request as the error messages name it: `step apply-atomic 0 2`, `observe g0`, ...
fn describe(body: &Body) -> String {
    match body {
        Body::Step(step) => format!("step {} {} {}", step.step, step.partition, step.offset),
        Body::Assign { partition } => format!("assign {partition}"),
        Body::Claim { group, partition, owner } => format!("claim {group} {partition} {owner}"),
        Body::Observe { group } => format!("observe {group}"),
        Body::Relay { group } => format!("relay {group}"),
        Body::Setup { group, owner } => format!("setup {group} {owner}"),
        Body::Arm { point } => format!("arm {point}"),
        body => body.type_name().to_string(),
    }
}

/// What every process of one replay is told at `init`, less its role and identity.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The shell command that starts the consumer.
    pub command: String,
    /// The directory the consumer owns for its store.
    pub store: PathBuf,
    /// The harness's data directory (the log is its `log/`).
    pub dir: PathBuf,
    pub partitions: u32,
    /// The model row the trace belongs to.
    pub row: String,
    /// The row's owner settings (the store role is told them too: it may check them).
    pub settings: consumer::owner::Settings,
    /// How long to wait for one reply before taking the consumer for frozen.
    pub reply_timeout_ms: u64,
    /// Trace every owner process and record the kill points inside its steps (the store
    /// role's processes are never traced: they are the harness's window on the store).
    pub inside_step: bool,
}

impl Launch {
    /// An owner's start request.
    pub fn request(&self, spec: &OwnerSpec) -> Init {
        self.init(Role::Owner, Some(spec))
    }

    /// The store role's start request.
    pub fn store_request(&self) -> Init {
        self.init(Role::Store, None)
    }

    fn init(&self, role: Role, spec: Option<&OwnerSpec>) -> Init {
        let settings = spec.map_or(&self.settings, |spec| &spec.settings);
        Init {
            protocol: VERSION,
            role,
            store: self.store.clone(),
            log: log_dir(&self.dir),
            partitions: self.partitions,
            strategy: settings.strategy.name().to_string(),
            row: self.row.clone(),
            group: spec.map(|spec| spec.group.clone()),
            owner: spec.map(|spec| spec.owner.clone()),
            start: spec.map(|spec| spec.settings.start.name().to_string()),
            settings: InitSettings {
                commit_every: settings.commit_every,
                inflight: settings.inflight as u64,
                max_attempts: settings.max_attempts,
                on_out_of_range: settings.on_out_of_range.name().to_string(),
                log_check: settings.log_check.name().to_string(),
            },
        }
    }
}

/// An owner of any consumer, in a process of its own.
pub struct ProtocolOwner {
    peer: Peer,
    /// The harness's reader of the log: the records and bounds a step request carries.
    log: Log,
    group: String,
    owner: String,
}

impl ProtocolOwner {
    pub fn spawn(launch: &Launch, spec: &OwnerSpec) -> Result<ProtocolOwner, Error> {
        let fail = |source| Error::Protocol { who: format!("{}/{}", spec.group, spec.owner), source };
        let scope = match launch.inside_step {
            true => Some(
                Scope::directory(&launch.store)
                    .map_err(Error::io(&launch.store, "resolve"))?
                    .with_durability(spec.durability.clone()),
            ),
            false => None,
        };
        let init = launch.init(Role::Owner, Some(spec));
        let peer = Peer::spawn(&launch.command, init, launch.reply_timeout_ms, scope.as_ref()).map_err(fail)?;
        let log = open_log(&spec.dir)?;
        Ok(ProtocolOwner { peer, log, group: spec.group.clone(), owner: spec.owner.clone() })
    }

    fn fail(&self, source: ProtocolError) -> Error {
        Error::Protocol { who: format!("{}/{}", self.group, self.owner), source }
    }

    /// Starts the owner traced (`launch.inside_step` on) with a hold armed before its `init`
    /// is sent (`Traced::arm_hold`), not waiting for the reply: a race holds a start's claim.
    pub(crate) fn spawn_held(
        launch: &Launch,
        spec: &OwnerSpec,
        begins_passed: u64,
    ) -> Result<(ProtocolOwner, Sent), Error> {
        let fail = |source| Error::Protocol { who: format!("{}/{}", spec.group, spec.owner), source };
        let scope = Scope::directory(&launch.store).map_err(Error::io(&launch.store, "resolve"))?;
        let mut peer = Peer::launch(&launch.command, launch.reply_timeout_ms, Some(&scope)).map_err(fail)?;
        match &peer.process {
            Process::Traced { traced, .. } => traced.arm_hold(begins_passed),
            Process::Plain(_) => return Err(Error::Unsupported("a held start without the tracer")),
        }
        let sent = peer.send(Body::Init(launch.init(Role::Owner, Some(spec)))).map_err(fail)?;
        let log = open_log(&spec.dir)?;
        Ok((ProtocolOwner { peer, log, group: spec.group.clone(), owner: spec.owner.clone() }, sent))
    }

    /// The reply to the `init` `spawn_held` sent.
    pub(crate) fn finish_start(&mut self, sent: Sent) -> Result<(), Error> {
        self.peer.finish_init(sent).map_err(|e| self.fail(e))
    }

    /// Sends a step without waiting for its reply: a race holds the owner part-way through.
    pub(crate) fn send_step(&mut self, step: Step) -> Result<Sent, Error> {
        let request = self.step_request(step)?;
        self.peer.send(Body::Step(request)).map_err(|e| self.fail(e))
    }

    /// Whether the owner replied within `wait`.
    pub(crate) fn replied_within(&mut self, wait: Duration) -> bool {
        self.peer.replied_within(wait)
    }

    /// The reply to a step `send_step` sent: its outcome, or its refusal or failure.
    pub(crate) fn finish_step(&mut self, sent: Sent) -> Result<Outcome, Error> {
        let request = sent.request.clone();
        match self.peer.receive(sent) {
            Ok(Body::StepOk(outcome)) => Ok(outcome),
            Ok(other) => Err(self.fail(ProtocolError::Unexpected { request, line: format!("{other:?}") })),
            Err(error) => Err(self.fail(error)),
        }
    }

    /// The owner's process under the tracer, when traced.
    pub(crate) fn traced(&self) -> Option<&Traced> {
        match &self.peer.process {
            Process::Traced { traced, .. } => Some(traced),
            Process::Plain(_) => None,
        }
    }

    /// The step request: the model's step, with what the log holds (the record itself for a
    /// fetch). A partition without a leader (a replicated log mid-election) has no bounds.
    fn step_request(&mut self, step: Step) -> Result<StepRequest, Error> {
        let log = match self.log.view(step.partition) {
            Ok(view) => Some(LogBounds { start: view.start, end: view.end }),
            Err(error) if crate::harness::is_unavailable(&error) => None,
            Err(error) => return Err(error.into()),
        };
        let mut records = Vec::new();
        let readable = log.is_some_and(|log| (log.start..log.end).contains(&step.offset));
        if step.kind == StepKind::Fetch && readable {
            for record in self.log.read_range(step.partition, step.offset..step.offset + 1)? {
                let delta = decode_delta(&record.payload);
                records.push(WireRecord { offset: record.offset, delta, poison: delta.is_none() });
            }
        }
        Ok(StepRequest {
            step: step.kind.name().to_string(),
            partition: step.partition,
            offset: step.offset,
            records,
            log,
        })
    }
}

fn open_log(dir: &Path) -> Result<Log, Error> {
    let log_dir = log_dir(dir);
    let identity = Log::read_identity(&log_dir)?.ok_or(Error::Unsupported("a replay without a log"))?;
    Ok(Log::open_reader(&log_dir, identity)?)
}

impl OwnerHandle for ProtocolOwner {
    fn step(&mut self, step: Step) -> Result<Outcome, Error> {
        let request = self.step_request(step)?;
        match self.peer.request_in_window(Body::Step(request)) {
            Ok(Body::StepOk(outcome)) => Ok(outcome),
            Ok(other) => {
                Err(self.fail(ProtocolError::Unexpected { request: step.to_string(), line: format!("{other:?}") }))
            }
            Err(error) => Err(self.fail(error)),
        }
    }

    fn assign(&mut self, partition: u32) -> Result<(), Error> {
        self.peer.request_in_window(Body::Assign { partition }).map(|_| ()).map_err(|e| self.fail(e))
    }

    fn take_windows(&mut self) -> Vec<Window> {
        self.peer.process.take_windows()
    }

    /// Arms a crash point (`STEP:WHEN[@OFFSET]`): the consumer kills itself there, inside a
    /// later step.
    fn arm(&mut self, point: &str) -> Result<(), Error> {
        self.peer.request(Body::Arm { point: point.to_string() }).map(|_| ()).map_err(|e| self.fail(e))
    }

    fn leases(&mut self) -> Result<BTreeMap<u32, Lease>, Error> {
        let leases = match self.peer.request(Body::Leases) {
            Ok(Body::LeasesOk { leases }) => leases,
            Ok(other) => {
                return Err(
                    self.fail(ProtocolError::Unexpected { request: "leases".into(), line: format!("{other:?}") })
                )
            }
            Err(error) => return Err(self.fail(error)),
        };
        let mut by_partition = BTreeMap::new();
        for lease in leases {
            let partition = lease.partition;
            if by_partition.insert(partition, lease).is_some() {
                let (group, owner) = (self.group.clone(), self.owner.clone());
                return Err(Unobservable::TwoLeases { group, owner, partition }.into());
            }
        }
        Ok(by_partition)
    }

    fn kill(mut self: Box<Self>) {
        self.peer.kill();
    }

    fn paused(&mut self) {
        self.owner.push('\'');
    }
}

/// The consumer's durable state and the coordinator's claims, through a store-role process.
pub struct ProtocolStore {
    launch: Launch,
    peer: Peer,
}

impl ProtocolStore {
    pub fn start(launch: Launch) -> Result<ProtocolStore, Error> {
        let peer = Peer::spawn(&launch.command, launch.init(Role::Store, None), launch.reply_timeout_ms, None)
            .map_err(store_failed)?;
        Ok(ProtocolStore { launch, peer })
    }

    /// Ends this process and starts a fresh one: after a kill, the state is read by a process
    /// that cannot remember anything the killed one did not make durable.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.peer.kill();
        self.peer =
            Peer::spawn(&self.launch.command, self.launch.init(Role::Store, None), self.launch.reply_timeout_ms, None)
                .map_err(store_failed)?;
        Ok(())
    }

    /// Creates the group (every partition at next offset 0, epoch 1, owned by `owner`).
    pub fn setup(&mut self, group: &str, owner: &str) -> Result<(), Error> {
        let body = Body::Setup { group: group.to_string(), owner: owner.to_string() };
        self.peer.request(body).map(|_| ()).map_err(store_failed)
    }

    /// The coordinator's rebalance: the partition's owner becomes `owner` at a new epoch.
    pub fn claim(&mut self, group: &str, partition: u32, owner: &str) -> Result<i64, Error> {
        let body = Body::Claim { group: group.to_string(), partition, owner: owner.to_string() };
        match self.peer.request(body).map_err(store_failed)? {
            Body::ClaimOk { epoch } => Ok(epoch),
            other => {
                Err(store_failed(ProtocolError::Unexpected { request: "claim".into(), line: format!("{other:?}") }))
            }
        }
    }

    /// The outbox's relay, one step; `false` when the outbox was empty.
    pub fn relay(&mut self, group: &str) -> Result<bool, Error> {
        match self.peer.request(Body::Relay { group: group.to_string() }).map_err(store_failed)? {
            Body::RelayOk { relayed } => Ok(relayed.is_some()),
            other => {
                Err(store_failed(ProtocolError::Unexpected { request: "relay".into(), line: format!("{other:?}") }))
            }
        }
    }

    pub fn observe(&mut self, group: &str) -> Result<Observed, Error> {
        match self.peer.request(Body::Observe { group: group.to_string() }).map_err(store_failed)? {
            Body::ObserveOk(observed) => Ok(observed),
            other => {
                Err(store_failed(ProtocolError::Unexpected { request: "observe".into(), line: format!("{other:?}") }))
            }
        }
    }
}

fn store_failed(source: ProtocolError) -> Error {
    Error::Protocol { who: "store".to_string(), source }
}

/// Starts `command` once as a store role in a scratch directory beside a fresh log, traced when
/// `options.inside_step` is on, and asks it to quit: a command that is not found, ends at once
/// or cannot be traced fails here, before any trace, with what went wrong.
pub fn preflight(command: &str, options: &crate::harness::Options) -> Result<(), ProtocolError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!("onceproof-preflight-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let dir = options.tmp_root.join(name);
    let result = preflight_in(command, options, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn preflight_in(command: &str, options: &crate::harness::Options, dir: &Path) -> Result<(), ProtocolError> {
    let failed = |source: io::Error| ProtocolError::Spawn { command: command.to_string(), source };
    let store = dir.join("consumer");
    std::fs::create_dir_all(&store).map_err(failed)?;
    let log = log_dir(dir);
    let identity = Log::identity_for_init(&log, 1).map_err(|e| failed(io::Error::other(e.to_string())))?;
    Log::create(&log, identity).map_err(|e| failed(io::Error::other(e.to_string())))?;
    let launch = Launch {
        command: command.to_string(),
        store: store.clone(),
        dir: dir.to_path_buf(),
        partitions: 1,
        row: "atomic-fenced".to_string(),
        settings: consumer::owner::Settings::new(consumer::strategy::Strategy::AtomicFenced),
        reply_timeout_ms: options.reply_timeout_ms,
        inside_step: options.inside_step,
    };
    let scope = match options.inside_step {
        true => Some(Scope::directory(&store).map_err(failed)?),
        false => None,
    };
    let mut peer = Peer::spawn(command, launch.init(Role::Store, None), launch.reply_timeout_ms, scope.as_ref())?;
    let _ = peer.request(Body::Quit);
    Ok(())
}

/// Characters that mean nothing to `sh` outside quotes (besides blanks between words).
fn is_plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_./-+:,@%=".contains(c)
}

/// The process `sh -c 'exec COMMAND'` would start. A command of plain words only (no quote,
/// variable, redirection, glob, ...) means the same to `sh` as its words split on blanks, so
/// it is started directly: one exec fewer per process (a replay starts several per trace).
fn shell_command(command: &str) -> Command {
    let words: Vec<&str> = command.split([' ', '\t']).filter(|word| !word.is_empty()).collect();
    match words.split_first() {
        // `NAME=VALUE` first is an assignment to `sh`, not a program.
        Some((program, args)) if words.iter().all(|word| word.chars().all(is_plain)) && !program.contains('=') => {
            let mut direct = Command::new(program);
            direct.args(args);
            direct
        }
        Some(_) | None => {
            let mut shell = Command::new("sh");
            shell.arg("-c").arg(format!("exec {command}"));
            shell
        }
    }
}

/// Quotes `text` for `sh` when it needs it (single quotes, each inner one closed, escaped and
/// reopened); a plain word stays as it is.
pub fn shell_quote(text: &str) -> String {
    if !text.is_empty() && text.chars().all(is_plain) {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::{shell_command, shell_quote};

    /// Plain words start directly; anything `sh` would interpret goes through `sh`; a quoted
    /// word round-trips through `sh` as itself.
    #[test]
    fn a_command_goes_through_sh_only_when_sh_would_change_it() {
        let table = [
            ("python3 examples/python/atomic_fenced.py --no-fence", "python3", 2),
            ("/work/x/conformance serve", "/work/x/conformance", 1),
            ("'/work/my dir/conformance' serve", "sh", 2),
            ("FOO=1 python3 x.py", "sh", 2),
            ("python3 x.py > log", "sh", 2),
            ("python3 $HOME/x.py", "sh", 2),
        ];
        for (command, program, args) in table {
            let built = shell_command(command);
            assert_eq!(built.get_program(), program, "{command}");
            assert_eq!(built.get_args().count(), args, "{command}");
        }
        for text in ["plain/path-1.0", "with space", "it's", "", "$HOME"] {
            let quoted = shell_quote(text);
            let output = std::process::Command::new("sh").arg("-c").arg(format!("printf %s {quoted}")).output();
            assert_eq!(String::from_utf8_lossy(&output.expect("sh runs").stdout), text, "{quoted}");
        }
    }
}
