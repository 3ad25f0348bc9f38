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

use tokio::time::Instant;

use crate::backoff::{Backoff, Gate, Jitter};
use crate::sync::lock;

/// Failure memory of every broker the client talked to.
#[derive(Debug)]
pub(crate) struct NodeStates {
    backoff: Backoff,
    /// The reconnect backoff of each broker that failed since it last
    /// answered.
    nodes: Mutex<HashMap<String, Gate>>,
}

impl NodeStates {
    pub(super) fn new(base: Duration, max: Duration) -> NodeStates {
        NodeStates {
            backoff: Backoff::new(base, max, Jitter::KAFKA),
            nodes: Mutex::default(),
        }
    }

    /// A connection to `addr` failed or died (refused, reset, timed out):
    /// block new connections for the next backoff step.
    pub(super) fn failed(&self, addr: &str) {
        lock(&self.nodes)
            .entry(addr.to_owned())
            .or_insert_with(|| Gate::new(self.backoff.clone()))
            .shut(Instant::now());
    }

    /// `addr` answered: forget its failures. True when it had any.
    pub(super) fn succeeded(&self, addr: &str) -> bool {
        let mut nodes = lock(&self.nodes);
        !nodes.is_empty() && nodes.remove(addr).is_some_and(|gate| gate.failures() > 0)
    }

    /// How long new connections to `addr` stay blocked, if they are.
    pub(crate) fn blocked_for(&self, addr: &str) -> Option<Duration> {
        lock(&self.nodes).get(addr)?.shut_for(Instant::now())
    }

    /// True while new connections to `addr` wait.
    pub(crate) fn is_blocked(&self, addr: &str) -> bool {
        self.blocked_for(addr).is_some()
    }

    /// Failures of `addr` since it last answered.
    #[cfg(test)]
    pub(crate) fn failures(&self, addr: &str) -> u32 {
        lock(&self.nodes).get(addr).map_or(0, Gate::failures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn failures_block_reconnects_for_a_growing_jittered_step() {
        let nodes = NodeStates::new(Duration::from_millis(50), Duration::from_secs(1));
        assert_eq!(nodes.blocked_for("a:1"), None);
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
            assert!(nodes.is_blocked("a:1"));
        }
        assert_eq!(nodes.failures("a:1"), 7);
        tokio::time::advance(Duration::from_millis(1300)).await;
        assert_eq!(nodes.blocked_for("a:1"), None, "the block ends");
        assert!(!nodes.is_blocked("a:1"));
        nodes.failed("a:1");
        assert!(nodes.succeeded("a:1"));
        assert_eq!(nodes.blocked_for("a:1"), None);
        assert_eq!(nodes.failures("a:1"), 0, "an answer forgets the failures");
        assert!(!nodes.succeeded("a:1"), "nothing left to forget");
        assert_eq!(
            nodes.blocked_for("b:1"),
            None,
            "other brokers are unaffected"
        );
    }
}
