//! The confirmation stream: describe batches waiting for another broker to
//! confirm their coordinator, and the confirmations in flight.
//!
//! One stream for the whole client (see `describe` for why it is sound):
//! a confirmation carries the ids of every batch that waits, whatever its
//! coordinator, except the batches of the broker it is sent to, which
//! cannot confirm itself; they go in the next one. One is in flight at a
//! time, or one per round where the rounds of `describe` overlap. A
//! waiter only ever joins a request built after it began waiting, so every
//! confirmation of a batch was sent after the batch's checks arrived.
//!
//! A confirmation in flight longer than the hedge delay no longer holds the
//! stream: the next one goes to another broker and carries the slow one's
//! waiters too; each waiter takes the first answer that names its ids (as
//! `send_any` races a slow broker). A waiter whose last request failed
//! gets the failure (its describe is asked again, after a backoff).
//!
//! The rounds of `describe` build their request with
//! [`Confirms::request_to`] right after taking their batches; describes
//! outside the rounds (batching off, or a sender that began while the
//! cluster was known to be one broker, which then grew) are carried by
//! [`Confirms::next_request`].

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::config::Broker;
use crate::error::KafkaError;
use krabka_coordination::sync::lock;

/// What a confirming broker said: per id the coordinator it names (or why
/// it could not), and who said it.
#[derive(Clone, Debug)]
pub(crate) struct Confirmation {
    /// The broker that answered.
    pub(crate) by: Broker,
    /// Per id of the waiter, that broker's answer.
    pub(crate) named: HashMap<String, Result<Named, KafkaError>>,
    /// Asked on a connection opened for it, to the coordinator's own
    /// address ([`Confirms::request_alone`]): it proves which process the
    /// address leads to, and is no other replica's vote.
    pub(crate) alone: bool,
}

/// The coordinator a confirming broker names for one id: the broker and,
/// from a Metadata answer, the id's partition of `__transaction_state`
/// with the leader epoch it names that broker leader at and the
/// partition's replicas (a FindCoordinator answer names neither).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Named {
    pub(crate) broker: Broker,
    pub(crate) led: Option<Led>,
    /// The node ids of the partition's replicas, as the confirming broker
    /// names them; empty from FindCoordinator.
    pub(crate) replicas: Vec<i32>,
}

/// A partition of `__transaction_state` and a leader epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Led {
    pub(crate) partition: i32,
    pub(crate) epoch: i32,
}

impl Named {
    /// `broker`, as a FindCoordinator answer names it: without an epoch.
    pub(crate) fn found(broker: Broker) -> Named {
        Named {
            broker,
            led: None,
            replicas: Vec::new(),
        }
    }
}

/// Where a waiter's confirmation goes: the first answer, or the error of
/// the last request that carried it.
pub(crate) type Reply = oneshot::Sender<Result<Confirmation, KafkaError>>;

/// One describe batch waiting for its confirmation.
#[derive(Debug)]
pub(crate) struct Waiter {
    /// The coordinator whose answers it confirms: never asked to confirm
    /// them itself.
    coordinator: Broker,
    ids: Vec<String>,
    reply: Mutex<Option<Reply>>,
    /// Requests in flight that carry it.
    carriers: AtomicUsize,
}

impl Waiter {
    /// Still waiting: not answered, and its describe still wants it.
    fn open(&self) -> bool {
        lock(&self.reply).as_ref().is_some_and(|r| !r.is_closed())
    }

    /// Answers with `answer` unless answered already; the part of a
    /// request's answer that names this waiter's ids.
    fn answer(&self, answer: Result<&Confirmation, &KafkaError>) {
        let Some(reply) = lock(&self.reply).take() else {
            return;
        };
        let _ = reply.send(match answer {
            Ok(all) => Ok(Confirmation {
                by: all.by.clone(),
                alone: all.alone,
                named: self
                    .ids
                    .iter()
                    .filter_map(|id| all.named.get(id).map(|a| (id.clone(), a.clone())))
                    .collect(),
            }),
            Err(e) => Err(e.clone()),
        });
    }
}

/// One confirmation to send: its broker, its ids, the waiters it answers.
#[derive(Debug)]
pub(crate) struct Request {
    /// Its number in the stream.
    pub(crate) number: u64,
    /// The confirming broker.
    pub(crate) to: Broker,
    /// Every id of its waiters, once each.
    pub(crate) ids: Vec<String>,
    /// Sent on a connection of its own, carrying `to`'s batches too
    /// ([`Confirms::request_alone`]).
    pub(crate) alone: bool,
    waiters: Vec<Arc<Waiter>>,
}

#[derive(Debug)]
struct InFlight {
    number: u64,
    addr: String,
    /// Sent less than the hedge delay ago: the next request waits for it.
    holds: bool,
    waiters: Vec<Arc<Waiter>>,
}

#[derive(Debug, Default)]
struct Stream {
    /// Waiters not carried by any request younger than the hedge delay.
    waiting: Vec<Arc<Waiter>>,
    /// Requests in flight.
    in_flight: Vec<InFlight>,
    /// Requests built so far (each one's number).
    sent: u64,
}

/// The confirmation stream's table.
#[derive(Debug, Default)]
pub(crate) struct Confirms {
    stream: Mutex<Stream>,
    /// The cluster refused this client the metadata of
    /// `__transaction_state`: confirmations are FindCoordinator requests.
    by_find_coordinator: AtomicBool,
}

impl Confirms {
    /// Registers a batch of `coordinator` with `ids` as waiting for a
    /// confirmation sent from now on. Returns where the answer comes, and
    /// true when the stream is free: the caller sends
    /// ([`Confirms::next_request`]).
    pub(crate) fn wait(
        &self,
        coordinator: &Broker,
        ids: Vec<String>,
    ) -> (oneshot::Receiver<Result<Confirmation, KafkaError>>, bool) {
        let (tx, rx) = oneshot::channel();
        let mut stream = lock(&self.stream);
        stream.waiting.push(Arc::new(Waiter {
            coordinator: coordinator.clone(),
            ids,
            reply: Mutex::new(Some(tx)),
            carriers: AtomicUsize::new(0),
        }));
        (rx, !stream.held())
    }

    /// The next request to send when the stream is free and some batch
    /// waits: to the broker [`choose`] picks of `brokers` (the usable ones,
    /// best first), carrying every waiting batch it can confirm. A batch no
    /// broker of `brokers` can confirm (none but its coordinator) fails at
    /// once. `None` when nothing is to be sent now.
    pub(crate) fn next_request(&self, brokers: &[Broker]) -> Option<Request> {
        let mut stream = lock(&self.stream);
        loop {
            stream.waiting.retain(|w| w.open());
            if stream.held() || stream.waiting.is_empty() {
                return None;
            }
            if let Some(to) = choose(brokers, &stream.waiting) {
                return Some(stream.send(to.clone(), false));
            }
            let alone = stream.waiting[0].coordinator.clone();
            let error = KafkaError::Connect {
                addr: "the cluster".into(),
                reason: format!(
                    "no broker but the coordinator {} to confirm its answers",
                    alone.addr
                ),
            };
            for waiter in stream.waiting.iter().filter(|w| w.coordinator == alone) {
                waiter.answer(Err(&error));
            }
        }
    }

    /// `request` has been in flight for the hedge delay: it no longer holds
    /// the stream, and its open waiters wait for the next request too
    /// (still answered by this one if it answers first).
    pub(crate) fn slow(&self, number: u64) {
        let mut stream = lock(&self.stream);
        let Some(entry) = stream.in_flight.iter_mut().find(|f| f.number == number) else {
            return;
        };
        entry.holds = false;
        let waiters = entry.waiters.clone();
        for waiter in waiters {
            if waiter.open() && !stream.waiting.iter().any(|w| Arc::ptr_eq(w, &waiter)) {
                stream.waiting.push(waiter);
            }
        }
    }

    /// The request to `to` of a round: every open waiter but those of
    /// `to`'s own answers. `None` when it would carry none.
    pub(crate) fn request_to(&self, to: &Broker) -> Option<Request> {
        let mut stream = lock(&self.stream);
        stream.waiting.retain(|w| w.open());
        if !stream.waiting.iter().any(|w| w.coordinator.id != to.id) {
            return None;
        }
        Some(stream.send(to.clone(), false))
    }

    /// On a cluster of one broker, `to`, the next request when the stream
    /// is free and some batch waits: every waiter, `to`'s own included,
    /// asked on a connection opened for the request. No other broker can
    /// say which process leads, but a connection opened after the batches
    /// were taken reaches the process the address leads to now, where the
    /// describe's connection may still reach one replaced behind it.
    pub(crate) fn request_alone(&self, to: &Broker) -> Option<Request> {
        let mut stream = lock(&self.stream);
        stream.waiting.retain(|w| w.open());
        if stream.held() || stream.waiting.is_empty() {
            return None;
        }
        Some(stream.send(to.clone(), true))
    }

    /// True while a waiter is not carried by any request.
    pub(crate) fn has_waiting(&self) -> bool {
        let mut stream = lock(&self.stream);
        stream.waiting.retain(|w| w.open());
        !stream.waiting.is_empty()
    }

    /// The coordinators of the waiters not carried by any request.
    pub(crate) fn waiting_coordinators(&self) -> Vec<i32> {
        lock(&self.stream)
            .waiting
            .iter()
            .filter(|w| w.open())
            .map(|w| w.coordinator.id)
            .collect()
    }

    /// `request` ended with `answer`: its waiters take the answer. After a
    /// failure, a waiter no other request carries or will carry gets it.
    pub(crate) fn done(&self, request: Request, answer: Result<Confirmation, KafkaError>) {
        let mut stream = lock(&self.stream);
        stream.in_flight.retain(|f| f.number != request.number);
        for waiter in &request.waiters {
            let others = waiter.carriers.fetch_sub(1, Ordering::AcqRel) - 1;
            match &answer {
                Ok(confirmation) => waiter.answer(Ok(confirmation)),
                Err(e) => {
                    if others == 0 && !stream.waiting.iter().any(|w| Arc::ptr_eq(w, waiter)) {
                        waiter.answer(Err(e));
                    }
                }
            }
        }
    }

    /// Fails every waiter no request carries with `error`.
    pub(crate) fn fail_waiting(&self, error: &KafkaError) {
        let waiting = std::mem::take(&mut lock(&self.stream).waiting);
        for waiter in waiting {
            waiter.answer(Err(error));
        }
    }

    /// Confirmations are FindCoordinator requests from now on.
    pub(crate) fn use_find_coordinator(&self) {
        self.by_find_coordinator.store(true, Ordering::Relaxed);
    }

    /// Whether confirmations are FindCoordinator requests.
    pub(crate) fn by_find_coordinator(&self) -> bool {
        self.by_find_coordinator.load(Ordering::Relaxed)
    }

    /// The addresses of the brokers with a confirmation in flight.
    pub(crate) fn busy(&self) -> Vec<String> {
        lock(&self.stream)
            .in_flight
            .iter()
            .map(|f| f.addr.clone())
            .collect()
    }
}

impl Stream {
    /// A request sent less than the hedge delay ago holds the stream.
    fn held(&self) -> bool {
        self.in_flight.iter().any(|f| f.holds)
    }

    /// The request to `to`: every waiter but those of `to`'s own answers
    /// (every waiter when it goes on a connection of its own, `alone`).
    fn send(&mut self, to: Broker, alone: bool) -> Request {
        let (waiters, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|w| alone || w.coordinator.id != to.id);
        self.waiting = rest;
        for waiter in &waiters {
            waiter.carriers.fetch_add(1, Ordering::AcqRel);
        }
        let mut seen = HashSet::new();
        let ids = waiters
            .iter()
            .flat_map(|w| w.ids.iter())
            .filter(|id| seen.insert(id.as_str()))
            .cloned()
            .collect();
        self.sent += 1;
        let number = self.sent;
        self.in_flight.push(InFlight {
            number,
            addr: to.addr.clone(),
            holds: true,
            waiters: waiters.clone(),
        });
        Request {
            number,
            to,
            ids,
            alone,
            waiters,
        }
    }
}

/// The broker to send the next confirmation to: of `brokers` (best first),
/// never the coordinator of the oldest waiter, so every batch is carried by
/// the first or the second request after it began waiting; among the rest,
/// the one that coordinates the fewest waiters (all of them are carried
/// but its own).
fn choose<'a>(brokers: &'a [Broker], waiting: &[Arc<Waiter>]) -> Option<&'a Broker> {
    let oldest = waiting.first()?.coordinator.id;
    let mut own: HashMap<i32, usize> = HashMap::new();
    for w in waiting {
        *own.entry(w.coordinator.id).or_default() += 1;
    }
    brokers
        .iter()
        .filter(|b| b.id != oldest)
        .enumerate()
        .min_by_key(|(rank, b)| (own.get(&b.id).copied().unwrap_or(0), *rank))
        .map(|(_, b)| b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(id: i32) -> Broker {
        Broker {
            id,
            addr: format!("b:{id}"),
        }
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    fn answer(request: &Request) -> Result<Confirmation, KafkaError> {
        Ok(Confirmation {
            by: request.to.clone(),
            alone: request.alone,
            named: request
                .ids
                .iter()
                .map(|id| (id.clone(), Ok(Named::found(broker(1)))))
                .collect(),
        })
    }

    #[tokio::test]
    async fn one_request_carries_every_coordinators_batches_but_the_confirming_brokers_own() {
        let confirms = Confirms::default();
        let brokers = [broker(1), broker(2), broker(3)];
        let (mut a, free) = confirms.wait(&broker(1), ids(&["a1", "a2"]));
        assert!(free, "a free stream sends at once");
        let (mut b, _) = confirms.wait(&broker(2), ids(&["b1"]));
        let (mut c, _) = confirms.wait(&broker(3), ids(&["c1", "a1"]));

        // Broker 1 has the oldest waiter: never its confirmer. Brokers 2
        // and 3 coordinate one waiter each; 2 comes first.
        let first = confirms.next_request(&brokers).unwrap();
        assert_eq!(
            (first.to.id, first.ids.clone()),
            (2, ids(&["a1", "a2", "c1"]))
        );
        assert!(confirms.next_request(&brokers).is_none(), "one in flight");
        let (mut late, free) = confirms.wait(&broker(1), ids(&["a3"]));
        assert!(!free, "the stream is held");

        let reply = answer(&first);
        confirms.done(first, reply);
        let got = a.try_recv().unwrap().unwrap();
        assert_eq!((got.by.id, got.named.len()), (2, 2), "its own ids");
        assert!(c.try_recv().is_ok());
        assert!(b.try_recv().is_err(), "its own broker did not confirm it");
        assert!(
            late.try_recv().is_err(),
            "joined after the request was built"
        );

        let second = confirms.next_request(&brokers).unwrap();
        assert_eq!(
            second.to.id, 3,
            "not 2, the oldest's coordinator; not 1, which has one"
        );
        assert_eq!(second.ids, ids(&["b1", "a3"]));
        confirms.done(second, Err(KafkaError::Internal("lost".into())));
        assert!(
            b.try_recv().unwrap().is_err(),
            "a failed request fails its waiters"
        );
        assert!(late.try_recv().unwrap().is_err());
        assert!(confirms.next_request(&brokers).is_none(), "none waits");
    }

    #[tokio::test]
    async fn a_slow_request_frees_the_stream_and_its_waiters_take_the_first_answer() {
        let confirms = Confirms::default();
        let brokers = [broker(2), broker(3)];
        let (mut a, _) = confirms.wait(&broker(1), ids(&["a"]));
        let slow = confirms.next_request(&brokers).unwrap();
        assert_eq!(slow.to.id, 2);
        let (mut b, _) = confirms.wait(&broker(1), ids(&["b"]));
        assert!(confirms.next_request(&brokers).is_none());
        confirms.slow(slow.number);
        assert_eq!(confirms.busy(), ["b:2"]);
        let hedge = confirms
            .next_request(&[broker(3), broker(2)])
            .expect("the stream is free again");
        assert_eq!(hedge.ids, ids(&["b", "a"]));
        let reply = answer(&hedge);
        confirms.done(hedge, reply);
        assert_eq!(a.try_recv().unwrap().unwrap().by.id, 3);
        assert!(b.try_recv().is_ok());
        // The slow one answers later: nobody is left to take it.
        let reply = answer(&slow);
        confirms.done(slow, reply);
        assert!(confirms.busy().is_empty());

        // A slow request that fails leaves its waiters to the one after it.
        let (mut c, _) = confirms.wait(&broker(1), ids(&["c"]));
        let slow = confirms.request_to(&broker(2)).unwrap();
        confirms.slow(slow.number);
        let next = confirms.request_to(&broker(3)).unwrap();
        confirms.done(slow, Err(KafkaError::Internal("lost".into())));
        assert!(c.try_recv().is_err(), "still carried");
        confirms.done(next, Err(KafkaError::Internal("lost too".into())));
        assert!(c.try_recv().unwrap().is_err());
    }

    #[tokio::test]
    async fn on_one_broker_a_request_alone_carries_its_own_batches_one_at_a_time() {
        let confirms = Confirms::default();
        let (mut a, free) = confirms.wait(&broker(1), ids(&["a"]));
        assert!(free);
        let first = confirms.request_alone(&broker(1)).unwrap();
        assert!(first.alone);
        assert_eq!(first.ids, ids(&["a"]), "its own broker's batch");
        let (mut b, free) = confirms.wait(&broker(1), ids(&["b"]));
        assert!(!free, "one in flight");
        assert!(confirms.request_alone(&broker(1)).is_none());
        let reply = answer(&first);
        confirms.done(first, reply);
        assert!(a.try_recv().unwrap().unwrap().alone);
        assert!(b.try_recv().is_err(), "taken after the request was built");
        let second = confirms.request_alone(&broker(1)).unwrap();
        assert_eq!(second.ids, ids(&["b"]));
    }

    #[tokio::test]
    async fn a_batch_only_its_own_coordinator_could_confirm_fails_at_once() {
        let confirms = Confirms::default();
        let (mut a, _) = confirms.wait(&broker(1), ids(&["a"]));
        assert!(confirms.next_request(&[broker(1)]).is_none());
        let error = a.try_recv().unwrap().unwrap_err();
        assert!(error.is_retriable(), "{error}");
    }
}
