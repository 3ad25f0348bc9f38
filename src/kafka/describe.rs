//! DescribeTransactions: the coordinator's current (producer id, epoch) of a
//! transactional id, which is the current token of a role. This is the one
//! describe path: the service's checks, its coordinator poller, the CLI and
//! the leader-election client all come through here.
//!
//! **Batching.** Per coordinator at most one DescribeTransactions is in
//! flight; ids asked for meanwhile (by any caller) wait and go together in
//! the next request, up to `max_describe_batch` ids. An id is only ever
//! answered by a request sent after it was asked for.
//!
//! **Only confirmed answers.** A broker that paused (a long GC pause, a
//! frozen VM) and came back still answers from its memory until it has
//! caught up with the metadata log, which may be after another broker took
//! over as coordinator and minted a newer pair: a deposed token would look
//! current. So each batch sent to coordinator X is confirmed: the same ids
//! go in one FindCoordinator to another broker Y, sent together with the
//! describe, and an answer of X is used only when Y names X as the id's
//! coordinator and Y's answer arrived within [`CONFIRM_WINDOW`] of sending
//! the describe. The argument, from Kafka's own rules:
//! 1. a new coordinator Z can only mint after the controller made it leader
//!    of the id's `__transaction_state` partition and it wrote the new pair
//!    there with acks=all, with `transaction.state.log.min.isr` (2 by
//!    default) in-sync replicas; a follower fetches from Z only after it
//!    applied that leadership change to its metadata, which FindCoordinator
//!    answers from;
//! 2. so a broker Y that is a replica of that partition (every broker, in a
//!    cluster no larger than the replication factor) names Z, not X, once a
//!    newer pair exists, unless Y too is paused: a failure of two brokers
//!    at once, which is out of scope; a broker that is not a replica
//!    answers from a metadata log it follows within milliseconds;
//! 3. if Y named X at instant y, X led the partition at y, and X's answer
//!    (given at some instant a) was current at y (a > y: X kept every pair
//!    it minted until it was deposed, after y) or at a (a < y: X was not
//!    deposed between a and y, since a deposed broker leads again only after
//!    catching up with the metadata log, getting unfenced by a heartbeat and
//!    winning an election, which takes longer than the window). Both
//!    instants lie within the caller's request.
//!
//! A batch that cannot be confirmed (no other broker answers) fails with a
//! retriable error, and the caller's deadline turns it into "unavailable",
//! never into an answer. A cluster that never listed a second broker has
//! nowhere to move a coordinator to, and is not confirmed.
//!
//! **Monotonic answers.** As a second line, a caller may give a floor per id:
//! the highest pair it has seen from any source. An answer below it comes
//! from a stale coordinator and is asked again (the id's coordinator looked
//! up anew), until the deadline.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use kafka_protocol::messages::{DescribeTransactionsRequest, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::client::{Broker, KafkaClient, StaleReason, lock};
use super::coordinator::Named;
use super::error::{KafkaError, TRANSACTIONAL_ID_NOT_FOUND};
use super::retry::Retry;
use crate::coordination::FencingToken;

/// The longest time from sending a describe to receiving its confirmation.
/// Well below Kafka's `broker.heartbeat.interval.ms` (2 s), the least time
/// a deposed broker needs to get unfenced and lead again.
pub const CONFIRM_WINDOW: Duration = Duration::from_millis(1500);

/// What the transaction coordinator reports for one transactional id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionDescription {
    /// Kafka's state name: Empty, Ongoing, PrepareCommit, PrepareAbort,
    /// CompleteCommit, CompleteAbort, PrepareEpochFence (or Dead).
    pub state: String,
    /// The current producer id.
    pub producer_id: i64,
    /// The current producer epoch.
    pub producer_epoch: i16,
    /// The transaction timeout the holder asked for (its lease duration).
    pub timeout_ms: i32,
    /// When the open transaction started, or -1.
    pub start_time_ms: i64,
}

impl TransactionDescription {
    /// The current token, or `None` when the pair is not a minted one.
    pub fn token(&self) -> Option<FencingToken> {
        FencingToken::new(self.producer_id, self.producer_epoch).ok()
    }
}

/// The answer for one id: `Ok(None)` when no member holds the role (105).
pub type Described = Result<Option<TransactionDescription>, KafkaError>;

type Reply = oneshot::Sender<Described>;

#[derive(Debug, Default)]
struct Queue {
    waiting: Vec<(String, Reply)>,
    busy: bool,
}

/// The waiting describes, per coordinator.
#[derive(Debug, Default)]
pub(crate) struct DescribeQueues {
    queues: Mutex<HashMap<Broker, Queue>>,
}

impl KafkaClient {
    /// Describes one transactional id within the operation timeout.
    pub async fn describe_transaction(&self, id: &str) -> Described {
        let deadline = Instant::now() + self.config().operation_timeout;
        let ids = [id.to_owned()];
        self.describe_transactions(&ids, &|_| None, deadline)
            .await
            .remove(id)
            .unwrap_or_else(|| Err(KafkaError::Invalid(format!("no answer for {id:?}"))))
    }

    /// Describes `ids` (batched with every concurrent caller, confirmed,
    /// retried until `deadline`); an answer below `floor(id)` is stale and
    /// asked again. Every id gets an answer or the error that stopped it.
    pub async fn describe_transactions(
        &self,
        ids: &[String],
        floor: &(dyn Fn(&str) -> Option<FencingToken> + Sync),
        deadline: Instant,
    ) -> HashMap<String, Described> {
        let mut retry = Retry::new("describe transactions", self.config(), deadline);
        let mut done: HashMap<String, Described> = HashMap::with_capacity(ids.len());
        let mut pending: Vec<String> = {
            let mut seen = HashSet::new();
            ids.iter().filter(|id| seen.insert(*id)).cloned().collect()
        };
        let mut failed: HashMap<String, KafkaError> = HashMap::new();
        while !pending.is_empty() {
            let round = self.describe_round(&pending, floor, &mut done, &mut failed);
            if tokio::time::timeout_at(deadline, round).await.is_err() {
                for id in pending.drain(..) {
                    if let std::collections::hash_map::Entry::Vacant(slot) = done.entry(id) {
                        let last = failed
                            .remove(slot.key())
                            .unwrap_or_else(|| retry.out_of_time());
                        slot.insert(Err(retry.gave_up(last)));
                    }
                }
                break;
            }
            pending.retain(|id| !done.contains_key(id));
            let Some(last) = pending.iter().find_map(|id| failed.get(id).cloned()) else {
                break;
            };
            if let Err(gave_up) = retry.pause(last).await {
                for id in pending.drain(..) {
                    let last = failed.remove(&id).unwrap_or_else(|| gave_up.clone());
                    done.insert(id, Err(retry.gave_up(last)));
                }
            }
        }
        done
    }

    /// One try of every pending id: look up, queue, await. Final answers go
    /// to `done`, retriable failures to `failed`.
    async fn describe_round(
        &self,
        pending: &[String],
        floor: &(dyn Fn(&str) -> Option<FencingToken> + Sync),
        done: &mut HashMap<String, Described>,
        failed: &mut HashMap<String, KafkaError>,
    ) {
        let coordinators = self.coordinators(pending).await;
        let mut waits = Vec::with_capacity(pending.len());
        for id in pending {
            match coordinators.get(id) {
                Some(Ok(broker)) => waits.push((id, broker.clone(), self.enqueue(broker, id))),
                Some(Err(e)) if e.is_retriable() => {
                    failed.insert(id.clone(), e.clone());
                }
                Some(Err(e)) => {
                    done.insert(id.clone(), Err(e.clone()));
                }
                None => {
                    failed.insert(
                        id.clone(),
                        KafkaError::Invalid(format!("no coordinator answer for {id:?}")),
                    );
                }
            }
        }
        for (id, broker, rx) in waits {
            let answer = rx.await.unwrap_or_else(|_| {
                Err(KafkaError::Invalid("the describe batch was dropped".into()))
            });
            match answer {
                Ok(Some(d)) if floor(id).is_some_and(|f| d.token().is_some_and(|t| t < f)) => {
                    let seen = floor(id).map(|f| f.to_string()).unwrap_or_default();
                    tracing::warn!(
                        id = %id,
                        broker = %broker.addr,
                        answered = %format!("{}:{}", d.producer_id, d.producer_epoch),
                        seen = %seen,
                        "a coordinator answered a pair below one already seen; asking again"
                    );
                    if let Some(observer) = self.observer() {
                        observer.stale_answer(StaleReason::BelowHighWater);
                    }
                    self.core.coordinators.forget(id);
                    self.core.coordinators.suspect(&broker.addr);
                    failed.insert(
                        id.clone(),
                        KafkaError::Stale {
                            addr: broker.addr,
                            reason: format!(
                                "answered {}:{} for {id:?} after {seen} was seen",
                                d.producer_id, d.producer_epoch
                            ),
                        },
                    );
                }
                Err(e) if e.is_retriable() => {
                    failed.insert(id.clone(), e);
                }
                answer => {
                    done.insert(id.clone(), answer);
                }
            }
        }
    }

    /// Queues `id` for `coordinator`'s next batch (or, without batching,
    /// sends a request of its own).
    fn enqueue(&self, coordinator: &Broker, id: &str) -> oneshot::Receiver<Described> {
        let (tx, rx) = oneshot::channel();
        if !self.config().describe_batching {
            let client = self.clone();
            let coordinator = coordinator.clone();
            let batch = vec![(id.to_owned(), tx)];
            tokio::spawn(async move { client.describe_batch(&coordinator, batch).await });
            return rx;
        }
        let start = {
            let mut queues = lock(&self.core.describes.queues);
            let queue = queues.entry(coordinator.clone()).or_default();
            queue.waiting.push((id.to_owned(), tx));
            !std::mem::replace(&mut queue.busy, true)
        };
        if start {
            tokio::spawn(self.clone().flush(coordinator.clone()));
        }
        rx
    }

    /// Sends the waiting ids of one coordinator, batch after batch, until
    /// none wait. Its own task, so a caller that gives up does not cancel
    /// the others' request.
    async fn flush(self, coordinator: Broker) {
        let max = self.config().max_describe_batch.max(1);
        loop {
            let batch = {
                let mut queues = lock(&self.core.describes.queues);
                let Some(queue) = queues.get_mut(&coordinator) else {
                    return;
                };
                if queue.waiting.is_empty() {
                    queues.remove(&coordinator);
                    return;
                }
                take_batch(&mut queue.waiting, max)
            };
            self.describe_batch(&coordinator, batch).await;
        }
    }

    /// One DescribeTransactions to `coordinator`, confirmed by another
    /// broker, answered to every waiter.
    async fn describe_batch(&self, coordinator: &Broker, batch: Vec<(String, Reply)>) {
        let mut ids: Vec<String> = batch.iter().map(|(id, _)| id.clone()).collect();
        ids.sort_unstable();
        ids.dedup();
        let answers = self.describe_confirmed(coordinator, &ids).await;
        for (id, reply) in batch {
            let answer = match &answers {
                Ok(answers) => answers.get(&id).cloned().unwrap_or_else(|| {
                    Err(KafkaError::Protocol {
                        addr: coordinator.addr.clone(),
                        reason: format!("DescribeTransactions answered nothing for {id:?}"),
                    })
                }),
                Err(e) => Err(e.clone()),
            };
            let _ = reply.send(answer);
        }
    }

    async fn describe_confirmed(
        &self,
        coordinator: &Broker,
        ids: &[String],
    ) -> Result<HashMap<String, Described>, KafkaError> {
        // Connect first: a broker in reconnect backoff fails here, before
        // any request (a confirmation included) is spent on it.
        let conn = self.connection(&coordinator.addr).await?;
        if let Some(observer) = self.observer() {
            observer.describe_batch(ids.len());
        }
        let request = DescribeTransactionsRequest::default().with_transactional_ids(
            ids.iter()
                .map(|id| TransactionalId(StrBytes::from_string(id.clone())))
                .collect(),
        );
        let sent = Instant::now();
        let (described, confirmed) = tokio::join!(
            self.call_on(&conn, &request, self.config().request_timeout),
            async {
                let confirmed = self.confirm_coordinators(ids, coordinator).await;
                (confirmed, sent.elapsed())
            }
        );
        let mut answers: HashMap<String, Described> = HashMap::with_capacity(ids.len());
        for state in described?.transaction_states {
            let id = state.transactional_id.0.to_string();
            let answer = match state.error_code {
                0 => Ok(Some(TransactionDescription {
                    state: state.transaction_state.to_string(),
                    producer_id: state.producer_id.0,
                    producer_epoch: state.producer_epoch,
                    timeout_ms: state.transaction_timeout_ms,
                    start_time_ms: state.transaction_start_time_ms,
                })),
                TRANSACTIONAL_ID_NOT_FOUND => Ok(None),
                code => {
                    // The id moved (or its partition is not led here yet):
                    // every id of this broker is looked up again, in one
                    // batch per backoff, not one lookup per id.
                    if matches!(code, 15 | 16) {
                        self.core.coordinators.suspect(&coordinator.addr);
                    }
                    Err(KafkaError::broker("DescribeTransactions", code, None))
                }
            };
            answers.insert(id, answer);
        }
        let (confirmed, took) = confirmed;
        let all_good = answers.values().all(Result::is_ok);
        let confirmed = match confirmed {
            None => {
                if all_good {
                    self.core.coordinators.trust(&coordinator.addr);
                }
                return Ok(answers);
            }
            Some(Ok(_)) if took > CONFIRM_WINDOW => Err(format!(
                "the confirmation took {} ms, over the {} ms window",
                took.as_millis(),
                CONFIRM_WINDOW.as_millis()
            )),
            Some(Ok(confirmed)) => Ok(confirmed),
            Some(Err(e)) => Err(format!("no other broker confirmed it: {e}")),
        };
        for (id, answer) in &mut answers {
            if answer.is_err() {
                continue;
            }
            let reason = match &confirmed {
                Err(why) => why.clone(),
                Ok(confirmed) => match confirmed.get(id) {
                    Some(Named::Same) => continue,
                    Some(Named::Other(named)) => {
                        tracing::warn!(
                            id = %id,
                            broker = %coordinator.addr,
                            coordinator = %named.addr,
                            "a broker answered as the coordinator of an id that another broker says has moved; asking the new coordinator"
                        );
                        if let Some(observer) = self.observer() {
                            observer.stale_answer(StaleReason::Unconfirmed);
                        }
                        format!("another broker names {} as its coordinator", named.addr)
                    }
                    Some(Named::Failed(e)) => format!("the confirmation failed: {e}"),
                    None => "the confirmation answered nothing for it".to_owned(),
                },
            };
            *answer = Err(KafkaError::Stale {
                addr: coordinator.addr.clone(),
                reason: format!("the answer for {id:?} is not confirmed: {reason}"),
            });
        }
        // Answered and confirmed in full: the broker is a coordinator again.
        if all_good && answers.values().all(Result::is_ok) {
            self.core.coordinators.trust(&coordinator.addr);
        }
        Ok(answers)
    }
}

/// Takes waiters from the front until `max` distinct ids are taken; the
/// waiters of one id go together (later ones too, past the cut).
fn take_batch(waiting: &mut Vec<(String, Reply)>, max: usize) -> Vec<(String, Reply)> {
    let mut ids: HashSet<&str> = HashSet::new();
    let mut cut = waiting.len();
    for (i, (id, _)) in waiting.iter().enumerate() {
        if !ids.contains(id.as_str()) {
            if ids.len() == max {
                cut = i;
                break;
            }
            ids.insert(id);
        }
    }
    if cut == waiting.len() {
        return std::mem::take(waiting);
    }
    let taken: HashSet<String> = ids.into_iter().map(str::to_owned).collect();
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

    fn waiters(ids: &[&str]) -> Vec<(String, Reply)> {
        ids.iter()
            .map(|r| ((*r).to_owned(), oneshot::channel().0))
            .collect()
    }

    fn names(v: &[(String, Reply)]) -> Vec<&str> {
        v.iter().map(|(r, _)| r.as_str()).collect()
    }

    #[test]
    fn a_batch_takes_distinct_ids_up_to_the_limit_and_keeps_the_rest_in_order() {
        let mut queue = waiters(&["a", "b", "a", "c", "d", "b", "e"]);
        let batch = take_batch(&mut queue, 2);
        assert_eq!(names(&batch), ["a", "b", "a", "b"]);
        assert_eq!(names(&queue), ["c", "d", "e"]);
        let batch = take_batch(&mut queue, 5);
        assert_eq!(names(&batch), ["c", "d", "e"]);
        assert!(queue.is_empty());
    }
}
