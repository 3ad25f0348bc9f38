//! The describes waiting for their coordinator's next DescribeTransactions,
//! and the answer they wait for.
//!
//! Per coordinator a bounded number of batches is in flight (one without
//! confirmation rounds, [`IN_FLIGHT`] with them); ids asked for meanwhile
//! (by any caller) wait here and go together in the next batch, up to a
//! limit of distinct ids. An id is only ever answered by a request sent
//! after it was asked for.
//!
//! Who takes the batches: without confirmations, a sender per coordinator,
//! batch after batch until none wait; with them, the confirmation rounds
//! (one loop for the client, see `describe`): at the start of each round
//! every coordinator with ids waiting and a describe to spare gives its
//! batch. While a round is in flight the next one starts early once as many
//! checks wait as the rounds in flight carry ([`Start::Overlap`]).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

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

/// Most describes in flight to one coordinator with confirmation rounds:
/// as many as rounds may be in flight (`describe::rounds`).
pub(crate) const IN_FLIGHT: usize = 2;

/// Rounds overlap only where the shortest round of the last second or two
/// took this long: mostly the network's round trip then. On loopback the
/// shortest round under load took 0.14–0.27 ms, with 0.25 ms of delay each
/// way about 0.9 ms (`bench/run --network`).
pub(crate) const OVERLAP_FROM: Duration = Duration::from_micros(500);

#[derive(Debug, Default)]
struct Queue {
    waiting: Vec<(String, Reply)>,
    /// A sender runs (without rounds: 0 or 1), or the describes the rounds
    /// have in flight.
    busy: usize,
}

#[derive(Debug, Default)]
struct Queues {
    queues: HashMap<Broker, Queue>,
    /// The round loop runs.
    rounds: bool,
    /// Checks waiting in every queue.
    waiting: usize,
    /// While rounds are in flight and another may start: the number of
    /// waiting checks at which it starts (as many as they carry).
    overlap_at: Option<usize>,
    /// The shortest round of the last second or two.
    shortest: WindowedMin,
}

impl Queues {
    /// Queues `id` for `coordinator`; what the caller starts.
    fn push(&mut self, coordinator: &Broker, id: &str, reply: Reply, rounds: bool) -> Start {
        self.waiting += 1;
        let queue = self.queues.entry(coordinator.clone()).or_default();
        queue.waiting.push((id.to_owned(), reply));
        if !rounds {
            return if std::mem::replace(&mut queue.busy, 1) > 0 {
                Start::Nothing
            } else {
                Start::Sender
            };
        }
        if !std::mem::replace(&mut self.rounds, true) {
            Start::Rounds
        } else if self.overlap_at == Some(self.waiting) {
            Start::Overlap
        } else {
            Start::Nothing
        }
    }
}

impl Queue {
    /// Ids wait and a describe is to spare.
    fn ready(&self) -> bool {
        self.busy < IN_FLIGHT && !self.waiting.is_empty()
    }
}

/// The waiting describes, per coordinator.
#[derive(Debug, Default)]
pub(crate) struct DescribeQueues {
    queues: Mutex<Queues>,
    /// Wakes the round loop for an early round ([`Start::Overlap`]).
    overlap: Notify,
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
    /// Nothing, but the waiting checks reached the threshold the round
    /// loop set ([`DescribeQueues::overlap_at`]): the caller wakes it.
    Overlap,
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
        lock(&self.queues).push(coordinator, id, reply, rounds)
    }

    /// Queues many ids at once, as [`Self::enqueue`] does each: no sender
    /// or round takes a part of them before the rest are queued. What the
    /// caller starts, each once, with its coordinator.
    pub(crate) fn enqueue_all(
        &self,
        ids: impl IntoIterator<Item = (Broker, String, Reply)>,
        rounds: bool,
    ) -> Vec<(Broker, Start)> {
        let mut queues = lock(&self.queues);
        let mut starts = Vec::new();
        for (coordinator, id, reply) in ids {
            match queues.push(&coordinator, &id, reply, rounds) {
                Start::Nothing => {}
                start => starts.push((coordinator, start)),
            }
        }
        starts
    }

    /// The coordinators whose next batch a round can take now (ids
    /// waiting, a describe to spare), with how many ids wait for each, by
    /// node id (not in the map's order: a simulation's seed decides a run).
    pub(crate) fn ready(&self) -> Vec<(Broker, usize)> {
        let mut ready: Vec<(Broker, usize)> = lock(&self.queues)
            .queues
            .iter()
            .filter(|(_, q)| q.ready())
            .map(|(b, q)| (b.clone(), q.waiting.len()))
            .collect();
        ready.sort_by(|(a, _), (b, _)| (a.id, &a.addr).cmp(&(b.id, &b.addr)));
        ready
    }

    /// The rounds in flight carry `carried` checks (`None`: no round may
    /// start early): from now on [`Self::enqueue`] says [`Start::Overlap`]
    /// when as many wait, if rounds are long enough to overlap
    /// ([`OVERLAP_FROM`]). True when that many wait already.
    pub(crate) fn overlap_at(&self, carried: Option<usize>) -> bool {
        let mut queues = lock(&self.queues);
        let far = queues
            .shortest
            .get()
            .is_some_and(|shortest| shortest >= OVERLAP_FROM);
        let at = carried.filter(|_| far).map(|c| c.max(1));
        queues.overlap_at = at;
        at.is_some_and(|at| queues.waiting >= at && queues.queues.values().any(Queue::ready))
    }

    /// A round took `took`, from its start until it returned.
    pub(crate) fn round_took(&self, took: Duration) {
        lock(&self.queues).shortest.sample(took, Instant::now());
    }

    /// Wakes the round loop: enough checks wait for an early round.
    pub(crate) fn wake(&self) {
        self.overlap.notify_one();
    }

    /// Until [`Self::wake`] (or a wake since the last call).
    pub(crate) async fn woken(&self) {
        self.overlap.notified().await;
    }

    /// A round takes the next batch of `coordinator` (at most `max`
    /// distinct ids): its describe is in flight until [`Self::answered`].
    pub(crate) fn take(&self, coordinator: &Broker, max: usize) -> Option<Vec<(String, Reply)>> {
        let mut queues = lock(&self.queues);
        let queue = queues.queues.get_mut(coordinator)?;
        if !queue.ready() {
            return None;
        }
        queue.busy += 1;
        let batch = take_batch(&mut queue.waiting, max);
        queues.waiting = queues.waiting.saturating_sub(batch.len());
        Some(batch)
    }

    /// A describe of `coordinator` a round sent was answered. True when
    /// ids wait for it and no round loop runs: the caller starts one.
    pub(crate) fn answered(&self, coordinator: &Broker) -> bool {
        let mut queues = lock(&self.queues);
        let Some(queue) = queues.queues.get_mut(coordinator) else {
            return false;
        };
        queue.busy = queue.busy.saturating_sub(1);
        if queue.waiting.is_empty() {
            if queue.busy == 0 {
                queues.queues.remove(coordinator);
            }
            return false;
        }
        !std::mem::replace(&mut queues.rounds, true)
    }

    /// Whether the round loop goes on: a coordinator is ready, or `more`
    /// (confirmations still to send). Otherwise the loop is marked stopped,
    /// in the same step, so an id queued after this starts it again.
    pub(crate) fn go_on(&self, more: impl FnOnce() -> bool) -> bool {
        let mut queues = lock(&self.queues);
        if queues.queues.values().any(Queue::ready) || more() {
            return true;
        }
        queues
            .queues
            .retain(|_, q| q.busy > 0 || !q.waiting.is_empty());
        queues.rounds = false;
        queues.overlap_at = None;
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
        let batch = take_batch(&mut queue.waiting, max);
        queues.waiting = queues.waiting.saturating_sub(batch.len());
        Some(batch)
    }
}

/// The least of the durations sampled in the current window and the one
/// before it, as BBR keeps the least round trip of a window: what the
/// network takes, without the time requests queued.
#[derive(Debug, Default)]
struct WindowedMin {
    started: Option<Instant>,
    current: Option<Duration>,
    previous: Option<Duration>,
}

impl WindowedMin {
    const WINDOW: Duration = Duration::from_secs(1);

    fn sample(&mut self, took: Duration, now: Instant) {
        let age = self.started.map(|s| now.saturating_duration_since(s));
        if age.is_none_or(|a| a >= Self::WINDOW) {
            // The window just ended is kept; an older one is forgotten.
            self.previous = self
                .current
                .take()
                .filter(|_| age.is_some_and(|a| a < 2 * Self::WINDOW));
            self.started = Some(now);
        }
        self.current = Some(self.current.map_or(took, |c| c.min(took)));
    }

    fn get(&self) -> Option<Duration> {
        match (self.current, self.previous) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
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
    fn ids_queued_at_once_start_each_sender_and_the_rounds_once() {
        let queues = DescribeQueues::default();
        let (one, two) = brokers();
        let ids = |n: usize| {
            (0..n).map(|i| {
                let at = if i % 2 == 0 { &one } else { &two };
                (at.clone(), format!("id-{i}"), oneshot::channel().0)
            })
        };
        let started: Vec<(i32, Start)> = queues
            .enqueue_all(ids(6), false)
            .into_iter()
            .map(|(b, s)| (b.id, s))
            .collect();
        assert_eq!(started, [(1, Start::Sender), (2, Start::Sender)]);
        assert_eq!(queues.next_batch(&one, 10).unwrap().len(), 3, "every id");
        let queues = DescribeQueues::default();
        let started: Vec<Start> = queues
            .enqueue_all(ids(6), true)
            .into_iter()
            .map(|(_, s)| s)
            .collect();
        assert_eq!(started, [Start::Rounds]);
        assert!(queues.go_on(|| false));
        assert_eq!(queues.take(&two, 10).unwrap().len(), 3, "every id");
    }

    fn brokers() -> (Broker, Broker) {
        (
            Broker {
                id: 1,
                addr: "b:1".into(),
            },
            Broker {
                id: 2,
                addr: "b:2".into(),
            },
        )
    }

    #[test]
    fn a_round_takes_the_batch_of_each_coordinator_with_a_describe_to_spare() {
        let queues = DescribeQueues::default();
        let (one, two) = brokers();
        let enqueue = |at: &Broker, id| queues.enqueue(at, id, oneshot::channel().0, true);
        assert_eq!(enqueue(&one, "a"), Start::Rounds, "the loop starts");
        assert_eq!(enqueue(&two, "b"), Start::Nothing, "and takes both");
        assert!(queues.go_on(|| false));
        assert_eq!(names(&queues.take(&one, 10).unwrap()), ["a"]);
        assert_eq!(enqueue(&one, "c"), Start::Nothing);
        assert_eq!(
            names(&queues.take(&one, 10).unwrap()),
            ["c"],
            "a second describe"
        );
        assert_eq!(enqueue(&one, "d"), Start::Nothing);
        let ready: Vec<i32> = queues.ready().iter().map(|(b, _)| b.id).collect();
        assert_eq!(ready, [2], "one has {IN_FLIGHT} describes in flight");
        assert!(queues.take(&one, 10).is_none());
        assert_eq!(names(&queues.take(&two, 10).unwrap()), ["b"]);
        assert!(!queues.answered(&two), "nothing waits for two");
        assert!(!queues.go_on(|| false), "nothing ready: the loop stops");
        assert!(queues.answered(&one), "d waits and no loop runs");
        assert!(queues.go_on(|| false));
        assert_eq!(names(&queues.take(&one, 10).unwrap()), ["d"]);
        assert!(!queues.answered(&one));
        assert!(!queues.answered(&one));
        assert!(!queues.go_on(|| false));
        assert!(queues.go_on(|| true), "confirmations still to send");
    }

    #[test]
    fn a_round_starts_early_once_as_many_checks_wait_as_the_rounds_in_flight_carry() {
        let queues = DescribeQueues::default();
        let (one, two) = brokers();
        let enqueue = |at: &Broker, id| queues.enqueue(at, id, oneshot::channel().0, true);
        assert_eq!(enqueue(&one, "a"), Start::Rounds);
        enqueue(&two, "b");
        enqueue(&two, "c");
        assert!(queues.go_on(|| false));
        let carried = queues.take(&one, 10).unwrap().len() + queues.take(&two, 10).unwrap().len();
        // Rounds short enough to wait for: no early round.
        queues.round_took(Duration::from_micros(200));
        assert!(!queues.overlap_at(Some(carried)));
        for id in ["d", "e", "f", "g"] {
            assert_eq!(enqueue(&one, id), Start::Nothing, "{id}");
        }
        assert!(!queues.overlap_at(Some(carried)), "4 wait, rounds short");
        // A round as long as the network's: the next starts early.
        let queues = DescribeQueues::default();
        let enqueue = |at: &Broker, id| queues.enqueue(at, id, oneshot::channel().0, true);
        queues.round_took(OVERLAP_FROM);
        assert_eq!(enqueue(&one, "a"), Start::Rounds);
        enqueue(&two, "b");
        enqueue(&two, "c");
        assert!(queues.go_on(|| false));
        let carried = queues.take(&one, 10).unwrap().len() + queues.take(&two, 10).unwrap().len();
        assert_eq!(carried, 3);
        assert!(!queues.overlap_at(Some(carried)), "none wait yet");
        assert_eq!(enqueue(&one, "d"), Start::Nothing);
        assert_eq!(enqueue(&two, "e"), Start::Nothing);
        assert_eq!(
            enqueue(&one, "f"),
            Start::Overlap,
            "3 wait: the loop is woken"
        );
        assert_eq!(enqueue(&one, "g"), Start::Nothing, "once");
        assert!(queues.overlap_at(Some(carried)));
        assert!(!queues.overlap_at(None), "no round may start early");
        assert_eq!(enqueue(&two, "h"), Start::Nothing);
    }

    #[test]
    fn the_shortest_round_is_that_of_the_last_window_or_two() {
        let mut shortest = WindowedMin::default();
        let t = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(shortest.get(), None);
        shortest.sample(ms(3), t);
        shortest.sample(ms(2), t + ms(500));
        assert_eq!(shortest.get(), Some(ms(2)));
        // A new window keeps the last one's least.
        shortest.sample(ms(5), t + ms(1_000));
        assert_eq!(shortest.get(), Some(ms(2)));
        // And forgets it a window later.
        shortest.sample(ms(4), t + ms(2_000));
        assert_eq!(shortest.get(), Some(ms(4)));
        // After a silence of two windows, nothing old is kept.
        shortest.sample(ms(9), t + ms(5_000));
        assert_eq!(shortest.get(), Some(ms(9)));
    }
}
