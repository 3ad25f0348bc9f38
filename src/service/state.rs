//! The one shared state of the service.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use moka::future::Cache;

use super::config::ServiceConfig;
use super::describer::Describer;
use super::metrics::Metrics;
use super::roster::Rosters;
use crate::coordination::FencingToken;
use crate::kafka::{KafkaClient, KafkaError};
use crate::leadership::{Clock, SystemClock};

/// What was learned when a token was found superseded. A superseded token
/// can never turn current again (the pair only grows), so this may be kept
/// without expiry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SupersededBy {
    /// The pair that superseded it, as described then.
    pub current: FencingToken,
    /// The transaction state described then.
    pub state: String,
    /// When it was described (epoch ms).
    pub checked_at_ms: i64,
}

/// Whether the service can answer, and why not.
#[derive(Debug, Default)]
pub struct Readiness {
    not_ready: Mutex<Option<String>>,
}

impl Readiness {
    /// `None` when ready; otherwise the reason.
    pub fn reason(&self) -> Option<String> {
        self.not_ready
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Records the latest readiness probe.
    pub fn set(&self, reason: Option<String>) {
        let mut current = self
            .not_ready
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *current != reason {
            match &reason {
                None => tracing::info!("ready"),
                Some(why) => tracing::warn!(reason = %why, "not ready"),
            }
            *current = reason;
        }
    }
}

/// Everything a handler needs.
#[derive(Debug)]
pub struct AppState {
    /// The checked configuration.
    pub config: ServiceConfig,
    /// The Kafka client (shared connections).
    pub client: KafkaClient,
    /// Live, batched DescribeTransactions.
    pub describer: Arc<Describer>,
    /// Superseded (role, token) pairs.
    pub superseded: Cache<(String, FencingToken), SupersededBy>,
    /// Roster views of the topic.
    pub rosters: Rosters,
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// The service clock.
    pub clock: Arc<dyn Clock>,
    /// The readiness probe's last result.
    pub readiness: Readiness,
}

impl AppState {
    /// Builds the state: a Kafka client reporting to the metrics, the
    /// describer, the cache and the views. Connects lazily.
    pub fn new(mut config: ServiceConfig) -> Result<Arc<AppState>, KafkaError> {
        let metrics =
            Arc::new(Metrics::new().map_err(|e| KafkaError::Invalid(format!("metrics: {e}")))?);
        config.client.observer = Some(metrics.clone());
        let client = KafkaClient::new(config.client.clone())?;
        Ok(Self::with_client(
            config,
            client,
            metrics,
            Arc::new(SystemClock),
        ))
    }

    /// Builds the state around an existing client and clock.
    pub fn with_client(
        config: ServiceConfig,
        client: KafkaClient,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> Arc<AppState> {
        let describer = Arc::new(Describer::new(
            client.clone(),
            config.describe_batching,
            config.max_describe_batch,
            metrics.clone(),
        ));
        let superseded = Cache::builder()
            .max_capacity(config.superseded_cache_capacity)
            .build();
        let rosters = Rosters::new(
            client.clone(),
            config.topic.clone(),
            config.roster_ttl,
            clock.clone(),
            metrics.clone(),
        );
        Arc::new(AppState {
            config,
            client,
            describer,
            superseded,
            rosters,
            metrics,
            clock,
            readiness: Readiness {
                not_ready: Mutex::new(Some("starting".into())),
            },
        })
    }

    /// One readiness probe: the broker answers metadata for the topic, the
    /// topic is there, and every partition's view was read to its LSO.
    pub async fn probe(&self) {
        let reason = match self.client.partition_count(&self.config.topic).await {
            Err(e) => Some(format!("Kafka: {e}")),
            Ok(count) if self.rosters.partitions().is_some_and(|p| p != count) => Some(format!(
                "the topic now has {count} partitions, not {}; restart the service",
                self.rosters.partitions().unwrap_or_default()
            )),
            Ok(_) => match self.rosters.load_all().await {
                Ok(()) => None,
                Err(e) => Some(format!("roster views: {e}")),
            },
        };
        self.readiness.set(reason);
    }

    /// Probes readiness every `every` until the process ends.
    pub async fn probe_forever(self: Arc<Self>, every: Duration) {
        loop {
            self.probe().await;
            tokio::time::sleep(every).await;
        }
    }
}
