//! What the client remembers of each broker between requests: recent
//! failures, the reconnect backoff they earn and why the last one failed,
//! as Kafka's Java `ClusterConnectionStates` does (`reconnect.backoff.ms`
//! 50 ms doubling to `reconnect.backoff.max.ms` 1 s, with 20 % jitter).
//!
//! A broker that failed is not connected to again before its backoff ends,
//! and is tried last when any broker will do, so a dead or hung broker costs
//! one timeout per backoff, not one per request. Meanwhile the reason of its
//! last failure ("Connection refused", a DNS or TLS error) stands in for the
//! attempt that was not made, so every caller sees the cause.
//!
//! How loud a failure is decided here too: the first of a streak is a
//! warning, then at most one warning a minute per address unless the reason
//! changes; the rest are debug.
//!
//! Beyond the Java client: a broker whose answer was behind another's
//! (`state::epochs`) gets new connections. A TCP connection leads to one
//! process for as long as it lives, and when a broker is replaced behind
//! its address (a new host or pod registered with the same node id, its
//! DNS name moved) the old connections still lead to the old process, cut
//! off and answering from memory; only a new connection reaches the new
//! one. A broker that is merely behind answers its next probe on a new
//! connection as it would on the old.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::{Backoff, Gate, Jitter};
use krabka_coordination::sync::lock;

/// Most one warning per address this often while the reason stays.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// How loud to report a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loudness {
    /// The first of a streak, a new reason, or a minute since the last.
    Warn,
    /// Already reported.
    Quiet,
}

/// Why new connections to a broker wait, and how much longer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Blocked {
    /// Until the next attempt.
    pub(crate) left: Duration,
    /// The last attempt's failure.
    pub(crate) reason: String,
}

/// Failure memory of one broker address, from its first failure until it
/// answers again.
#[derive(Debug)]
struct NodeState {
    /// The reconnect backoff, once a failure earned one.
    gate: Option<Gate>,
    /// Why the last attempt failed.
    reason: String,
    /// The last warning: when, and for which reason.
    warned: Option<(Instant, String)>,
}

/// Failure memory of every broker the client talked to.
#[derive(Debug)]
pub(crate) struct NodeStates {
    backoff: Backoff,
    nodes: Mutex<HashMap<String, NodeState>>,
    /// Per address, the instant connections opened before it were given up
    /// (one entry per broker address ever found behind).
    renewed: Mutex<HashMap<String, Instant>>,
}

impl NodeStates {
    pub(super) fn new(base: Duration, max: Duration) -> NodeStates {
        NodeStates {
            backoff: Backoff::new(base, max, Jitter::KAFKA),
            nodes: Mutex::default(),
            renewed: Mutex::default(),
        }
    }

    /// The connections open to `addr` now are not used again: the next
    /// request opens a new one (the process behind the address may have
    /// been replaced; see the module docs).
    pub(super) fn renew(&self, addr: &str) {
        lock(&self.renewed).insert(addr.to_owned(), Instant::now());
    }

    /// True when a connection to `addr` opened at `opened` was given up.
    pub(crate) fn given_up(&self, addr: &str, opened: Instant) -> bool {
        let renewed = lock(&self.renewed);
        !renewed.is_empty() && renewed.get(addr).is_some_and(|at| opened <= *at)
    }

    /// An attempt to reach `addr` failed for `reason`; with `back_off`
    /// (refused, reset, timed out) new connections wait for the next step.
    /// Says how loud to report it.
    pub(super) fn failed(&self, addr: &str, reason: &str, back_off: bool) -> Loudness {
        let now = Instant::now();
        let mut nodes = lock(&self.nodes);
        let state = nodes.entry(addr.to_owned()).or_insert_with(|| NodeState {
            gate: None,
            reason: String::new(),
            warned: None,
        });
        if back_off {
            state
                .gate
                .get_or_insert_with(|| Gate::new(self.backoff.clone()))
                .shut(now);
        }
        reason.clone_into(&mut state.reason);
        match &state.warned {
            Some((at, said)) if said == reason && now.duration_since(*at) < WARN_EVERY => {
                Loudness::Quiet
            }
            _ => {
                state.warned = Some((now, reason.to_owned()));
                Loudness::Warn
            }
        }
    }

    /// `addr` answered: forget its failures. The reconnect backoffs it had
    /// earned, when it had failed at all.
    pub(super) fn succeeded(&self, addr: &str) -> Option<u32> {
        let mut nodes = lock(&self.nodes);
        if nodes.is_empty() {
            return None;
        }
        let state = nodes.remove(addr)?;
        Some(state.gate.map_or(0, |g| g.failures()))
    }

    /// Why and how long new connections to `addr` wait, if they do.
    pub(crate) fn blocked(&self, addr: &str) -> Option<Blocked> {
        let nodes = lock(&self.nodes);
        let state = nodes.get(addr)?;
        let left = state.gate.as_ref()?.shut_for(Instant::now())?;
        Some(Blocked {
            left,
            reason: state.reason.clone(),
        })
    }

    /// True while new connections to `addr` wait.
    pub(crate) fn is_blocked(&self, addr: &str) -> bool {
        let nodes = lock(&self.nodes);
        let now = Instant::now();
        nodes
            .get(addr)
            .and_then(|s| s.gate.as_ref())
            .is_some_and(|g| !g.is_open(now))
    }

    /// Backoffs `addr` earned since it last answered.
    pub(crate) fn failures(&self, addr: &str) -> u32 {
        lock(&self.nodes)
            .get(addr)
            .and_then(|s| s.gate.as_ref())
            .map_or(0, Gate::failures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn failures_block_reconnects_for_a_growing_jittered_step() {
        let nodes = NodeStates::new(Duration::from_millis(50), Duration::from_secs(1));
        assert_eq!(nodes.blocked("a:1"), None);
        for (i, step_ms) in [50u64, 100, 200, 400, 800, 1000, 1000]
            .into_iter()
            .enumerate()
        {
            nodes.failed("a:1", "Connection refused (os error 111)", true);
            let blocked = nodes.blocked("a:1").expect("blocked after a failure");
            let step = Duration::from_millis(step_ms);
            assert!(
                blocked.left >= step.mul_f64(0.8) && blocked.left <= step.mul_f64(1.2),
                "failure {i}: {blocked:?} outside {step:?} ± 20 %"
            );
            assert_eq!(blocked.reason, "Connection refused (os error 111)");
            assert!(nodes.is_blocked("a:1"));
        }
        assert_eq!(nodes.failures("a:1"), 7);
        tokio::time::advance(Duration::from_millis(1300)).await;
        assert_eq!(nodes.blocked("a:1"), None, "the block ends");
        assert!(!nodes.is_blocked("a:1"));
        nodes.failed("a:1", "reset", true);
        assert_eq!(nodes.succeeded("a:1"), Some(8));
        assert_eq!(nodes.blocked("a:1"), None);
        assert_eq!(nodes.failures("a:1"), 0, "an answer forgets the failures");
        assert_eq!(nodes.succeeded("a:1"), None, "nothing left to forget");
        assert_eq!(nodes.blocked("b:1"), None, "other brokers are unaffected");
    }

    #[tokio::test(start_paused = true)]
    async fn connections_opened_before_a_renewal_are_given_up() {
        let nodes = NodeStates::new(Duration::from_millis(50), Duration::from_secs(1));
        let old = Instant::now();
        assert!(!nodes.given_up("a:1", old));
        tokio::time::advance(Duration::from_millis(1)).await;
        nodes.renew("a:1");
        assert!(nodes.given_up("a:1", old));
        assert!(!nodes.given_up("b:1", old), "per address");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!nodes.given_up("a:1", Instant::now()), "a new one is used");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_without_backoff_is_remembered_but_blocks_nothing() {
        let nodes = NodeStates::new(Duration::from_millis(50), Duration::from_secs(1));
        nodes.failed("a:1", "TLS: handshake failed", false);
        assert_eq!(nodes.blocked("a:1"), None);
        assert_eq!(
            nodes.succeeded("a:1"),
            Some(0),
            "it failed, with no backoff"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_streak_warns_once_a_minute_per_address_and_again_when_the_reason_changes() {
        let nodes = NodeStates::new(Duration::from_millis(50), Duration::from_secs(1));
        let refused = "Connection refused (os error 111)";
        assert_eq!(nodes.failed("a:1", refused, true), Loudness::Warn);
        assert_eq!(
            nodes.failed("b:1", refused, true),
            Loudness::Warn,
            "per address"
        );
        for _ in 0..10 {
            tokio::time::advance(Duration::from_secs(5)).await;
            assert_eq!(nodes.failed("a:1", refused, true), Loudness::Quiet);
        }
        assert_eq!(
            nodes.failed("a:1", "Name or service not known", true),
            Loudness::Warn,
            "a new reason"
        );
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(
            nodes.failed("a:1", "Name or service not known", true),
            Loudness::Quiet
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            nodes.failed("a:1", "Name or service not known", true),
            Loudness::Warn,
            "a minute later"
        );
        nodes.succeeded("a:1");
        assert_eq!(
            nodes.failed("a:1", "Name or service not known", true),
            Loudness::Warn,
            "a new streak"
        );
    }
}
