//! The describes waiting for their coordinator's next DescribeTransactions,
//! and the answer they wait for.
//!
//! Per coordinator at most one batch is in flight; ids asked for meanwhile
//! (by any caller) wait here and go together in the next batch, up to a
//! limit of distinct ids. An id is only ever answered by a request sent
//! after it was asked for.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use tokio::sync::oneshot;

use crate::coordination::FencingToken;
use crate::kafka::config::Broker;
use crate::kafka::error::KafkaError;
use crate::sync::lock;

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

/// Where one waiting id's answer goes.
pub(crate) type Reply = oneshot::Sender<Described>;

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

impl DescribeQueues {
    /// Queues `id` for `coordinator`'s next batch. True when no batch of
    /// that coordinator is being sent: the caller starts sending them.
    pub(crate) fn enqueue(&self, coordinator: &Broker, id: &str, reply: Reply) -> bool {
        let mut queues = lock(&self.queues);
        let queue = queues.entry(coordinator.clone()).or_default();
        queue.waiting.push((id.to_owned(), reply));
        !std::mem::replace(&mut queue.busy, true)
    }

    /// The next batch of `coordinator`: at most `max` distinct ids. `None`
    /// when none wait: the sender stops.
    pub(crate) fn next_batch(
        &self,
        coordinator: &Broker,
        max: usize,
    ) -> Option<Vec<(String, Reply)>> {
        let mut queues = lock(&self.queues);
        let queue = queues.get_mut(coordinator)?;
        if queue.waiting.is_empty() {
            queues.remove(coordinator);
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
        assert!(queues.enqueue(&at, "a", oneshot::channel().0), "starts");
        assert!(!queues.enqueue(&at, "b", oneshot::channel().0), "joins");
        let batch = queues.next_batch(&at, 10).unwrap();
        assert_eq!(names(&batch), ["a", "b"]);
        assert!(
            !queues.enqueue(&at, "c", oneshot::channel().0),
            "still sending"
        );
        assert_eq!(names(&queues.next_batch(&at, 10).unwrap()), ["c"]);
        assert!(queues.next_batch(&at, 10).is_none(), "done");
        assert!(
            queues.enqueue(&at, "d", oneshot::channel().0),
            "starts anew"
        );
    }
}
