//! RFC 9457 problem details, the body of every error answer of the service.
//! The service writes them; clients and guards read them (and a guard
//! writes its own), so the shape lives here, once.

use serde::{Deserialize, Serialize};

/// The media type of a problem body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The prefix of every problem type URI.
pub const PROBLEM_BASE: &str = "urn:krabka-authority:problem:";

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
    /// The request's `x-request-id`: the service's log lines of the request
    /// carry it, with the cause a 5xx does not tell the caller.
    #[serde(rename = "requestId", default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl Problem {
    /// A problem of type `urn:krabka-authority:problem:<kind>`.
    pub fn new(
        kind: &str,
        title: impl Into<String>,
        status: u16,
        detail: impl Into<String>,
    ) -> Problem {
        Problem {
            kind: format!("{PROBLEM_BASE}{kind}"),
            title: title.into(),
            status,
            detail: detail.into(),
            field: None,
            request_id: None,
        }
    }

    /// 400: bad input in `field` (type `invalid-<field>`).
    pub fn invalid(field: &str, detail: impl Into<String>) -> Problem {
        Problem::new(
            &format!("invalid-{field}"),
            format!("Invalid {field}"),
            400,
            detail,
        )
        .with_field(field)
    }

    /// The same problem, naming `field` as the one at fault.
    pub fn with_field(mut self, field: impl Into<String>) -> Problem {
        self.field = Some(field.into());
        self
    }

    /// The same problem, carrying the request's id.
    pub fn with_request_id(mut self, id: impl Into<String>) -> Problem {
        self.request_id = Some(id.into());
        self
    }

    /// The problem type without its URI prefix (`invalid-token`,
    /// `unavailable`, ...), when it is one of this service's.
    pub fn short_kind(&self) -> Option<&str> {
        self.kind.strip_prefix(PROBLEM_BASE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_input_names_its_field_in_the_type_title_and_field() {
        let problem = Problem::invalid("token", "no colon");
        let json = serde_json::to_value(&problem).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "type": "urn:krabka-authority:problem:invalid-token",
                "title": "Invalid token",
                "status": 400,
                "detail": "no colon",
                "field": "token",
            })
        );
        assert_eq!(problem.short_kind(), Some("invalid-token"));
        let back: Problem = serde_json::from_value(json).unwrap();
        assert_eq!(back, problem);
    }

    #[test]
    fn a_problem_without_a_field_leaves_it_out() {
        let problem = Problem::new("unavailable", "Coordinator unavailable", 503, "timed out");
        let json = serde_json::to_value(&problem).unwrap();
        assert!(json.get("field").is_none(), "{json}");
        assert!(json.get("requestId").is_none(), "{json}");
        let json = serde_json::to_value(problem.with_request_id("1a2b3c4d-7")).unwrap();
        assert_eq!(json["requestId"], "1a2b3c4d-7");
    }
}
