//! `KafkaTransport`: the transport seam over a real cluster.
//!
//! It keeps the four adapter rules of seed 000: `acquire_epoch` runs
//! InitProducerId for `transactional.id = <role>` and keeps the producer the
//! epoch binds, which `write_lease` writes through; a fence (47, 90, 49) is
//! reported as [`TransportError::Fenced`] and nothing else is; reads are
//! read_committed up to the last stable offset; every write is pinned to the
//! role's partition.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use super::client::KafkaClient;
use super::error::{KafkaError, ResponseError};
use super::produce::Write;
use super::topic::TopicSpec;
use super::txn::{ProducerSession, TxnError};
use krabka_coordination::sync::lock;
use krabka_coordination::transport::{
    Coordinator, LeaseWriter, Registrar, StateReader, Transport, TransportError, TransportResult,
};
use krabka_coordination::{
    FencingToken, Key, Lease, LogRecord, Registration, decode_key, encode_key, encode_lease,
    encode_registration, role_partition,
};

impl From<KafkaError> for TransportError {
    fn from(e: KafkaError) -> TransportError {
        TransportError::Cluster(e.into())
    }
}

/// The default coordination topic.
pub const DEFAULT_TOPIC: &str = "__coordination_state";

/// How a [`KafkaTransport`] finds (or creates) its topic.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// The coordination topic.
    pub topic: String,
    /// The partition count every member uses; must match the topic.
    /// `None` takes the topic's own count.
    pub partitions: Option<i32>,
    /// Create the topic (compacted) with this spec when it is missing.
    pub create: Option<TopicSpec>,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            topic: DEFAULT_TOPIC.to_owned(),
            partitions: None,
            create: None,
        }
    }
}

/// One record of a guarded write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardedRecord {
    /// The topic to write to.
    pub topic: String,
    /// The partition to write to.
    pub partition: i32,
    /// The record key.
    pub key: Bytes,
    /// The value; `None` writes a tombstone.
    pub value: Option<Bytes>,
    /// The record timestamp (epoch ms).
    pub timestamp_ms: i64,
}

/// A partition folded to its latest record per key, as compaction would
/// leave it; lets repeated reads fetch only what is new.
#[derive(Debug, Default)]
struct PartitionCache {
    next_offset: i64,
    latest: HashMap<Bytes, LogRecord>,
}

/// The transport seam over a Kafka cluster.
#[derive(Debug)]
pub struct KafkaTransport {
    client: KafkaClient,
    topic: String,
    partitions: i32,
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<ProducerSession>>>>,
    caches: Mutex<HashMap<i32, Arc<tokio::sync::Mutex<PartitionCache>>>>,
}

impl KafkaTransport {
    /// Connects to the topic: creates it when missing and asked to, refuses
    /// one that is not compacted, and refuses a configured partition count
    /// that disagrees with the topic's.
    pub async fn connect(client: KafkaClient, config: TransportConfig) -> TransportResult<Self> {
        let topic = config.topic;
        let actual = match &config.create {
            Some(spec) => client.topics().ensure_topic(&topic, spec).await?,
            None => {
                let count = client.topics().partition_count(&topic).await?;
                client.topics().check_compacted(&topic).await?;
                count
            }
        };
        if let Some(wanted) = config.partitions
            && wanted != actual
        {
            return Err(KafkaError::Topic {
                    topic,
                    reason: format!(
                        "has {actual} partitions but {wanted} were configured; every member must use the topic's real count"
                    ),
                }
                .into());
        }
        Ok(KafkaTransport {
            client,
            topic,
            partitions: actual,
            sessions: Mutex::default(),
            caches: Mutex::default(),
        })
    }

    /// The client underneath.
    pub fn client(&self) -> &KafkaClient {
        &self.client
    }

    /// The coordination topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    fn partition(&self, role: &str) -> TransportResult<i32> {
        Ok(role_partition(role, self.partitions)?)
    }

    fn session(
        &self,
        role: &str,
        token: FencingToken,
    ) -> TransportResult<Arc<tokio::sync::Mutex<ProducerSession>>> {
        lock(&self.sessions)
            .get(role)
            .cloned()
            .ok_or_else(|| TransportError::NotMinted {
                role: role.to_owned(),
                token,
            })
    }

    async fn guarded_write(
        &self,
        role: &str,
        token: FencingToken,
        value: Option<Bytes>,
        timestamp_ms: i64,
    ) -> TransportResult<i64> {
        let record = GuardedRecord {
            topic: self.topic.clone(),
            partition: self.partition(role)?,
            key: Bytes::from(encode_key(&Key::lease(role))?),
            value,
            timestamp_ms,
        };
        let offsets = self
            .write_guarded(role, token, std::slice::from_ref(&record))
            .await?;
        offsets
            .first()
            .copied()
            .ok_or_else(|| TransportError::Unavailable("no offset".into()))
    }

    /// Writes `records` (to any topics) in one transaction under the token
    /// this transport minted for `role`: the holder's guarded writes. The
    /// broker rejects them with [`TransportError::Fenced`] once a later
    /// member holds the role, so a deposed holder cannot write.
    pub async fn write_guarded(
        &self,
        role: &str,
        token: FencingToken,
        records: &[GuardedRecord],
    ) -> TransportResult<Vec<i64>> {
        let session = self.session(role, token)?;
        let mut session = session.lock().await;
        if session.token() != token {
            return Err(TransportError::NotMinted {
                role: role.to_owned(),
                token,
            });
        }
        let writes: Vec<Write<'_>> = records
            .iter()
            .map(|r| Write {
                topic: &r.topic,
                partition: r.partition,
                key: r.key.clone(),
                value: r.value.clone(),
                timestamp_ms: r.timestamp_ms,
            })
            .collect();
        self.client
            .producer()
            .write_transactional(&mut session, &writes)
            .await
            .map_err(|e| match e {
                TxnError::Fenced(e) => TransportError::Fenced {
                    role: role.to_owned(),
                    token,
                    reason: e.to_string(),
                },
                TxnError::Uncertain(e) => TransportError::Uncertain {
                    role: role.to_owned(),
                    reason: TxnError::Uncertain(e).to_string(),
                },
                TxnError::Kafka(e) => e.into(),
            })
    }

    /// Reads what is new in `partition` and returns its compacted view.
    async fn read_partition(&self, partition: i32) -> TransportResult<Vec<LogRecord>> {
        let cache = lock(&self.caches).entry(partition).or_default().clone();
        let mut cache = cache.lock().await;
        let read = self
            .client
            .reader()
            .read_committed(&self.topic, partition, cache.next_offset)
            .await?;
        for record in read.records {
            cache.latest.insert(record.key.clone(), record);
        }
        cache.next_offset = read.next_offset;
        let ordered: BTreeMap<i64, LogRecord> = cache
            .latest
            .values()
            .map(|r| (r.offset, r.clone()))
            .collect();
        Ok(ordered.into_values().collect())
    }
}

impl Coordinator for KafkaTransport {
    async fn acquire_epoch(
        &self,
        role: &str,
        lease_duration: Duration,
    ) -> TransportResult<FencingToken> {
        let session = self
            .client
            .producer()
            .init_producer_id(role, lease_duration)
            .await?;
        let token = session.token();
        lock(&self.sessions).insert(role.to_owned(), Arc::new(tokio::sync::Mutex::new(session)));
        Ok(token)
    }

    async fn describe(&self, role: &str) -> TransportResult<Option<FencingToken>> {
        Ok(self
            .client
            .describer()
            .describe_transaction(role)
            .await?
            .and_then(|d| d.token()))
    }

    async fn max_transaction_timeout(&self) -> TransportResult<Option<Duration>> {
        match self
            .client
            .topics()
            .broker_config("transaction.max.timeout.ms")
            .await
        {
            Ok(Some(ms)) => Ok(ms.parse::<u64>().ok().map(Duration::from_millis)),
            Ok(None) => Ok(None),
            // Without DescribeConfigs on the cluster, InitProducerId still
            // refuses a timeout that is too long (InvalidTransactionTimeout).
            Err(e) if e.is(ResponseError::ClusterAuthorizationFailed) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

impl StateReader for KafkaTransport {
    fn partitions(&self) -> i32 {
        self.partitions
    }

    async fn read_role_records(&self, role: &str) -> TransportResult<Vec<LogRecord>> {
        let partition = self.partition(role)?;
        let records = self.read_partition(partition).await?;
        Ok(records
            .into_iter()
            .filter(|r| decode_key(&r.key).map_or(true, |k| k.role == role))
            .collect())
    }
}

impl Registrar for KafkaTransport {
    async fn register(
        &self,
        role: &str,
        member: &str,
        registered_at_ms: i64,
    ) -> TransportResult<i64> {
        let partition = self.partition(role)?;
        let key = encode_key(&Key::registration(role, member))?;
        let value = encode_registration(&Registration {
            member: member.to_owned(),
            registered_at: registered_at_ms,
        })?;
        Ok(self
            .client
            .producer()
            .append(
                &self.topic,
                partition,
                key.into(),
                Some(value.into()),
                registered_at_ms,
            )
            .await?)
    }

    async fn deregister(&self, role: &str, member: &str) -> TransportResult<i64> {
        let partition = self.partition(role)?;
        let key = encode_key(&Key::registration(role, member))?;
        Ok(self
            .client
            .producer()
            .append(&self.topic, partition, key.into(), None, -1)
            .await?)
    }
}

impl LeaseWriter for KafkaTransport {
    async fn write_lease(
        &self,
        role: &str,
        token: FencingToken,
        lease: &Lease,
    ) -> TransportResult<i64> {
        let value = Bytes::from(encode_lease(lease)?);
        self.guarded_write(role, token, Some(value), lease.granted_at)
            .await
    }

    async fn clear_lease(&self, role: &str, token: FencingToken) -> TransportResult<i64> {
        self.guarded_write(role, token, None, -1).await
    }
}

impl Transport for KafkaTransport {
    async fn close(&self) {
        lock(&self.sessions).clear();
        self.client.close().await;
    }
}
