//! `GET /roles/{role}/authority?token=ID:EPOCH` and `POST /authority/check`:
//! live verdicts from the transaction coordinator, through the one check
//! path ([`crate::service::check`]).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::extract::{Arrived, JsonBody, Role, Token, parse_token, validate_role};
use super::problem::ApiError;
use crate::cluster::ClusterError;
use crate::coordination::{FencingToken, Verdict};
use crate::service::AppState;
use crate::service::check::CheckAnswer;
use crate::time::Rfc3339Ms;

/// 200 for authoritative, 409 for every other verdict.
pub fn status_of(answer: &CheckAnswer) -> StatusCode {
    match answer.verdict {
        Verdict::Authoritative => StatusCode::OK,
        _ => StatusCode::CONFLICT,
    }
}

fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The 503 of a check whose coordinator could not be asked in time.
fn unavailable(state: &AppState, role: &str, e: &ClusterError) -> ApiError {
    tracing::warn!(role, error = %e, "authority check failed: the coordinator could not be asked");
    ApiError::unavailable(
        format!("the transaction coordinator could not be asked about role {role:?}: {e}"),
        state.config.http.retry_after_secs(),
    )
}

/// Counts one answered check (or its problem) in the metrics.
fn count(state: &AppState, answer: &Result<CheckAnswer, ApiError>, started: Instant) {
    let label = match answer {
        Ok(a) => {
            if a.cached {
                state.metrics.superseded_cache_hits.inc();
            }
            a.verdict.as_str()
        }
        Err(e) if e.status() == 503 => "unavailable",
        Err(_) => "invalid",
    };
    state.metrics.check(label, started.elapsed());
}

/// `GET /roles/{role}/authority?token=ID:EPOCH`.
pub async fn get_authority(
    State(state): State<Arc<AppState>>,
    role: Result<Role, ApiError>,
    token: Result<Token, ApiError>,
) -> Response {
    let started = Instant::now();
    let answer = async {
        let (Role(role), Token(token)) = (role?, token?);
        let deadline = started + state.config.http.request_timeout;
        state
            .checker
            .check(&role, token, deadline)
            .await
            .map_err(|e| unavailable(&state, &role, &e))
    }
    .await;
    count(&state, &answer, started);
    match answer {
        Ok(answer) => no_store((status_of(&answer), Json(answer)).into_response()),
        Err(problem) => problem.into_response(),
    }
}

/// One item of a batch check. A missing or null role or token is that
/// item's own 400; a value of the wrong type, or an item that is not an
/// object, fails the whole request.
#[derive(Debug)]
pub struct CheckItem {
    role: Option<String>,
    token: Option<String>,
}

impl<'de> Deserialize<'de> for CheckItem {
    /// Objects only: serde's derived struct would also take the array
    /// `[role, token]`, which the OpenAPI schema does not allow.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields {
            role: Option<String>,
            token: Option<String>,
        }
        let object = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
        let Fields { role, token } = Fields::deserialize(serde_json::Value::Object(object))
            .map_err(serde::de::Error::custom)?;
        Ok(CheckItem { role, token })
    }
}

/// One answer of a batch check: a verdict, or the problem of that item.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchAnswer {
    /// 200, 409, 400 or 503: what a single check would have answered.
    pub status: u16,
    /// The role as given.
    pub role: Option<String>,
    /// The token as given.
    pub token: Option<String>,
    /// The verdict, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// The current pair, when a verdict was reached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current: Option<Option<FencingToken>>,
    /// The transaction state, when a verdict was reached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<Option<String>>,
    /// When the coordinator was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checked_at: Option<Rfc3339Ms>,
    /// Whether the verdict came from the superseded cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached: Option<bool>,
    /// What was wrong, for 400 and 503.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<super::problem::Problem>,
}

impl BatchAnswer {
    fn of(item: CheckItem, answer: Result<CheckAnswer, ApiError>) -> BatchAnswer {
        match answer {
            Ok(a) => BatchAnswer {
                status: status_of(&a).as_u16(),
                role: Some(a.role),
                token: Some(a.token.to_string()),
                verdict: Some(a.verdict),
                current: Some(a.current),
                state: Some(a.state),
                checked_at: Some(a.checked_at),
                cached: Some(a.cached),
                problem: None,
            },
            Err(problem) => BatchAnswer {
                status: problem.status(),
                role: item.role,
                token: item.token,
                verdict: None,
                current: None,
                state: None,
                checked_at: None,
                cached: None,
                problem: Some(problem.into_problem()),
            },
        }
    }
}

/// The body of a batch answer.
#[derive(Debug, Serialize)]
pub struct BatchResponse {
    /// One answer per item, in order.
    pub results: Vec<BatchAnswer>,
}

fn parse_item(item: &CheckItem) -> Result<(String, FencingToken), ApiError> {
    let role = item
        .role
        .clone()
        .ok_or_else(|| ApiError::invalid("role", "the item has no role"))?;
    validate_role(&role)?;
    let token = item
        .token
        .as_deref()
        .ok_or_else(|| ApiError::invalid("token", "the item has no token"))?;
    Ok((role, parse_token(token)?))
}

/// `POST /authority/check`: a JSON list of `{role, token}`, answered in one
/// round (the checks of one coordinator share requests), each item with its
/// own verdict.
pub async fn post_check(
    State(state): State<Arc<AppState>>,
    Arrived(started): Arrived,
    body: Result<JsonBody<Vec<CheckItem>>, ApiError>,
) -> Response {
    let items = match body {
        Ok(JsonBody(items)) => items,
        Err(problem) => return problem.into_response(),
    };
    let limit = state.config.http.max_check_items;
    if items.len() > limit {
        return ApiError::too_large(format!(
            "{} items; at most {limit} per request",
            items.len()
        ))
        .into_response();
    }
    let parsed: Vec<Result<(String, FencingToken), ApiError>> =
        items.iter().map(parse_item).collect();
    let pairs: Vec<(String, FencingToken)> = parsed
        .iter()
        .filter_map(|p| p.as_ref().ok().cloned())
        .collect();
    let deadline = started + state.config.http.request_timeout;
    let mut checked = state.checker.check_many(&pairs, deadline).await.into_iter();
    let results = items
        .into_iter()
        .zip(parsed)
        .map(|(item, parsed)| {
            let answer = parsed.and_then(|(role, _)| {
                checked
                    .next()
                    .unwrap_or_else(|| Err(ClusterError::Invalid("unanswered".into())))
                    .map_err(|e| unavailable(&state, &role, &e))
            });
            count(&state, &answer, started);
            BatchAnswer::of(item, answer)
        })
        .collect();
    no_store(Json(BatchResponse { results }).into_response())
}
