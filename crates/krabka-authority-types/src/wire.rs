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

use crate::{FencingToken, Problem, Verdict};

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
    /// The coordinator's current pair, as asked for this answer; `null`
    /// when nobody holds the role, and when the verdict came from the
    /// service's cache (the coordinator was not asked: the service does not
    /// know the pair now).
    pub current: Option<FencingToken>,
    /// The coordinator's transaction state, as asked for this answer;
    /// `null` where `current` is.
    pub state: Option<String>,
    /// For a `superseded` verdict: the pair the service saw current, under
    /// which the token is over, and when (for a cached verdict, those of
    /// the check that found it); `null` for every other verdict.
    pub superseded_by: Option<Sighting<At>>,
    /// When the verdict was reached (RFC 3339): the coordinator asked, or
    /// the cache read.
    pub checked_at: At,
    /// True when a `superseded` verdict came from the service's cache.
    pub cached: bool,
    /// The id of the Kafka cluster the answer speaks for: pairs of another
    /// cluster (one rebuilt behind the same addresses) say nothing of it.
    pub cluster: String,
}

/// A pair and when it was seen current.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sighting<At = String> {
    /// The pair.
    pub pair: FencingToken,
    /// When the coordinator answered it (RFC 3339).
    pub seen_at: At,
}

impl<At> CheckAnswer<At> {
    /// Why this body cannot be the answer to `(role, token)` sent with HTTP
    /// `status`, if it cannot: it answers another question, or its status,
    /// verdict, current pair and superseding pair disagree by the rules of
    /// [`crate::verdict`] and [`Verdict::status`] (a client cannot know
    /// which producer ids a role held, so a token of another producer id
    /// than the pair may be `superseded` or `unknown`), or it claims a cache
    /// only `superseded` may come from, or names no cluster. Such a body
    /// proves nothing, least of all a yes.
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
        if self.cluster.is_empty() {
            return Some("it names no cluster".into());
        }
        let pairs = [self.current, self.superseded_by.as_ref().map(|s| s.pair)];
        if pairs.iter().flatten().any(|c| !c.minted()) {
            return Some("a pair is no minted token".into());
        }
        if self.cached && (self.verdict != Verdict::Superseded || self.current.is_some()) {
            return Some(format!(
                "a {} verdict from a cache, with current pair {:?}",
                self.verdict, self.current
            ));
        }
        if (self.verdict == Verdict::Superseded) != self.superseded_by.is_some() {
            return Some(format!(
                "verdict {} with superseding pair {:?}",
                self.verdict,
                self.superseded_by.as_ref().map(|s| s.pair)
            ));
        }
        let fits = match (self.verdict, self.current) {
            (Verdict::Authoritative, Some(current)) => current == token,
            (Verdict::Vacant, current) => current.is_none() && !self.cached,
            (Verdict::Superseded, current) => self.superseded_by.as_ref().is_some_and(|s| {
                s.pair != token
                    && (!s.pair.same_producer(&token)
                        || token.producer_epoch() < s.pair.producer_epoch())
                    && (self.cached || current == Some(s.pair))
            }),
            (Verdict::Unknown, Some(current)) => {
                current != token
                    && (!current.same_producer(&token)
                        || token.producer_epoch() > current.producer_epoch())
            }
            (Verdict::Authoritative | Verdict::Unknown, None) => false,
        };
        (!fits).then(|| {
            format!(
                "verdict {} contradicts the current pair {:?}",
                self.verdict, self.current
            )
        })
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

    /// An answer for token 4:2: `current` as asked now (none when
    /// `cached`), and for a `superseded` verdict the pair `by` it.
    fn answer(verdict: Verdict, current: Option<&str>, cached: bool) -> CheckAnswer {
        answer_by(verdict, current, cached, None)
    }

    fn answer_by(
        verdict: Verdict,
        current: Option<&str>,
        cached: bool,
        by: Option<&str>,
    ) -> CheckAnswer {
        let current = (!cached).then(|| current.map(t)).flatten();
        let by = by.or((verdict == Verdict::Superseded).then_some("4:3"));
        CheckAnswer {
            role: "orders".into(),
            token: t("4:2"),
            verdict,
            current,
            state: current.map(|_| "Ongoing".into()),
            superseded_by: by.map(|pair| Sighting {
                pair: t(pair),
                seen_at: "2026-12-01T00:00:00.000Z".into(),
            }),
            checked_at: "2026-12-02T00:00:00.000Z".into(),
            cached,
            cluster: "c1".into(),
        }
    }

    #[test]
    fn only_an_answer_that_keeps_every_rule_is_no_contradiction() {
        let token = t("4:2");
        let other_id = |verdict| {
            let mut body = answer_by(verdict, Some("1:0"), false, None);
            body.superseded_by = (verdict == Verdict::Superseded).then(|| Sighting {
                pair: t("1:0"),
                seen_at: "2026-12-01T00:00:00.000Z".into(),
            });
            body
        };
        for (body, status) in [
            (answer(Verdict::Authoritative, Some("4:2"), false), 200),
            (answer(Verdict::Superseded, Some("4:3"), true), 409),
            (answer(Verdict::Superseded, Some("4:3"), false), 409),
            (answer(Verdict::Unknown, Some("4:1"), false), 409),
            (answer(Verdict::Vacant, None, false), 409),
            // Another producer id: either refusal, as the service knows.
            (other_id(Verdict::Superseded), 409),
            (other_id(Verdict::Unknown), 409),
        ] {
            assert_eq!(
                body.contradiction("orders", token, status),
                None,
                "{body:?}"
            );
        }
        let mut not_now = answer(Verdict::Superseded, Some("4:3"), false);
        not_now.current = Some(t("4:4"));
        let mut cached_now = answer(Verdict::Superseded, None, true);
        cached_now.current = Some(t("4:3"));
        let mut nameless = answer(Verdict::Authoritative, Some("4:2"), false);
        nameless.cluster.clear();
        for (body, status) in [
            (answer(Verdict::Authoritative, Some("4:2"), false), 409),
            (answer(Verdict::Authoritative, Some("4:3"), false), 200),
            (answer(Verdict::Authoritative, Some("4:2"), true), 200),
            (
                answer_by(Verdict::Superseded, Some("4:1"), false, Some("4:1")),
                409,
            ),
            (answer(Verdict::Vacant, Some("4:2"), false), 409),
            (answer(Verdict::Unknown, Some("4:3"), false), 409),
            (
                answer_by(Verdict::Unknown, Some("4:1"), false, Some("4:3")),
                409,
            ),
            (not_now, 409),
            (cached_now, 409),
            (nameless, 200),
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
        assert_eq!(json["supersededBy"]["pair"], "4:3");
        assert_eq!(json["supersededBy"]["seenAt"], "2026-12-01T00:00:00.000Z");
        assert_eq!(json["cluster"], "c1");
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
