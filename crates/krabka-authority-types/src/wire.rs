//! The check's wire contract, written once: the body of a check that
//! reached a verdict (`GET /roles/{role}/authority`, 200 or 409) and each
//! item of a batch answer (`POST /authority/check`), as the service writes
//! them and its clients read them. `openapi/openapi.yaml` describes the
//! same bodies; the service's tests fail when the two disagree.
//!
//! The instant of the check is a type parameter: the service writes its
//! own instant type (RFC 3339 without an allocation), clients read a
//! `String`.

use serde::{Deserialize, Serialize};

use crate::{FencingToken, Problem, Verdict, verdict};

/// The answer to one check that reached a verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckAnswer<At = String> {
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
    pub checked_at: At,
    /// True when a `superseded` verdict came from the service's cache
    /// (then `current` and `checkedAt` are those of the check that found
    /// it superseded).
    pub cached: bool,
}

impl<At> CheckAnswer<At> {
    /// Why this body cannot be the answer to `(role, token)` sent with HTTP
    /// `status`, if it cannot: it answers another question, or its status,
    /// verdict and current pair disagree by the rules of [`verdict`] and
    /// [`Verdict::status`], or it claims a cache only `superseded` may come
    /// from. Such a body proves nothing, least of all a yes.
    pub fn contradiction(&self, role: &str, token: FencingToken, status: u16) -> Option<String> {
        if self.role != role {
            return Some(format!("answers role {:?}, not {role:?}", self.role));
        }
        if self.token != token {
            return Some(format!("answers token {}, not {token}", self.token));
        }
        if status != self.verdict.status() {
            return Some(format!("verdict {} came with HTTP {status}", self.verdict));
        }
        if self.current.is_some_and(|c| !c.minted()) {
            return Some("the current pair is no minted token".into());
        }
        let expected = verdict(token, self.current);
        if expected != self.verdict {
            return Some(format!(
                "verdict {} contradicts the current pair {:?}, which gives {expected}",
                self.verdict, self.current
            ));
        }
        if self.cached && self.verdict != Verdict::Superseded {
            return Some(format!("a {} verdict from a cache", self.verdict));
        }
        None
    }
}

/// One item of a batch answer: the HTTP status a single check would have
/// got, and its verdict or its problem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchItem<At = String> {
    /// 200, 409, 400 or 503.
    pub status: u16,
    /// The verdict or the refusal.
    #[serde(flatten)]
    pub outcome: BatchOutcome<At>,
}

/// What a batch item came to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BatchOutcome<At = String> {
    /// A verdict (status 200 or 409).
    Verdict(CheckAnswer<At>),
    /// The input was refused (400) or the coordinator could not be asked
    /// (503).
    Refused(Refusal),
}

/// A batch item without a verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The role as given, if any.
    pub role: Option<String>,
    /// The token as given, if any.
    pub token: Option<String>,
    /// What was wrong.
    pub problem: Problem,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(text: &str) -> FencingToken {
        text.parse().unwrap()
    }

    fn answer(verdict: Verdict, current: Option<&str>, cached: bool) -> CheckAnswer {
        CheckAnswer {
            role: "orders".into(),
            token: t("4:2"),
            verdict,
            current: current.map(t),
            state: current.map(|_| "Ongoing".into()),
            checked_at: "2026-12-02T00:00:00.000Z".into(),
            cached,
        }
    }

    #[test]
    fn only_an_answer_that_keeps_every_rule_is_no_contradiction() {
        let token = t("4:2");
        for (body, status) in [
            (answer(Verdict::Authoritative, Some("4:2"), false), 200),
            (answer(Verdict::Superseded, Some("4:3"), true), 409),
            (answer(Verdict::Unknown, Some("4:1"), false), 409),
            (answer(Verdict::Vacant, None, false), 409),
        ] {
            assert_eq!(
                body.contradiction("orders", token, status),
                None,
                "{body:?}"
            );
        }
        for (body, status) in [
            (answer(Verdict::Authoritative, Some("4:2"), false), 409),
            (answer(Verdict::Authoritative, Some("4:3"), false), 200),
            (answer(Verdict::Authoritative, Some("4:2"), true), 200),
            (answer(Verdict::Superseded, Some("4:1"), false), 409),
            (answer(Verdict::Vacant, Some("4:2"), false), 409),
            (answer(Verdict::Unknown, Some("4:3"), false), 409),
        ] {
            assert!(
                body.contradiction("orders", token, status).is_some(),
                "{body:?}"
            );
        }
        let body = answer(Verdict::Authoritative, Some("4:2"), false);
        assert!(body.contradiction("other", token, 200).is_some());
        assert!(body.contradiction("orders", t("4:1"), 200).is_some());
    }

    #[test]
    fn a_batch_item_is_a_verdict_or_a_refusal_on_the_wire() {
        let item = BatchItem {
            status: 409,
            outcome: BatchOutcome::Verdict(answer(Verdict::Superseded, Some("4:3"), true)),
        };
        let json = serde_json::to_value(&item).unwrap();
        assert_eq!(json["status"], 409);
        assert_eq!(json["verdict"], "superseded");
        assert_eq!(json["checkedAt"], "2026-12-02T00:00:00.000Z");
        assert_eq!(serde_json::from_value::<BatchItem>(json).unwrap(), item);

        let refused = BatchItem::<String> {
            status: 400,
            outcome: BatchOutcome::Refused(Refusal {
                role: None,
                token: Some("x".into()),
                problem: Problem::invalid("role", "the item has no role"),
            }),
        };
        let json = serde_json::to_value(&refused).unwrap();
        assert_eq!(json["role"], serde_json::Value::Null);
        assert_eq!(json["problem"]["status"], 400);
        assert_eq!(serde_json::from_value::<BatchItem>(json).unwrap(), refused);
    }
}
