//! The one shared state of the service.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::api_tokens::{ApiTokens, TokensFile};
use super::check::Checker;
use super::config::ServiceConfig;
use super::http::pages::names::Names;
use super::metrics::Metrics;
use super::watch::{TopicLayout, TrackerConfig, WatchConfig, Watcher};
use crate::cluster::{Cluster, ClusterError};
use crate::kafka::{ClientConfig, KafkaClient, KafkaError};
use crate::sync::lock;
use crate::time::{Clock, SystemClock, millis};

/// How often a probe waiting for Kafka's answer during start-up looks for
/// the client's reason why Kafka cannot be reached.
const UNREACHABLE_EVERY: Duration = Duration::from_millis(200);

/// Why the service is not ready, twice: `said`, what anyone may read (no
/// broker address, file path or library error), and `why`, the whole
/// reason, for the logs and for callers with an accepted API token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unready {
    /// The reason without what only operators may read.
    pub said: String,
    /// The whole reason.
    pub why: String,
}

impl Unready {
    /// A reason with a part only operators may read.
    pub fn new(said: impl Into<String>, why: impl Into<String>) -> Unready {
        Unready {
            said: said.into(),
            why: why.into(),
        }
    }

    /// A reason with nothing to keep from anyone.
    pub fn plain(text: impl Into<String>) -> Unready {
        let text = text.into();
        Unready::new(text.clone(), text)
    }

    fn starting(self) -> Unready {
        if self.why.starts_with("starting: ") {
            return self;
        }
        Unready::new(
            format!("starting: {}", self.said),
            format!("starting: {}", self.why),
        )
    }
}

/// Whether the service can answer, and why not.
#[derive(Debug)]
pub struct Readiness {
    not_ready: Mutex<Option<Unready>>,
    /// True once the service was ready: until then every reason reads
    /// "starting: ...", and a refusal of its credentials stops it.
    was_ready: AtomicBool,
}

impl Readiness {
    /// Not ready: starting, for `why`.
    pub fn starting(why: Unready) -> Readiness {
        Readiness {
            not_ready: Mutex::new(Some(why.starting())),
            was_ready: AtomicBool::new(false),
        }
    }

    /// `None` when ready; otherwise the reason.
    pub fn reason(&self) -> Option<Unready> {
        lock(&self.not_ready).clone()
    }

    /// Whether the service was ever ready.
    pub fn was_ready(&self) -> bool {
        self.was_ready.load(Ordering::Relaxed)
    }

    /// Records the latest readiness probe.
    pub fn set(&self, reason: Option<Unready>) {
        let reason = match reason {
            Some(why) if !self.was_ready() => Some(why.starting()),
            other => other,
        };
        let mut current = lock(&self.not_ready);
        if reason.is_none() {
            self.was_ready.store(true, Ordering::Relaxed);
        }
        if *current != reason {
            match &reason {
                None => tracing::info!("ready"),
                Some(why) => tracing::warn!(reason = %why.why, "not ready"),
            }
            *current = reason;
        }
    }
}

/// Why the service could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The Kafka client could not be built (a TLS file, say).
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    /// A setting is unusable; the message names the flag.
    #[error("{0}")]
    Config(String),
    /// The metrics could not be registered.
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// Everything a handler needs.
#[derive(Debug)]
pub struct AppState {
    /// The configuration.
    pub config: ServiceConfig,
    /// The cluster the service asks.
    pub cluster: Arc<dyn Cluster>,
    /// The one check path.
    pub checker: Arc<Checker>,
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
    pub shutting_down: AtomicBool,
    /// Accepted API tokens, when the API is protected.
    pub api_tokens: Option<ApiTokens>,
    /// Permits of batch checks in flight (`--max-concurrent-batches`).
    pub batch_permits: tokio::sync::Semaphore,
    /// The names the pages showed last, and their skeletons
    /// ([`crate::service::http::pages::names_of`]).
    pub(crate) page_names: Mutex<Arc<Names>>,
}

impl AppState {
    /// The state over a real cluster: a Kafka client reporting to the
    /// metrics. Connects lazily.
    pub fn new(config: ServiceConfig) -> Result<Arc<AppState>, SetupError> {
        let client = config.kafka.client_config().map_err(SetupError::Config)?;
        Self::with_client_config(config, client)
    }

    /// The state over a real cluster, with client settings beyond the flags
    /// (tests shorten connect timeouts and the like).
    pub fn with_client_config(
        config: ServiceConfig,
        client: ClientConfig,
    ) -> Result<Arc<AppState>, SetupError> {
        Self::with_client_config_and_clock(config, client, Arc::new(SystemClock))
    }

    /// [`AppState::with_client_config`] on another clock (the simulation
    /// tier's, whose wall clock it steps).
    pub fn with_client_config_and_clock(
        config: ServiceConfig,
        mut client: ClientConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<AppState>, SetupError> {
        let metrics = Arc::new(Metrics::new()?);
        client.observer = Some(metrics.clone());
        client.describe_batching = config.check.describe_batching;
        client.max_describe_batch = config.check.max_describe_batch;
        client.coordinator_cache_bytes = config.check.coordinator_cache_bytes;
        let client = KafkaClient::new(client)?;
        Self::with_cluster(config, Arc::new(client), metrics, clock)
    }

    /// The state over any cluster and clock (tests use the in-memory one).
    pub fn with_cluster(
        config: ServiceConfig,
        cluster: Arc<dyn Cluster>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<AppState>, SetupError> {
        let api_tokens = config
            .auth
            .api_tokens_file
            .as_deref()
            .map(ApiTokens::load)
            .transpose()
            .map_err(|e| SetupError::Config(format!("--api-tokens-file: {e}")))?;
        if api_tokens.is_some() {
            // Only with a tokens file: absent, they would say nothing.
            let registry = metrics.registry();
            registry.register(Box::new(metrics.api_tokens_accepted.clone()))?;
            registry.register(Box::new(metrics.api_tokens_file_unusable.clone()))?;
        }
        let checker = Arc::new(Checker::new(
            cluster.clone(),
            clock.clone(),
            config.check.superseded_cache_bytes,
            config.check.high_water_bytes,
        ));
        let watch = &config.watch;
        let watcher = Watcher::new(
            cluster.clone(),
            checker.clone(),
            WatchConfig {
                topic: config.kafka.topic.clone(),
                long_poll: long_poll(watch.roster_ttl),
                stale_after: stale_after(watch.roster_ttl),
                poll_interval: watch.poll_interval,
                max_describe_batch: config.check.max_describe_batch,
                tracker: TrackerConfig {
                    stagger_ms: millis(watch.challenge_stagger),
                    status_window_ms: millis(watch.status_window),
                    flapping_threshold: watch.flapping_threshold,
                    history: watch.event_history,
                },
                max_role_series: watch.max_role_series,
                create_topic: config.topic_creation.create_topic.then_some(TopicLayout {
                    partitions: config.topic_creation.topic_partitions,
                    replication_factor: config.topic_creation.topic_replication_factor,
                }),
            },
            clock.clone(),
            metrics.clone(),
        )?;
        let batch_permits = tokio::sync::Semaphore::new(config.http.max_concurrent_batches);
        Ok(Arc::new(AppState {
            readiness: Readiness::starting(Unready::new(
                "waiting for Kafka's first answer",
                format!(
                    "waiting for Kafka's first answer (bootstrap {})",
                    config.kafka.bootstrap_servers.join(",")
                ),
            )),
            config,
            cluster,
            checker,
            watcher: Arc::new(watcher),
            metrics,
            clock,
            closing: tokio::sync::watch::Sender::new(false),
            shutting_down: AtomicBool::new(false),
            batch_permits,
            api_tokens,
            page_names: Mutex::default(),
        }))
    }

    /// The names the pages showed last (a page whose views are not all
    /// ready marks names against them).
    pub(crate) fn page_names(&self) -> Arc<Names> {
        lock(&self.page_names).clone()
    }

    /// The members' challenge stagger in milliseconds.
    pub fn stagger_ms(&self) -> i64 {
        millis(self.config.watch.challenge_stagger)
    }

    /// Sets the gauges that are read rather than counted (cache sizes).
    pub fn update_gauges(&self) {
        let (superseded, high_water) = self.checker.caches().sizes();
        self.metrics
            .superseded_cache_entries
            .set(i64::try_from(superseded).unwrap_or(i64::MAX));
        self.metrics
            .high_water_entries
            .set(i64::try_from(high_water).unwrap_or(i64::MAX));
        self.metrics
            .coordinator_cache_bytes
            .set(i64::try_from(self.cluster.remembered_bytes()).unwrap_or(i64::MAX));
        let (superseded, high_water) = self.checker.caches().bytes();
        self.metrics
            .superseded_cache_bytes
            .set(i64::try_from(superseded).unwrap_or(i64::MAX));
        self.metrics
            .high_water_bytes
            .set(i64::try_from(high_water).unwrap_or(i64::MAX));
        self.watcher.view_ages();
        self.tls_gauges();
        self.tokens_gauges();
    }

    /// Looks at the files the service follows while it runs (the TLS
    /// material of broker connections, the API tokens) once a second, so a
    /// rotation or a revocation is taken in, or a bad file said, within a
    /// second, whether or not a connection opens or a request comes.
    pub async fn look_at_files(self: Arc<Self>) {
        if self.cluster.tls().is_none() && self.api_tokens.is_none() {
            return;
        }
        loop {
            tokio::time::sleep(crate::files::LOOK_EVERY).await;
            self.cluster.tls();
            self.tokens_gauges();
        }
    }

    /// The API tokens file's metrics, after a look at it.
    fn tokens_gauges(&self) {
        let Some(tokens) = &self.api_tokens else {
            return;
        };
        let file = tokens.file();
        self.metrics
            .api_tokens_accepted
            .set(i64::try_from(file.accepted()).unwrap_or(i64::MAX));
        self.metrics
            .api_tokens_file_unusable
            .set(i64::from(matches!(file, TokensFile::Unusable(_))));
    }

    /// The TLS material's metrics, after a look at its files.
    fn tls_gauges(&self) {
        let Some(tls) = self.cluster.tls() else {
            return;
        };
        let expiry = &self.metrics.tls_client_certificate_expiry;
        if let Some((file, end_ms)) = &tls.client_certificate {
            let left = (end_ms - self.clock.now_ms()).div_euclid(1000);
            expiry
                .with_label_values(&[&file.display().to_string()])
                .set(left);
        }
        for (outcome, seen) in [("taken", tls.reloads), ("refused", tls.refused)] {
            let counter = self.metrics.tls_reloads.with_label_values(&[outcome]);
            counter.inc_by(seen.saturating_sub(counter.get()));
        }
    }

    /// One readiness probe: the cluster answers metadata for the topic (a
    /// topic that does not exist yet is fine: no role is registered), the
    /// topic has the partitions the watcher reads, and the watcher has
    /// caught up on every partition. Returns the cluster's refusal of the
    /// service's credentials or permissions, if that is why not.
    pub async fn probe(&self) -> Option<String> {
        let topic = &self.config.kafka.topic;
        // Until the service was ready once, an answer may take the whole
        // operation timeout; meanwhile readiness says why Kafka cannot be
        // reached as soon as the client knows.
        let answer = self.cluster.partitions(topic);
        tokio::pin!(answer);
        let answered = loop {
            tokio::select! {
                answered = &mut answer => break answered,
                () = tokio::time::sleep(UNREACHABLE_EVERY), if !self.readiness.was_ready() => {
                    if let Some(why) = self.cluster.unreachable() {
                        self.readiness.set(Some(Unready::new(
                            "cannot reach Kafka",
                            format!("cannot reach Kafka: {why}"),
                        )));
                    }
                }
            }
        };
        let (reason, denied) = match answered {
            Err(ClusterError::Denied(why)) => (
                Some(Unready::new(
                    "Kafka refuses the service's credentials or permissions",
                    format!("Kafka: {why}"),
                )),
                Some(why),
            ),
            Err(ClusterError::NoTopic(_)) => (self.watcher.not_ready(), None),
            Err(e) => (
                Some(Unready::new(
                    "Kafka could not be asked in time",
                    format!("Kafka: {e}"),
                )),
                None,
            ),
            Ok(count) if self.watcher.partitions().is_some_and(|p| p != count) => (
                Some(Unready::plain(format!(
                    "the topic now has {count} partitions, not {}; restart the service",
                    self.watcher.partitions().unwrap_or_default()
                ))),
                None,
            ),
            Ok(_) => (self.watcher.not_ready(), None),
        };
        self.readiness.set(reason);
        denied
    }

    /// Probes readiness every `every`. Returns only when the cluster
    /// refuses the service's credentials or permissions before it was ever
    /// ready (a wrong password, a missing ACL: an operator must act, and
    /// the process should say so and stop); later refusals only make it
    /// not ready.
    pub async fn probe_forever(self: Arc<Self>, every: Duration) -> String {
        loop {
            if let Some(why) = self.probe().await
                && !self.readiness.was_ready()
            {
                return why;
            }
            tokio::time::sleep(every).await;
        }
    }
}

/// The watcher's long-poll wait: half the roster TTL. A read is complete as
/// of its fetch's send instant, and a quiet partition's next read lands one
/// wait after the last, so a view grows up to two waits (and a round trip)
/// old: with waits of a whole TTL, two TTLs. At least 1 ms: Fetch counts
/// its wait in whole milliseconds, and a wait of 0 polls without pause.
pub fn long_poll(roster_ttl: Duration) -> Duration {
    (roster_ttl / 2).max(Duration::from_millis(1))
}

/// When a partition's views are too old to call the service ready: five
/// roster TTLs, at least 2 s. A healthy partition's views are at most about
/// one TTL old (two long-poll waits, see [`long_poll`]).
pub fn stale_after(roster_ttl: Duration) -> Duration {
    (roster_ttl * 5).max(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_long_poll_waits_half_the_roster_ttl_and_never_0_ms() {
        assert_eq!(
            long_poll(Duration::from_secs(1)),
            Duration::from_millis(500)
        );
        assert_eq!(
            long_poll(Duration::from_millis(1)),
            Duration::from_millis(1)
        );
    }
}
