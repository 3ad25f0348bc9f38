//! Errors of the Kafka client, and which of them are worth a retry.
//!
//! A broker's error code becomes kafka-protocol's [`ResponseError`] in the
//! wire functions that read it; everything after them matches errors by
//! name, never by number.

use std::time::Duration;

pub use kafka_protocol::error::ResponseError;

/// The broker errors that mean a newer member holds the role: the producer
/// of this token is fenced. Nothing else means fenced.
pub const FENCED: [ResponseError; 3] = [
    ResponseError::InvalidProducerEpoch,
    ResponseError::ProducerFenced,
    ResponseError::InvalidProducerIdMapping,
];

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
    #[error("{api} failed with {error} (code {}){}", error.code(), detail(message))]
    Broker {
        /// The API name.
        api: &'static str,
        /// Kafka's error.
        error: ResponseError,
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
    /// A broker's answer that cannot be used: it leaves out what was
    /// asked, or says what cannot be (a pair never minted).
    #[error("malformed answer: {0}")]
    Malformed(String),
    /// The settings or the request cannot work as given (no bootstrap
    /// servers, a timeout over what Kafka takes, a request larger than the
    /// largest frame): an operator or the caller must change them.
    #[error("invalid settings or request: {0}")]
    Config(String),
    /// A broker to send to is not known yet (no metadata, no bootstrap
    /// broker left to try).
    #[error("no broker to ask: {0}")]
    NoBroker(String),
    /// What cannot happen did: a bug of this client (an answer lost on the
    /// way to its caller, a request that does not encode).
    #[error("internal error of the Kafka client: {0}")]
    Internal(String),
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
    /// An error from a broker error code (the wire functions' one way from
    /// a number to a name).
    pub fn broker(api: &'static str, code: i16, message: Option<String>) -> KafkaError {
        KafkaError::Broker {
            api,
            error: ResponseError::try_from_code(code).unwrap_or(ResponseError::Unknown(code)),
            message,
        }
    }

    /// Kafka's error, if the broker sent one (looking through `GaveUp`).
    pub fn response(&self) -> Option<ResponseError> {
        match self {
            KafkaError::Broker { error, .. } => Some(*error),
            KafkaError::GaveUp { last, .. } => last.response(),
            _ => None,
        }
    }

    /// The Kafka error code, if the broker sent one (for logs and metrics).
    pub fn code(&self) -> Option<i16> {
        self.response().map(|e| e.code())
    }

    /// True when the broker said `error` (looking through `GaveUp`).
    pub fn is(&self, error: ResponseError) -> bool {
        self.response() == Some(error)
    }

    /// True when the client's own set-up is refused (credentials, TLS trust,
    /// authorization): retrying cannot help, an operator must act.
    pub fn is_access_error(&self) -> bool {
        use ResponseError::*;
        matches!(self, KafkaError::Tls(_) | KafkaError::Auth { .. })
            || matches!(
                self.response(),
                Some(
                    TopicAuthorizationFailed
                        | GroupAuthorizationFailed
                        | ClusterAuthorizationFailed
                        | TransactionalIdAuthorizationFailed
                        | SaslAuthenticationFailed
                )
            )
    }

    /// True when a newer epoch holds the transactional id ([`FENCED`]).
    pub fn is_fenced(&self) -> bool {
        self.response().is_some_and(|e| FENCED.contains(&e))
    }

    /// True when the same request may succeed if sent again (after a
    /// metadata or coordinator refresh where the error calls for one).
    pub fn is_retriable(&self) -> bool {
        match self {
            KafkaError::Connect { .. }
            | KafkaError::ConnectionClosed { .. }
            | KafkaError::Timeout { .. }
            | KafkaError::Stale { .. }
            | KafkaError::NoBroker(_) => true,
            KafkaError::Broker { error, .. } => is_retriable(*error),
            _ => false,
        }
    }

    /// True when the outcome of a write is unknown: it may or may not have
    /// reached the log.
    pub fn is_ambiguous(&self) -> bool {
        match self {
            KafkaError::ConnectionClosed { .. } | KafkaError::Timeout { .. } => true,
            KafkaError::GaveUp { last, .. } => last.is_ambiguous(),
            _ => self.is(ResponseError::RequestTimedOut),
        }
    }

    /// True when the error says the coordinator of a key moved or is not
    /// ready: look it up again (not available, not coordinator) or wait
    /// (loading).
    pub fn is_coordinator_error(&self) -> bool {
        self.is_coordinator_moved() || self.is(ResponseError::CoordinatorLoadInProgress)
    }

    /// True when the coordinator of a key is elsewhere or gone: every id of
    /// that broker is looked up again.
    pub fn is_coordinator_moved(&self) -> bool {
        matches!(
            self.response(),
            Some(ResponseError::NotCoordinator | ResponseError::CoordinatorNotAvailable)
        )
    }

    /// True when partition leadership may have moved: refresh metadata
    /// (Java's client does on these errors, on disconnects and on request
    /// timeouts).
    pub fn needs_metadata_refresh(&self) -> bool {
        use ResponseError::*;
        matches!(
            self.response(),
            Some(
                UnknownTopicOrPartition
                    | LeaderNotAvailable
                    | NotLeaderOrFollower
                    | KafkaStorageError
                    | FencedLeaderEpoch
                    | UnknownLeaderEpoch
                    | InconsistentTopicId
            )
        ) || matches!(
            self,
            KafkaError::Connect { .. }
                | KafkaError::ConnectionClosed { .. }
                | KafkaError::Timeout { .. }
                | KafkaError::NoBroker(_)
        )
    }
}

/// Retriable broker errors: Kafka's own list, plus CONCURRENT_TRANSACTIONS,
/// which a transactional client retries until the coordinator has finished
/// the previous transaction.
pub fn is_retriable(error: ResponseError) -> bool {
    if error == ResponseError::ConcurrentTransactions {
        return true;
    }
    if FENCED.contains(&error) {
        return false;
    }
    error.is_retriable()
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
        let retriable = |code| is_retriable(ResponseError::try_from_code(code).unwrap());
        for code in [6, 7, 14, 15, 16, 51] {
            assert!(retriable(code), "{code}");
        }
        for code in [47, 90, 49, 50, 53, 105, 42, 87, 1000] {
            assert!(!retriable(code), "{code}");
        }
    }

    #[test]
    fn broker_errors_name_the_code() {
        let err = KafkaError::broker("InitProducerId", 50, Some("too long".into()));
        let text = err.to_string();
        assert!(text.contains("code 50"), "{text}");
        assert!(text.contains("too long"), "{text}");
        assert!(
            text.starts_with("InitProducerId failed with InvalidTransactionTimeout"),
            "{text}"
        );
        assert!(err.is(ResponseError::InvalidTransactionTimeout));
        let err = KafkaError::GaveUp {
            op: "describe",
            after: Duration::from_secs(1),
            last: Box::new(KafkaError::broker("DescribeTransactions", 90, None)),
        };
        assert!(err.is_fenced());
        assert!(!err.is_retriable());
    }
}
