//! All Kafka I/O: a small client over the `kafka-protocol` message types
//! (framing, pipelining, version negotiation, metadata, leader and
//! coordinator routing, retries) and [`KafkaTransport`].
//!
//! Every Kafka struct stays inside this module.

mod backoff;
mod batch;
mod client;
mod cluster;
mod connection;
mod coordinator;
mod describe;
mod error;
#[cfg(test)]
mod failures;
#[cfg(test)]
mod fake;
mod fetch;
mod metadata;
mod nodes;
mod produce;
mod retry;
mod security;
mod settings;
mod tail;
mod topic;
mod transport;
mod txn;
mod versions;

pub use client::{Broker, ClientConfig, KafkaClient, Outcome, RequestObserver, StaleReason};
pub use describe::{CONFIRM_WINDOW, Described, TransactionDescription};
pub use error::{FENCED_CODES, KafkaError, TRANSACTIONAL_ID_NOT_FOUND, is_retriable_code};
pub use fetch::{
    Cursor, EARLIEST, FetchChunk, FetchPosition, LATEST, OFFSET_OUT_OF_RANGE, PartitionRead,
};
pub use metadata::{PartitionMeta, TopicMeta};
pub use security::{SaslConfig, SaslMechanism, Secret, Security, TlsConfig};
pub use settings::{KafkaSettings, Mechanism, Protocol};
pub use topic::TopicSpec;
pub use transport::{DEFAULT_TOPIC, GuardedRecord, KafkaTransport, TransportConfig};
pub use txn::{ProducerSession, Transaction, TxnError};
pub use versions::api_name;
