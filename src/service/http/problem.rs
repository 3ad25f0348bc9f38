//! Every error the service answers: an [`ApiError`], written as an RFC 9457
//! problem body ([`Problem`], shared with the clients in
//! `krabka-authority-types`) with the headers its status calls for.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

pub use krabka_authority_types::{PROBLEM_JSON, Problem};

/// An error answer: the problem body, and for 503 the seconds to wait
/// before retrying (`Retry-After`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    problem: Problem,
    retry_after: Option<u64>,
}

impl ApiError {
    /// 400: bad input in `field`.
    pub fn invalid(field: &str, detail: impl Into<String>) -> ApiError {
        Problem::invalid(field, detail).into()
    }

    /// 401: no accepted bearer token. The same for every path, so it tells
    /// nothing of what exists.
    pub fn unauthorized() -> ApiError {
        Problem::new(
            "unauthorized",
            "Unauthorized",
            401,
            "a valid bearer token is required: Authorization: Bearer <token>",
        )
        .into()
    }

    /// 404: nothing is known of what was asked.
    pub fn not_found(detail: impl Into<String>) -> ApiError {
        Problem::new("not-found", "Not found", 404, detail).into()
    }

    /// 405: the path exists, the method does not.
    pub fn method_not_allowed(detail: impl Into<String>) -> ApiError {
        Problem::new("method-not-allowed", "Method not allowed", 405, detail).into()
    }

    /// 413: the body is over the limit.
    pub fn too_large(detail: impl Into<String>) -> ApiError {
        Problem::new("too-large", "Request too large", 413, detail)
            .with_field("body")
            .into()
    }

    /// 408: the request did not arrive in time.
    pub fn timeout(detail: impl Into<String>) -> ApiError {
        Problem::new("request-timeout", "Request timeout", 408, detail)
            .with_field("body")
            .into()
    }

    /// 415: the body is not of a type the endpoint reads.
    pub fn unsupported_media_type(detail: impl Into<String>) -> ApiError {
        Problem::new(
            "unsupported-media-type",
            "Unsupported media type",
            415,
            detail,
        )
        .with_field("body")
        .into()
    }

    /// 503: Kafka could not be asked; never a guess.
    pub fn unavailable(detail: impl Into<String>, retry_after: u64) -> ApiError {
        ApiError {
            problem: Problem::new("unavailable", "Coordinator unavailable", 503, detail),
            retry_after: Some(retry_after),
        }
    }

    /// 500: a bug; the detail stays generic.
    pub fn internal() -> ApiError {
        Problem::new(
            "internal",
            "Internal error",
            500,
            "the service failed to answer; see its logs",
        )
        .into()
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        self.problem.status
    }

    /// The problem body.
    pub fn problem(&self) -> &Problem {
        &self.problem
    }

    /// The problem body, without the headers.
    pub fn into_problem(self) -> Problem {
        self.problem
    }
}

impl From<Problem> for ApiError {
    fn from(problem: Problem) -> ApiError {
        ApiError {
            problem,
            retry_after: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Json(self.problem)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
