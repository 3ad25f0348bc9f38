//! What the client knows of each topic's `min.insync.replicas`: how many
//! replicas a leader's confirmation needs besides the leader
//! (`describe::quorum` for `__transaction_state`, `epochs` for the
//! coordination topic's reads), and when to read it again.
//!
//! Unknown (never read, refused, another cluster) counts as 1, which asks
//! every replica: the value that trusts least.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use krabka_coordination::sync::lock;

/// How often a topic's `min.insync.replicas` is read again: an operator may
/// alter it, and a lower value needs more replicas to confirm.
pub(crate) const MIN_ISR_EVERY: Duration = Duration::from_secs(60);

/// How soon a failed reading is tried again.
pub(crate) const MIN_ISR_RETRY: Duration = Duration::from_secs(5);

/// One topic's reading.
#[derive(Debug, Default)]
struct Reading {
    /// The value read (`None`: never read, or refused).
    value: Option<i32>,
    /// When it was last asked for (a tokio instant: a timer's gate).
    asked: Option<Instant>,
    /// The last reading failed (warned of once).
    failing: bool,
}

/// Per topic, its `min.insync.replicas` as last read.
#[derive(Debug, Default)]
pub(crate) struct MinIsrs {
    topics: Mutex<HashMap<String, Reading>>,
}

impl MinIsrs {
    /// `topic`'s `min.insync.replicas`, or 1 while it is not known.
    pub(crate) fn of(&self, topic: &str) -> i32 {
        lock(&self.topics)
            .get(topic)
            .and_then(|r| r.value)
            .unwrap_or(1)
            .max(1)
    }

    /// True when `topic`'s value is due to be read (never, or
    /// [`MIN_ISR_EVERY`] ago): the caller reads it. Marks it asked.
    pub(crate) fn due(&self, topic: &str, now: Instant) -> bool {
        let mut topics = lock(&self.topics);
        let reading = topics.entry(topic.to_owned()).or_default();
        if reading.asked.is_some_and(|at| now < at + MIN_ISR_EVERY) {
            return false;
        }
        reading.asked = Some(now);
        true
    }

    /// Reading `topic`'s value failed at `now`: due again [`MIN_ISR_RETRY`]
    /// later. True for the first failure since a reading succeeded.
    pub(crate) fn failed(&self, topic: &str, now: Instant) -> bool {
        let mut topics = lock(&self.topics);
        let reading = topics.entry(topic.to_owned()).or_default();
        reading.asked = Some(
            (now + MIN_ISR_RETRY)
                .checked_sub(MIN_ISR_EVERY)
                .unwrap_or(now),
        );
        !std::mem::replace(&mut reading.failing, true)
    }

    /// Takes in a reading of `topic` (`None`: the cluster would not say).
    /// Returns the value when it differs from the one known before (to be
    /// said), and whether it is below 2 (to be warned of).
    pub(crate) fn read(&self, topic: &str, value: Option<i32>) -> Option<(i32, bool)> {
        let mut topics = lock(&self.topics);
        let reading = topics.entry(topic.to_owned()).or_default();
        let before = std::mem::replace(&mut reading.value, value);
        reading.failing = false;
        let value = value.filter(|_| before != value)?;
        Some((value, value < 2))
    }

    /// Forgets every reading (another cluster answers).
    pub(crate) fn clear(&self) {
        lock(&self.topics).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn unknown_counts_as_one_read_once_a_minute_failures_sooner_each_value_said_once() {
        let m = MinIsrs::default();
        let t = "__transaction_state";
        assert_eq!(m.of(t), 1);
        let now = Instant::now();
        assert!(m.due(t, now));
        assert!(!m.due(t, now + Duration::from_secs(1)));
        assert!(m.failed(t, now), "the first failure");
        assert!(!m.failed(t, now), "not the second");
        assert!(!m.due(t, now + MIN_ISR_RETRY - Duration::from_millis(1)));
        assert!(m.due(t, now + MIN_ISR_RETRY));
        assert_eq!(m.read(t, Some(2)), Some((2, false)), "said");
        assert_eq!(m.read(t, Some(2)), None, "once");
        assert_eq!(m.of(t), 2);
        assert!(m.failed(t, now), "first again after a success");
        assert_eq!(m.read(t, Some(1)), Some((1, true)), "warned");
        assert_eq!(m.read(t, Some(1)), None, "once");
        assert_eq!(m.of("other"), 1);
        m.clear();
        assert_eq!(m.of(t), 1);
    }
}
