//! Roster views: a per-partition fold of the compacted topic, read again
//! (only the new records) when older than the TTL, one read per partition at
//! a time however many requests wait.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, MutexGuard, OnceCell};
use tokio::time::Instant;

use super::metrics::Metrics;
use crate::coordination::{Applied, PartitionState, RoleState, role_partition};
use crate::kafka::{KafkaClient, KafkaError};
use crate::leadership::Clock;

#[derive(Debug, Default)]
struct View {
    state: PartitionState,
    refreshed: Option<Instant>,
    refreshed_at_ms: i64,
}

/// One role as a view shows it.
#[derive(Clone, Debug)]
pub struct RoleView {
    /// The folded state.
    pub state: RoleState,
    /// The role's partition.
    pub partition: i32,
    /// The view's read position: every record below it is included.
    pub offset: i64,
    /// How old the view is.
    pub age: Duration,
    /// When it was read (epoch ms, service clock).
    pub refreshed_at_ms: i64,
}

/// The roster views of every partition.
#[derive(Debug)]
pub struct Rosters {
    client: KafkaClient,
    topic: String,
    ttl: Duration,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    views: OnceCell<Vec<Mutex<View>>>,
}

impl Rosters {
    /// Views of `topic`; nothing is read until first asked.
    pub fn new(
        client: KafkaClient,
        topic: String,
        ttl: Duration,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
    ) -> Rosters {
        Rosters {
            client,
            topic,
            ttl,
            clock,
            metrics,
            views: OnceCell::new(),
        }
    }

    /// The partition count, once the topic was found.
    pub fn partitions(&self) -> Option<i32> {
        self.views.get().map(|v| v.len() as i32)
    }

    async fn views(&self) -> Result<&[Mutex<View>], KafkaError> {
        self.views
            .get_or_try_init(|| async {
                let count = self.client.partition_count(&self.topic).await?;
                self.client.check_compacted(&self.topic).await?;
                tracing::info!(topic = %self.topic, partitions = count, "roster views ready to read");
                Ok::<_, KafkaError>((0..count).map(|_| Mutex::new(View::default())).collect())
            })
            .await
            .map(Vec::as_slice)
    }

    /// The view of `partition`, read again first when older than the TTL.
    async fn fresh(&self, partition: i32) -> Result<MutexGuard<'_, View>, KafkaError> {
        let views = self.views().await?;
        let slot = views
            .get(partition as usize)
            .ok_or_else(|| KafkaError::Topic {
                topic: self.topic.clone(),
                reason: format!("has no partition {partition}"),
            })?;
        let mut view = slot.lock().await;
        if view.refreshed.is_some_and(|at| at.elapsed() < self.ttl) {
            return Ok(view);
        }
        let read = self
            .client
            .read_committed(&self.topic, partition, view.state.next_offset())
            .await;
        let read = match read {
            Ok(read) => {
                self.metrics
                    .roster_refreshes
                    .with_label_values(&["ok"])
                    .inc();
                read
            }
            Err(e) => {
                self.metrics
                    .roster_refreshes
                    .with_label_values(&["error"])
                    .inc();
                return Err(e);
            }
        };
        for record in &read.records {
            match view.state.apply(record) {
                Applied::MalformedKey(error) => {
                    self.count_malformed(error.part().as_str(), partition, record.offset, &error)
                }
                Applied::Role { role, .. } => {
                    let malformed = view
                        .state
                        .role_mut(&role)
                        .map(RoleState::take_malformed)
                        .unwrap_or_default();
                    for m in malformed {
                        self.count_malformed(
                            m.error.part().as_str(),
                            partition,
                            m.offset,
                            &m.error,
                        );
                    }
                }
                Applied::Replayed => {}
            }
        }
        view.state.advance_to(read.next_offset);
        view.refreshed = Some(Instant::now());
        view.refreshed_at_ms = self.clock.now_ms();
        Ok(view)
    }

    fn count_malformed(
        &self,
        part: &str,
        partition: i32,
        offset: i64,
        error: &dyn std::fmt::Display,
    ) {
        self.metrics
            .malformed_records
            .with_label_values(&[part])
            .inc();
        tracing::warn!(topic = %self.topic, partition, offset, %error, "skipped a malformed record");
    }

    fn snapshot(view: &View, state: &RoleState, partition: i32) -> RoleView {
        RoleView {
            state: state.clone(),
            partition,
            offset: view.state.next_offset(),
            age: view.refreshed.map_or(Duration::ZERO, |at| at.elapsed()),
            refreshed_at_ms: view.refreshed_at_ms,
        }
    }

    /// The view of one role; `None` when the topic holds no record of it.
    pub async fn role(&self, role: &str) -> Result<Option<RoleView>, KafkaError> {
        let partitions = self.views().await?.len() as i32;
        let partition =
            role_partition(role, partitions).map_err(|e| KafkaError::Invalid(e.to_string()))?;
        let view = self.fresh(partition).await?;
        Ok(view
            .state
            .role(role)
            .map(|state| Self::snapshot(&view, state, partition)))
    }

    /// Every role of every partition, by name.
    pub async fn all(&self) -> Result<Vec<RoleView>, KafkaError> {
        let partitions = self.views().await?.len() as i32;
        let reads = (0..partitions).map(|p| async move {
            let view = self.fresh(p).await?;
            Ok::<_, KafkaError>(
                view.state
                    .roles()
                    .map(|state| Self::snapshot(&view, state, p))
                    .collect::<Vec<_>>(),
            )
        });
        let mut roles = Vec::new();
        for result in futures::future::join_all(reads).await {
            roles.extend(result?);
        }
        roles.sort_by(|a, b| a.state.role().cmp(b.state.role()));
        Ok(roles)
    }

    /// Reads every partition once (to the LSO); the service is ready after.
    pub async fn load_all(&self) -> Result<(), KafkaError> {
        self.all().await.map(|_| ())
    }
}
