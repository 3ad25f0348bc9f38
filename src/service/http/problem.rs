//! Every error the service answers: an [`ApiError`], one variant per cause,
//! each with its own problem type and title, written as an RFC 9457 problem
//! body ([`Problem`], shared with the clients in `krabka-authority-types`).
//!
//! The seams' errors convert into it ([`ClusterError`] from Kafka,
//! [`NotReady`] from the watcher), so handlers return `Result<_, ApiError>`
//! and never tell causes apart by status. A 503 never guesses; its
//! `Retry-After` (`--retry-after`) is set by the router for every 503. A
//! 5xx body says what the caller can do and the request id; its cause
//! (broker addresses, file paths, Kafka's and libraries' errors) goes to
//! the log lines of that request only, since without API tokens anyone may
//! read the body.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

pub(crate) use krabka_authority_types::{PROBLEM_JSON, Problem};

use super::request_id::{self, Answering};
use crate::cluster::ClusterError;
use crate::service::watch::NotReady;

/// Why a request was not answered with what it asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ApiError {
    /// 400: bad input in `field` (`role`, `token`, `body`, `Host`, ...).
    Invalid {
        /// The request field at fault.
        field: String,
        /// What is wrong with it.
        detail: String,
    },
    /// 401: no accepted bearer token (with `WWW-Authenticate`). The same
    /// for every path, so it tells nothing of what exists.
    Unauthorized,
    /// 404: nothing is known of what was asked (`field`: `path` for an
    /// unknown endpoint, `role` for a role without records).
    NotFound {
        /// The part of the request that names nothing known.
        field: &'static str,
        /// What is not known, and what to do.
        detail: String,
    },
    /// 405: the path exists, the method does not.
    MethodNotAllowed(String),
    /// 408: the body did not arrive within the request timeout.
    Timeout(String),
    /// 413: the body is over the limit, or holds too many items.
    TooLarge(String),
    /// 415: the body is not of a type the endpoint reads.
    UnsupportedMediaType(String),
    /// 503: the transaction coordinator could not be asked in time, or its
    /// answer could not be confirmed current.
    CoordinatorUnavailable(String),
    /// 503: Kafka refuses the service's credentials or permissions (an
    /// operator must act).
    KafkaDenied(String),
    /// 503: Kafka cannot do what was asked as asked (settings, a topic
    /// that is not compacted).
    KafkaRefused(String),
    /// 503: the coordination topic has not been found, or cannot be read.
    TopicUnavailable(String),
    /// 503: the roster views are not caught up with the topic yet.
    ViewsNotReady(String),
    /// 503: the request outlived the request timeout (the safety net).
    Overdue(String),
    /// 500: a bug; the detail stays generic and the logs say more.
    Internal,
}

impl ApiError {
    /// 400: bad input in `field`.
    pub(crate) fn invalid(field: &str, detail: impl Into<String>) -> ApiError {
        ApiError::Invalid {
            field: field.to_owned(),
            detail: detail.into(),
        }
    }

    /// The problem body of this cause. A 5xx tells the caller what to do
    /// (ask again, and when) and the request id, never its cause: that
    /// names brokers, files and libraries' errors, and goes to the log
    /// lines of the request ([`ApiError::answered`]).
    pub(crate) fn problem(&self) -> Problem {
        let answering = request_id::answering();
        let problem = self.problem_of(answering.as_ref());
        // A 4xx body is the caller's own fault and stays the same for the
        // same fault (every 401 is one body, whatever it asked).
        match answering.and_then(|a| a.id) {
            Some(id) if problem.status >= 500 => problem.with_request_id(id),
            _ => problem,
        }
    }

    fn problem_of(&self, answering: Option<&Answering>) -> Problem {
        let unavailable = |kind: &str, title: &str, what: &str| {
            let when = match answering {
                Some(a) => format!("Ask again in {} s (Retry-After)", a.retry_after_secs),
                None => "Ask again after the seconds of Retry-After".to_owned(),
            };
            let log = match answering.and_then(|a| a.id.as_deref()) {
                Some(id) => format!("the service's log lines of request {id} say why"),
                None => "the service's log says why".to_owned(),
            };
            Problem::new(kind, title, 503, format!("{what} {when}; {log}."))
        };
        let (kind, title, status, detail) = match self {
            ApiError::Invalid { field, detail } => {
                return Problem::invalid(field, detail.clone());
            }
            ApiError::Unauthorized => {
                return Problem::new(
                    "unauthorized",
                    "Unauthorized",
                    401,
                    "a valid bearer token is required: send Authorization: Bearer <token>",
                )
                .with_field("Authorization");
            }
            ApiError::NotFound { field, detail } => {
                return Problem::new("not-found", "Not found", 404, detail.clone())
                    .with_field(*field);
            }
            ApiError::MethodNotAllowed(d) => {
                return Problem::new("method-not-allowed", "Method not allowed", 405, d.clone())
                    .with_field("method");
            }
            ApiError::Timeout(d) => {
                return Problem::new("request-timeout", "Request timeout", 408, d.clone())
                    .with_field("body");
            }
            ApiError::TooLarge(d) => {
                return Problem::new("too-large", "Request too large", 413, d.clone())
                    .with_field("body");
            }
            ApiError::UnsupportedMediaType(d) => {
                return Problem::new(
                    "unsupported-media-type",
                    "Unsupported media type",
                    415,
                    d.clone(),
                )
                .with_field("body");
            }
            ApiError::CoordinatorUnavailable(_) => {
                return unavailable(
                    "coordinator-unavailable",
                    "Coordinator unavailable",
                    "The transaction coordinator could not be asked in time, so nothing was decided: treat it as not authoritative.",
                );
            }
            ApiError::KafkaDenied(_) => {
                return unavailable(
                    "kafka-denied",
                    "Kafka denied access",
                    "Kafka refuses the service's credentials or permissions, so nothing was decided: treat it as not authoritative; an operator must act.",
                );
            }
            ApiError::KafkaRefused(_) => {
                return unavailable(
                    "kafka-refused",
                    "Kafka refused the request",
                    "Kafka cannot do what the service asked as it asked it (a setting, or the coordination topic's configuration), so nothing was decided; an operator must act.",
                );
            }
            ApiError::TopicUnavailable(_) => {
                return unavailable(
                    "topic-unavailable",
                    "Coordination topic unavailable",
                    "The coordination topic cannot be read yet, so no roster view can be shown.",
                );
            }
            ApiError::ViewsNotReady(_) => {
                return unavailable(
                    "views-not-ready",
                    "Roster views not ready",
                    "The roster views have not caught up with the coordination topic yet.",
                );
            }
            ApiError::Overdue(_) => {
                return unavailable(
                    "overdue",
                    "Answer overdue",
                    "The answer took longer than the request timeout, so nothing was decided.",
                );
            }
            ApiError::Internal => (
                "internal",
                "Internal error",
                500,
                "the service failed to answer; see its logs",
            ),
        };
        Problem::new(kind, title, status, detail)
    }

    /// The cause a 5xx keeps from the caller, for the logs.
    fn cause(&self) -> Option<&str> {
        match self {
            ApiError::CoordinatorUnavailable(why)
            | ApiError::KafkaDenied(why)
            | ApiError::KafkaRefused(why)
            | ApiError::TopicUnavailable(why)
            | ApiError::ViewsNotReady(why)
            | ApiError::Overdue(why) => Some(why),
            _ => None,
        }
    }

    /// The problem body as answered: a 5xx's cause is logged at warn, in
    /// the request's span (its log line carries the request id the body
    /// gives).
    pub(crate) fn answered(&self) -> Problem {
        let problem = self.problem();
        if let Some(cause) = self.cause() {
            tracing::warn!(
                problem = problem.short_kind().unwrap_or(""),
                cause,
                "answered {}",
                problem.status
            );
        }
        problem
    }

    /// The HTTP status.
    pub(crate) fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.problem().status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let problem = self.problem();
        write!(f, "{}: {}", problem.title, problem.detail)
    }
}

impl std::error::Error for ApiError {}

/// What an input rule of the types crate refused: always bad input.
impl From<Problem> for ApiError {
    fn from(problem: Problem) -> ApiError {
        ApiError::Invalid {
            field: problem.field.unwrap_or_else(|| "request".to_owned()),
            detail: problem.detail,
        }
    }
}

/// Why the cluster seam could not answer, as the caller is told it.
impl From<ClusterError> for ApiError {
    fn from(e: ClusterError) -> ApiError {
        match e {
            ClusterError::Unavailable(why) => ApiError::CoordinatorUnavailable(why),
            ClusterError::Denied(why) => ApiError::KafkaDenied(why),
            ClusterError::Invalid(why) => ApiError::KafkaRefused(why),
            ClusterError::NoTopic(why) => ApiError::TopicUnavailable(why),
            // Not Kafka's doing: a 500 of its own, never a 503 that blames
            // Kafka; the reason goes to the logs, not to the caller.
            ClusterError::Internal(why) => {
                tracing::error!(error = %why, "internal error of the check path");
                ApiError::Internal
            }
        }
    }
}

/// Why the watcher's views cannot answer yet.
impl From<NotReady> for ApiError {
    fn from(e: NotReady) -> ApiError {
        let detail = format!("the roster views are not ready: {e}");
        match e {
            NotReady::Topic { .. } => ApiError::TopicUnavailable(detail),
            NotReady::CatchingUp { .. }
            | NotReady::Unconfirmed { .. }
            | NotReady::ClusterChanged => ApiError::ViewsNotReady(detail),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = super::json(self.status(), &self.answered());
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if matches!(self, ApiError::Unauthorized) {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"krabka-authority\""),
            );
        }
        response
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// One error of every cause.
    pub(crate) fn every_cause() -> Vec<ApiError> {
        let d = || "detail".to_owned();
        vec![
            ApiError::invalid("token", "no colon"),
            ApiError::Unauthorized,
            ApiError::NotFound {
                field: "path",
                detail: d(),
            },
            ApiError::MethodNotAllowed(d()),
            ApiError::Timeout(d()),
            ApiError::TooLarge(d()),
            ApiError::UnsupportedMediaType(d()),
            ApiError::CoordinatorUnavailable(d()),
            ApiError::KafkaDenied(d()),
            ApiError::KafkaRefused(d()),
            ApiError::TopicUnavailable(d()),
            ApiError::ViewsNotReady(d()),
            ApiError::Overdue(d()),
            ApiError::Internal,
        ]
    }

    #[test]
    fn every_cause_has_its_own_type_and_title() {
        let causes = every_cause();
        let kinds: BTreeSet<String> = causes.iter().map(|e| e.problem().kind).collect();
        let titles: BTreeSet<String> = causes.iter().map(|e| e.problem().title).collect();
        assert_eq!(kinds.len(), causes.len(), "{kinds:?}");
        assert_eq!(titles.len(), causes.len(), "{titles:?}");
        for cause in &causes {
            assert_eq!(cause.status().as_u16(), cause.problem().status);
        }
    }

    #[test]
    fn the_seams_errors_keep_their_cause_for_the_logs_only() {
        let of = |e: ClusterError| ApiError::from(e);
        let unavailable = of(ClusterError::Unavailable(
            "cannot connect to 127.0.0.1:56099: Connection refused".into(),
        ));
        let problem = unavailable.problem();
        assert_eq!(
            (problem.status, problem.title.as_str()),
            (503, "Coordinator unavailable")
        );
        assert_eq!(
            unavailable.cause(),
            Some("cannot connect to 127.0.0.1:56099: Connection refused")
        );
        assert!(!problem.detail.contains("127.0.0.1"), "{}", problem.detail);
        assert!(problem.detail.contains("Ask again"), "{}", problem.detail);
        assert_eq!(
            of(ClusterError::Denied(
                "TRANSACTIONAL_ID_AUTHORIZATION_FAILED".into()
            ))
            .problem()
            .short_kind(),
            Some("kafka-denied")
        );
        assert_eq!(
            of(ClusterError::NoTopic("no such topic".into()))
                .problem()
                .short_kind(),
            Some("topic-unavailable")
        );
        // A bug of the check path is a 500 of its own, not Kafka's refusal,
        // and its reason stays in the logs.
        let internal = of(ClusterError::Internal(
            "the describe batch was dropped".into(),
        ))
        .problem();
        assert_eq!(
            (internal.status, internal.short_kind()),
            (500, Some("internal"))
        );
        assert!(!internal.detail.contains("dropped"), "{}", internal.detail);
        let behind = ApiError::from(NotReady::CatchingUp {
            partition: 3,
            why: Some("cannot connect to 10.0.0.7:9093".into()),
        });
        assert_eq!(
            (behind.problem().status, behind.problem().short_kind()),
            (503, Some("views-not-ready"))
        );
        assert!(behind.cause().is_some_and(|c| c.contains("10.0.0.7:9093")));
        assert!(!behind.problem().detail.contains("10.0.0.7"));
    }

    #[tokio::test]
    async fn a_5xx_problem_carries_the_request_id_and_when_to_ask_again() {
        let answering = Answering {
            id: Some("0badcafe-2a".into()),
            retry_after_secs: 3,
        };
        let problem = request_id::scoped(answering, async {
            ApiError::Overdue("took 6.1 s".into()).problem()
        })
        .await;
        assert_eq!(problem.request_id.as_deref(), Some("0badcafe-2a"));
        assert!(
            problem.detail.contains("Ask again in 3 s"),
            "{}",
            problem.detail
        );
        assert!(
            problem.detail.contains("request 0badcafe-2a"),
            "{}",
            problem.detail
        );
    }

    #[test]
    fn a_problem_answer_is_problem_json_and_never_cached() {
        let response = ApiError::invalid("role", "the role is empty").into_response();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
    }
}
