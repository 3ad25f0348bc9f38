//! What the client knows of the cluster between requests, and the one place
//! that decides what a request's outcome teaches it.
//!
//! Seven tables, each the only owner of its state:
//! - [`nodes`]: per broker address, the failures since it last answered,
//!   the reconnect backoff they earned and why the last one failed;
//! - [`contact`]: the live connections per cluster id, heard from within a
//!   second: while none of the known cluster's is, nothing remembered of
//!   it is used;
//! - [`view`]: brokers, partition leaders and the cluster id (metadata);
//! - [`epochs`]: the newest leader epoch of each partition any broker
//!   reported, the brokers whose metadata is behind it (stale: not asked
//!   for metadata, lookups or confirmations until they catch up) and the
//!   leaders another broker confirmed;
//! - [`coordinators`]: the coordinator of each transactional id, the suspect
//!   brokers, and the lookups waiting or in flight;
//! - [`describes`]: the describes waiting for their coordinator's next batch;
//! - [`ranking`]: no table, the one rule of which broker to ask first;
//! - [`confirms`]: the confirmation stream: describe batches waiting for
//!   another broker to confirm their coordinator, and the confirmation in
//!   flight.
//!
//! Operations read the tables and hand every outcome to
//! [`ClusterState::learn`] as a [`Lesson`]. The tables' setters are private
//! to this module, so nothing else suspects a broker, forgets a coordinator
//! or marks metadata stale: the rules below, as Kafka's Java client has them
//! (`NetworkClient`, `ClusterConnectionStates`, `Metadata`, `Admin`'s
//! `CoordinatorStrategy`), are all in [`ClusterState::learn`].
//!
//! | lesson | what it teaches |
//! |---|---|
//! | a broker answered | its failures are forgotten (logged at info if it had any); a broker that had backed off is trusted as a coordinator again |
//! | a connection could not be opened | the reason is remembered until the broker answers, and logged: at warn for the first failure of a streak, then once a minute or when the reason changes, at debug otherwise; when retriable (refused, reset, timed out, DNS) the broker also *breaks*: it waits out a reconnect backoff (its attempts meanwhile fail with the remembered reason), metadata is refreshed before the next routed request, and its coordinators are suspect |
//! | a request on a connection timed out, died or garbled | the broker breaks |
//! | a broker's cluster id (a new connection's first request, or any Metadata answer) | checked before anything else: a new id clears everything learned of the old cluster |
//! | the brokers a new connection's first answer lists | the view learns the ones it did not know, and the cluster's size when it shows many (unless the broker is stale) |
//! | a Metadata answer behind another broker's (a lower leader epoch) | its broker is stale: not asked for metadata, lookups or confirmations, its coordinators suspect, until an answer of it is behind nowhere; the answer is not used; its connections are given up (the next request opens a new one: the address may lead to a replacement now) |
//! | a Metadata answer that is current | the view takes it (never an older leader epoch than known); its broker is current again; the old leader of a partition it moves is stale; it confirms the leaders it names other than its own broker |
//! | a partition request failed with a leader error (or a disconnect) | the topic's metadata is fetched afresh; on a leader epoch the broker disagrees with (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH), its connections are given up too |
//! | a topic's metadata is old (created, no usable leader, wanted fresh) | the same |
//! | a long poll is overdue | metadata is refreshed before the next routed request |
//! | FindCoordinator named a broker | the table learns it |
//! | FindCoordinator failed for an id | the id waits out a backoff |
//! | DescribeTransactions answered NOT_COORDINATOR (16) or COORDINATOR_NOT_AVAILABLE (15) | every id of that broker is looked up again, in one batch per backoff |
//! | a describe batch was answered and confirmed in full | the broker is trusted as a coordinator again |
//! | a describe's process did not say it leads at the epoch another broker names its node leader at | the connections to its address are given up: the next request opens a new one, which reaches a replacement registered with that node id |
//! | an answer was below a pair already seen | the id is forgotten and its broker suspect |
//! | a transactional request failed to reach its coordinator or got 14–16 | the id is forgotten: that id alone is looked up again |

mod confirms;
mod contact;
mod coordinators;
mod describes;
mod epochs;
mod min_isr;
mod nodes;
mod ranking;
mod view;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::time::Instant;

pub(crate) use confirms::{Confirmation, Confirms, Led, Named, Request as ConfirmRequest};
use contact::Contact;
pub(crate) use contact::Counted;
pub(crate) use coordinators::{Answer, Coordinators};
pub use describes::{DescribeAnswer, TransactionDescription};
pub(crate) use describes::{DescribeQueues, IN_FLIGHT, Reply as DescribeReply, Start};
pub(crate) use epochs::Epochs;
use epochs::Judgement;
pub(crate) use min_isr::MinIsrs;
pub(crate) use nodes::NodeStates;
pub(crate) use ranking::{Candidate, Link, confirming, rank};
pub(crate) use view::{Leader, Metadata, MetadataAnswer, Refresh, TRANSACTION_STATE};
pub use view::{PartitionMeta, TopicMeta};

use super::config::{Broker, ClientConfig};
use super::error::{KafkaError, ResponseError};
use super::observe::RequestObserver;
use nodes::Loudness;

/// What one request's outcome says about the cluster.
#[derive(Debug)]
pub(crate) enum Lesson<'a> {
    /// `addr` answered a request (error codes in the answer included).
    Answered { addr: &'a str },
    /// Opening a connection to `addr` failed.
    CannotConnect {
        addr: &'a str,
        error: &'a KafkaError,
    },
    /// A request on an open connection to `addr` failed.
    ConnectionLost {
        addr: &'a str,
        error: &'a KafkaError,
    },
    /// The cluster id `addr` reported when a connection to it opened.
    ClusterId { addr: &'a str, id: Option<Arc<str>> },
    /// The brokers `addr` listed when a connection to it opened (after its
    /// cluster id was taken in).
    Brokers {
        addr: &'a str,
        brokers: Vec<(i32, String)>,
    },
    /// A Metadata answer of the broker at `from`, asked at `sent`;
    /// `alone` on a connection opened for it (a cluster of one broker:
    /// `Confirms::request_alone`), where the leader's own answer proves
    /// which process the address leads to.
    Metadata {
        answer: MetadataAnswer,
        from: &'a str,
        sent: Instant,
        alone: bool,
    },
    /// The metadata of `topic` is known to be old.
    TopicStale { topic: &'a str },
    /// A Fetch, ListOffsets or Produce of a partition of `topic` at the
    /// broker `addr` failed.
    PartitionError {
        topic: &'a str,
        addr: &'a str,
        error: &'a KafkaError,
    },
    /// A long poll got no answer in time: its leader may have moved.
    PollOverdue,
    /// FindCoordinator named `broker` as the coordinator of `key`.
    CoordinatorFound { key: &'a str, broker: &'a Broker },
    /// FindCoordinator could not name the coordinator of `key`.
    LookupFailed { key: &'a str, error: &'a KafkaError },
    /// DescribeTransactions at `addr` answered `error` for an id.
    DescribeFailed {
        addr: &'a str,
        error: &'a KafkaError,
    },
    /// A describe batch of `addr` was answered and confirmed in full.
    Confirmed { addr: &'a str },
    /// The process on a connection to `addr` opened at `opened` answered a
    /// describe but has not said it leads the partition at the epoch
    /// another broker names its node leader at (`describe::incarnation`).
    Unproven { addr: &'a str, opened: Instant },
    /// `addr` answered for `key` a pair below one already seen.
    BelowHighWater { key: &'a str, addr: &'a str },
    /// InitProducerId, AddPartitionsToTxn or EndTxn for `key` failed.
    TxnFailed { key: &'a str, error: &'a KafkaError },
}

/// Everything the clones of one client know of the cluster.
#[derive(Debug)]
pub(crate) struct ClusterState {
    nodes: NodeStates,
    contact: Contact,
    metadata: Metadata,
    epochs: Epochs,
    coordinators: Coordinators,
    describes: DescribeQueues,
    confirms: Confirms,
    min_isrs: MinIsrs,
    observer: Option<Arc<dyn RequestObserver>>,
}

impl ClusterState {
    pub(crate) fn new(config: &ClientConfig) -> ClusterState {
        ClusterState {
            nodes: NodeStates::new(config.reconnect_backoff, config.reconnect_backoff_max),
            contact: Contact::default(),
            metadata: Metadata::default(),
            epochs: Epochs::new(config.retry_backoff, config.retry_backoff_max),
            coordinators: Coordinators::new(
                config.retry_backoff,
                config.retry_backoff_max,
                config.coordinator_cache_bytes,
            ),
            describes: DescribeQueues::default(),
            confirms: Confirms::default(),
            min_isrs: MinIsrs::default(),
            observer: config.observer.clone(),
        }
    }

    /// Per broker: failures and reconnect backoff.
    pub(crate) fn nodes(&self) -> &NodeStates {
        &self.nodes
    }

    /// Counts a connection whose broker said, as its first answer, that it
    /// belongs to `cluster` (already adopted), while `answering` says its
    /// broker is heard from, until the guard is dropped.
    pub(crate) fn connected(
        &self,
        cluster: Arc<str>,
        answering: crate::connection::Answering,
    ) -> Counted {
        self.contact.connected(cluster, answering)
    }

    /// The id of the cluster the client is in contact with now: the known
    /// one, while a connection whose broker gave that id when it opened is
    /// alive and heard from. `None` from the loss of the last one until a new connection
    /// has named its cluster: the cluster behind the addresses may have
    /// been replaced meanwhile (`contact`).
    pub(crate) fn in_contact(&self) -> Option<Arc<str>> {
        self.metadata
            .cluster_id()
            .filter(|id| self.contact.live(id) > 0)
    }

    /// The cluster view.
    pub(crate) fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Leader epochs across brokers: the stale ones, the confirmed leaders.
    pub(crate) fn epochs(&self) -> &Epochs {
        &self.epochs
    }

    /// The instant a read of `topic`-`partition` under leader epoch `epoch`
    /// sent at `fetched` is complete as of (see `epochs`); on a cluster of
    /// one broker, by the leader's answers on connections opened for them.
    pub(crate) fn complete_as_of(
        &self,
        topic: &str,
        partition: i32,
        epoch: i32,
        fetched: Instant,
    ) -> Option<Instant> {
        let min_isr = self.min_isrs.of(topic);
        self.epochs
            .complete_as_of(topic, partition, epoch, fetched, min_isr)
    }

    /// The coordinator table and its lookups.
    pub(crate) fn coordinators(&self) -> &Coordinators {
        &self.coordinators
    }

    /// The describes waiting per coordinator.
    pub(crate) fn describes(&self) -> &DescribeQueues {
        &self.describes
    }

    /// The confirmation stream.
    pub(crate) fn confirms(&self) -> &Confirms {
        &self.confirms
    }

    /// Each topic's `min.insync.replicas`, as last read.
    pub(crate) fn min_isrs(&self) -> &MinIsrs {
        &self.min_isrs
    }

    /// Takes in what one outcome teaches (see the module docs).
    pub(crate) fn learn(&self, lesson: Lesson<'_>) {
        match lesson {
            Lesson::Answered { addr } => {
                if let Some(backoffs) = self.nodes.succeeded(addr) {
                    tracing::info!(addr, "a Kafka broker that failed answers again");
                    if backoffs > 0 {
                        self.coordinators.trust(addr);
                    }
                }
            }
            // Not retriable: TLS trust, credentials, versions. The caller
            // gets the error at once and nothing waits.
            Lesson::CannotConnect { addr, error } => {
                self.failed(addr, error, error.is_retriable());
            }
            Lesson::ConnectionLost { addr, error } => {
                if matches!(
                    error,
                    KafkaError::Timeout { .. }
                        | KafkaError::ConnectionClosed { .. }
                        | KafkaError::Protocol { .. }
                        | KafkaError::FrameTooLarge { .. }
                ) {
                    self.failed(addr, error, true);
                }
            }
            Lesson::ClusterId { addr, id } => self.adopt_cluster(addr, id.as_ref()),
            // A stale broker's list may name brokers long gone.
            Lesson::Brokers { addr, brokers } => {
                if !self.epochs.is_stale(addr) {
                    self.metadata.add_brokers(brokers);
                }
            }
            Lesson::Metadata {
                mut answer,
                from,
                sent,
                alone,
            } => {
                self.adopt_cluster(from, answer.cluster_id.as_ref());
                let mut addrs: HashMap<i32, String> = self.metadata.brokers();
                addrs.extend(answer.brokers.iter().cloned());
                let from_id = addrs.iter().find(|(_, a)| *a == from).map(|(id, _)| *id);
                match self.epochs.judge(from, from_id, sent, &mut answer, &addrs) {
                    Judgement::Stale { first, behind, why } => {
                        if behind {
                            self.nodes.renew(from);
                        }
                        if first {
                            tracing::warn!(broker = from, reason = %why, "a Kafka broker's metadata is behind another broker's (cut off from the controller?); not asking it for metadata, coordinators or confirmations until it catches up");
                            self.stale(from);
                        }
                    }
                    Judgement::Current { caught_up, deposed } => {
                        if caught_up {
                            tracing::info!(
                                broker = from,
                                "a stale Kafka broker's metadata caught up; asking it again"
                            );
                            if let Some(observer) = &self.observer {
                                observer.broker_stale(from, false);
                            }
                        }
                        for (addr, why) in &deposed {
                            tracing::info!(broker = %addr, reason = %why, "a Kafka broker lost a partition's leadership; asking it for metadata before using it again");
                            self.stale(addr);
                        }
                        if alone && let Some(id) = from_id {
                            self.epochs.confirm_alone(id, sent, &answer);
                        }
                        self.metadata.record(answer);
                    }
                }
            }
            Lesson::TopicStale { topic } => self.metadata.invalidate_topic(topic),
            Lesson::PartitionError { topic, addr, error } => {
                if error.needs_metadata_refresh() {
                    self.metadata.invalidate_topic(topic);
                }
                // The process on that connection disagrees with the leader
                // epoch the client knows: one behind (a replaced process
                // cut off, answering from memory) is not asked on it again.
                if error.is(ResponseError::FencedLeaderEpoch)
                    || error.is(ResponseError::UnknownLeaderEpoch)
                {
                    self.nodes.renew(addr);
                }
            }
            Lesson::PollOverdue => self.metadata.request_update(),
            Lesson::CoordinatorFound { key, broker } => {
                self.coordinators.learn(key, broker.clone());
            }
            Lesson::LookupFailed { key, error } => {
                self.coordinators.lookup_failed(key, error.clone());
            }
            Lesson::DescribeFailed { addr, error } => {
                if error.is_coordinator_moved() {
                    self.coordinators.suspect(addr);
                }
            }
            Lesson::Confirmed { addr } => self.coordinators.trust(addr),
            Lesson::Unproven { addr, opened } => {
                // Once per connection: its other batches are unproven too.
                if !self.nodes.given_up(addr, opened) {
                    tracing::info!(
                        broker = addr,
                        "a broker's process answered as the coordinator without saying it leads at the epoch another broker names its node leader at (replaced behind its address?); opening new connections to it"
                    );
                    self.nodes.renew(addr);
                }
            }
            Lesson::BelowHighWater { key, addr } => {
                self.coordinators.forget(key);
                self.coordinators.suspect(addr);
            }
            Lesson::TxnFailed { key, error } => {
                let unreached = matches!(
                    error,
                    KafkaError::Connect { .. }
                        | KafkaError::ConnectionClosed { .. }
                        | KafkaError::Timeout { .. }
                );
                if unreached || error.is_coordinator_error() {
                    self.coordinators.forget(key);
                }
            }
        }
    }

    /// A cluster id a broker reported: another one than known forgets
    /// everything learned of the old cluster.
    fn adopt_cluster(&self, addr: &str, id: Option<&Arc<str>>) {
        let Some((old, new)) = self.metadata.adopt_cluster(id) else {
            return;
        };
        tracing::warn!(old = %old, new = %new, broker = addr, "the cluster id changed: the bootstrap servers lead to another cluster; forgetting everything learned of the old one");
        let stale = self.epochs.stale();
        self.epochs.clear();
        self.coordinators.clear();
        self.min_isrs.clear();
        if let Some(observer) = &self.observer {
            for (addr, _) in &stale {
                observer.broker_stale(addr, false);
            }
            observer.cluster_changed();
        }
    }

    /// `addr`'s metadata is behind: its coordinators are looked up again
    /// (elsewhere), and the observer hears of it.
    fn stale(&self, addr: &str) {
        self.coordinators.suspect(addr);
        if let Some(observer) = &self.observer {
            observer.broker_stale(addr, true);
        }
    }

    /// `addr` could not be reached: the reason is remembered and reported;
    /// a `broken` broker waits out a reconnect backoff, metadata is
    /// refreshed before the next routed request, and the coordinators
    /// cached there are looked up again.
    fn failed(&self, addr: &str, error: &KafkaError, broken: bool) {
        let reason = match error {
            KafkaError::Connect { reason, .. } => reason.clone(),
            other => other.to_string(),
        };
        match self.nodes.failed(addr, &reason, broken) {
            Loudness::Warn => tracing::warn!(
                addr,
                reason = %reason,
                "cannot reach a Kafka broker (repeats within a minute are logged at debug)"
            ),
            Loudness::Quiet => {
                tracing::debug!(addr, reason = %reason, "cannot reach a Kafka broker")
            }
        }
        if broken {
            self.metadata.request_update();
            self.coordinators.suspect(addr);
        }
    }
}

#[cfg(test)]
mod tests;
