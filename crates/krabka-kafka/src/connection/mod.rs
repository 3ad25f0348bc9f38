//! One connection to one broker: length-prefixed frames, correlation ids and
//! pipelining.
//!
//! The caller writes its whole frame itself, under the connection's write
//! lock (no writer task: a request costs no task switch on the way out); a
//! reader task reads through a buffer and routes each response to the
//! caller waiting on its correlation id. When either side fails the
//! connection is poisoned: every request in flight fails at once with the
//! same error and later calls fail fast, so the caller reconnects. A caller
//! that gives up halfway through writing its frame poisons it too: the
//! broker would read the next frame from the middle of this one.
//! A request that times out also poisons the connection, as Kafka's Java
//! client does: a silent broker is a dead connection. So does an answer
//! that does not decode (a broken broker or proxy, or one that declares
//! more elements than it sent): its caller gets the connection's closing,
//! which is retried like any other, and nothing else read from that peer
//! is trusted.
//!
//! Nothing a peer declares is allocated before it arrives: a frame's
//! buffer grows with the bytes read (the declared size only bounds it, as
//! `max_frame_bytes` bounds the size), and the patched kafka-protocol
//! refuses an element count that the frame cannot hold (docs/development.md).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use krabka_coordination::time::boot_now;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::error::KafkaError;
use super::versions::{Versions, api_name};
use krabka_coordination::sync::lock;

/// How much of the broker's answers one read may take at once: responses
/// that arrive together are read with one system call.
const READ_BUFFER: usize = 64 * 1024;

/// Settings of one connection.
#[derive(Clone, Debug)]
pub(crate) struct ConnSettings {
    pub(crate) client_id: Arc<str>,
    pub(crate) max_frame_bytes: usize,
}

type Reply = oneshot::Sender<Result<Bytes, KafkaError>>;

/// What a connection holds for others until it fails.
pub(crate) type Held = Box<dyn std::fmt::Debug + Send>;

/// How long a connection may go without an answer and still count as
/// contact with its cluster ([`Connection::answering`]). A cluster that is
/// there answers the client's steady requests (a long poll ends within
/// half a roster TTL, the coordinator poller asks every second); a
/// connection that went quiet may be hanging, its cluster gone.
///
/// Promised, not assumed away: a cluster replaced behind the same
/// addresses without a reset (its hosts crashed, its links hang while the
/// address moves) may still have its cached verdicts (`superseded` only)
/// served for the rest of this second after its last answer; docs/trust.md
/// says so, the simulation's checker allows exactly this second
/// (`sim::check::CACHED_CONTACT`; seed 12506 fails with a longer silence),
/// and on Kafka 4.1.1, 4.4.0 and 3.9.2
/// `replaced::an_address_moved_while_its_connections_hang...` bounds it at
/// 0.69-0.77 s. Counted on the boot clock: a host suspend is silence too.
pub(crate) const SILENCE: Duration = Duration::from_secs(1);

/// Tells whether a connection's broker is still heard from
/// ([`Connection::answering`]).
#[derive(Clone)]
pub(crate) struct Answering(std::sync::Weak<Shared>);

impl Answering {
    /// False once the connection failed or closed, or its broker has said
    /// nothing for [`SILENCE`].
    pub(crate) fn now(&self) -> bool {
        let Some(shared) = self.0.upgrade() else {
            return false;
        };
        let open = matches!(*lock(&shared.pending), Pending::Open(_));
        open && boot_now().saturating_duration_since(*lock(&shared.heard)) <= SILENCE
    }
}

impl std::fmt::Debug for Answering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Answering").field(&self.now()).finish()
    }
}

/// The partitions of `__transaction_state` the broker process on a
/// connection names itself leader of, by index, with their leader epochs:
/// what tells that process from another registered with the same node id
/// (`describe::incarnation`).
pub(crate) type Leads = HashMap<i32, i32>;

enum Pending {
    Open(HashMap<i32, Reply>),
    Poisoned(KafkaError),
}

struct Shared {
    addr: String,
    pending: Mutex<Pending>,
    /// When the broker last answered anything on the connection (or it
    /// opened), a [`boot_now`] instant: a host that slept through the
    /// silence has not heard from its brokers since, however little
    /// tokio's clock moved.
    heard: Mutex<tokio::time::Instant>,
    /// Dropped when the connection fails (its count as contact with its
    /// cluster, `state::contact`).
    held: Mutex<Option<Held>>,
}

impl Shared {
    /// Fails every request in flight and every later one with `err`.
    fn poison(&self, err: KafkaError) {
        let previous = std::mem::replace(&mut *lock(&self.pending), Pending::Poisoned(err.clone()));
        lock(&self.held).take();
        if let Pending::Open(waiters) = previous {
            if !waiters.is_empty() {
                tracing::debug!(addr = %self.addr, in_flight = waiters.len(), error = %err, "connection poisoned");
            }
            // In the order they were sent (not the map's: a simulation's
            // seed decides which caller runs on first).
            let mut waiters: Vec<(i32, Reply)> = waiters.into_iter().collect();
            waiters.sort_unstable_by_key(|(id, _)| *id);
            for (_, reply) in waiters {
                let _ = reply.send(Err(err.clone()));
            }
        }
    }

    fn closed(&self, reason: impl Into<String>) -> KafkaError {
        KafkaError::ConnectionClosed {
            addr: self.addr.clone(),
            reason: reason.into(),
        }
    }
}

/// Removes a waiter when its caller gives up (timeout or drop).
struct Waiter<'a> {
    shared: &'a Shared,
    id: i32,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        if let Pending::Open(map) = &mut *lock(&self.shared.pending) {
            map.remove(&self.id);
        }
    }
}

/// Poisons the connection when dropped before [`Unfinished::done`]: a frame
/// abandoned halfway (its caller timed out or went away) corrupts the stream.
struct Unfinished<'a>(Option<&'a Shared>);

impl Unfinished<'_> {
    fn done(mut self) {
        self.0 = None;
    }
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if let Some(shared) = self.0 {
            shared.poison(shared.closed("a request was abandoned halfway through its write"));
        }
    }
}

type Sink = Box<dyn AsyncWrite + Send + Unpin>;

/// A live connection to one broker.
pub(crate) struct Connection {
    shared: Arc<Shared>,
    /// The write half; one frame at a time, whole.
    sink: tokio::sync::Mutex<Sink>,
    next_id: AtomicI32,
    settings: ConnSettings,
    versions: Versions,
    /// The broker's finalized feature levels (e.g. `transaction.version`).
    features: HashMap<String, i16>,
    reader: JoinHandle<()>,
    /// When set, the connection is retired at this instant (the end of its
    /// SASL session, KIP-368): later requests open a new connection.
    retire_at: Option<tokio::time::Instant>,
    /// The id of the cluster the broker said it belongs to when the
    /// connection opened.
    cluster_id: Option<Arc<str>>,
    /// When the connection was opened.
    opened: tokio::time::Instant,
    /// What the broker's latest answer on this connection said it leads,
    /// and how many times it was asked.
    leads: Mutex<(u64, Option<Arc<Leads>>)>,
    /// Held while it is asked: one request at a time, the others wait for
    /// its answer.
    asking_leads: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.shared.addr)
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
        // At once, not when the aborted reader lets go of it: the
        // connection stops counting as contact with its cluster.
        self.shared.poison(self.shared.closed("dropped"));
    }
}

impl Connection {
    /// Starts the reader task over an open stream. Versions are negotiated
    /// separately with [`Connection::negotiate`].
    pub(crate) fn start<S>(stream: S, addr: &str, settings: ConnSettings) -> Connection
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (read, write) = tokio::io::split(stream);
        let shared = Arc::new(Shared {
            addr: addr.to_owned(),
            pending: Mutex::new(Pending::Open(HashMap::new())),
            heard: Mutex::new(boot_now()),
            held: Mutex::default(),
        });
        let reader = tokio::spawn(read_loop(
            BufReader::with_capacity(READ_BUFFER, read),
            shared.clone(),
            settings.max_frame_bytes,
        ));
        Connection {
            shared,
            sink: tokio::sync::Mutex::new(Box::new(write)),
            next_id: AtomicI32::new(0),
            settings,
            versions: Versions::default(),
            features: HashMap::new(),
            reader,
            retire_at: None,
            cluster_id: None,
            opened: tokio::time::Instant::now(),
            leads: Mutex::default(),
            asking_leads: tokio::sync::Mutex::const_new(()),
        }
    }

    /// When the connection was opened.
    pub(crate) fn opened(&self) -> tokio::time::Instant {
        self.opened
    }

    /// What the broker on this connection last said it leads (once asked),
    /// and how many answers came before it: a caller that saw answer `n`
    /// asks again only if no later one came meanwhile.
    pub(crate) fn leads(&self) -> (u64, Option<Arc<Leads>>) {
        lock(&self.leads).clone()
    }

    /// Takes in what the broker on this connection says it leads.
    pub(crate) fn set_leads(&self, leads: Leads) {
        let mut slot = lock(&self.leads);
        *slot = (slot.0 + 1, Some(Arc::new(leads)));
    }

    /// Held while the broker is asked what it leads.
    pub(crate) async fn asking_leads(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.asking_leads.lock().await
    }

    /// Retires the connection at `at`: requests in flight finish, new ones
    /// go to a new connection.
    pub(crate) fn retire_at(&mut self, at: tokio::time::Instant) {
        self.retire_at = Some(at);
    }

    /// Asks the broker which versions it speaks and fixes ours.
    pub(crate) async fn negotiate(&mut self, timeout: Duration) -> Result<(), KafkaError> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("krabka-authority"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut response: ApiVersionsResponse = self.send(&request, 3, timeout).await?;
        if response.error_code == 35 {
            // UNSUPPORTED_VERSION: the broker answered in v0 with its range.
            response = self
                .send(&ApiVersionsRequest::default(), 0, timeout)
                .await?;
        }
        if response.error_code != 0 {
            return Err(KafkaError::broker("ApiVersions", response.error_code, None));
        }
        self.versions = Versions::negotiate(
            response
                .api_keys
                .iter()
                .map(|k| (k.api_key, k.min_version, k.max_version)),
        );
        self.features = response
            .finalized_features
            .iter()
            .map(|f| (f.name.to_string(), f.max_version_level))
            .collect();
        Ok(())
    }

    /// Asks the broker which cluster it belongs to (a Metadata request for
    /// no topic, which needs no permission) and remembers it: the first
    /// request of every connection, so that nothing else is sent to a
    /// broker of another cluster behind a known address. Returns the id
    /// and the brokers the answer lists, as (node id, `host:port`).
    pub(crate) async fn ask_cluster_id(
        &mut self,
        timeout: Duration,
    ) -> Result<(Option<Arc<str>>, Vec<(i32, String)>), KafkaError> {
        let request = MetadataRequest::default()
            .with_topics(Some(Vec::new()))
            .with_allow_auto_topic_creation(false);
        let (response, _) = self.call(&request, timeout).await?;
        self.cluster_id = response.cluster_id.map(|id| id.as_str().into());
        let brokers = response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
            .collect();
        Ok((self.cluster_id.clone(), brokers))
    }

    /// The cluster id the broker reported when the connection opened.
    pub(crate) fn cluster_id(&self) -> Option<&str> {
        self.cluster_id.as_deref()
    }

    /// Holds `held` until the connection fails or is dropped; drops it at
    /// once when the connection already failed.
    pub(crate) fn hold_while_open(&self, held: Held) {
        let pending = lock(&self.shared.pending);
        if matches!(*pending, Pending::Open(_)) {
            *lock(&self.shared.held) = Some(held);
        }
    }

    /// Fails every request in flight and every later one: the connection
    /// is of no use (it leads to another cluster than the known one).
    pub(crate) fn close(&self, reason: &str) {
        self.shared.poison(self.shared.closed(reason));
    }

    /// The finalized level of a cluster feature, as the broker reported it
    /// when the connection opened; `None` when not finalized.
    pub(crate) fn feature(&self, name: &str) -> Option<i16> {
        self.features.get(name).copied()
    }

    /// Uses fixed versions instead of asking (tests with a scripted broker).
    #[cfg(test)]
    pub(crate) fn with_versions(mut self, versions: Versions) -> Connection {
        self.versions = versions;
        self
    }

    /// Takes the versions and features `other`, a connection to the same
    /// address, negotiated: one round trip fewer for a connection opened
    /// for one request. A process behind the address that does not speak
    /// them answers with an error, which fails that request alone.
    pub(crate) fn negotiated_as(&mut self, other: &Connection) {
        self.versions = other.versions.clone();
        self.features = other.features.clone();
    }

    /// The broker address.
    pub(crate) fn addr(&self) -> &str {
        &self.shared.addr
    }

    /// True once the connection failed; a new one must be opened.
    pub(crate) fn is_closed(&self) -> bool {
        matches!(*lock(&self.shared.pending), Pending::Poisoned(_))
            || self
                .retire_at
                .is_some_and(|at| tokio::time::Instant::now() >= at)
    }

    /// Whether the broker is still heard from: the connection lives and
    /// its broker answered within [`SILENCE`]. Only such a connection shows
    /// its cluster is still there: one whose link hangs looks alive
    /// (nothing resets it) until a request on it times out, and one with
    /// nothing to ask looks alive for ever, while the cluster behind the
    /// address may be another by now (seed 1005 of the simulation; on
    /// Kafka, `replaced::an_address_moved_while_its_connections_hang...`:
    /// the old cluster's cached verdicts were served 5.3-5.4 s on an idle
    /// connection, until a request on it timed out). Weak: it keeps
    /// nothing of the connection alive.
    pub(crate) fn answering(&self) -> Answering {
        Answering(Arc::downgrade(&self.shared))
    }

    /// Requests sent and not yet answered.
    pub(crate) fn in_flight(&self) -> usize {
        match &*lock(&self.shared.pending) {
            Pending::Open(map) => map.len(),
            Pending::Poisoned(_) => 0,
        }
    }

    /// The version to send `api` with on this connection.
    pub(crate) fn version(&self, api: ApiKey) -> Result<i16, KafkaError> {
        self.versions.get(api, &self.shared.addr)
    }

    /// Sends `request` at the negotiated version and waits for its response.
    pub(crate) async fn call<R>(
        &self,
        request: &R,
        timeout: Duration,
    ) -> Result<(R::Response, i16), KafkaError>
    where
        R: Request,
    {
        let api = ApiKey::try_from(R::KEY)
            .map_err(|_| KafkaError::Internal(format!("unknown API key {}", R::KEY)))?;
        let version = self.version(api)?;
        let response = self.send(request, version, timeout).await?;
        Ok((response, version))
    }

    /// Sends `request` at `version` and waits for its response.
    pub(crate) async fn send<R>(
        &self,
        request: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<R::Response, KafkaError>
    where
        R: Request,
    {
        let api = api_name(R::KEY);
        let addr = &self.shared.addr;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let frame = self.encode(request, version, id)?;

        let (tx, rx) = oneshot::channel();
        match &mut *lock(&self.shared.pending) {
            Pending::Poisoned(err) => return Err(err.clone()),
            Pending::Open(map) => {
                map.insert(id, tx);
            }
        }
        let _waiter = Waiter {
            shared: &self.shared,
            id,
        };
        // The timeout covers the write too: a broker that stopped reading
        // (its socket buffer full) fails the request as one that does not
        // answer, and poisons the connection the same way.
        let answered = tokio::time::timeout(timeout, async {
            self.write(&frame).await?;
            rx.await
                .unwrap_or_else(|_| Err(self.shared.closed("reader stopped")))
        });
        let mut body = match answered.await {
            Err(_) => {
                let err = KafkaError::Timeout {
                    api,
                    addr: addr.clone(),
                    after: timeout,
                };
                self.shared.poison(err.clone());
                return Err(err);
            }
            Ok(result) => result?,
        };
        let decoded = ResponseHeader::decode(&mut body, R::Response::header_version(version))
            .and_then(|_| R::Response::decode(&mut body, version));
        decoded.map_err(|e| {
            let err = self.shared.closed(format!(
                "its {api} v{version} answer does not decode: {e:#}"
            ));
            self.shared.poison(err.clone());
            err
        })
    }

    /// Writes one whole frame (and flushes it: TLS buffers) under the write
    /// lock; a failure poisons the connection.
    async fn write(&self, frame: &[u8]) -> Result<(), KafkaError> {
        let mut sink = self.sink.lock().await;
        if let Pending::Poisoned(err) = &*lock(&self.shared.pending) {
            return Err(err.clone());
        }
        let unfinished = Unfinished(Some(&self.shared));
        let written = async {
            sink.write_all(frame).await?;
            sink.flush().await
        }
        .await;
        unfinished.done();
        written.map_err(|e| {
            let err = io_failure(&self.shared, "write", e);
            self.shared.poison(err.clone());
            err
        })
    }

    fn encode<R: Request>(&self, request: &R, version: i16, id: i32) -> Result<Bytes, KafkaError> {
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(id)
            .with_client_id(Some(StrBytes::from_string(
                self.settings.client_id.to_string(),
            )));
        let mut buf = BytesMut::with_capacity(64);
        buf.put_i32(0);
        let invalid = |e: String| {
            KafkaError::Internal(format!(
                "cannot encode {} v{version}: {e}",
                api_name(R::KEY)
            ))
        };
        header
            .encode(&mut buf, R::header_version(version))
            .map_err(|e| invalid(format!("{e:#}")))?;
        request
            .encode(&mut buf, version)
            .map_err(|e| invalid(format!("{e:#}")))?;
        let len = buf.len() - 4;
        if len > self.settings.max_frame_bytes {
            return Err(KafkaError::Config(format!(
                "a {} request of {len} bytes exceeds the maximum frame of {} bytes",
                api_name(R::KEY),
                self.settings.max_frame_bytes
            )));
        }
        let size = i32::try_from(len)
            .map_err(|_| KafkaError::Config(format!("request of {len} bytes")))?;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        Ok(buf.freeze())
    }
}

/// The error of a failed read or write: a TLS alert (a refused client
/// certificate, say) is a TLS error that retrying cannot fix; anything else
/// closed the connection.
fn io_failure(shared: &Shared, op: &str, e: std::io::Error) -> KafkaError {
    let tls = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match tls {
        Some(tls) => KafkaError::Tls(format!("{op} on {} failed: {tls}", shared.addr)),
        None => shared.closed(format!("{op} failed: {e}")),
    }
}

/// Reads a frame body of `size` bytes into `body`, which grows as they
/// arrive (at most doubling what was read): a peer that declares a large
/// frame and sends little costs what it sent, not what it declared.
async fn read_body<R>(read: &mut R, size: usize, body: &mut BytesMut) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
{
    while body.len() < size {
        let left = size - body.len();
        if body.capacity() == body.len() {
            body.reserve(left.min(body.len().max(READ_BUFFER)));
        }
        if (&mut *read).take(left as u64).read_buf(body).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

async fn read_loop<R>(mut read: R, shared: Arc<Shared>, max_frame: usize)
where
    R: AsyncRead + Unpin,
{
    let err = loop {
        let size = match read.read_i32().await {
            Ok(size) => size,
            Err(e) => break io_failure(&shared, "read", e),
        };
        if size < 4 || size as usize > max_frame {
            break KafkaError::FrameTooLarge {
                addr: shared.addr.clone(),
                size: i64::from(size),
                max: max_frame,
            };
        }
        let mut body = BytesMut::new();
        if let Err(e) = read_body(&mut read, size as usize, &mut body).await {
            break io_failure(&shared, "read", e);
        }
        let body = body.freeze();
        let id = (&body[..4]).get_i32();
        *lock(&shared.heard) = boot_now();
        let waiter = match &mut *lock(&shared.pending) {
            Pending::Open(map) => map.remove(&id),
            Pending::Poisoned(_) => return,
        };
        match waiter {
            Some(reply) => {
                let _ = reply.send(Ok(body));
            }
            None => tracing::trace!(addr = %shared.addr, id, "response for an abandoned request"),
        }
    };
    shared.poison(err);
}

#[cfg(test)]
mod tests;
