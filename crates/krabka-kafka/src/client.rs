//! The client: connections per broker, and which broker to ask.
//!
//! [`KafkaClient`] is the connector, as rskafka's `Client` over its
//! `BrokerConnector`: it keeps the connections, what is known of the
//! cluster (`state`) and the routing below. What is asked of Kafka goes
//! through small handles, each in its own file with the method that hands
//! it out, borrowing the client (so this file imports none of them): [`KafkaClient::describer`] (the one describe path,
//! `describe/`), [`KafkaClient::lookup`] (transaction coordinators,
//! `coordinator`), [`KafkaClient::metadata`] (`metadata`),
//! [`KafkaClient::producer`] (appends and transactions, `produce`, `txn`),
//! [`KafkaClient::topics`] (`topic`) and [`KafkaClient::reader`] (offsets,
//! fetches and tails, `fetch`, `tail`).
//!
//! Kafka's Java client is the reference (`NetworkClient`,
//! `ClusterConnectionStates`):
//! - every outcome of opening a connection or of a request goes to
//!   [`ClusterState::learn`], which decides what it teaches (a failed or
//!   timed-out request puts its broker in reconnect backoff, asks for a
//!   metadata refresh and suspects the coordinators cached there);
//! - a broker in reconnect backoff is not connected to: the attempt fails at
//!   once with the reason its last attempt failed;
//! - every new connection first asks the broker for its cluster id (after
//!   ApiVersions and SASL, before anything else): a broker of another
//!   cluster behind a known address is noticed before it answers anything
//!   else, and everything learned of the old cluster is forgotten; answers
//!   arriving on connections to the old cluster are refused;
//! - a request that any broker can answer (metadata, FindCoordinator, topic
//!   configs) goes to the least loaded broker that is not in backoff, and
//!   fails over to the next one when that broker fails; a broker whose
//!   metadata is behind another's (stale, `state::epochs`) is never asked;
//! - unlike the Java client, such a request is also *hedged*: when no answer
//!   came within [`ClientConfig::hedge_after`], the same request goes to a
//!   second broker and the first answer wins, so a hung broker (which
//!   accepts connections and answers nothing) costs a fraction of a second,
//!   not a request timeout.
//!
//! Every request runs with the client's own request timeout: a caller with a
//! shorter deadline stops waiting without cancelling the request, so it never
//! poisons a connection to a live broker.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use kafka_protocol::protocol::Request;
use tokio::time::Instant;

use super::config::ClientConfig;
use super::connection::{ConnSettings, Connection};
use super::error::KafkaError;
use super::host;
use super::observe::{Outcome, RequestObserver};
use super::security::authenticate;
use super::state::{Candidate, ClusterState, Lesson, Link, rank};
use super::tls::{Tls, server_name};
use super::versions::api_name;
use krabka_coordination::sync::lock;

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Connection>>>>;

/// What every clone of a client shares: its settings and what it knows of
/// the cluster.
struct Shared {
    config: ClientConfig,
    settings: ConnSettings,
    tls: Option<Tls>,
    state: ClusterState,
    /// Per topic, the most bytes a batch may decompress to, once read from
    /// its `max.message.bytes` (`fetch`, `topic`).
    batch_limits: Mutex<HashMap<String, usize>>,
}

/// One set of connections, one per broker address; ordered, so that they
/// close in one order when the client goes (a simulation's seed decides a
/// run, not a hasher).
#[derive(Default)]
struct Pool {
    slots: Mutex<BTreeMap<String, Slot>>,
}

/// Whose a connection being opened is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Opening {
    /// The pool's, shared by every request to its address.
    Pooled,
    /// One caller's, for one request ([`KafkaClient::connect_alone`]).
    Alone,
}

/// A Kafka client over `kafka-protocol`: cheap to clone, one connection per
/// broker shared by every clone.
#[derive(Clone)]
pub struct KafkaClient {
    shared: Arc<Shared>,
    pool: Arc<Pool>,
}

impl std::fmt::Debug for KafkaClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaClient")
            .field("config", &self.shared.config)
            .field("tls", &self.shared.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl KafkaClient {
    /// A client for `config`; connects lazily. TLS files are read here, so
    /// a missing or bad one fails at once (and again, when they change,
    /// before new connections: `tls`).
    pub fn new(config: ClientConfig) -> Result<KafkaClient, KafkaError> {
        if config.bootstrap.is_empty() {
            return Err(KafkaError::Config("no bootstrap servers given".into()));
        }
        let tls = config.security.tls.as_ref().map(Tls::load).transpose()?;
        let settings = ConnSettings {
            client_id: config.client_id.as_str().into(),
            max_frame_bytes: config.max_frame_bytes,
        };
        Ok(KafkaClient {
            shared: Arc::new(Shared {
                state: ClusterState::new(&config),
                config,
                settings,
                tls,
                batch_limits: Mutex::default(),
            }),
            pool: Arc::default(),
        })
    }

    /// A client sharing this one's cluster view and failure memory but with
    /// connections of its own: a broker answers the requests of one
    /// connection in order, so long polls need their own.
    pub fn with_own_connections(&self) -> KafkaClient {
        KafkaClient {
            shared: self.shared.clone(),
            pool: Arc::default(),
        }
    }

    /// The TLS material in use (after a look at its files, at most once a
    /// second); `None` without TLS.
    pub fn tls_status(&self) -> Option<super::TlsStatus> {
        self.shared.tls.as_ref().map(Tls::status)
    }

    #[cfg(test)]
    pub(crate) fn tls(&self) -> Option<&Tls> {
        self.shared.tls.as_ref()
    }

    /// The client's settings.
    pub fn config(&self) -> &ClientConfig {
        &self.shared.config
    }

    /// What the client knows of the cluster; outcomes go to
    /// [`ClusterState::learn`].
    pub(crate) fn state(&self) -> &ClusterState {
        &self.shared.state
    }

    /// The bound on a batch's decompressed size learned for `topic`.
    pub(crate) fn batch_limit(&self, topic: &str) -> Option<usize> {
        lock(&self.shared.batch_limits).get(topic).copied()
    }

    /// Remembers `limit` as `topic`'s bound; true when it is new or changed.
    pub(crate) fn remember_batch_limit(&self, topic: &str, limit: usize) -> bool {
        lock(&self.shared.batch_limits).insert(topic.to_owned(), limit) != Some(limit)
    }

    pub(crate) fn observer(&self) -> Option<&Arc<dyn RequestObserver>> {
        self.shared.config.observer.as_ref()
    }

    fn slot(&self, addr: &str) -> Slot {
        lock(&self.pool.slots)
            .entry(addr.to_owned())
            .or_default()
            .clone()
    }

    /// The connection to `addr`, opened (or reopened) when needed. Callers
    /// for one address share one connection; only one of them connects. A
    /// broker in reconnect backoff fails at once, with the reason its last
    /// attempt failed.
    pub(crate) async fn connection(&self, addr: &str) -> Result<Arc<Connection>, KafkaError> {
        let slot = self.slot(addr);
        let mut guard = slot.lock().await;
        if let Some(conn) = guard.as_ref().filter(|c| {
            !c.is_closed()
                && self.of_known_cluster(c)
                && !self.state().nodes().given_up(addr, c.opened())
        }) {
            return Ok(conn.clone());
        }
        if let Some(blocked) = self.state().nodes().blocked(addr) {
            return Err(KafkaError::Connect {
                addr: addr.to_owned(),
                reason: format!(
                    "{}; next try in {} ms",
                    blocked.reason,
                    blocked.left.as_millis()
                ),
            });
        }
        match self.open(addr, Opening::Pooled).await {
            Ok(conn) => {
                let conn = Arc::new(conn);
                *guard = Some(conn.clone());
                Ok(conn)
            }
            Err(error) => {
                self.state().learn(Lesson::CannotConnect {
                    addr,
                    error: &error,
                });
                Err(error)
            }
        }
    }

    /// The pool's open connection to `addr`, if there is one and nobody is
    /// opening it now.
    fn pooled(&self, addr: &str) -> Option<Arc<Connection>> {
        let slot = lock(&self.pool.slots).get(addr)?.clone();
        let guard = slot.try_lock().ok()?;
        guard.as_ref().filter(|c| !c.is_closed()).cloned()
    }

    /// A connection to `addr` of the caller's own, outside the pool, for
    /// one Metadata request: it reaches whichever process the address leads
    /// to now (a confirmation on a cluster of one broker, `describe`).
    /// Negotiated as the pool's connection to the address when there is
    /// one, and not asked its cluster's id (the Metadata answer says it);
    /// closed with a reset when dropped (no TIME_WAIT per request).
    pub(crate) async fn connect_alone(&self, addr: &str) -> Result<Connection, KafkaError> {
        self.open(addr, Opening::Alone).await
    }

    async fn open(&self, addr: &str, opening: Opening) -> Result<Connection, KafkaError> {
        let config = &self.shared.config;
        let connect_err = |reason: String| KafkaError::Connect {
            addr: addr.to_owned(),
            reason,
        };
        let stream = tokio::time::timeout(config.connect_timeout, host::connect(addr))
            .await
            .map_err(|_| connect_err(format!("timed out after {:?}", config.connect_timeout)))?
            .map_err(|e| connect_err(e.to_string()))?;
        stream
            .set_nodelay(true)
            .map_err(|e| connect_err(e.to_string()))?;
        if opening == Opening::Alone {
            stream
                .set_zero_linger()
                .map_err(|e| connect_err(e.to_string()))?;
        }
        let settings = self.shared.settings.clone();
        let mut conn = match &self.shared.tls {
            None => Connection::start(stream, addr, settings),
            Some(tls) => {
                let name = server_name(addr)?;
                let connector = tls.connector();
                let stream =
                    tokio::time::timeout(config.connect_timeout, connector.connect(name, stream))
                        .await
                        .map_err(|_| {
                            connect_err(format!(
                                "TLS handshake timed out after {:?}",
                                config.connect_timeout
                            ))
                        })?
                        .map_err(|e| tls.handshake_error(addr, &e))?;
                Connection::start(stream, addr, settings)
            }
        };
        match self.pooled(addr).filter(|_| opening == Opening::Alone) {
            Some(pooled) => conn.negotiated_as(&pooled),
            None => conn.negotiate(config.request_timeout).await?,
        }
        if let Some(sasl) = &config.security.sasl {
            let lifetime = authenticate(&conn, sasl, config.request_timeout).await?;
            if let Some(lifetime) = lifetime {
                // Retire well before the broker ends the session, with
                // jitter so connections do not all reconnect at once.
                let share = host::random_range(0.75..0.85);
                conn.retire_at(Instant::now() + lifetime.mul_f64(share));
            }
        }
        if opening == Opening::Alone && !self.state().confirms().by_find_coordinator() {
            // Its request is a Metadata request, whose answer says which
            // cluster it reached (`ClusterState::learn`); a FindCoordinator
            // answer does not, so then it is asked first.
            return Ok(conn);
        }
        let (id, brokers) = conn.ask_cluster_id(config.request_timeout).await?;
        self.state().learn(Lesson::ClusterId {
            addr,
            id: id.clone(),
        });
        self.state().learn(Lesson::Brokers { addr, brokers });
        if let Some(id) = id {
            conn.hold_while_open(Box::new(self.state().connected(id, conn.answering())));
        }
        tracing::debug!(addr, protocol = config.security.protocol(), "connected");
        Ok(conn)
    }

    /// False when `conn` leads to another cluster than the one known now.
    fn of_known_cluster(&self, conn: &Connection) -> bool {
        self.state().metadata().is_cluster(conn.cluster_id())
    }

    /// Sends one request to the broker at `addr` with the client's request
    /// timeout, and learns from the outcome (see the module docs).
    pub(crate) async fn send_to<R: Request>(
        &self,
        addr: &str,
        request: &R,
    ) -> Result<R::Response, KafkaError> {
        self.send_to_within(addr, request, self.shared.config.request_timeout)
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
        let addr = conn.addr();
        if let Some(observer) = self.observer() {
            observer.sent(addr, api_name(R::KEY));
        }
        let result = conn.call(request, timeout).await.map(|(r, _)| r);
        if result.is_ok() && !self.of_known_cluster(conn) {
            // Sent to the old cluster, answered after the new one was
            // found: nothing it says may be used.
            let reason = "the address now leads to another cluster";
            conn.close(reason);
            return Err(KafkaError::ConnectionClosed {
                addr: addr.to_owned(),
                reason: reason.into(),
            });
        }
        self.state().learn(match &result {
            Ok(_) => Lesson::Answered { addr },
            Err(error) => Lesson::ConnectionLost { addr, error },
        });
        if let Some(observer) = self.observer() {
            observer.observe(api_name(R::KEY), Outcome::of(&result), started.elapsed());
        }
        result
    }

    /// What the client knows of each of `brokers` (item, address) for
    /// `state::ranking`, in the order of their addresses: ties are broken by
    /// draws in that order, whatever order a map handed them in (so a
    /// simulation's seed decides them).
    pub(crate) fn candidates<T>(&self, mut brokers: Vec<(T, String)>) -> Vec<Candidate<T>> {
        brokers.sort_by(|a, b| a.1.cmp(&b.1));
        let (nodes, epochs) = (self.state().nodes(), self.state().epochs());
        let slow = self.state().confirms().busy();
        let slots = lock(&self.pool.slots);
        brokers
            .into_iter()
            .map(|(item, addr)| {
                let link = match slots.get(&addr).map(|s| s.try_lock()) {
                    // Someone is connecting: may be a hung broker.
                    Some(Err(_)) => Link::Connecting,
                    Some(Ok(conn)) => match conn.as_ref().filter(|c| !c.is_closed()) {
                        Some(c) => Link::Live {
                            in_flight: c.in_flight(),
                        },
                        None => Link::Closed,
                    },
                    None => Link::Closed,
                };
                Candidate {
                    link,
                    failures: nodes.failures(&addr),
                    blocked: nodes.is_blocked(&addr),
                    stale: epochs.is_stale(&addr),
                    slow: slow.contains(&addr),
                    item,
                }
            })
            .collect()
    }

    /// Broker addresses in the order to ask them for a request any broker
    /// can answer (`state::ranking`), never `exclude`. The bootstrap list
    /// stands in until metadata names the brokers.
    pub(crate) fn brokers_by_load(&self, exclude: &[&str]) -> Vec<String> {
        let mut addrs: Vec<String> = self.state().metadata().broker_addrs();
        if addrs.is_empty() {
            addrs = self.shared.config.bootstrap.clone();
        }
        addrs.retain(|a| !exclude.contains(&a.as_str()));
        addrs.sort();
        addrs.dedup();
        rank(self.candidates(addrs.into_iter().map(|a| (a.clone(), a)).collect()))
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
            return Err(KafkaError::NoBroker(
                "no broker is known and none is left to try".into(),
            ));
        };
        racing.push(start(first));
        let mut last = None;
        let hedge = tokio::time::sleep(self.shared.config.hedge_after);
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
        let slots: Vec<Slot> = std::mem::take(&mut *lock(&self.pool.slots))
            .into_values()
            .collect();
        for slot in slots {
            slot.lock().await.take();
        }
    }
}
