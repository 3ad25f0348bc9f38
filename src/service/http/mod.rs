//! The HTTP face of the service: the routes (listed once), the layers
//! around them, and one module per group of handlers. Built by a function
//! so tests call it without a socket.

pub(crate) mod auth;
pub(crate) mod authority;
pub(crate) mod extract;
pub(crate) mod ops;
pub(crate) mod pages;
pub(crate) mod problem;
pub(crate) mod request_id;
pub(crate) mod stream;
pub(crate) mod views;

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, on};
use futures::TryFutureExt;
use futures::future::{Either, MapOk, Ready, ready};
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::request_id::{PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::trace::TraceLayer;

use self::auth::Access;
use self::problem::ApiError;
use super::state::AppState;

/// Lists every route once: the groups (by who may call them, and whether
/// the request timeout bounds them), and `ROUTES`, which a test holds the
/// OpenAPI document to.
macro_rules! routes {
    ($( $group:ident ($access:ident, bounded: $bounded:literal) {
        $( $method:ident $path:literal => $handler:expr ),* $(,)?
    } )*) => {
        /// Every route as `(method, path)`, in the OpenAPI document's notation.
        pub const ROUTES: &[(&str, &str)] = &[ $( $( (stringify!($method), $path), )* )* ];

        /// The groups of routes: who may call them, whether the request
        /// timeout bounds them, and their router.
        fn groups() -> Vec<(Access, bool, Router<Arc<AppState>>)> {
            vec![ $( (
                Access::$access,
                $bounded,
                Router::new() $( .route($path, on(MethodFilter::$method, $handler)) )*,
            ), )* ]
        }
    };
}

routes! {
    api (Api, bounded: true) {
        GET "/roles/{role}/authority" => authority::get_authority,
        POST "/authority/check" => authority::post_check,
        GET "/roles" => views::list_roles,
        GET "/roles/{role}" => views::get_role,
        GET "/roles/{role}/page" => pages::role::page,
        GET "/page" => pages::role::page_by_query,
        GET "/" => pages::status::page,
    }
    streams (Api, bounded: false) {
        GET "/roles/{role}/events" => stream::role_events,
    }
    healthz (Healthz, bounded: true) {
        GET "/healthz" => ops::healthz,
    }
    readyz (Readyz, bounded: true) {
        GET "/readyz" => ops::readyz,
    }
    metrics (Metrics, bounded: true) {
        GET "/metrics" => ops::metrics,
    }
    contract (Open, bounded: true) {
        GET "/openapi.yaml" => ops::openapi,
    }
}

/// A JSON answer: `body` as one line of JSON and a newline (as a shell
/// prints it), `application/json`. Every JSON body of the service, problems
/// included, is written here.
pub(crate) fn json<T: serde::Serialize + ?Sized>(status: StatusCode, body: &T) -> Response {
    match serde_json::to_vec(body) {
        Ok(mut bytes) => {
            bytes.push(b'\n');
            (
                status,
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                bytes,
            )
                .into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "a JSON body could not be written");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// An unknown path: 404, or the same 401 as everything else for a caller
/// without a token, so it learns nothing of what exists.
async fn not_found(State(state): State<Arc<AppState>>, request: Request) -> Response {
    if auth::refused(&state, &request) {
        return ApiError::Unauthorized.into_response();
    }
    ApiError::NotFound {
        field: "path",
        detail: "no such endpoint: the API's paths are listed in /openapi.yaml".into(),
    }
    .into_response()
}

async fn method_not_allowed(State(state): State<Arc<AppState>>, request: Request) -> Response {
    if auth::refused(&state, &request) {
        return ApiError::Unauthorized.into_response();
    }
    ApiError::MethodNotAllowed(
        "this endpoint does not take that method: its methods are in /openapi.yaml".into(),
    )
    .into_response()
}

/// What every answer passes through, in one layer:
/// - the request's arrival is stamped ([`extract::Arrived`]): the request
///   timeout counts from here, the body's reading included;
/// - RFC 9112 §3.2: an HTTP/1.1 request without exactly one `Host` header
///   is refused with 400;
/// - a 401 says nothing of the path: no `Allow` header, which axum adds to
///   the answers of a known path asked with another method;
/// - `X-Content-Type-Options: nosniff` and `Referrer-Policy: no-referrer`.
///
/// A plain tower service rather than `middleware::from_fn`, which boxes
/// the rest of the stack and its future for every request: this runs on
/// every request, `/healthz` and checks alike.
#[derive(Clone, Debug)]
struct Edge<S> {
    inner: S,
}

impl<S> tower::Service<Request> for Edge<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future =
        Either<Ready<Result<Response, Infallible>>, MapOk<S::Future, fn(Response) -> Response>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        request
            .extensions_mut()
            .insert(extract::Arrived(tokio::time::Instant::now()));
        if request.version() == axum::http::Version::HTTP_11
            && request.headers().get_all(header::HOST).iter().count() != 1
        {
            let refused =
                ApiError::invalid("Host", "an HTTP/1.1 request needs exactly one Host header")
                    .into_response();
            return Either::Left(ready(Ok(harden(refused))));
        }
        Either::Right(
            self.inner
                .call(request)
                .map_ok(harden as fn(Response) -> Response),
        )
    }
}

/// The headers of every answer (see [`Edge`]).
fn harden(mut response: Response) -> Response {
    let refused = response.status() == axum::http::StatusCode::UNAUTHORIZED;
    let headers = response.headers_mut();
    if refused {
        headers.remove(header::ALLOW);
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers
        .entry(header::REFERRER_POLICY)
        .or_insert(HeaderValue::from_static("no-referrer"));
    response
}

/// Logs a failed response. A 503 is an answer, not a fault of the
/// request: the service fails closed while it cannot ask Kafka, and
/// `/readyz` answers 503 until ready (a probe every few seconds); their
/// causes are logged where they are known, once per change, and counted
/// in the metrics. So a 503 is logged at debug, anything else at error.
fn failed(class: ServerErrorsFailureClass, latency: Duration, _: &tracing::Span) {
    let latency_ms = latency.as_millis();
    match class {
        ServerErrorsFailureClass::StatusCode(StatusCode::SERVICE_UNAVAILABLE) => {
            tracing::debug!(%class, latency_ms, "answered 503");
        }
        _ => tracing::error!(%class, latency_ms, "response failed"),
    }
}

fn panicked(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a handler panicked");
    ApiError::Internal.into_response()
}

/// The service's router over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    let http = &state.config.http;
    let ids = request_id::Ids::new();
    let timeout = http.request_timeout + Duration::from_secs(1);
    let retry_after = http.retry_after_secs();
    let mut app = Router::new();
    let tokens = state.api_tokens.is_some();
    for (access, bounded, group) in groups() {
        let mut group = group;
        // Without tokens (configured at start-up or never) nothing to check.
        if tokens {
            group = group.route_layer(axum::middleware::from_fn_with_state(
                (state.clone(), access),
                auth::require_token,
            ));
        }
        if bounded {
            group = group
                // A slow body cannot hold a request open past the timeout.
                .layer(RequestBodyTimeoutLayer::new(http.request_timeout))
                // A safety net: handlers keep their own deadlines, within this.
                .layer(
                    ServiceBuilder::new()
                        .layer(HandleErrorLayer::new(
                            move |_: tower::BoxError| async move {
                                ApiError::Overdue(format!(
                                    "the request took longer than {timeout:?}"
                                ))
                            },
                        ))
                        .timeout(timeout),
                );
        }
        // Every 503 (a problem, a page, readiness) says when to ask again.
        group = group.layer(SetResponseHeaderLayer::if_not_present(
            header::RETRY_AFTER,
            move |response: &Response| {
                (response.status() == StatusCode::SERVICE_UNAVAILABLE)
                    .then(|| HeaderValue::from(retry_after))
            },
        ));
        app = app.merge(group);
    }
    let routes = app
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state.clone());
    // The layers around everything sit on an outer router whose only
    // service is the routes: `Router::layer` would wrap each handler inside
    // its method router, where axum adds `Allow` after the layer has run.
    Router::new()
        .fallback_service(Edge { inner: routes })
        .layer(DefaultBodyLimit::max(http.max_body_bytes))
        .layer(
            ServiceBuilder::new()
                .layer(SetRequestIdLayer::x_request_id(ids))
                .layer(request_id::InScopeLayer {
                    retry_after_secs: retry_after,
                })
                .layer(
                    TraceLayer::new_for_http().make_span_with(|request: &Request<_>| {
                        let id = request
                            .headers()
                            .get("x-request-id")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("-");
                        tracing::info_span!("request", request_id = %id, method = %request.method(), path = %request.uri().path())
                    })
                    .on_failure(failed),
                )
                .layer(PropagateRequestIdLayer::x_request_id())
                .layer(CatchPanicLayer::custom(panicked)),
        )
}

#[cfg(test)]
mod tests;
