//! Binding, serving and graceful shutdown with a bounded drain.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use super::router::router;
use super::state::AppState;

/// Why the server stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The server failed while running.
    #[error("the HTTP server failed: {0}")]
    Serve(std::io::Error),
}

/// How often readiness is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// Binds the configured address and serves until `shutdown` flips.
pub async fn serve(
    state: Arc<AppState>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let addr = state.config.listen;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    run(listener, state, shutdown).await
}

/// Serves on a bound listener until `shutdown` flips, then stops accepting
/// and waits up to the drain timeout for requests in flight.
pub async fn run(
    listener: TcpListener,
    state: Arc<AppState>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let local = listener.local_addr().map_err(ServeError::Serve)?;
    tracing::info!(addr = %local, topic = %state.config.topic, "serving");
    let watcher = tokio::spawn(state.watcher.clone().run());
    let prober = tokio::spawn(state.clone().probe_forever(PROBE_INTERVAL));
    let drain = state.config.drain_timeout;
    let delay = state.config.shutdown_delay;
    let mut signal = shutdown.clone();
    let shutting = state.clone();
    let server = axum::serve(listener, router(state)).with_graceful_shutdown(async move {
        let _ = signal.wait_for(|s| *s).await;
        shutting
            .shutting_down
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if !delay.is_zero() {
            tracing::info!(
                ?delay,
                "shutting down: not ready; still serving for the shutdown delay"
            );
            tokio::time::sleep(delay).await;
        }
        tracing::info!("shutting down: no new connections; draining requests in flight");
        shutting.closing.send_replace(true);
    });
    let drained = async {
        let _ = shutdown.wait_for(|s| *s).await;
        tokio::time::sleep(delay + drain).await;
    };
    let result = tokio::select! {
        result = server => result.map_err(ServeError::Serve),
        () = drained => {
            tracing::warn!(?drain, "drain timeout passed; closing the remaining connections");
            Ok(())
        }
    };
    prober.abort();
    watcher.abort();
    result
}
