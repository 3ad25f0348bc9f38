//! The cluster view: connections per broker, metadata, leader and
//! transaction-coordinator routing, and retries with backoff.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use kafka_protocol::messages::{
    FindCoordinatorRequest, MetadataRequest, MetadataResponse, TopicName,
    metadata_request::MetadataRequestTopic,
};
use kafka_protocol::protocol::{Request, StrBytes};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::backoff::Backoff;
use super::connection::{ConnSettings, Connection};
use super::error::KafkaError;
use super::security::{Security, authenticate, server_name, tls_connector};
use super::versions::api_name;

/// How a request ended, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A response arrived (it may still carry error codes).
    Ok,
    /// No response within the timeout.
    Timeout,
    /// The connection failed or could not be opened.
    Disconnected,
    /// Anything else: protocol, version or encoding errors.
    Error,
}

impl Outcome {
    /// The label value used in metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Timeout => "timeout",
            Outcome::Disconnected => "disconnected",
            Outcome::Error => "error",
        }
    }

    fn of(result: &Result<impl Sized, KafkaError>) -> Outcome {
        match result {
            Ok(_) => Outcome::Ok,
            Err(KafkaError::Timeout { .. }) => Outcome::Timeout,
            Err(KafkaError::Connect { .. } | KafkaError::ConnectionClosed { .. }) => {
                Outcome::Disconnected
            }
            Err(_) => Outcome::Error,
        }
    }
}

/// Sees every request the client sends; the service counts them.
pub trait RequestObserver: Send + Sync + std::fmt::Debug {
    /// One request to one broker finished.
    fn observe(&self, api: &'static str, outcome: Outcome, elapsed: Duration);
}

/// Settings of the Kafka client.
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
    /// Metadata older than this is refreshed before use.
    pub metadata_max_age: Duration,
    /// Largest frame accepted from a broker.
    pub max_frame_bytes: usize,
    /// Receives a call per request, for metrics.
    pub observer: Option<Arc<dyn RequestObserver>>,
    /// TLS and SASL.
    pub security: Security,
}

impl ClientConfig {
    /// Defaults for a bootstrap list: 5 s per request, 15 s per operation.
    pub fn new(bootstrap: impl IntoIterator<Item = impl Into<String>>) -> ClientConfig {
        ClientConfig {
            bootstrap: bootstrap.into_iter().map(Into::into).collect(),
            client_id: "krabka-authority".to_owned(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            operation_timeout: Duration::from_secs(15),
            retry_backoff: Duration::from_millis(50),
            retry_backoff_max: Duration::from_secs(1),
            metadata_max_age: Duration::from_secs(300),
            max_frame_bytes: 100 * 1024 * 1024,
            observer: None,
            security: Security::default(),
        }
    }
}

/// A broker by id and address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Broker {
    /// The broker's node id.
    pub id: i32,
    /// `host:port`.
    pub addr: String,
}

/// What metadata says of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionMeta {
    /// The partition index.
    pub index: i32,
    /// The leader's node id, or -1.
    pub leader: i32,
    /// The partition's error code in the metadata response.
    pub error: i16,
}

/// What metadata says of one topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicMeta {
    /// The topic's error code (3 = unknown topic).
    pub error: i16,
    /// Its partitions, by index.
    pub partitions: Vec<PartitionMeta>,
}

#[derive(Debug, Default)]
struct Metadata {
    brokers: HashMap<i32, String>,
    topics: HashMap<String, (TopicMeta, Instant)>,
}

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Connection>>>>;

struct Inner {
    config: ClientConfig,
    settings: ConnSettings,
    tls: Option<tokio_rustls::TlsConnector>,
    slots: Mutex<HashMap<String, Slot>>,
    metadata: RwLock<Metadata>,
    coordinators: Mutex<HashMap<String, Broker>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("config", &self.config)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// A Kafka client over `kafka-protocol`: cheap to clone, one connection per
/// broker shared by every clone.
#[derive(Clone, Debug)]
pub struct KafkaClient {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl KafkaClient {
    /// A client for `config`; connects lazily. TLS files are read here, so
    /// a missing or bad one fails at once.
    pub fn new(config: ClientConfig) -> Result<KafkaClient, KafkaError> {
        if config.bootstrap.is_empty() {
            return Err(KafkaError::Invalid("no bootstrap servers given".into()));
        }
        let tls = config
            .security
            .tls
            .as_ref()
            .map(tls_connector)
            .transpose()?;
        let settings = ConnSettings {
            client_id: config.client_id.as_str().into(),
            max_frame_bytes: config.max_frame_bytes,
        };
        Ok(KafkaClient {
            inner: Arc::new(Inner {
                config,
                settings,
                tls,
                slots: Mutex::default(),
                metadata: RwLock::default(),
                coordinators: Mutex::default(),
            }),
        })
    }

    /// The client's settings.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The connection to `addr`, opened (or reopened) when needed. Callers
    /// for one address share one connection; only one of them connects.
    pub(crate) async fn connection(&self, addr: &str) -> Result<Arc<Connection>, KafkaError> {
        let slot = lock(&self.inner.slots)
            .entry(addr.to_owned())
            .or_default()
            .clone();
        let mut guard = slot.lock().await;
        if let Some(conn) = guard.as_ref().filter(|c| !c.is_closed()) {
            return Ok(conn.clone());
        }
        let conn = Arc::new(self.open(addr).await?);
        *guard = Some(conn.clone());
        Ok(conn)
    }

    async fn open(&self, addr: &str) -> Result<Connection, KafkaError> {
        let config = &self.inner.config;
        let connect_err = |reason: String| KafkaError::Connect {
            addr: addr.to_owned(),
            reason,
        };
        let stream = tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| connect_err(format!("timed out after {:?}", config.connect_timeout)))?
            .map_err(|e| connect_err(e.to_string()))?;
        stream
            .set_nodelay(true)
            .map_err(|e| connect_err(e.to_string()))?;
        let mut conn = match &self.inner.tls {
            None => Connection::start(stream, addr, self.inner.settings.clone()),
            Some(tls) => {
                let name = server_name(addr)?;
                let stream =
                    tokio::time::timeout(config.connect_timeout, tls.connect(name, stream))
                        .await
                        .map_err(|_| {
                            connect_err(format!(
                                "TLS handshake timed out after {:?}",
                                config.connect_timeout
                            ))
                        })?
                        .map_err(|e| {
                            KafkaError::Tls(format!("handshake with {addr} failed: {e}"))
                        })?;
                Connection::start(stream, addr, self.inner.settings.clone())
            }
        };
        conn.negotiate(config.request_timeout).await?;
        if let Some(sasl) = &config.security.sasl {
            let lifetime = authenticate(&conn, sasl, config.request_timeout).await?;
            if let Some(lifetime) = lifetime {
                // Retire well before the broker ends the session, with
                // jitter so connections do not all reconnect at once.
                let share = rand::random_range(0.75..0.85);
                conn.retire_at(Instant::now() + lifetime.mul_f64(share));
            }
        }
        tracing::debug!(addr, protocol = config.security.protocol(), "connected");
        Ok(conn)
    }

    fn observe<T>(&self, api: &'static str, result: &Result<T, KafkaError>, elapsed: Duration) {
        if let Some(observer) = &self.inner.config.observer {
            observer.observe(api, Outcome::of(result), elapsed);
        }
    }

    /// Sends one request on `conn` and reports it to the observer.
    pub(crate) async fn call<R: Request>(
        &self,
        conn: &Connection,
        request: &R,
        timeout: Duration,
    ) -> Result<(R::Response, i16), KafkaError> {
        let started = Instant::now();
        let result = conn.call(request, timeout).await;
        self.observe(api_name(R::KEY), &result, started.elapsed());
        result
    }

    /// Sends one request to the broker at `addr`.
    pub(crate) async fn call_at<R: Request>(
        &self,
        addr: &str,
        request: &R,
        timeout: Duration,
    ) -> Result<(R::Response, i16), KafkaError> {
        let started = Instant::now();
        let conn = match self.connection(addr).await {
            Ok(conn) => conn,
            Err(e) => {
                // A request that could not even connect counts as disconnected.
                self.observe(
                    api_name(R::KEY),
                    &Err::<(), _>(e.clone()),
                    started.elapsed(),
                );
                return Err(e);
            }
        };
        self.call(&conn, request, timeout).await
    }

    /// Any reachable broker: known brokers first, then the bootstrap list.
    pub(crate) async fn any_connection(&self) -> Result<Arc<Connection>, KafkaError> {
        let mut candidates: Vec<String> = {
            let meta = self
                .inner
                .metadata
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut known: Vec<_> = meta.brokers.values().cloned().collect();
            known.sort();
            known
        };
        for addr in &self.inner.config.bootstrap {
            if !candidates.contains(addr) {
                candidates.push(addr.clone());
            }
        }
        let mut last = None;
        for addr in &candidates {
            match self.connection(addr).await {
                Ok(conn) => return Ok(conn),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| KafkaError::Invalid("no bootstrap servers".into())))
    }

    /// Runs `attempt` until it succeeds, fails for good, or the operation
    /// timeout passes; retriable errors are retried after a jittered backoff.
    /// `attempt` gets the time left, to bound its own request.
    pub(crate) async fn retrying<T, F, Fut>(
        &self,
        op: &'static str,
        mut attempt: F,
    ) -> Result<T, KafkaError>
    where
        F: FnMut(Duration) -> Fut,
        Fut: Future<Output = Result<T, KafkaError>>,
    {
        let config = &self.inner.config;
        let started = Instant::now();
        let deadline = started + config.operation_timeout;
        let mut backoff = Backoff::new(config.retry_backoff, config.retry_backoff_max);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let bound = left
                .min(config.request_timeout)
                .max(Duration::from_millis(1));
            match attempt(bound).await {
                Ok(value) => return Ok(value),
                Err(e) if e.is_retriable() => {
                    let delay = backoff.next_delay();
                    if Instant::now() + delay >= deadline {
                        return Err(KafkaError::GaveUp {
                            op,
                            after: started.elapsed(),
                            last: Box::new(e),
                        });
                    }
                    tracing::debug!(op, error = %e, ?delay, "retrying");
                    tokio::time::sleep(delay).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Fetches metadata for `topics` and records brokers and leaders.
    pub async fn refresh_metadata(&self, topics: &[&str]) -> Result<(), KafkaError> {
        self.retrying("metadata", |timeout| async move {
            let conn = self.any_connection().await?;
            let request = MetadataRequest::default()
                .with_topics(Some(
                    topics
                        .iter()
                        .map(|t| {
                            MetadataRequestTopic::default()
                                .with_name(Some(TopicName(StrBytes::from_string((*t).to_owned()))))
                        })
                        .collect(),
                ))
                .with_allow_auto_topic_creation(false);
            let (response, _) = self.call(&conn, &request, timeout).await?;
            self.record_metadata(response);
            Ok(())
        })
        .await
    }

    fn record_metadata(&self, response: MetadataResponse) {
        let now = Instant::now();
        let mut meta = self
            .inner
            .metadata
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !response.brokers.is_empty() {
            meta.brokers = response
                .brokers
                .iter()
                .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
                .collect();
        }
        for topic in response.topics {
            let Some(name) = topic.name else { continue };
            let mut partitions: Vec<PartitionMeta> = topic
                .partitions
                .iter()
                .map(|p| PartitionMeta {
                    index: p.partition_index,
                    leader: p.leader_id.0,
                    error: p.error_code,
                })
                .collect();
            partitions.sort_by_key(|p| p.index);
            meta.topics.insert(
                name.0.to_string(),
                (
                    TopicMeta {
                        error: topic.error_code,
                        partitions,
                    },
                    now,
                ),
            );
        }
    }

    /// Metadata of `topic`, refreshed when missing or older than the max age.
    pub async fn topic_metadata(&self, topic: &str) -> Result<TopicMeta, KafkaError> {
        if let Some(meta) = self.cached_topic(topic) {
            return Ok(meta);
        }
        self.refresh_metadata(&[topic]).await?;
        self.cached_topic(topic).ok_or_else(|| KafkaError::Topic {
            topic: topic.to_owned(),
            reason: "missing from the metadata response".into(),
        })
    }

    fn cached_topic(&self, topic: &str) -> Option<TopicMeta> {
        let meta = self
            .inner
            .metadata
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        meta.topics
            .get(topic)
            .filter(|(_, at)| at.elapsed() < self.inner.config.metadata_max_age)
            .map(|(m, _)| m.clone())
    }

    /// Forgets the metadata of `topic`, so the next use fetches it again.
    pub(crate) fn invalidate_topic(&self, topic: &str) {
        self.inner
            .metadata
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .topics
            .remove(topic);
    }

    /// The leader of one partition.
    pub(crate) async fn leader(&self, topic: &str, partition: i32) -> Result<Broker, KafkaError> {
        let meta = self.topic_metadata(topic).await?;
        if meta.error != 0 {
            self.invalidate_topic(topic);
            return Err(KafkaError::broker(
                "Metadata",
                meta.error,
                Some(topic.to_owned()),
            ));
        }
        let Some(p) = meta.partitions.iter().find(|p| p.index == partition) else {
            return Err(KafkaError::Topic {
                topic: topic.to_owned(),
                reason: format!(
                    "has no partition {partition} (it has {})",
                    meta.partitions.len()
                ),
            });
        };
        if p.leader < 0 {
            self.invalidate_topic(topic);
            // LEADER_NOT_AVAILABLE, retriable.
            return Err(KafkaError::broker("Metadata", 5, None));
        }
        let addr = self
            .inner
            .metadata
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .brokers
            .get(&p.leader)
            .cloned();
        match addr {
            Some(addr) => Ok(Broker { id: p.leader, addr }),
            None => {
                self.invalidate_topic(topic);
                Err(KafkaError::broker("Metadata", 5, None))
            }
        }
    }

    /// The transaction coordinators of `ids`: cached, else looked up with one
    /// batched FindCoordinator (v4+). Per id, an error when the broker gave one.
    pub async fn transaction_coordinators(
        &self,
        ids: &[String],
        timeout: Duration,
    ) -> Result<HashMap<String, Result<Broker, KafkaError>>, KafkaError> {
        let mut found = HashMap::with_capacity(ids.len());
        let mut missing = Vec::new();
        {
            let cache = lock(&self.inner.coordinators);
            for id in ids {
                match cache.get(id) {
                    Some(b) => {
                        found.insert(id.clone(), Ok(b.clone()));
                    }
                    None if !missing.contains(id) => missing.push(id.clone()),
                    None => {}
                }
            }
        }
        if missing.is_empty() {
            return Ok(found);
        }
        let conn = self.any_connection().await?;
        for chunk in missing.chunks(1000) {
            let request = FindCoordinatorRequest::default()
                .with_key_type(1)
                .with_coordinator_keys(
                    chunk
                        .iter()
                        .map(|id| StrBytes::from_string(id.clone()))
                        .collect(),
                );
            let (response, _) = self.call(&conn, &request, timeout).await?;
            let mut cache = lock(&self.inner.coordinators);
            for c in response.coordinators {
                let key = c.key.to_string();
                if c.error_code == 0 {
                    let broker = Broker {
                        id: c.node_id.0,
                        addr: format!("{}:{}", c.host.as_str(), c.port),
                    };
                    cache.insert(key.clone(), broker.clone());
                    found.insert(key, Ok(broker));
                } else {
                    let message = c.error_message.map(|m| m.to_string());
                    found.insert(
                        key,
                        Err(KafkaError::broker("FindCoordinator", c.error_code, message)),
                    );
                }
            }
        }
        for id in &missing {
            found.entry(id.clone()).or_insert_with(|| {
                Err(KafkaError::Protocol {
                    addr: conn.addr().to_owned(),
                    reason: format!("FindCoordinator answered nothing for {id:?}"),
                })
            });
        }
        Ok(found)
    }

    /// The transaction coordinator of one id, with retries.
    pub async fn transaction_coordinator(&self, id: &str) -> Result<Broker, KafkaError> {
        let ids = [id.to_owned()];
        self.retrying("find coordinator", |timeout| {
            let ids = &ids;
            async move {
                let mut found = self.transaction_coordinators(ids, timeout).await?;
                found.remove(id).unwrap_or_else(|| {
                    Err(KafkaError::Invalid(format!("no coordinator for {id:?}")))
                })
            }
        })
        .await
    }

    /// Forgets the coordinator of `id` after a 15/16 error or a failed
    /// connection to it.
    pub fn invalidate_coordinator(&self, id: &str) {
        lock(&self.inner.coordinators).remove(id);
    }

    /// Forgets every coordinator cached at `broker`.
    pub(crate) fn invalidate_coordinators_at(&self, addr: &str) {
        lock(&self.inner.coordinators).retain(|_, b| b.addr != addr);
    }

    /// The known brokers by id.
    pub fn brokers(&self) -> HashMap<i32, String> {
        self.inner
            .metadata
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .brokers
            .clone()
    }

    /// Closes every connection; later calls reconnect.
    pub async fn close(&self) {
        let slots: Vec<Slot> = lock(&self.inner.slots).drain().map(|(_, s)| s).collect();
        for slot in slots {
            slot.lock().await.take();
        }
    }
}
