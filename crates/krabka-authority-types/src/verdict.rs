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
/// member holds the role), in the order Kafka makes: only the exact
/// current pair is authoritative (an unminted token never is); under the
/// current pair's producer id an earlier epoch is `superseded` and a later
/// one `unknown`. Pairs of different producer ids are not ordered (see
/// [`FencingToken::supersedes`]): such a token is `superseded` when
/// `retired`, that is when the role was seen to hold its producer id
/// before (a producer id never comes back to a role once it left it), and
/// `unknown` otherwise.
pub fn verdict(token: FencingToken, current: Option<FencingToken>, retired: bool) -> Verdict {
    match current {
        None => Verdict::Vacant,
        Some(current) if current == token && token.minted() => Verdict::Authoritative,
        Some(current) if current.same_producer(&token) => {
            if token.producer_epoch() < current.producer_epoch() {
                Verdict::Superseded
            } else {
                Verdict::Unknown
            }
        }
        Some(_) if retired => Verdict::Superseded,
        Some(_) => Verdict::Unknown,
    }
}

/// True when `token` can never be `current`'s role's pair again, whatever
/// happens: an earlier epoch of the current producer id (a producer id's
/// epoch only grows). Only such a refusal may be remembered.
pub fn superseded_for_good(token: FencingToken, current: FencingToken) -> bool {
    current.same_producer(&token) && token.producer_epoch() < current.producer_epoch()
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
        for retired in [false, true] {
            assert_eq!(verdict(t(7, 3), current, retired), Verdict::Authoritative);
            assert_eq!(verdict(t(7, 2), current, retired), Verdict::Superseded);
            assert_eq!(verdict(t(7, 4), current, retired), Verdict::Unknown);
        }
        assert!(superseded_for_good(t(7, 2), t(7, 3)));
        assert!(!superseded_for_good(t(7, 3), t(7, 3)));
        assert!(!superseded_for_good(t(7, 4), t(7, 3)));
    }

    /// Producer ids come from per-broker blocks: a role's next id may be
    /// lower or higher. Another id's pair is over only where the role was
    /// seen to hold that id; either way, never for good by order.
    #[test]
    fn pairs_of_other_producer_ids_are_not_ordered() {
        let current = Some(t(1, 0));
        assert_eq!(verdict(t(1001, 5), current, true), Verdict::Superseded);
        assert_eq!(verdict(t(1001, 5), current, false), Verdict::Unknown);
        assert_eq!(verdict(t(0, 9), current, false), Verdict::Unknown);
        assert_eq!(
            verdict(t(7, i16::MAX), Some(t(8, 0)), true),
            Verdict::Superseded
        );
        assert!(!superseded_for_good(t(1001, 5), t(1, 0)));
        assert!(!superseded_for_good(t(0, 9), t(1, 0)));
        assert!(t(1001, 5).supersedes(&t(1, 0)), "the seed's order stays");
    }

    #[test]
    fn no_holder_is_vacant() {
        assert_eq!(verdict(t(1, 1), None, true), Verdict::Vacant);
    }
}
