//! Request ids: made for every request (`x-request-id`, in every log line of
//! the request through its span), and known while it is answered, so that a
//! problem body can carry the id of the log lines that say its cause
//! ([`Answering`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::http::HeaderValue;
use tokio::task::futures::TaskLocalFuture;
use tower_http::request_id::{MakeRequestId, RequestId};

/// Request ids: a per-process prefix and a counter, unique and cheap.
#[derive(Clone, Debug)]
pub(crate) struct Ids {
    prefix: u32,
    next: Arc<AtomicU64>,
}

impl Ids {
    /// Ids under a random prefix.
    pub(crate) fn new() -> Ids {
        Ids {
            prefix: crate::kafka::host::random(),
            next: Arc::default(),
        }
    }
}

impl MakeRequestId for Ids {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        HeaderValue::from_str(&format!("{:08x}-{n:x}", self.prefix))
            .ok()
            .map(RequestId::new)
    }
}

/// What a problem body says of the request being answered: its id, and
/// when a 503 may be asked again.
#[derive(Clone, Debug)]
pub(crate) struct Answering {
    /// The request's `x-request-id`.
    pub id: Option<String>,
    /// `Retry-After` of a 503, in seconds.
    pub retry_after_secs: u64,
}

tokio::task_local! {
    static ANSWERING: Answering;
}

/// The request being answered on this task, if any (none in a handler
/// called without the router).
pub(crate) fn answering() -> Option<Answering> {
    ANSWERING.try_with(Answering::clone).ok()
}

/// Runs `future` as the answer of the request `answering` describes.
#[cfg(test)]
pub(crate) async fn scoped<F: std::future::Future>(answering: Answering, future: F) -> F::Output {
    ANSWERING.scope(answering, future).await
}

/// Answers each request inside [`answering`]'s scope; sits right inside
/// the layer that sets the request id, so everything after it (handlers,
/// extractors, fallbacks, the panic handler) sees it.
#[derive(Clone, Debug)]
pub(crate) struct InScope<S> {
    pub inner: S,
    pub retry_after_secs: u64,
}

impl<S, B> tower::Service<axum::http::Request<B>> for InScope<S>
where
    S: tower::Service<axum::http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = TaskLocalFuture<Answering, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        let id = request
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let answering = Answering {
            id,
            retry_after_secs: self.retry_after_secs,
        };
        ANSWERING.scope(answering, self.inner.call(request))
    }
}

/// The layer of [`InScope`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct InScopeLayer {
    pub retry_after_secs: u64,
}

impl<S> tower::Layer<S> for InScopeLayer {
    type Service = InScope<S>;

    fn layer(&self, inner: S) -> InScope<S> {
        InScope {
            inner,
            retry_after_secs: self.retry_after_secs,
        }
    }
}
