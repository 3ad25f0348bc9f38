//! The client: connections per broker, which broker to ask, and what a
//! failure teaches about the cluster.
//!
//! Kafka's Java client is the reference (`NetworkClient`,
//! `ClusterConnectionStates`, `Metadata`):
//! - a failed or timed-out request marks its broker failed (reconnect
//!   backoff, [`super::nodes`]), asks for a metadata refresh and suspects the
//!   coordinators cached at that broker;
//! - a request that any broker can answer (metadata, FindCoordinator, topic
//!   configs) goes to the least loaded broker that is not in backoff, and
//!   fails over to the next one when that broker fails;
//! - unlike the Java client, such a request is also *hedged*: when no answer
//!   came within [`ClientConfig::hedge_after`], the same request goes to a
//!   second broker and the first answer wins, so a hung broker (which
//!   accepts connections and answers nothing) costs a fraction of a second,
//!   not a request timeout.
//!
//! Every request runs with the client's own request timeout: a caller with a
//! shorter deadline stops waiting without cancelling the request, so it never
//! poisons a connection to a live broker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use kafka_protocol::protocol::Request;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::connection::{ConnSettings, Connection};
use super::coordinator::Coordinators;
use super::describe::DescribeQueues;
use super::error::KafkaError;
use super::metadata::Metadata;
use super::nodes::NodeStates;
use super::security::{Security, authenticate, server_name, tls_connector};
use super::versions::api_name;
pub(crate) use crate::sync::lock;

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

/// Why an answer of a transaction coordinator was not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StaleReason {
    /// Another broker named a different coordinator for the id.
    Unconfirmed,
    /// The answer's pair is below a pair already seen for the id.
    BelowHighWater,
}

impl StaleReason {
    /// The label value used in metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            StaleReason::Unconfirmed => "unconfirmed",
            StaleReason::BelowHighWater => "below_high_water",
        }
    }
}

/// Sees what the client does; the service turns it into metrics.
pub trait RequestObserver: Send + Sync + std::fmt::Debug {
    /// One request to one broker finished.
    fn observe(&self, api: &'static str, outcome: Outcome, elapsed: Duration);

    /// One DescribeTransactions went out with `ids` transactional ids.
    fn describe_batch(&self, _ids: usize) {}

    /// One coordinator lookup (a FindCoordinator, maybe hedged) went out
    /// with `keys` transactional ids; confirmations are not lookups.
    fn coordinator_lookup(&self, _keys: usize) {}

    /// A coordinator's answer was not trusted and the id was asked again.
    fn stale_answer(&self, _reason: StaleReason) {}

    /// The cluster behind the bootstrap servers changed its id.
    fn cluster_changed(&self) {}
}

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
            describe_batching: true,
            max_describe_batch: 500,
            coordinator_cache_bytes: 64 * 1024 * 1024,
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

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Connection>>>>;

/// What every clone of a client shares: settings, the cluster view and the
/// failure memory.
pub(crate) struct Core {
    pub(crate) config: ClientConfig,
    settings: ConnSettings,
    tls: Option<tokio_rustls::TlsConnector>,
    pub(crate) nodes: NodeStates,
    pub(crate) metadata: Metadata,
    pub(crate) coordinators: Coordinators,
    pub(crate) describes: DescribeQueues,
}

/// One set of connections, one per broker address.
#[derive(Default)]
struct Pool {
    slots: Mutex<HashMap<String, Slot>>,
}

/// A Kafka client over `kafka-protocol`: cheap to clone, one connection per
/// broker shared by every clone.
#[derive(Clone)]
pub struct KafkaClient {
    pub(crate) core: Arc<Core>,
    pool: Arc<Pool>,
}

impl std::fmt::Debug for KafkaClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaClient")
            .field("config", &self.core.config)
            .field("tls", &self.core.tls.is_some())
            .finish_non_exhaustive()
    }
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
            core: Arc::new(Core {
                nodes: NodeStates::new(config.reconnect_backoff, config.reconnect_backoff_max),
                metadata: Metadata::default(),
                coordinators: Coordinators::new(&config),
                describes: DescribeQueues::default(),
                config,
                settings,
                tls,
            }),
            pool: Arc::default(),
        })
    }

    /// A client sharing this one's cluster view and failure memory but with
    /// connections of its own: a broker answers the requests of one
    /// connection in order, so long polls need their own.
    pub fn with_own_connections(&self) -> KafkaClient {
        KafkaClient {
            core: self.core.clone(),
            pool: Arc::default(),
        }
    }

    /// The client's settings.
    pub fn config(&self) -> &ClientConfig {
        &self.core.config
    }

    pub(crate) fn observer(&self) -> Option<&Arc<dyn RequestObserver>> {
        self.core.config.observer.as_ref()
    }

    fn slot(&self, addr: &str) -> Slot {
        lock(&self.pool.slots)
            .entry(addr.to_owned())
            .or_default()
            .clone()
    }

    /// The connection to `addr`, opened (or reopened) when needed. Callers
    /// for one address share one connection; only one of them connects. A
    /// broker in reconnect backoff fails at once.
    pub(crate) async fn connection(&self, addr: &str) -> Result<Arc<Connection>, KafkaError> {
        let slot = self.slot(addr);
        let mut guard = slot.lock().await;
        if let Some(conn) = guard.as_ref().filter(|c| !c.is_closed()) {
            return Ok(conn.clone());
        }
        if let Some(left) = self.core.nodes.blocked_for(addr) {
            return Err(KafkaError::Connect {
                addr: addr.to_owned(),
                reason: format!("failed recently; reconnecting in {} ms", left.as_millis()),
            });
        }
        match self.open(addr).await {
            Ok(conn) => {
                let conn = Arc::new(conn);
                *guard = Some(conn.clone());
                Ok(conn)
            }
            Err(e) => {
                if e.is_retriable() {
                    self.connection_failed(addr);
                }
                Err(e)
            }
        }
    }

    async fn open(&self, addr: &str) -> Result<Connection, KafkaError> {
        let config = &self.core.config;
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
        let settings = self.core.settings.clone();
        let mut conn = match &self.core.tls {
            None => Connection::start(stream, addr, settings),
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
                Connection::start(stream, addr, settings)
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

    /// A connection to `addr` failed or timed out: the broker waits out its
    /// reconnect backoff, metadata is refreshed before the next routed
    /// request, and coordinators cached there are looked up again.
    fn connection_failed(&self, addr: &str) {
        self.core.nodes.failed(addr);
        self.core.metadata.request_update();
        self.core.coordinators.suspect(addr);
    }

    /// Sends one request to the broker at `addr` with the client's request
    /// timeout, and learns from the outcome (see the module docs).
    pub(crate) async fn send_to<R: Request>(
        &self,
        addr: &str,
        request: &R,
    ) -> Result<R::Response, KafkaError> {
        self.send_to_within(addr, request, self.core.config.request_timeout)
            .await
    }

    /// [`KafkaClient::send_to`] with a longer request timeout (a long poll).
    pub(crate) async fn send_to_within<R: Request>(
        &self,
        addr: &str,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Response, KafkaError> {
        match self.connection(addr).await {
            Ok(conn) => self.call_on(&conn, request, timeout).await,
            Err(e) => {
                // Counted as a request that could not connect; the failure
                // itself was recorded by `connection`.
                if let Some(observer) = self.observer() {
                    observer.observe(api_name(R::KEY), Outcome::Disconnected, Duration::ZERO);
                }
                Err(e)
            }
        }
    }

    /// Sends one request on an open connection and learns from the outcome.
    pub(crate) async fn call_on<R: Request>(
        &self,
        conn: &Connection,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Response, KafkaError> {
        let started = Instant::now();
        let result = conn.call(request, timeout).await.map(|(r, _)| r);
        let addr = conn.addr();
        match &result {
            Ok(_) => {
                if self.core.nodes.succeeded(addr) {
                    self.core.coordinators.trust(addr);
                }
            }
            Err(
                KafkaError::Timeout { .. }
                | KafkaError::ConnectionClosed { .. }
                | KafkaError::Protocol { .. }
                | KafkaError::FrameTooLarge { .. },
            ) => self.connection_failed(addr),
            Err(_) => {}
        }
        if let Some(observer) = self.observer() {
            observer.observe(api_name(R::KEY), Outcome::of(&result), started.elapsed());
        }
        result
    }

    /// Broker addresses in the order to ask them for a request any broker
    /// can answer: brokers with a live, idle connection first, then brokers
    /// not connected yet, then busy ones, and brokers in reconnect backoff
    /// last; ties in random order so load spreads (Java's `leastLoadedNode`).
    /// The bootstrap list stands in until metadata names the brokers.
    pub(crate) fn brokers_by_load(&self, exclude: &[&str]) -> Vec<String> {
        let mut addrs: Vec<String> = self.core.metadata.broker_addrs();
        if addrs.is_empty() {
            addrs = self.core.config.bootstrap.clone();
        }
        addrs.retain(|a| !exclude.contains(&a.as_str()));
        addrs.sort();
        addrs.dedup();
        let slots = lock(&self.pool.slots);
        let mut ranked: Vec<((u8, usize, u32), String)> = addrs
            .into_iter()
            .map(|addr| {
                let blocked = self.core.nodes.blocked_for(&addr).is_some();
                let load = match slots.get(&addr).map(|s| s.try_lock()) {
                    // Someone is connecting: may be a hung broker.
                    Some(Err(_)) => (2, usize::MAX),
                    Some(Ok(conn)) => match conn.as_ref().filter(|c| !c.is_closed()) {
                        Some(c) if c.in_flight() == 0 => (0, 0),
                        Some(c) => (2, c.in_flight()),
                        None => (1, 0),
                    },
                    None => (1, 0),
                };
                let rank = if blocked { 3 } else { load.0 };
                ((rank, load.1, rand::random::<u32>()), addr)
            })
            .collect();
        ranked.sort();
        ranked.into_iter().map(|(_, addr)| addr).collect()
    }

    /// Sends a request any broker can answer (never `exclude`) and returns
    /// the first answer with the address that gave it. A broker that fails
    /// is replaced by the next at once; one that is slow gets a second
    /// broker racing it after `hedge_after` (at most two in flight).
    pub(crate) async fn send_any<R: Request>(
        &self,
        request: &R,
        exclude: &[&str],
    ) -> Result<(R::Response, String), KafkaError> {
        let order = self.brokers_by_load(exclude);
        let mut next = order.into_iter();
        let mut racing = FuturesUnordered::new();
        let start = |addr: String| async move {
            let result = self.send_to(&addr, request).await;
            (addr, result)
        };
        let Some(first) = next.next() else {
            return Err(KafkaError::Connect {
                addr: "the cluster".into(),
                reason: "no broker to ask".into(),
            });
        };
        racing.push(start(first));
        let mut last = None;
        let hedge = tokio::time::sleep(self.core.config.hedge_after);
        tokio::pin!(hedge);
        let mut hedged = false;
        loop {
            tokio::select! {
                done = racing.next() => match done {
                    Some((addr, Ok(response))) => return Ok((response, addr)),
                    Some((_, Err(e))) if e.is_retriable() => {
                        last = Some(e);
                        if let Some(addr) = next.next() {
                            racing.push(start(addr));
                        } else if racing.is_empty() {
                            break;
                        }
                    }
                    Some((_, Err(e))) => return Err(e),
                    None => break,
                },
                () = &mut hedge, if !hedged => {
                    hedged = true;
                    if racing.len() < 2
                        && let Some(addr) = next.next()
                    {
                        racing.push(start(addr));
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| KafkaError::Connect {
            addr: "the cluster".into(),
            reason: "no broker answered".into(),
        }))
    }

    /// Closes every connection of this client; later calls reconnect.
    pub async fn close(&self) {
        let slots: Vec<Slot> = lock(&self.pool.slots).drain().map(|(_, s)| s).collect();
        for slot in slots {
            slot.lock().await.take();
        }
    }
}
