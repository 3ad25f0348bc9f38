//! The service's settings, one struct per concern, each setting defined
//! once: its flag, its `KRABKA_…` environment variable, its default and its
//! bounds sit on the field, and `serve` is built from these structs. A value
//! out of bounds stops the process at start-up with exit status 2 and a
//! message naming the flag, before it can overflow an instant, exhaust a
//! semaphore or wait forever. [`Default`] gives the flags' defaults.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::RangedU64ValueParser;
use clap::{Args, FromArgMatches};

use crate::kafka_settings::KafkaSettings;
use crate::time::duration_between;

const TEN_MS: Duration = Duration::from_millis(10);
const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// The flags' defaults of a settings struct, ignoring the environment.
fn defaults<T: Args + FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("defaults").no_binary_name(true))
        .mut_args(|arg| arg.env(None::<&str>));
    let matches = command.get_matches_from(Vec::<String>::new());
    match T::from_arg_matches(&matches) {
        Ok(value) => value,
        // Every field has a default; a test holds this.
        Err(e) => panic!("settings without defaults: {e}"),
    }
}

/// The HTTP server.
#[derive(Args, Clone, Debug)]
pub struct HttpSettings {
    /// Address to listen on.
    #[arg(long, env = "KRABKA_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,

    /// Limit on answering one HTTP request; an authority check that cannot
    /// ask the coordinator in time answers 503.
    #[arg(long, env = "KRABKA_REQUEST_TIMEOUT", default_value = "5s", value_parser = duration_between(TEN_MS, 10 * MINUTE))]
    pub request_timeout: Duration,

    /// Most items in one POST /authority/check.
    #[arg(long, env = "KRABKA_MAX_CHECK_ITEMS", default_value = "1000", value_parser = RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    pub max_check_items: usize,

    /// Most POST /authority/check answered at once; more wait, their bodies
    /// unread, within the request timeout. A full batch in flight costs
    /// about 16 MiB (docs/operations.md, Memory), so this bounds the memory
    /// of batches that the connection limit alone would not.
    #[arg(long, env = "KRABKA_MAX_CONCURRENT_BATCHES", default_value = "4", value_parser = RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub max_concurrent_batches: usize,

    /// Largest request body accepted, in bytes.
    #[arg(long, env = "KRABKA_MAX_BODY_BYTES", default_value = "1048576", value_parser = RangedU64ValueParser::<usize>::new().range(1024..=64 * 1024 * 1024))]
    pub max_body_bytes: usize,

    /// Most open HTTP connections; more are closed on accept.
    #[arg(long, env = "KRABKA_MAX_CONNECTIONS", default_value = "10000", value_parser = RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub max_connections: usize,

    /// Limit on receiving a request's headers, and on an idle keep-alive
    /// connection waiting for its next request: slow or idle clients are
    /// disconnected.
    #[arg(long, env = "KRABKA_HEADER_TIMEOUT", default_value = "10s", value_parser = duration_between(100 * Duration::from_millis(1), HOUR))]
    pub header_timeout: Duration,

    /// On SIGTERM (or SIGHUP), how long to keep serving with /readyz
    /// answering 503 before closing the listener, so load balancers stop
    /// sending first.
    #[arg(long, env = "KRABKA_SHUTDOWN_DELAY", default_value = "0s", value_parser = duration_between(Duration::ZERO, 10 * MINUTE))]
    pub shutdown_delay: Duration,

    /// How long a shutdown waits for requests in flight.
    #[arg(long, env = "KRABKA_DRAIN_TIMEOUT", default_value = "10s", value_parser = duration_between(Duration::ZERO, HOUR))]
    pub drain_timeout: Duration,

    /// The Retry-After a 503 carries (whole seconds).
    #[arg(long, env = "KRABKA_RETRY_AFTER", default_value = "1s", value_parser = duration_between(SECOND, HOUR))]
    pub retry_after: Duration,
}

impl Default for HttpSettings {
    fn default() -> Self {
        defaults()
    }
}

impl HttpSettings {
    /// Retry-After in whole seconds.
    pub fn retry_after_secs(&self) -> u64 {
        self.retry_after.as_secs().max(1)
    }
}

/// The authority checks.
#[derive(Args, Clone, Debug)]
pub struct CheckSettings {
    /// Batch concurrent checks per coordinator (one DescribeTransactions in
    /// flight); `false` sends one request per check.
    #[arg(long, env = "KRABKA_DESCRIBE_BATCHING", default_value_t = true, action = clap::ArgAction::Set)]
    pub describe_batching: bool,

    /// Most transactional ids in one DescribeTransactions request.
    #[arg(long, env = "KRABKA_MAX_DESCRIBE_BATCH", default_value = "500", value_parser = RangedU64ValueParser::<usize>::new().range(1..=10_000))]
    pub max_describe_batch: usize,

    /// Most bytes the cache of superseded (role, token) pairs takes,
    /// everything counted: the role name and state at their allocation
    /// sizes plus the cache's own ~450 bytes per entry.
    #[arg(long, env = "KRABKA_SUPERSEDED_CACHE_BYTES", default_value = "16777216", value_parser = clap::value_parser!(u64).range(1024..=1 << 36))]
    pub superseded_cache_bytes: u64,

    /// Replaced by --superseded-cache-bytes (a count did not bound memory:
    /// role names are up to 32 KiB). Refused with a message saying so.
    #[arg(long, env = "KRABKA_SUPERSEDED_CACHE_CAPACITY", hide = true)]
    pub superseded_cache_capacity: Option<u64>,

    /// Most bytes the high-water marks (the highest pair seen of each role)
    /// take, everything counted: names at their allocation sizes and the
    /// hash table.
    #[arg(long, env = "KRABKA_HIGH_WATER_BYTES", default_value = "16777216", value_parser = clap::value_parser!(u64).range(1024..=1 << 36))]
    pub high_water_bytes: u64,

    /// Most bytes the table of roles' transaction coordinators takes,
    /// everything counted: names and broker addresses at their allocation
    /// sizes and the hash table.
    #[arg(long, env = "KRABKA_COORDINATOR_CACHE_BYTES", default_value = "16777216", value_parser = clap::value_parser!(u64).range(1024..=1 << 36))]
    pub coordinator_cache_bytes: u64,
}

/// Creating the coordination topic when it is missing (off by default: the
/// service only reads, and the candidates' clients create the topic).
#[derive(Args, Clone, Debug)]
pub struct TopicCreation {
    /// Create the coordination topic when it is missing, compacted, with
    /// --topic-partitions and --topic-replication-factor,
    /// min.compaction.lag.ms=3600000 and message.timestamp.type=LogAppendTime
    /// (needs Create on the topic or the cluster; an existing topic lacking
    /// the last two is warned of). Off: a missing topic means no role is
    /// registered yet; the service is ready, checks work, views are empty.
    #[arg(long, env = "KRABKA_CREATE_TOPIC", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub create_topic: bool,

    /// The partition count of a topic the service creates. Every member and
    /// service reads the count from the topic; it cannot change later.
    #[arg(long, env = "KRABKA_TOPIC_PARTITIONS", default_value = "16", value_parser = clap::value_parser!(i32).range(1..=10_000))]
    pub topic_partitions: i32,

    /// The replication factor of a topic the service creates; -1 takes the
    /// brokers' default.replication.factor.
    #[arg(long, env = "KRABKA_TOPIC_REPLICATION_FACTOR", default_value = "-1", allow_negative_numbers = true, value_parser = replication_factor)]
    pub topic_replication_factor: i16,
}

fn replication_factor(text: &str) -> Result<i16, String> {
    match text.parse::<i16>() {
        Ok(n) if n == -1 || n >= 1 => Ok(n),
        _ => Err(format!(
            "{text:?}: a replication factor is -1 (the brokers' default) or 1 to 32767"
        )),
    }
}

impl Default for TopicCreation {
    fn default() -> Self {
        defaults()
    }
}

impl Default for CheckSettings {
    fn default() -> Self {
        defaults()
    }
}

/// The watcher of the topic and its views.
#[derive(Args, Clone, Debug)]
pub struct WatchSettings {
    /// How stale a roster view may get (plus a round trip): the watcher's
    /// long polls wait half of it, and a view is up to two of them old.
    #[arg(long, env = "KRABKA_ROSTER_TTL", default_value = "1s", value_parser = duration_between(TEN_MS, MINUTE))]
    pub roster_ttl: Duration,

    /// How often the coordinator is asked for the current pair of every role.
    #[arg(long, env = "KRABKA_POLL_INTERVAL", default_value = "5s", value_parser = duration_between(100 * Duration::from_millis(1), HOUR))]
    pub poll_interval: Duration,

    /// The window over which failovers count towards `flapping`.
    #[arg(long, env = "KRABKA_STATUS_WINDOW", default_value = "10m", value_parser = duration_between(SECOND, 30 * DAY))]
    pub status_window: Duration,

    /// More failovers than this within the status window is `flapping`.
    #[arg(long, env = "KRABKA_FLAPPING_THRESHOLD", default_value = "3", value_parser = RangedU64ValueParser::<usize>::new().range(0..=1_000_000))]
    pub flapping_threshold: usize,

    /// Most roles with per-role metric series; the rest are counted in
    /// krabka_role_series_omitted_total.
    #[arg(long, env = "KRABKA_MAX_ROLE_SERIES", default_value = "1000", value_parser = RangedU64ValueParser::<usize>::new().range(0..=1_000_000))]
    pub max_role_series: usize,

    /// Changes kept per role for resuming event streams.
    #[arg(long, env = "KRABKA_EVENT_HISTORY", default_value = "128", value_parser = RangedU64ValueParser::<usize>::new().range(0..=100_000))]
    pub event_history: usize,

    /// The members' challenge stagger, to show challenge instants and tell
    /// `stuck`.
    #[arg(long, env = "KRABKA_CHALLENGE_STAGGER", default_value = "5s", value_parser = duration_between(Duration::ZERO, HOUR))]
    pub challenge_stagger: Duration,
}

impl Default for WatchSettings {
    fn default() -> Self {
        defaults()
    }
}

/// Bearer tokens on the API.
#[derive(Args, Clone, Debug)]
pub struct AuthSettings {
    /// File of accepted API bearer tokens, one per line (e.g. a mounted
    /// Secret); read again when it changes, and what it holds is the
    /// truth: emptied, no token is accepted. Unset: the API is open.
    #[arg(long, env = "KRABKA_API_TOKENS_FILE")]
    pub api_tokens_file: Option<PathBuf>,

    /// Require a token for /healthz too.
    #[arg(long, env = "KRABKA_PROTECT_HEALTHZ", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub protect_healthz: bool,

    /// Require a token for /readyz too.
    #[arg(long, env = "KRABKA_PROTECT_READYZ", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub protect_readyz: bool,

    /// Serve /metrics without a token although tokens are configured. The
    /// per-role series name every role, holder and pair, which the 401s of
    /// the API hide; open them only to a trusted network.
    #[arg(long, env = "KRABKA_PUBLIC_METRICS", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub public_metrics: bool,

    /// Accepted for earlier versions' flags: /metrics is protected whenever
    /// tokens are configured, unless --public-metrics.
    #[arg(long, env = "KRABKA_PROTECT_METRICS", hide = true, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub protect_metrics: bool,
}

impl Default for AuthSettings {
    fn default() -> Self {
        defaults()
    }
}

/// Everything `serve` needs.
#[derive(Args, Clone, Debug)]
pub struct ServiceConfig {
    /// Kafka.
    #[command(flatten)]
    pub kafka: KafkaSettings,
    /// The HTTP server.
    #[command(flatten)]
    pub http: HttpSettings,
    /// The authority checks.
    #[command(flatten)]
    pub check: CheckSettings,
    /// The watcher and its views.
    #[command(flatten)]
    pub watch: WatchSettings,
    /// API tokens.
    #[command(flatten)]
    pub auth: AuthSettings,
    /// Creating the topic.
    #[command(flatten)]
    pub topic_creation: TopicCreation,
}

impl ServiceConfig {
    /// The defaults for a cluster at `bootstrap`, for tests and embedding.
    pub fn new(bootstrap: &str) -> ServiceConfig {
        let command = <ServiceConfig as Args>::augment_args(
            clap::Command::new("defaults").no_binary_name(true),
        )
        .mut_args(|arg| arg.env(None::<&str>));
        let matches = command.get_matches_from(["--bootstrap-servers", bootstrap]);
        match ServiceConfig::from_arg_matches(&matches) {
            Ok(config) => config,
            Err(e) => panic!("settings without defaults: {e}"),
        }
    }

    /// Checks what the bounds of single flags cannot: combinations, and
    /// files that must be readable. The message names the flag.
    pub fn validate(&self) -> Result<(), String> {
        self.kafka.client_config()?;
        if self.check.superseded_cache_capacity.is_some() {
            return Err("--superseded-cache-capacity (KRABKA_SUPERSEDED_CACHE_CAPACITY) was replaced by --superseded-cache-bytes (KRABKA_SUPERSEDED_CACHE_BYTES): a bound in bytes, everything counted".into());
        }
        let auth = &self.auth;
        let protects = auth.protect_healthz || auth.protect_readyz || auth.public_metrics;
        if protects && auth.api_tokens_file.is_none() {
            return Err(
                "--protect-healthz, --protect-readyz and --public-metrics need --api-tokens-file"
                    .into(),
            );
        }
        if auth.public_metrics && !auth.protect_metrics {
            return Err("--public-metrics contradicts --protect-metrics".into());
        }
        if let Some(path) = &auth.api_tokens_file {
            super::api_tokens::ApiTokens::load(path)
                .map_err(|e| format!("--api-tokens-file: {e}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Serve {
        #[command(flatten)]
        config: ServiceConfig,
    }

    fn parse(args: &[&str]) -> Result<ServiceConfig, clap::Error> {
        let mut all = vec!["serve", "--bootstrap-servers", "b:1"];
        all.extend_from_slice(args);
        Serve::try_parse_from(all).map(|s| s.config)
    }

    #[test]
    fn the_defaults_are_the_flags_defaults() {
        let parsed = parse(&[]).unwrap();
        let built = ServiceConfig::new("b:1");
        assert_eq!(format!("{parsed:?}"), format!("{built:?}"));
        assert_eq!(built.http.request_timeout, Duration::from_secs(5));
        assert_eq!(built.watch.roster_ttl, Duration::from_secs(1));
        assert_eq!(HttpSettings::default().max_connections, 10_000);
    }

    #[test]
    fn huge_or_tiny_values_are_refused_naming_the_flag() {
        for (flag, value) in [
            ("--header-timeout", "300000000000y"),
            ("--request-timeout", "300000000000y"),
            ("--request-timeout", "1ms"),
            ("--max-connections", "18446744073709551615"),
            ("--max-connections", "0"),
            ("--kafka-operation-timeout", "300000000000y"),
            ("--kafka-request-timeout", "100000h"),
            ("--roster-ttl", "2h"),
            ("--max-body-bytes", "10"),
            ("--status-window", "1000d"),
        ] {
            let err = parse(&[flag, value]).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{flag} {value}");
            let text = err.to_string();
            assert!(text.contains(flag), "{flag} {value}: {text}");
        }
    }

    #[test]
    fn protection_flags_need_a_tokens_file_and_the_file_must_be_readable() {
        let mut config = ServiceConfig::new("b:1");
        config.auth.protect_readyz = true;
        assert!(config.validate().unwrap_err().contains("--api-tokens-file"));
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        // Empty: every token revoked, a service that accepts none.
        let empty = dir.join("empty");
        std::fs::write(&empty, "# nothing\n").unwrap();
        config.auth.api_tokens_file = Some(empty);
        assert_eq!(config.validate(), Ok(()));
        let malformed = dir.join("malformed");
        std::fs::write(&malformed, "two words\n").unwrap();
        config.auth.api_tokens_file = Some(malformed);
        assert!(
            config
                .validate()
                .unwrap_err()
                .starts_with("--api-tokens-file")
        );
        config.auth.api_tokens_file = Some(dir.join("missing"));
        assert!(
            config
                .validate()
                .unwrap_err()
                .starts_with("--api-tokens-file")
        );
        let good = dir.join("good");
        std::fs::write(&good, "secret\n").unwrap();
        config.auth.api_tokens_file = Some(good);
        assert_eq!(config.validate(), Ok(()));
    }
}
