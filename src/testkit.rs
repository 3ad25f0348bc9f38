//! The service's builders for the fast tier's tests: its settings and
//! state over the in-memory cluster; the tokens, records, `eventually` and
//! log capture every crate's tests share are `krabka_coordination::testkit`.

use std::sync::Arc;
use std::time::Duration;

pub(crate) use krabka_coordination::testkit::*;

use crate::service::metrics::Metrics;
use crate::service::{AppState, ServiceConfig};
use crate::time::ManualClock;
use crate::transport::memory::MemoryCluster;

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
