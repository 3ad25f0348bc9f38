//! DescribeTransactions: the coordinator's current (producer id, epoch) of a
//! transactional id, which is the current token of a role. This is the one
//! describe path: the service's checks, its coordinator poller, the CLI and
//! the leader-election client all come through here.
//!
//! **Batching.** Per coordinator at most one DescribeTransactions is in
//! flight (two where confirmation rounds overlap, see below); ids asked for
//! meanwhile (by any caller) wait and go together in the next request, up
//! to `max_describe_batch` ids (the queues are `state::describes`). An id
//! is only ever answered by a request sent after it was asked for.
//!
//! **Only confirmed answers.** A broker that paused (a long GC pause, a
//! frozen VM) and came back still answers from its memory until it has
//! caught up with the metadata log, and a broker cut off from the
//! controllers answers from memory for as long as the cut lasts; meanwhile
//! another broker took over as coordinator and minted a newer pair: a
//! deposed token would look current. A rack or zone that loses its route
//! to the controllers leaves two or more brokers behind at once. So an
//! answer of coordinator X is used only when enough *replicas* of the id's
//! `__transaction_state` partition confirm it (`quorum`): each names X as
//! the partition's leader in a Metadata answer, from its own metadata
//! image, at the leader epoch the process that answered the describe said
//! it leads that partition at, on the describe's own connection
//! (`incarnation`), and at no epoch below one the client has seen. X is a
//! process, not a node id: a process registered with a fenced broker's
//! node id (a replaced host, a force-deleted pod) leads at newer epochs
//! than the process it replaced, while a connection made before still
//! reaches the old one. (A client the cluster does not let describe that
//! topic confirms with FindCoordinator, by node id alone and one broker:
//! weaker, said at warn.) Kafka's own rules give what such a confirmation
//! is worth:
//! 1. a new coordinator Z can only mint after the controller made it leader
//!    of the id's `__transaction_state` partition and it wrote the new pair
//!    there with acks=all: committed once every replica of the partition's
//!    ISR fetched it, and only while that ISR holds
//!    `transaction.state.log.min.isr` (min.isr) of its RF replicas; a
//!    follower fetches from Z only after it applied that leadership change
//!    to its metadata, which FindCoordinator and Metadata answer from, and
//!    its image never goes back;
//! 2. so of any RF − min.isr + 1 replicas of that partition, one fetched
//!    the new pair at Z's epoch and names Z (or a later leader), not X at
//!    X's epoch, once the pair exists: X and RF − min.isr other replicas
//!    naming X at X's epoch prove no other leader committed a pair before
//!    the earliest of their answers. This needs no broker to be sound, only
//!    `unclean.leader.election.enable=false` (Kafka's default: an unclean
//!    election makes a leader of a replica outside the ISR, which may lack
//!    the pair) and no reassignment of the partition meanwhile. A broker
//!    holding no replica of the partition, or whose answer names an epoch
//!    below one seen, counts for nothing but X's identity (below);
//! 3. every change of a partition's leader bumps its leader epoch
//!    (`PartitionChangeBuilder`), a node's old incarnation is fenced (its
//!    leaderships moved, at new epochs) before a new one may register with
//!    its id (`ClusterControlManager.registerBroker`), and a process
//!    serves requests only once its image caught up at start-up: one
//!    process ever leads a partition at a given epoch, and a process whose
//!    own answer names itself leader at that epoch is that process. At
//!    least one broker other than X must say the epoch, whatever min.isr
//!    (with min.isr = RF, X's word alone would count for the partition, not
//!    for which process of node X answered).
//!
//! When the rule cannot be met (the replicas it needs unreachable, behind,
//! or in reconnect backoff) the answer is not used: asked again until the
//! caller's deadline, then 503. min.isr is read from
//! `__transaction_state`'s `min.insync.replicas` (`confirmation`), 1 until
//! read (every replica then), again every minute, and a value below 2 is
//! warned of.
//!
//! The argument rests on no duration of X's lag: X may answer from memory
//! for as long as it likes (a pause, a partition from the controller).
//! A confirming broker is never one known to be behind: a broker whose
//! metadata reports a lower leader epoch than another broker did is stale
//! and is not asked to confirm (nor to look coordinators up, nor for
//! metadata) until it caught up (`state::epochs`), and a confirmation is a
//! Metadata answer judged like any other: one that shows its broker behind
//! confirms nothing.
//!
//! *The instants.* For one check of id k: it arrives at `t`; the batch
//! holding k is taken from the queue at `b` (every check in it arrived
//! before: `t ≤ b`); the describe is sent to X at `d ≥ b` and X answers
//! from its state at some `a ≥ d`; a confirmation carrying k is sent to Y
//! at `s`, Y answers at some `y ≥ s`, and its answer is received at `r ≥ y`;
//! the check is answered at `e`, after both answers were received. An
//! answer is used when (i) `s ≥ b` for every confirmation counted, (ii)
//! `r − b ≤ CONFIRM_WINDOW` for each, and (iii) they come from brokers
//! other than X, among them RF − min.isr replicas of k's partition (one
//! broker at least), each naming X's node leader of that partition at the
//! epoch X's process said it leads it at (so, by 3., the leader they name
//! is X itself). Let `τ` be the earliest of their answers `y` and X's `a`.
//! No pair of k was committed by another leader before `τ`: its ISR holds
//! one of X and the voters (2.), which fetched it before the commit, so
//! named the new leader from then on (a voter, at its `y ≥ τ`), or was X
//! itself, which then no longer led at `a ≥ τ` and could not have answered
//! the describe as coordinator. And `τ ≥ t`, since `a ≥ d ≥ b ≥ t` and
//! `y ≥ s ≥ b ≥ t` (i). P, X's latest pair at `a`, was committed by X
//! while it led (a deposed X cannot commit: its ISR, which it cannot
//! shrink without the controller, includes replicas that stopped fetching
//! from it), so P was current at `τ`, or, if X committed P after `τ`, when
//! it was committed, in `[τ, a]`: either way at an instant of `[t, e]`,
//! the caller's request. The window (ii) bounds how long after X's answer
//! the voters answer (a guard on the identity of step 3: the process that
//! named the epoch is the one asked within the window).
//!
//! Nothing else ties a confirmation to its describe: not the batch (s may
//! come before d once b has passed, or after X answered), not the
//! coordinator. What (i) rules out is a confirmation sent before b, even one
//! that carries k: Y may have answered before t, X may have been deposed
//! and a newer pair minted between that answer and t, and X, paused and
//! back, answer the old pair; the window (ii) bounds the other side, the
//! time between X's answer and Y's. So one confirmation confirms at once
//! every batch of every coordinator that was taken before it was sent.
//!
//! *The rounds* (`rounds`, a loop of small steps; the waiting batches
//! and the confirmations in flight are `state::confirms`, the request and
//! the choice of the confirming broker are `confirmation`). A round
//! starts when the one before returned, its confirmation and its describes
//! (those for at most as long again as the confirmation took, so a slow
//! coordinator holds the others one round trip at most), or early, while
//! it is in flight, once as many checks wait as it carries (at most two
//! rounds in flight, so a check waits for no round trip but its own):
//! every coordinator with ids waiting and a describe to spare gives its
//! batch, the describes go out, and one confirmation carries the ids of
//! all of them, built after they were taken, so (i) holds. Waiting for the
//! describes lets a round take every coordinator's batch instead of the
//! one or two whose describe had returned: on a loaded cluster a third
//! fewer rounds, and 106 instead of 139 Kafka requests per 1,000 checks
//! (three brokers, 64 concurrent checks). A coordinator's next describe
//! does not wait for a confirmation (its batch's answers wait for theirs in
//! the describe's task), but its ids that arrive while a round is in
//! flight wait for the next round rather than go in a describe of their
//! own: that describe's answers need a confirmation sent after it anyway,
//! and waiting gathers them in one batch. At concurrency a round is one
//! confirmation for the batches of every coordinator but one; a lone
//! check's describe and confirmation go out together, in one task.
//! - *A confirming broker that coordinates too* cannot confirm itself (a
//!   paused Y answers from the same stale metadata as its describes): the
//!   round sends no batch of Y; it is taken in the next round, which never
//!   confirms with Y again while another broker can. Y is chosen as the
//!   broker whose own batches wait least, never a stale one (above).
//! - *A confirmation that fails* (no connection, no answer, an error)
//!   fails its batches' answers as retriable errors: asked again after the
//!   caller's backoff, in a later round, never believed. One slower than
//!   the hedge delay no longer holds the rounds: the next round goes to
//!   another broker (the slow one is ranked last, brokers in reconnect
//!   backoff are not asked) and carries the slow one's batches too; each
//!   batch takes the first answer. A batch without an answer within the
//!   window is not confirmed.
//! - *An answer that names another broker* (or an error) for an id leaves
//!   that id's answer unconfirmed: asked again, at the broker named.
//! - *An answer of the right node id whose process did not say it leads
//!   at the epoch Y names* leaves the answer unconfirmed: the process is
//!   asked again what it leads (on the same connection) for the next
//!   describe, and when it still does not name that epoch the connections
//!   to its address are given up (`incarnation`): asked again on a new
//!   one. Never confirmed by the second asking: the answer was given
//!   before it, perhaps in an earlier term of the same process (Kafka
//!   unfences a broker at its first heartbeat once caught up, and an
//!   election may follow at once).
//! - *A confirming broker that holds no replica of an id's partition*, or
//!   too few replicas among the confirmations of a round: the replicas
//!   missing are asked at once (a Metadata request each, sent after the
//!   batch was taken), within the window (`confirmation`); with RF 3 and
//!   min.isr 2 on a cluster of three brokers every other broker is a
//!   replica and the round's confirmation is enough.
//! - *One broker*: a cluster a Metadata answer showed to be one broker (it
//!   lists one, and `__transaction_state` has no replica elsewhere) has
//!   nowhere to move a coordinator to, but its process may be replaced
//!   (step 3) while the describe's connection still reaches the old one.
//!   No rounds: each coordinator's describes go batch after batch, each
//!   confirmed on a connection opened for it, to the broker's own address,
//!   after the batch was taken (`Confirms::request_alone`): it reaches the
//!   process the address leads to now, which must name the epoch the
//!   describe's process said it leads at (`quorum::Voter::Alone`). That
//!   proves the address, not more: an old process still reached at the
//!   address by new connections, its replacement elsewhere, is not told
//!   apart (docs/trust.md). Until an answer said how large the cluster is
//!   (a new client, a cluster just replaced) it counts as many, and the
//!   describe asks for metadata first. When no broker but a batch's
//!   coordinator can be asked on a cluster of many (the others in
//!   reconnect backoff), the batch fails at once, retriably.
//!
//! **Monotonic answers.** As a second line, a caller may give a floor per id
//! and producer id: the highest epoch it has seen under that producer id
//! (Kafka orders the epochs of one producer id, and nothing across them: a
//! role's next producer id comes from whichever broker's block, lower or
//! higher). An answer below it comes
//! from a stale coordinator and is asked again (the id's coordinator looked
//! up anew), until the deadline.

//!
//! # The room
//!
//! - this file: the argument, the one describe path (one id's attempt:
//!   its coordinator, its place in a batch, the answer checked against
//!   its floor; retried alone by [`Describer::describe_id`], or with many
//!   ids at one pace by [`Describer::describe_transactions`]) and one
//!   coordinator's describe;
//! - `rounds`: the confirmation rounds;
//! - `confirmation`: the confirmation of a batch, its broker, the
//!   replicas asked beside it, and what they back;
//! - `quorum`: which confirmations together back an answer (pure);
//! - `incarnation`: which process answered a describe (what it says it
//!   leads, on the describe's connection);
//! - `wire`: the requests and the answers as Kafka writes them.

mod confirmation;
mod incarnation;
mod quorum;
mod rounds;
mod wire;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::client::KafkaClient;
use super::config::Broker;
use super::connection::Connection;
use super::error::KafkaError;
use super::observe::StaleReason;
use super::retry::{Retry, retrying_until};
use super::state::{Confirmation, DescribeAnswer, DescribeReply, Lesson, Start, TRANSACTION_STATE};
use krabka_coordination::cluster::{Floor, Lowest};
use krabka_coordination::time::boot_now;
use wire::{build_describe, parse_describe};

#[cfg(any(test, feature = "fake"))]
#[cfg(test)]
pub(crate) use wire::partition_for;

/// The longest time from taking a batch to receiving a confirmation that
/// counts for it: a bound on how long a check waits for its replicas, and
/// on how far apart the describing process's word and the confirming
/// brokers' answers may be. The argument (above) does not rest on it: an
/// elected broker may lead within it (Kafka unfences a broker at its first
/// heartbeat once caught up, and an election may follow at once). Measured
/// on the
/// clock that counts the time the host was suspended
/// ([`krabka_coordination::time::boot_now`]): an answer held across a
/// suspend is as old as the suspend, whatever tokio's clock says.
pub const CONFIRM_WINDOW: Duration = Duration::from_millis(1500);

/// The one describe path (`KafkaClient::describer`): batched, confirmed
/// answers of the transaction coordinators.
#[derive(Clone, Copy, Debug)]
pub struct Describer<'a> {
    pub(crate) client: &'a KafkaClient,
}

impl KafkaClient {
    /// The one describe path.
    pub fn describer(&self) -> Describer<'_> {
        Describer { client: self }
    }
}

impl Describer<'_> {
    /// Describes one transactional id within the operation timeout.
    pub async fn describe_transaction(&self, id: &str) -> DescribeAnswer {
        let deadline = Instant::now() + self.client.config().operation_timeout;
        self.describe_id(id, &|_, _| None, deadline).await
    }

    /// Describes `id` (batched with every concurrent caller, confirmed,
    /// retried until `deadline`); an answer whose epoch is below
    /// `floor(id, its producer id)` is stale and asked again.
    pub async fn describe_id(
        &self,
        id: &str,
        floor: Floor<'_>,
        deadline: Instant,
    ) -> DescribeAnswer {
        let config = self.client.config();
        retrying_until(config, "describe transactions", deadline, || {
            self.attempt(id, floor)
        })
        .await
    }

    /// Describes `ids` as [`Self::describe_id`] does, with one retry pace
    /// for all of them: the retries of many ids go together, in shared
    /// batches. Every id gets an answer or the error that stopped it.
    pub async fn describe_transactions(
        &self,
        ids: &[String],
        floor: Floor<'_>,
        deadline: Instant,
    ) -> HashMap<String, DescribeAnswer> {
        let mut retry = Retry::new("describe transactions", self.client.config(), deadline);
        let mut done: HashMap<String, DescribeAnswer> = HashMap::with_capacity(ids.len());
        let mut pending: Vec<&str> = ids.iter().map(String::as_str).collect();
        pending.sort_unstable();
        pending.dedup();
        let mut failed: HashMap<&str, KafkaError> = HashMap::new();
        while !pending.is_empty() {
            let attempts = async {
                // Every id placed first, in one lookup and under one lock of
                // the queues. Placed by each attempt as it was first polled,
                // on a multi-threaded runtime the lookup task and the senders
                // took the ids placed so far, and lookups and describes went
                // out in waves (a replica's first poll of 1,000 roles on
                // three brokers: 12-16 describes for what 6 carry; 1,000 ids
                // on one scripted broker: 5-17 describes for what 2 carry).
                let placed = self.place_all(&pending).await;
                let answers = pending.iter().zip(placed).map(|(id, placed)| async move {
                    let (broker, answer) = placed?;
                    self.answered(id, &broker, answer, floor).await
                });
                join_all(answers).await
            };
            let Ok(answers) = tokio::time::timeout_at(deadline, attempts).await else {
                for id in pending.drain(..) {
                    let last = failed.remove(id).unwrap_or_else(|| retry.out_of_time());
                    done.insert(id.to_owned(), Err(retry.gave_up(last)));
                }
                break;
            };
            let mut last = None;
            for (id, answer) in pending.iter().zip(answers) {
                match answer {
                    Err(e) if e.is_retriable() => {
                        last.get_or_insert_with(|| e.clone());
                        failed.insert(id, e);
                    }
                    answer => {
                        done.insert((*id).to_owned(), answer);
                    }
                }
            }
            pending.retain(|id| !done.contains_key(*id));
            let Some(last) = last else {
                break;
            };
            if let Err(gave_up) = retry.pause(last).await {
                for id in pending.drain(..) {
                    let last = failed.remove(id).unwrap_or_else(|| gave_up.clone());
                    done.insert(id.to_owned(), Err(retry.gave_up(last)));
                }
            }
        }
        done
    }

    /// Looks the coordinators of `ids` up in one go and queues each id in
    /// its coordinator's next batch, all at once: per id, in order, its
    /// coordinator and where its answer comes, or the lookup's error.
    async fn place_all(&self, ids: &[&str]) -> Vec<Result<(Broker, Answer), KafkaError>> {
        self.client.topics().read_min_isr(TRANSACTION_STATE);
        self.client.metadata().learn_size().await;
        let keys: Vec<String> = ids.iter().map(|id| (*id).to_owned()).collect();
        let mut found = self.client.lookup().coordinators(&keys).await;
        let mut queued = Vec::with_capacity(keys.len());
        let placed = keys
            .into_iter()
            .map(|key| {
                let broker = found.remove(&key).unwrap_or_else(|| {
                    Err(KafkaError::Internal(format!("no coordinator for {key:?}")))
                })?;
                let (tx, rx) = oneshot::channel();
                queued.push((broker.clone(), key, tx));
                Ok((broker, rx))
            })
            .collect();
        self.enqueue_all(queued);
        placed
    }

    /// One try of `id`: its coordinator, its place in that coordinator's
    /// next batch, the answer.
    async fn attempt(&self, id: &str, floor: Floor<'_>) -> DescribeAnswer {
        // Read beside the lookup and the describe, so that a new client's
        // first confirmation knows how many replicas must back it.
        self.client.topics().read_min_isr(TRANSACTION_STATE);
        self.client.metadata().learn_size().await;
        let broker = self.client.lookup().coordinator(id).await?;
        let answer = self.enqueue(&broker, id);
        self.answered(id, &broker, answer, floor).await
    }

    /// The answer for `id` that `broker`'s batch sends to `answer`.
    /// Retriable failures (and an answer below `floor(id)`, from a stale
    /// coordinator) are errors to retry.
    async fn answered(
        &self,
        id: &str,
        broker: &Broker,
        answer: Answer,
        floor: Floor<'_>,
    ) -> DescribeAnswer {
        let answer = answer.await.unwrap_or_else(|_| {
            Err(KafkaError::Internal(
                "the describe batch was dropped".into(),
            ))
        })?;
        let Some(d) = &answer else {
            return Ok(answer);
        };
        let Some(lowest) = floor(id, d.producer_id).filter(|f| f.refuses(d.producer_epoch)) else {
            return Ok(answer);
        };
        let seen = match lowest {
            Lowest::Epoch(epoch) => format!("{}:{epoch} was seen", d.producer_id),
            Lowest::Retired => format!(
                "another producer id was seen current after {}",
                d.producer_id
            ),
        };
        tracing::warn!(
            id = %id,
            broker = %broker.addr,
            answered = %format!("{}:{}", d.producer_id, d.producer_epoch),
            seen = %seen,
            "a coordinator answered a pair older than one already seen; asking again"
        );
        if let Some(observer) = self.client.observer() {
            observer.stale_answer(StaleReason::BelowHighWater);
        }
        self.client.state().learn(Lesson::BelowHighWater {
            key: id,
            addr: &broker.addr,
        });
        Err(KafkaError::Stale {
            addr: broker.addr.clone(),
            reason: format!(
                "answered {}:{} for {id:?} after {seen}",
                d.producer_id, d.producer_epoch
            ),
        })
    }

    /// Queues `id` for `coordinator`'s next batch (or, without batching,
    /// sends a request of its own).
    fn enqueue(&self, coordinator: &Broker, id: &str) -> Answer {
        let (tx, rx) = oneshot::channel();
        if !self.client.config().describe_batching {
            self.send_alone(coordinator, id.to_owned(), tx);
            return rx;
        }
        let rounds = !self.client.state().metadata().single_broker();
        let describes = self.client.state().describes();
        self.start(coordinator, describes.enqueue(coordinator, id, tx, rounds));
        rx
    }

    /// Queues ids as [`Self::enqueue`] does each, all before a sender or a
    /// round takes any.
    fn enqueue_all(&self, ids: Vec<(Broker, String, DescribeReply)>) {
        if !self.client.config().describe_batching {
            for (coordinator, id, reply) in ids {
                self.send_alone(&coordinator, id, reply);
            }
            return;
        }
        let rounds = !self.client.state().metadata().single_broker();
        for (coordinator, start) in self.client.state().describes().enqueue_all(ids, rounds) {
            self.start(&coordinator, start);
        }
    }

    /// Starts what queueing an id for `coordinator` asked for.
    fn start(&self, coordinator: &Broker, start: Start) {
        match start {
            Start::Nothing => {}
            Start::Sender => {
                let (client, coordinator) = (self.client.clone(), coordinator.clone());
                tokio::spawn(async move { client.describer().flush(coordinator).await });
            }
            Start::Rounds => self.start_rounds(),
            Start::Overlap => self.client.state().describes().wake(),
        }
    }

    /// Without batching: a DescribeTransactions of `id` alone, in its own
    /// task.
    fn send_alone(&self, coordinator: &Broker, id: String, reply: DescribeReply) {
        let client = self.client.clone();
        let coordinator = coordinator.clone();
        let batch = vec![(id, reply)];
        tokio::spawn(async move { client.describer().describe_batch(&coordinator, batch).await });
    }

    /// Sends the waiting ids of one coordinator, batch after batch, until
    /// none wait (no confirmation rounds: a single broker, or a cluster
    /// that just grew). Its own task, so a caller that gives up does not
    /// cancel the others' request.
    async fn flush(&self, coordinator: Broker) {
        let max = self.client.config().max_describe_batch.max(1);
        while let Some(batch) = self
            .client
            .state()
            .describes()
            .next_batch(&coordinator, max)
        {
            self.describe_batch(&coordinator, batch).await;
        }
    }

    /// One DescribeTransactions to `coordinator` outside the rounds, in the
    /// confirmation stream; its answers wait for the confirmation in a
    /// task of their own.
    async fn describe_batch(&self, coordinator: &Broker, batch: Vec<(String, DescribeReply)>) {
        // Every check of the batch arrived before this instant (on the clock
        // that counts suspends: the window must).
        let taken = boot_now();
        let ids = distinct(&batch);
        // A broker in reconnect backoff fails here, before a confirmation
        // is spent on it.
        if let Err(e) = self.client.connection(&coordinator.addr).await {
            return reply(batch, &Err(e), coordinator);
        }
        let confirmation = self.confirmation(coordinator, &ids);
        let answers = self.describe(coordinator, &ids).await;
        match answers {
            Ok((mut answers, conn)) => {
                let client = self.client.clone();
                let coordinator = coordinator.clone();
                tokio::spawn(async move {
                    client
                        .describer()
                        .await_confirmation(&mut answers, &coordinator, &conn, confirmation, taken)
                        .await;
                    reply(batch, &Ok(answers), &coordinator);
                });
            }
            Err(e) => reply(batch, &Err(e), coordinator),
        }
    }

    /// Starts the round loop in a task of its own.
    fn start_rounds(&self) {
        let rounds: futures::future::BoxFuture<'static, ()> =
            Box::pin(rounds::Rounds::new(self.client.clone()).run());
        tokio::spawn(rounds);
    }

    /// The answers of `coordinator` for `ids`, unconfirmed, and the
    /// connection they came on (its process is what a confirmation must
    /// name: `incarnation`). The first describe on a connection asks what
    /// the process leads alongside.
    async fn describe(
        &self,
        coordinator: &Broker,
        ids: &[String],
    ) -> Result<(HashMap<String, DescribeAnswer>, Arc<Connection>), KafkaError> {
        let conn = self.client.connection(&coordinator.addr).await?;
        if let Some(observer) = self.client.observer() {
            observer.describe_batch(ids.len());
        }
        let request = build_describe(ids);
        let timeout = self.client.config().request_timeout;
        let described = self.client.call_on(&conn, &request, timeout);
        let response = if self.needs_leads(&conn) {
            tokio::join!(described, self.ask_leads(&conn, 0)).0
        } else {
            described.await
        };
        let answers = parse_describe(response?);
        let addr = coordinator.addr.as_str();
        for error in answers.values().filter_map(|a| a.as_ref().err()) {
            self.client
                .state()
                .learn(Lesson::DescribeFailed { addr, error });
        }
        Ok((answers, conn))
    }
}

/// Where an id's answer comes.
type Answer = oneshot::Receiver<DescribeAnswer>;

/// Where a batch's confirmation comes.
type Pending = oneshot::Receiver<Result<Confirmation, KafkaError>>;

/// The distinct ids of a batch, sorted.
fn distinct(batch: &[(String, DescribeReply)]) -> Vec<String> {
    let mut ids: Vec<String> = batch.iter().map(|(id, _)| id.clone()).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Sends each waiter of `batch` its id's answer in `answers`.
fn reply(
    batch: Vec<(String, DescribeReply)>,
    answers: &Result<HashMap<String, DescribeAnswer>, KafkaError>,
    coordinator: &Broker,
) {
    for (id, reply) in batch {
        let answer = match answers {
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
