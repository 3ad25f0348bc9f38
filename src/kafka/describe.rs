//! DescribeTransactions: the coordinator's current (producer id, epoch) of a
//! transactional id, which is the current token of a role. This is the one
//! describe path: the service's checks, its coordinator poller, the CLI and
//! the leader-election client all come through here.
//!
//! **Batching.** Per coordinator at most one DescribeTransactions is in
//! flight; ids asked for meanwhile (by any caller) wait and go together in
//! the next request, up to `max_describe_batch` ids (the queues are
//! `state::describes`). An id is only ever answered by a request sent after
//! it was asked for.
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
//! The argument rests on no duration of X's lag: X may answer from memory
//! for as long as it likes (a pause, a partition from the controller).
//! Y itself is never a broker known to be behind: a broker whose metadata
//! reports a lower leader epoch than another broker did is stale and is not
//! asked to confirm (nor to look coordinators up, nor for metadata) until it
//! caught up (`state::epochs`).
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
use std::time::Duration;

use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::client::KafkaClient;
use super::config::Broker;
use super::coordinator::Named;
use super::error::{KafkaError, TRANSACTIONAL_ID_NOT_FOUND};
use super::observe::StaleReason;
use super::retry::Retry;
use super::state::{DescribeReply, Described, Lesson, TransactionDescription};
use crate::coordination::FencingToken;

/// The longest time from sending a describe to receiving its confirmation.
/// Well below Kafka's `broker.heartbeat.interval.ms` (2 s), the least time
/// a deposed broker needs to get unfenced and lead again.
pub const CONFIRM_WINDOW: Duration = Duration::from_millis(1500);

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
                    self.state().learn(Lesson::BelowHighWater {
                        key: id,
                        addr: &broker.addr,
                    });
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
        if self.state().describes().enqueue(coordinator, id, tx) {
            tokio::spawn(self.clone().flush(coordinator.clone()));
        }
        rx
    }

    /// Sends the waiting ids of one coordinator, batch after batch, until
    /// none wait. Its own task, so a caller that gives up does not cancel
    /// the others' request.
    async fn flush(self, coordinator: Broker) {
        let max = self.config().max_describe_batch.max(1);
        while let Some(batch) = self.state().describes().next_batch(&coordinator, max) {
            self.describe_batch(&coordinator, batch).await;
        }
    }

    /// One DescribeTransactions to `coordinator`, confirmed by another
    /// broker, answered to every waiter.
    async fn describe_batch(&self, coordinator: &Broker, batch: Vec<(String, DescribeReply)>) {
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

    /// The answers of `coordinator` for `ids`, each kept only when another
    /// broker confirms it (see the module docs); the others become
    /// retriable errors.
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
        let request = build_describe(ids);
        let sent = Instant::now();
        let (described, confirmation) = tokio::join!(
            self.call_on(&conn, &request, self.config().request_timeout),
            async {
                let confirmed = self.confirm_coordinators(ids, coordinator).await;
                Confirmation::of(confirmed, sent.elapsed())
            }
        );
        let mut answers = parse_describe(described?);
        let addr = coordinator.addr.as_str();
        for error in answers.values().filter_map(|a| a.as_ref().err()) {
            self.state().learn(Lesson::DescribeFailed { addr, error });
        }
        for (id, named) in confirm(&mut answers, addr, &confirmation) {
            tracing::warn!(
                id = %id,
                broker = %addr,
                coordinator = %named.addr,
                "a broker answered as the coordinator of an id that another broker says has moved; asking the new coordinator"
            );
            if let Some(observer) = self.observer() {
                observer.stale_answer(StaleReason::Unconfirmed);
            }
        }
        // Answered and confirmed in full: the broker is a coordinator again.
        if answers.values().all(Result::is_ok) {
            self.state().learn(Lesson::Confirmed { addr });
        }
        Ok(answers)
    }
}

/// A DescribeTransactions of `ids`.
fn build_describe(ids: &[String]) -> DescribeTransactionsRequest {
    DescribeTransactionsRequest::default().with_transactional_ids(
        ids.iter()
            .map(|id| TransactionalId(StrBytes::from_string(id.clone())))
            .collect(),
    )
}

/// Per id, what a DescribeTransactions answer says: its pair, nobody
/// (TRANSACTIONAL_ID_NOT_FOUND), or the error code.
fn parse_describe(response: DescribeTransactionsResponse) -> HashMap<String, Described> {
    response
        .transaction_states
        .into_iter()
        .map(|state| {
            let answer = match state.error_code {
                0 => Ok(Some(TransactionDescription {
                    state: state.transaction_state.to_string(),
                    producer_id: state.producer_id.0,
                    producer_epoch: state.producer_epoch,
                    timeout_ms: state.transaction_timeout_ms,
                    start_time_ms: state.transaction_start_time_ms,
                })),
                TRANSACTIONAL_ID_NOT_FOUND => Ok(None),
                code => Err(KafkaError::broker("DescribeTransactions", code, None)),
            };
            (state.transactional_id.0.to_string(), answer)
        })
        .collect()
}

/// What another broker said of a batch's coordinator.
#[derive(Debug)]
enum Confirmation {
    /// The cluster never had a second broker: nothing can have moved.
    NotNeeded,
    /// Its answer, in time.
    Named(HashMap<String, Named>),
    /// No answer to go by, and why.
    Failed(String),
}

impl Confirmation {
    /// The confirmation `result`, which arrived `took` after the describe
    /// was sent.
    fn of(
        result: Option<Result<HashMap<String, Named>, KafkaError>>,
        took: Duration,
    ) -> Confirmation {
        match result {
            None => Confirmation::NotNeeded,
            Some(Ok(_)) if took > CONFIRM_WINDOW => Confirmation::Failed(format!(
                "the confirmation took {} ms, over the {} ms window",
                took.as_millis(),
                CONFIRM_WINDOW.as_millis()
            )),
            Some(Ok(named)) => Confirmation::Named(named),
            Some(Err(e)) => Confirmation::Failed(format!("no other broker confirmed it: {e}")),
        }
    }
}

/// Keeps the answers of the coordinator at `addr` that `confirmation`
/// backs; every other answer becomes a retriable [`KafkaError::Stale`].
/// Returns the ids another broker names a different coordinator for.
fn confirm(
    answers: &mut HashMap<String, Described>,
    addr: &str,
    confirmation: &Confirmation,
) -> Vec<(String, Broker)> {
    let mut moved = Vec::new();
    let named = match confirmation {
        Confirmation::NotNeeded => return moved,
        Confirmation::Named(named) => Ok(named),
        Confirmation::Failed(why) => Err(why),
    };
    for (id, answer) in answers.iter_mut() {
        if answer.is_err() {
            continue;
        }
        let reason = match named {
            Err(why) => why.clone(),
            Ok(named) => match named.get(id) {
                Some(Named::Same) => continue,
                Some(Named::Other(broker)) => {
                    moved.push((id.clone(), broker.clone()));
                    format!("another broker names {} as its coordinator", broker.addr)
                }
                Some(Named::Failed(e)) => format!("the confirmation failed: {e}"),
                None => "the confirmation answered nothing for it".to_owned(),
            },
        };
        *answer = Err(KafkaError::Stale {
            addr: addr.to_owned(),
            reason: format!("the answer for {id:?} is not confirmed: {reason}"),
        });
    }
    moved
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::ProducerId;
    use kafka_protocol::messages::describe_transactions_response::TransactionState;

    use super::*;

    fn pair(id: &str, code: i16) -> TransactionState {
        TransactionState::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_owned())))
            .with_error_code(code)
            .with_transaction_state(StrBytes::from_static_str("Ongoing"))
            .with_producer_id(ProducerId(7))
            .with_producer_epoch(3)
            .with_transaction_timeout_ms(10_000)
            .with_transaction_start_time_ms(42)
    }

    fn described(ids: &[&str]) -> HashMap<String, Described> {
        parse_describe(
            DescribeTransactionsResponse::default()
                .with_transaction_states(ids.iter().map(|id| pair(id, 0)).collect()),
        )
    }

    fn broker(id: i32) -> Broker {
        Broker {
            id,
            addr: format!("b:{id}"),
        }
    }

    #[test]
    fn a_describe_asks_for_every_id() {
        let ids = ["a".to_owned(), "b".to_owned()];
        let asked: Vec<String> = build_describe(&ids)
            .transactional_ids
            .iter()
            .map(|id| id.0.to_string())
            .collect();
        assert_eq!(asked, ids);
    }

    #[test]
    fn an_answer_is_a_pair_nobody_or_the_error() {
        let answers = parse_describe(
            DescribeTransactionsResponse::default().with_transaction_states(vec![
                pair("held", 0),
                pair("free", TRANSACTIONAL_ID_NOT_FOUND),
                pair("moved", 16),
            ]),
        );
        let held = answers["held"].as_ref().unwrap().as_ref().unwrap();
        assert_eq!(
            (held.state.as_str(), held.producer_id, held.producer_epoch),
            ("Ongoing", 7, 3)
        );
        assert_eq!((held.timeout_ms, held.start_time_ms), (10_000, 42));
        assert_eq!(answers["free"], Ok(None));
        assert_eq!(answers["moved"].as_ref().unwrap_err().code(), Some(16));
    }

    #[test]
    fn only_answers_another_broker_confirms_are_kept() {
        let mut answers = described(&["same", "moved", "failed", "missing"]);
        let named = HashMap::from([
            ("same".to_owned(), Named::Same),
            ("moved".to_owned(), Named::Other(broker(2))),
            (
                "failed".to_owned(),
                Named::Failed(KafkaError::broker("FindCoordinator", 15, None)),
            ),
        ]);
        let moved = confirm(&mut answers, "b:1", &Confirmation::Named(named));
        assert_eq!(moved, [("moved".to_owned(), broker(2))]);
        assert!(answers["same"].is_ok());
        for id in ["moved", "failed", "missing"] {
            let error = answers[id].as_ref().unwrap_err();
            assert!(
                matches!(error, KafkaError::Stale { addr, .. } if addr == "b:1"),
                "{id}: {error}"
            );
            assert!(error.is_retriable(), "{id}: asked again");
        }
    }

    #[test]
    fn no_confirmation_in_time_keeps_no_answer_and_one_broker_needs_none() {
        let confirmed = Some(Ok(HashMap::from([("a".to_owned(), Named::Same)])));
        let late = Confirmation::of(confirmed, CONFIRM_WINDOW + Duration::from_millis(1));
        let failed = Confirmation::of(Some(Err(KafkaError::Invalid("x".into()))), Duration::ZERO);
        for confirmation in [late, failed] {
            let mut answers = described(&["a"]);
            confirm(&mut answers, "b:1", &confirmation);
            assert!(
                matches!(answers["a"], Err(KafkaError::Stale { .. })),
                "{confirmation:?}"
            );
        }
        let mut answers = described(&["a"]);
        confirm(&mut answers, "b:1", &Confirmation::of(None, Duration::MAX));
        assert!(answers["a"].is_ok(), "a single-broker cluster");
    }
}
