//! What a check can come to: a verdict, a refusal of the input, or no
//! decision. Only [`Outcome::is_authoritative`] is a yes.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use krabka_authority_types::{CheckAnswer, FencingToken, Problem, Sighting, Verdict};

/// A verdict with its reason: what the coordinator's current pair was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// The role asked about.
    pub role: String,
    /// The token checked.
    pub token: FencingToken,
    /// The verdict.
    pub verdict: Verdict,
    /// The coordinator's current pair, asked for this check; `None` when
    /// the role is vacant, and when the verdict was remembered (by the
    /// service's cache or this client's memory: nobody asked now).
    pub current: Option<FencingToken>,
    /// The coordinator's transaction state; `None` where `current` is.
    pub state: Option<String>,
    /// For a `superseded` verdict: the pair under which the token is over,
    /// and when the service saw it current.
    pub superseded_by: Option<Sighting>,
    /// When the verdict was reached (RFC 3339, the service clock).
    pub checked_at: String,
    /// The service answered a `superseded` from its own cache.
    pub cached: bool,
    /// This client answered a `superseded` from its local memory, without
    /// a request.
    pub remembered: bool,
    /// The Kafka cluster the verdict speaks for.
    pub cluster: String,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "token {} of role {:?} is {}",
            self.token, self.role, self.verdict
        )?;
        match (self.verdict, &self.superseded_by, self.current) {
            (Verdict::Authoritative, _, _) => Ok(()),
            (Verdict::Superseded, Some(by), current) => {
                write!(f, " (by pair {}, seen at {})", by.pair, by.seen_at)?;
                match current {
                    Some(current) if current != by.pair => write!(f, "; current pair {current}"),
                    _ => Ok(()),
                }
            }
            (_, _, Some(current)) => write!(f, " (current pair {current})"),
            (Verdict::Vacant, _, None) => f.write_str(" (no current pair)"),
            (_, _, None) => Ok(()),
        }
    }
}

/// Why no verdict was reached. Never a yes: a caller that cannot decide
/// must refuse (or retry), not proceed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Undecided {
    /// The service answered 503 (it could not ask the coordinator in time)
    /// until the deadline left no room for another try.
    #[error("the service could not decide ({attempts} attempts): {detail}")]
    Unavailable {
        /// The service's reason, from the last 503.
        detail: String,
        /// The last `Retry-After` the service sent.
        retry_after: Option<Duration>,
        /// How many requests were made.
        attempts: u32,
    },
    /// The service could not be reached (connect, reset, protocol error).
    #[error("could not reach the service: {0}")]
    Transport(String),
    /// No answer within the deadline or the request timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// An HTTP status the contract does not give for a check (401, 404,
    /// 413, 5xx other than 503, ...).
    #[error("unexpected HTTP status {status}: {detail}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The problem's detail, or the start of the body.
        detail: String,
    },
    /// The body does not parse, or does not answer the question asked.
    #[error("the answer does not parse: {0}")]
    Malformed(String),
}

impl Undecided {
    /// How long the service asked to wait, when it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Undecided::Unavailable { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// The outcome of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The service reached a verdict (or this client remembered one).
    Decided(Decision),
    /// The input was refused (HTTP 400): a malformed role or token.
    Invalid(Problem),
    /// No verdict; see the reason.
    Undecided(Undecided),
}

impl Outcome {
    /// True only for an `authoritative` verdict obtained from the service
    /// for this check: the one answer that lets a write through.
    pub fn is_authoritative(&self) -> bool {
        matches!(self, Outcome::Decided(d) if d.verdict == Verdict::Authoritative)
    }

    /// The verdict, when one was reached.
    pub fn verdict(&self) -> Option<Verdict> {
        match self {
            Outcome::Decided(d) => Some(d.verdict),
            _ => None,
        }
    }

    /// The decision, when one was reached.
    pub fn decision(&self) -> Option<&Decision> {
        match self {
            Outcome::Decided(d) => Some(d),
            _ => None,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Decided(d) => d.fmt(f),
            Outcome::Invalid(p) => write!(
                f,
                "invalid {}: {}",
                p.field.as_deref().unwrap_or("input"),
                p.detail
            ),
            Outcome::Undecided(u) => write!(f, "undecided: {u}"),
        }
    }
}

/// Turns a verdict body of the service into a decision on `(role, token)`,
/// refusing one that answers another question or breaks the types crate's
/// rules ([`CheckAnswer::contradiction`]): such a body proves nothing,
/// least of all a yes.
pub(crate) fn decision_of(
    answer: CheckAnswer,
    role: &str,
    token: FencingToken,
    status: u16,
) -> Result<Decision, Undecided> {
    if let Some(why) = answer.contradiction(role, token, status) {
        return Err(Undecided::Malformed(why));
    }
    Ok(Decision {
        role: answer.role,
        token,
        verdict: answer.verdict,
        current: answer.current,
        state: answer.state,
        superseded_by: answer.superseded_by,
        checked_at: answer.checked_at,
        cached: answer.cached,
        remembered: false,
        cluster: answer.cluster,
    })
}
