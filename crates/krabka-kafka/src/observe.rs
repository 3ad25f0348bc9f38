//! What the client lets an observer see of its work: the service turns it
//! into metrics.

use std::time::Duration;

use super::error::KafkaError;

/// How a request ended, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A response arrived (it may still carry error codes).
    Ok,
    /// No response within the timeout.
    Timeout,
    /// The connection failed or could not be opened.
    Disconnected,
    /// Anything else: protocol, version or encoding errors.
    Error,
}

impl Outcome {
    /// The label value used in metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Timeout => "timeout",
            Outcome::Disconnected => "disconnected",
            Outcome::Error => "error",
        }
    }

    pub(crate) fn of(result: &Result<impl Sized, KafkaError>) -> Outcome {
        match result {
            Ok(_) => Outcome::Ok,
            Err(KafkaError::Timeout { .. }) => Outcome::Timeout,
            Err(KafkaError::Connect { .. } | KafkaError::ConnectionClosed { .. }) => {
                Outcome::Disconnected
            }
            Err(_) => Outcome::Error,
        }
    }
}

/// Why an answer of a transaction coordinator was not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StaleReason {
    /// Another broker named a different coordinator for the id.
    Unconfirmed,
    /// The answer's pair is below a pair already seen for the id.
    BelowHighWater,
}

impl StaleReason {
    /// The label value used in metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            StaleReason::Unconfirmed => "unconfirmed",
            StaleReason::BelowHighWater => "below_high_water",
        }
    }
}

/// Sees what the client does; the service turns it into metrics.
pub trait RequestObserver: Send + Sync + std::fmt::Debug {
    /// One request to one broker finished.
    fn observe(&self, api: &'static str, outcome: Outcome, elapsed: Duration);

    /// One request of `api` went to the broker at `addr` (on an open
    /// connection).
    fn sent(&self, _addr: &str, _api: &'static str) {}

    /// The broker at `addr` became stale (its metadata is behind another
    /// broker's) or, with `false`, current again.
    fn broker_stale(&self, _addr: &str, _stale: bool) {}

    /// One DescribeTransactions went out with `ids` transactional ids.
    fn describe_batch(&self, _ids: usize) {}

    /// One coordinator lookup (a FindCoordinator, maybe hedged) went out
    /// with `keys` transactional ids; confirmations are not lookups.
    fn coordinator_lookup(&self, _keys: usize) {}

    /// One confirmation of describes went to the broker at `addr` with
    /// `ids` transactional ids.
    fn confirmation(&self, _addr: &str, _ids: usize) {}

    /// A coordinator's answer was not trusted and the id was asked again.
    fn stale_answer(&self, _reason: StaleReason) {}

    /// The cluster behind the bootstrap servers changed its id.
    fn cluster_changed(&self) {}
}
