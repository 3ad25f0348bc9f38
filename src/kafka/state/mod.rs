//! What the client knows of the cluster between requests, and the one place
//! that decides what a request's outcome teaches it.
//!
//! Five tables, each the only owner of its state:
//! - [`nodes`]: per broker address, the failures since it last answered,
//!   the reconnect backoff they earned and why the last one failed;
//! - [`view`]: brokers, partition leaders and the cluster id (metadata);
//! - [`coordinators`]: the coordinator of each transactional id, the suspect
//!   brokers, and the lookups waiting or in flight;
//! - [`describes`]: the describes waiting for their coordinator's next batch;
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
//! | a Metadata answer | the view takes it; a new cluster id clears everything learned of the old cluster |
//! | a partition request failed with a leader error (or a disconnect) | the topic's metadata is fetched afresh |
//! | a topic's metadata is old (created, no usable leader, wanted fresh) | the same |
//! | a long poll is overdue | metadata is refreshed before the next routed request |
//! | FindCoordinator named a broker | the table learns it |
//! | FindCoordinator failed for an id | the id waits out a backoff |
//! | DescribeTransactions answered NOT_COORDINATOR (16) or COORDINATOR_NOT_AVAILABLE (15) | every id of that broker is looked up again, in one batch per backoff |
//! | a describe batch was answered and confirmed in full | the broker is trusted as a coordinator again |
//! | an answer was below a pair already seen | the id is forgotten and its broker suspect |
//! | a transactional request failed to reach its coordinator or got 14–16 | the id is forgotten: that id alone is looked up again |

mod confirms;
mod coordinators;
mod describes;
mod nodes;
mod view;

use std::sync::Arc;

pub(crate) use confirms::{Confirmation, Confirms, Request as ConfirmRequest};
pub(crate) use coordinators::{Answer, Coordinators};
pub(crate) use describes::{DescribeQueues, Reply as DescribeReply, Start};
pub use describes::{Described, TransactionDescription};
pub(crate) use nodes::NodeStates;
pub(crate) use view::{Leader, Metadata, MetadataAnswer, Refresh};
pub use view::{PartitionMeta, TopicMeta};

use super::config::{Broker, ClientConfig};
use super::error::KafkaError;
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
    /// A Metadata answer.
    Metadata(MetadataAnswer),
    /// The metadata of `topic` is known to be old.
    TopicStale { topic: &'a str },
    /// A Fetch, ListOffsets or Produce of a partition of `topic` failed.
    PartitionError {
        topic: &'a str,
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
    /// `addr` answered for `key` a pair below one already seen.
    BelowHighWater { key: &'a str, addr: &'a str },
    /// InitProducerId, AddPartitionsToTxn or EndTxn for `key` failed.
    TxnFailed { key: &'a str, error: &'a KafkaError },
}

/// Everything the clones of one client know of the cluster.
#[derive(Debug)]
pub(crate) struct ClusterState {
    nodes: NodeStates,
    metadata: Metadata,
    coordinators: Coordinators,
    describes: DescribeQueues,
    confirms: Confirms,
    observer: Option<Arc<dyn RequestObserver>>,
}

impl ClusterState {
    pub(crate) fn new(config: &ClientConfig) -> ClusterState {
        ClusterState {
            nodes: NodeStates::new(config.reconnect_backoff, config.reconnect_backoff_max),
            metadata: Metadata::default(),
            coordinators: Coordinators::new(
                config.retry_backoff,
                config.retry_backoff_max,
                config.coordinator_cache_bytes,
            ),
            describes: DescribeQueues::default(),
            confirms: Confirms::default(),
            observer: config.observer.clone(),
        }
    }

    /// Per broker: failures and reconnect backoff.
    pub(crate) fn nodes(&self) -> &NodeStates {
        &self.nodes
    }

    /// The cluster view.
    pub(crate) fn metadata(&self) -> &Metadata {
        &self.metadata
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
            Lesson::Metadata(answer) => {
                if let Some((old, new)) = self.metadata.record(answer) {
                    tracing::warn!(old = %old, new = %new, "the cluster id changed: the bootstrap servers lead to another cluster; forgetting everything learned of the old one");
                    self.coordinators.clear();
                    if let Some(observer) = &self.observer {
                        observer.cluster_changed();
                    }
                }
            }
            Lesson::TopicStale { topic } => self.metadata.invalidate_topic(topic),
            Lesson::PartitionError { topic, error } => {
                if error.needs_metadata_refresh() {
                    self.metadata.invalidate_topic(topic);
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
                if matches!(error.code(), Some(15 | 16)) {
                    self.coordinators.suspect(addr);
                }
            }
            Lesson::Confirmed { addr } => self.coordinators.trust(addr),
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
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::kafka::observe::Outcome;

    #[derive(Debug, Default)]
    struct Changes(AtomicUsize);

    impl RequestObserver for Changes {
        fn observe(&self, _: &'static str, _: Outcome, _: Duration) {}
        fn cluster_changed(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn broker(addr: &str) -> Broker {
        Broker {
            id: 1,
            addr: addr.to_owned(),
        }
    }

    fn state() -> ClusterState {
        ClusterState::new(&ClientConfig::new(["b:1"]))
    }

    fn answer(cluster: &str) -> MetadataAnswer {
        MetadataAnswer {
            cluster_id: Some(cluster.into()),
            brokers: vec![(1, "b:1".into())],
            topics: vec![(
                "t".into(),
                TopicMeta {
                    error: 0,
                    partitions: Vec::new(),
                },
            )],
        }
    }

    #[tokio::test]
    async fn another_cluster_id_forgets_what_was_learned_of_the_old_one() {
        let changes = Arc::new(Changes::default());
        let mut config = ClientConfig::new(["b:1"]);
        config.observer = Some(changes.clone());
        let state = ClusterState::new(&config);
        state.learn(Lesson::Metadata(answer("a")));
        let b1 = broker("b:1");
        state.learn(Lesson::CoordinatorFound {
            key: "r",
            broker: &b1,
        });
        state.learn(Lesson::Metadata(answer("a")));
        assert_eq!(changes.0.load(Ordering::SeqCst), 0);
        assert!(state.coordinators.weighted_size() > 0);

        state.learn(Lesson::Metadata(answer("b")));
        assert_eq!(changes.0.load(Ordering::SeqCst), 1, "counted once");
        assert_eq!(state.coordinators.weighted_size(), 0, "its coordinators");
    }

    #[tokio::test(start_paused = true)]
    async fn a_broken_broker_backs_off_and_is_suspect_until_it_answers() {
        let state = state();
        let refused = KafkaError::Connect {
            addr: "b:1".into(),
            reason: "Connection refused (os error 111)".into(),
        };
        state.learn(Lesson::CannotConnect {
            addr: "b:1",
            error: &refused,
        });
        let blocked = state.nodes.blocked("b:1").expect("backs off");
        assert_eq!(blocked.reason, "Connection refused (os error 111)");
        assert!(state.coordinators.is_suspect("b:1"));
        state.learn(Lesson::Answered { addr: "b:1" });
        assert!(state.nodes.blocked("b:1").is_none());
        assert!(!state.coordinators.is_suspect("b:1"), "trusted again");

        let timeout = KafkaError::Timeout {
            api: "Metadata",
            addr: "b:2".into(),
            after: Duration::from_secs(5),
        };
        state.learn(Lesson::ConnectionLost {
            addr: "b:2",
            error: &timeout,
        });
        assert!(state.nodes.is_blocked("b:2") && state.coordinators.is_suspect("b:2"));
    }

    #[tokio::test]
    async fn a_refused_set_up_breaks_nothing() {
        let state = state();
        let tls = KafkaError::Tls("handshake with b:1 failed: UnknownIssuer".into());
        state.learn(Lesson::CannotConnect {
            addr: "b:1",
            error: &tls,
        });
        assert!(!state.nodes.is_blocked("b:1"));
        assert!(!state.coordinators.is_suspect("b:1"));
        assert_eq!(
            state.nodes.succeeded("b:1"),
            Some(0),
            "but it is remembered"
        );
    }

    #[tokio::test]
    async fn not_coordinator_suspects_the_broker_and_other_describe_errors_do_not() {
        let state = state();
        for (code, suspect) in [(51, false), (14, false), (16, true)] {
            let error = KafkaError::broker("DescribeTransactions", code, None);
            state.learn(Lesson::DescribeFailed {
                addr: "b:1",
                error: &error,
            });
            assert_eq!(state.coordinators.is_suspect("b:1"), suspect, "{code}");
        }
    }

    #[tokio::test]
    async fn a_transactional_request_forgets_its_coordinator_only_when_it_may_have_moved() {
        let state = state();
        let b1 = broker("b:1");
        let closed = KafkaError::ConnectionClosed {
            addr: "b:1".into(),
            reason: "reset".into(),
        };
        let cases = [
            (KafkaError::broker("EndTxn", 51, None), false),
            (KafkaError::broker("EndTxn", 47, None), false),
            (KafkaError::broker("EndTxn", 14, None), true),
            (KafkaError::broker("EndTxn", 16, None), true),
            (closed, true),
        ];
        for (error, forgets) in cases {
            state.learn(Lesson::CoordinatorFound {
                key: "r",
                broker: &b1,
            });
            state.learn(Lesson::TxnFailed {
                key: "r",
                error: &error,
            });
            assert_eq!(state.coordinators.cached("r").is_none(), forgets, "{error}");
        }
    }

    #[tokio::test]
    async fn a_stale_answer_forgets_the_id_and_suspects_its_broker() {
        let state = state();
        let b1 = broker("b:1");
        state.learn(Lesson::CoordinatorFound {
            key: "r",
            broker: &b1,
        });
        state.learn(Lesson::BelowHighWater {
            key: "r",
            addr: "b:1",
        });
        assert!(state.coordinators.cached("r").is_none());
        assert!(state.coordinators.is_suspect("b:1"));
        state.learn(Lesson::Confirmed { addr: "b:1" });
        assert!(!state.coordinators.is_suspect("b:1"));
    }

    #[tokio::test]
    async fn only_leader_errors_and_disconnects_send_a_topic_back_to_metadata() {
        let state = state();
        for (error, refresh) in [
            (KafkaError::broker("Fetch", 74, None), true),
            (KafkaError::broker("Fetch", 1, None), false),
        ] {
            state.learn(Lesson::Metadata(answer("a")));
            state.learn(Lesson::PartitionError {
                topic: "t",
                error: &error,
            });
            assert_eq!(state.metadata.topic("t").is_none(), refresh, "{error}");
        }
    }
}
