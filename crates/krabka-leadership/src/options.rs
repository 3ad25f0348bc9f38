//! Options of the leader-election client, with the seed's names, and the
//! combinations it refuses.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::error::LeadershipError;
use super::events::Event;
use krabka_coordination::SuccessionConfig;
use krabka_coordination::time::{Clock, SystemClock, millis};

/// Receives every transition of a member (for logs, demos, tests).
pub type EventSink = Arc<dyn Fn(&Event) + Send + Sync>;

/// How a member competes for a role.
#[derive(Clone)]
pub struct Options {
    /// The partition count of the coordination topic. Every member must use
    /// the topic's real count; `None` takes the transport's.
    pub partitions: Option<i32>,
    /// How long a lease lasts; also the transaction timeout, so it must not
    /// exceed the broker's `transaction.max.timeout.ms`.
    pub lease_duration: Duration,
    /// How often the holder renews; must be below the lease duration.
    pub renew_interval: Duration,
    /// The delay between the challenges of consecutive ranks.
    pub challenge_stagger: Duration,
    /// How often a waiting member re-reads the role's partition, so it sees
    /// a resign or a fresh lease before its turn. Defaults to half of the
    /// smaller of the renew interval and the stagger.
    pub poll_interval: Option<Duration>,
    /// The wall clock.
    pub clock: Arc<dyn Clock>,
    /// Where transitions are reported, besides `tracing`.
    pub events: Option<EventSink>,
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("partitions", &self.partitions)
            .field("lease_duration", &self.lease_duration)
            .field("renew_interval", &self.renew_interval)
            .field("challenge_stagger", &self.challenge_stagger)
            .field("poll_interval", &self.poll_interval)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Default for Options {
    /// The seed's example: lease 30 s, renew 10 s, stagger 5 s.
    fn default() -> Self {
        Options {
            partitions: None,
            lease_duration: Duration::from_secs(30),
            renew_interval: Duration::from_secs(10),
            challenge_stagger: Duration::from_secs(5),
            poll_interval: None,
            clock: Arc::new(SystemClock),
            events: None,
        }
    }
}

impl Options {
    /// Sets the partition count (`WithPartitions`).
    pub fn with_partitions(mut self, partitions: i32) -> Self {
        self.partitions = Some(partitions);
        self
    }

    /// Sets the lease duration (`WithLeaseDuration`).
    pub fn with_lease_duration(mut self, d: Duration) -> Self {
        self.lease_duration = d;
        self
    }

    /// Sets the renew interval (`WithRenewInterval`).
    pub fn with_renew_interval(mut self, d: Duration) -> Self {
        self.renew_interval = d;
        self
    }

    /// Sets the challenge stagger (`WithChallengeStagger`).
    pub fn with_challenge_stagger(mut self, d: Duration) -> Self {
        self.challenge_stagger = d;
        self
    }

    /// Sets the clock (`WithClock`).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Reports transitions to `sink`.
    pub fn with_events(mut self, sink: EventSink) -> Self {
        self.events = Some(sink);
        self
    }

    /// The succession timing in milliseconds.
    pub fn succession(&self) -> SuccessionConfig {
        SuccessionConfig {
            lease_duration_ms: millis(self.lease_duration),
            renew_interval_ms: millis(self.renew_interval),
            challenge_stagger_ms: millis(self.challenge_stagger),
        }
    }

    /// The interval between re-reads while waiting.
    pub fn poll(&self) -> Duration {
        self.poll_interval
            .unwrap_or_else(|| self.renew_interval.min(self.challenge_stagger) / 2)
            .max(Duration::from_millis(10))
    }

    /// Refuses combinations that cannot work. `topic_partitions` and
    /// `max_transaction_timeout` come from the cluster when known.
    pub fn validate(
        &self,
        topic_partitions: i32,
        max_transaction_timeout: Option<Duration>,
    ) -> Result<(), LeadershipError> {
        let invalid = |m: String| Err(LeadershipError::InvalidOptions(m));
        if self.lease_duration < Duration::from_millis(1) {
            return invalid("the lease duration must be positive".into());
        }
        if self.lease_duration.as_millis() > i32::MAX as u128 {
            return invalid(format!(
                "the lease duration {:?} does not fit a transaction timeout",
                self.lease_duration
            ));
        }
        if self.renew_interval.is_zero() || self.renew_interval >= self.lease_duration {
            return invalid(format!(
                "the renew interval ({:?}) must be positive and below the lease duration ({:?}), or the lease lapses between renewals",
                self.renew_interval, self.lease_duration
            ));
        }
        if let Some(max) = max_transaction_timeout
            && self.lease_duration > max
        {
            return invalid(format!(
                "the lease duration ({:?}) exceeds the broker's transaction.max.timeout.ms ({:?}); the coordinator would refuse it",
                self.lease_duration, max
            ));
        }
        if let Some(p) = self.partitions
            && p != topic_partitions
        {
            return invalid(format!(
                "{p} partitions were configured but the topic has {topic_partitions}; every member must use the topic's real count"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_cannot_work_and_says_why() {
        let ok = Options::default();
        assert!(ok.validate(16, Some(Duration::from_secs(900))).is_ok());
        let renew = ok.clone().with_renew_interval(Duration::from_secs(30));
        assert!(
            renew
                .validate(16, None)
                .unwrap_err()
                .to_string()
                .contains("below the lease duration")
        );
        let long = ok.clone().with_lease_duration(Duration::from_secs(901));
        assert!(
            long.validate(16, Some(Duration::from_secs(900)))
                .unwrap_err()
                .to_string()
                .contains("transaction.max.timeout.ms")
        );
        let parts = ok.clone().with_partitions(3);
        assert!(
            parts
                .validate(16, None)
                .unwrap_err()
                .to_string()
                .contains("topic has 16")
        );
        assert!(ok.with_partitions(16).validate(16, None).is_ok());
    }

    #[test]
    fn polling_defaults_to_half_the_shorter_interval() {
        let o = Options::default();
        assert_eq!(o.poll(), Duration::from_millis(2_500));
        assert_eq!(o.succession().challenge_stagger_ms, 5_000);
    }
}
