//! Binding, serving and graceful shutdown with a bounded drain.
//!
//! The accept loop is our own (over hyper) rather than `axum::serve`, for
//! the limits a public endpoint needs: a bounded number of connections, a
//! deadline on reading request headers (slow clients, and idle keep-alive
//! connections, which wait for their next request's headers), and a drain
//! that ends after the drain timeout whatever the clients do.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::sync::{Semaphore, watch};
use tower::Service;

use super::http::router;
use super::state::AppState;
use crate::kafka::host::{self, Listener};

/// Why the server stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The server failed while running.
    #[error("the HTTP server failed")]
    Serve(#[source] std::io::Error),
    /// Kafka refused the service's credentials or permissions before it
    /// was ever ready; it stopped, after serving `/healthz` meanwhile.
    #[error("Kafka refused the service: {0}")]
    Denied(String),
}

/// How often readiness is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// Binds the configured address and serves until `shutdown` flips.
pub async fn serve(
    state: Arc<AppState>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let addr = state.config.http.listen;
    let listener = host::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    run(listener, state, shutdown).await
}

/// Serves on a bound listener (the operating system's, or a simulation's:
/// [`host`]) until `shutdown` flips. Then `/readyz` turns 503 at once and
/// every answer closes its connection (`Connection: close`: keep-alive
/// clients move to another pod); after the shutdown delay the listener
/// closes, event streams end, and requests in flight get up to the drain
/// timeout.
///
/// Everything that talks to Kafka starts here, in the background, after the
/// listener is bound: `/healthz` answers whatever Kafka does, and `/readyz`
/// says why the service is not ready yet. A service that was never ready
/// skips the shutdown delay (no load balancer sends it anything). When
/// Kafka refuses the service's credentials before it was ever ready, it
/// stops the same way and returns [`ServeError::Denied`].
pub async fn run(
    listener: impl Into<Listener>,
    state: Arc<AppState>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let listener: Listener = listener.into();
    let local = listener.local_addr().map_err(ServeError::Serve)?;
    tracing::info!(addr = %local, topic = %state.config.kafka.topic, "serving");
    let watcher = tokio::spawn(state.watcher.clone().run());
    let files = tokio::spawn(state.clone().look_at_files());
    let mut prober = tokio::spawn(state.clone().probe_forever(PROBE_INTERVAL));
    let stop_prober = prober.abort_handle();

    let config = &state.config.http;
    let app = router(state.clone());
    let connections = Arc::new(Semaphore::new(config.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .keep_alive(true);

    let stop = async {
        let probed = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => None,
            probed = &mut prober => Some(probed),
        };
        let denied = match probed {
            None => None,
            Some(Ok(why)) => Some(why),
            Some(Err(e)) => {
                tracing::error!(error = %e, "the readiness prober failed; serving until shutdown");
                let _ = shutdown.wait_for(|s| *s).await;
                None
            }
        };
        state.shutting_down.store(true, Ordering::Relaxed);
        if let Some(why) = &denied {
            tracing::error!(reason = %why, "Kafka refuses the service's credentials or permissions; stopping");
        } else if !state.readiness.was_ready() {
            tracing::info!("shutting down before the service was ever ready: no shutdown delay");
        } else if !config.shutdown_delay.is_zero() {
            tracing::info!(delay = ?config.shutdown_delay, "shutting down: not ready; still serving for the shutdown delay");
            tokio::time::sleep(config.shutdown_delay).await;
        }
        denied
    };
    tokio::pin!(stop);
    let denied = loop {
        let (stream, peer) = tokio::select! {
            denied = &mut stop => break denied,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off, don't spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            tracing::warn!(%peer, limit = config.max_connections, "connection limit reached; closing the new connection");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let state = state.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let mut app = app.clone();
            let state = state.clone();
            async move {
                let mut response = app
                    .call(request.map(Body::new))
                    .await
                    .unwrap_or_else(|e| match e {});
                // Shutting down, a keep-alive client is told to reconnect:
                // its next connection reaches a pod still in the endpoints,
                // instead of racing this one's close after the delay.
                if state.shutting_down.load(Ordering::Relaxed) {
                    response
                        .headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                Ok::<_, Infallible>(response)
            }
        });
        let io = TokioIo::new(head_errors::ProblemHeads::new(stream));
        let connection = graceful.watch(http.serve_connection(io, service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    };
    drop(listener);
    tracing::info!("shutting down: no new connections; draining requests in flight");
    state.closing.send_replace(true);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("drained"),
        () = tokio::time::sleep(config.drain_timeout) => {
            tracing::warn!(drain = ?config.drain_timeout, "drain timeout passed; closing the remaining connections");
        }
    }
    stop_prober.abort();
    watcher.abort();
    files.abort();
    match denied {
        Some(why) => Err(ServeError::Denied(why)),
        None => Ok(()),
    }
}

mod head_errors;

#[cfg(test)]
mod tests;
