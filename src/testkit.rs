//! What the fast tier's tests build again and again, in one place: tokens,
//! leases and the records of the compacted topic, the service over the
//! in-memory cluster, and waiting for a condition with a deadline (a
//! regression fails the test instead of hanging it).

use std::sync::Arc;
use std::time::Duration;

use crate::coordination::{
    FencingToken, Key, Lease, LogRecord, Registration, encode_key, encode_lease,
    encode_registration,
};
use crate::service::metrics::Metrics;
use crate::service::{AppState, ServiceConfig};
use crate::time::ManualClock;
use crate::transport::memory::MemoryCluster;

/// The instant the tests' clocks start at (ms since the epoch, in 2023).
pub(crate) const T0: i64 = 1_700_000_000_000;

/// A token; panics on a negative part.
pub(crate) fn t(id: i64, epoch: i16) -> FencingToken {
    FencingToken::new(id, epoch).expect("a valid token")
}

/// `member`'s lease under `token`, granted at [`T0`] for 30 s.
pub(crate) fn lease(member: &str, token: FencingToken) -> Lease {
    lease_at(member, token, T0, T0 + 30_000)
}

/// `member`'s lease under `token` from `granted_at` to `deadline`.
pub(crate) fn lease_at(member: &str, token: FencingToken, granted_at: i64, deadline: i64) -> Lease {
    Lease {
        member: member.into(),
        token,
        granted_at,
        deadline,
    }
}

/// The record at `offset` of `member` registering for `role`.
pub(crate) fn registration_record(
    offset: i64,
    role: &str,
    member: &str,
    registered_at: i64,
) -> LogRecord {
    let value = encode_registration(&Registration {
        member: member.into(),
        registered_at,
    })
    .expect("a registration encodes");
    record(offset, &Key::registration(role, member), Some(value))
}

/// The record at `offset` of `role`'s lease.
pub(crate) fn lease_record(offset: i64, role: &str, lease: &Lease) -> LogRecord {
    let value = encode_lease(lease).expect("a lease encodes");
    record(offset, &Key::lease(role), Some(value))
}

/// A tombstone of `key` at `offset` (a deregistration, or a cleared lease).
pub(crate) fn tombstone(offset: i64, key: &Key) -> LogRecord {
    record(offset, key, None)
}

fn record(offset: i64, key: &Key, value: Option<Vec<u8>>) -> LogRecord {
    LogRecord {
        offset,
        key: encode_key(key).expect("a key encodes").into(),
        value: value.map(Into::into),
    }
}

/// The service's settings for the in-memory cluster: short timeouts, views
/// refreshed every 20 ms, the watcher polling every 100 ms.
pub(crate) fn service_config() -> ServiceConfig {
    let mut config = ServiceConfig::new("memory:1");
    config.http.request_timeout = Duration::from_millis(300);
    config.watch.roster_ttl = Duration::from_millis(20);
    config.watch.poll_interval = Duration::from_millis(100);
    config
}

/// The service's state over `cluster`, its clock a manual one at [`T0`]
/// (its watcher not started: `service::run` starts it).
pub(crate) fn app_state(cluster: &MemoryCluster, config: ServiceConfig) -> Arc<AppState> {
    app_state_at(cluster, config, Arc::new(ManualClock::new(T0)))
}

/// [`app_state`] on `clock`, which the test keeps to move time.
pub(crate) fn app_state_at(
    cluster: &MemoryCluster,
    config: ServiceConfig,
    clock: Arc<ManualClock>,
) -> Arc<AppState> {
    AppState::with_cluster(
        config,
        Arc::new(cluster.clone()),
        Arc::new(Metrics::new().expect("metrics register")),
        clock,
    )
    .expect("the settings are valid")
}

/// Polls `probe` every 10 ms until it gives `Some`; panics after `within`,
/// saying `what` was awaited.
pub(crate) async fn eventually<T>(
    within: Duration,
    what: &str,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The log lines written while it lives, on this thread.
pub(crate) struct Logs {
    buffer: Arc<std::sync::Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

struct Sink(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    pub(crate) fn capture() -> Logs {
        let buffer: Arc<std::sync::Mutex<Vec<u8>>> = Arc::default();
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        Logs {
            buffer,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// The lines at `level` that mention `needle`.
    pub(crate) fn lines(&self, level: &str, needle: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.buffer.lock().unwrap())
            .lines()
            .filter(|l| l.contains(level) && l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}
