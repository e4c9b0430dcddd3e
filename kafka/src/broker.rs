//! nisshi-broker in this process: a Kafka-compatible broker on a loopback port, its storage in
//! memory (`memory://`). Its SQL engine would keep it in a file, but that engine bundles an
//! SQLite whose symbols collide with the one onceproof's store links (rusqlite's), so the two
//! cannot share a process; the lane never restarts the broker, so nothing needs its storage to
//! outlive it.
//!
//! nisshi-broker 0.6.0 has no public stop (`Broker::main` stops on SIGINT or SIGTERM only), so
//! the broker is served on a runtime of its own and stopping it aborts that task and shuts the
//! runtime down: the port closes with it (`Broker::stop` checks that it did).

use crate::error::LaneError;
use nisshi_broker::broker::Broker as Nisshi;
use nisshi_broker::coordinator::group::administrator::Controller;
use nisshi_broker::NODE_ID;
use nisshi_storage::ArcDynStorage;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};
use url::Url;

/// How long the broker may take from its start to accepting connections (29-88 ms measured).
const LISTEN_TIMEOUT: Duration = Duration::from_secs(20);

/// A running broker. Dropping it stops it.
pub struct Broker {
    runtime: Option<tokio::runtime::Runtime>,
    serve: Option<tokio::task::JoinHandle<()>>,
    address: SocketAddr,
}

impl Broker {
    /// Starts a broker listening on `listen` (port 0: a free loopback port). Refuses an address
    /// another process listens on.
    pub fn start(listen: SocketAddr) -> Result<Broker, LaneError> {
        // Binding first turns "address in use" into one clear error before the broker's own
        // listener would fail inside its task; port 0 picks the port the broker then takes.
        let probe = TcpListener::bind(listen).map_err(|error| match error.kind() {
            std::io::ErrorKind::AddrInUse => LaneError::AddressInUse { address: listen.to_string() },
            _ => LaneError::BrokerStart { detail: format!("cannot listen on {listen}: {error}") },
        })?;
        let address =
            probe.local_addr().map_err(|error| LaneError::Io { what: "the broker's address".into(), error })?;
        drop(probe);
        let storage = Url::parse("memory://nisshi/").expect("a literal URL");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("nisshi-broker")
            .enable_all()
            .build()
            .map_err(|error| LaneError::Io { what: "the broker's runtime".into(), error })?;
        let listener =
            Url::parse(&format!("tcp://{address}")).map_err(|e| LaneError::BrokerStart { detail: e.to_string() })?;
        let built = runtime.block_on(
            Nisshi::<Controller<ArcDynStorage>, ArcDynStorage>::builder()
                .node_id(NODE_ID)
                .cluster_id("onceproof")
                .incarnation_id(uuid::Uuid::now_v7())
                .advertised_listener(listener.clone())
                .storage(storage)
                .listener(listener)
                .silent(true)
                .build(),
        );
        let mut nisshi = built.map_err(|error| LaneError::BrokerStart { detail: format!("{error:?}") })?;
        let serve = runtime.spawn(async move {
            if let Err(error) = nisshi.serve(tokio::time::Instant::now()).await {
                eprintln!("kafka-lane: the broker stopped: {error:?}");
            }
        });
        let mut broker = Broker { runtime: Some(runtime), serve: Some(serve), address };
        broker.await_listening()?;
        Ok(broker)
    }

    /// The bootstrap address clients connect to (`127.0.0.1:PORT`).
    pub fn bootstrap(&self) -> String {
        self.address.to_string()
    }

    /// The address the broker listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    fn await_listening(&mut self) -> Result<(), LaneError> {
        let started = Instant::now();
        while started.elapsed() < LISTEN_TIMEOUT {
            if TcpStream::connect(self.address).is_ok() {
                return Ok(());
            }
            if self.serve.as_ref().is_some_and(|serve| serve.is_finished()) {
                // Another process took the port between the probe and the broker's bind.
                return Err(LaneError::BrokerStart { detail: format!("its listener on {} failed", self.address) });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(LaneError::BrokerStart { detail: format!("not listening on {} after {LISTEN_TIMEOUT:?}", self.address) })
    }

    /// Stops the broker and checks that its port is closed.
    pub fn stop(mut self) -> Result<(), LaneError> {
        self.shut_down();
        if TcpStream::connect(self.address).is_ok() {
            return Err(LaneError::BrokerStart {
                detail: format!("still accepting on {} after its stop", self.address),
            });
        }
        Ok(())
    }

    fn shut_down(&mut self) {
        if let Some(serve) = self.serve.take() {
            serve.abort();
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.shut_down();
    }
}
