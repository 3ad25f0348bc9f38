//! Errors of the Kafka client, and which of them are worth a retry.

use std::time::Duration;

use kafka_protocol::error::ResponseError;

/// Broker error codes that mean a newer member holds the role: the producer
/// of this token is fenced. Nothing else means fenced.
pub const FENCED_CODES: [i16; 3] = [
    47, // INVALID_PRODUCER_EPOCH
    90, // PRODUCER_FENCED
    49, // INVALID_PRODUCER_ID_MAPPING
];

/// `TRANSACTIONAL_ID_NOT_FOUND`: no member holds the role now.
pub const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;

/// An error of the Kafka client. `Clone`, so one connection failure can be
/// handed to every request that was waiting on it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KafkaError {
    /// The TCP (or TLS) connection could not be opened.
    #[error("cannot connect to {addr}: {reason}")]
    Connect {
        /// The broker address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The connection died; every request in flight on it fails with this.
    #[error("connection to {addr} closed: {reason}")]
    ConnectionClosed {
        /// The broker address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// No answer within the per-request timeout.
    #[error("{api} request to {addr} timed out after {after:?}")]
    Timeout {
        /// The API name.
        api: &'static str,
        /// The broker address.
        addr: String,
        /// The timeout that passed.
        after: Duration,
    },
    /// A frame larger than the configured maximum.
    #[error("a frame of {size} bytes from {addr} exceeds the maximum of {max} bytes")]
    FrameTooLarge {
        /// The broker address.
        addr: String,
        /// The announced size.
        size: i64,
        /// The configured maximum.
        max: usize,
    },
    /// Bytes that are not the Kafka protocol we expect.
    #[error("protocol error with {addr}: {reason}")]
    Protocol {
        /// The broker address.
        addr: String,
        /// What did not decode.
        reason: String,
    },
    /// The broker does not speak a version of an API we can use.
    #[error("{addr} does not support {api} versions {ours}; it supports {theirs}")]
    UnsupportedVersion {
        /// The broker address.
        addr: String,
        /// The API name.
        api: &'static str,
        /// Our range.
        ours: String,
        /// The broker's range, or "none".
        theirs: String,
    },
    /// The broker answered with an error code.
    #[error("{api} failed with {name} (code {code}){}", detail(message))]
    Broker {
        /// The API name.
        api: &'static str,
        /// The Kafka error code.
        code: i16,
        /// Kafka's name of the code.
        name: String,
        /// The broker's message, if any.
        message: Option<String>,
    },
    /// The topic is missing or unusable.
    #[error("topic {topic}: {reason}")]
    Topic {
        /// The topic.
        topic: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An operation kept failing with retriable errors until its deadline.
    #[error("{op} gave up after {after:?}; last error: {last}")]
    GaveUp {
        /// The operation.
        op: &'static str,
        /// How long it tried.
        after: Duration,
        /// The last error seen.
        last: Box<KafkaError>,
    },
    /// A coordinator's answer could not be trusted to be current (another
    /// broker names a different coordinator, or it is below a pair already
    /// seen); the id is asked again.
    #[error("stale answer from {addr}: {reason}")]
    Stale {
        /// The broker that answered.
        addr: String,
        /// Why the answer is not trusted.
        reason: String,
    },
    /// A caller asked for something that cannot be sent.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// TLS could not be set up or the broker's certificate was refused.
    #[error("TLS: {0}")]
    Tls(String),
    /// SASL authentication failed (wrong credentials, mechanism not enabled).
    #[error("authentication with {addr} failed: {reason}")]
    Auth {
        /// The broker address.
        addr: String,
        /// What the broker (or the exchange) said.
        reason: String,
    },
}

fn detail(message: &Option<String>) -> String {
    match message {
        Some(m) if !m.is_empty() => format!(": {m}"),
        _ => String::new(),
    }
}

impl KafkaError {
    /// An error from a broker error code.
    pub fn broker(api: &'static str, code: i16, message: Option<String>) -> KafkaError {
        let name = match ResponseError::try_from_code(code) {
            Some(ResponseError::Unknown(c)) => format!("UNKNOWN_{c}"),
            Some(e) => e.to_string(),
            None => "NONE".to_owned(),
        };
        KafkaError::Broker {
            api,
            code,
            name,
            message,
        }
    }

    /// The Kafka error code, if the broker sent one (looking through `GaveUp`).
    pub fn code(&self) -> Option<i16> {
        match self {
            KafkaError::Broker { code, .. } => Some(*code),
            KafkaError::GaveUp { last, .. } => last.code(),
            _ => None,
        }
    }

    /// True when the client's own set-up is refused (credentials, TLS trust,
    /// authorization): retrying cannot help, an operator must act.
    pub fn is_access_error(&self) -> bool {
        matches!(self, KafkaError::Tls(_) | KafkaError::Auth { .. })
            || matches!(self.code(), Some(29..=31 | 53 | 58))
    }

    /// True for errors 47, 90 and 49: a newer epoch holds the transactional id.
    pub fn is_fenced(&self) -> bool {
        self.code().is_some_and(|c| FENCED_CODES.contains(&c))
    }

    /// True when the same request may succeed if sent again (after a
    /// metadata or coordinator refresh where the code calls for one).
    pub fn is_retriable(&self) -> bool {
        match self {
            KafkaError::Connect { .. }
            | KafkaError::ConnectionClosed { .. }
            | KafkaError::Timeout { .. }
            | KafkaError::Stale { .. } => true,
            KafkaError::Broker { code, .. } => is_retriable_code(*code),
            _ => false,
        }
    }

    /// True when the outcome of a write is unknown: it may or may not have
    /// reached the log.
    pub fn is_ambiguous(&self) -> bool {
        match self {
            KafkaError::ConnectionClosed { .. } | KafkaError::Timeout { .. } => true,
            KafkaError::GaveUp { last, .. } => last.is_ambiguous(),
            _ => self.code() == Some(7), // REQUEST_TIMED_OUT
        }
    }

    /// True when the error says the coordinator of a key moved or is not
    /// ready: look it up again (15, 16) or wait (14).
    pub fn is_coordinator_error(&self) -> bool {
        matches!(self.code(), Some(14..=16))
    }

    /// True when partition leadership may have moved: refresh metadata
    /// (Java's client does on these codes, on disconnects and on request
    /// timeouts).
    pub fn needs_metadata_refresh(&self) -> bool {
        matches!(self.code(), Some(3 | 5 | 6 | 56 | 74 | 75 | 103))
            || matches!(
                self,
                KafkaError::Connect { .. }
                    | KafkaError::ConnectionClosed { .. }
                    | KafkaError::Timeout { .. }
            )
    }
}

/// Retriable broker codes: Kafka's own list, plus CONCURRENT_TRANSACTIONS
/// (51), which a transactional client retries until the coordinator has
/// finished the previous transaction.
pub fn is_retriable_code(code: i16) -> bool {
    if code == 51 {
        return true;
    }
    if FENCED_CODES.contains(&code) {
        return false;
    }
    ResponseError::try_from_code(code).is_some_and(|e| e.is_retriable())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_codes_are_exactly_47_90_49() {
        for code in -1..200 {
            let err = KafkaError::broker("Produce", code, None);
            assert_eq!(err.is_fenced(), [47, 90, 49].contains(&code), "{code}");
        }
    }

    #[test]
    fn retriable_codes_follow_kafka() {
        for code in [6, 7, 14, 15, 16, 51] {
            assert!(is_retriable_code(code), "{code}");
        }
        for code in [0, 47, 90, 49, 50, 53, 105, 42, 87] {
            assert!(!is_retriable_code(code), "{code}");
        }
    }

    #[test]
    fn broker_errors_name_the_code() {
        let err = KafkaError::broker("InitProducerId", 50, Some("too long".into()));
        let text = err.to_string();
        assert!(text.contains("code 50"), "{text}");
        assert!(text.contains("too long"), "{text}");
        assert!(text.starts_with("InitProducerId failed with "), "{text}");
        let err = KafkaError::GaveUp {
            op: "describe",
            after: Duration::from_secs(1),
            last: Box::new(KafkaError::broker("DescribeTransactions", 90, None)),
        };
        assert!(err.is_fenced());
        assert!(!err.is_retriable());
    }
}
