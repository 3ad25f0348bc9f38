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

    /// How long a roster view is served before the partition is read again.
    #[arg(long, env = "KRABKA_ROSTER_TTL", default_value = "1s", value_parser = parse_duration)]
    pub roster_ttl: Duration,

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
    /// Roster view time to live.
    pub roster_ttl: Duration,
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
        if self.superseded_cache_capacity == 0 {
            return Err("--superseded-cache-capacity must be at least 1".into());
        }
        Ok(ServiceConfig {
            client,
            topic: self.kafka.topic.clone(),
            listen,
            roster_ttl: self.roster_ttl,
            request_timeout: self.request_timeout,
            max_describe_batch: self.max_describe_batch,
            describe_batching: self.describe_batching,
            superseded_cache_capacity: self.superseded_cache_capacity,
            challenge_stagger: self.challenge_stagger,
            max_check_items: self.max_check_items,
            max_body_bytes: self.max_body_bytes,
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
            request_timeout: Duration::from_secs(5),
            max_describe_batch: 500,
            describe_batching: true,
            superseded_cache_capacity: 100_000,
            challenge_stagger: Duration::from_secs(5),
            max_check_items: 1000,
            max_body_bytes: 1024 * 1024,
            drain_timeout: Duration::from_secs(10),
            retry_after_secs: 1,
        }
    }
}
