//! [`KafkaClient`] as the service's [`Cluster`].

use std::collections::HashMap;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::client::KafkaClient;
use super::config::Broker;
use super::error::KafkaError;
use super::state::DescribeAnswer;
use super::topic::TopicSpec;
use krabka_coordination::cluster::{Cluster, ClusterError, Described, Floor, Tailed};

impl From<KafkaError> for ClusterError {
    fn from(e: KafkaError) -> ClusterError {
        if e.is_access_error() {
            ClusterError::Denied(e.to_string())
        } else if e.is_retriable() || matches!(e, KafkaError::GaveUp { .. }) {
            ClusterError::Unavailable(e.to_string())
        } else {
            match e {
                // The one reason `partition_count` gives for a topic that
                // Metadata does not know (UNKNOWN_TOPIC_OR_PARTITION, or no
                // partitions); the fresh-install broker test holds it.
                KafkaError::Topic { ref reason, .. } if reason == "does not exist" => {
                    ClusterError::NoTopic(e.to_string())
                }
                KafkaError::Topic { .. } | KafkaError::Config(_) => {
                    ClusterError::Invalid(e.to_string())
                }
                KafkaError::Internal(_) => ClusterError::Internal(e.to_string()),
                other => ClusterError::Unavailable(other.to_string()),
            }
        }
    }
}

/// A describe answer as the service's seam has it.
fn described(answer: DescribeAnswer) -> Result<Described, ClusterError> {
    answer
        .map(|d| Described {
            current: d.as_ref().and_then(|d| d.token()),
            state: d.map(|d| d.state),
        })
        .map_err(ClusterError::from)
}

/// The coordinator table's values: each holds its broker's address.
impl crate::bounded::HeapSize for Broker {
    fn heap_bytes(&self) -> u64 {
        crate::bounded::allocated(self.addr.capacity())
    }
}

impl Cluster for KafkaClient {
    fn describe<'a>(
        &'a self,
        roles: &'a [String],
        floor: Floor<'a>,
        deadline: Instant,
    ) -> BoxFuture<'a, HashMap<String, Result<Described, ClusterError>>> {
        async move {
            self.describer()
                .describe_transactions(roles, floor, deadline)
                .await
                .into_iter()
                .map(|(role, answer)| (role, described(answer)))
                .collect()
        }
        .boxed()
    }

    fn describe_role<'a>(
        &'a self,
        role: &'a str,
        floor: Floor<'a>,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Described, ClusterError>> {
        async move { described(self.describer().describe_id(role, floor, deadline).await) }.boxed()
    }

    fn partitions<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<i32, ClusterError>> {
        async move { Ok(self.topics().partition_count(topic).await?) }.boxed()
    }

    fn create_topic<'a>(
        &'a self,
        topic: &'a str,
        partitions: i32,
        replication_factor: i16,
    ) -> BoxFuture<'a, Result<i32, ClusterError>> {
        async move {
            let spec = TopicSpec {
                partitions,
                replication_factor,
                configs: Vec::new(),
            };
            Ok(self.topics().ensure_topic(topic, &spec).await?)
        }
        .boxed()
    }

    fn check_compacted<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<(), ClusterError>> {
        async move { Ok(self.topics().check_compacted(topic).await?) }.boxed()
    }

    fn tail(&self, topic: &str, from: Vec<i64>, long_poll: Duration) -> mpsc::Receiver<Tailed> {
        self.reader().tail(topic, from, long_poll)
    }

    fn cluster_id(&self) -> Option<std::sync::Arc<str>> {
        self.state().in_contact()
    }

    fn known_cluster_id(&self) -> Option<std::sync::Arc<str>> {
        self.state().metadata().cluster_id()
    }

    fn cluster_changes(&self) -> u64 {
        self.state().metadata().cluster_changes()
    }

    fn unreachable(&self) -> Option<String> {
        let failures: Vec<String> = self
            .config()
            .bootstrap
            .iter()
            .filter_map(|addr| {
                let blocked = self.state().nodes().blocked(addr)?;
                Some(format!("{addr}: {}", blocked.reason))
            })
            .collect();
        (!failures.is_empty()).then(|| failures.join("; "))
    }

    fn tls(&self) -> Option<super::TlsStatus> {
        self.tls_status()
    }

    fn remembered_bytes(&self) -> u64 {
        self.state().coordinators().weighted_size()
    }
}
