//! The cluster view: brokers, partition leaders with their leader epochs,
//! and the cluster id, with its one refresh in flight.
//!
//! As Kafka's Java `Metadata`:
//! - a refresh is requested on every leader or connection error and on
//!   request timeouts; the next routed request waits for it;
//! - only one Metadata request is in flight; everyone who needs fresh
//!   metadata meanwhile waits for that one (single flight), and refreshes are
//!   at least `retry.backoff.ms` apart;
//! - a partition's leader epoch never goes back: an answer from a broker
//!   that has not yet seen a leadership change keeps the newer entry (the
//!   rule, and the brokers that stay behind, are `state::epochs`).
//!
//! The cluster id is taken in before anything else an answer says: a change
//! (the bootstrap address now leads to another cluster) clears everything
//! learned of the old one, its brokers included.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::future::{BoxFuture, Shared};
use tokio::time::Instant;

use crate::config::Broker;
use crate::error::KafkaError;
use krabka_coordination::sync::{lock, read, write};

/// The topic whose partition leaders are the transaction coordinators.
pub(crate) const TRANSACTION_STATE: &str = "__transaction_state";

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
    /// The node ids of its replicas (empty when the answer named none).
    pub replicas: Vec<i32>,
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

/// One Metadata answer, as the view takes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MetadataAnswer {
    pub(crate) cluster_id: Option<Arc<str>>,
    /// (node id, `host:port`); empty when the broker listed none.
    pub(crate) brokers: Vec<(i32, String)>,
    /// Topics by name, partitions sorted by index.
    pub(crate) topics: Vec<(String, TopicMeta)>,
    /// Every node id named as a replica of a partition of these topics:
    /// a broker fenced in the answering broker's image is not listed, yet
    /// still holds its replicas.
    pub(crate) replicas: BTreeSet<i32>,
}

impl MetadataAnswer {
    /// What this answer shows of the cluster's size: many when it names
    /// two nodes (listed or as replicas), one only when it lists one
    /// broker and answers for `__transaction_state` (its replicas are
    /// where a coordinator could move; a topic not created yet has no
    /// coordinator to move), naming no replica elsewhere.
    fn size(&self) -> Size {
        let mut nodes: BTreeSet<i32> = self.brokers.iter().map(|(id, _)| *id).collect();
        nodes.extend(&self.replicas);
        let coordinators_known = self
            .topics
            .iter()
            .any(|(name, _)| name == TRANSACTION_STATE);
        match nodes.len() {
            0 => Size::Unknown,
            1 if self.brokers.len() == 1 && coordinators_known => Size::One,
            1 => Size::Unknown,
            _ => Size::Many,
        }
    }
}

/// What Metadata answers have shown of the cluster's size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Size {
    /// Nothing yet, or nothing conclusive: as many, a coordinator may move.
    #[default]
    Unknown,
    /// Exactly one broker, which holds every replica of the coordinators'
    /// topic: a coordinator has nowhere to move to.
    One,
    /// Two brokers or more, once seen: for good, until the cluster changes.
    Many,
}

#[cfg(test)]
impl MetadataAnswer {
    /// An answer of `cluster` listing `brokers` and topic "t" with
    /// `partitions` as (index, leader, leader epoch).
    pub(crate) fn of_t(
        cluster: &str,
        brokers: &[(i32, &str)],
        partitions: &[(i32, i32, i32)],
    ) -> MetadataAnswer {
        MetadataAnswer {
            cluster_id: Some(cluster.into()),
            brokers: brokers
                .iter()
                .map(|(id, a)| (*id, (*a).to_owned()))
                .collect(),
            topics: vec![(
                "t".into(),
                TopicMeta {
                    error: 0,
                    partitions: partitions
                        .iter()
                        .map(|&(index, leader, leader_epoch)| PartitionMeta {
                            index,
                            leader,
                            leader_epoch,
                            error: 0,
                            replicas: Vec::new(),
                        })
                        .collect(),
                },
            )],
            replicas: BTreeSet::new(),
        }
    }
}

#[derive(Debug, Default)]
struct View {
    brokers: HashMap<i32, String>,
    topics: HashMap<String, (TopicMeta, Instant)>,
    cluster_id: Option<Arc<str>>,
    /// Times the cluster id changed from a known one to another.
    cluster_changes: u64,
    /// The cluster's size as answers have shown it: coordinators can move
    /// unless it is one broker.
    size: Size,
    /// Topics to ask for at every refresh.
    wanted: BTreeSet<String>,
    /// A refresh was requested since the last one.
    stale: bool,
}

impl View {
    /// Takes in the cluster id a broker reported; the old and new ids when
    /// it differs from the known one (and everything learned of the old
    /// cluster is gone).
    fn adopt_cluster(&mut self, id: Option<&Arc<str>>) -> Option<(Arc<str>, Arc<str>)> {
        let id = id?;
        let changed = match &self.cluster_id {
            Some(old) if old != id => {
                self.cluster_changes += 1;
                self.topics.clear();
                self.brokers.clear();
                self.size = Size::Unknown;
                self.stale = true;
                Some((old.clone(), id.clone()))
            }
            _ => None,
        };
        self.cluster_id = Some(id.clone());
        changed
    }

    /// Takes in a current answer (its cluster id already adopted, its
    /// leaders never older than known: `state::epochs`).
    fn record(&mut self, answer: MetadataAnswer, now: Instant) {
        self.size = match (self.size, answer.size()) {
            (Size::Many, _) | (_, Size::Many) => Size::Many,
            (Size::One, _) | (_, Size::One) => Size::One,
            _ => Size::Unknown,
        };
        if !answer.brokers.is_empty() {
            self.brokers = answer.brokers.into_iter().collect();
        }
        let answered: BTreeSet<&str> = answer.topics.iter().map(|(t, _)| t.as_str()).collect();
        // An answer for some topics (a confirmation) is not the refresh.
        if self.wanted.iter().all(|t| answered.contains(t.as_str())) {
            self.stale = false;
        }
        for (name, topic) in answer.topics {
            self.topics.insert(name, (topic, now));
        }
    }
}

/// A metadata refresh, awaited by everyone who needs it.
pub(crate) type Refresh = Shared<BoxFuture<'static, Result<(), KafkaError>>>;

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
            .field("view", &*read(&self.view))
            .finish_non_exhaustive()
    }
}

impl Metadata {
    /// Takes in the cluster id a broker reported (checked before anything
    /// else its answer says); the old and new ids when the cluster changed.
    pub(super) fn adopt_cluster(&self, id: Option<&Arc<str>>) -> Option<(Arc<str>, Arc<str>)> {
        write(&self.view).adopt_cluster(id)
    }

    /// Takes in a current Metadata answer.
    pub(super) fn record(&self, answer: MetadataAnswer) {
        write(&self.view).record(answer, Instant::now());
    }

    /// Takes in the brokers a new connection's first answer lists: the ones
    /// not known are added (a full answer replaces the list), and two or
    /// more show a cluster that is not one broker.
    pub(super) fn add_brokers(&self, brokers: Vec<(i32, String)>) {
        let mut view = write(&self.view);
        if brokers.len() > 1 {
            view.size = Size::Many;
        }
        for (id, addr) in brokers {
            view.brokers.entry(id).or_insert(addr);
        }
    }

    /// Marks the view stale: the next routed request refreshes it first.
    pub(super) fn request_update(&self) {
        write(&self.view).stale = true;
    }

    /// Forgets the metadata of `topic` and marks the view stale.
    pub(super) fn invalidate_topic(&self, topic: &str) {
        let mut view = write(&self.view);
        view.topics.remove(topic);
        view.stale = true;
    }

    /// Asks for `topics` at every refresh from now on.
    pub(crate) fn want(&self, topics: &[&str]) {
        let mut view = write(&self.view);
        for topic in topics {
            if !view.wanted.contains(*topic) {
                view.wanted.insert((*topic).to_owned());
            }
        }
    }

    /// The topics every refresh asks for.
    pub(crate) fn wanted(&self) -> Vec<String> {
        read(&self.view).wanted.iter().cloned().collect()
    }

    /// The refresh in flight, or the one `start` makes (given the earliest
    /// instant it may send, `spacing` after the last refresh began).
    pub(crate) fn refresh(
        &self,
        spacing: Duration,
        start: impl FnOnce(Option<Instant>) -> Refresh,
    ) -> Refresh {
        let mut slot = lock(&self.refresh);
        if let Some(running) = slot.as_ref()
            && running.peek().is_none()
        {
            return running.clone();
        }
        let earliest = lock(&self.last_refresh).map(|at| at + spacing);
        let refresh = start(earliest);
        *slot = Some(refresh.clone());
        refresh
    }

    /// A refresh sends its request now.
    pub(crate) fn refresh_began(&self) {
        *lock(&self.last_refresh) = Some(Instant::now());
    }

    /// Every known broker address.
    pub(crate) fn broker_addrs(&self) -> Vec<String> {
        read(&self.view).brokers.values().cloned().collect()
    }

    /// The known brokers by id.
    pub(crate) fn brokers(&self) -> HashMap<i32, String> {
        read(&self.view).brokers.clone()
    }

    /// The address of broker `id`, if it is known.
    pub(crate) fn broker_addr(&self, id: i32) -> Option<String> {
        read(&self.view).brokers.get(&id).cloned()
    }

    /// How many times the cluster id changed from a known one to another.
    pub(crate) fn cluster_changes(&self) -> u64 {
        read(&self.view).cluster_changes
    }

    /// The cluster's id, once known.
    pub(crate) fn cluster_id(&self) -> Option<Arc<str>> {
        read(&self.view).cluster_id.clone()
    }

    /// False when `id` is another cluster's than the known one (true when
    /// either is unknown).
    pub(crate) fn is_cluster(&self, id: Option<&str>) -> bool {
        match (id, read(&self.view).cluster_id.as_deref()) {
            (Some(id), Some(known)) => id == known,
            _ => true,
        }
    }

    /// True only once a Metadata answer has shown a cluster of exactly one
    /// broker (it listed one, and `__transaction_state` has no replica
    /// elsewhere) and none has shown more: a coordinator then has nowhere
    /// to move to, and its answers need no other broker's confirmation.
    /// Not known yet (a new client, a cluster just replaced) is many.
    pub(crate) fn single_broker(&self) -> bool {
        read(&self.view).size == Size::One
    }

    /// True until a Metadata answer has said how large the cluster is.
    pub(crate) fn size_unknown(&self) -> bool {
        read(&self.view).size == Size::Unknown
    }

    /// The metadata of `topic` when the view is not stale and it is younger
    /// than `max_age`.
    pub(crate) fn fresh_topic(&self, topic: &str, max_age: Duration) -> Option<TopicMeta> {
        let view = read(&self.view);
        if view.stale {
            return None;
        }
        view.topics
            .get(topic)
            .filter(|(_, at)| at.elapsed() < max_age)
            .map(|(m, _)| m.clone())
    }

    /// The metadata of `topic` as last seen, however old.
    pub(crate) fn topic(&self, topic: &str) -> Option<TopicMeta> {
        read(&self.view).topics.get(topic).map(|(m, _)| m.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGE: Duration = Duration::from_secs(300);

    fn answer(cluster: &str, partitions: &[(i32, i32, i32)]) -> MetadataAnswer {
        MetadataAnswer::of_t(cluster, &[(1, "b:1"), (2, "b:2")], partitions)
    }

    #[tokio::test]
    async fn another_cluster_id_forgets_the_old_clusters_topics_and_brokers() {
        let metadata = Metadata::default();
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        assert_eq!(metadata.adopt_cluster(Some(&a)), None, "the first id");
        metadata.record(answer("a", &[(0, 1, 7)]));
        assert!(!metadata.single_broker());
        assert!(!metadata.size_unknown());
        assert_eq!(metadata.adopt_cluster(Some(&a)), None);
        assert_eq!(metadata.adopt_cluster(None), None, "no id: nothing said");
        assert_eq!(metadata.adopt_cluster(Some(&b)), Some((a, b.clone())));
        assert_eq!(metadata.cluster_id(), Some(b));
        assert_eq!(metadata.topic("t"), None, "the old cluster's topics");
        assert!(metadata.broker_addrs().is_empty(), "and brokers are gone");
        assert!(metadata.size_unknown(), "and what was known of its size");
    }

    #[tokio::test]
    async fn an_answer_for_some_topics_is_not_the_refresh_the_view_waits_for() {
        let metadata = Metadata::default();
        metadata.want(&["t", "u"]);
        metadata.record(answer("a", &[(0, 1, 7)]));
        metadata.request_update();
        metadata.record(answer("a", &[(0, 1, 7)]));
        assert!(metadata.fresh_topic("t", AGE).is_none(), "still stale");
        let mut both = answer("a", &[(0, 1, 7)]);
        both.topics.push(("u".into(), both.topics[0].1.clone()));
        metadata.record(both);
        assert!(metadata.fresh_topic("t", AGE).is_some());
    }

    /// One broker only when an answer shows it holds every replica of the
    /// coordinators' topic; a broker listing itself alone (the others
    /// fenced in its image) but naming other replicas is many.
    #[tokio::test]
    async fn a_cluster_is_one_broker_only_when_an_answer_shows_it() {
        let one = |replicas: &[i32], topic: &str| {
            let mut answer = MetadataAnswer::of_t("a", &[(1, "b:1")], &[(0, 1, 3)]);
            answer.topics[0].0 = topic.to_owned();
            answer.replicas = replicas.iter().copied().collect();
            answer
        };
        let metadata = Metadata::default();
        assert!(
            metadata.size_unknown() && !metadata.single_broker(),
            "a new client"
        );
        metadata.record(MetadataAnswer::of_t("a", &[(1, "b:1")], &[]));
        assert!(
            metadata.size_unknown(),
            "one listed, the coordinators' topic not reported"
        );
        metadata.record(one(&[1], "t"));
        assert!(
            metadata.size_unknown(),
            "another topic says nothing of the coordinators'"
        );
        let mut ghost = one(&[1], TRANSACTION_STATE);
        ghost.replicas.insert(3);
        ghost.topics[0].1.error = 3;
        ghost.topics.push(("t".into(), ghost.topics[0].1.clone()));
        metadata.record(ghost);
        assert!(
            !metadata.single_broker(),
            "a replica of another topic elsewhere"
        );
        metadata.record(one(&[1, 2], TRANSACTION_STATE));
        assert!(
            !metadata.single_broker() && !metadata.size_unknown(),
            "a replica elsewhere"
        );
        metadata.record(one(&[1], TRANSACTION_STATE));
        assert!(!metadata.single_broker(), "many once seen stays many");

        let single = Metadata::default();
        let mut uncreated = one(&[1], TRANSACTION_STATE);
        uncreated.topics[0].1 = TopicMeta {
            error: 3,
            partitions: Vec::new(),
        };
        single.record(uncreated);
        assert!(
            single.single_broker(),
            "no coordinator yet: nowhere to move from"
        );
        single.record(one(&[1], TRANSACTION_STATE));
        assert!(single.single_broker());
        single.record(MetadataAnswer::of_t("a", &[(1, "b:1"), (2, "b:2")], &[]));
        assert!(!single.single_broker(), "grown");
    }

    #[tokio::test]
    async fn a_stale_view_or_an_old_topic_is_not_fresh() {
        let metadata = Metadata::default();
        metadata.record(answer("a", &[(0, 1, 7)]));
        assert!(metadata.fresh_topic("t", AGE).is_some());
        assert!(
            metadata.fresh_topic("t", Duration::ZERO).is_none(),
            "too old"
        );
        metadata.request_update();
        assert!(metadata.fresh_topic("t", AGE).is_none(), "stale");
        assert!(metadata.topic("t").is_some(), "still known");
        metadata.invalidate_topic("t");
        assert!(metadata.topic("t").is_none());
    }
}
