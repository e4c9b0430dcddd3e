//! The harness's side of the client (rdkafka): the lane's topic, its records, and the offsets
//! the broker has committed for a group.

use crate::error::LaneError;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a client waits for the broker (metadata, a produce, an offset fetch).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the first contact may take before the broker is declared unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// `Clients::group_state` of a group the broker does not list.
pub const UNLISTED: &str = "(none)";

/// The harness's clients of one broker: an admin client, a producer and one offset reader per
/// group. librdkafka's consumer can hang in its shutdown inside a test process (measured in
/// docs/kafka-lane.md), so the readers are never dropped: `Clients::leak` ends them with the
/// process.
pub struct Clients {
    bootstrap: String,
    runtime: tokio::runtime::Runtime,
    admin: AdminClient<DefaultClientContext>,
    producer: FutureProducer,
    readers: BTreeMap<String, BaseConsumer>,
}

fn client_error(operation: &str) -> impl Fn(rdkafka::error::KafkaError) -> LaneError + '_ {
    move |error| LaneError::Client { operation: operation.to_string(), detail: error.to_string() }
}

impl Clients {
    /// Connects to the broker at `bootstrap`: fails in one error if no broker answers there.
    pub fn connect(bootstrap: &str) -> Result<Clients, LaneError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| LaneError::Io { what: "the client's runtime".into(), error })?;
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", bootstrap).set("log_level", "3");
        let admin: AdminClient<DefaultClientContext> =
            config.create().map_err(client_error("create an admin client"))?;
        let producer: FutureProducer = config
            .clone()
            .set("message.timeout.ms", "10000")
            .set("linger.ms", "0")
            .set("enable.idempotence", "true")
            .create()
            .map_err(client_error("create a producer"))?;
        producer
            .client()
            .fetch_metadata(None, CONNECT_TIMEOUT)
            .map_err(|error| LaneError::Connect { bootstrap: bootstrap.to_string(), detail: error.to_string() })?;
        Ok(Clients { bootstrap: bootstrap.to_string(), runtime, admin, producer, readers: BTreeMap::new() })
    }

    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Creates the lane's topic with `partitions` partitions (the broker's auto-created topics
    /// have 4).
    pub fn create_topic(&self, topic: &str, partitions: i32) -> Result<(), LaneError> {
        let topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
        let options = AdminOptions::new().operation_timeout(Some(CLIENT_TIMEOUT));
        let results = self
            .runtime
            .block_on(self.admin.create_topics(&[topic], &options))
            .map_err(client_error("create the topic"))?;
        for result in results {
            result.map_err(|(name, code)| LaneError::Client {
                operation: format!("create the topic '{name}'"),
                detail: code.to_string(),
            })?;
        }
        Ok(())
    }

    /// Refuses a topic the broker does not have. The metadata of every topic is asked for:
    /// asking for the one topic would make the broker create it (nisshi-broker, as Kafka with
    /// `auto.create.topics.enable`, creates a topic a client names).
    pub fn require_topic(&self, topic: &str) -> Result<(), LaneError> {
        let metadata = self
            .producer
            .client()
            .fetch_metadata(None, CLIENT_TIMEOUT)
            .map_err(client_error("read the topic's metadata"))?;
        let known =
            metadata.topics().iter().any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty());
        if known {
            Ok(())
        } else {
            Err(LaneError::TopicMissing { topic: topic.to_string(), bootstrap: self.bootstrap.clone() })
        }
    }

    /// Appends a record whose value is `delta` to `partition`; returns its offset.
    pub fn produce(&self, topic: &str, partition: i32, delta: i64) -> Result<u64, LaneError> {
        let payload = delta.to_string();
        let record = FutureRecord::<(), String>::to(topic).partition(partition).payload(&payload);
        let delivered = self.runtime.block_on(self.producer.send(record, CLIENT_TIMEOUT));
        let delivery = delivered.map_err(|(error, _)| client_error("produce a record")(error))?;
        u64::try_from(delivery.offset).map_err(|_| LaneError::Client {
            operation: "produce a record".into(),
            detail: format!("offset {}", delivery.offset),
        })
    }

    /// Appends records, each `(partition, key, payload)`, all sent before any is awaited;
    /// returns their offsets in order.
    pub fn produce_keyed(&self, topic: &str, records: &[(i32, String, String)]) -> Result<Vec<u64>, LaneError> {
        let sent: Vec<_> = records
            .iter()
            .map(|(partition, key, payload)| {
                let record = FutureRecord::to(topic).partition(*partition).key(key).payload(payload);
                self.producer.send(record, CLIENT_TIMEOUT)
            })
            .collect();
        self.runtime.block_on(async {
            let mut offsets = Vec::with_capacity(sent.len());
            for delivery in sent {
                let delivery = delivery.await.map_err(|(error, _)| client_error("produce a record")(error))?;
                offsets.push(u64::try_from(delivery.offset).map_err(|_| LaneError::Client {
                    operation: "produce a record".into(),
                    detail: format!("offset {}", delivery.offset),
                })?);
            }
            Ok(offsets)
        })
    }

    /// The next offset the broker has committed for `group` on `partition` (`None`: none).
    pub fn committed(&mut self, topic: &str, group: &str, partition: i32) -> Result<Option<u64>, LaneError> {
        if !self.readers.contains_key(group) {
            let reader: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &self.bootstrap)
                .set("group.id", group)
                .set("enable.auto.commit", "false")
                .set("log_level", "3")
                .create()
                .map_err(client_error("create an offset reader"))?;
            self.readers.insert(group.to_string(), reader);
        }
        let mut query = TopicPartitionList::new();
        query.add_partition(topic, partition);
        let reader = &self.readers[group];
        let list = reader.committed_offsets(query, CLIENT_TIMEOUT).map_err(client_error("read a committed offset"))?;
        let offset = list.find_partition(topic, partition).map(|e| e.offset());
        match offset {
            Some(Offset::Offset(next)) => Ok(Some(u64::try_from(next).expect("a committed offset is not negative"))),
            Some(Offset::Invalid) | None => Ok(None),
            Some(other) => {
                Err(LaneError::Client { operation: "read a committed offset".into(), detail: format!("{other:?}") })
            }
        }
    }

    /// The coordinator's state of `group` as the broker names it (ListGroups/DescribeGroups),
    /// and its members' ids; `UNLISTED` for a group the broker does not list (nisshi-broker
    /// 0.6.0 lists only groups with a committed offset).
    pub fn group_state(&self, group: &str) -> Result<(String, Vec<String>), LaneError> {
        let list = self
            .producer
            .client()
            .fetch_group_list(Some(group), CLIENT_TIMEOUT)
            .map_err(client_error("describe a group"))?;
        let found = list.groups().iter().find(|g| g.name() == group);
        Ok(found.map_or_else(
            || (UNLISTED.to_string(), Vec::new()),
            |g| (g.state().to_string(), g.members().iter().map(|m| m.id().to_string()).collect()),
        ))
    }

    /// Ends the clients without librdkafka's shutdown (see the type's comment).
    pub fn leak(self) {
        std::mem::forget(self);
    }
}
