//! Operations endpoints: liveness, readiness, metrics and the API contract.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::state::AppState;

/// The OpenAPI document, served as written.
pub const OPENAPI_YAML: &str = include_str!("../../openapi/openapi.yaml");

/// `GET /healthz`: the process is up.
pub async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

/// `GET /readyz`: Kafka reachable, topic present, views caught up.
pub async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    match state.readiness.reason() {
        None => Json(json!({ "status": "ready" })).into_response(),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "not ready", "reason": reason })),
        )
            .into_response(),
    }
}

/// `GET /metrics`: Prometheus text exposition.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let mut response = state.metrics.render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// `GET /openapi.yaml`.
pub async fn openapi() -> Response {
    let mut response = OPENAPI_YAML.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/yaml"),
    );
    response
}
