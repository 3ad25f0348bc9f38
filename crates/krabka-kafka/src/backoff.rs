//! Exponential backoff with jitter: the one rule for how long anything
//! waits before trying again (the Kafka client's retries, reconnects and
//! coordinator lookups, the tailer, the watcher).
//!
//! Steps are `initial` doubling up to `max`; each delay is its step times a
//! factor drawn from a [`Jitter`] range, so that many clients recovering
//! from one broker hiccup do not all come back at the same instant
//! (rskafka's `backoff.rs` and Kafka's `ExponentialBackoff` are the models).
//! A [`Gate`] is a backoff in time: shut by a failure until the delay it
//! earned has passed.

use std::time::Duration;

use tokio::time::Instant;

/// The range a step is scaled by.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Jitter {
    low: f64,
    high: f64,
}

impl Jitter {
    /// The upper half of the step ("equal jitter"): retries.
    pub const EQUAL: Jitter = Jitter {
        low: 0.5,
        high: 1.0,
    };
    /// ± 20 %, Kafka's `ExponentialBackoff` with `jitter` 0.2: reconnects
    /// (`reconnect.backoff.ms`, as `ClusterConnectionStates`).
    pub const KAFKA: Jitter = Jitter {
        low: 0.8,
        high: 1.2,
    };
    /// The exact step, for a gate whose callers come with jitter of their
    /// own.
    pub const NONE: Jitter = Jitter {
        low: 1.0,
        high: 1.0,
    };

    fn apply(self, step: Duration) -> Duration {
        if self.low == self.high {
            return step.mul_f64(self.low);
        }
        step.mul_f64(crate::host::random_range(self.low..=self.high))
    }
}

/// Delays of `initial`, doubling up to `max`, each with jitter.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    jitter: Jitter,
    attempts: u32,
}

impl Backoff {
    /// A backoff whose first step is `initial` (at least 1 ms) and whose
    /// steps stop growing at `max`.
    pub fn new(initial: Duration, max: Duration, jitter: Jitter) -> Backoff {
        let initial = initial.max(Duration::from_millis(1));
        Backoff {
            initial,
            max: max.max(initial),
            jitter,
            attempts: 0,
        }
    }

    /// The step of the next delay, before jitter.
    pub fn step(&self) -> Duration {
        self.initial
            .saturating_mul(1 << self.attempts.min(20))
            .min(self.max)
    }

    /// The delay before the next attempt; the step after it doubles.
    pub fn next_delay(&mut self) -> Duration {
        let step = self.step();
        self.attempts = self.attempts.saturating_add(1);
        self.jitter.apply(step)
    }

    /// Delays handed out since the start (failures, for a caller that
    /// backs off after each).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}

/// A backoff in time: open until a failure shuts it for the next delay.
#[derive(Clone, Debug)]
pub struct Gate {
    backoff: Backoff,
    until: Option<Instant>,
}

impl Gate {
    /// An open gate that backs off by `backoff`.
    pub fn new(backoff: Backoff) -> Gate {
        Gate {
            backoff,
            until: None,
        }
    }

    /// True when nothing holds the next attempt back at `now`.
    pub fn is_open(&self, now: Instant) -> bool {
        self.until.is_none_or(|at| at <= now)
    }

    /// A failure at `now`: shut for the next delay, which is returned.
    pub fn shut(&mut self, now: Instant) -> Duration {
        let delay = self.backoff.next_delay();
        self.until = Some(now + delay);
        delay
    }

    /// How much longer the gate stays shut after `now`, if it does.
    pub fn shut_for(&self, now: Instant) -> Option<Duration> {
        let left = self.until?.saturating_duration_since(now);
        (!left.is_zero()).then_some(left)
    }

    /// When the gate opens, if it is shut.
    pub fn opens_at(&self) -> Option<Instant> {
        self.until
    }

    /// Failures since the gate was made.
    pub fn failures(&self) -> u32 {
        self.backoff.attempts()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn delays_double_to_the_cap_each_within_its_jitter() {
        let steps = [100u32, 200, 400, 800, 1000, 1000, 1000];
        for (jitter, low, high) in [
            (Jitter::EQUAL, 0.5, 1.0),
            (Jitter::KAFKA, 0.8, 1.2),
            (Jitter::NONE, 1.0, 1.0),
        ] {
            let mut backoff = Backoff::new(100 * MS, 1000 * MS, jitter);
            for (i, step) in steps.into_iter().enumerate() {
                let step = step * MS;
                assert_eq!(backoff.step(), step, "{jitter:?} step {i}");
                let delay = backoff.next_delay();
                assert!(
                    delay >= step.mul_f64(low) && delay <= step.mul_f64(high),
                    "{jitter:?} delay {i}: {delay:?} outside {step:?} x {low}..={high}"
                );
            }
            assert_eq!(backoff.attempts(), steps.len() as u32);
        }
    }

    #[test]
    fn jitter_spreads_the_delays_of_one_step() {
        let delays: std::collections::HashSet<Duration> = (0..50)
            .map(|_| Backoff::new(MS * 1000, MS * 1000, Jitter::EQUAL).next_delay())
            .collect();
        assert!(delays.len() > 10, "{} distinct delays of 50", delays.len());
    }

    #[test]
    fn a_zero_or_inverted_setting_still_backs_off() {
        let mut backoff = Backoff::new(Duration::ZERO, Duration::ZERO, Jitter::NONE);
        assert_eq!(backoff.next_delay(), MS);
        let mut backoff = Backoff::new(50 * MS, 10 * MS, Jitter::NONE);
        assert_eq!(backoff.next_delay(), 50 * MS, "max is at least initial");
        assert_eq!(backoff.next_delay(), 50 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_gate_stays_shut_for_each_growing_delay() {
        let mut gate = Gate::new(Backoff::new(100 * MS, 1000 * MS, Jitter::NONE));
        assert!(gate.is_open(Instant::now()));
        assert_eq!(gate.shut_for(Instant::now()), None);
        for step in [100u32, 200, 400, 800, 1000, 1000] {
            let now = Instant::now();
            assert_eq!(gate.shut(now), step * MS);
            assert_eq!(gate.opens_at(), Some(now + step * MS));
            tokio::time::advance((step - 1) * MS).await;
            assert!(!gate.is_open(Instant::now()), "shut 1 ms before {step} ms");
            assert_eq!(gate.shut_for(Instant::now()), Some(MS));
            tokio::time::advance(MS).await;
            assert!(gate.is_open(Instant::now()), "open at {step} ms");
            assert_eq!(gate.shut_for(Instant::now()), None);
        }
        assert_eq!(gate.failures(), 6);
    }
}
