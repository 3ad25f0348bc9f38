//! Live answers from the transaction coordinator, batched.
//!
//! Per coordinator at most one DescribeTransactions is in flight; checks
//! that arrive meanwhile (for any roles) wait and go together in the next
//! request, up to the batch limit. A check is only ever answered by a
//! request sent after it arrived, so an `authoritative` answer is never
//! older than the question. Nothing is cached here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::metrics::Metrics;
use crate::kafka::{Broker, Described, KafkaClient, KafkaError};

type Reply = oneshot::Sender<Described>;

#[derive(Debug, Default)]
struct Queue {
    waiting: Vec<(String, Reply)>,
    busy: bool,
}

/// Describes roles for the authority checks.
#[derive(Debug)]
pub struct Describer {
    client: KafkaClient,
    batching: bool,
    max_batch: usize,
    queues: Mutex<HashMap<Broker, Queue>>,
    metrics: Arc<Metrics>,
}

impl Describer {
    /// A describer over `client`; `batching` off sends one request per check.
    pub fn new(
        client: KafkaClient,
        batching: bool,
        max_batch: usize,
        metrics: Arc<Metrics>,
    ) -> Describer {
        Describer {
            client,
            batching,
            max_batch: max_batch.max(1),
            queues: Mutex::default(),
            metrics,
        }
    }

    fn queues(&self) -> std::sync::MutexGuard<'_, HashMap<Broker, Queue>> {
        self.queues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The coordinator's current description of `role` (`None`: no holder),
    /// from a request sent after this call began. Retriable errors (a moved
    /// coordinator, a lost connection) are retried until `deadline`.
    pub async fn describe(self: &Arc<Self>, role: &str, deadline: Instant) -> Described {
        let config = self.client.config();
        let mut backoff_ms = config.retry_backoff.as_millis().max(1) as u64;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timed_out(left));
            }
            let attempt = tokio::time::timeout(left, self.attempt(role, left)).await;
            match attempt {
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(e)) if e.is_retriable() => {
                    let delay = Duration::from_millis(backoff_ms);
                    if Instant::now() + delay >= deadline {
                        return Err(e);
                    }
                    tracing::debug!(role, error = %e, "describe failed; retrying");
                    tokio::time::sleep(delay).await;
                    backoff_ms =
                        (backoff_ms * 2).min(config.retry_backoff_max.as_millis().max(1) as u64);
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(self.timed_out(left)),
            }
        }
    }

    /// Describes many roles at once, for a batch check: every role is queued
    /// before any request goes out, so the roles of one coordinator share
    /// requests. Roles that fail with a retriable error are retried one by
    /// one until `deadline`.
    pub async fn describe_many(
        self: &Arc<Self>,
        roles: &[String],
        deadline: Instant,
    ) -> Vec<Described> {
        let left = deadline.saturating_duration_since(Instant::now());
        let coordinators = if self.batching && roles.len() > 1 {
            let timeout = self.client.config().request_timeout.min(left);
            self.client
                .transaction_coordinators(roles, timeout)
                .await
                .unwrap_or_default()
        } else {
            HashMap::new()
        };
        let mut receivers = Vec::with_capacity(roles.len());
        let mut starts = Vec::new();
        {
            let mut queues = self.queues();
            for role in roles {
                let Some(Ok(coordinator)) = coordinators.get(role) else {
                    receivers.push(None);
                    continue;
                };
                let (tx, rx) = oneshot::channel();
                let queue = queues.entry(coordinator.clone()).or_default();
                queue.waiting.push((role.clone(), tx));
                if !std::mem::replace(&mut queue.busy, true) {
                    starts.push(coordinator.clone());
                }
                receivers.push(Some(rx));
            }
        }
        for coordinator in starts {
            tokio::spawn(self.clone().flush(coordinator));
        }
        let answers = receivers
            .into_iter()
            .zip(roles)
            .map(|(rx, role)| async move {
                let Some(rx) = rx else {
                    return self.describe(role, deadline).await;
                };
                let left = deadline.saturating_duration_since(Instant::now());
                match tokio::time::timeout(left, rx).await {
                    Ok(Ok(Err(e))) if e.is_retriable() => self.describe(role, deadline).await,
                    Ok(Ok(answer)) => answer,
                    Ok(Err(_)) => Err(KafkaError::Invalid("the describe batch was dropped".into())),
                    Err(_) => Err(self.timed_out(left)),
                }
            });
        futures::future::join_all(answers).await
    }

    fn timed_out(&self, after: Duration) -> KafkaError {
        KafkaError::Timeout {
            api: "DescribeTransactions",
            addr: "the transaction coordinator".into(),
            after,
        }
    }

    async fn attempt(self: &Arc<Self>, role: &str, left: Duration) -> Described {
        let request_timeout = self.client.config().request_timeout.min(left);
        let ids = [role.to_owned()];
        let coordinator = self
            .client
            .transaction_coordinators(&ids, request_timeout)
            .await?
            .remove(role)
            .unwrap_or_else(|| Err(KafkaError::Invalid(format!("no coordinator for {role:?}"))))?;
        if !self.batching {
            self.metrics.describe_batch_size.observe(1.0);
            let answers = self
                .client
                .describe_at(&coordinator, &ids, request_timeout)
                .await?;
            return answers
                .into_iter()
                .find(|(id, _)| id == role)
                .map_or_else(|| Err(KafkaError::Invalid("no answer".into())), |(_, a)| a);
        }
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut queues = self.queues();
            let queue = queues.entry(coordinator.clone()).or_default();
            queue.waiting.push((role.to_owned(), tx));
            !std::mem::replace(&mut queue.busy, true)
        };
        if start {
            tokio::spawn(self.clone().flush(coordinator));
        }
        rx.await
            .unwrap_or_else(|_| Err(KafkaError::Invalid("the describe batch was dropped".into())))
    }

    /// Sends the waiting checks of one coordinator, batch after batch, until
    /// none wait. Runs as its own task so a caller that gives up does not
    /// cancel the others' request.
    async fn flush(self: Arc<Self>, coordinator: Broker) {
        let timeout = self.client.config().request_timeout;
        loop {
            let batch = {
                let mut queues = self.queues();
                let Some(queue) = queues.get_mut(&coordinator) else {
                    return;
                };
                if queue.waiting.is_empty() {
                    queue.busy = false;
                    return;
                }
                take_batch(&mut queue.waiting, self.max_batch)
            };
            let mut ids: Vec<String> = batch.iter().map(|(role, _)| role.clone()).collect();
            ids.sort_unstable();
            ids.dedup();
            self.metrics.describe_batch_size.observe(ids.len() as f64);
            let result = self.client.describe_at(&coordinator, &ids, timeout).await;
            match result {
                Ok(answers) => {
                    let answers: HashMap<String, Described> = answers.into_iter().collect();
                    for (role, reply) in batch {
                        let answer = answers.get(&role).cloned().unwrap_or_else(|| {
                            Err(KafkaError::Invalid(format!("no answer for {role:?}")))
                        });
                        let _ = reply.send(answer);
                    }
                }
                Err(e) => {
                    for (_, reply) in batch {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
            }
        }
    }
}

/// Takes waiters from the front until `max` distinct roles are taken; the
/// waiters of one role go together (later ones too, past the cut).
fn take_batch(waiting: &mut Vec<(String, Reply)>, max: usize) -> Vec<(String, Reply)> {
    let mut roles: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut cut = waiting.len();
    for (i, (role, _)) in waiting.iter().enumerate() {
        if !roles.contains(role.as_str()) {
            if roles.len() == max {
                cut = i;
                break;
            }
            roles.insert(role);
        }
    }
    if cut == waiting.len() {
        return std::mem::take(waiting);
    }
    let taken: std::collections::HashSet<String> = roles.into_iter().map(str::to_owned).collect();
    let rest = waiting.split_off(cut);
    let mut batch = std::mem::take(waiting);
    for item in rest {
        if taken.contains(&item.0) {
            batch.push(item);
        } else {
            waiting.push(item);
        }
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiters(roles: &[&str]) -> Vec<(String, Reply)> {
        roles
            .iter()
            .map(|r| ((*r).to_owned(), oneshot::channel().0))
            .collect()
    }

    fn names(v: &[(String, Reply)]) -> Vec<&str> {
        v.iter().map(|(r, _)| r.as_str()).collect()
    }

    #[test]
    fn a_batch_takes_distinct_roles_up_to_the_limit_and_keeps_the_rest_in_order() {
        let mut queue = waiters(&["a", "b", "a", "c", "d", "b", "e"]);
        let batch = take_batch(&mut queue, 2);
        assert_eq!(names(&batch), ["a", "b", "a", "b"]);
        assert_eq!(names(&queue), ["c", "d", "e"]);
        let batch = take_batch(&mut queue, 5);
        assert_eq!(names(&batch), ["c", "d", "e"]);
        assert!(queue.is_empty());
    }
}
