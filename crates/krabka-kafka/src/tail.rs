//! Tailing every partition of a topic with read_committed long polls, each
//! partition making progress of its own.
//!
//! A broker answers the requests of one connection in order, so one long
//! poll per leader is in flight at a time, carrying all the partitions that
//! broker leads (on connections of the tailer's own, so nothing else waits
//! behind a poll). Leaders are polled independently: a dead or hung leader
//! holds back only its own partitions. A poll that is overdue (no answer
//! within the long-poll wait and a margin) makes the tailer look at fresh
//! metadata, and when those partitions have a new leader the poll is
//! abandoned and they are read from the new leader at once, instead of
//! waiting out the request timeout.
//!
//! **Freshness.** Every read says as of which instant it is complete: the
//! earlier of its fetch's send instant and the last confirmation of its
//! leader at the read's leader epoch by another broker
//! (`state::epochs`). A leader that keeps answering after it was deposed
//! (cut off from the controller, it does not know) is never confirmed
//! again, so its reads stop moving that instant. The tailer sends the
//! confirmations, one round per long-poll interval
//! ([`KafkaClient::confirm_leaders`], on the client's shared connections so
//! no poll delays them); a confirmation naming a newer leader moves the
//! next poll there. And a read that stops at a last stable offset an open
//! transaction holds back is complete only as of the latest answer whose
//! high watermark it has read up to (`settled`): behind a hanging
//! transaction the instant stays where it began.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

use krabka_coordination::time::boot_now;

use super::client::KafkaClient;
use super::config::Broker;
use super::error::{KafkaError, ResponseError};
use super::fetch::{Chunks, Cursor, EARLIEST, FetchPosition, Reader};
use super::settled::Settled;
use super::state::Lesson;
use crate::backoff::{Backoff, Gate, Jitter};
use krabka_coordination::cluster::Tailed;

/// A poll is overdue this long after its long-poll wait.
const OVERDUE_MARGIN: Duration = Duration::from_millis(500);

/// A partition whose reads an open transaction holds back this long is
/// logged (at warn, once until it ends): the lease transactions of this
/// protocol take milliseconds.
const HELD_BACK_WARN: Duration = Duration::from_secs(5);

/// What one poll of one leader brought: per partition, a chunk or an error.
type Answers = Result<Chunks, KafkaError>;

/// A finished poll: its leader, positions, send instant and answers.
type Polled = (Broker, Vec<FetchPosition>, Instant, Answers);

struct Poll {
    abort: AbortHandle,
    started: Instant,
    partitions: Vec<i32>,
}

struct Tailer {
    client: KafkaClient,
    /// The client on its shared connections: confirmations.
    shared: KafkaClient,
    topic: String,
    long_poll: Duration,
    cursors: Vec<Cursor>,
    /// Per partition, the answers whose high watermark is not read yet.
    settled: Vec<Settled>,
    /// Per partition, whether it was logged as held back.
    held_back: Vec<bool>,
    /// Per partition failing: no read before its gate opens.
    backoff: Vec<Option<Gate>>,
    tx: mpsc::Sender<Tailed>,
}

impl Reader<'_> {
    /// Tails every partition of `topic` from `from[p]`, forever, on
    /// connections of its own; updates arrive on the returned channel. The
    /// tailing stops when the receiver is dropped.
    pub fn tail(&self, topic: &str, from: Vec<i64>, long_poll: Duration) -> mpsc::Receiver<Tailed> {
        let (tx, rx) = mpsc::channel(64);
        let tailer = Tailer {
            client: self.client.with_own_connections(),
            shared: self.client.clone(),
            topic: topic.to_owned(),
            long_poll,
            backoff: vec![None; from.len()],
            settled: from.iter().map(|_| Settled::default()).collect(),
            held_back: vec![false; from.len()],
            cursors: from.into_iter().map(Cursor::at).collect(),
            tx,
        };
        tokio::spawn(tailer.run());
        rx
    }
}

impl Tailer {
    async fn run(mut self) {
        let mut polls: JoinSet<Polled> = JoinSet::new();
        let mut busy: BTreeMap<Broker, Poll> = BTreeMap::new();
        let tick = self
            .long_poll
            .clamp(Duration::from_millis(100), Duration::from_secs(1));
        let mut ticker = tokio::time::interval(tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut confirming = Confirming::default();
        loop {
            if !self.schedule(&mut polls, &mut busy).await {
                return;
            }
            let wake = self.next_retry();
            tokio::select! {
                Some(done) = polls.join_next() => {
                    let Ok((leader, positions, sent, result)) = done else { continue };
                    busy.remove(&leader);
                    if !self.absorb(positions, sent, result).await {
                        return;
                    }
                }
                _ = ticker.tick() => {
                    confirming.start(&self.shared, &self.topic);
                    self.abandon_moved(&mut busy).await;
                }
                () = sleep_until(wake) => {}
                () = self.tx.closed() => return,
            }
        }
    }

    /// Starts a poll for every leader without one, over its partitions that
    /// are not waiting out a failure. False when nobody listens any more.
    async fn schedule(
        &mut self,
        polls: &mut JoinSet<Polled>,
        busy: &mut BTreeMap<Broker, Poll>,
    ) -> bool {
        let now = Instant::now();
        let polling: Vec<i32> = busy
            .values()
            .flat_map(|p| p.partitions.iter().copied())
            .collect();
        let idle: Vec<(i32, i64)> = (0..self.cursors.len())
            .filter(|&p| {
                !polling.contains(&(p as i32))
                    && self.backoff[p].as_ref().is_none_or(|g| g.is_open(now))
            })
            .map(|p| (p as i32, self.cursors[p].next_offset()))
            .collect();
        if idle.is_empty() {
            return true;
        }
        let (groups, errors) = self
            .client
            .reader()
            .partition_leaders(&self.topic, &idle)
            .await;
        for (partition, error) in errors {
            if !self.failed(partition, error).await {
                return false;
            }
        }
        for (leader, positions) in groups {
            if busy.contains_key(&leader) {
                continue;
            }
            let client = self.client.clone();
            let topic = self.topic.clone();
            let wait = self.long_poll;
            let target = leader.clone();
            let partitions = positions.iter().map(|p| p.partition).collect();
            let abort = polls.spawn(async move {
                // Measured with suspends, as the epochs' confirmations are.
                let sent = boot_now();
                let result = client
                    .reader()
                    .fetch_from(&target, &topic, &positions, wait)
                    .await;
                (target, positions, sent, result)
            });
            busy.insert(
                leader,
                Poll {
                    abort,
                    started: Instant::now(),
                    partitions,
                },
            );
        }
        true
    }

    /// Delivers what one poll (sent at `sent`) brought. False when nobody
    /// listens any more.
    async fn absorb(
        &mut self,
        positions: Vec<FetchPosition>,
        sent: Instant,
        result: Answers,
    ) -> bool {
        let answers = match result {
            Ok(answers) => answers,
            Err(error) => {
                for p in positions {
                    if !self.failed(p.partition, error.clone()).await {
                        return false;
                    }
                }
                return true;
            }
        };
        for (partition, answer) in answers {
            let Some(cursor) = self.cursors.get_mut(partition as usize) else {
                continue;
            };
            let update = match answer {
                Ok(chunk) => {
                    cursor.advance(&chunk);
                    self.backoff[partition as usize] = None;
                    let epoch = positions
                        .iter()
                        .find(|p| p.partition == partition)
                        .map_or(-1, |p| p.leader_epoch);
                    // An unconfirmed answer's high watermark says nothing
                    // (a deposed leader's log): it neither settles nor waits.
                    let complete_as_of = self
                        .client
                        .state()
                        .complete_as_of(&self.topic, partition, epoch, sent)
                        .and_then(|at| {
                            let read_to = cursor.next_offset();
                            let settled = &mut self.settled[partition as usize];
                            let complete = settled.answer(at, chunk.high_watermark, read_to);
                            let held = settled.held_back(boot_now());
                            tell_held_back(
                                &mut self.held_back[partition as usize],
                                held,
                                &self.topic,
                                partition,
                                &chunk,
                            );
                            complete
                        });
                    Ok(Tailed::Read {
                        partition,
                        records: chunk.records,
                        skipped: chunk.skipped,
                        next_offset: cursor.next_offset(),
                        last_stable_offset: chunk.last_stable_offset,
                        complete_as_of,
                    })
                }
                Err(e) if e.is(ResponseError::OffsetOutOfRange) => {
                    // Records were deleted under the reader: resume at the
                    // log start (as Java's consumer does with
                    // auto.offset.reset=earliest), and say that what was
                    // read before is no longer the partition's history: the
                    // records in between were never read.
                    match self
                        .client
                        .reader()
                        .list_offset(&self.topic, partition, EARLIEST)
                        .await
                    {
                        Ok(start) if cursor.skip_to_log_start(start) => {
                            tracing::warn!(topic = %self.topic, partition, start, "offset out of range: records were deleted before they were read; reading the partition again from its log start");
                            self.settled[partition as usize] = Settled::default();
                            Ok(Tailed::Restarted {
                                partition,
                                from: cursor.next_offset(),
                            })
                        }
                        Ok(_) => Err(e),
                        Err(error) => Err(error),
                    }
                }
                Err(error) => Err(error),
            };
            let sent = match update {
                Err(error) => self.failed(partition, error).await,
                Ok(read) => self.tx.send(read).await.is_ok(),
            };
            if !sent {
                return false;
            }
        }
        true
    }

    /// Reports a failed read of `partition` and holds it back for a backoff.
    async fn failed(&mut self, partition: i32, error: KafkaError) -> bool {
        let config = self.client.config();
        if let Some(slot) = self.backoff.get_mut(partition as usize) {
            slot.get_or_insert_with(|| {
                let backoff = Backoff::new(
                    config.retry_backoff,
                    config.retry_backoff_max,
                    Jitter::EQUAL,
                );
                Gate::new(backoff)
            })
            .shut(Instant::now());
        }
        tracing::debug!(topic = %self.topic, partition, %error, "read failed; retrying");
        let error = error.into();
        self.tx
            .send(Tailed::Failed { partition, error })
            .await
            .is_ok()
    }

    /// The earliest end of a failure's backoff still ahead.
    fn next_retry(&self) -> Option<Instant> {
        let now = Instant::now();
        self.backoff
            .iter()
            .flatten()
            .filter_map(Gate::opens_at)
            .filter(|at| *at > now)
            .min()
    }

    /// Abandons overdue polls whose partitions have moved to another
    /// leader, so they are read from the new one now.
    async fn abandon_moved(&mut self, busy: &mut BTreeMap<Broker, Poll>) {
        let overdue: Vec<Broker> = busy
            .iter()
            .filter(|(_, p)| p.started.elapsed() > self.long_poll + OVERDUE_MARGIN)
            .map(|(b, _)| b.clone())
            .collect();
        if overdue.is_empty() {
            return;
        }
        self.client.state().learn(Lesson::PollOverdue);
        for leader in overdue {
            let Some(poll) = busy.get(&leader) else {
                continue;
            };
            let positions: Vec<(i32, i64)> = poll
                .partitions
                .iter()
                .map(|&p| (p, self.cursors[p as usize].next_offset()))
                .collect();
            let (groups, _) = self
                .client
                .reader()
                .partition_leaders(&self.topic, &positions)
                .await;
            if groups.keys().any(|l| *l != leader) {
                tracing::info!(topic = %self.topic, broker = %leader.addr, "a leader did not answer its poll and its partitions moved; reading them from the new leader");
                if let Some(poll) = busy.remove(&leader) {
                    poll.abort.abort();
                }
            }
        }
    }
}

/// The round of leader confirmations in flight (one at a time), aborted
/// when the tailer stops.
#[derive(Default)]
struct Confirming(Option<tokio::task::JoinHandle<()>>);

impl Confirming {
    /// Starts a round unless one is still in flight.
    fn start(&mut self, client: &KafkaClient, topic: &str) {
        if self
            .0
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            let (client, topic) = (client.clone(), topic.to_owned());
            self.0 = Some(tokio::spawn(async move {
                client.metadata().confirm_leaders(&topic).await;
            }));
        }
    }
}

impl Drop for Confirming {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Logs a partition an open transaction has held back for
/// [`HELD_BACK_WARN`] (once, at warn) and the end of it (`told` remembers).
fn tell_held_back(
    told: &mut bool,
    held: Option<Duration>,
    topic: &str,
    partition: i32,
    chunk: &super::fetch::FetchChunk,
) {
    let long = held.filter(|held| *held >= HELD_BACK_WARN);
    match (long, *told) {
        (Some(held), false) => {
            *told = true;
            tracing::warn!(topic, partition, last_stable_offset = chunk.last_stable_offset, high_watermark = chunk.high_watermark, held_back = ?held, "an open transaction holds the partition's last stable offset back: what was written after it stays unread, and its reads complete only as of when it began");
        }
        (None, true) => {
            *told = false;
            tracing::info!(
                topic,
                partition,
                "the partition's last stable offset moves again"
            );
        }
        _ => {}
    }
}
