//! The broker tier's helpers, one home for what more than one test file
//! uses (feature modules hold only their tests and what is theirs alone):
//!
//! - this module: names, logs, the repository, [`eventually`];
//! - [`broker`]: the broker under test, brokers of one test, clients,
//!   topics, transports;
//! - [`service`]: the service in this process over real HTTP;
//! - [`process`]: the binary as a child process (`serve`, `demo`);
//! - [`leadership`]: leader-election members with short timings;
//! - [`cluster`]: the 3-broker cluster, the members, the check load and
//!   the verdicts' audit of the cluster tests; clusters of one test's own;
//! - [`proxy`]: TCP proxies in front of the brokers of such a cluster.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub mod broker;
pub mod cluster;
pub mod leadership;
pub mod process;
pub mod proxy;
pub mod service;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// An HTTP client for a service under test. Its idle connections close
/// before the service's (`--header-timeout`, 10 s by default, closes a
/// keep-alive connection idle that long): one reused as the service closes
/// it fails with "error sending request", a race of the client's, which
/// the checks that count every unanswered request would blame on the
/// service (seen once in 10,801 checks after a 10 s pause).
pub fn http_client() -> reqwest::ClientBuilder {
    reqwest::Client::builder().pool_idle_timeout(Duration::from_secs(5))
}

/// A unique name for a role or topic of one test.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{n}-{nanos:x}", std::process::id())
}

/// The library's logs in each test's captured output (shown for a failing
/// test): what the client retried and why is the first thing a flaky
/// failure needs. `RUST_LOG` overrides the default level.
pub fn capture_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // Every crate of the workspace: since the split, what the Kafka
        // client retried and why logs under krabka_kafka.
        .unwrap_or_else(|_| {
            "krabka_authority=info,krabka_kafka=info,krabka_coordination=info,krabka_leadership=info"
                .into()
        });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .with_ansi(false)
        .try_init();
}

/// Polls `check` every 50 ms until it gives a value; panics after 10 s.
pub async fn eventually<T, F, Fut>(check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    within(Duration::from_secs(10), "condition", check).await
}

/// Polls `check` every 50 ms until it gives a value; panics after `limit`
/// saying what was awaited.
pub async fn within<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
