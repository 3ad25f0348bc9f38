//! Every error the service answers: an [`ApiError`], one variant per cause,
//! each with its own problem type and title, written as an RFC 9457 problem
//! body ([`Problem`], shared with the clients in `krabka-authority-types`).
//!
//! The seams' errors convert into it ([`ClusterError`] from Kafka,
//! [`NotReady`] from the watcher), so handlers return `Result<_, ApiError>`
//! and never tell causes apart by status. A 503 never guesses; its
//! `Retry-After` (`--retry-after`) is set by the router for every 503.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

pub(crate) use krabka_authority_types::{PROBLEM_JSON, Problem};

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
    /// 404: nothing is known of what was asked.
    NotFound(String),
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

    /// The problem body of this cause.
    pub(crate) fn problem(&self) -> Problem {
        let (kind, title, status, detail) = match self {
            ApiError::Invalid { field, detail } => {
                return Problem::invalid(field, detail.clone());
            }
            ApiError::Unauthorized => (
                "unauthorized",
                "Unauthorized",
                401,
                "a valid bearer token is required: Authorization: Bearer <token>",
            ),
            ApiError::NotFound(d) => ("not-found", "Not found", 404, d.as_str()),
            ApiError::MethodNotAllowed(d) => {
                ("method-not-allowed", "Method not allowed", 405, d.as_str())
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
            ApiError::CoordinatorUnavailable(d) => (
                "coordinator-unavailable",
                "Coordinator unavailable",
                503,
                d.as_str(),
            ),
            ApiError::KafkaDenied(d) => ("kafka-denied", "Kafka denied access", 503, d.as_str()),
            ApiError::KafkaRefused(d) => (
                "kafka-refused",
                "Kafka refused the request",
                503,
                d.as_str(),
            ),
            ApiError::TopicUnavailable(d) => (
                "topic-unavailable",
                "Coordination topic unavailable",
                503,
                d.as_str(),
            ),
            ApiError::ViewsNotReady(d) => {
                ("views-not-ready", "Roster views not ready", 503, d.as_str())
            }
            ApiError::Overdue(d) => ("overdue", "Answer overdue", 503, d.as_str()),
            ApiError::Internal => (
                "internal",
                "Internal error",
                500,
                "the service failed to answer; see its logs",
            ),
        };
        Problem::new(kind, title, status, detail)
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
        let mut response = (self.status(), Json(self.problem())).into_response();
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
            ApiError::NotFound(d()),
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
    fn the_seams_errors_keep_their_cause() {
        let of = |e: ClusterError| ApiError::from(e).problem();
        let unavailable = of(ClusterError::Unavailable("timed out".into()));
        assert_eq!(
            (unavailable.status, unavailable.title.as_str()),
            (503, "Coordinator unavailable")
        );
        assert_eq!(unavailable.detail, "timed out");
        assert_eq!(
            of(ClusterError::Denied(
                "TRANSACTIONAL_ID_AUTHORIZATION_FAILED".into()
            ))
            .short_kind(),
            Some("kafka-denied")
        );
        assert_eq!(
            of(ClusterError::NoTopic("no such topic".into())).short_kind(),
            Some("topic-unavailable")
        );
        // A bug of the check path is a 500 of its own, not Kafka's refusal,
        // and its reason stays in the logs.
        let internal = of(ClusterError::Internal(
            "the describe batch was dropped".into(),
        ));
        assert_eq!(
            (internal.status, internal.short_kind()),
            (500, Some("internal"))
        );
        assert!(!internal.detail.contains("dropped"), "{}", internal.detail);
        let behind = ApiError::from(NotReady::CatchingUp {
            partition: 3,
            why: None,
        })
        .problem();
        assert_eq!(
            (behind.status, behind.short_kind()),
            (503, Some("views-not-ready"))
        );
        assert_eq!(
            behind.detail,
            "the roster views are not ready: partition 3 is still being read: catching up"
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
