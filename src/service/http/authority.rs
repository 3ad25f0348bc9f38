//! `GET /roles/{role}/authority?token=ID:EPOCH` and `POST /authority/check`:
//! live verdicts from the transaction coordinator, through the one check
//! path ([`crate::service::check`]).

use std::sync::Arc;

use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::extract::{Arrived, JsonBody, Role, Token, parse_token, validate_role};
use super::json;
use super::problem::ApiError;
use crate::cluster::ClusterError;
use krabka_authority_types::{BatchItem, BatchOutcome, Refusal};

use crate::coordination::FencingToken;
use crate::service::check::CheckAnswer;
use crate::service::state::AppState;
use crate::time::Rfc3339Ms;

/// 200 for authoritative, 409 for every other verdict (the types crate's
/// rule).
pub(crate) fn status_of(answer: &CheckAnswer) -> StatusCode {
    StatusCode::from_u16(answer.verdict.status()).unwrap_or(StatusCode::CONFLICT)
}

fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The error of a check the cluster could not answer, its cause naming the
/// role (for the log line of the request: [`ApiError::answered`]).
fn not_asked(role: &str, e: ClusterError) -> ApiError {
    let e = match e {
        ClusterError::Unavailable(why) => ClusterError::Unavailable(format!(
            "the transaction coordinator could not be asked about role {role:?}: {why}"
        )),
        other => other,
    };
    e.into()
}

/// Counts one answered check (or its problem) in the metrics: a verdict,
/// `invalid` for bad input, `unavailable` when it could not be decided.
fn count(state: &AppState, answer: &Result<CheckAnswer, ApiError>, started: Instant) {
    let label = match answer {
        Ok(a) => {
            if a.cached {
                state.metrics.superseded_cache_hits.inc();
            }
            a.verdict.as_str()
        }
        Err(ApiError::Invalid { .. }) => "invalid",
        Err(_) => "unavailable",
    };
    state.metrics.check(label, started.elapsed());
}

/// `GET /roles/{role}/authority?token=ID:EPOCH`.
pub(crate) async fn get_authority(
    State(state): State<Arc<AppState>>,
    role: Result<Role, ApiError>,
    token: Result<Token, ApiError>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let answer = async {
        let (Role(role), Token(token)) = (role?, token?);
        let deadline = started + state.config.http.request_timeout;
        state
            .checker
            .check(&role, token, deadline)
            .await
            .map_err(|e| not_asked(&role, e))
    }
    .await;
    count(&state, &answer, started);
    let answer = answer?;
    Ok(no_store(json(status_of(&answer), &answer)))
}

/// One item of a batch check. A missing or null role or token is that
/// item's own 400; a value of the wrong type, or an item that is not an
/// object, fails the whole request.
#[derive(Debug)]
pub(crate) struct CheckItem {
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

impl super::extract::Shape for Vec<CheckItem> {
    const SHAPE: &'static str = r#"a JSON array of {"role": "<role>", "token": "<producer id>:<producer epoch>"} objects, e.g. [{"role":"orders","token":"4000:7"}]"#;
}

/// One answer of a batch check: a verdict, or the problem of that item, as
/// the wire contract of the types crate has it.
pub(crate) type BatchAnswer = BatchItem<Rfc3339Ms>;

fn batch_answer(item: CheckItem, answer: Result<CheckAnswer, ApiError>) -> BatchAnswer {
    match answer {
        Ok(a) => BatchItem {
            status: a.verdict.status(),
            outcome: BatchOutcome::Verdict(a),
        },
        Err(problem) => BatchItem {
            status: problem.status().as_u16(),
            outcome: BatchOutcome::Refused(Refusal {
                role: item.role,
                token: item.token,
                problem: problem.answered(),
            }),
        },
    }
}

/// The body of a batch answer.
#[derive(Debug, Serialize)]
pub(crate) struct BatchResponse {
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
pub(crate) async fn post_check(
    State(state): State<Arc<AppState>>,
    Arrived(started): Arrived,
    request: Request,
) -> Result<Response, ApiError> {
    // The body is read with a permit only: batches waiting for one hold
    // their headers, not their bodies (the request timeout bounds the wait).
    let _permit = state
        .batch_permits
        .acquire()
        .await
        .map_err(|_| ApiError::Internal)?;
    let JsonBody(items) = JsonBody::<Vec<CheckItem>>::from_request(request, &state).await?;
    let limit = state.config.http.max_check_items;
    if items.len() > limit {
        return Err(ApiError::TooLarge(format!(
            "{} items; at most {limit} per request",
            items.len()
        )));
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
                    .unwrap_or_else(|| Err(ClusterError::Internal("unanswered".into())))
                    .map_err(|e| not_asked(&role, e))
            });
            count(&state, &answer, started);
            batch_answer(item, answer)
        })
        .collect();
    Ok(no_store(json(StatusCode::OK, &BatchResponse { results })))
}
