//! The watcher: one source of truth for every view, metric and event.
//!
//! An I/O shell around the pure [`tracker`]: it tails the coordination
//! topic (read_committed, long polls, each partition progressing on its
//! own: [`Cluster::tail`]), feeds every record to the partition's tracker,
//! and asks the coordinator for every known role's pair on an interval (the
//! pair moves even when no lease record is written: a challenger's
//! InitProducerId, a timeout fence, writers on transaction version 2). What
//! the tracker reports goes to the metrics, the event streams and the check
//! path's high-water marks.
//!
//! **A view's age** is honest: every read of a partition says as of which
//! instant the log held nothing more, as far as anyone can know
//! ([`Tailed::Read`]: the earlier of the fetch's send instant and the last
//! confirmation of its leader by another broker), and a view is that old. A
//! partition whose leader stops answering, or answers without any other
//! broker confirming it (a deposed leader cut off from the controller),
//! shows its views growing older, and once older than
//! [`WatchConfig::stale_after`] the partition is named by
//! [`Watcher::not_ready`] (`/readyz`). Views, the `x-krabka-view-age-ms`
//! header and `krabka_state_view_age_seconds` all come from
//! [`Watcher::view_ages`]'s rule.
//!
//! **A partition's history restarts** when records were deleted before the
//! reader reached them ([`Tailed::Restarted`]: the log start moved past
//! it). What was folded of it is dropped, as for another cluster: its views
//! wait until it is read again from the log start, and its event streams
//! reset ([`History`]).

mod role_metrics;
pub mod roster;
mod status;
mod tracker;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;

pub use role_metrics::RoleMetrics;
pub use status::{RoleStatus, StatusInputs, status};
pub use tracker::{
    ChangeKind, CoordinatorView, Effect, PartitionTracker, RoleEvent, RoleFacts, TrackerConfig,
};

use super::check::{Asked, Checker};
use super::metrics::Metrics;
use super::state::Unready;
use crate::backoff::{Backoff, Jitter};
use crate::cluster::{Cluster, ClusterError, Tailed};
use crate::coordination::{RoleState, SkippedBatch, role_partition};
use crate::sync::{lock, read, write};
use crate::time::{Clock, boot_now, millis};

/// Why the views cannot answer yet.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    /// The coordination topic has not been found yet (`why` is `None`
    /// while the first look is under way), or cannot be read.
    #[error("{}", match why {
        None => format!("looking for the topic {topic}"),
        Some(why) => format!("the topic {topic} is not readable: {why}"),
    })]
    Topic {
        /// The topic.
        topic: String,
        /// Why it is not read, once known.
        why: Option<String>,
    },
    /// A partition is still being read up to its last stable offset, or
    /// its last read failed (`why`).
    #[error("partition {partition} is still being read: {}", why.as_deref().unwrap_or("catching up"))]
    CatchingUp {
        /// The partition.
        partition: i32,
        /// Its last read's failure, if any.
        why: Option<String>,
    },
    /// Another cluster answers behind the bootstrap servers (one rebuilt
    /// there): what was read of the old one is dropped, and the new one is
    /// read from the start.
    #[error(
        "another cluster answers behind the bootstrap servers; reading its coordination topic from the start"
    )]
    ClusterChanged,
    /// No read of the partition is complete as of any instant yet: no other
    /// broker has confirmed its leader, or an open transaction has held its
    /// last stable offset back since the first read.
    #[error(
        "partition {partition}: no read of it is complete yet (no other broker has confirmed its leader, or an open transaction holds its last stable offset back)"
    )]
    Unconfirmed {
        /// The partition.
        partition: i32,
    },
}

impl NotReady {
    /// What anyone may be told: the same without the cause of a failed
    /// read, which names brokers and Kafka's or libraries' errors.
    pub fn said(&self) -> String {
        match self {
            NotReady::Topic { topic, why: None } => format!("looking for the topic {topic}"),
            NotReady::Topic { topic, .. } => format!("the topic {topic} is not readable yet"),
            NotReady::CatchingUp { partition, .. } => {
                format!("partition {partition} is still being read")
            }
            said @ (NotReady::Unconfirmed { .. } | NotReady::ClusterChanged) => said.to_string(),
        }
    }
}

/// How the watcher runs.
#[derive(Clone, Debug)]
pub struct WatchConfig {
    /// The coordination topic.
    pub topic: String,
    /// Longest wait of one long poll (and the interval of the leaders'
    /// confirmations): a view gets up to two of them old.
    pub long_poll: Duration,
    /// A partition whose view is older than this is not ready.
    pub stale_after: Duration,
    /// Interval of the coordinator poller.
    pub poll_interval: Duration,
    /// Most roles per describe of the poller.
    pub max_describe_batch: usize,
    /// The rules' settings.
    pub tracker: TrackerConfig,
    /// Most roles with per-role metric series.
    pub max_role_series: usize,
    /// Create the topic when it is missing, with this layout.
    pub create_topic: Option<TopicLayout>,
}

/// The layout of a coordination topic the service creates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopicLayout {
    /// Its partition count.
    pub partitions: i32,
    /// Its replication factor; -1 takes the brokers' default.
    pub replication_factor: i16,
}

/// Where the search for the topic stands, before its partitions are read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopicSearch {
    /// Not answered yet, or the last try failed for this reason.
    Looking(Option<String>),
    /// Kafka answered that the topic does not exist: a fresh cluster on
    /// which no candidate has registered yet.
    Absent,
    /// Found: its partitions are read.
    Found,
}

/// Skipped batches a partition's views show, the latest ones; the metric
/// counts them all.
const SKIPPED_SHOWN: usize = 16;

/// One role as the views show it.
#[derive(Clone, Debug)]
pub struct RoleView {
    /// The folded state.
    pub state: Arc<RoleState>,
    /// The role's partition.
    pub partition: i32,
    /// The view's read position: every record below it is included.
    pub offset: i64,
    /// How old the view is: since the instant the partition is known to
    /// have held nothing more.
    pub age: Duration,
    /// That instant (epoch ms, service clock).
    pub refreshed_at_ms: i64,
    /// The role's status (`None` outside the service, e.g. the CLI).
    pub status: Option<RoleStatus>,
    /// Failovers within the status window.
    pub failovers_in_window: usize,
    /// The coordinator's view at the last poll.
    pub coordinator: Option<CoordinatorView>,
    /// The partition's batches the reads stepped over, their records
    /// unread (they decompress past the bound): the latest, oldest first.
    pub skipped: Vec<SkippedBatch>,
}

/// Which history of a partition a change belongs to: the reading (a new
/// one begins when another cluster answers) and the partition's history
/// within it (a new one begins when records were deleted before the
/// reader reached them: [`Tailed::Restarted`]). A later history compares
/// greater; an event stream whose history is no longer its partition's
/// gets a `reset`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct History {
    /// [`Cluster::cluster_changes`] when the reading began.
    pub reading: u64,
    /// The partition's history: the watcher's count of histories begun
    /// when this one began.
    pub partition: u64,
}

#[derive(Debug)]
struct Part {
    /// The partition's history within the reading ([`History::partition`]).
    history: u64,
    tracker: PartitionTracker,
    error: Option<String>,
    /// When a read last arrived ([`Clock::monotonic_ms`]).
    read_at: Option<i64>,
    /// The instant the partition is known complete as of
    /// ([`Clock::monotonic_ms`]: ages never rest on the wall clock, which
    /// may be stepped back, and count the time the host was suspended).
    complete_as_of: Option<i64>,
    /// The latest batches stepped over, at most [`SKIPPED_SHOWN`].
    skipped: VecDeque<SkippedBatch>,
}

impl Part {
    /// A partition of which nothing was read yet, in history `history`.
    fn new(config: TrackerConfig, history: u64) -> Part {
        Part {
            history,
            tracker: PartitionTracker::new(config),
            error: None,
            read_at: None,
            complete_as_of: None,
            skipped: VecDeque::new(),
        }
    }

    /// The view's age at `monotonic` ([`Clock::monotonic_ms`]), once a read
    /// was confirmed.
    fn age(&self, monotonic: i64) -> Option<Duration> {
        let as_of = self.complete_as_of?;
        Some(Duration::from_millis(
            u64::try_from(monotonic - as_of).unwrap_or(0),
        ))
    }
}

type Parts = Arc<Vec<Mutex<Part>>>;

/// What is read: the topic's partitions, of the cluster that answered when
/// the reading began.
#[derive(Clone, Debug)]
struct Reading {
    parts: Parts,
    /// [`Cluster::cluster_changes`] when it began: once that moves, nothing
    /// of this reading is shown.
    changes: u64,
    /// The cluster's id, when known.
    cluster: Option<Arc<str>>,
}

/// How often the run loop looks whether another cluster answers (views
/// are refused at once, at every request; this only starts the new read).
const CLUSTER_LOOK: Duration = Duration::from_millis(50);

/// The watcher's shared state.
#[derive(Debug)]
pub struct Watcher {
    cluster: Arc<dyn Cluster>,
    checker: Arc<Checker>,
    config: WatchConfig,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    role_metrics: RoleMetrics,
    reading: RwLock<Option<Reading>>,
    /// Every change, stamped with its partition's history.
    events: broadcast::Sender<(History, RoleEvent)>,
    /// Histories begun (readings, and partitions read again from a moved
    /// log start): streams look whether theirs is still current when it
    /// moves.
    readings: tokio::sync::watch::Sender<u64>,
    roles: AtomicI64,
    search: Mutex<TopicSearch>,
}

impl Watcher {
    /// A watcher of `config.topic`; it reads nothing until [`Watcher::run`].
    pub fn new(
        cluster: Arc<dyn Cluster>,
        checker: Arc<Checker>,
        config: WatchConfig,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
    ) -> Result<Watcher, prometheus::Error> {
        let role_metrics = RoleMetrics::new(metrics.registry(), config.max_role_series)?;
        let (events, _) = broadcast::channel(4096);
        Ok(Watcher {
            cluster,
            checker,
            config,
            clock,
            metrics,
            role_metrics,
            reading: RwLock::default(),
            events,
            readings: tokio::sync::watch::Sender::new(0),
            roles: AtomicI64::new(0),
            search: Mutex::new(TopicSearch::Looking(None)),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &WatchConfig {
        &self.config
    }

    /// The reading under way; an error once another cluster answers (its
    /// views must not be shown).
    fn reading(&self) -> Result<Option<Reading>, NotReady> {
        match read(&self.reading).clone() {
            Some(r) if r.changes != self.cluster.cluster_changes() => Err(NotReady::ClusterChanged),
            reading => Ok(reading),
        }
    }

    fn parts(&self) -> Option<Parts> {
        self.reading().ok().flatten().map(|r| r.parts)
    }

    /// The partition count, once the topic was found.
    pub fn partitions(&self) -> Option<i32> {
        self.parts().map(|p| p.len() as i32)
    }

    /// The id of the cluster whose topic the views come from, when known.
    pub fn cluster(&self) -> Option<Arc<str>> {
        self.reading().ok().flatten().and_then(|r| r.cluster)
    }

    /// Finds the topic (retrying until it exists), then tails every
    /// partition and polls the coordinator until the task is dropped. When
    /// the cluster behind the bootstrap address changes its id, everything
    /// read is dropped and the new cluster is read from the start.
    pub async fn run(self: Arc<Self>) {
        loop {
            let changes = self.cluster.cluster_changes();
            let count = self.layout().await;
            if self.cluster.cluster_changes() != changes {
                continue;
            }
            let cluster = self.cluster.cluster_id();
            // Never below a history a partition of an earlier reading had.
            let history = *self.readings.borrow();
            let parts: Parts = Arc::new(
                (0..count)
                    .map(|_| Mutex::new(Part::new(self.config.tracker, history)))
                    .collect(),
            );
            self.reset(Some(Reading {
                parts: parts.clone(),
                changes,
                cluster,
            }));
            self.readings.send_modify(|n| *n += 1);
            tokio::select! {
                () = self.clone().tail(parts.clone(), changes) => {}
                () = self.clone().poll_coordinator(parts, changes) => {}
                () = self.cluster_changed(changes) => {
                    tracing::warn!(topic = %self.config.topic, "the cluster changed; reading the coordination topic again from the start");
                }
            }
        }
    }

    /// Drops every role of the old parts (their series, the role count).
    fn reset(&self, reading: Option<Reading>) {
        let old = std::mem::replace(&mut *write(&self.reading), reading).map(|r| r.parts);
        for (p, part) in old.iter().flat_map(|p| p.iter().enumerate()) {
            for role in lock(part).tracker.roles() {
                self.role_metrics.remove(role);
            }
            let _ = self
                .role_metrics
                .view_age
                .remove_label_values(&[&p.to_string()]);
        }
        self.roles.store(0, Ordering::Relaxed);
        self.role_metrics.roles.set(0);
    }

    /// The cluster the reading begun at `changes` reads, while it is the
    /// reading under way: what its coordinator polls answered for.
    fn reading_cluster(&self, changes: u64) -> Option<Arc<str>> {
        read(&self.reading)
            .as_ref()
            .filter(|r| r.changes == changes)
            .and_then(|r| r.cluster.clone())
    }

    /// Returns once another cluster answered than when `changes` was read
    /// (a rebuilt one behind the same addresses).
    async fn cluster_changed(&self, changes: u64) {
        while self.cluster.cluster_changes() == changes {
            tokio::time::sleep(CLUSTER_LOOK).await;
        }
    }

    /// Where the search for the topic stands.
    pub fn topic_search(&self) -> TopicSearch {
        lock(&self.search).clone()
    }

    fn set_search(&self, search: TopicSearch) {
        self.metrics
            .topic_exists
            .set(i64::from(search != TopicSearch::Absent));
        *lock(&self.search) = search;
    }

    /// The partition count, once the topic is readable and compacted. A
    /// missing topic is created when the service is allowed to; otherwise
    /// it is looked for again until a candidate creates it (views show no
    /// role meanwhile, and checks work: they never read the topic).
    async fn layout(&self) -> i32 {
        let mut backoff = Backoff::new(
            Duration::from_millis(200),
            Duration::from_secs(5),
            Jitter::EQUAL,
        );
        let mut told_absent = false;
        let mut told: Option<String> = None;
        loop {
            let topic = &self.config.topic;
            let checked = async {
                let count = match self.cluster.partitions(topic).await {
                    Err(ClusterError::NoTopic(why)) => {
                        let Some(layout) = self.config.create_topic else {
                            return Err(ClusterError::NoTopic(why));
                        };
                        let count = self
                            .cluster
                            .create_topic(topic, layout.partitions, layout.replication_factor)
                            .await?;
                        tracing::info!(topic = %topic, partitions = count, replication_factor = layout.replication_factor, "created the coordination topic (--create-topic)");
                        count
                    }
                    other => other?,
                };
                self.cluster.check_compacted(topic).await?;
                Ok::<_, ClusterError>(count)
            };
            match checked.await {
                Ok(count) => {
                    tracing::info!(topic = %topic, partitions = count, "watching the coordination topic");
                    self.set_search(TopicSearch::Found);
                    return count;
                }
                Err(ClusterError::NoTopic(_)) => {
                    // Said once at warn: on a fresh cluster this is normal
                    // until the first candidate registers.
                    if !told_absent {
                        tracing::warn!(topic = %topic, "the coordination topic does not exist yet: no role is registered; the first candidate creates it (or start the service with --create-topic); checks work meanwhile");
                        told_absent = true;
                    }
                    self.set_search(TopicSearch::Absent);
                }
                Err(e) => {
                    let error = e.to_string();
                    if repeats(&mut told, &error) {
                        tracing::debug!(topic = %topic, %error, "the coordination topic is still not readable; retrying");
                    } else {
                        tracing::warn!(topic = %topic, %error, "the coordination topic is not readable yet; retrying");
                    }
                    self.set_search(TopicSearch::Looking(Some(error)));
                }
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }

    /// Applies what the tailer reads, until it stops.
    async fn tail(self: Arc<Self>, parts: Parts, changes: u64) {
        let from = vec![0; parts.len()];
        let mut updates = self
            .cluster
            .tail(&self.config.topic, from, self.config.long_poll);
        let mut effects = Vec::new();
        while let Some(update) = updates.recv().await {
            let now = self.clock.now_ms();
            let monotonic = self.clock.monotonic_ms();
            match update {
                Tailed::Read {
                    partition,
                    records,
                    skipped,
                    next_offset,
                    last_stable_offset,
                    complete_as_of,
                } => {
                    let Some(slot) = usize::try_from(partition).ok().and_then(|p| parts.get(p))
                    else {
                        continue;
                    };
                    let (lag, caught_up_now, history) = {
                        let mut part = lock(slot);
                        for record in &records {
                            part.tracker.apply(record, now, &mut effects);
                        }
                        // Said at warn by the reader; counted and shown here.
                        for batch in skipped {
                            self.metrics.skipped_batches.inc();
                            if part.skipped.len() == SKIPPED_SHOWN {
                                part.skipped.pop_front();
                            }
                            part.skipped.push_back(batch);
                        }
                        let before = part.tracker.caught_up();
                        let lag = part.tracker.advance(next_offset, last_stable_offset);
                        if part.error.take().is_some() {
                            tracing::info!(
                                partition,
                                "a partition of the coordination topic is readable again"
                            );
                        }
                        part.read_at = Some(monotonic);
                        if let Some(at) = complete_as_of {
                            // On the service clock: as long before now as
                            // the instant is before now, suspends counted.
                            let behind = boot_now().saturating_duration_since(at);
                            let as_of = monotonic - millis(behind);
                            part.complete_as_of =
                                Some(part.complete_as_of.map_or(as_of, |old| old.max(as_of)));
                        }
                        (lag, !before && part.tracker.caught_up(), part.history)
                    };
                    if caught_up_now {
                        tracing::info!(partition, offset = next_offset, "caught up");
                    }
                    self.role_metrics
                        .lag
                        .with_label_values(&[&partition.to_string()])
                        .set(lag);
                    let history = History {
                        reading: changes,
                        partition: history,
                    };
                    self.apply(partition, &mut effects, history);
                }
                Tailed::Restarted { partition, from } => {
                    let Some(slot) = usize::try_from(partition).ok().and_then(|p| parts.get(p))
                    else {
                        continue;
                    };
                    self.restart(partition, slot, from);
                }
                Tailed::Failed { partition, error } => {
                    let Some(slot) = usize::try_from(partition).ok().and_then(|p| parts.get(p))
                    else {
                        continue;
                    };
                    let error = error.to_string();
                    if repeats(&mut lock(slot).error, &error) {
                        tracing::debug!(partition, %error, "still cannot read a partition of the coordination topic; retrying");
                    } else {
                        tracing::warn!(partition, %error, "cannot read a partition of the coordination topic; retrying");
                    }
                }
            }
        }
    }

    /// A new history of `partition` (in `slot`) from `from`: what was read
    /// of it is dropped (its records in between were deleted unread, and
    /// what it told of the deleted ones is not the log's any more), its
    /// views wait until it is read again up to its last stable offset, and
    /// the event streams of its roles reset (as when another cluster
    /// answers: `readings`).
    fn restart(&self, partition: i32, slot: &Mutex<Part>, from: i64) {
        let history = self.readings.borrow().saturating_add(1);
        let (old, was_caught_up) = {
            let mut part = lock(slot);
            let old = std::mem::replace(&mut *part, Part::new(self.config.tracker, history));
            let was = old.tracker.caught_up();
            (old, was)
        };
        let mut removed = 0;
        for role in old.tracker.roles() {
            self.role_metrics.remove(role);
            removed += 1;
        }
        let n = self.roles.fetch_sub(removed, Ordering::Relaxed) - removed;
        self.role_metrics.roles.set(n);
        let _ = self
            .role_metrics
            .view_age
            .remove_label_values(&[&partition.to_string()]);
        self.readings.send_modify(|n| *n = history);
        if was_caught_up {
            tracing::warn!(topic = %self.config.topic, partition, from, read_to = old.tracker.next_offset(), "records of the partition were deleted before they were read: its views are rebuilt from its log start, and its event streams reset");
        } else {
            tracing::info!(topic = %self.config.topic, partition, from, "the partition's log starts past where its reading stood: read from its log start");
        }
    }

    /// Carries out what a tracker reported, its events of `history`.
    fn apply(&self, partition: i32, effects: &mut Vec<Effect>, history: History) {
        let now = self.clock.now_ms();
        for effect in effects.drain(..) {
            match effect {
                Effect::RoleAdded(role) => {
                    let n = self.roles.fetch_add(1, Ordering::Relaxed) + 1;
                    self.role_metrics.roles.set(n);
                    self.role_metrics.added(&role);
                }
                Effect::RoleRemoved(role) => {
                    let n = self.roles.fetch_sub(1, Ordering::Relaxed) - 1;
                    self.role_metrics.roles.set(n);
                    self.role_metrics.remove(&role);
                }
                Effect::Failover(role) => self.role_metrics.failover(&role),
                Effect::EpochChange(role) => self.role_metrics.epoch_change(&role),
                Effect::Leaderless(seconds) => {
                    self.role_metrics.leaderless_seconds.observe(seconds);
                }
                // The checker took the pair in where it was described
                // (`poll_once`), with when it was asked.
                Effect::Pair(role, current) => self.role_metrics.pair(&role, current),
                Effect::Facts {
                    role,
                    holder,
                    candidates,
                    deadline,
                } => {
                    self.role_metrics.holder(&role, holder.as_deref());
                    self.role_metrics.candidates(&role, candidates);
                    self.role_metrics.lease(&role, deadline, now);
                }
                Effect::Malformed {
                    offset,
                    error,
                    live,
                } => {
                    // Counted from the catch-up on, as failovers are: every
                    // restart reads the old ones again.
                    if live {
                        self.metrics
                            .malformed_records
                            .with_label_values(&[error.part().as_str()])
                            .inc();
                    }
                    tracing::warn!(topic = %self.config.topic, partition, offset, %error, "skipped a malformed record");
                }
                Effect::Event(event) => {
                    let _ = self.events.send((history, event));
                }
            }
        }
    }

    /// Describes every known role on an interval.
    async fn poll_coordinator(self: Arc<Self>, parts: Parts, changes: u64) {
        loop {
            tokio::time::sleep(self.config.poll_interval).await;
            self.poll_once(&parts, changes).await;
        }
    }

    /// One poll of the coordinator for every known role, a batch at a time
    /// so checks queued meanwhile wait at most one batch.
    async fn poll_once(&self, parts: &Parts, changes: u64) {
        let roles: Vec<String> = parts
            .iter()
            .flat_map(|p| {
                lock(p)
                    .tracker
                    .roles()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect();
        let floor = |role: &str, id: i64| self.checker.floor(role, id);
        let mut effects = Vec::new();
        for chunk in roles.chunks(self.config.max_describe_batch.max(1)) {
            let deadline = Instant::now() + self.config.poll_interval.max(Duration::from_secs(1));
            let began = boot_now();
            let mut described: Vec<_> = self
                .cluster
                .describe(chunk, &floor, deadline)
                .await
                .into_iter()
                .collect();
            let asked = Asked {
                began,
                ended: boot_now(),
            };
            // Taken in by name (not in the map's order): the events and
            // marks of a poll come in one order.
            described.sort_by(|(a, _), (b, _)| a.cmp(b));
            let now = self.clock.now_ms();
            for (role, answer) in described {
                let Ok(partition) = role_partition(&role, parts.len() as i32) else {
                    continue;
                };
                let Some(slot) = parts.get(partition as usize) else {
                    continue;
                };
                match answer {
                    Ok(described) => {
                        if let Some(pair) = described.current
                            && let Some(cluster) = self.reading_cluster(changes)
                        {
                            self.checker.observe(&cluster, &role, pair, asked);
                        }
                        let history = {
                            let mut part = lock(slot);
                            part.tracker
                                .observe_coordinator(&role, &described, now, &mut effects);
                            part.history
                        };
                        let history = History {
                            reading: changes,
                            partition: history,
                        };
                        self.apply(partition, &mut effects, history);
                    }
                    Err(e) => {
                        tracing::debug!(role, error = %e, "coordinator poll failed for the role");
                    }
                }
            }
        }
        self.refresh_statuses();
    }

    /// Recomputes lease expiry and status of every role.
    pub fn refresh_statuses(&self) {
        let Some(parts) = self.parts() else { return };
        let now = self.clock.now_ms();
        for part in parts.iter() {
            for (role, status, deadline) in lock(part).tracker.statuses(now) {
                self.role_metrics.status(&role, status);
                self.role_metrics.lease(&role, deadline, now);
            }
        }
    }

    fn view(&self, part: &Part, facts: RoleFacts, partition: i32, now_ms: i64) -> RoleView {
        let age = part.age(self.clock.monotonic_ms()).unwrap_or_default();
        RoleView {
            state: facts.state,
            partition,
            offset: part.tracker.next_offset(),
            age,
            // Shown on the wall clock: as long before now as the view is old.
            refreshed_at_ms: now_ms - millis(age),
            status: Some(facts.status),
            failovers_in_window: facts.failovers_in_window,
            coordinator: facts.coordinator,
            skipped: part.skipped.iter().cloned().collect(),
        }
    }

    /// One role's view; `None` when the topic holds no record of it. An
    /// error when the topic is not readable yet.
    pub fn role(&self, role: &str) -> Result<Option<RoleView>, NotReady> {
        self.role_as_of(role).map(|(view, _)| view)
    }

    /// One role's view, or `None`, with the offset its partition is read
    /// to (exclusive; `None` without a partition), taken together: what a
    /// "no record of it" holds as of, so that an event stream starting from
    /// it neither misses nor repeats a change.
    pub fn role_as_of(&self, role: &str) -> Result<(Option<RoleView>, Option<i64>), NotReady> {
        let Some(Reading { parts, .. }) = self.reading()? else {
            return self.without_topic().map(|()| (None, None));
        };
        // The partition count was read from the topic: at least one.
        let Ok(partition) = role_partition(role, parts.len() as i32) else {
            return Ok((None, None));
        };
        let Some(slot) = parts.get(partition as usize) else {
            return Ok((None, None));
        };
        let part = lock(slot);
        if let Some(why) = unviewable(&part, partition) {
            return Err(why);
        }
        let now = self.clock.now_ms();
        let view = part
            .tracker
            .facts(role, now)
            .map(|facts| self.view(&part, facts, partition, now));
        Ok((view, Some(part.tracker.next_offset())))
    }

    /// The read position and age of the view of `role`'s partition (what a
    /// "no record of it" rests on), once a read of it was confirmed.
    pub fn partition_view(&self, role: &str) -> Option<(i64, Duration)> {
        let parts = self.parts()?;
        let partition = role_partition(role, parts.len() as i32).ok()?;
        let part = lock(parts.get(partition as usize)?);
        let age = part.age(self.clock.monotonic_ms())?;
        Some((part.tracker.next_offset(), age))
    }

    /// Every role's view, by name.
    pub fn all(&self) -> Result<Vec<RoleView>, NotReady> {
        let Some(Reading { parts, .. }) = self.reading()? else {
            return self.without_topic().map(|()| Vec::new());
        };
        let now = self.clock.now_ms();
        let mut views = Vec::new();
        for (p, slot) in parts.iter().enumerate() {
            let part = lock(slot);
            if let Some(why) = unviewable(&part, p as i32) {
                return Err(why);
            }
            views.extend(
                part.tracker
                    .all_facts(now)
                    .into_iter()
                    .map(|facts| self.view(&part, facts, p as i32, now)),
            );
        }
        views.sort_by(|a, b| a.state.role().cmp(b.state.role()));
        Ok(views)
    }

    /// `None` when every partition has caught up, its last read succeeded
    /// and its view is no older than [`WatchConfig::stale_after`];
    /// otherwise why not, naming every partition that is not (the first
    /// few of them).
    pub fn not_ready(&self) -> Option<Unready> {
        const NAMED: usize = 4;
        let parts = match self.reading() {
            Ok(Some(reading)) => reading.parts,
            Ok(None) => {
                return self
                    .without_topic()
                    .err()
                    .map(|e| Unready::new(e.said(), e.to_string()));
            }
            Err(switched) => return Some(Unready::new(switched.said(), switched.to_string())),
        };
        let now = self.clock.monotonic_ms();
        let mut reasons = Vec::new();
        for (p, slot) in parts.iter().enumerate() {
            let part = lock(slot);
            let why = if let Some(e) = &part.error {
                Some(Unready::new(
                    format!("partition {p}: its last read failed"),
                    format!("partition {p}: {e}"),
                ))
            } else if let Some(why) = unviewable(&part, p as i32) {
                Some(Unready::new(why.said(), why.to_string()))
            } else {
                let age = part.age(now).unwrap_or_default();
                (age > self.config.stale_after).then(|| {
                    let read_lately = part
                        .read_at
                        .is_some_and(|at| now - at <= millis(self.config.stale_after));
                    let why = if read_lately {
                        "its leader answers, but no other broker has confirmed it leads since (a deposed leader cut off from the controller?)"
                    } else {
                        "nothing was read from its leader since"
                    };
                    Unready::plain(format!(
                        "partition {p}: the view is {} ms old: {why}",
                        age.as_millis()
                    ))
                })
            };
            reasons.extend(why);
        }
        if reasons.len() > NAMED {
            let more = reasons.len() - NAMED;
            reasons.truncate(NAMED);
            reasons.push(Unready::plain(format!("and {more} more partitions")));
        }
        (!reasons.is_empty()).then(|| {
            let (said, why): (Vec<String>, Vec<String>) =
                reasons.into_iter().map(|r| (r.said, r.why)).unzip();
            Unready::new(said.join("; "), why.join("; "))
        })
    }

    /// Each partition's view age at the service clock's now (`None` before
    /// its first confirmed read); sets `krabka_state_view_age_seconds`.
    pub fn view_ages(&self) -> Vec<(i32, Option<Duration>)> {
        let parts = match self.reading() {
            Ok(Some(reading)) => reading.parts,
            Ok(None) => return Vec::new(),
            // The old cluster's views have no age any more.
            Err(_) => {
                let old = read(&self.reading).as_ref().map_or(0, |r| r.parts.len());
                for p in 0..old {
                    let _ = self
                        .role_metrics
                        .view_age
                        .remove_label_values(&[&p.to_string()]);
                }
                return Vec::new();
            }
        };
        let now = self.clock.monotonic_ms();
        let ages: Vec<(i32, Option<Duration>)> = parts
            .iter()
            .enumerate()
            .map(|(p, slot)| (p as i32, lock(slot).age(now)))
            .collect();
        for (p, age) in &ages {
            let label = p.to_string();
            match age {
                Some(age) => self
                    .role_metrics
                    .view_age
                    .with_label_values(&[&label])
                    .set(age.as_secs_f64()),
                None => {
                    let _ = self.role_metrics.view_age.remove_label_values(&[&label]);
                }
            }
        }
        ages
    }

    /// Before the topic's partitions are read: fine (no role yet) when
    /// Kafka said the topic does not exist; otherwise why it is not read.
    fn without_topic(&self) -> Result<(), NotReady> {
        match self.topic_search() {
            TopicSearch::Absent | TopicSearch::Found => Ok(()),
            TopicSearch::Looking(why) => Err(NotReady::Topic {
                topic: self.config.topic.clone(),
                why,
            }),
        }
    }

    /// Moves whenever a history begins (a reading, or a partition's after
    /// its log start moved past its reader): then [`Watcher::history_of`]
    /// tells whether a role's is still the one a stream follows.
    pub fn readings(&self) -> tokio::sync::watch::Receiver<u64> {
        self.readings.subscribe()
    }

    /// The history of `role`'s partition now, as `subscribe`'s events are
    /// stamped (of the reading installed, even once another cluster
    /// answers: its history moves when the new reading begins).
    pub fn history_of(&self, role: &str) -> History {
        let Some(reading) = read(&self.reading).clone() else {
            return History::default();
        };
        let partition = role_partition(role, reading.parts.len() as i32)
            .ok()
            .and_then(|p| reading.parts.get(p as usize))
            .map_or(0, |slot| lock(slot).history);
        History {
            reading: reading.changes,
            partition,
        }
    }

    /// Live changes of every role, each stamped with its partition's
    /// history.
    pub fn subscribe(&self) -> broadcast::Receiver<(History, RoleEvent)> {
        self.events.subscribe()
    }

    /// The kept changes of `role` after `offset`, oldest first, and whether
    /// they are all of them.
    pub fn history(&self, role: &str, after: i64) -> (Vec<RoleEvent>, bool) {
        let Some(parts) = self.parts() else {
            return (Vec::new(), false);
        };
        let Ok(partition) = role_partition(role, parts.len() as i32) else {
            return (Vec::new(), false);
        };
        match parts.get(partition as usize) {
            Some(slot) => lock(slot).tracker.history(role, after),
            None => (Vec::new(), false),
        }
    }
}

/// Why no view of a partition can be shown yet: it is still being read, or
/// no read of it was confirmed yet.
fn unviewable(part: &Part, partition: i32) -> Option<NotReady> {
    if !part.tracker.caught_up() {
        return Some(NotReady::CatchingUp {
            partition,
            why: part.error.clone(),
        });
    }
    part.complete_as_of
        .is_none()
        .then_some(NotReady::Unconfirmed { partition })
}

/// Whether `error` repeats the error said last (`said`), which it becomes.
/// An error is logged at warn when it starts or changes and its repeats at
/// debug: a retry per partition per poll would flood the log.
fn repeats(said: &mut Option<String>, error: &str) -> bool {
    if said.as_deref() == Some(error) {
        return true;
    }
    *said = Some(error.to_owned());
    false
}
