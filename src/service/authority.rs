//! `GET /roles/{role}/authority?token=ID:EPOCH` and `POST /authority/check`:
//! live verdicts from the transaction coordinator.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::problem::Problem;
use super::state::{AppState, SupersededBy};
use super::verdict::{Verdict, judge};
use crate::coordination::{FencingToken, MAX_STRING_LEN};
use crate::kafka::{KafkaError, TransactionDescription};
use crate::leadership::rfc3339_ms as instant;

/// The answer to one check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckAnswer {
    /// The role asked about.
    pub role: String,
    /// The token asked about.
    pub token: FencingToken,
    /// The verdict.
    pub verdict: Verdict,
    /// The coordinator's current pair; `null` when nobody holds the role.
    pub current: Option<FencingToken>,
    /// The coordinator's transaction state; `null` when nobody holds the role.
    pub state: Option<String>,
    /// When the coordinator was asked (RFC 3339).
    pub checked_at: String,
    /// True when a superseded verdict came from the cache (then `current`
    /// and `checkedAt` are those of the check that found it superseded).
    pub cached: bool,
}

impl CheckAnswer {
    /// 200 for authoritative, 409 for every other verdict.
    pub fn status(&self) -> StatusCode {
        match self.verdict {
            Verdict::Authoritative => StatusCode::OK,
            _ => StatusCode::CONFLICT,
        }
    }
}

impl IntoResponse for CheckAnswer {
    fn into_response(self) -> Response {
        let mut response = (self.status(), Json(self)).into_response();
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }
}

/// Checks a role name: a Kafka transactional id, at most 32767 bytes.
pub fn validate_role(role: &str) -> Result<(), Problem> {
    if role.is_empty() {
        return Err(Problem::invalid("role", "the role is empty"));
    }
    if role.len() > MAX_STRING_LEN {
        return Err(Problem::invalid(
            "role",
            format!(
                "the role is {} bytes long; at most {MAX_STRING_LEN} are allowed",
                role.len()
            ),
        ));
    }
    Ok(())
}

/// Parses a token, naming the wrong part.
pub fn parse_token(text: &str) -> Result<FencingToken, Problem> {
    text.parse::<FencingToken>().map_err(|e| {
        Problem::invalid(
            "token",
            format!("{e}; a token looks like 4000:7 (<producer id>:<producer epoch>)"),
        )
    })
}

/// Why a check could not be answered.
#[derive(Debug)]
pub enum CheckError {
    /// Bad input.
    Invalid(Problem),
    /// The coordinator could not be asked in time.
    Unavailable(KafkaError),
}

/// The cached verdict of a (role, token) found superseded before.
async fn cached(state: &AppState, role: &str, token: FencingToken) -> Option<CheckAnswer> {
    let hit = state.superseded.get(&(role.to_owned(), token)).await?;
    state.metrics.superseded_cache_hits.inc();
    Some(CheckAnswer {
        role: role.to_owned(),
        token,
        verdict: Verdict::Superseded,
        current: Some(hit.current),
        state: Some(hit.state),
        checked_at: instant(hit.checked_at_ms),
        cached: true,
    })
}

/// Judges `token` against a fresh description, remembering a superseded one.
async fn answer(
    state: &AppState,
    role: &str,
    token: FencingToken,
    described: Option<TransactionDescription>,
) -> CheckAnswer {
    let checked_at_ms = state.clock.now_ms();
    let (verdict, current) = judge(token, described.as_ref());
    let txn_state = described.map(|d| d.state);
    if verdict == Verdict::Superseded
        && let Some(current) = current
    {
        state
            .superseded
            .insert(
                (role.to_owned(), token),
                SupersededBy {
                    current,
                    state: txn_state.clone().unwrap_or_default(),
                    checked_at_ms,
                },
            )
            .await;
        state
            .metrics
            .superseded_cache_entries
            .set(state.superseded.entry_count() as i64);
    }
    CheckAnswer {
        role: role.to_owned(),
        token,
        verdict,
        current,
        state: txn_state,
        checked_at: instant(checked_at_ms),
        cached: false,
    }
}

/// Checks `token` of `role`: the superseded cache first, else a live
/// DescribeTransactions sent after this call began.
pub async fn check(
    state: &Arc<AppState>,
    role: &str,
    token: FencingToken,
    deadline: Instant,
) -> Result<CheckAnswer, KafkaError> {
    if let Some(hit) = cached(state, role, token).await {
        return Ok(hit);
    }
    let described = state.describer.describe(role, deadline).await?;
    Ok(answer(state, role, token, described).await)
}

/// Checks many (role, token) pairs in one round: cache hits first, then one
/// describe of every remaining role, queued together.
pub async fn check_many(
    state: &Arc<AppState>,
    pairs: &[(String, FencingToken)],
    deadline: Instant,
) -> Vec<Result<CheckAnswer, KafkaError>> {
    let mut results: Vec<Option<Result<CheckAnswer, KafkaError>>> = Vec::with_capacity(pairs.len());
    let mut ask = Vec::new();
    for (i, (role, token)) in pairs.iter().enumerate() {
        match cached(state, role, *token).await {
            Some(hit) => results.push(Some(Ok(hit))),
            None => {
                results.push(None);
                ask.push(i);
            }
        }
    }
    let roles: Vec<String> = ask.iter().map(|&i| pairs[i].0.clone()).collect();
    let described = state.describer.describe_many(&roles, deadline).await;
    for (i, d) in ask.into_iter().zip(described) {
        let (role, token) = &pairs[i];
        results[i] = Some(match d {
            Ok(d) => Ok(answer(state, role, *token, d).await),
            Err(e) => Err(e),
        });
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(KafkaError::Invalid("unanswered".into()))))
        .collect()
}

fn unavailable(state: &AppState, role: &str, e: &KafkaError) -> Problem {
    tracing::warn!(role, error = %e, "authority check failed: the coordinator could not be asked");
    Problem::unavailable(
        format!("the transaction coordinator could not be asked about role {role:?}: {e}"),
        state.config.retry_after_secs,
    )
}

/// The query of a single check.
#[derive(Debug, Deserialize)]
pub struct AuthorityQuery {
    token: Option<String>,
}

/// `GET /roles/{role}/authority?token=ID:EPOCH`.
pub async fn get_authority(
    State(state): State<Arc<AppState>>,
    role: Result<Path<String>, PathRejection>,
    query: Result<Query<AuthorityQuery>, QueryRejection>,
) -> Response {
    let started = Instant::now();
    let answer = async {
        let Path(role) = role.map_err(|e| Problem::invalid("role", e.body_text()))?;
        validate_role(&role)?;
        let Query(query) = query.map_err(|e| Problem::invalid("token", e.body_text()))?;
        let token = query.token.ok_or_else(|| {
            Problem::invalid(
                "token",
                "the token query parameter is missing; add ?token=<producer id>:<producer epoch>",
            )
        })?;
        let token = parse_token(&token)?;
        let deadline = started + state.config.request_timeout;
        check(&state, &role, token, deadline)
            .await
            .map_err(|e| unavailable(&state, &role, &e))
    }
    .await;
    let elapsed = started.elapsed();
    match answer {
        Ok(answer) => {
            state.metrics.check(answer.verdict.as_str(), elapsed);
            answer.into_response()
        }
        Err(problem) => {
            state.metrics.check(problem_label(&problem), elapsed);
            problem.into_response()
        }
    }
}

fn problem_label(problem: &Problem) -> &'static str {
    if problem.status == 503 {
        "unavailable"
    } else {
        "invalid"
    }
}

/// One item of a batch check.
#[derive(Debug)]
pub struct CheckItem {
    role: Option<String>,
    token: Option<String>,
}

impl CheckItem {
    /// An item must be a JSON object whose `role` and `token` are strings
    /// (a missing or null one is that item's own 400). Anything else — an
    /// array, a number where a string belongs — fails the whole request.
    fn from_json(index: usize, item: serde_json::Value) -> Result<CheckItem, Problem> {
        let serde_json::Value::Object(fields) = item else {
            return Err(Problem::invalid(
                "body",
                format!("item {index} is not an object {{\"role\": ..., \"token\": ...}}"),
            ));
        };
        let text = |name: &str| match fields.get(name) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(Problem::invalid(
                "body",
                format!("item {index}: {name} must be a string"),
            )),
        };
        Ok(CheckItem {
            role: text("role")?,
            token: text("token")?,
        })
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
    pub checked_at: Option<String>,
    /// Whether the verdict came from the superseded cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached: Option<bool>,
    /// What was wrong, for 400 and 503.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<Problem>,
}

/// The body of a batch answer.
#[derive(Debug, Serialize)]
pub struct BatchResponse {
    /// One answer per item, in order.
    pub results: Vec<BatchAnswer>,
}

/// `POST /authority/check`: a JSON list of `{role, token}`, answered in one
/// round (the checks of one coordinator share requests), each item with
/// its own verdict.
pub async fn post_check(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    let body = match body {
        Ok(body) => body,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return Problem::too_large(format!(
                "the body is over the limit of {} bytes",
                state.config.max_body_bytes
            ))
            .into_response();
        }
        Err(e) => return Problem::invalid("body", e.body_text()).into_response(),
    };
    let items: Vec<serde_json::Value> = match serde_json::from_slice(&body) {
        Ok(items) => items,
        Err(e) => {
            return Problem::invalid(
                "body",
                format!("expected a JSON list of {{\"role\": ..., \"token\": ...}}: {e}"),
            )
            .into_response();
        }
    };
    let items: Vec<CheckItem> = match items
        .into_iter()
        .enumerate()
        .map(|(i, item)| CheckItem::from_json(i, item))
        .collect()
    {
        Ok(items) => items,
        Err(problem) => return problem.into_response(),
    };
    if items.len() > state.config.max_check_items {
        return Problem::too_large(format!(
            "{} items; at most {} per request",
            items.len(),
            state.config.max_check_items
        ))
        .into_response();
    }
    let deadline = started + state.config.request_timeout;
    let parsed: Vec<Result<(String, FencingToken), Problem>> = items
        .iter()
        .map(|item| {
            let role = item
                .role
                .clone()
                .ok_or_else(|| Problem::invalid("role", "the item has no role"))?;
            validate_role(&role)?;
            let token = item
                .token
                .as_deref()
                .ok_or_else(|| Problem::invalid("token", "the item has no token"))?;
            Ok((role, parse_token(token)?))
        })
        .collect();
    let pairs: Vec<(String, FencingToken)> = parsed
        .iter()
        .filter_map(|p| p.as_ref().ok().cloned())
        .collect();
    let mut checked = check_many(&state, &pairs, deadline).await.into_iter();
    let elapsed = started.elapsed();
    let mut results = Vec::with_capacity(items.len());
    for (item, parsed) in items.into_iter().zip(parsed) {
        let result = match parsed {
            Ok((role, _)) => checked
                .next()
                .unwrap_or_else(|| Err(KafkaError::Invalid("unanswered".into())))
                .map_err(|e| unavailable(&state, &role, &e)),
            Err(problem) => Err(problem),
        };
        results.push(match result {
            Ok(answer) => {
                state.metrics.check(answer.verdict.as_str(), elapsed);
                BatchAnswer {
                    status: answer.status().as_u16(),
                    role: Some(answer.role),
                    token: Some(answer.token.to_string()),
                    verdict: Some(answer.verdict),
                    current: Some(answer.current),
                    state: Some(answer.state),
                    checked_at: Some(answer.checked_at),
                    cached: Some(answer.cached),
                    problem: None,
                }
            }
            Err(problem) => {
                state.metrics.check(problem_label(&problem), elapsed);
                BatchAnswer {
                    status: problem.status,
                    role: item.role,
                    token: item.token,
                    verdict: None,
                    current: None,
                    state: None,
                    checked_at: None,
                    cached: None,
                    problem: Some(problem),
                }
            }
        });
    }
    let mut response = Json(BatchResponse { results }).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// One check straight from the coordinator, without the service: the
/// `check` subcommand.
pub async fn check_once(
    client: &crate::kafka::KafkaClient,
    role: &str,
    token: FencingToken,
    now_ms: i64,
) -> Result<CheckAnswer, KafkaError> {
    let described = client.describe_transaction(role).await?;
    let (verdict, current) = judge(token, described.as_ref());
    Ok(CheckAnswer {
        role: role.to_owned(),
        token,
        verdict,
        current,
        state: described.map(|d| d.state),
        checked_at: instant(now_ms),
        cached: false,
    })
}

/// The exit code of `check`: 0 authoritative, 1 not, 2 could not decide.
pub fn exit_code(answer: &Result<CheckAnswer, KafkaError>) -> u8 {
    match answer {
        Ok(a) if a.verdict == Verdict::Authoritative => 0,
        Ok(_) => 1,
        Err(_) => 2,
    }
}
