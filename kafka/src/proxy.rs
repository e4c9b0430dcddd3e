//! A Kafka-protocol-aware TCP proxy in front of one broker: every client connection it accepts
//! gets one to the broker, and two threads forward the frames between them. Requests go on
//! byte for byte; responses too, except Metadata and FindCoordinator, whose broker addresses
//! are rewritten to the proxy's own listener, so that a client given the proxy as its bootstrap
//! never reaches the broker except through it (`wire::rewrite` refuses a broker it does not
//! front).
//!
//! Everything forwarded is recorded as the run's protocol history (`Event`s in the order the
//! proxy saw them, with the milliseconds since the proxy started): the requests and responses
//! of the group protocol and of commits and fetches, decoded (`wire`), the connections opened
//! and closed, and the protocol faults struck. One fault at a time is armed (`arm`) and strikes
//! at the next OffsetCommit of any connection: the caller's `Hooks::kill` (which maps the
//! client's port to its process) kills the client before the request goes on, or right after
//! its response came back; or the connection is closed right after the request went on, so
//! that the client cannot know whether its commit landed.

pub mod wire;

use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use wire::{Answer, Said};

/// How often the accepting thread looks for a stop.
const ACCEPT_POLL: Duration = Duration::from_millis(20);

/// The most events the protocol history keeps (a few hundred bytes each): a run of 1,000
/// records with 40 faults records about ten thousand. Past it, events are counted, not kept.
pub const HISTORY_EVENTS_MAX: usize = 500_000;

/// The most connections the proxy keeps open at once: a group's instances open a handful
/// each; far more is a client in a loop.
pub const CONNECTIONS_MAX: usize = 256;

/// A protocol fault, struck at the next OffsetCommit of any connection once armed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProtocolFault {
    /// The client is killed when its OffsetCommit arrives, before it is forwarded.
    KillAtCommit,
    /// The client is killed right after its OffsetCommit's response was forwarded to it.
    KillAfterCommitAnswer,
    /// The connection is closed right after the OffsetCommit was forwarded: its response is lost.
    CloseAfterCommitSent,
}

impl ProtocolFault {
    /// Every fault, in the order schedules draw them.
    pub const ALL: [ProtocolFault; 3] =
        [ProtocolFault::KillAtCommit, ProtocolFault::KillAfterCommitAnswer, ProtocolFault::CloseAfterCommitSent];

    /// Its name in a schedule file.
    pub fn name(self) -> &'static str {
        match self {
            ProtocolFault::KillAtCommit => "kill-at-commit",
            ProtocolFault::KillAfterCommitAnswer => "kill-after-commit-answer",
            ProtocolFault::CloseAfterCommitSent => "close-after-commit-sent",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            ProtocolFault::KillAtCommit => "killed when its OffsetCommit arrived, before the broker saw it",
            ProtocolFault::KillAfterCommitAnswer => "killed right after its OffsetCommit's response reached it",
            ProtocolFault::CloseAfterCommitSent => {
                "its connection closed right after its OffsetCommit went to the broker (the response lost)"
            }
        }
    }
}

/// One thing the proxy saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Milliseconds since the proxy started.
    pub at_ms: u64,
    /// The connection (numbered from 1 in the order accepted) and the client's port on it.
    pub conn: u64,
    pub peer_port: u16,
    #[serde(flatten)]
    pub what: What,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum What {
    /// A client connected; `owner` names its process (the caller's `Hooks::owner`).
    Opened {
        owner: Option<String>,
    },
    Request {
        api: &'static str,
        version: i16,
        correlation: i32,
        #[serde(flatten)]
        said: Said,
    },
    Response {
        api: &'static str,
        correlation: i32,
        #[serde(flatten)]
        answer: Answer,
    },
    Fault {
        fault: ProtocolFault,
        correlation: i32,
    },
    /// The connection ended (`why`: which side ended it, or the fault or error that did).
    Closed {
        why: String,
    },
}

/// Where an armed fault struck.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Strike {
    pub fault: ProtocolFault,
    pub conn: u64,
    pub peer_port: u16,
    /// The connection's owner, as `Hooks::owner` named it when it opened.
    pub owner: Option<String>,
    pub at_ms: u64,
}

/// What the proxy asks its caller about the clients, by the client's port on a connection.
pub struct Hooks {
    /// Names the process that holds the client end (asked when the connection opens).
    pub owner: Box<dyn Fn(u16) -> Option<String> + Send + Sync>,
    /// Kills that process (every thread); `false` when no process of the run holds it.
    pub kill: Box<dyn Fn(u16) -> bool + Send + Sync>,
}

/// A running proxy. Dropping it stops it and closes every connection.
pub struct Proxy {
    address: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

struct Shared {
    upstream: SocketAddr,
    listen: SocketAddr,
    began: Instant,
    stop: AtomicBool,
    next_conn: AtomicU64,
    hooks: Hooks,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    history: Vec<Event>,
    /// Events left out of the history once it held `HISTORY_EVENTS_MAX`.
    dropped: u64,
    armed: Option<ProtocolFault>,
    struck: Option<Strike>,
    /// Live connections: the client's and the broker's streams, to close them at a stop.
    live: BTreeMap<u64, (TcpStream, TcpStream)>,
    /// Each connection's owner, as named when it opened.
    owners: BTreeMap<u64, Option<String>>,
    /// The first response the proxy could not rewrite: the run cannot be trusted past it.
    broken: Option<String>,
}

/// A request waiting for its response on one connection.
struct Pending {
    api_key: i16,
    api_version: i16,
    kill_after: bool,
}

impl Proxy {
    /// Listens on a free loopback port in front of the broker at `upstream`.
    pub fn start(upstream: SocketAddr, hooks: Hooks) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let address = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let shared = Arc::new(Shared {
            upstream,
            listen: address,
            began: Instant::now(),
            stop: AtomicBool::new(false),
            next_conn: AtomicU64::new(1),
            hooks,
            state: Mutex::new(State::default()),
        });
        let accepting = Arc::clone(&shared);
        let accept =
            std::thread::Builder::new().name("kafka proxy".into()).spawn(move || accept_loop(listener, accepting))?;
        Ok(Proxy { address, shared, accept: Some(accept) })
    }

    /// The address clients are given as their bootstrap.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Arms `fault` for the next OffsetCommit (replacing one armed before).
    pub fn arm(&self, fault: ProtocolFault) {
        let mut state = self.shared.lock();
        state.armed = Some(fault);
        state.struck = None;
    }

    /// Takes back an armed fault that has not struck; `false` when it already struck.
    pub fn disarm(&self) -> bool {
        self.shared.lock().armed.take().is_some()
    }

    /// Where the armed fault struck, once it has.
    pub fn struck(&self) -> Option<Strike> {
        self.shared.lock().struck.clone()
    }

    /// The history so far.
    pub fn history(&self) -> Vec<Event> {
        self.shared.lock().history.clone()
    }

    /// Milliseconds since the proxy started (the history's clock).
    pub fn now_ms(&self) -> u64 {
        self.shared.now_ms()
    }

    /// The number of connections open now.
    pub fn live(&self) -> usize {
        self.shared.lock().live.len()
    }

    /// The first response the proxy could not rewrite, if any.
    /// Events left out of the history past its bound (`HISTORY_EVENTS_MAX`).
    pub fn history_dropped(&self) -> u64 {
        self.shared.lock().dropped
    }

    pub fn broken(&self) -> Option<String> {
        self.shared.lock().broken.clone()
    }

    /// Stops accepting and closes every connection.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        let live = std::mem::take(&mut self.shared.lock().live);
        for (client, broker) in live.values() {
            let _ = client.shutdown(Shutdown::Both);
            let _ = broker.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.began.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn record(&self, conn: u64, peer_port: u16, what: What) {
        let at_ms = self.now_ms();
        self.lock().keep(Event { at_ms, conn, peer_port, what });
    }

    /// Closes both streams of a connection (the other thread's read then ends).
    fn close(&self, conn: u64, why: String, peer_port: u16) {
        let streams = self.lock().live.remove(&conn);
        if let Some((client, broker)) = streams {
            let _ = client.shutdown(Shutdown::Both);
            let _ = broker.shutdown(Shutdown::Both);
            self.record(conn, peer_port, What::Closed { why });
        }
    }

    /// Takes the armed fault if it is `fault`.
    fn take_armed(&self, fault: ProtocolFault) -> bool {
        let mut state = self.lock();
        if state.armed == Some(fault) {
            state.armed = None;
            return true;
        }
        false
    }

    fn strike(&self, fault: ProtocolFault, conn: u64, peer_port: u16, correlation: i32) {
        let at_ms = self.now_ms();
        let mut state = self.lock();
        let owner = state.owners.get(&conn).cloned().flatten();
        state.struck = Some(Strike { fault, conn, peer_port, owner, at_ms });
        state.keep(Event { at_ms, conn, peer_port, what: What::Fault { fault, correlation } });
    }
}

impl State {
    /// Adds an event to the history within its bound, else counts it as left out.
    fn keep(&mut self, event: Event) {
        if self.history.len() < HISTORY_EVENTS_MAX {
            self.history.push(event);
        } else {
            self.dropped += 1;
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, peer)) => {
                if let Err(error) = open(client, peer, &shared) {
                    let conn = shared.next_conn.fetch_add(1, Ordering::SeqCst);
                    shared.record(conn, peer.port(), What::Closed { why: format!("not opened: {error}") });
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
            Err(_) => std::thread::sleep(ACCEPT_POLL),
        }
    }
}

/// Connects a client to the broker and starts the two forwarding threads.
fn open(client: TcpStream, peer: SocketAddr, shared: &Arc<Shared>) -> std::io::Result<()> {
    client.set_nonblocking(false)?;
    if shared.lock().live.len() >= CONNECTIONS_MAX {
        return Err(std::io::Error::other(format!("more than {CONNECTIONS_MAX} connections open")));
    }
    let broker = TcpStream::connect(shared.upstream)?;
    let _ = client.set_nodelay(true);
    let _ = broker.set_nodelay(true);
    let conn = shared.next_conn.fetch_add(1, Ordering::SeqCst);
    let peer_port = peer.port();
    let owner = (shared.hooks.owner)(peer_port);
    {
        let mut state = shared.lock();
        state.live.insert(conn, (client.try_clone()?, broker.try_clone()?));
        state.owners.insert(conn, owner.clone());
    }
    shared.record(conn, peer_port, What::Opened { owner });
    let pending: Arc<Mutex<BTreeMap<i32, Pending>>> = Arc::default();
    let (up, down) = (Arc::clone(shared), Arc::clone(shared));
    let (client_in, broker_out) = (client.try_clone()?, broker.try_clone()?);
    let pending_up = Arc::clone(&pending);
    std::thread::Builder::new()
        .name(format!("proxy {conn} up"))
        .spawn(move || upward(client_in, broker_out, conn, peer_port, &up, &pending_up))?;
    std::thread::Builder::new()
        .name(format!("proxy {conn} down"))
        .spawn(move || downward(broker, client, conn, peer_port, &down, &pending))?;
    Ok(())
}

/// Client to broker: records each request, strikes an armed fault at an OffsetCommit.
fn upward(
    mut client: TcpStream,
    mut broker: TcpStream,
    conn: u64,
    port: u16,
    shared: &Shared,
    pending: &Mutex<BTreeMap<i32, Pending>>,
) {
    let why = loop {
        let frame = match wire::read_frame(&mut client) {
            Ok(Some(frame)) => frame,
            Ok(None) => break "the client closed it".to_string(),
            Err(error) => break format!("reading the client: {error}"),
        };
        let Some((api_key, api_version, correlation)) = wire::request_header(&frame) else {
            break "a request too short for its header".to_string();
        };
        let said = wire::said(&frame, api_key);
        let commit = api_key == wire::key::OFFSET_COMMIT;
        let request = What::Request { api: wire::api_name(api_key), version: api_version, correlation, said };
        shared.record(conn, port, request);
        if commit && shared.take_armed(ProtocolFault::KillAtCommit) {
            if (shared.hooks.kill)(port) {
                shared.strike(ProtocolFault::KillAtCommit, conn, port, correlation);
                break "the client was killed at its OffsetCommit".to_string();
            }
            shared.lock().armed = Some(ProtocolFault::KillAtCommit);
        }
        let kill_after = commit && shared.take_armed(ProtocolFault::KillAfterCommitAnswer);
        pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(correlation, Pending { api_key, api_version, kill_after });
        if let Err(error) = broker.write_all(&frame) {
            break format!("writing to the broker: {error}");
        }
        if commit && shared.take_armed(ProtocolFault::CloseAfterCommitSent) {
            shared.strike(ProtocolFault::CloseAfterCommitSent, conn, port, correlation);
            break "closed right after an OffsetCommit went to the broker".to_string();
        }
    };
    shared.close(conn, why, port);
}

/// Broker to client: rewrites broker addresses, records each response, kills after a commit's
/// response when that was armed.
fn downward(
    mut broker: TcpStream,
    mut client: TcpStream,
    conn: u64,
    port: u16,
    shared: &Shared,
    pending: &Mutex<BTreeMap<i32, Pending>>,
) {
    let upstream_host = shared.upstream.ip().to_string();
    let listen_host = shared.listen.ip().to_string();
    let why = loop {
        let mut frame = match wire::read_frame(&mut broker) {
            Ok(Some(frame)) => frame,
            Ok(None) => break "the broker closed it".to_string(),
            Err(error) => break format!("reading the broker: {error}"),
        };
        let Some(correlation) = wire::response_correlation(&frame) else {
            break "a response too short for its header".to_string();
        };
        let Some(request) = pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&correlation) else {
            break format!("a response to correlation id {correlation}, which no request had");
        };
        let (api_key, api_version) = (request.api_key, request.api_version);
        let answer = if matches!(api_key, wire::key::METADATA | wire::key::FIND_COORDINATOR) {
            let upstream = (upstream_host.as_str(), shared.upstream.port());
            match wire::rewrite(&frame, api_key, api_version, upstream, (listen_host.as_str(), shared.listen.port())) {
                Ok((rewritten, count)) => {
                    frame = rewritten;
                    Answer::Rewritten { count }
                }
                Err(error) => {
                    let why = format!("{} response (version {api_version}): {error}", wire::api_name(api_key));
                    shared.lock().broken.get_or_insert(why.clone());
                    break why;
                }
            }
        } else {
            wire::answer(&frame, api_key, api_version)
        };
        shared.record(conn, port, What::Response { api: wire::api_name(api_key), correlation, answer });
        if let Err(error) = client.write_all(&frame) {
            break format!("writing to the client: {error}");
        }
        if request.kill_after {
            if (shared.hooks.kill)(port) {
                shared.strike(ProtocolFault::KillAfterCommitAnswer, conn, port, correlation);
                break "the client was killed right after its OffsetCommit's response".to_string();
            }
            shared.lock().armed.get_or_insert(ProtocolFault::KillAfterCommitAnswer);
        }
    };
    shared.close(conn, why, port);
}
