//! Scripted brokers on loopback, for the fast tier: the client's routing,
//! retries and failure handling against brokers that answer what a test
//! says, or never answer at all (a hung broker). A broker can be stopped and
//! another started on its address (another cluster), and holds a Fetch
//! answer for the request's long-poll wait, as a broker with no new data.
//! In the simulation tier the same brokers listen on simulated hosts
//! ([`FakeBroker::start_simulated`], feature `sim`), their scripts those of
//! a modelled cluster.
//!
//! And what a hostile member writes: [`bomb_batch`], a record batch that
//! decompresses to far more than it weighs, and [`produce_raw`] to write
//! it as it is.

// Test support: a broken script or socket is the test's failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::future::BoxFuture;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, DescribeTransactionsRequest,
    DescribeTransactionsResponse, FetchRequest, FindCoordinatorRequest, FindCoordinatorResponse,
    MetadataResponse, ProducerId, RequestHeader, ResponseHeader, TopicName,
    api_versions_response::ApiVersion,
    describe_transactions_response::TransactionState,
    find_coordinator_response::Coordinator,
    metadata_response::{MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic},
};
use kafka_protocol::protocol::{
    Decodable, Encodable, HeaderVersion, StrBytes, decode_request_header_from_buffer,
};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::client::KafkaClient;
use super::error::KafkaError;
use super::host::{self, Listener};
use super::versions::PINNED;

/// What a scripted broker answers to one request: the encoded response
/// (header and body), or `None` to never answer.
pub type Script = Arc<dyn Fn(&RequestHeader, Bytes) -> Option<Bytes> + Send + Sync>;

/// How long a scripted broker holds the answer to one request before it
/// writes it; the requests after it on that connection wait too (a broker
/// answers one connection's requests in order).
pub type Delay = Arc<dyn Fn(&RequestHeader, &Bytes) -> Duration + Send + Sync>;

/// What each request waits for once read, before its script answers it (in
/// place of a Fetch's long-poll wait): a paused or stalled broker, which
/// answers from what it knows when it runs on; a long poll that ends when
/// data arrives. The requests after it on that connection wait too. False
/// closes the connection instead (a process that died).
pub type Gate = Arc<dyn Fn(&RequestHeader, &Bytes) -> BoxFuture<'static, bool> + Send + Sync>;

pub mod model;

/// A scripted broker listening on loopback.
pub struct FakeBroker {
    pub addr: String,
    /// What it listens on (`addr` is what clients are told).
    bound: std::net::SocketAddr,
    /// Every request but ApiVersions: (API, version, body); none are kept
    /// by a simulated broker, which serves for long.
    pub seen: Seen,
    keep_seen: bool,
    /// The script, and the gate, new connections are answered by.
    script: Arc<RwLock<(Script, Option<Gate>)>>,
    delay: Delay,
    /// The network's round trip: each answer leaves this long after its
    /// request arrived, later requests read meanwhile.
    wire: Duration,
    /// TLS for every connection, when set.
    tls: Option<tokio_rustls::TlsAcceptor>,
    connections: Arc<Mutex<tokio::task::JoinSet<()>>>,
    /// The task accepting connections; it owns the listener.
    task: Mutex<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for FakeBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeBroker")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for FakeBroker {
    fn drop(&mut self) {
        self.task.lock().unwrap().abort();
        self.connections.lock().unwrap().abort_all();
    }
}

impl FakeBroker {
    /// A broker answering ApiVersions itself and everything else by `script`.
    pub async fn start(script: Script) -> FakeBroker {
        FakeBroker::start_delayed(script, Arc::new(|_, _| Duration::ZERO)).await
    }

    /// [`FakeBroker::start`], each answer written `delay` after the request
    /// was read (and answered by `script`); a restart keeps it.
    pub async fn start_delayed(script: Script, delay: Delay) -> FakeBroker {
        FakeBroker::listening(script, delay, Duration::ZERO, None).await
    }

    /// [`FakeBroker::start`] on this simulated host's `port` (inside a
    /// turmoil simulation, feature `sim`), told to clients as `name:port`;
    /// each request waits for `gate` once read, before `script` answers it.
    pub async fn start_simulated(name: &str, port: u16, script: Script, gate: Gate) -> FakeBroker {
        let bound = std::net::SocketAddr::from(([0, 0, 0, 0], port));
        let listener = host::bind(bound).await.unwrap();
        let mut broker = FakeBroker::new(format!("{name}:{port}"), bound, script);
        broker.keep_seen = false;
        broker.script.write().unwrap().1 = Some(gate);
        *broker.task.get_mut().unwrap() = broker.listen(listener);
        broker
    }

    /// [`FakeBroker::start`] across a network whose round trip is
    /// `round_trip`: each answer is written that long after its request was
    /// read, and the requests behind it are read meanwhile (pipelined, as
    /// through bench/delay-proxy), where a [`Delay`] holds them.
    pub async fn start_across(script: Script, round_trip: Duration) -> FakeBroker {
        FakeBroker::listening(script, Arc::new(|_, _| Duration::ZERO), round_trip, None).await
    }

    /// [`FakeBroker::start`] behind TLS as `tls` says (its certificate, and
    /// whether it asks for a client's).
    pub async fn start_tls(script: Script, tls: rustls::ServerConfig) -> FakeBroker {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let none = Arc::new(|_: &RequestHeader, _: &Bytes| Duration::ZERO);
        FakeBroker::listening(script, none, Duration::ZERO, Some(acceptor)).await
    }

    async fn listening(
        script: Script,
        delay: Delay,
        wire: Duration,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> FakeBroker {
        let listener = host::bind(([127, 0, 0, 1], 0).into()).await.unwrap();
        let bound = listener.local_addr().unwrap();
        let mut broker = FakeBroker::new(bound.to_string(), bound, script);
        broker.delay = delay;
        broker.wire = wire;
        broker.tls = tls;
        *broker.task.get_mut().unwrap() = broker.listen(listener);
        broker
    }

    fn new(addr: String, bound: std::net::SocketAddr, script: Script) -> FakeBroker {
        FakeBroker {
            addr,
            bound,
            seen: Arc::default(),
            keep_seen: true,
            script: Arc::new(RwLock::new((script, None))),
            delay: Arc::new(|_, _| Duration::ZERO),
            wire: Duration::ZERO,
            tls: None,
            connections: Arc::default(),
            task: Mutex::new(tokio::spawn(async {})),
        }
    }

    fn listen(&self, listener: Listener) -> tokio::task::JoinHandle<()> {
        let (scripted, open) = (self.script.clone(), self.connections.clone());
        let log = self.keep_seen.then(|| self.seen.clone());
        let (delay, wire, tls) = (self.delay.clone(), self.wire, self.tls.clone());
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                // As Kafka's SocketServer: answers written back to back
                // must not wait for the client's delayed acknowledgement.
                let _ = socket.set_nodelay(true);
                let (script, gate) = scripted.read().unwrap().clone();
                let answering = Answering {
                    script,
                    delay: delay.clone(),
                    gate,
                    log: log.clone(),
                };
                let tls = tls.clone();
                open.lock().unwrap().spawn(async move {
                    match tls {
                        None => serve(socket, answering, wire).await,
                        // A refused handshake closes the connection.
                        Some(tls) => {
                            if let Ok(stream) = tls.accept(socket).await {
                                serve(stream, answering, wire).await;
                            }
                        }
                    }
                });
            }
        })
    }

    /// Stops the broker as a stopped process does: its port refuses
    /// connections and every open connection is closed.
    pub async fn stop(&self) {
        let task = std::mem::replace(&mut *self.task.lock().unwrap(), tokio::spawn(async {}));
        task.abort();
        let _ = task.await;
        let mut connections = std::mem::take(&mut *self.connections.lock().unwrap());
        connections.shutdown().await;
    }

    /// Starts another broker on the stopped one's address (another cluster
    /// formatted there, say), answering by `script`.
    pub async fn restart(&self, script: Script) {
        self.script.write().unwrap().0 = script;
        let listener = host::bind(self.bound).await.unwrap();
        *self.task.lock().unwrap() = self.listen(listener);
    }

    /// Another process behind the same address, as a moved DNS name or a
    /// proxy makes it: new connections are answered by `script`, the open
    /// ones still by the script they began with.
    pub fn replace_for_new_connections(&self, script: Script) {
        self.script.write().unwrap().0 = script;
    }

    /// [`FakeBroker::replace_for_new_connections`] with the gate too: the
    /// new process's script and gate.
    pub fn replace_process(&self, script: Script, gate: Gate) {
        *self.script.write().unwrap() = (script, Some(gate));
    }

    /// The requests of one API this broker received.
    pub fn requests(&self, api: ApiKey) -> Vec<(i16, Bytes)> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(a, _, _)| *a == api)
            .map(|(_, v, b)| (*v, b.clone()))
            .collect()
    }
}

/// The requests a broker received: (API, version, body).
pub type Seen = Arc<Mutex<Vec<(ApiKey, i16, Bytes)>>>;

/// How one connection's requests are answered: by `script`, each answer
/// held as `delay` says, each request first waiting for `gate` when there
/// is one, each logged in `log` when kept.
#[derive(Clone)]
struct Answering {
    script: Script,
    delay: Delay,
    gate: Option<Gate>,
    log: Option<Seen>,
}

/// Answers one connection as `answering` says until it closes; across a
/// network of round trip `wire`, by [`across`].
async fn serve(
    socket: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    answering: Answering,
    wire: Duration,
) {
    if !wire.is_zero() {
        return across(socket, answering, wire).await;
    }
    let mut socket = socket;
    loop {
        let Some((answer, hold)) = read_and_answer(&mut socket, &answering).await else {
            return;
        };
        if let Some(answer) = answer {
            if !hold.is_zero() {
                tokio::time::sleep(hold).await;
            }
            if write_answer(&mut socket, &answer).await.is_err() {
                return;
            }
        }
    }
}

/// Answers one connection across a network of round trip `wire`: a writer
/// sends each answer `wire` after its request was read, in order, while
/// the reader goes on reading.
async fn across(
    socket: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    answering: Answering,
    wire: Duration,
) {
    let (mut reader, mut writer) = tokio::io::split(socket);
    let answering = Answering {
        delay: Arc::new(|_, _| Duration::ZERO),
        ..answering
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Bytes)>();
    let writing = tokio::spawn(async move {
        while let Some((due, answer)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if write_answer(&mut writer, &answer).await.is_err() {
                return;
            }
        }
    });
    loop {
        let Some((answer, _)) = read_and_answer(&mut reader, &answering).await else {
            break;
        };
        let read = tokio::time::Instant::now();
        if let Some(answer) = answer
            && tx.send((read + wire, answer)).is_err()
        {
            break;
        }
    }
    drop(tx);
    let _ = writing.await;
}

/// Reads one request and answers it by the script (logged, but
/// ApiVersions): the answer, and how long the delay holds it. `None` when
/// the connection closed.
async fn read_and_answer(
    socket: &mut (impl tokio::io::AsyncRead + Unpin),
    answering: &Answering,
) -> Option<(Option<Bytes>, Duration)> {
    let size = socket.read_i32().await.ok()?;
    let mut frame = BytesMut::zeroed(size as usize);
    socket.read_exact(&mut frame).await.ok()?;
    let mut body = frame.freeze();
    let header = decode_request_header_from_buffer(&mut body).unwrap();
    let api = ApiKey::try_from(header.request_api_key).unwrap();
    if api == ApiKey::ApiVersions {
        return Some((Some(api_versions(&header)), Duration::ZERO));
    }
    if let Some(log) = &answering.log {
        log.lock()
            .unwrap()
            .push((api, header.request_api_version, body.clone()));
    }
    match &answering.gate {
        Some(gate) if !gate(&header, &body).await => return None,
        Some(_) => {}
        None if api == ApiKey::Fetch => {
            // Nothing new arrives at a scripted broker: a long poll
            // waits out its wait.
            let fetch: FetchRequest = request(header.request_api_version, body.clone());
            let wait = u64::try_from(fetch.max_wait_ms).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
        None => {}
    }
    let hold = (answering.delay)(&header, &body);
    let answer = (answering.script)(&header, body).or_else(|| {
        // A script that says nothing of configs: a broker that has none to
        // give (the client's background readings, such as
        // `__transaction_state`'s `min.insync.replicas`, then keep their
        // defaults instead of waiting out a request timeout).
        (api == ApiKey::DescribeConfigs).then(|| {
            answer(
                &header,
                &kafka_protocol::messages::DescribeConfigsResponse::default(),
            )
        })
    });
    Some((answer, hold))
}

/// Writes one answer, framed.
async fn write_answer(
    socket: &mut (impl tokio::io::AsyncWrite + Unpin),
    answer: &Bytes,
) -> std::io::Result<()> {
    let mut out = BytesMut::new();
    out.put_i32(answer.len() as i32);
    out.put_slice(answer);
    socket.write_all(&out).await?;
    socket.flush().await
}

/// Encodes `response` as the answer to the request of `header`.
pub fn answer<R: Encodable + HeaderVersion>(header: &RequestHeader, response: &R) -> Bytes {
    let version = header.request_api_version;
    let mut buf = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(header.correlation_id)
        .encode(&mut buf, R::header_version(version))
        .unwrap();
    response.encode(&mut buf, version).unwrap();
    buf.freeze()
}

/// Decodes a request body a broker received.
pub fn request<R: Decodable>(version: i16, mut body: Bytes) -> R {
    R::decode(&mut body, version).unwrap()
}

fn api_versions(header: &RequestHeader) -> Bytes {
    let response = ApiVersionsResponse::default().with_api_keys(
        PINNED
            .iter()
            .map(|&(api, min, max)| {
                ApiVersion::default()
                    .with_api_key(api as i16)
                    .with_min_version(min)
                    .with_max_version(max)
            })
            .collect(),
    );
    // ApiVersions answers with response header v0 whatever its version.
    let mut buf = BytesMut::new();
    buf.put_i32(header.correlation_id);
    response
        .encode(&mut buf, header.request_api_version)
        .unwrap();
    buf.freeze()
}

/// Partitions of a topic as (index, leader id, leader epoch).
pub type Partitions<'a> = &'a [(i32, i32, i32)];

/// A Metadata answer: `brokers` as (id, addr), and a topic by name with its
/// partitions (each replicated on its leader alone). As a broker asked for
/// `__transaction_state` too (every refresh asks for it) answers, the
/// answer also says that topic does not exist, unless it is the topic.
pub fn metadata(
    brokers: &[(i32, &str)],
    topic: Option<(&str, Partitions<'_>)>,
) -> MetadataResponse {
    let brokers = brokers
        .iter()
        .map(|(id, addr)| {
            let (host, port) = addr.rsplit_once(':').unwrap();
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(*id))
                .with_host(StrBytes::from_string(host.to_owned()))
                .with_port(port.parse().unwrap())
        })
        .collect();
    let topics = topic
        .map(|(name, partitions)| {
            vec![
                MetadataResponseTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string(name.to_owned()))))
                    .with_partitions(
                        partitions
                            .iter()
                            .map(|(index, leader, epoch)| {
                                MetadataResponsePartition::default()
                                    .with_partition_index(*index)
                                    .with_leader_id(BrokerId(*leader))
                                    .with_leader_epoch(*epoch)
                                    .with_replica_nodes(vec![BrokerId(*leader)])
                            })
                            .collect(),
                    ),
            ]
        })
        .unwrap_or_default();
    let mut topics = topics;
    if topic.is_none_or(|(name, _)| name != "__transaction_state") {
        topics.push(
            MetadataResponseTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str(
                    "__transaction_state",
                ))))
                .with_error_code(3),
        );
    }
    MetadataResponse::default()
        .with_cluster_id(Some(StrBytes::from_static_str("fake-cluster")))
        .with_brokers(brokers)
        .with_topics(topics)
}

/// The answer to `asked` naming `coordinator(key)` as (id, addr) per key.
pub fn naming<'a>(
    asked: FindCoordinatorRequest,
    coordinator: impl Fn(&str) -> (i32, &'a str),
) -> FindCoordinatorResponse {
    let coordinators = asked
        .coordinator_keys
        .into_iter()
        .map(|key| {
            let (id, addr) = coordinator(key.as_str());
            let (host, port) = addr.rsplit_once(':').unwrap();
            Coordinator::default()
                .with_key(key)
                .with_node_id(BrokerId(id))
                .with_host(StrBytes::from_string(host.to_owned()))
                .with_port(port.parse().unwrap())
        })
        .collect();
    FindCoordinatorResponse::default().with_coordinators(coordinators)
}

/// The answer to a DescribeConfigs (`header`, `body`): every resource
/// asked with `configs` as (name, value).
pub fn configs(header: &RequestHeader, body: Bytes, configs: &[(&str, &str)]) -> Bytes {
    use kafka_protocol::messages::describe_configs_response::{
        DescribeConfigsResourceResult, DescribeConfigsResult,
    };
    let asked: kafka_protocol::messages::DescribeConfigsRequest =
        request(header.request_api_version, body);
    let results = asked
        .resources
        .into_iter()
        .map(|r| {
            DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name)
                .with_configs(
                    configs
                        .iter()
                        .map(|(name, value)| {
                            DescribeConfigsResourceResult::default()
                                .with_name(StrBytes::from_string((*name).to_owned()))
                                .with_value(Some(StrBytes::from_string((*value).to_owned())))
                        })
                        .collect(),
                )
        })
        .collect();
    answer(
        header,
        &kafka_protocol::messages::DescribeConfigsResponse::default().with_results(results),
    )
}

/// The answer to a DescribeTransactions (`header`, `body`): every id asked
/// with `pair` in `state`.
pub fn described(header: &RequestHeader, body: Bytes, pair: (i64, i16), state: &str) -> Bytes {
    let asked: DescribeTransactionsRequest = request(header.request_api_version, body);
    let states = asked
        .transactional_ids
        .into_iter()
        .map(|id| {
            TransactionState::default()
                .with_transactional_id(id)
                .with_transaction_state(StrBytes::from_string(state.to_owned()))
                .with_producer_id(ProducerId(pair.0))
                .with_producer_epoch(pair.1)
        })
        .collect();
    answer(
        header,
        &DescribeTransactionsResponse::default().with_transaction_states(states),
    )
}

/// `input` compressed as a Kafka producer would: gzip, snappy in
/// snappy-java's framing (32 KiB blocks), an LZ4 frame, a zstd frame. Read
/// as it is compressed: `input` may stand for GiBs it never holds.
pub fn compress(compression: Compression, mut input: impl Read) -> Vec<u8> {
    let mut out = Vec::new();
    match compression {
        Compression::None => {
            input.read_to_end(&mut out).unwrap();
        }
        Compression::Gzip => {
            let best = flate2::Compression::best();
            flate2::read::GzEncoder::new(input, best)
                .read_to_end(&mut out)
                .unwrap();
        }
        Compression::Zstd => {
            zstd::stream::read::Encoder::new(input, 3)
                .unwrap()
                .read_to_end(&mut out)
                .unwrap();
        }
        Compression::Lz4 => {
            let mut encoder = lz4::EncoderBuilder::new()
                .block_mode(lz4::BlockMode::Independent)
                .build(out)
                .unwrap();
            std::io::copy(&mut input, &mut encoder).unwrap();
            let (written, result) = encoder.finish();
            result.unwrap();
            out = written;
        }
        Compression::Snappy => {
            out.extend_from_slice(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01");
            let mut block = vec![0; 32 * 1024];
            let mut encoder = snap::raw::Encoder::new();
            loop {
                let n = read_full(&mut input, &mut block);
                if n == 0 {
                    break;
                }
                let compressed = encoder.compress_vec(&block[..n]).unwrap();
                out.extend_from_slice(&(compressed.len() as u32).to_be_bytes());
                out.extend_from_slice(&compressed);
            }
        }
    }
    out
}

/// Reads until `buf` is full or the input ends; the bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]).unwrap() {
            0 => break,
            m => n += m,
        }
    }
    n
}

/// A varint as a record encodes its lengths (zigzag).
fn varint(value: i64, out: &mut Vec<u8>) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A record batch (v2, no producer) of one record, `key` and a value of
/// `zeros` zero bytes, compressed with `compression`: what a member writes
/// to make every reader decompress `zeros` bytes. Made as a stream, so a
/// bomb of 768 MiB costs the test its compressed size (KiBs to a few MiB).
pub fn bomb_batch(compression: Compression, key: &[u8], zeros: u64) -> Bytes {
    // The record: size, attributes, timestamp delta, offset delta, key,
    // value (its length, then the zeros), no header.
    let mut head = vec![0, 0, 0];
    varint(key.len() as i64, &mut head);
    head.extend_from_slice(key);
    varint(zeros as i64, &mut head);
    let size = head.len() as u64 + zeros + 1;
    let mut record = Vec::new();
    varint(size as i64, &mut record);
    record.extend_from_slice(&head);
    let stream = Read::chain(std::io::Cursor::new(record), std::io::repeat(0).take(zeros));
    let stream = Read::chain(stream, &[0u8][..]);
    let compressed = compress(compression, stream);
    // The batch header and its CRC, by kafka-protocol's encoder: its record
    // stands in for the one compressed above.
    let placeholder = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: 0,
        key: Some(Bytes::copy_from_slice(key)),
        value: None,
        headers: Default::default(),
    };
    let mut batch = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    let records = [&placeholder];
    let write = Some(|_: &mut BytesMut, out: &mut BytesMut, _: Compression| {
        out.extend_from_slice(&compressed);
        Ok(())
    });
    RecordBatchEncoder::encode_with_custom_compression(&mut batch, records, &options, write)
        .unwrap();
    batch.freeze()
}

/// Writes `batch` as it is to `topic`-`partition` (one produce request to
/// its leader, acks=all, no retry): what any member may write. Its offset.
pub async fn produce_raw(
    client: &KafkaClient,
    topic: &str,
    partition: i32,
    batch: Bytes,
) -> Result<i64, KafkaError> {
    client
        .producer()
        .produce_batch(topic, partition, batch, None)
        .await
}
