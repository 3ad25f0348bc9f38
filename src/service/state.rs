//! The one shared state of the service.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use moka::future::Cache;

use super::config::ServiceConfig;
use super::describer::Describer;
use super::metrics::Metrics;
use super::watcher::{Watcher, WatcherConfig};
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
    /// The watcher of the topic: roster views, per-role metrics, events.
    pub watcher: Arc<Watcher>,
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// The service clock.
    pub clock: Arc<dyn Clock>,
    /// The readiness probe's last result.
    pub readiness: Readiness,
    /// Flips to true when the listener closes; long-lived streams end then.
    pub closing: tokio::sync::watch::Sender<bool>,
    /// True from SIGTERM on: /readyz answers 503 while the service still
    /// serves for the shutdown delay.
    pub shutting_down: std::sync::atomic::AtomicBool,
    /// Accepted API tokens, when the API is protected.
    pub api_tokens: Option<super::auth::ApiTokens>,
}

impl AppState {
    /// Builds the state: a Kafka client reporting to the metrics, the
    /// describer, the cache and the views. Connects lazily.
    pub fn new(mut config: ServiceConfig) -> Result<Arc<AppState>, KafkaError> {
        let metrics =
            Arc::new(Metrics::new().map_err(|e| KafkaError::Invalid(format!("metrics: {e}")))?);
        config.client.observer = Some(metrics.clone());
        let client = KafkaClient::new(config.client.clone())?;
        Self::with_client(config, client, metrics, Arc::new(SystemClock))
    }

    /// Builds the state around an existing client and clock.
    pub fn with_client(
        config: ServiceConfig,
        client: KafkaClient,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<AppState>, KafkaError> {
        let api_tokens = config
            .api_tokens_file
            .as_deref()
            .map(super::auth::ApiTokens::load)
            .transpose()
            .map_err(KafkaError::Invalid)?;
        let describer = Arc::new(Describer::new(
            client.clone(),
            config.describe_batching,
            config.max_describe_batch,
            metrics.clone(),
        ));
        let superseded = Cache::builder()
            .max_capacity(config.superseded_cache_capacity)
            .build();
        // Its own connections: its long-poll fetches would otherwise hold up
        // the checks' requests (a broker answers a connection in order).
        let fetcher = KafkaClient::new(client.config().clone())?;
        let watcher = Watcher::new(
            client.clone(),
            fetcher,
            WatcherConfig {
                topic: config.topic.clone(),
                long_poll: config.roster_ttl,
                poll_interval: config.poll_interval,
                stagger_ms: i64::try_from(config.challenge_stagger.as_millis()).unwrap_or(i64::MAX),
                status_window: config.status_window,
                flapping_threshold: config.flapping_threshold,
                history: config.event_history,
                max_describe_batch: config.max_describe_batch,
            },
            clock.clone(),
            metrics.clone(),
            config.max_role_series,
        )
        .map_err(|e| KafkaError::Invalid(format!("metrics: {e}")))?;
        Ok(Arc::new(AppState {
            config,
            client,
            describer,
            superseded,
            watcher: Arc::new(watcher),
            metrics,
            clock,
            readiness: Readiness {
                not_ready: Mutex::new(Some("starting".into())),
            },
            closing: tokio::sync::watch::Sender::new(false),
            shutting_down: std::sync::atomic::AtomicBool::new(false),
            api_tokens,
        }))
    }

    /// One readiness probe: the broker answers metadata for the topic, the
    /// topic is there, and the watcher has caught up on every partition.
    pub async fn probe(&self) {
        let reason = match self.client.partition_count(&self.config.topic).await {
            Err(e) => Some(format!("Kafka: {e}")),
            Ok(count) if self.watcher.partitions().is_some_and(|p| p != count) => Some(format!(
                "the topic now has {count} partitions, not {}; restart the service",
                self.watcher.partitions().unwrap_or_default()
            )),
            Ok(_) => self.watcher.not_ready(),
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
