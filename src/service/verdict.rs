//! The verdict of an authority check: a token against the coordinator's
//! current pair, compared exactly. Pure: no I/O, no clock.

use serde::Serialize;

use crate::coordination::FencingToken;
use crate::kafka::TransactionDescription;

/// The answer to "is this token the role's authority now?".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The token equals the coordinator's current pair.
    Authoritative,
    /// The current pair supersedes the token: its holder is deposed.
    Superseded,
    /// No member holds the role.
    Vacant,
    /// The token is ahead of the current pair: not minted here.
    Unknown,
}

impl Verdict {
    /// The label used in JSON and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Authoritative => "authoritative",
            Verdict::Superseded => "superseded",
            Verdict::Vacant => "vacant",
            Verdict::Unknown => "unknown",
        }
    }

    /// Every verdict, for metrics that must exist before the first check.
    pub const ALL: [Verdict; 4] = [
        Verdict::Authoritative,
        Verdict::Superseded,
        Verdict::Vacant,
        Verdict::Unknown,
    ];
}

/// Judges `token` against what the coordinator described (`None`: error 105,
/// no holder). A described pair that is not minted (negative) means no holder.
pub fn judge(
    token: FencingToken,
    described: Option<&TransactionDescription>,
) -> (Verdict, Option<FencingToken>) {
    let current = described.and_then(TransactionDescription::token);
    let verdict = match current {
        None => Verdict::Vacant,
        Some(current) if current == token => Verdict::Authoritative,
        Some(current) if current.supersedes(&token) => Verdict::Superseded,
        Some(_) => Verdict::Unknown,
    };
    (verdict, current)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(id: i64, epoch: i16) -> TransactionDescription {
        TransactionDescription {
            state: "CompleteCommit".into(),
            producer_id: id,
            producer_epoch: epoch,
            timeout_ms: 30_000,
            start_time_ms: -1,
        }
    }

    fn t(id: i64, epoch: i16) -> FencingToken {
        FencingToken::new(id, epoch).unwrap()
    }

    #[test]
    fn exact_comparison_against_the_current_pair() {
        let d = described(7, 3);
        assert_eq!(
            judge(t(7, 3), Some(&d)),
            (Verdict::Authoritative, Some(t(7, 3)))
        );
        assert_eq!(judge(t(7, 2), Some(&d)).0, Verdict::Superseded);
        assert_eq!(judge(t(6, 9000), Some(&d)).0, Verdict::Superseded);
        assert_eq!(judge(t(7, 4), Some(&d)).0, Verdict::Unknown);
        assert_eq!(judge(t(8, 0), Some(&d)).0, Verdict::Unknown);
    }

    #[test]
    fn a_rotated_producer_id_supersedes_the_exhausted_epoch() {
        let d = described(8, 0);
        assert_eq!(judge(t(7, i16::MAX), Some(&d)).0, Verdict::Superseded);
    }

    #[test]
    fn no_holder_is_vacant() {
        assert_eq!(judge(t(1, 1), None), (Verdict::Vacant, None));
        assert_eq!(judge(t(1, 1), Some(&described(-1, -1))).0, Verdict::Vacant);
    }
}
