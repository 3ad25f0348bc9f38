//! The client's one retry policy: a retriable error is retried after a
//! jittered exponential backoff (`retry.backoff.ms` 100 ms doubling to
//! `retry.backoff.max.ms` 1 s, Kafka's Java defaults) until the caller's
//! deadline; the last error is then reported as [`KafkaError::GaveUp`].
//!
//! What to refresh after an error (metadata, a coordinator, a broker's
//! reconnect backoff) is decided in one place, `ClusterState::learn`; this
//! only decides when to try again.

use std::future::Future;

use tokio::time::Instant;

use super::config::ClientConfig;
use super::error::KafkaError;
use crate::backoff::{Backoff, Jitter};

/// One operation's retries.
#[derive(Debug)]
pub(crate) struct Retry {
    op: &'static str,
    started: Instant,
    deadline: Instant,
    backoff: Backoff,
}

impl Retry {
    pub(crate) fn new(op: &'static str, config: &ClientConfig, deadline: Instant) -> Retry {
        Retry {
            op,
            started: Instant::now(),
            deadline,
            backoff: Backoff::new(
                config.retry_backoff,
                config.retry_backoff_max,
                Jitter::EQUAL,
            ),
        }
    }

    /// Waits out the next backoff after `error`, or gives up with it when
    /// the backoff would end past the deadline.
    pub(crate) async fn pause(&mut self, error: KafkaError) -> Result<(), KafkaError> {
        let delay = self.backoff.next_delay();
        if Instant::now() + delay >= self.deadline {
            return Err(self.gave_up(error));
        }
        tracing::debug!(op = self.op, %error, ?delay, "retrying");
        tokio::time::sleep(delay).await;
        Ok(())
    }

    /// `error` wrapped as the operation's final failure.
    pub(crate) fn gave_up(&self, error: KafkaError) -> KafkaError {
        match error {
            e @ KafkaError::GaveUp { .. } => e,
            last => KafkaError::GaveUp {
                op: self.op,
                after: self.started.elapsed(),
                last: Box::new(last),
            },
        }
    }

    /// The error of an attempt cut off by the deadline.
    pub(crate) fn out_of_time(&self) -> KafkaError {
        KafkaError::Timeout {
            api: self.op,
            addr: "the cluster".into(),
            after: self.started.elapsed(),
        }
    }
}

/// Runs `attempt` until it succeeds, fails for good, or the operation
/// timeout of `config` passes.
pub(crate) async fn retrying<T, F, Fut>(
    config: &ClientConfig,
    op: &'static str,
    attempt: F,
) -> Result<T, KafkaError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, KafkaError>>,
{
    let deadline = Instant::now() + config.operation_timeout;
    retrying_until(config, op, deadline, attempt).await
}

/// Runs `attempt` until it succeeds, fails for good, or `deadline`
/// passes. An attempt still running at the deadline is dropped: the
/// request's own timeout is the client's, so a caller in a hurry never
/// shortens it and never poisons a connection to a live broker.
pub(crate) async fn retrying_until<T, F, Fut>(
    config: &ClientConfig,
    op: &'static str,
    deadline: Instant,
    mut attempt: F,
) -> Result<T, KafkaError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, KafkaError>>,
{
    let mut retry = Retry::new(op, config, deadline);
    // The last retriable error: what an attempt cut off by the deadline
    // reports, as it says more than the deadline does.
    let mut last = None;
    loop {
        match tokio::time::timeout_at(deadline, attempt()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) if e.is_retriable() => {
                last = Some(e.clone());
                retry.pause(e).await?;
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                let last = last.unwrap_or_else(|| retry.out_of_time());
                return Err(retry.gave_up(last));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn retries_back_off_and_give_up_with_the_last_error_before_the_deadline() {
        // Kafka's defaults: 100 ms doubling to 1 s, here in the upper half
        // of each step: 50-100, 100-200, 200-400, 400-800 ms.
        let config = ClientConfig::new(["b:1"]);
        let started = Instant::now();
        let deadline = started + Duration::from_secs(1);
        let mut retry = Retry::new("op", &config, deadline);
        let error = KafkaError::broker("EndTxn", 51, None);
        let mut pauses = 0;
        let mut gave_up = None;
        // Bounded: a retry that never gives up fails here, not hangs.
        for _ in 0..20 {
            match retry.pause(error.clone()).await {
                Ok(()) => pauses += 1,
                Err(e) => {
                    gave_up = Some(e);
                    break;
                }
            }
        }
        let gave_up = gave_up.expect("gives up within 20 pauses");
        assert!((3..=4).contains(&pauses), "{pauses} pauses");
        assert!(Instant::now() < deadline, "never sleeps past the deadline");
        match gave_up {
            KafkaError::GaveUp { op, last, .. } => assert_eq!((op, *last), ("op", error)),
            other => panic!("{other}"),
        }
    }
}
