//! The describes waiting for their coordinator's next DescribeTransactions,
//! and the answer they wait for.
//!
//! Per coordinator at most one batch is in flight; ids asked for meanwhile
//! (by any caller) wait here and go together in the next batch, up to a
//! limit of distinct ids. An id is only ever answered by a request sent
//! after it was asked for.
//!
//! Who takes the batches: without confirmations, a sender per coordinator,
//! batch after batch until none wait; with them, the confirmation rounds
//! (one loop for the client, see `describe`): at the start of each round
//! every coordinator with ids waiting and no describe in flight gives its
//! batch.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use tokio::sync::oneshot;

use crate::config::Broker;
use crate::error::KafkaError;
use krabka_coordination::FencingToken;
use krabka_coordination::sync::lock;

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
pub type DescribeAnswer = Result<Option<TransactionDescription>, KafkaError>;

/// Where one waiting id's answer goes.
pub(crate) type Reply = oneshot::Sender<DescribeAnswer>;

#[derive(Debug, Default)]
struct Queue {
    waiting: Vec<(String, Reply)>,
    /// A sender runs (without rounds), or a describe is in flight (rounds).
    busy: bool,
}

#[derive(Debug, Default)]
struct Queues {
    queues: HashMap<Broker, Queue>,
    /// The round loop runs.
    rounds: bool,
}

/// The waiting describes, per coordinator.
#[derive(Debug, Default)]
pub(crate) struct DescribeQueues {
    queues: Mutex<Queues>,
}

/// What the caller of [`DescribeQueues::enqueue`] starts.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// Nothing: a sender or the rounds will take the id.
    Nothing,
    /// The coordinator's sender.
    Sender,
    /// The round loop.
    Rounds,
}

impl DescribeQueues {
    /// Queues `id` for `coordinator`'s next batch, taken by its sender
    /// or, when `rounds`, by the next confirmation round.
    pub(crate) fn enqueue(
        &self,
        coordinator: &Broker,
        id: &str,
        reply: Reply,
        rounds: bool,
    ) -> Start {
        let mut queues = lock(&self.queues);
        let queue = queues.queues.entry(coordinator.clone()).or_default();
        queue.waiting.push((id.to_owned(), reply));
        if !rounds {
            return if std::mem::replace(&mut queue.busy, true) {
                Start::Nothing
            } else {
                Start::Sender
            };
        }
        if std::mem::replace(&mut queues.rounds, true) {
            Start::Nothing
        } else {
            Start::Rounds
        }
    }

    /// The coordinators whose next batch a round can take now (ids
    /// waiting, no describe in flight), with how many ids wait for each.
    pub(crate) fn ready(&self) -> Vec<(Broker, usize)> {
        lock(&self.queues)
            .queues
            .iter()
            .filter(|(_, q)| !q.busy && !q.waiting.is_empty())
            .map(|(b, q)| (b.clone(), q.waiting.len()))
            .collect()
    }

    /// A round takes the next batch of `coordinator` (at most `max`
    /// distinct ids): its describe is in flight until [`Self::answered`].
    pub(crate) fn take(&self, coordinator: &Broker, max: usize) -> Option<Vec<(String, Reply)>> {
        let mut queues = lock(&self.queues);
        let queue = queues.queues.get_mut(coordinator)?;
        if queue.busy || queue.waiting.is_empty() {
            return None;
        }
        queue.busy = true;
        Some(take_batch(&mut queue.waiting, max))
    }

    /// The describe of `coordinator` a round sent was answered. True when
    /// ids wait for it and no round loop runs: the caller starts one.
    pub(crate) fn answered(&self, coordinator: &Broker) -> bool {
        let mut queues = lock(&self.queues);
        let Some(queue) = queues.queues.get_mut(coordinator) else {
            return false;
        };
        queue.busy = false;
        if queue.waiting.is_empty() {
            queues.queues.remove(coordinator);
            return false;
        }
        !std::mem::replace(&mut queues.rounds, true)
    }

    /// Whether the round loop goes on: a coordinator is ready, or `more`
    /// (confirmations still to send). Otherwise the loop is marked stopped,
    /// in the same step, so an id queued after this starts it again.
    pub(crate) fn go_on(&self, more: impl FnOnce() -> bool) -> bool {
        let mut queues = lock(&self.queues);
        let ready = queues
            .queues
            .values()
            .any(|q| !q.busy && !q.waiting.is_empty());
        if ready || more() {
            return true;
        }
        queues.queues.retain(|_, q| q.busy || !q.waiting.is_empty());
        queues.rounds = false;
        false
    }

    /// The next batch of `coordinator`: at most `max` distinct ids. `None`
    /// when none wait: the sender stops.
    pub(crate) fn next_batch(
        &self,
        coordinator: &Broker,
        max: usize,
    ) -> Option<Vec<(String, Reply)>> {
        let mut queues = lock(&self.queues);
        let queue = queues.queues.get_mut(coordinator)?;
        if queue.waiting.is_empty() {
            queues.queues.remove(coordinator);
            return None;
        }
        Some(take_batch(&mut queue.waiting, max))
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

    #[test]
    fn one_sender_per_coordinator_until_its_queue_is_empty() {
        let queues = DescribeQueues::default();
        let at = Broker {
            id: 1,
            addr: "b:1".into(),
        };
        let enqueue = |id| queues.enqueue(&at, id, oneshot::channel().0, false);
        assert_eq!(enqueue("a"), Start::Sender, "starts");
        assert_eq!(enqueue("b"), Start::Nothing, "joins");
        let batch = queues.next_batch(&at, 10).unwrap();
        assert_eq!(names(&batch), ["a", "b"]);
        assert_eq!(enqueue("c"), Start::Nothing, "still sending");
        assert_eq!(names(&queues.next_batch(&at, 10).unwrap()), ["c"]);
        assert!(queues.next_batch(&at, 10).is_none(), "done");
        assert_eq!(enqueue("d"), Start::Sender, "starts anew");
    }

    #[test]
    fn a_round_takes_the_batch_of_each_coordinator_without_a_describe_in_flight() {
        let queues = DescribeQueues::default();
        let (one, two) = (
            Broker {
                id: 1,
                addr: "b:1".into(),
            },
            Broker {
                id: 2,
                addr: "b:2".into(),
            },
        );
        let enqueue = |at: &Broker, id| queues.enqueue(at, id, oneshot::channel().0, true);
        assert_eq!(enqueue(&one, "a"), Start::Rounds, "the loop starts");
        assert_eq!(enqueue(&two, "b"), Start::Nothing, "and takes both");
        assert!(queues.go_on(|| false));
        assert_eq!(names(&queues.take(&one, 10).unwrap()), ["a"]);
        assert_eq!(enqueue(&one, "c"), Start::Nothing);
        let ready: Vec<i32> = queues.ready().iter().map(|(b, _)| b.id).collect();
        assert_eq!(ready, [2], "one's describe is in flight");
        assert!(queues.take(&one, 10).is_none());
        assert_eq!(names(&queues.take(&two, 10).unwrap()), ["b"]);
        assert!(!queues.answered(&two), "nothing waits for two");
        assert!(!queues.go_on(|| false), "nothing ready: the loop stops");
        assert!(queues.answered(&one), "c waits and no loop runs");
        assert!(queues.go_on(|| false));
        assert_eq!(names(&queues.take(&one, 10).unwrap()), ["c"]);
        assert!(!queues.go_on(|| false));
        assert!(queues.go_on(|| true), "confirmations still to send");
    }
}
