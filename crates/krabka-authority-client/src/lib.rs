//! A client of the authority-check service, and a tower guard built on it.
//!
//! [`AuthorityClient`] asks `GET /roles/{role}/authority` and
//! `POST /authority/check` and returns an [`Outcome`]: a [`Decision`] (the
//! verdict with the coordinator's current pair), an invalid input, or
//! [`Undecided`] with the reason. It fails closed:
//!
//! - Only a 200 whose body says `authoritative` for exactly the token asked,
//!   with that token as the current pair, is a yes
//!   ([`Outcome::is_authoritative`]). A connection error, a timeout, a 5xx,
//!   a body that does not parse or does not answer the question is
//!   undecided, never a yes.
//! - A 503 is retried after its `Retry-After` while the caller's deadline
//!   leaves room, then surfaces as [`Undecided::Unavailable`].
//! - A `superseded` verdict on an earlier epoch of the current pair's
//!   producer id never turns back (a producer id's epoch only grows), so
//!   it is remembered and answered locally without a request
//!   ([`Decision::remembered`]). `authoritative` is never remembered: every
//!   yes comes from a request made for that check. Nor is a refusal of a
//!   token of another producer id: Kafka does not order producer ids (a
//!   role's next one may be lower or higher).
//!
//! The memory of superseded verdicts is tied to the Kafka cluster the
//! service's verdicts name ([`Decision::cluster`]): it answers only within
//! [`AuthorityClientBuilder::superseded_memory_trust`] (10 s by default) of
//! a fresh verdict naming the same cluster (the service asked the
//! coordinator for it: not [`Decision::cached`]), counted from when that
//! request was sent on a clock that counts the time the host was
//! suspended (Linux's `CLOCK_BOOTTIME`), and while no check came back
//! undecided since; a verdict naming another cluster (one rebuilt behind
//! the service, which mints low pairs again) clears it. It is bounded by
//! bytes ([`AuthorityClientBuilder::superseded_memory`], 1 MiB by default): an
//! entry weighs its role's length plus about 225 bytes (200 for the table
//! slot and the allocations, the rest the instant kept), so the default
//! holds about 4,000 entries of short role names. When full, half of it is
//! dropped; a dropped verdict only costs a request.
//!
//! [`AuthorityGuardLayer`] is a tower layer for HTTP services (axum or any
//! tower stack) that lets a request through only when its writer's token is
//! authoritative now: see [`guard`](AuthorityGuardLayer).
//!
//! # Using it
//!
//! The crate needs no Kafka and no server: reqwest, tower and the small
//! `krabka-authority-types` (token, verdict, problem). It is not on
//! crates.io; depend on it by path or by git:
//!
//! ```toml
//! [dependencies]
//! krabka-authority-client = { path = "../krabka-authority/crates/krabka-authority-client" }
//! # or: { git = "<the repository's URL>", package = "krabka-authority-client" }
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! Feature `tls` (on by default) lets the client reach `https://` service
//! URLs (reqwest's rustls, the platform's trust store, and the CAs given to
//! [`AuthorityClientBuilder::ca_certificates_pem`]). With
//! `default-features = false` the client speaks plain HTTP: run it beside
//! the service or behind a TLS-terminating sidecar.
//!
//! ```no_run
//! use krabka_authority_client::{AuthorityClient, FencingToken};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let client = AuthorityClient::builder("http://127.0.0.1:8080")
//!         .bearer_token("s3cret")
//!         .build()?;
//!     // The writer's token, as its leader-election client got it.
//!     let token: FencingToken = "4000:7".parse()?;
//!     let outcome = client.check("orders", token).await;
//!     if outcome.is_authoritative() {
//!         println!("accepting the write");
//!     } else {
//!         // superseded, vacant, unknown, invalid or undecided: refuse.
//!         eprintln!("refusing the write: {outcome}");
//!     }
//!     Ok(())
//! }
//! ```

mod answer;
mod clock;
mod guard;
mod memory;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use tokio::time::Instant;

pub use answer::{Decision, Outcome, Undecided};
pub use guard::{AuthorityGuard, AuthorityGuardLayer, GuardBody, ROLE_HEADER, TOKEN_HEADER};
pub use krabka_authority_types::{FencingToken, Problem, Sighting, TokenError, Verdict};

use krabka_authority_types::{CheckAnswer, Refusal, superseded_for_good, validate_role};
use memory::{Remembered, SupersededMemory};

/// The default bound of the superseded memory, in weighed bytes.
pub const DEFAULT_SUPERSEDED_MEMORY: u64 = 1 << 20;

/// How long after a verdict naming a cluster the memory answers for it.
pub const DEFAULT_SUPERSEDED_MEMORY_TRUST: Duration = Duration::from_secs(10);
/// The shortest wait before retrying a 503, so `Retry-After: 0` cannot spin.
const MIN_RETRY_WAIT: Duration = Duration::from_millis(50);
/// The largest body of a single check's answer (two echoes of a role at
/// most, plus the rest).
const MAX_ANSWER_BYTES: usize = 256 * 1024;
/// How long an idle connection is kept for reuse: below the service's
/// `--header-timeout` (10 s by default), after which the service closes a
/// keep-alive connection waiting for its next request. A connection kept
/// longer may be reused just as the service closes it, and the check fails
/// with a connection error that no service fault caused.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Batch requests stay under the service's default body limit (1 MiB).
const MAX_BATCH_BODY_BYTES: usize = 512 * 1024;

/// A client that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The base URL is not an `http://` URL the client can append paths to.
    #[error("invalid base URL {url:?}: {reason}")]
    BaseUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The bearer token cannot be sent in a header.
    #[error("invalid bearer token: it must be visible ASCII")]
    BearerToken,
    /// A CA certificate does not parse as PEM.
    #[cfg(feature = "tls")]
    #[error("invalid CA certificate: {0}")]
    CaCertificate(String),
    /// reqwest refused the configuration.
    #[error("cannot build the HTTP client: {0}")]
    Http(#[source] reqwest::Error),
}

/// Settings of an [`AuthorityClient`]; start with [`AuthorityClient::builder`].
#[derive(Clone)]
pub struct AuthorityClientBuilder {
    base_url: String,
    bearer: Option<String>,
    connect_timeout: Duration,
    request_timeout: Duration,
    deadline: Duration,
    default_retry_after: Duration,
    superseded_memory: u64,
    superseded_memory_trust: Duration,
    max_batch_items: usize,
    #[cfg(feature = "tls")]
    ca_certificates: Vec<reqwest::Certificate>,
}

impl std::fmt::Debug for AuthorityClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthorityClientBuilder")
            .field("base_url", &self.base_url)
            .field("bearer", &self.bearer.as_ref().map(|_| "<redacted>"))
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("deadline", &self.deadline)
            .field("default_retry_after", &self.default_retry_after)
            .field("superseded_memory", &self.superseded_memory)
            .field("superseded_memory_trust", &self.superseded_memory_trust)
            .field("max_batch_items", &self.max_batch_items)
            .finish()
    }
}

impl AuthorityClientBuilder {
    /// Sends `Authorization: Bearer <token>` (the service's `--api-tokens-file`).
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.bearer = Some(token.into());
        self
    }

    /// Limit on opening a connection (default 1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Limit on one request, body included (default 6 s: the service's
    /// default request timeout plus its one-second safety net, so its own
    /// 503 arrives first). Never more than what is left of the deadline.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The time a check may take, retries of 503 included, when the caller
    /// gives none (default 5 s).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The wait before retrying a 503 that carries no `Retry-After`, or a
    /// batch item that answered 503 (default 1 s, the service's default).
    pub fn default_retry_after(mut self, wait: Duration) -> Self {
        self.default_retry_after = wait;
        self
    }

    /// Bound of the memory of superseded verdicts, in bytes as weighed: an
    /// entry is its role's length plus about 240 bytes (default 1 MiB, some
    /// 4,000 entries of short roles). Zero remembers nothing.
    pub fn superseded_memory(mut self, bytes: u64) -> Self {
        self.superseded_memory = bytes;
        self
    }

    /// How long after sending the request of the service's latest fresh
    /// verdict naming a cluster (not one from its cache) the memory answers
    /// for that cluster, suspends of the host included (default 10 s): a
    /// cluster rebuilt behind the service meanwhile is noticed at the next
    /// verdict, or at the latest this long after the last one was asked.
    pub fn superseded_memory_trust(mut self, trust: Duration) -> Self {
        self.superseded_memory_trust = trust;
        self
    }

    /// Most items per `POST /authority/check` (default 1000, the service's
    /// `--max-check-items`); larger batches are split.
    pub fn max_batch_items(mut self, items: usize) -> Self {
        self.max_batch_items = items.max(1);
        self
    }

    /// Trusts the CA certificates in `pem` (one or more PEM blocks) for an
    /// `https://` service, besides the platform's trust store: a service
    /// behind a private CA, as in most clusters.
    #[cfg(feature = "tls")]
    pub fn ca_certificates_pem(mut self, pem: &[u8]) -> Result<Self, ClientError> {
        let certs = reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|e| ClientError::CaCertificate(e.to_string()))?;
        if certs.is_empty() {
            return Err(ClientError::CaCertificate(
                "no PEM certificate block found".into(),
            ));
        }
        self.ca_certificates.extend(certs);
        Ok(self)
    }

    /// Checks the settings and builds the client.
    pub fn build(self) -> Result<AuthorityClient, ClientError> {
        let base = parse_base(&self.base_url)?;
        let bearer = match &self.bearer {
            Some(token) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| ClientError::BearerToken)?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let http = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            // A check is never redirected; following one could only lead
            // somewhere that does not answer the question.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!(
                "krabka-authority-client/",
                env!("CARGO_PKG_VERSION")
            ));
        #[cfg(feature = "tls")]
        let http = http.tls_certs_merge(self.ca_certificates.iter().cloned());
        let http = http.build().map_err(ClientError::Http)?;
        let superseded =
            SupersededMemory::new(self.superseded_memory, self.superseded_memory_trust);
        Ok(AuthorityClient {
            inner: Arc::new(Inner {
                http,
                base,
                bearer,
                request_timeout: self.request_timeout,
                deadline: self.deadline,
                default_retry_after: self.default_retry_after,
                max_batch_items: self.max_batch_items,
                superseded,
            }),
        })
    }
}

fn parse_base(text: &str) -> Result<Url, ClientError> {
    let invalid = |reason: &str| ClientError::BaseUrl {
        url: text.to_owned(),
        reason: reason.to_owned(),
    };
    let url = Url::parse(text).map_err(|e| invalid(&e.to_string()))?;
    match url.scheme() {
        "http" => {}
        "https" if cfg!(feature = "tls") => {}
        "https" => {
            return Err(invalid(
                "this client was built without the `tls` feature, so it speaks plain HTTP only; \
                 enable the feature or use a TLS-terminating sidecar",
            ));
        }
        _ => return Err(invalid("the scheme must be http or https")),
    }
    if url.cannot_be_a_base() || url.host().is_none() {
        return Err(invalid("no host to send requests to"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("a base URL takes no query or fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("put credentials in bearer_token, not in the URL"));
    }
    Ok(url)
}

/// A client of the authority-check service. Cheap to clone: clones share
/// the connection pool and the superseded memory.
#[derive(Clone)]
pub struct AuthorityClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    base: Url,
    bearer: Option<HeaderValue>,
    request_timeout: Duration,
    deadline: Duration,
    default_retry_after: Duration,
    max_batch_items: usize,
    superseded: SupersededMemory,
}

impl std::fmt::Debug for AuthorityClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = &self.inner;
        f.debug_struct("AuthorityClient")
            .field("base", &inner.base.as_str())
            .field("bearer", &inner.bearer.as_ref().map(|_| "<redacted>"))
            .field("request_timeout", &inner.request_timeout)
            .field("deadline", &inner.deadline)
            .field("superseded_entries", &inner.superseded.usage().0)
            .finish_non_exhaustive()
    }
}

/// How one attempt at a single check ended.
enum Attempt {
    Done(Outcome),
    /// 503: retry after the wait, if the deadline leaves room.
    Busy {
        detail: String,
        retry_after: Option<Duration>,
    },
}

impl AuthorityClient {
    /// Settings for a client of the service at `base_url` (e.g.
    /// `http://krabka-authority:8080`, or with a path prefix).
    pub fn builder(base_url: impl Into<String>) -> AuthorityClientBuilder {
        AuthorityClientBuilder {
            base_url: base_url.into(),
            bearer: None,
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(6),
            deadline: Duration::from_secs(5),
            default_retry_after: Duration::from_secs(1),
            superseded_memory: DEFAULT_SUPERSEDED_MEMORY,
            superseded_memory_trust: DEFAULT_SUPERSEDED_MEMORY_TRUST,
            max_batch_items: 1000,
            #[cfg(feature = "tls")]
            ca_certificates: Vec::new(),
        }
    }

    /// A client with the default settings.
    pub fn new(base_url: impl Into<String>) -> Result<AuthorityClient, ClientError> {
        Self::builder(base_url).build()
    }

    /// The base URL requests go to.
    pub fn base_url(&self) -> &str {
        self.inner.base.as_str()
    }

    /// Superseded verdicts remembered now, and their weight in bytes.
    pub fn superseded_memory_usage(&self) -> (u64, u64) {
        self.inner.superseded.usage()
    }

    /// Is `token` the authority of `role` now? Within the client's default
    /// deadline.
    pub async fn check(&self, role: &str, token: FencingToken) -> Outcome {
        self.check_within(role, token, self.inner.deadline).await
    }

    /// [`check`](Self::check) within `budget`: 503s are retried after their
    /// `Retry-After` while the budget leaves room.
    pub async fn check_within(&self, role: &str, token: FencingToken, budget: Duration) -> Outcome {
        if let Some(problem) = refuse_locally(role, token) {
            return Outcome::Invalid(problem);
        }
        if let Some(decision) = self.recall(role, token).await {
            return Outcome::Decided(decision);
        }
        let deadline = deadline_after(budget);
        let mut attempts = 0;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Outcome::Undecided(Undecided::Timeout(budget));
            }
            attempts += 1;
            let asked_at = clock::boot_now();
            match self.attempt(role, token, remaining).await {
                Attempt::Done(outcome) => {
                    self.learn(&outcome, asked_at).await;
                    return outcome;
                }
                Attempt::Busy {
                    detail,
                    retry_after,
                } => {
                    self.inner.superseded.distrust();
                    let wait = self.wait_for(retry_after);
                    if wait >= deadline.saturating_duration_since(Instant::now()) {
                        return Outcome::Undecided(Undecided::Unavailable {
                            detail,
                            retry_after,
                            attempts,
                        });
                    }
                    tracing::debug!(role, %token, ?wait, detail, "the service answered 503; retrying");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    async fn attempt(&self, role: &str, token: FencingToken, remaining: Duration) -> Attempt {
        let mut url = self.inner.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().extend(["roles", role, "authority"]);
        }
        url.query_pairs_mut()
            .append_pair("token", &token.to_string());
        let timeout = self.inner.request_timeout.min(remaining);
        let sent = self.request(self.inner.http.get(url), timeout).send().await;
        let response = match sent {
            Ok(response) => response,
            Err(e) => return Attempt::Done(Outcome::Undecided(classify(&e, timeout))),
        };
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let body = match read_capped(response, MAX_ANSWER_BYTES, timeout).await {
            Ok(body) => body,
            Err(undecided) => return Attempt::Done(Outcome::Undecided(undecided)),
        };
        match status {
            StatusCode::OK | StatusCode::CONFLICT => {
                let decided = serde_json::from_slice::<CheckAnswer>(&body)
                    .map_err(|e| Undecided::Malformed(format!("HTTP {status}: {e}")))
                    .and_then(|wire| answer::decision_of(wire, role, token, status.as_u16()));
                Attempt::Done(match decided {
                    Ok(decision) => Outcome::Decided(decision),
                    Err(undecided) => Outcome::Undecided(undecided),
                })
            }
            StatusCode::BAD_REQUEST => {
                Attempt::Done(match serde_json::from_slice::<Problem>(&body) {
                    Ok(problem) => Outcome::Invalid(problem),
                    Err(e) => Outcome::Undecided(Undecided::Malformed(format!("HTTP 400: {e}"))),
                })
            }
            StatusCode::SERVICE_UNAVAILABLE => Attempt::Busy {
                detail: detail_of(&body),
                retry_after,
            },
            _ => Attempt::Done(Outcome::Undecided(Undecided::Status {
                status: status.as_u16(),
                detail: detail_of(&body),
            })),
        }
    }

    /// Checks many `(role, token)` pairs, one [`Outcome`] per item in order,
    /// within the client's default deadline.
    pub async fn check_batch<R: AsRef<str>>(&self, items: &[(R, FencingToken)]) -> Vec<Outcome> {
        self.check_batch_within(items, self.inner.deadline).await
    }

    /// [`check_batch`](Self::check_batch) within `budget`. Remembered
    /// verdicts are answered locally; the rest go in `POST /authority/check`
    /// requests (split by item count and body size, sent concurrently).
    /// Items that answer 503 are asked again after the wait while the
    /// budget leaves room.
    pub async fn check_batch_within<R: AsRef<str>>(
        &self,
        items: &[(R, FencingToken)],
        budget: Duration,
    ) -> Vec<Outcome> {
        let deadline = deadline_after(budget);
        let mut outcomes: Vec<Option<Outcome>> = Vec::with_capacity(items.len());
        let mut pending = Vec::new();
        for (i, (role, token)) in items.iter().enumerate() {
            let role = role.as_ref();
            if let Some(problem) = refuse_locally(role, *token) {
                outcomes.push(Some(Outcome::Invalid(problem)));
            } else if let Some(decision) = self.recall(role, *token).await {
                outcomes.push(Some(Outcome::Decided(decision)));
            } else {
                outcomes.push(None);
                pending.push(i);
            }
        }
        let mut attempts = 0;
        let mut decided = false;
        // Items answered 503 so far: (detail, Retry-After) by index.
        let mut busy: Vec<(usize, String, Option<Duration>)> = Vec::new();
        while !pending.is_empty() {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                for &i in &pending {
                    outcomes[i] = Some(Outcome::Undecided(Undecided::Timeout(budget)));
                }
                break;
            }
            attempts += 1;
            let chunks = self.chunks(items, &pending);
            let asked_at = clock::boot_now();
            let answers = futures_util::future::join_all(
                chunks
                    .iter()
                    .map(|chunk| self.batch_attempt(items, chunk, remaining)),
            )
            .await;
            busy.clear();
            for (chunk, answer) in chunks.iter().zip(answers) {
                for (&i, result) in chunk.iter().zip(answer) {
                    match result {
                        Ok(outcome) => {
                            decided |= outcome.decision().is_some();
                            self.learn(&outcome, asked_at).await;
                            outcomes[i] = Some(outcome);
                        }
                        Err((detail, retry_after)) => busy.push((i, detail, retry_after)),
                    }
                }
            }
            // 503s and no verdict in the whole call: the cluster may be
            // going away.
            if !busy.is_empty() && !decided {
                self.inner.superseded.distrust();
            }
            pending = busy.iter().map(|(i, _, _)| *i).collect();
            if pending.is_empty() {
                break;
            }
            let asked = busy.iter().filter_map(|(_, _, r)| *r).max();
            let wait = self.wait_for(asked);
            if wait >= deadline.saturating_duration_since(Instant::now()) {
                for (i, detail, retry_after) in busy.drain(..) {
                    outcomes[i] = Some(Outcome::Undecided(Undecided::Unavailable {
                        detail,
                        retry_after,
                        attempts,
                    }));
                }
                break;
            }
            tokio::time::sleep(wait).await;
        }
        outcomes
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    Outcome::Undecided(Undecided::Malformed("the item got no answer".into()))
                })
            })
            .collect()
    }

    /// Splits the pending items into requests the service takes.
    fn chunks<R: AsRef<str>>(
        &self,
        items: &[(R, FencingToken)],
        pending: &[usize],
    ) -> Vec<Vec<usize>> {
        let mut chunks = Vec::new();
        let mut chunk = Vec::new();
        let mut bytes = 2;
        for &i in pending {
            let (role, token) = &items[i];
            // Quoting can grow a role up to six times (\u00XX).
            let size = role.as_ref().len() * 6 + token.to_string().len() + 24;
            if !chunk.is_empty()
                && (chunk.len() >= self.inner.max_batch_items
                    || bytes + size > MAX_BATCH_BODY_BYTES)
            {
                chunks.push(std::mem::take(&mut chunk));
                bytes = 2;
            }
            chunk.push(i);
            bytes += size;
        }
        if !chunk.is_empty() {
            chunks.push(chunk);
        }
        chunks
    }

    /// One `POST /authority/check` for the items at `chunk`: per item, an
    /// outcome, or the 503 detail and wait to try it again.
    async fn batch_attempt<R: AsRef<str>>(
        &self,
        items: &[(R, FencingToken)],
        chunk: &[usize],
        remaining: Duration,
    ) -> Vec<Result<Outcome, (String, Option<Duration>)>> {
        let all = |outcome: Outcome| chunk.iter().map(|_| Ok(outcome.clone())).collect();
        let body: Vec<serde_json::Value> = chunk
            .iter()
            .map(|&i| serde_json::json!({"role": items[i].0.as_ref(), "token": items[i].1.to_string()}))
            .collect();
        let mut url = self.inner.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().extend(["authority", "check"]);
        }
        let timeout = self.inner.request_timeout.min(remaining);
        let sent = self
            .request(self.inner.http.post(url).json(&body), timeout)
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(e) => return all(Outcome::Undecided(classify(&e, timeout))),
        };
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let cap = MAX_ANSWER_BYTES.saturating_mul(chunk.len());
        let body = match read_capped(response, cap, timeout).await {
            Ok(body) => body,
            Err(undecided) => return all(Outcome::Undecided(undecided)),
        };
        match status {
            StatusCode::OK => {}
            StatusCode::SERVICE_UNAVAILABLE => {
                let detail = detail_of(&body);
                return chunk
                    .iter()
                    .map(|_| Err((detail.clone(), retry_after)))
                    .collect();
            }
            _ => {
                return all(Outcome::Undecided(Undecided::Status {
                    status: status.as_u16(),
                    detail: detail_of(&body),
                }));
            }
        }
        #[derive(serde::Deserialize)]
        struct Results {
            results: Vec<serde_json::Value>,
        }
        let results = match serde_json::from_slice::<Results>(&body) {
            Ok(r) if r.results.len() == chunk.len() => r.results,
            Ok(r) => {
                return all(Outcome::Undecided(Undecided::Malformed(format!(
                    "{} results for {} items",
                    r.results.len(),
                    chunk.len()
                ))));
            }
            Err(e) => return all(Outcome::Undecided(Undecided::Malformed(e.to_string()))),
        };
        chunk
            .iter()
            .zip(results)
            .map(|(&i, result)| {
                let (role, token) = (items[i].0.as_ref(), items[i].1);
                batch_item(role, token, result)
            })
            .collect()
    }

    fn request(
        &self,
        builder: reqwest::RequestBuilder,
        timeout: Duration,
    ) -> reqwest::RequestBuilder {
        let builder = builder.timeout(timeout);
        match &self.inner.bearer {
            Some(value) => builder.header(AUTHORIZATION, value.clone()),
            None => builder,
        }
    }

    fn wait_for(&self, retry_after: Option<Duration>) -> Duration {
        retry_after
            .unwrap_or(self.inner.default_retry_after)
            .max(MIN_RETRY_WAIT)
    }

    async fn recall(&self, role: &str, token: FencingToken) -> Option<Decision> {
        let (seen, cluster) = self.inner.superseded.get(role, token)?;
        Some(Decision {
            role: role.to_owned(),
            token,
            verdict: Verdict::Superseded,
            current: None,
            state: None,
            superseded_by: Some(Sighting {
                pair: seen.by,
                seen_at: seen.seen_at.clone(),
            }),
            checked_at: seen.seen_at,
            cached: false,
            remembered: true,
            cluster,
        })
    }

    /// Learns from an outcome the service gave to a request sent at
    /// `asked_at` (boot clock): the cluster a verdict speaks for, a
    /// superseded verdict that holds for good; an undecided check distrusts
    /// the memory until the next verdict.
    async fn learn(&self, outcome: &Outcome, asked_at: Duration) {
        let memory = &self.inner.superseded;
        let decision = match outcome {
            Outcome::Decided(decision) if !decision.remembered => decision,
            Outcome::Undecided(_) => return memory.distrust(),
            _ => return,
        };
        // A fresh verdict: the coordinator was asked after the request was
        // sent, so the window counts from then. A cached one carries no
        // word of a known age (see the memory): it renews nothing.
        memory.named(&decision.cluster, (!decision.cached).then_some(asked_at));
        if let Some(by) = decision
            .superseded_by
            .as_ref()
            .filter(|by| superseded_for_good(decision.token, by.pair))
        {
            let seen = Remembered {
                by: by.pair,
                seen_at: by.seen_at.clone(),
            };
            memory.insert(
                &decision.cluster,
                decision.role.clone(),
                decision.token,
                seen,
            );
        }
    }
}

/// One item of a batch answer.
fn batch_item(
    role: &str,
    token: FencingToken,
    result: serde_json::Value,
) -> Result<Outcome, (String, Option<Duration>)> {
    let status = result.get("status").and_then(serde_json::Value::as_u64);
    let malformed = |why: String| Ok(Outcome::Undecided(Undecided::Malformed(why)));
    match status {
        Some(status @ (200 | 409)) => {
            let decided = serde_json::from_value::<CheckAnswer>(result)
                .map_err(|e| Undecided::Malformed(format!("item with status {status}: {e}")))
                .and_then(|wire| answer::decision_of(wire, role, token, status as u16));
            Ok(match decided {
                Ok(decision) => Outcome::Decided(decision),
                Err(undecided) => Outcome::Undecided(undecided),
            })
        }
        Some(status @ (400 | 503)) => {
            let item = match serde_json::from_value::<Refusal>(result) {
                Ok(item) => item,
                Err(e) => return malformed(format!("item with status {status}: {e}")),
            };
            if item.role.as_deref() != Some(role) || item.token != Some(token.to_string()) {
                return malformed(format!(
                    "answers ({:?}, {:?}), not ({role:?}, {token})",
                    item.role, item.token
                ));
            }
            if status == 400 {
                Ok(Outcome::Invalid(item.problem))
            } else {
                Err((item.problem.detail, None))
            }
        }
        _ => malformed(format!("an item with status {status:?}")),
    }
}

/// `budget` from now; a budget past what the clock can hold waits a year.
fn deadline_after(budget: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(budget)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// What the client refuses before asking: the service would answer 400.
fn refuse_locally(role: &str, token: FencingToken) -> Option<Problem> {
    if let Err(problem) = validate_role(role) {
        return Some(problem);
    }
    if !token.minted() {
        return Some(Problem::invalid(
            "token",
            "the token was never minted (-1:-1)",
        ));
    }
    None
}

/// A reqwest failure as a reason.
fn classify(e: &reqwest::Error, timeout: Duration) -> Undecided {
    if e.is_timeout() {
        return Undecided::Timeout(timeout);
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    Undecided::Transport(text)
}

/// `Retry-After` as delta-seconds or an HTTP date.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Reads a body of at most `cap` bytes; more is a malformed answer.
async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
    timeout: Duration,
) -> Result<Vec<u8>, Undecided> {
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > cap {
                    return Err(Undecided::Malformed(format!(
                        "the body is over {cap} bytes"
                    )));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err(classify(&e, timeout)),
        }
    }
}

/// A problem's detail, or the start of a body that is not one.
fn detail_of(body: &[u8]) -> String {
    if let Ok(problem) = serde_json::from_slice::<Problem>(body) {
        return problem.detail;
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".into();
    }
    match text.char_indices().nth(200) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}
