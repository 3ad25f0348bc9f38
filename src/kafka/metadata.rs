//! The cluster view: brokers, partition leaders with their leader epochs,
//! and the cluster id, refreshed with one Metadata request at a time.
//!
//! As Kafka's Java `Metadata`:
//! - a refresh is requested on every leader or connection error and on
//!   request timeouts ([`Metadata::request_update`]); the next routed request
//!   waits for it;
//! - only one Metadata request is in flight; everyone who needs fresh
//!   metadata meanwhile waits for that one (single flight), and refreshes are
//!   at least `retry.backoff.ms` apart;
//! - a partition's leader epoch never goes back: an answer from a broker
//!   that has not yet seen a leadership change keeps the newer entry.
//!
//! A change of cluster id (the bootstrap address now leads to another
//! cluster) clears everything learned of the old one.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, RwLock};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use kafka_protocol::messages::{
    MetadataRequest, MetadataResponse, TopicName, metadata_request::MetadataRequestTopic,
};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;

use super::client::{Broker, KafkaClient, lock};
use super::error::KafkaError;

/// LEADER_NOT_AVAILABLE: retriable, refresh and try again.
const LEADER_NOT_AVAILABLE: i16 = 5;

/// What metadata says of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionMeta {
    /// The partition index.
    pub index: i32,
    /// The leader's node id, or -1.
    pub leader: i32,
    /// The leader epoch, or -1 when the broker did not say.
    pub leader_epoch: i32,
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

/// The leader of one partition as last seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Leader {
    pub(crate) broker: Broker,
    pub(crate) epoch: i32,
}

#[derive(Debug, Default)]
struct View {
    brokers: HashMap<i32, String>,
    topics: HashMap<String, (TopicMeta, Instant)>,
    cluster_id: Option<std::sync::Arc<str>>,
    /// The most brokers ever listed at once: more than one means
    /// coordinators can move.
    most_brokers: usize,
    /// Topics to ask for at every refresh.
    wanted: BTreeSet<String>,
    /// A refresh was requested since the last one.
    stale: bool,
}

type Refresh = Shared<BoxFuture<'static, Result<(), KafkaError>>>;

/// The cluster view and its one refresh in flight.
#[derive(Default)]
pub(crate) struct Metadata {
    view: RwLock<View>,
    refresh: Mutex<Option<Refresh>>,
    last_refresh: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Metadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metadata")
            .field("view", &*self.read())
            .finish_non_exhaustive()
    }
}

impl Metadata {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, View> {
        crate::sync::read(&self.view)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, View> {
        crate::sync::write(&self.view)
    }

    /// Marks the view stale: the next routed request refreshes it first.
    pub(crate) fn request_update(&self) {
        self.write().stale = true;
    }

    /// Every known broker address.
    pub(crate) fn broker_addrs(&self) -> Vec<String> {
        self.read().brokers.values().cloned().collect()
    }

    /// The cluster's id, once known.
    pub(crate) fn cluster_id(&self) -> Option<std::sync::Arc<str>> {
        self.read().cluster_id.clone()
    }

    /// True once more than one broker was ever listed: a coordinator may
    /// then move to another broker.
    pub(crate) fn is_multi_broker(&self) -> bool {
        self.read().most_brokers > 1
    }
}

impl KafkaClient {
    /// Fetches metadata for `topics` (and every topic asked for before) and
    /// records brokers, leaders and the cluster id. Joins a refresh already
    /// in flight.
    pub async fn refresh_metadata(&self, topics: &[&str]) -> Result<(), KafkaError> {
        {
            let mut view = self.core.metadata.write();
            for topic in topics {
                if !view.wanted.contains(*topic) {
                    view.wanted.insert((*topic).to_owned());
                }
            }
        }
        let deadline = Instant::now() + self.config().operation_timeout;
        let refresh = self.start_refresh(deadline);
        refresh.await
    }

    /// The refresh in flight, or a new one (spaced `retry_backoff` after
    /// the last). Runs as its own task, so callers that stop waiting do not
    /// cancel it for the others.
    fn start_refresh(&self, deadline: Instant) -> Refresh {
        let metadata = &self.core.metadata;
        let mut slot = lock(&metadata.refresh);
        if let Some(running) = slot.as_ref()
            && running.peek().is_none()
        {
            return running.clone();
        }
        let earliest = lock(&metadata.last_refresh).map(|at| at + self.config().retry_backoff);
        let client = self.clone();
        let task = tokio::spawn(async move {
            if let Some(at) = earliest {
                tokio::time::sleep_until(at).await;
            }
            *lock(&client.core.metadata.last_refresh) = Some(Instant::now());
            client
                .retrying_until("metadata", deadline, || client.fetch_metadata())
                .await
        });
        let refresh: Refresh = async move {
            task.await.unwrap_or_else(|e| {
                Err(KafkaError::Invalid(format!("metadata refresh failed: {e}")))
            })
        }
        .boxed()
        .shared();
        *slot = Some(refresh.clone());
        refresh
    }

    async fn fetch_metadata(&self) -> Result<(), KafkaError> {
        let wanted: Vec<String> = self.core.metadata.read().wanted.iter().cloned().collect();
        let request = MetadataRequest::default()
            .with_topics(Some(
                wanted
                    .into_iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t))))
                    })
                    .collect(),
            ))
            .with_allow_auto_topic_creation(false);
        let (response, _) = self.send_any(&request, &[]).await?;
        self.record_metadata(response);
        Ok(())
    }

    fn record_metadata(&self, response: MetadataResponse) {
        let now = Instant::now();
        let changed = {
            let mut view = self.core.metadata.write();
            let id: Option<std::sync::Arc<str>> =
                response.cluster_id.as_ref().map(|c| c.as_str().into());
            let changed = match (&view.cluster_id, &id) {
                (Some(old), Some(new)) if old != new => {
                    tracing::warn!(old = %old, new = %new, "the cluster id changed: the bootstrap servers lead to another cluster; forgetting everything learned of the old one");
                    view.topics.clear();
                    view.most_brokers = 0;
                    true
                }
                _ => false,
            };
            if id.is_some() {
                view.cluster_id = id;
            }
            if !response.brokers.is_empty() {
                view.brokers = response
                    .brokers
                    .iter()
                    .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
                    .collect();
                view.most_brokers = view.most_brokers.max(view.brokers.len());
            }
            for topic in response.topics {
                let Some(name) = topic.name else { continue };
                let name = name.0.to_string();
                let previous = view.topics.get(&name).map(|(t, _)| t.clone());
                let mut partitions: Vec<PartitionMeta> = topic
                    .partitions
                    .iter()
                    .map(|p| {
                        let fresh = PartitionMeta {
                            index: p.partition_index,
                            leader: p.leader_id.0,
                            leader_epoch: p.leader_epoch,
                            error: p.error_code,
                        };
                        // An older leader epoch than we know: this broker
                        // lags; keep what we know (Java's Metadata does).
                        match previous
                            .as_ref()
                            .and_then(|t| t.partitions.iter().find(|o| o.index == fresh.index))
                        {
                            Some(old)
                                if fresh.leader_epoch >= 0
                                    && old.leader_epoch > fresh.leader_epoch =>
                            {
                                old.clone()
                            }
                            _ => fresh,
                        }
                    })
                    .collect();
                partitions.sort_by_key(|p| p.index);
                view.topics.insert(
                    name,
                    (
                        TopicMeta {
                            error: topic.error_code,
                            partitions,
                        },
                        now,
                    ),
                );
            }
            view.stale = false;
            changed
        };
        if changed {
            self.core.coordinators.clear();
            if let Some(observer) = self.observer() {
                observer.cluster_changed();
            }
        }
    }

    /// The id of the cluster, once metadata was fetched.
    pub fn cluster_id(&self) -> Option<String> {
        self.core.metadata.cluster_id().map(|id| id.to_string())
    }

    /// The known brokers by id.
    pub fn brokers(&self) -> HashMap<i32, String> {
        self.core.metadata.read().brokers.clone()
    }

    /// Metadata of `topic`: cached when fresh, else fetched.
    pub async fn topic_metadata(&self, topic: &str) -> Result<TopicMeta, KafkaError> {
        if let Some(meta) = self.cached_topic(topic) {
            return Ok(meta);
        }
        self.refresh_metadata(&[topic]).await?;
        self.core
            .metadata
            .read()
            .topics
            .get(topic)
            .map(|(m, _)| m.clone())
            .ok_or_else(|| KafkaError::Topic {
                topic: topic.to_owned(),
                reason: "missing from the metadata response".into(),
            })
    }

    fn cached_topic(&self, topic: &str) -> Option<TopicMeta> {
        let view = self.core.metadata.read();
        if view.stale {
            return None;
        }
        view.topics
            .get(topic)
            .filter(|(_, at)| at.elapsed() < self.config().metadata_max_age)
            .map(|(m, _)| m.clone())
    }

    /// Forgets the metadata of `topic`, so the next use fetches it again.
    pub(crate) fn invalidate_topic(&self, topic: &str) {
        let mut view = self.core.metadata.write();
        view.topics.remove(topic);
        view.stale = true;
    }

    /// The finalized level of a cluster feature (e.g. `transaction.version`:
    /// 2 on a fresh Kafka 4.x cluster, absent on 3.x), as a broker reports
    /// it in ApiVersions; `None` when the feature is not finalized.
    pub async fn finalized_feature(&self, name: &str) -> Result<Option<i16>, KafkaError> {
        self.retrying("api versions", || async move {
            let addr = self
                .brokers_by_load(&[])
                .into_iter()
                .next()
                .ok_or_else(|| KafkaError::Invalid("no broker known".into()))?;
            Ok(self.connection(&addr).await?.feature(name))
        })
        .await
    }

    /// The node id of the leader of one partition, from fresh metadata.
    pub async fn partition_leader(&self, topic: &str, partition: i32) -> Result<i32, KafkaError> {
        self.retrying("partition leader", || async move {
            Ok(self.leader(topic, partition).await?.broker.id)
        })
        .await
    }

    /// The leader of one partition and its epoch, from fresh metadata.
    pub(crate) async fn leader(&self, topic: &str, partition: i32) -> Result<Leader, KafkaError> {
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
        let addr = (p.leader >= 0)
            .then(|| self.core.metadata.read().brokers.get(&p.leader).cloned())
            .flatten();
        match addr {
            Some(addr) => Ok(Leader {
                broker: Broker { id: p.leader, addr },
                epoch: p.leader_epoch,
            }),
            None => {
                self.invalidate_topic(topic);
                Err(KafkaError::broker("Metadata", LEADER_NOT_AVAILABLE, None))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::kafka::client::{ClientConfig, Outcome, RequestObserver};
    use crate::kafka::fake::metadata;

    #[derive(Debug, Default)]
    struct Changes(AtomicUsize);

    impl RequestObserver for Changes {
        fn observe(&self, _: &'static str, _: Outcome, _: Duration) {}
        fn cluster_changed(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn of(cluster: &str) -> MetadataResponse {
        metadata(&[(1, "b:1")], Some(("t", &[(0, 1, 7)])))
            .with_cluster_id(Some(StrBytes::from_string(cluster.to_owned())))
    }

    #[test]
    fn another_cluster_id_forgets_what_was_learned_of_the_old_one() {
        let changes = Arc::new(Changes::default());
        let mut config = ClientConfig::new(["b:1"]);
        config.observer = Some(changes.clone());
        let client = KafkaClient::new(config).unwrap();
        client.record_metadata(of("a"));
        let broker = Broker {
            id: 1,
            addr: "b:1".into(),
        };
        client.core.coordinators.learn("r", broker);
        client.record_metadata(of("a"));
        assert_eq!(client.cluster_id().as_deref(), Some("a"));
        assert_eq!(changes.0.load(Ordering::SeqCst), 0);
        assert!(client.cached_topic("t").is_some());

        client.record_metadata(of("b").with_topics(Vec::new()));
        assert_eq!(client.cluster_id().as_deref(), Some("b"));
        assert_eq!(changes.0.load(Ordering::SeqCst), 1, "counted once");
        assert!(
            client.cached_topic("t").is_none(),
            "the old cluster's topics are gone"
        );
        assert_eq!(
            client.core.coordinators.weighted_size(),
            0,
            "and its coordinators"
        );
    }

    #[test]
    fn an_answer_with_an_older_leader_epoch_keeps_the_newer_leader() {
        let client = KafkaClient::new(ClientConfig::new(["b:1"])).unwrap();
        let brokers = [(1, "b:1"), (2, "b:2")];
        client.record_metadata(metadata(&brokers, Some(("t", &[(0, 2, 8)]))));
        // A broker that has not seen the move yet answers the old leader.
        client.record_metadata(metadata(&brokers, Some(("t", &[(0, 1, 7)]))));
        let meta = client.cached_topic("t").unwrap();
        assert_eq!(
            (meta.partitions[0].leader, meta.partitions[0].leader_epoch),
            (2, 8)
        );
        client.record_metadata(metadata(&brokers, Some(("t", &[(0, 1, 9)]))));
        let meta = client.cached_topic("t").unwrap();
        assert_eq!(
            (meta.partitions[0].leader, meta.partitions[0].leader_epoch),
            (1, 9)
        );
    }
}
