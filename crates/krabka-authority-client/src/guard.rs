//! A tower layer that admits a request only from the role's authority.
//!
//! A writer sends its role and fencing token with every write
//! (`Krabka-Role: orders`, `Krabka-Token: 4000:7`); the guard asks the
//! service before the inner service sees the request:
//!
//! | check | answer |
//! |---|---|
//! | `authoritative` | the inner service runs; the [`Decision`] is in the request's extensions |
//! | `superseded`, `vacant`, `unknown` | 409 problem with the verdict and the current pair |
//! | undecided (503, unreachable, timeout, garbage) | 503 problem with `Retry-After` |
//! | missing or malformed role or token | 400 problem naming the header |
//!
//! Every request that reaches the inner service had its own `authoritative`
//! answer, from a request made for it: the client never remembers a yes.
//! The answer is about the instant of the check; the fence that makes a
//! deposed writer harmless is still the broker's (or the sink's own
//! compare-and-set on the token).
//!
//! ```no_run
//! use axum::{Router, routing::post};
//! use krabka_authority_client::{AuthorityClient, AuthorityGuardLayer};
//!
//! # fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = AuthorityClient::new("http://127.0.0.1:8080")?;
//! let app: Router = Router::new()
//!     .route("/write", post(|| async { "stored" }))
//!     // Writers name their role in Krabka-Role; `.with_role("orders")`
//!     // would fix it instead.
//!     .route_layer(AuthorityGuardLayer::new(client));
//! # Ok(()) }
//! ```

use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::Body as HttpBody;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use krabka_authority_types::{MAX_ROLE_BYTES, PROBLEM_BASE, PROBLEM_JSON, TOKEN_FORM};
use tower::{BoxError, Layer, Service};

use super::{AuthorityClient, Decision, FencingToken, Outcome, Problem, Undecided, Verdict};

/// The body of a guarded service's responses: the inner service's body, or
/// the guard's own problem JSON. axum takes it as is (`Response<GuardBody>`
/// is `IntoResponse`).
pub type GuardBody = UnsyncBoxBody<Bytes, BoxError>;

type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// The header naming the writer's role (`Krabka-Role`).
pub const ROLE_HEADER: HeaderName = HeaderName::from_static("krabka-role");
/// The header carrying the writer's fencing token (`Krabka-Token`,
/// `<producer id>:<producer epoch>`).
pub const TOKEN_HEADER: HeaderName = HeaderName::from_static("krabka-token");

#[derive(Clone, Debug)]
struct GuardConfig {
    client: AuthorityClient,
    role: Option<String>,
    deadline: Option<Duration>,
    retry_after: Duration,
}

/// Wraps a service in an [`AuthorityGuard`]. See the [module](self) docs.
#[derive(Clone, Debug)]
pub struct AuthorityGuardLayer {
    config: Arc<GuardConfig>,
}

impl AuthorityGuardLayer {
    /// A guard that asks the service through `client`; the role comes from
    /// each request's `Krabka-Role` header.
    pub fn new(client: AuthorityClient) -> AuthorityGuardLayer {
        AuthorityGuardLayer {
            config: Arc::new(GuardConfig {
                client,
                role: None,
                deadline: None,
                retry_after: Duration::from_secs(1),
            }),
        }
    }

    /// Guards for this role only: `Krabka-Role` becomes optional, and one
    /// that names another role is refused with 400, so a misrouted writer
    /// learns why.
    pub fn with_role(mut self, role: impl Into<String>) -> AuthorityGuardLayer {
        Arc::make_mut(&mut self.config).role = Some(role.into());
        self
    }

    /// The time a check may take, retries of 503 included (default: the
    /// client's deadline). Past it the request gets 503.
    pub fn with_deadline(mut self, deadline: Duration) -> AuthorityGuardLayer {
        Arc::make_mut(&mut self.config).deadline = Some(deadline);
        self
    }

    /// The `Retry-After` of a 503 when the service gave none (default 1 s).
    pub fn with_retry_after(mut self, wait: Duration) -> AuthorityGuardLayer {
        Arc::make_mut(&mut self.config).retry_after = wait;
        self
    }
}

impl<S> Layer<S> for AuthorityGuardLayer {
    type Service = AuthorityGuard<S>;

    fn layer(&self, inner: S) -> AuthorityGuard<S> {
        AuthorityGuard {
            inner,
            config: self.config.clone(),
        }
    }
}

/// A service that runs its inner service only for the role's authority.
#[derive(Clone, Debug)]
pub struct AuthorityGuard<S> {
    inner: S,
    config: Arc<GuardConfig>,
}

impl<S, B, ResBody> Service<Request<B>> for AuthorityGuard<S>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<GuardBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<GuardBody>, S::Error>>;

    /// Always ready: the inner service's readiness is awaited after the
    /// check, so a slow check holds no slot of the inner service.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let config = self.config.clone();
        let mut inner = self.inner.clone();
        Box::pin(async move {
            let (role, token) = match credentials(&config, request.headers()) {
                Ok(credentials) => credentials,
                Err(problem) => return Ok(problem_response(&problem, None)),
            };
            let outcome = match config.deadline {
                Some(deadline) => config.client.check_within(&role, token, deadline).await,
                None => config.client.check(&role, token).await,
            };
            match outcome {
                Outcome::Decided(decision)
                    if decision.verdict == Verdict::Authoritative && !decision.remembered =>
                {
                    request.extensions_mut().insert(decision);
                    poll_fn(|cx| inner.poll_ready(cx)).await?;
                    let response = inner.call(request).await?;
                    Ok(response.map(|body| body.map_err(Into::into).boxed_unsync()))
                }
                Outcome::Decided(decision) => {
                    tracing::debug!(role, %token, verdict = %decision.verdict, "guard: refused a write");
                    Ok(refused(&decision))
                }
                Outcome::Invalid(mut problem) => {
                    problem.field = problem.field.map(|field| header_of(&field));
                    Ok(problem_response(&problem, None))
                }
                Outcome::Undecided(why) => {
                    tracing::warn!(role, %token, reason = %why, "guard: undecided; answering 503");
                    let wait = why.retry_after().unwrap_or(config.retry_after);
                    Ok(undecided(&why, wait))
                }
            }
        })
    }
}

/// The header a service field came from.
fn header_of(field: &str) -> String {
    match field {
        "role" => "Krabka-Role".into(),
        "token" => "Krabka-Token".into(),
        other => other.into(),
    }
}

/// The role and token of a request, or the 400 problem saying what is wrong.
fn credentials(
    config: &GuardConfig,
    headers: &HeaderMap,
) -> Result<(String, FencingToken), Problem> {
    // The problem type and title of the service's own 400s; `field` names
    // the header the writer sent.
    let invalid = |header: &str, detail: String| {
        let kind = if header == "Krabka-Role" {
            "role"
        } else {
            "token"
        };
        let mut problem = Problem::invalid(kind, detail);
        problem.field = Some(header.to_owned());
        problem
    };
    let single = |name: &HeaderName, label: &str| -> Result<Option<String>, Problem> {
        let mut values = headers.get_all(name).iter();
        let Some(value) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(invalid(label, format!("more than one {label} header")));
        }
        std::str::from_utf8(value.as_bytes())
            .map(|v| Some(v.trim().to_owned()))
            .map_err(|_| invalid(label, format!("the {label} header is not UTF-8")))
    };

    let sent_role = single(&ROLE_HEADER, "Krabka-Role")?;
    let role = match (&config.role, sent_role) {
        (Some(fixed), Some(sent)) if *fixed != sent => {
            return Err(invalid(
                "Krabka-Role",
                format!("this endpoint is guarded for role {fixed:?}, not {sent:?}"),
            ));
        }
        (Some(fixed), _) => fixed.clone(),
        (None, Some(sent)) => sent,
        (None, None) => {
            return Err(invalid(
                "Krabka-Role",
                "the Krabka-Role header is missing; name the role the writer holds".into(),
            ));
        }
    };
    if role.is_empty() || role.len() > MAX_ROLE_BYTES {
        return Err(invalid(
            "Krabka-Role",
            format!(
                "the role must be 1 to {MAX_ROLE_BYTES} bytes; it is {}",
                role.len()
            ),
        ));
    }
    let Some(text) = single(&TOKEN_HEADER, "Krabka-Token")? else {
        return Err(invalid(
            "Krabka-Token",
            "the Krabka-Token header is missing; send the writer's fencing token, <producer id>:<producer epoch>".into(),
        ));
    };
    let token = text
        .parse::<FencingToken>()
        .map_err(|e| invalid("Krabka-Token", format!("{e}; {TOKEN_FORM}")))?;
    Ok((role, token))
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<GuardBody> {
    let body = Full::new(Bytes::from(body.to_string()))
        .map_err(|never| match never {})
        .boxed_unsync();
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn problem_response(problem: &Problem, retry_after: Option<Duration>) -> Response<GuardBody> {
    let status = StatusCode::from_u16(problem.status).unwrap_or(StatusCode::BAD_REQUEST);
    let body = serde_json::to_value(problem).unwrap_or_default();
    let mut response = json_response(status, &body);
    if let Some(wait) = retry_after {
        response
            .headers_mut()
            .insert(RETRY_AFTER, retry_seconds(wait));
    }
    response
}

/// 409: the writer is not the role's authority, with the verdict's reason.
fn refused(decision: &Decision) -> Response<GuardBody> {
    let body = serde_json::json!({
        "type": format!("{PROBLEM_BASE}not-authoritative"),
        "title": "Not the role's authority",
        "status": 409,
        "detail": decision.to_string(),
        "role": decision.role,
        "token": decision.token,
        "verdict": decision.verdict,
        "current": decision.current,
        "state": decision.state,
        "supersededBy": decision.superseded_by,
        "checkedAt": decision.checked_at,
        "cached": decision.cached,
        "remembered": decision.remembered,
        "cluster": decision.cluster,
    });
    json_response(StatusCode::CONFLICT, &body)
}

/// 503: no verdict; the writer may retry after the wait.
fn undecided(why: &Undecided, wait: Duration) -> Response<GuardBody> {
    let problem = Problem::new("undecided", "Authority undecided", 503, why.to_string());
    problem_response(&problem, Some(wait))
}

/// Whole seconds, rounded up, at least 1.
fn retry_seconds(wait: Duration) -> HeaderValue {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    HeaderValue::from(seconds.max(1))
}
