//! `serve` configuration: flags that are also `KRABKA_…` environment
//! variables, checked before a port is bound.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use crate::cli::{KafkaArgs, parse_duration};
use crate::kafka::ClientConfig;

/// Flags of `serve`.
#[derive(Args, Clone, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub kafka: KafkaArgs,

    /// Address to listen on.
    #[arg(long, env = "KRABKA_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: String,

    /// How stale a roster view may get: the longest wait of the watcher's
    /// long-poll fetches, after which a view is read again.
    #[arg(long, env = "KRABKA_ROSTER_TTL", default_value = "1s", value_parser = parse_duration)]
    pub roster_ttl: Duration,

    /// How often the coordinator is asked for the current pair of every role.
    #[arg(long, env = "KRABKA_POLL_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    pub poll_interval: Duration,

    /// The window over which failovers count towards `flapping`.
    #[arg(long, env = "KRABKA_STATUS_WINDOW", default_value = "10m", value_parser = parse_duration)]
    pub status_window: Duration,

    /// More failovers than this within the status window is `flapping`.
    #[arg(long, env = "KRABKA_FLAPPING_THRESHOLD", default_value_t = 3)]
    pub flapping_threshold: usize,

    /// Most roles with per-role metric series; the rest are counted in
    /// krabka_role_series_omitted_total.
    #[arg(long, env = "KRABKA_MAX_ROLE_SERIES", default_value_t = 1000)]
    pub max_role_series: usize,

    /// Changes kept per role for resuming event streams.
    #[arg(long, env = "KRABKA_EVENT_HISTORY", default_value_t = 128)]
    pub event_history: usize,

    /// Limit on answering one HTTP request; an authority check that cannot
    /// ask the coordinator in time answers 503.
    #[arg(long, env = "KRABKA_REQUEST_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Most transactional ids in one DescribeTransactions request.
    #[arg(long, env = "KRABKA_MAX_DESCRIBE_BATCH", default_value_t = 500)]
    pub max_describe_batch: usize,

    /// Batch concurrent checks per coordinator (one DescribeTransactions in
    /// flight); `false` sends one request per check.
    #[arg(long, env = "KRABKA_DESCRIBE_BATCHING", default_value_t = true, action = clap::ArgAction::Set)]
    pub describe_batching: bool,

    /// Capacity of the cache of superseded (role, token) pairs.
    #[arg(
        long,
        env = "KRABKA_SUPERSEDED_CACHE_CAPACITY",
        default_value_t = 100_000
    )]
    pub superseded_cache_capacity: u64,

    /// The members' challenge stagger, used to show challenge instants in
    /// roster views.
    #[arg(long, env = "KRABKA_CHALLENGE_STAGGER", default_value = "5s", value_parser = parse_duration)]
    pub challenge_stagger: Duration,

    /// Most items in one POST /authority/check.
    #[arg(long, env = "KRABKA_MAX_CHECK_ITEMS", default_value_t = 1000)]
    pub max_check_items: usize,

    /// Largest request body accepted, in bytes.
    #[arg(long, env = "KRABKA_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Most open HTTP connections; more are closed on accept.
    #[arg(long, env = "KRABKA_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,

    /// Limit on receiving a request's headers, and on an idle keep-alive
    /// connection waiting for its next request: slow or idle clients are
    /// disconnected.
    #[arg(long, env = "KRABKA_HEADER_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub header_timeout: Duration,

    /// File of accepted API bearer tokens, one per line (e.g. a mounted
    /// Secret); read again when it changes. Unset: the API is open.
    #[arg(long, env = "KRABKA_API_TOKENS_FILE")]
    pub api_tokens_file: Option<std::path::PathBuf>,

    /// Require a token for /healthz too.
    #[arg(long, env = "KRABKA_PROTECT_HEALTHZ", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub protect_healthz: bool,

    /// Require a token for /readyz too.
    #[arg(long, env = "KRABKA_PROTECT_READYZ", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub protect_readyz: bool,

    /// Require a token for /metrics too.
    #[arg(long, env = "KRABKA_PROTECT_METRICS", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub protect_metrics: bool,

    /// On SIGTERM, how long to keep serving with /readyz answering 503
    /// before closing the listener, so load balancers stop sending first.
    #[arg(long, env = "KRABKA_SHUTDOWN_DELAY", default_value = "0s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,

    /// How long a shutdown waits for requests in flight.
    #[arg(long, env = "KRABKA_DRAIN_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub drain_timeout: Duration,

    /// The Retry-After a 503 carries.
    #[arg(long, env = "KRABKA_RETRY_AFTER", default_value = "1s", value_parser = parse_duration)]
    pub retry_after: Duration,
}

/// The checked configuration of the service.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// The Kafka client settings.
    pub client: ClientConfig,
    /// The coordination topic.
    pub topic: String,
    /// Where to listen.
    pub listen: SocketAddr,
    /// Roster view staleness bound (the long-poll wait).
    pub roster_ttl: Duration,
    /// Coordinator poll interval.
    pub poll_interval: Duration,
    /// Status window.
    pub status_window: Duration,
    /// Flapping threshold.
    pub flapping_threshold: usize,
    /// Per-role series limit.
    pub max_role_series: usize,
    /// Events kept per role.
    pub event_history: usize,
    /// HTTP request limit.
    pub request_timeout: Duration,
    /// Most ids per DescribeTransactions.
    pub max_describe_batch: usize,
    /// Batching on or off.
    pub describe_batching: bool,
    /// Superseded cache capacity.
    pub superseded_cache_capacity: u64,
    /// Stagger for challenge instants.
    pub challenge_stagger: Duration,
    /// Most items per batch check.
    pub max_check_items: usize,
    /// Largest body.
    pub max_body_bytes: usize,
    /// API tokens file, when the API is protected.
    pub api_tokens_file: Option<std::path::PathBuf>,
    /// Which operations endpoints need a token too.
    pub protection: super::auth::Protection,
    /// Most open connections.
    pub max_connections: usize,
    /// Header read (and keep-alive idle) limit.
    pub header_timeout: Duration,
    /// Serving on, not ready, before the listener closes.
    pub shutdown_delay: Duration,
    /// Shutdown drain limit.
    pub drain_timeout: Duration,
    /// Retry-After of a 503, whole seconds (at least 1).
    pub retry_after_secs: u64,
}

impl ServeArgs {
    /// Checks every value; the message names the flag.
    pub fn validate(&self) -> Result<ServiceConfig, String> {
        let client = self.kafka.client_config()?;
        let listen: SocketAddr = self.listen.parse().map_err(|e| {
            format!(
                "--listen {:?} is not an address such as 0.0.0.0:8080: {e}",
                self.listen
            )
        })?;
        if self.request_timeout < Duration::from_millis(10) {
            return Err("--request-timeout must be at least 10ms".into());
        }
        if self.max_describe_batch == 0 || self.max_describe_batch > 10_000 {
            return Err("--max-describe-batch must be between 1 and 10000".into());
        }
        if self.max_check_items == 0 {
            return Err("--max-check-items must be at least 1".into());
        }
        if self.max_body_bytes < 1024 {
            return Err("--max-body-bytes must be at least 1024".into());
        }
        if self.roster_ttl < Duration::from_millis(10) || self.roster_ttl > Duration::from_secs(60)
        {
            return Err("--roster-ttl must be between 10ms and 60s".into());
        }
        if self.poll_interval < Duration::from_millis(100) {
            return Err("--poll-interval must be at least 100ms".into());
        }
        if self.status_window.is_zero() {
            return Err("--status-window must be positive".into());
        }
        let protects = self.protect_healthz || self.protect_readyz || self.protect_metrics;
        if protects && self.api_tokens_file.is_none() {
            return Err("--protect-* needs --api-tokens-file".into());
        }
        if self.max_connections == 0 {
            return Err("--max-connections must be at least 1".into());
        }
        if self.header_timeout < Duration::from_millis(100) {
            return Err("--header-timeout must be at least 100ms".into());
        }
        if self.superseded_cache_capacity == 0 {
            return Err("--superseded-cache-capacity must be at least 1".into());
        }
        Ok(ServiceConfig {
            client,
            topic: self.kafka.topic.clone(),
            listen,
            roster_ttl: self.roster_ttl,
            poll_interval: self.poll_interval,
            status_window: self.status_window,
            flapping_threshold: self.flapping_threshold,
            max_role_series: self.max_role_series,
            event_history: self.event_history,
            request_timeout: self.request_timeout,
            max_describe_batch: self.max_describe_batch,
            describe_batching: self.describe_batching,
            superseded_cache_capacity: self.superseded_cache_capacity,
            challenge_stagger: self.challenge_stagger,
            max_check_items: self.max_check_items,
            max_body_bytes: self.max_body_bytes,
            api_tokens_file: self.api_tokens_file.clone(),
            protection: super::auth::Protection {
                healthz: self.protect_healthz,
                readyz: self.protect_readyz,
                metrics: self.protect_metrics,
            },
            max_connections: self.max_connections,
            header_timeout: self.header_timeout,
            shutdown_delay: self.shutdown_delay,
            drain_timeout: self.drain_timeout,
            retry_after_secs: self.retry_after.as_secs().max(1),
        })
    }
}

impl ServiceConfig {
    /// Defaults for `bootstrap`, for tests and embedding.
    pub fn new(bootstrap: &str) -> ServiceConfig {
        ServiceConfig {
            client: ClientConfig::new([bootstrap]),
            topic: crate::kafka::DEFAULT_TOPIC.to_owned(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            roster_ttl: Duration::from_secs(1),
            poll_interval: Duration::from_secs(5),
            status_window: Duration::from_secs(600),
            flapping_threshold: 3,
            max_role_series: 1000,
            event_history: 128,
            request_timeout: Duration::from_secs(5),
            max_describe_batch: 500,
            describe_batching: true,
            superseded_cache_capacity: 100_000,
            challenge_stagger: Duration::from_secs(5),
            max_check_items: 1000,
            max_body_bytes: 1024 * 1024,
            api_tokens_file: None,
            protection: super::auth::Protection::default(),
            max_connections: 10_000,
            header_timeout: Duration::from_secs(10),
            shutdown_delay: Duration::ZERO,
            drain_timeout: Duration::from_secs(10),
            retry_after_secs: 1,
        }
    }
}
