//! The lane's errors: each names what failed (the address, the topic, the owner, the step).

use std::fmt;

#[derive(Debug)]
pub enum LaneError {
    /// A command line the lane cannot run.
    Usage { detail: String },
    /// The broker's listening address is taken by another process.
    AddressInUse { address: String },
    /// The broker did not start (its storage, its runtime) or did not listen in time.
    BrokerStart { detail: String },
    /// No broker answers at the bootstrap address.
    Connect { bootstrap: String, detail: String },
    /// The topic does not exist on the broker (the lane never creates one implicitly).
    TopicMissing { topic: String, bootstrap: String },
    /// A client operation failed (produce, commit read-back, topic creation).
    Client { operation: String, detail: String },
    /// onceproof's store failed.
    Store(consumer::store::StoreError),
    /// An owner process failed: it exited, replied with an error or did not reply in time.
    Owner { owner: String, detail: String },
    /// A file or process operation failed.
    Io { what: String, error: std::io::Error },
}

impl fmt::Display for LaneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaneError::Usage { detail } => write!(f, "{detail}"),
            LaneError::AddressInUse { address } => {
                write!(f, "the broker's address {address} is in use by another process")
            }
            LaneError::BrokerStart { detail } => write!(f, "the broker did not start: {detail}"),
            LaneError::Connect { bootstrap, detail } => {
                write!(f, "cannot connect to a Kafka broker at {bootstrap}: {detail}")
            }
            LaneError::TopicMissing { topic, bootstrap } => {
                write!(f, "the topic '{topic}' does not exist on the broker at {bootstrap}")
            }
            LaneError::Client { operation, detail } => write!(f, "the Kafka client failed to {operation}: {detail}"),
            LaneError::Store(error) => write!(f, "the store failed: {error}"),
            LaneError::Owner { owner, detail } => write!(f, "owner {owner}: {detail}"),
            LaneError::Io { what, error } => write!(f, "{what}: {error}"),
        }
    }
}

impl std::error::Error for LaneError {}

impl LaneError {
    /// Whether the user can fix it (a command line, an address, a broker or topic named):
    /// the binaries exit 2 on these, 1 on the rest.
    pub fn is_bad_input(&self) -> bool {
        match self {
            LaneError::Usage { .. }
            | LaneError::AddressInUse { .. }
            | LaneError::Connect { .. }
            | LaneError::TopicMissing { .. } => true,
            LaneError::BrokerStart { .. }
            | LaneError::Client { .. }
            | LaneError::Store(_)
            | LaneError::Owner { .. }
            | LaneError::Io { .. } => false,
        }
    }
}

impl From<consumer::store::StoreError> for LaneError {
    fn from(error: consumer::store::StoreError) -> Self {
        LaneError::Store(error)
    }
}
