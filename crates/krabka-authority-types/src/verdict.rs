//! The verdict of an authority check: a token against the coordinator's
//! current pair, compared exactly.

use serde::{Deserialize, Serialize};

use crate::FencingToken;

/// The answer to "is this token the role's authority now?".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// The HTTP status of a check with this verdict: 200 for
    /// `authoritative`, 409 for every refusal.
    pub fn status(&self) -> u16 {
        match self {
            Verdict::Authoritative => 200,
            _ => 409,
        }
    }

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

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Judges `token` against the coordinator's current pair (`None`: no
/// member holds the role). Only the exact current pair is authoritative;
/// an unminted token never is.
pub fn verdict(token: FencingToken, current: Option<FencingToken>) -> Verdict {
    match current {
        None => Verdict::Vacant,
        Some(current) if current == token && token.minted() => Verdict::Authoritative,
        Some(current) if current.supersedes(&token) => Verdict::Superseded,
        Some(_) => Verdict::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(id: i64, epoch: i16) -> FencingToken {
        FencingToken::new(id, epoch).unwrap()
    }

    #[test]
    fn exact_comparison_against_the_current_pair() {
        let current = Some(t(7, 3));
        assert_eq!(verdict(t(7, 3), current), Verdict::Authoritative);
        assert_eq!(verdict(t(7, 2), current), Verdict::Superseded);
        assert_eq!(verdict(t(6, 9000), current), Verdict::Superseded);
        assert_eq!(verdict(t(7, 4), current), Verdict::Unknown);
        assert_eq!(verdict(t(8, 0), current), Verdict::Unknown);
    }

    #[test]
    fn a_rotated_producer_id_supersedes_the_exhausted_epoch() {
        assert_eq!(verdict(t(7, i16::MAX), Some(t(8, 0))), Verdict::Superseded);
    }

    #[test]
    fn no_holder_is_vacant() {
        assert_eq!(verdict(t(1, 1), None), Verdict::Vacant);
    }
}
