//! The HTTP routes and the middleware around them. Built by a function so
//! tests call it without a socket.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Request};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::trace::TraceLayer;

use super::problem::Problem;
use super::state::AppState;
use super::{auth, authority, ops, status_page, stream, views};

/// Every route as `(method, path)`, in the OpenAPI document's notation; a
/// test holds the document to this list.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/roles/{role}/authority"),
    ("POST", "/authority/check"),
    ("GET", "/roles"),
    ("GET", "/roles/{role}"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/openapi.yaml"),
    ("GET", "/"),
    ("GET", "/roles/{role}/events"),
];

/// Request ids: a per-process prefix and a counter, unique and cheap.
#[derive(Clone, Debug)]
struct Ids {
    prefix: u32,
    next: Arc<AtomicU64>,
}

impl MakeRequestId for Ids {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        HeaderValue::from_str(&format!("{:08x}-{n:x}", self.prefix))
            .ok()
            .map(RequestId::new)
    }
}

async fn not_found() -> Response {
    Problem::not_found("no such endpoint; see /openapi.yaml").into_response()
}

async fn method_not_allowed() -> Response {
    let mut problem =
        Problem::not_found("this endpoint does not take that method; see /openapi.yaml");
    problem.status = 405;
    problem.title = "Method not allowed".into();
    problem.kind = problem.kind.replace("not-found", "method-not-allowed");
    problem.into_response()
}

fn panicked(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a handler panicked");
    Problem::internal().into_response()
}

/// The service's router over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    let ids = Ids {
        prefix: rand::random(),
        next: Arc::default(),
    };
    let timeout = state.config.request_timeout + Duration::from_secs(1);
    let retry_after = state.config.retry_after_secs;
    let body_limit = state.config.max_body_bytes;
    // Answers bounded in time; the event stream is not.
    let answers = Router::new()
        .route("/roles/{role}/authority", get(authority::get_authority))
        .route("/authority/check", post(authority::post_check))
        .route("/roles", get(views::list_roles))
        .route("/roles/{role}", get(views::get_role))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/openapi.yaml", get(ops::openapi))
        .route("/", get(status_page::page))
        // A slow body cannot hold a request open past the request timeout.
        .layer(RequestBodyTimeoutLayer::new(state.config.request_timeout))
        // A safety net: handlers keep their own deadlines, within this one.
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(
                    move |_: tower::BoxError| async move {
                        Problem::unavailable(
                            format!("the request took longer than {timeout:?}"),
                            retry_after,
                        )
                    },
                ))
                .timeout(timeout),
        );
    Router::new()
        .merge(answers)
        .route("/roles/{role}/events", get(stream::role_events))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_token))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(
            ServiceBuilder::new()
                .layer(SetRequestIdLayer::x_request_id(ids))
                .layer(
                    TraceLayer::new_for_http().make_span_with(|request: &Request<_>| {
                        let id = request
                            .headers()
                            .get("x-request-id")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("-");
                        tracing::info_span!("request", request_id = %id, method = %request.method(), path = %request.uri().path())
                    }),
                )
                .layer(PropagateRequestIdLayer::x_request_id())
                .layer(CatchPanicLayer::custom(panicked)),
        )
        .with_state(state)
}
