//! Exponential backoff with jitter, so many clients retrying after one
//! broker hiccup do not retry in lockstep.

use std::time::Duration;

use rand::RngExt;

/// Delays of `initial`, doubling up to `max`, each drawn from the upper half
/// of its step ("equal jitter").
#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            next: initial.max(Duration::from_millis(1)),
            max: max.max(initial),
        }
    }

    /// The delay before the next attempt.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let step = self.next;
        self.next = (step * 2).min(self.max);
        let half = step / 2;
        let jitter_ms = rand::rng().random_range(0..=half.as_millis() as u64);
        half + Duration::from_millis(jitter_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_to_the_cap_and_stay_within_their_step() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(800));
        let steps = [100, 200, 400, 800, 800, 800];
        for step in steps {
            let d = b.next_delay().as_millis() as u64;
            assert!(
                d >= step / 2 && d <= step,
                "{d} outside {}..={step}",
                step / 2
            );
        }
    }
}
