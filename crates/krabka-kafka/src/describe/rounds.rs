//! The confirmation rounds: one loop for the client unless the cluster is
//! known to be one broker (the argument is in `describe`). A round starts when
//! the confirmation before it returned (or was slower than the hedge
//! delay) and its describes returned (or took as long again): every
//! coordinator with ids waiting and a describe to spare gives its batch
//! (but the confirming broker's), the batches' describes go out, and one
//! confirmation carries them all. The loop ends when nothing is left to
//! send; an id queued then starts it again.
//!
//! *Overlap.* Across a network a round trip is most of a check's time, and
//! a check that arrives while a round is in flight waits for it to return,
//! then for its own round: up to two round trips. So, where the shortest
//! round of the last second or two took at least
//! `OVERLAP_FROM` (`state::describes`), up to [`IN_FLIGHT`]
//! rounds fly at once (Kafka's producer keeps up to five requests in
//! flight per connection): while one is out, the next starts as soon as
//! as many checks wait as it carries, so the batches stay about as large.
//! Where rounds are shorter (brokers close by, or on the same machine, as
//! on loopback), waiting for the round in flight costs a check little and
//! saves the brokers a third of the requests, so the next round waits.
//!
//! A round is four steps of [`Rounds`]: choose the confirming broker (or
//! fail the batches when none can confirm), take the batches, send them
//! with the confirmation, wait for them.

use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{DescribeReply, Describer, Pending, distinct, reply};
use crate::client::KafkaClient;
use crate::config::Broker;
use crate::error::KafkaError;
use crate::state::{ConfirmRequest, IN_FLIGHT};
use krabka_coordination::time::boot_now;

/// The loop, and what it keeps from one round to the next.
pub(super) struct Rounds {
    client: KafkaClient,
    /// Most ids in one describe.
    max: usize,
    /// The broker the last round confirmed with, if its own batch waited.
    deferred: Option<i32>,
}

/// What one round sends: each batch's describe (with a channel that says
/// it returned), and the confirmation carrying them all.
struct Round {
    describes: Vec<BoxFuture<'static, ()>>,
    returns: Vec<oneshot::Receiver<()>>,
    confirmation: Option<ConfirmRequest>,
    /// The checks its batches carry.
    checks: usize,
}

impl Rounds {
    pub(super) fn new(client: KafkaClient) -> Rounds {
        let max = client.config().max_describe_batch.max(1);
        Rounds {
            client,
            max,
            deferred: None,
        }
    }

    /// Round after round until nothing waits, at most [`IN_FLIGHT`] at
    /// once. The rounds in flight are futures of this task: a lone check's
    /// round costs no task switch.
    pub(super) async fn run(mut self) {
        // Each round's future yields the checks it carried.
        let mut flying: FuturesUnordered<BoxFuture<'static, usize>> = FuturesUnordered::new();
        let mut carried = 0;
        let client = self.client.clone();
        let describes = client.state().describes();
        loop {
            let start = if flying.is_empty() {
                let confirms = self.client.state().confirms();
                if !describes.go_on(|| confirms.has_waiting()) {
                    return;
                }
                true
            } else {
                // Early once as many checks wait as the rounds in flight
                // carry; `enqueue` wakes this loop when they do.
                describes.overlap_at((flying.len() < IN_FLIGHT).then_some(carried))
            };
            if start {
                let ready = describes.ready();
                let sent = match self.choose(&ready) {
                    Some(to) => {
                        let round = self.take(&to, ready);
                        let some = round.checks > 0 || round.confirmation.is_some();
                        if some {
                            carried += round.checks;
                            flying.push(Box::pin(send(self.client.clone(), round)));
                        }
                        some
                    }
                    None => {
                        self.fail(&ready);
                        true
                    }
                };
                if sent || flying.is_empty() {
                    continue;
                }
            }
            tokio::select! {
                Some(checks) = flying.next() => carried -= checks,
                () = describes.woken() => {}
            }
        }
    }

    /// The broker this round confirms with ([`choose`]), for the batches
    /// `ready` (coordinators and their waiting ids).
    fn choose(&self, ready: &[(Broker, usize)]) -> Option<Broker> {
        let brokers = self.client.describer().confirming_brokers();
        let mut waiting = self.client.state().confirms().waiting_coordinators();
        waiting.extend(ready.iter().map(|(b, _)| b.id));
        choose(&brokers, ready, &waiting, self.deferred)
    }

    /// No broker could confirm anyone: the batches fail now and are asked
    /// again after their callers' backoff.
    fn fail(&self, ready: &[(Broker, usize)]) {
        let (describes, confirms) = (
            self.client.state().describes(),
            self.client.state().confirms(),
        );
        let error =
            KafkaError::NoBroker("no broker to confirm a coordinator's answers with".into());
        for (coordinator, _) in ready {
            if let Some(batch) = describes.take(coordinator, self.max) {
                reply(batch, &Err(error.clone()), coordinator);
                describes.answered(coordinator);
            }
        }
        confirms.fail_waiting(&error);
    }

    /// Takes every ready batch but `to`'s, each waiting for the
    /// confirmation that carries it.
    fn take(&mut self, to: &Broker, ready: Vec<(Broker, usize)>) -> Round {
        let (describes, confirms) = (
            self.client.state().describes(),
            self.client.state().confirms(),
        );
        // Every check of these batches arrived before this instant (on the
        // clock that counts suspends: the window must).
        let taken = boot_now();
        let mut batches = Vec::with_capacity(ready.len());
        let mut checks = 0;
        for (coordinator, _) in ready {
            if coordinator.id == to.id {
                continue;
            }
            if let Some(batch) = describes.take(&coordinator, self.max) {
                checks += batch.len();
                let ids = distinct(&batch);
                let (confirmation, _) = confirms.wait(&coordinator, ids.clone());
                batches.push((coordinator, batch, ids, confirmation));
            }
        }
        self.deferred = (batches.is_empty()
            || describes.ready().iter().any(|(b, _)| b.id == to.id))
        .then_some(to.id);
        // Carries every batch taken above (unless another request
        // already took one of them: then that one answers it).
        let confirmation = confirms.request_to(to);
        let (describes, returns) = batches
            .into_iter()
            .map(|(coordinator, batch, ids, confirmation)| {
                let (returned, on_return) = oneshot::channel();
                let client = self.client.clone();
                let describe: BoxFuture<'static, ()> = Box::pin(async move {
                    client
                        .describer()
                        .round_describe(coordinator, batch, ids, confirmation, taken, returned)
                        .await
                });
                (describe, on_return)
            })
            .unzip();
        Round {
            describes,
            returns,
            confirmation,
            checks,
        }
    }
}

/// Sends `round` and waits for it (the loop's next round, but an early
/// one, starts after); yields the checks it carried.
async fn send(client: KafkaClient, mut round: Round) -> usize {
    let started = Instant::now();
    // True unless the confirmation was slower than the hedge delay.
    let confirm = async {
        match round.confirmation {
            Some(request) => client.describer().confirm(request).await,
            None => true,
        }
    };
    // One batch (a lone check): its describe and the confirmation in
    // this task, without a task switch. More: each describe in a task
    // of its own.
    if round.describes.len() == 1
        && let Some(describe) = round.describes.pop()
    {
        lone(describe, confirm).await;
    } else {
        for describe in round.describes {
            tokio::spawn(describe);
        }
        // The next round waits for this one's describes to return too,
        // for at most as long again as the confirmation took (a slow
        // coordinator holds the others' checks one round trip at
        // most): it then takes every coordinator's batch but the
        // confirming broker's, and rounds come no faster than the
        // brokers answer them: on a loaded cluster a third fewer
        // rounds, and fewer requests per check.
        let sent = Instant::now();
        if confirm.await {
            let _ = tokio::time::timeout(sent.elapsed(), futures::future::join_all(round.returns))
                .await;
        }
    }
    client.state().describes().round_took(started.elapsed());
    round.checks
}

/// A round of one batch: until the confirmation is answered or slow (a
/// slow one must not hold the next round, which carries its batch). Nor
/// may the describe: once the confirmation is in, it gets as long again as
/// the confirmation took, then a task of its own (a hung coordinator's
/// describe, or its connection, would hold every other coordinator's
/// checks).
async fn lone(
    mut describe: BoxFuture<'static, ()>,
    confirm: impl std::future::Future<Output = bool>,
) {
    let sent = Instant::now();
    tokio::pin!(confirm);
    let mut described = false;
    let answered = loop {
        tokio::select! {
            () = &mut describe, if !described => described = true,
            answered = &mut confirm => break answered,
        }
    };
    if !described {
        let more = if answered {
            sent.elapsed()
        } else {
            Duration::ZERO
        };
        if tokio::time::timeout(more, &mut describe).await.is_err() {
            tokio::spawn(describe);
        }
    }
}

impl Describer<'_> {
    /// The describe of one batch a round took: answered to its waiters once
    /// the round's confirmation (or a later one) backs it.
    async fn round_describe(
        &self,
        coordinator: Broker,
        batch: Vec<(String, DescribeReply)>,
        ids: Vec<String>,
        confirmation: Pending,
        taken: Instant,
        returned: oneshot::Sender<()>,
    ) {
        let answers = self.describe(&coordinator, &ids).await;
        if self.client.state().describes().answered(&coordinator) {
            self.start_rounds();
        }
        let _ = returned.send(());
        let answers = match answers {
            Ok((mut answers, conn)) => {
                self.await_confirmation(&mut answers, &coordinator, &conn, confirmation, taken)
                    .await;
                Ok(answers)
            }
            Err(e) => Err(e),
        };
        reply(batch, &answers, &coordinator);
    }
}

/// The broker a round confirms with: of `brokers` (usable, best first),
/// the one whose own batches wait least (`ready`: coordinators and their
/// waiting ids; they wait for the next round), never the one the round
/// before deferred while another can confirm, and never the only
/// coordinator `waiting` names (it cannot confirm itself). `None` when no
/// broker can confirm any waiting batch.
fn choose(
    brokers: &[Broker],
    ready: &[(Broker, usize)],
    waiting: &[i32],
    deferred: Option<i32>,
) -> Option<Broker> {
    let own = |b: &Broker| -> usize {
        ready
            .iter()
            .filter(|(c, _)| c.id == b.id)
            .map(|(_, n)| *n)
            .sum()
    };
    brokers
        .iter()
        .enumerate()
        // It must confirm someone.
        .filter(|(_, b)| waiting.iter().any(|&c| c != b.id))
        .min_by_key(|(rank, b)| (Some(b.id) == deferred, own(b), *rank))
        .map(|(_, b)| b.clone())
}
