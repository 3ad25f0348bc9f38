//! The fencing token: the (producer id, producer epoch) pair that Kafka's
//! transaction coordinator mints for `transactional.id = <role>`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The quorum-minted proof that one member holds a role.
///
/// Ordering is lexicographic: producer id first, then epoch. The epoch is an
/// `i16` that wraps; Kafka answers exhaustion with a fresh producer id and
/// epoch 0, so comparing epochs alone would rank a fresh token below a stale
/// one. The derived `Ord` compares the fields in declaration order, which is
/// exactly that rule.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct FencingToken {
    producer_id: i64,
    producer_epoch: i16,
}

/// Which part of a token was wrong.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TokenPart {
    /// The producer id, before the colon.
    ProducerId,
    /// The producer epoch, after the colon.
    ProducerEpoch,
    /// The overall `<id>:<epoch>` shape (missing or extra colon).
    Form,
}

impl fmt::Display for TokenPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TokenPart::ProducerId => "producer id",
            TokenPart::ProducerEpoch => "producer epoch",
            TokenPart::Form => "token",
        })
    }
}

/// A token that could not be built or parsed; names the part that is wrong.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[error("invalid {part}: {reason}")]
pub struct TokenError {
    part: TokenPart,
    reason: String,
}

impl TokenError {
    fn new(part: TokenPart, reason: impl Into<String>) -> Self {
        TokenError {
            part,
            reason: reason.into(),
        }
    }

    /// The part of the token that was wrong.
    pub fn part(&self) -> TokenPart {
        self.part
    }
}

impl FencingToken {
    /// The token of a role that no member has ever taken: Kafka's `-1` for
    /// "no producer". It ranks below every minted token.
    pub const NO_EPOCH: FencingToken = FencingToken {
        producer_id: -1,
        producer_epoch: -1,
    };

    /// Builds a token from a minted pair; negative values prove nothing and
    /// are refused.
    pub fn new(producer_id: i64, producer_epoch: i16) -> Result<FencingToken, TokenError> {
        if producer_id < 0 {
            return Err(TokenError::new(
                TokenPart::ProducerId,
                format!("{producer_id} is negative"),
            ));
        }
        if producer_epoch < 0 {
            return Err(TokenError::new(
                TokenPart::ProducerEpoch,
                format!("{producer_epoch} is negative"),
            ));
        }
        Ok(FencingToken {
            producer_id,
            producer_epoch,
        })
    }

    /// The producer id the transaction coordinator minted (-1 for `NO_EPOCH`).
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }

    /// The producer epoch the transaction coordinator minted (-1 for `NO_EPOCH`).
    pub fn producer_epoch(&self) -> i16 {
        self.producer_epoch
    }

    /// True for every token but `NO_EPOCH`.
    pub fn minted(&self) -> bool {
        *self != Self::NO_EPOCH
    }

    /// True when this token ranks strictly above `other`, in the seed's
    /// order (producer id, then epoch), which the Go and Java ports share.
    ///
    /// Kafka itself orders only the epochs of one producer id: producer ids
    /// come from per-broker blocks (`ProducerIdsBlock`), and a role's id
    /// changes when its transactional id expires or its epoch runs out, to
    /// whatever the coordinator of the day draws, lower as often as higher.
    /// So a service does not conclude from this order across producer ids:
    /// [`crate::verdict`] and [`FencingToken::same_producer`] say what it does.
    pub fn supersedes(&self, other: &FencingToken) -> bool {
        self > other
    }

    /// True when both tokens were minted under one producer id, the only
    /// pairs whose order Kafka makes (by epoch).
    pub fn same_producer(&self, other: &FencingToken) -> bool {
        self.producer_id == other.producer_id
    }

    /// True when a role's pair may have moved from `earlier` to this one:
    /// a later epoch of the same producer id, or another producer id (whose
    /// order Kafka does not make).
    pub fn moved_on_from(&self, earlier: &FencingToken) -> bool {
        if self.same_producer(earlier) {
            self.producer_epoch > earlier.producer_epoch
        } else {
            true
        }
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.producer_id, self.producer_epoch)
    }
}

/// Parses one run of ASCII digits; anything else (sign, space, empty) is refused.
fn parse_digits<T: FromStr>(text: &str, part: TokenPart, max: &str) -> Result<T, TokenError> {
    if text.is_empty() {
        return Err(TokenError::new(part, "is empty"));
    }
    if text.starts_with('-') && text.len() > 1 && text[1..].bytes().all(|b| b.is_ascii_digit()) {
        return Err(TokenError::new(part, "must not be negative"));
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(TokenError::new(part, "must be ASCII digits only"));
    }
    text.parse::<T>()
        .map_err(|_| TokenError::new(part, format!("is out of range (max {max})")))
}

impl FromStr for FencingToken {
    type Err = TokenError;

    /// Parses the strict `<producer id>:<producer epoch>` form.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let Some((id, epoch)) = text.split_once(':') else {
            return Err(TokenError::new(
                TokenPart::Form,
                "expected <producer id>:<producer epoch>",
            ));
        };
        if epoch.contains(':') {
            return Err(TokenError::new(
                TokenPart::Form,
                "expected exactly one colon in <producer id>:<producer epoch>",
            ));
        }
        let producer_id: i64 = parse_digits(id, TokenPart::ProducerId, "9223372036854775807")?;
        let producer_epoch: i16 = parse_digits(epoch, TokenPart::ProducerEpoch, "32767")?;
        FencingToken::new(producer_id, producer_epoch)
    }
}

impl Serialize for FencingToken {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for FencingToken {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        if text == "-1:-1" {
            return Ok(FencingToken::NO_EPOCH);
        }
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn token(id: i64, epoch: i16) -> FencingToken {
        FencingToken::new(id, epoch).expect("valid token")
    }

    #[test]
    fn fresh_producer_id_supersedes_an_exhausted_epoch() {
        let wrapped = token(4, i16::MAX);
        let fresh = token(5, 0);
        assert!(fresh.supersedes(&wrapped));
        assert!(!wrapped.supersedes(&fresh));
        assert!(fresh > wrapped);
    }

    #[test]
    fn order_reads_producer_id_first_then_epoch() {
        assert!(token(7, 3).supersedes(&token(7, 2)));
        assert!(!token(7, 2).supersedes(&token(7, 2)));
        assert!(token(8, 0).supersedes(&token(7, 100)));
        assert_eq!(token(7, 2).cmp(&token(7, 2)), std::cmp::Ordering::Equal);
    }

    #[test]
    fn no_epoch_ranks_below_every_minted_token_and_is_not_minted() {
        assert!(!FencingToken::NO_EPOCH.minted());
        assert_eq!(FencingToken::NO_EPOCH.producer_id(), -1);
        assert_eq!(FencingToken::NO_EPOCH.producer_epoch(), -1);
        for t in [
            token(0, 0),
            token(0, 1),
            token(1, 0),
            token(i64::MAX, i16::MAX),
        ] {
            assert!(t.minted());
            assert!(t.supersedes(&FencingToken::NO_EPOCH));
            assert!(!FencingToken::NO_EPOCH.supersedes(&t));
        }
    }

    #[test]
    fn new_refuses_negative_values_and_names_the_part() {
        assert_eq!(
            FencingToken::new(-1, 0).unwrap_err().part(),
            TokenPart::ProducerId
        );
        assert_eq!(
            FencingToken::new(0, -1).unwrap_err().part(),
            TokenPart::ProducerEpoch
        );
        assert_eq!(
            FencingToken::new(-1, -1).unwrap_err().part(),
            TokenPart::ProducerId
        );
    }

    #[test]
    fn text_form_round_trips() {
        let t = token(4000, 7);
        assert_eq!(t.to_string(), "4000:7");
        assert_eq!("4000:7".parse::<FencingToken>(), Ok(t));
        assert_eq!(
            "9223372036854775807:32767".parse::<FencingToken>(),
            Ok(token(i64::MAX, i16::MAX))
        );
        assert_eq!("0:0".parse::<FencingToken>(), Ok(token(0, 0)));
    }

    #[test]
    fn parsing_is_strict_and_names_the_wrong_part() {
        let cases: &[(&str, TokenPart)] = &[
            ("", TokenPart::Form),
            ("1", TokenPart::Form),
            ("1:1:1", TokenPart::Form),
            ("1:", TokenPart::ProducerEpoch),
            (":1", TokenPart::ProducerId),
            ("-1:0", TokenPart::ProducerId),
            ("1:-1", TokenPart::ProducerEpoch),
            ("-1:-1", TokenPart::ProducerId),
            ("+1:1", TokenPart::ProducerId),
            ("1:+1", TokenPart::ProducerEpoch),
            (" 1:1", TokenPart::ProducerId),
            ("1:1 ", TokenPart::ProducerEpoch),
            ("1 :1", TokenPart::ProducerId),
            ("1:40000", TokenPart::ProducerEpoch),
            ("1:32768", TokenPart::ProducerEpoch),
            ("9223372036854775808:0", TokenPart::ProducerId),
            ("0x10:1", TokenPart::ProducerId),
            ("١:1", TokenPart::ProducerId),
        ];
        for (text, part) in cases {
            let err = text
                .parse::<FencingToken>()
                .expect_err(&format!("{text:?} must not parse"));
            assert_eq!(err.part(), *part, "{text:?}: {err}");
        }
        let long = "1".repeat(10_000) + ":1";
        assert_eq!(
            long.parse::<FencingToken>().unwrap_err().part(),
            TokenPart::ProducerId
        );
    }

    #[test]
    fn error_message_says_what_is_wrong() {
        let err = "1:40000".parse::<FencingToken>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid producer epoch: is out of range (max 32767)"
        );
        let err = "-1:0".parse::<FencingToken>().unwrap_err();
        assert_eq!(err.to_string(), "invalid producer id: must not be negative");
    }

    #[test]
    fn serde_uses_the_text_form() {
        let t = token(12, 3);
        assert_eq!(serde_json::to_string(&t).unwrap(), "\"12:3\"");
        assert_eq!(serde_json::from_str::<FencingToken>("\"12:3\"").unwrap(), t);
        assert_eq!(
            serde_json::to_string(&FencingToken::NO_EPOCH).unwrap(),
            "\"-1:-1\""
        );
        assert_eq!(
            serde_json::from_str::<FencingToken>("\"-1:-1\"").unwrap(),
            FencingToken::NO_EPOCH
        );
        assert!(serde_json::from_str::<FencingToken>("\"12:-3\"").is_err());
        assert!(serde_json::from_str::<FencingToken>("12").is_err());
    }

    proptest! {
        #[test]
        fn display_then_parse_is_identity(id in 0i64.., epoch in 0i16..) {
            let t = token(id, epoch);
            prop_assert_eq!(t.to_string().parse::<FencingToken>(), Ok(t));
        }

        #[test]
        fn order_matches_the_pair_order(a in (0i64..5, 0i16..), b in (0i64..5, 0i16..)) {
            let (ta, tb) = (token(a.0, a.1), token(b.0, b.1));
            prop_assert_eq!(ta.cmp(&tb), a.cmp(&b));
            prop_assert_eq!(ta.supersedes(&tb), a > b);
        }

        #[test]
        fn parsing_never_panics(text in ".{0,64}") {
            let _ = text.parse::<FencingToken>();
        }
    }
}
