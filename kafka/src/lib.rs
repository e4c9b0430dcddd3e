//! The Kafka-protocol lane: onceproof's owners read a Kafka-compatible broker through a real
//! Kafka client, and the broker's group coordinator makes their rebalances.
//!
//! - `broker` starts nisshi-broker in this process, on a loopback port, with its storage in a
//!   directory of the caller's, and stops it.
//! - `client` is the harness's side of rdkafka: topics, produced records, committed offsets.
//! - `owner` is one owner process (`kafka-lane owner`): an rdkafka group member that reads
//!   its partition through the client and writes its effect (and, store-fenced, its offset) to
//!   onceproof's SQLite store, one request at a time.
//! - `driver` starts owner processes and talks to them; `load` is the lane's load test.
//! - `proxy` is a Kafka-protocol-aware TCP proxy in front of the broker: it records the
//!   protocol history of the clients behind it, rewrites broker addresses to its own, and
//!   strikes protocol faults at their commits (`conformance kafka app`).
//!
//! Everything is behind the `kafka` feature, so that the workspace's default build compiles
//! none of the broker's or the client's 400 crates.

#[cfg(feature = "kafka")]
pub mod broker;
#[cfg(feature = "kafka")]
pub mod client;
#[cfg(feature = "kafka")]
pub mod driver;
#[cfg(feature = "kafka")]
pub mod error;
#[cfg(feature = "kafka")]
pub mod load;
#[cfg(feature = "kafka")]
pub mod owner;
#[cfg(feature = "kafka")]
pub mod probe;
#[cfg(feature = "kafka")]
pub mod proxy;

/// The lane's default topic: one partition, as the model's rows with one partition.
pub const TOPIC: &str = "onceproof";
