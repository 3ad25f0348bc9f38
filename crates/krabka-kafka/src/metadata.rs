//! Metadata: refreshing the cluster view (`state::view`) with one Metadata
//! request at a time, and the leaders and topics it tells.
//!
//! The next routed request after a refresh was requested (a leader or
//! connection error, a timeout) waits for the refresh; everyone waits for
//! the same one, and refreshes are at least `retry.backoff.ms` apart, as in
//! Kafka's Java `Metadata`.
//!
//! Every refresh also asks for `__transaction_state`, whose leaders are the
//! transaction coordinators: a broker whose coordinators moved without its
//! knowing is then seen behind (`state::epochs`), and is asked nothing but
//! the probes that find out whether it caught up. An answer of a broker
//! found behind is not used: the refresh asks another broker.
//!
//! **Leader confirmations.** [`KafkaClient::confirm_leaders`] asks a broker
//! other than a topic's partition leaders for the topic's metadata: its
//! answer confirms the leaders it names as current when it was asked (or
//! names newer ones, which routing then uses at once). A tailer sends one
//! per long-poll interval, so a read's freshness never rests on its own
//! leader's word alone.

use std::collections::{BTreeSet, HashMap};

use futures::FutureExt;
use kafka_protocol::messages::{
    MetadataRequest, MetadataResponse, TopicName, metadata_request::MetadataRequestTopic,
};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;

use super::client::KafkaClient;
use super::config::Broker;
use super::error::{KafkaError, ResponseError};
use super::retry::{retrying, retrying_until};
use super::state::{Leader, Lesson, MetadataAnswer, PartitionMeta, Refresh, TopicMeta};
use krabka_coordination::time::boot_now;

pub(crate) use super::state::TRANSACTION_STATE;

/// A Metadata request for `topics`, never creating one.
pub(crate) fn build_metadata(topics: Vec<String>) -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(Some(
            topics
                .into_iter()
                .map(|t| {
                    MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_string(t))))
                })
                .collect(),
        ))
        .with_allow_auto_topic_creation(false)
}

/// What a Metadata answer says, partitions sorted by index.
pub(crate) fn parse_metadata(response: MetadataResponse) -> MetadataAnswer {
    let mut replicas = BTreeSet::new();
    let topics = response
        .topics
        .into_iter()
        .filter_map(|topic| {
            let name = topic.name?.0.to_string();
            let mut partitions: Vec<PartitionMeta> = topic
                .partitions
                .iter()
                .map(|p| PartitionMeta {
                    index: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    error: p.error_code,
                    replicas: p.replica_nodes.iter().map(|r| r.0).collect(),
                })
                .collect();
            partitions.sort_by_key(|p| p.index);
            replicas.extend(
                topic
                    .partitions
                    .iter()
                    .flat_map(|p| p.replica_nodes.iter().map(|r| r.0)),
            );
            let meta = TopicMeta {
                error: topic.error_code,
                partitions,
            };
            Some((name, meta))
        })
        .collect();
    MetadataAnswer {
        cluster_id: response.cluster_id.as_ref().map(|c| c.as_str().into()),
        brokers: response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
            .collect(),
        topics,
        replicas,
    }
}

/// The leader of `partition` in `meta`, with `addr` of a broker id. A
/// `Topic` error when there is no such partition; a broker error when
/// metadata names no usable leader (then it is old).
fn find_leader(
    topic: &str,
    meta: &TopicMeta,
    partition: i32,
    addr: impl Fn(i32) -> Option<String>,
) -> Result<Leader, KafkaError> {
    if meta.error != 0 {
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
    match (p.leader >= 0).then(|| addr(p.leader)).flatten() {
        Some(addr) => Ok(Leader {
            broker: Broker { id: p.leader, addr },
            epoch: p.leader_epoch,
        }),
        None => Err(KafkaError::Broker {
            api: "Metadata",
            error: ResponseError::LeaderNotAvailable,
            message: None,
        }),
    }
}

/// What the cluster says of itself (`KafkaClient::metadata`): brokers,
/// leaders, the cluster id, finalized features.
#[derive(Clone, Copy, Debug)]
pub struct ClusterMetadata<'a> {
    pub(crate) client: &'a KafkaClient,
}

impl KafkaClient {
    /// Metadata: brokers, leaders, the cluster id.
    pub fn metadata(&self) -> ClusterMetadata<'_> {
        ClusterMetadata { client: self }
    }
}

impl ClusterMetadata<'_> {
    /// Fetches metadata for `topics` (and every topic asked for before) and
    /// records brokers, leaders and the cluster id. Joins a refresh already
    /// in flight.
    pub async fn refresh_metadata(&self, topics: &[&str]) -> Result<(), KafkaError> {
        self.client.state().metadata().want(topics);
        let deadline = Instant::now() + self.client.config().operation_timeout;
        self.start_refresh(deadline).await
    }

    /// Refreshes metadata when no answer has said yet how large the cluster
    /// is (a new client, a cluster just replaced): a describe's answer is
    /// used unconfirmed only on a cluster known to be one broker, and its
    /// confirmation needs the other brokers' addresses. A failed refresh
    /// leaves the size unknown: the describe then fails for want of a
    /// broker to confirm it, and is retried.
    pub(crate) async fn learn_size(&self) {
        if self.client.state().metadata().size_unknown()
            && let Err(error) = self.refresh_metadata(&[]).await
        {
            tracing::debug!(%error, "the cluster's size is not known yet");
        }
    }

    /// The refresh in flight, or a new one (spaced `retry_backoff` after
    /// the last). Runs as its own task, so callers that stop waiting do not
    /// cancel it for the others.
    fn start_refresh(&self, deadline: Instant) -> Refresh {
        self.client
            .state()
            .metadata()
            .refresh(self.client.config().retry_backoff, |earliest| {
                let client = self.client.clone();
                let task = tokio::spawn(async move {
                    if let Some(at) = earliest {
                        tokio::time::sleep_until(at).await;
                    }
                    client.state().metadata().refresh_began();
                    retrying_until(client.config(), "metadata", deadline, || async {
                        client.metadata().fetch_metadata().await
                    })
                    .await
                });
                async move {
                    task.await.unwrap_or_else(|e| {
                        Err(KafkaError::Internal(format!(
                            "metadata refresh failed: {e}"
                        )))
                    })
                }
                .boxed()
                .shared()
            })
    }

    async fn fetch_metadata(&self) -> Result<(), KafkaError> {
        self.probe_stale();
        let request = build_metadata(self.refresh_topics(None));
        let sent = boot_now();
        let (response, from) = self.client.send_any(&request, &[]).await?;
        self.client.state().learn(Lesson::Metadata {
            answer: parse_metadata(response),
            from: &from,
            sent,
            alone: false,
        });
        if self.client.state().epochs().is_stale(&from) {
            return Err(KafkaError::Stale {
                addr: from,
                reason: "its metadata is behind another broker's".into(),
            });
        }
        Ok(())
    }

    /// The topics a refresh asks for: `only` (else every wanted topic), and
    /// the transaction coordinators' topic.
    fn refresh_topics(&self, only: Option<&str>) -> Vec<String> {
        let mut topics = match only {
            Some(topic) => vec![topic.to_owned()],
            None => self.client.state().metadata().wanted(),
        };
        if !topics.iter().any(|t| t == TRANSACTION_STATE) {
            topics.push(TRANSACTION_STATE.to_owned());
        }
        topics
    }

    /// One Metadata request to the broker at `addr` for `topics`, learned
    /// from.
    pub(crate) async fn metadata_from(
        &self,
        addr: &str,
        topics: Vec<String>,
    ) -> Result<(), KafkaError> {
        let sent = boot_now();
        let response = self.client.send_to(addr, &build_metadata(topics)).await?;
        self.client.state().learn(Lesson::Metadata {
            answer: parse_metadata(response),
            from: addr,
            sent,
            alone: false,
        });
        Ok(())
    }

    /// Sends a probe to every stale broker whose next one is due (each in
    /// its own task), asking for the topics it was found behind on too: an
    /// answer behind nowhere that reports those makes it current again.
    pub(crate) fn probe_stale(&self) {
        for (addr, behind_on) in self.client.state().epochs().due_probes() {
            let client = self.client.clone();
            let mut topics = self.refresh_topics(None);
            for topic in behind_on {
                if !topics.contains(&topic) {
                    topics.push(topic);
                }
            }
            tokio::spawn(async move {
                if let Err(error) = client.metadata().metadata_from(&addr, topics).await {
                    tracing::debug!(broker = %addr, %error, "a probe of a stale broker failed");
                }
            });
        }
    }

    /// Asks for `topic`'s metadata enough of its partitions' replicas that
    /// every partition's leader is confirmed by RF − min.isr replicas
    /// besides it (one broker at least; `state::epochs`), each answer sent
    /// from now on: one broker after another, each the best of those whose
    /// answer would add a confirmation a partition lacks (with RF 3 and
    /// min.isr 2 on three brokers, a broker that leads none of the
    /// partitions, or a second one when the first leads some). Hedged as
    /// every request any broker can answer, so a hung broker delays a
    /// round by a fraction of a second. Stale brokers are probed meanwhile.
    /// On a cluster of one broker, its address on a connection of its own.
    pub(crate) async fn confirm_leaders(&self, topic: &str) {
        self.probe_stale();
        let request = build_metadata(self.refresh_topics(Some(topic)));
        if self.client.state().metadata().single_broker() {
            return self.confirm_alone(&request).await;
        }
        self.client.topics().read_min_isr(topic);
        let since = boot_now();
        let mut asked: Vec<String> = Vec::new();
        loop {
            let state = self.client.state();
            let min_isr = state.min_isrs().of(topic);
            let lacking = state.epochs().unconfirmed_since(topic, since, min_isr);
            // Nothing known of the topic's leaders yet: one answer teaches
            // them (and confirms those it names but its own broker's).
            if lacking.is_empty() && !asked.is_empty() {
                return;
            }
            let brokers = state.metadata().brokers();
            let helps = |id: i32| {
                lacking.is_empty()
                    || lacking.iter().any(|(_, helpers, done)| match helpers {
                        Some(helpers) => helpers.contains(&id),
                        None => !done.contains(&id),
                    })
            };
            let mut exclude: Vec<&str> = brokers
                .iter()
                .filter(|(id, _)| !helps(**id))
                .map(|(_, addr)| addr.as_str())
                .chain(asked.iter().map(String::as_str))
                .collect();
            exclude.sort_unstable();
            exclude.dedup();
            let left = brokers
                .values()
                .filter(|addr| !exclude.contains(&addr.as_str()))
                .count();
            if left == 0 && !asked.is_empty() {
                tracing::debug!(
                    topic,
                    lacking = lacking.len(),
                    "no broker left whose answer would confirm a leader"
                );
                return;
            }
            let sent = boot_now();
            let (response, from) = match self.client.send_any(&request, &exclude).await {
                Ok(answered) => answered,
                Err(error) => {
                    tracing::debug!(topic, %error, "a leader confirmation failed");
                    return;
                }
            };
            self.client.state().learn(Lesson::Metadata {
                answer: parse_metadata(response),
                from: &from,
                sent,
                alone: false,
            });
            asked.push(from);
        }
    }

    /// On a cluster of one broker: `request` asked on a connection opened
    /// for it, whose answer proves which process the broker's address leads
    /// to now (`describe`'s argument, step 3, where a replaced process's
    /// old connections still reach it).
    async fn confirm_alone(&self, request: &MetadataRequest) {
        let Some((_, addr)) = self.client.state().metadata().brokers().into_iter().next() else {
            return;
        };
        let sent = boot_now();
        let answered = match self.client.connect_alone(&addr).await {
            Ok(conn) => {
                self.client
                    .call_on(&conn, request, self.client.config().request_timeout)
                    .await
            }
            Err(error) => Err(error),
        };
        match answered {
            Ok(response) => self.client.state().learn(Lesson::Metadata {
                answer: parse_metadata(response),
                from: &addr,
                sent,
                alone: true,
            }),
            Err(error) => tracing::debug!(%error, "a leader confirmation failed"),
        }
    }

    /// The id of the cluster, once metadata was fetched.
    pub fn cluster_id(&self) -> Option<String> {
        self.client
            .state()
            .metadata()
            .cluster_id()
            .map(|id| id.to_string())
    }

    /// The known brokers by id.
    pub fn brokers(&self) -> HashMap<i32, String> {
        self.client.state().metadata().brokers()
    }

    /// Metadata of `topic`: cached when fresh, else fetched.
    pub async fn topic_metadata(&self, topic: &str) -> Result<TopicMeta, KafkaError> {
        let metadata = self.client.state().metadata();
        if let Some(meta) = metadata.fresh_topic(topic, self.client.config().metadata_max_age) {
            return Ok(meta);
        }
        self.refresh_metadata(&[topic]).await?;
        metadata.topic(topic).ok_or_else(|| KafkaError::Topic {
            topic: topic.to_owned(),
            reason: "missing from the metadata response".into(),
        })
    }

    /// The finalized level of a cluster feature (e.g. `transaction.version`:
    /// 2 on a fresh Kafka 4.x cluster, absent on 3.x), as a broker reports
    /// it in ApiVersions; `None` when the feature is not finalized.
    pub async fn finalized_feature(&self, name: &str) -> Result<Option<i16>, KafkaError> {
        retrying(self.client.config(), "api versions", || async move {
            let addr = self
                .client
                .brokers_by_load(&[])
                .into_iter()
                .next()
                .ok_or_else(|| KafkaError::NoBroker("no broker known".into()))?;
            Ok(self.client.connection(&addr).await?.feature(name))
        })
        .await
    }

    /// The node id of the leader of one partition, from fresh metadata.
    pub async fn partition_leader(&self, topic: &str, partition: i32) -> Result<i32, KafkaError> {
        retrying(self.client.config(), "partition leader", || async move {
            Ok(self.leader(topic, partition).await?.broker.id)
        })
        .await
    }

    /// The leader of one partition and its epoch, from fresh metadata.
    pub(crate) async fn leader(&self, topic: &str, partition: i32) -> Result<Leader, KafkaError> {
        let meta = self.topic_metadata(topic).await?;
        let metadata = self.client.state().metadata();
        let leader = find_leader(topic, &meta, partition, |id| metadata.broker_addr(id));
        if let Err(error) = &leader
            && !matches!(error, KafkaError::Topic { .. })
        {
            // No usable leader: the topic's metadata is old.
            self.client.state().learn(Lesson::TopicStale { topic });
        }
        leader
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::metadata;

    #[test]
    fn a_refresh_asks_for_the_wanted_topics_and_never_creates_one() {
        let request = build_metadata(vec!["a".into(), "b".into()]);
        let asked: Vec<String> = request
            .topics
            .unwrap()
            .into_iter()
            .map(|t| t.name.unwrap().0.to_string())
            .collect();
        assert_eq!(asked, ["a", "b"]);
        assert!(!request.allow_auto_topic_creation);
    }

    #[test]
    fn an_answer_gives_brokers_topics_and_sorted_partitions() {
        let response = metadata(
            &[(1, "h1:9092"), (2, "h2:9093")],
            Some(("t", &[(1, 2, 8), (0, 1, 7)])),
        );
        let answer = parse_metadata(response);
        assert_eq!(answer.cluster_id.as_deref(), Some("fake-cluster"));
        assert_eq!(
            answer.brokers,
            [(1, "h1:9092".to_owned()), (2, "h2:9093".to_owned())]
        );
        let (name, topic) = &answer.topics[0];
        assert_eq!(name, "t");
        let leaders: Vec<(i32, i32, i32)> = topic
            .partitions
            .iter()
            .map(|p| (p.index, p.leader, p.leader_epoch))
            .collect();
        assert_eq!(leaders, [(0, 1, 7), (1, 2, 8)]);
    }

    #[test]
    fn a_leader_needs_a_known_broker() {
        let meta = TopicMeta {
            error: 0,
            partitions: vec![PartitionMeta {
                index: 0,
                leader: 2,
                leader_epoch: 8,
                error: 0,
                replicas: vec![2],
            }],
        };
        let known = |id: i32| (id == 2).then(|| "b:2".to_owned());
        let leader = find_leader("t", &meta, 0, known).unwrap();
        assert_eq!((leader.broker.addr.as_str(), leader.epoch), ("b:2", 8));
        let unknown = find_leader("t", &meta, 0, |_| None).unwrap_err();
        assert!(unknown.is(ResponseError::LeaderNotAvailable));
        let missing = find_leader("t", &meta, 3, known).unwrap_err();
        assert!(matches!(missing, KafkaError::Topic { .. }), "{missing}");
        let failed = TopicMeta {
            error: 3,
            partitions: Vec::new(),
        };
        assert_eq!(
            find_leader("t", &failed, 0, known).unwrap_err().code(),
            Some(3)
        );
    }
}
