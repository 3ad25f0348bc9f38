//! What the client remembers of each broker between requests: recent
//! failures and the reconnect backoff they earn, as Kafka's Java
//! `ClusterConnectionStates` does (`reconnect.backoff.ms` 50 ms doubling to
//! `reconnect.backoff.max.ms` 1 s, with 20 % jitter).
//!
//! A broker that failed is not connected to again before its backoff ends,
//! and is tried last when any broker will do, so a dead or hung broker costs
//! one timeout per backoff, not one per request.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rand::RngExt;
use tokio::time::Instant;

use crate::sync::lock;

/// Failure memory of one broker address.
#[derive(Clone, Copy, Debug, Default)]
struct NodeState {
    /// Failures since the last success.
    failures: u32,
    /// No new connection before this instant.
    blocked_until: Option<Instant>,
}

/// Failure memory of every broker the client talked to.
#[derive(Debug)]
pub(crate) struct NodeStates {
    base: Duration,
    max: Duration,
    nodes: Mutex<HashMap<String, NodeState>>,
}

impl NodeStates {
    pub(crate) fn new(base: Duration, max: Duration) -> NodeStates {
        NodeStates {
            base: base.max(Duration::from_millis(1)),
            max: max.max(base),
            nodes: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, NodeState>> {
        lock(&self.nodes)
    }

    /// A connection to `addr` failed or died (refused, reset, timed out):
    /// block new connections for the next backoff step.
    pub(crate) fn failed(&self, addr: &str) {
        let mut nodes = self.lock();
        let state = nodes.entry(addr.to_owned()).or_default();
        state.failures = state.failures.saturating_add(1);
        let step = self
            .base
            .saturating_mul(1 << state.failures.saturating_sub(1).min(20))
            .min(self.max);
        let jitter = rand::rng().random_range(0.8..1.2);
        state.blocked_until = Some(Instant::now() + step.mul_f64(jitter));
    }

    /// `addr` answered: forget its failures. True when it had any.
    pub(crate) fn succeeded(&self, addr: &str) -> bool {
        let mut nodes = self.lock();
        match nodes.get_mut(addr) {
            Some(state) if state.failures > 0 => {
                *state = NodeState::default();
                true
            }
            _ => false,
        }
    }

    /// How long new connections to `addr` stay blocked, if they are.
    pub(crate) fn blocked_for(&self, addr: &str) -> Option<Duration> {
        let until = self.lock().get(addr)?.blocked_until?;
        let left = until.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// Failures of `addr` since it last answered.
    #[cfg(test)]
    pub(crate) fn failures(&self, addr: &str) -> u32 {
        self.lock().get(addr).map_or(0, |s| s.failures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn failures_block_reconnects_for_a_growing_jittered_step() {
        let nodes = NodeStates::new(Duration::from_millis(50), Duration::from_secs(1));
        assert_eq!(nodes.blocked_for("a:1"), None);
        let mut previous = Duration::ZERO;
        for (i, step_ms) in [50u64, 100, 200, 400, 800, 1000, 1000]
            .into_iter()
            .enumerate()
        {
            nodes.failed("a:1");
            let blocked = nodes.blocked_for("a:1").expect("blocked after a failure");
            let step = Duration::from_millis(step_ms);
            assert!(
                blocked >= step.mul_f64(0.8) && blocked <= step.mul_f64(1.2),
                "failure {i}: {blocked:?} outside {step:?} ± 20 %"
            );
            if step_ms < 1000 {
                assert!(blocked > previous.mul_f64(1.2) / 2, "grows");
            }
            previous = blocked;
        }
        assert_eq!(nodes.failures("a:1"), 7);
        tokio::time::advance(Duration::from_millis(1300)).await;
        assert_eq!(nodes.blocked_for("a:1"), None, "the block ends");
        nodes.failed("a:1");
        nodes.succeeded("a:1");
        assert_eq!(nodes.blocked_for("a:1"), None);
        assert_eq!(nodes.failures("a:1"), 0, "an answer forgets the failures");
        assert_eq!(
            nodes.blocked_for("b:1"),
            None,
            "other brokers are unaffected"
        );
    }
}
