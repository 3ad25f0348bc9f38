//! All Kafka I/O: a small client over the `kafka-protocol` message types
//! (framing, pipelining, version negotiation, metadata, leader and
//! coordinator routing, retries) and [`KafkaTransport`].
//!
//! Every Kafka struct stays inside this module.

mod backoff;
mod batch;
mod client;
mod connection;
mod describe;
mod error;
mod fetch;
mod produce;
mod security;
mod topic;
mod transport;
mod txn;
mod versions;

pub use client::{
    Broker, ClientConfig, KafkaClient, Outcome, PartitionMeta, RequestObserver, TopicMeta,
};
pub use describe::{Described, TransactionDescription};
pub use error::{FENCED_CODES, KafkaError, TRANSACTIONAL_ID_NOT_FOUND, is_retriable_code};
pub use fetch::{EARLIEST, FetchChunk, LATEST, PartitionRead};
pub use security::{SaslConfig, SaslMechanism, Secret, Security, TlsConfig};
pub use topic::TopicSpec;
pub use transport::{DEFAULT_TOPIC, GuardedRecord, KafkaTransport, TransportConfig};
pub use txn::{ProducerSession, Transaction, TxnError};
pub use versions::api_name;
