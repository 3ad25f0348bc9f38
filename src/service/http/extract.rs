//! Extractors for what a request names: a validated role from the path, a
//! token from the query. A bad one is a 400 problem naming the field.

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;

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
        // The only way the path's one parameter fails: its percent-decoded
        // bytes are not UTF-8 (axum's text would name its own types).
        let Path(role) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| {
                ApiError::invalid(
                    "role",
                    "the role in the path is not UTF-8 once percent-decoded: percent-encode the role's UTF-8 bytes",
                )
            })?;
        validate_role(&role)?;
        Ok(Role(role))
    }
}

/// The values of the query parameter `name`, percent-decoded (`+` a
/// space), in order.
pub(crate) fn query_values(parts: &Parts, name: &str) -> Vec<String> {
    let query = parts.uri.query().unwrap_or("");
    form_urlencoded::parse(query.as_bytes())
        .filter(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
        .collect()
}

impl<S: Send + Sync> FromRequestParts<S> for Token {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Token, ApiError> {
        let text = match query_values(parts, "token").as_slice() {
            [] => {
                return Err(ApiError::invalid(
                    "token",
                    "the token query parameter is missing; add ?token=<producer id>:<producer epoch>",
                ));
            }
            [one] => one.clone(),
            many => {
                return Err(ApiError::invalid(
                    "token",
                    format!(
                        "the token query parameter is given {} times; give it once: ?token=<producer id>:<producer epoch> (check many tokens with POST /authority/check)",
                        many.len()
                    ),
                ));
            }
        };
        Ok(Token(parse_token(&text)?))
    }
}

/// What a JSON body must be, said to a caller whose body is not that.
pub(crate) trait Shape {
    /// The expected shape, with an example.
    const SHAPE: &'static str;
}

/// Why a body that read whole is not the JSON expected, in the service's
/// words (serde's name Rust types): where, and what it must be.
fn not_the_json<T: Shape>(e: &serde_json::Error) -> ApiError {
    let (line, column) = (e.line(), e.column());
    let what = match e.classify() {
        serde_json::error::Category::Eof if line <= 1 && column == 0 => {
            "the body is empty".to_owned()
        }
        serde_json::error::Category::Eof => {
            format!("the body ends early (line {line}, column {column})")
        }
        serde_json::error::Category::Syntax | serde_json::error::Category::Io => {
            format!("the body is not JSON (line {line}, column {column})")
        }
        serde_json::error::Category::Data => {
            format!("the body's JSON has another shape (line {line}, column {column})")
        }
    };
    ApiError::invalid("body", format!("{what}: send {}", T::SHAPE))
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
    T: serde::de::DeserializeOwned + Shape,
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
                ApiError::invalid(
                    "body",
                    "the body could not be read whole (the connection broke, or its chunked encoding is wrong): send it again",
                )
            }
        })?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| not_the_json::<T>(&e))
    }
}
