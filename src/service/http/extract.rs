//! Extractors for what a request names: a validated role from the path, a
//! token from the query. A bad one is a 400 problem naming the field.

use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use serde::Deserialize;

pub(crate) use krabka_authority_types::{parse_token, validate_role};

use super::problem::ApiError;
use crate::coordination::FencingToken;

/// A role name: a Kafka transactional id, 1 to 32767 bytes
/// ([`validate_role`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Role(pub String);

/// A fencing token from `?token=<producer id>:<producer epoch>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Token(pub FencingToken);

impl<S: Send + Sync> FromRequestParts<S> for Role {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Role, ApiError> {
        let Path(role) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::invalid("role", e.body_text()))?;
        validate_role(&role)?;
        Ok(Role(role))
    }
}

#[derive(Debug, Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for Token {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Token, ApiError> {
        let Query(query) = Query::<TokenQuery>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::invalid("token", e.body_text()))?;
        let text = query.token.ok_or_else(|| {
            ApiError::invalid(
                "token",
                "the token query parameter is missing; add ?token=<producer id>:<producer epoch>",
            )
        })?;
        Ok(Token(parse_token(&text)?))
    }
}

/// A JSON body of a request: 415 without a JSON content type, 413 over the
/// body limit (declared or read), 408 when it arrives too slowly, 400 when
/// it is not the JSON expected.
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub T);

/// True for `application/json` and `application/<anything>+json`, with or
/// without parameters.
fn is_json(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence
        .strip_prefix("application/")
        .is_some_and(|sub| sub == "json" || sub.ends_with("+json"))
}

/// When the request arrived (its headers read): the request timeout
/// bounds the whole request from here, reading its body included. Set by
/// the router's outermost layer; a request without it (a handler called
/// alone) counts from when it is asked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrived(pub tokio::time::Instant);

impl<S: Send + Sync> FromRequestParts<S> for Arrived {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Arrived, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<Arrived>()
            .copied()
            .unwrap_or_else(|| Arrived(tokio::time::Instant::now())))
    }
}

/// True when `error` (or what caused it) is the request body timeout.
fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cause = e.source();
    }
    false
}

impl<T> axum::extract::FromRequest<std::sync::Arc<crate::service::state::AppState>> for JsonBody<T>
where
    T: serde::de::DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(
        request: axum::extract::Request,
        state: &std::sync::Arc<crate::service::state::AppState>,
    ) -> Result<JsonBody<T>, ApiError> {
        let limit = state.config.http.max_body_bytes;
        if !is_json(request.headers()) {
            return Err(ApiError::UnsupportedMediaType(
                "the body must be JSON: send Content-Type: application/json".into(),
            ));
        }
        let declared = request
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(ApiError::TooLarge(format!(
                "the body is over the limit of {limit} bytes"
            )));
        }
        // The whole body within the request timeout from the request's
        // arrival: a body that trickles in (each piece within the per-piece
        // timeout) and then stalls is the caller's fault, 408, and must not
        // run into the safety net's 503 ("Coordinator unavailable").
        let timeout = state.config.http.request_timeout;
        let arrived = request
            .extensions()
            .get::<Arrived>()
            .map_or_else(tokio::time::Instant::now, |a| a.0);
        let read = tokio::time::timeout_at(
            arrived + timeout,
            axum::body::Bytes::from_request(request, state),
        )
        .await
        .map_err(|_| {
            ApiError::Timeout(format!(
                "the body did not arrive within the request timeout ({timeout:?})"
            ))
        })?;
        let bytes = read.map_err(|e| {
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::TooLarge(format!("the body is over the limit of {limit} bytes"))
            } else if timed_out(&e) {
                ApiError::Timeout("the body did not arrive within the request timeout".into())
            } else {
                ApiError::invalid("body", e.body_text())
            }
        })?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::invalid("body", e.to_string()))
    }
}
