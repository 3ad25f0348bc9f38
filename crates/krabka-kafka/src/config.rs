//! The client's settings, and a broker by id and address.

use std::sync::Arc;
use std::time::Duration;

use super::observe::RequestObserver;
use super::security::Security;

/// Settings of the Kafka client. The defaults are Kafka's Java client's
/// where it has the same setting.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// `host:port` addresses to bootstrap from.
    pub bootstrap: Vec<String>,
    /// Sent as the client id of every request.
    pub client_id: String,
    /// Limit on opening one connection.
    pub connect_timeout: Duration,
    /// Limit on one request's round trip.
    pub request_timeout: Duration,
    /// Limit on one operation across its retries.
    pub operation_timeout: Duration,
    /// First retry delay; doubles up to `retry_backoff_max`, with jitter.
    pub retry_backoff: Duration,
    /// Largest retry delay.
    pub retry_backoff_max: Duration,
    /// First wait before reconnecting to a broker that failed; doubles up
    /// to `reconnect_backoff_max`, with jitter.
    pub reconnect_backoff: Duration,
    /// Largest wait before reconnecting to a broker that failed.
    pub reconnect_backoff_max: Duration,
    /// A request any broker can answer goes to a second broker too when the
    /// first has not answered within this.
    pub hedge_after: Duration,
    /// Metadata older than this is refreshed before use.
    pub metadata_max_age: Duration,
    /// Largest frame accepted from a broker.
    pub max_frame_bytes: usize,
    /// Most bytes one record batch may decompress to; a batch past it is
    /// skipped, its records unread (`fetch`). `None`: the topic's
    /// `max.message.bytes` (Kafka's default, 1 MiB and 12 bytes, when it
    /// cannot be read), the largest batch the topic takes uncompressed:
    /// a compressed batch may not stand for more than the topic would
    /// take as it is. The coordination protocol's batches hold a record
    /// of at most about 128 KiB (two 32 KiB names in its key and value).
    pub max_decompressed_batch_bytes: Option<usize>,
    /// Concurrent describes of one coordinator share requests (one in flight
    /// per coordinator); `false` sends one request per call.
    pub describe_batching: bool,
    /// Most transactional ids in one DescribeTransactions.
    pub max_describe_batch: usize,
    /// Most bytes of transactional ids whose coordinator is remembered.
    pub coordinator_cache_bytes: u64,
    /// Receives what the client does, for metrics.
    pub observer: Option<Arc<dyn RequestObserver>>,
    /// TLS and SASL.
    pub security: Security,
}

impl ClientConfig {
    /// Defaults for a bootstrap list: 5 s per request, 10 s per operation.
    pub fn new(bootstrap: impl IntoIterator<Item = impl Into<String>>) -> ClientConfig {
        ClientConfig {
            bootstrap: bootstrap.into_iter().map(Into::into).collect(),
            client_id: "krabka-authority".to_owned(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            operation_timeout: Duration::from_secs(10),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            reconnect_backoff: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_secs(1),
            hedge_after: Duration::from_millis(200),
            metadata_max_age: Duration::from_secs(300),
            max_frame_bytes: 100 * 1024 * 1024,
            max_decompressed_batch_bytes: None,
            describe_batching: true,
            max_describe_batch: 500,
            coordinator_cache_bytes: 64 * 1024 * 1024,
            observer: None,
            security: Security::default(),
        }
    }
}

/// A broker by id and address (ordered, so that maps of brokers are
/// walked in one order: a simulation's seed decides a run, not a hasher).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Broker {
    /// The broker's node id.
    pub id: i32,
    /// `host:port`.
    pub addr: String,
}
