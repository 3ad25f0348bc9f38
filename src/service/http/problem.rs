//! RFC 9457 problem details: every error the service answers.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// The media type of a problem body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// A problem answer: status, a short title, what went wrong, and for bad
/// input the field at fault.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// A URI naming the problem type.
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary of the type.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong in this case.
    pub detail: String,
    /// The request field at fault (`token`, `role`, `body`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Seconds to wait before retrying (503 only).
    #[serde(skip)]
    pub retry_after: Option<u64>,
}

const BASE: &str = "urn:krabka-authority:problem:";

impl Problem {
    /// 400: bad input in `field`.
    pub fn invalid(field: &str, detail: impl Into<String>) -> Problem {
        Problem {
            kind: format!("{BASE}invalid-{field}"),
            title: format!("Invalid {field}"),
            status: 400,
            detail: detail.into(),
            field: Some(field.to_owned()),
            retry_after: None,
        }
    }

    /// 401: no accepted bearer token. The same for every path, so it tells
    /// nothing of what exists.
    pub fn unauthorized() -> Problem {
        Problem {
            kind: format!("{BASE}unauthorized"),
            title: "Unauthorized".into(),
            status: 401,
            detail: "a valid bearer token is required: Authorization: Bearer <token>".into(),
            field: None,
            retry_after: None,
        }
    }

    /// 404: nothing is known of what was asked.
    pub fn not_found(detail: impl Into<String>) -> Problem {
        Problem {
            kind: format!("{BASE}not-found"),
            title: "Not found".into(),
            status: 404,
            detail: detail.into(),
            field: None,
            retry_after: None,
        }
    }

    /// 413: the body is over the limit.
    pub fn too_large(detail: impl Into<String>) -> Problem {
        Problem {
            kind: format!("{BASE}too-large"),
            title: "Request too large".into(),
            status: 413,
            detail: detail.into(),
            field: Some("body".into()),
            retry_after: None,
        }
    }

    /// 408: the request did not arrive in time.
    pub fn timeout(detail: impl Into<String>) -> Problem {
        Problem {
            kind: format!("{BASE}request-timeout"),
            title: "Request timeout".into(),
            status: 408,
            detail: detail.into(),
            field: Some("body".into()),
            retry_after: None,
        }
    }

    /// 415: the body is not of a type the endpoint reads.
    pub fn unsupported_media_type(detail: impl Into<String>) -> Problem {
        Problem {
            kind: format!("{BASE}unsupported-media-type"),
            title: "Unsupported media type".into(),
            status: 415,
            detail: detail.into(),
            field: Some("body".into()),
            retry_after: None,
        }
    }

    /// 503: Kafka could not be asked; never a guess.
    pub fn unavailable(detail: impl Into<String>, retry_after: u64) -> Problem {
        Problem {
            kind: format!("{BASE}unavailable"),
            title: "Coordinator unavailable".into(),
            status: 503,
            detail: detail.into(),
            field: None,
            retry_after: Some(retry_after),
        }
    }

    /// 500: a bug; the detail stays generic.
    pub fn internal() -> Problem {
        Problem {
            kind: format!("{BASE}internal"),
            title: "Internal error".into(),
            status: 500,
            detail: "the service failed to answer; see its logs".into(),
            field: None,
            retry_after: None,
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let retry_after = self.retry_after;
        let mut response = (status, Json(self)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if let Some(secs) = retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
