//! The watcher: one source of truth for every view, metric and event.
//!
//! A task per partition tails the coordination topic with read_committed
//! long-poll fetches and folds every role; a coordinator poller describes
//! all known roles on an interval to follow the coordinator's current pair,
//! which moves even when no lease record is written (a challenger's
//! InitProducerId, a timeout fence, writers on transaction version 2).
//!
//! Failovers and epoch changes are counted from the moment a partition has
//! first caught up with its last stable offset: the records before that are
//! history the service did not see happen.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{OnceCell, broadcast};
use tokio::time::Instant;

use super::metrics::Metrics;
use super::role_metrics::RoleMetrics;
use super::status::{RoleStatus, StatusInputs, status};
use crate::coordination::{
    Applied, Change, FencingToken, PartitionState, RoleState, role_partition,
};
use crate::kafka::{EARLIEST, KafkaClient, KafkaError};
use crate::leadership::{Clock, rfc3339_ms};

/// How the watcher runs.
#[derive(Clone, Debug)]
pub struct WatcherConfig {
    /// The coordination topic.
    pub topic: String,
    /// Longest wait of one long-poll fetch: how stale a view may get.
    pub long_poll: Duration,
    /// Interval of the coordinator poller.
    pub poll_interval: Duration,
    /// The members' challenge stagger (ms), for challenge instants and `stuck`.
    pub stagger_ms: i64,
    /// The window over which failovers are counted for `flapping`.
    pub status_window: Duration,
    /// More failovers than this within the window is `flapping`.
    pub flapping_threshold: usize,
    /// Changes kept per role for resuming event streams.
    pub history: usize,
    /// Most roles per DescribeTransactions of the poller.
    pub max_describe_batch: usize,
}

/// What the coordinator said of a role at its last poll.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CoordinatorView {
    /// The current pair; `None` when no member holds the role.
    pub current: Option<FencingToken>,
    /// The transaction state.
    pub state: Option<String>,
    /// When it was asked.
    pub checked_at: String,
}

/// The kind of one change of a role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// A member registered (or came back, at the tail).
    Registered,
    /// A member's registration was removed.
    Deregistered,
    /// A member took the lease (first lease, or a takeover).
    Acquired,
    /// The holder renewed its lease.
    Renewed,
    /// The lease was cleared (a resign).
    Cleared,
}

/// One change of one role, as the event stream sends it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleEvent {
    /// The role.
    pub role: String,
    /// The offset of the record that made the change: the event id.
    pub offset: i64,
    /// What changed.
    pub kind: ChangeKind,
    /// The member the record names.
    pub member: Option<String>,
    /// The lease holder after the change.
    pub holder: Option<String>,
    /// The holder's token after the change.
    pub token: Option<FencingToken>,
    /// The lease deadline after the change.
    pub deadline: Option<String>,
    /// When the watcher applied it.
    pub at: String,
}

#[derive(Debug, Default)]
struct Track {
    last_lease_member: Option<String>,
    last_token: Option<FencingToken>,
    failovers: VecDeque<i64>,
    coordinator: Option<(CoordinatorView, bool)>,
    lapsed_since: Option<i64>,
    history: VecDeque<RoleEvent>,
    /// Every change at or above this offset is in `history` (raised when an
    /// old change is dropped).
    history_from: i64,
}

#[derive(Debug, Default)]
struct Part {
    state: PartitionState,
    tracks: HashMap<String, Track>,
    caught_up: bool,
    last_stable_offset: i64,
    fetched_at: Option<Instant>,
    fetched_at_ms: i64,
    error: Option<String>,
    /// The read position when the partition first caught up: changes from
    /// here on are live and kept in history.
    live_from: i64,
}

/// One role as the views show it.
#[derive(Clone, Debug)]
pub struct RoleView {
    /// The folded state, shared with the watcher.
    pub state: Arc<RoleState>,
    /// The role's partition.
    pub partition: i32,
    /// The view's read position: every record below it is included.
    pub offset: i64,
    /// How old the view is.
    pub age: Duration,
    /// When the partition was last read (epoch ms, service clock).
    pub refreshed_at_ms: i64,
    /// The role's status (`None` outside the service, e.g. the CLI).
    pub status: Option<RoleStatus>,
    /// Failovers within the status window.
    pub failovers_in_window: usize,
    /// The coordinator's view at the last poll.
    pub coordinator: Option<CoordinatorView>,
}

/// Shared state of the watcher.
#[derive(Debug)]
pub struct Watcher {
    /// Metadata, offsets and the coordinator poller.
    client: KafkaClient,
    /// Long-poll fetches only, on their own connections: a broker answers a
    /// connection's requests in order, so anything sharing it would wait
    /// behind each long poll.
    fetcher: KafkaClient,
    config: WatcherConfig,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    role_metrics: RoleMetrics,
    parts: OnceCell<Vec<Mutex<Part>>>,
    events: broadcast::Sender<RoleEvent>,
    roles: std::sync::atomic::AtomicI64,
}

fn lock(part: &Mutex<Part>) -> std::sync::MutexGuard<'_, Part> {
    part.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Watcher {
    /// A watcher of `config.topic`; it reads nothing until [`Watcher::run`].
    /// `fetcher` must not share connections with `client` (a separate
    /// [`KafkaClient`]).
    pub fn new(
        client: KafkaClient,
        fetcher: KafkaClient,
        config: WatcherConfig,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        max_role_series: usize,
    ) -> Result<Watcher, prometheus::Error> {
        let role_metrics = RoleMetrics::new(metrics.registry(), max_role_series)?;
        let (events, _) = broadcast::channel(4096);
        Ok(Watcher {
            client,
            fetcher,
            config,
            clock,
            metrics,
            role_metrics,
            parts: OnceCell::new(),
            events,
            roles: std::sync::atomic::AtomicI64::new(0),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &WatcherConfig {
        &self.config
    }

    /// The partition count, once the topic was found.
    pub fn partitions(&self) -> Option<i32> {
        self.parts.get().map(|p| p.len() as i32)
    }

    /// Finds the topic (retrying until it exists), then tails every
    /// partition and polls the coordinator until the task is dropped.
    pub async fn run(self: Arc<Self>) {
        let mut delay = Duration::from_millis(200);
        let parts = loop {
            match self.layout().await {
                Ok(parts) => break parts,
                Err(e) => {
                    tracing::warn!(topic = %self.config.topic, error = %e, "the coordination topic is not readable yet; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        };
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(self.clone().tail(parts));
        tasks.spawn(self.clone().poll_coordinator());
        while tasks.join_next().await.is_some() {}
    }

    async fn layout(&self) -> Result<i32, KafkaError> {
        let parts = self
            .parts
            .get_or_try_init(|| async {
                let count = self.client.partition_count(&self.config.topic).await?;
                self.client.check_compacted(&self.config.topic).await?;
                tracing::info!(topic = %self.config.topic, partitions = count, "watching the coordination topic");
                Ok::<_, KafkaError>((0..count).map(|_| Mutex::new(Part::default())).collect())
            })
            .await?;
        Ok(parts.len() as i32)
    }

    fn part(&self, partition: i32) -> Option<&Mutex<Part>> {
        self.parts.get()?.get(usize::try_from(partition).ok()?)
    }

    /// Tails every partition forever, with one long-poll fetch per leader
    /// at a time: a broker answers one request per connection at a time, so
    /// a fetch per partition would queue behind the others' waits.
    async fn tail(self: Arc<Self>, partitions: i32) {
        let topic = self.config.topic.clone();
        let timeout = self.client.config().request_timeout;
        let mut backoff = Duration::from_millis(100);
        let mut empty_below_lso = vec![0u32; partitions as usize];
        loop {
            let offsets: Vec<(i32, i64)> = (0..partitions)
                .filter_map(|p| Some((p, lock(self.part(p)?).state.next_offset())))
                .collect();
            let fetched = self
                .fetcher
                .fetch_many(
                    &topic,
                    &offsets,
                    self.config.long_poll,
                    4 * 1024 * 1024,
                    timeout,
                )
                .await;
            let answers = match fetched {
                Ok(answers) => {
                    backoff = Duration::from_millis(100);
                    answers
                }
                Err(e) => {
                    tracing::warn!(error = %e, "watcher fetch failed; retrying");
                    for (p, _) in &offsets {
                        if let Some(slot) = self.part(*p) {
                            lock(slot).error = Some(e.to_string());
                        }
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            };
            let mut failed = false;
            for (partition, answer) in answers {
                let Some(slot) = self.part(partition) else {
                    continue;
                };
                let next = offsets
                    .iter()
                    .find(|(p, _)| *p == partition)
                    .map_or(0, |(_, o)| *o);
                match answer {
                    Ok(chunk) => {
                        let empties = &mut empty_below_lso[partition as usize];
                        self.absorb(slot, partition, next, &chunk, empties);
                    }
                    Err(e) if e.code() == Some(1) => {
                        // OFFSET_OUT_OF_RANGE: records were deleted under us.
                        match self.client.list_offset(&topic, partition, EARLIEST).await {
                            Ok(start) => {
                                tracing::warn!(
                                    partition,
                                    next,
                                    start,
                                    "offset out of range; resuming at the log start"
                                );
                                lock(slot).state.advance_to(start);
                            }
                            Err(e) => lock(slot).error = Some(e.to_string()),
                        }
                    }
                    Err(e) => {
                        tracing::warn!(partition, error = %e, "watcher fetch failed for a partition; retrying");
                        lock(slot).error = Some(e.to_string());
                        failed = true;
                    }
                }
            }
            if failed {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }

    /// Applies one fetched chunk of a partition.
    fn absorb(
        &self,
        slot: &Mutex<Part>,
        partition: i32,
        next: i64,
        chunk: &crate::kafka::FetchChunk,
        empties: &mut u32,
    ) {
        let mut part = lock(slot);
        let counting = part.caught_up;
        for record in &chunk.records {
            self.apply(&mut part, partition, record, counting);
        }
        match chunk.next_offset {
            Some(n) => {
                part.state.advance_to(n);
                *empties = 0;
            }
            // Nothing came back though the LSO is ahead: the range holds
            // no batch (compacted away); skip it.
            None if chunk.last_stable_offset > next => {
                *empties += 1;
                if *empties >= 2 {
                    part.state.advance_to(chunk.last_stable_offset);
                }
            }
            None => *empties = 0,
        }
        part.last_stable_offset = chunk.last_stable_offset;
        let lag = (chunk.last_stable_offset - part.state.next_offset()).max(0);
        self.role_metrics
            .lag
            .with_label_values(&[&partition.to_string()])
            .set(lag);
        if lag == 0 && !part.caught_up {
            part.caught_up = true;
            part.live_from = part.state.next_offset();
            tracing::info!(
                partition,
                offset = part.state.next_offset(),
                roles = part.tracks.len(),
                "caught up"
            );
        }
        part.fetched_at = Some(Instant::now());
        part.fetched_at_ms = self.clock.now_ms();
        part.error = None;
    }

    fn count_malformed(
        &self,
        partition: i32,
        offset: i64,
        error: &crate::coordination::FormatError,
    ) {
        self.metrics
            .malformed_records
            .with_label_values(&[error.part().as_str()])
            .inc();
        tracing::warn!(topic = %self.config.topic, partition, offset, %error, "skipped a malformed record");
    }

    /// Applies one record: fold, failover and epoch detection, metrics, events.
    fn apply(
        &self,
        part: &mut Part,
        partition: i32,
        record: &crate::coordination::LogRecord,
        counting: bool,
    ) {
        let (role, change, removed) = match part.state.apply(record) {
            Applied::Role {
                role,
                change,
                removed,
                malformed,
            } => {
                if let Some(m) = &malformed {
                    self.count_malformed(partition, m.offset, &m.error);
                }
                (role, change, removed)
            }
            Applied::MalformedKey(error) => {
                self.count_malformed(partition, record.offset, &error);
                return;
            }
            Applied::Replayed => return,
        };
        let now = self.clock.now_ms();
        let current = part.state.role(&role).and_then(|s| s.lease().cloned());
        if !part.tracks.contains_key(&role) {
            self.roles
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let track = part.tracks.entry(role.clone()).or_default();
        let (kind, member) = match change {
            Change::None => return,
            Change::Registered(m) => (ChangeKind::Registered, Some(m)),
            Change::Deregistered(m) => (ChangeKind::Deregistered, Some(m)),
            Change::Cleared { previous } => {
                track.lapsed_since = Some(now);
                (ChangeKind::Cleared, previous.map(|l| l.member))
            }
            Change::Leased { previous } => {
                let Some(lease) = &current else { return };
                let takeover = track.last_lease_member.as_deref() != Some(lease.member.as_str());
                if takeover && counting && track.last_lease_member.is_some() {
                    self.role_metrics.failover(&role);
                    track.failovers.push_back(now);
                }
                if track.last_token.is_none_or(|t| lease.token.supersedes(&t)) {
                    if counting && track.last_token.is_some() {
                        self.role_metrics.epoch_change(&role);
                    }
                    track.last_token = Some(lease.token);
                }
                let lapse = track
                    .lapsed_since
                    .take()
                    .or_else(|| previous.as_ref().map(|p| p.deadline).filter(|d| *d < now));
                if let Some(since) = lapse.filter(|_| counting && takeover) {
                    self.role_metrics
                        .leaderless_seconds
                        .observe((now - since).max(0) as f64 / 1000.0);
                }
                track.last_lease_member = Some(lease.member.clone());
                let kind = if takeover {
                    ChangeKind::Acquired
                } else {
                    ChangeKind::Renewed
                };
                (kind, Some(lease.member.clone()))
            }
        };
        let event = RoleEvent {
            role: role.clone(),
            offset: record.offset,
            kind,
            member,
            holder: current.as_ref().map(|l| l.member.clone()),
            token: current.as_ref().map(|l| l.token),
            deadline: current.as_ref().map(|l| rfc3339_ms(l.deadline)),
            at: rfc3339_ms(now),
        };
        if counting {
            track.history.push_back(event.clone());
            while track.history.len() > self.config.history {
                if let Some(dropped) = track.history.pop_front() {
                    track.history_from = dropped.offset + 1;
                }
            }
        }
        if removed {
            // The role left the topic; a later comeback starts a new history.
            part.tracks.remove(&role);
            self.roles
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            self.role_metrics.remove(&role);
        } else if let Some(state) = part.state.role(&role) {
            self.role_metrics
                .holder(&role, state.lease().map(|l| l.member.as_str()));
            self.role_metrics.candidates(&role, state.members().len());
            self.role_metrics
                .lease(&role, state.lease().map(|l| l.deadline), now);
        }
        self.role_metrics
            .roles
            .set(self.roles.load(std::sync::atomic::Ordering::Relaxed));
        let _ = self.events.send(event);
    }

    /// Describes every known role on an interval; updates the pair, epoch
    /// changes, lease expiry and status of each.
    async fn poll_coordinator(self: Arc<Self>) {
        loop {
            tokio::time::sleep(self.config.poll_interval).await;
            self.poll_once().await;
        }
    }

    /// One poll of the coordinator for every known role.
    pub async fn poll_once(&self) {
        let Some(parts) = self.parts.get() else {
            return;
        };
        let roles: Vec<String> = parts
            .iter()
            .flat_map(|p| {
                lock(p)
                    .state
                    .roles()
                    .map(|r| r.role().to_owned())
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut described = HashMap::with_capacity(roles.len());
        for chunk in roles.chunks(self.config.max_describe_batch.max(1)) {
            described.extend(self.client.describe_transactions(chunk).await);
        }
        let now = self.clock.now_ms();
        for (role, answer) in described {
            let Ok(partition) = role_partition(&role, parts.len() as i32) else {
                continue;
            };
            let Some(slot) = self.part(partition) else {
                continue;
            };
            let mut part = lock(slot);
            let counting = part.caught_up;
            let Some(track) = part.tracks.get_mut(&role) else {
                continue;
            };
            match answer {
                Ok(description) => {
                    let current = description.as_ref().and_then(|d| d.token());
                    if let Some(token) = current
                        && track.last_token.is_none_or(|t| token.supersedes(&t))
                    {
                        if counting && track.last_token.is_some() {
                            self.role_metrics.epoch_change(&role);
                        }
                        track.last_token = Some(token);
                    }
                    self.role_metrics.pair(&role, current);
                    track.coordinator = Some((
                        CoordinatorView {
                            current,
                            state: description.map(|d| d.state),
                            checked_at: rfc3339_ms(now),
                        },
                        current.is_none(),
                    ));
                }
                Err(e) => {
                    tracing::debug!(role, error = %e, "coordinator poll failed for the role");
                }
            }
        }
        self.refresh_statuses();
    }

    /// Recomputes lease expiry and status of every role (also after polls).
    pub fn refresh_statuses(&self) {
        let Some(parts) = self.parts.get() else {
            return;
        };
        let now = self.clock.now_ms();
        let window = i64::try_from(self.config.status_window.as_millis()).unwrap_or(i64::MAX);
        for slot in parts {
            let mut part = lock(slot);
            let Part { state, tracks, .. } = &mut *part;
            for role_state in state.roles() {
                let role = role_state.role();
                let track = tracks.entry(role.to_owned()).or_default();
                while track
                    .failovers
                    .front()
                    .is_some_and(|t| *t < now.saturating_sub(window))
                {
                    track.failovers.pop_front();
                }
                let s = self.status_of(role_state, track, now);
                self.role_metrics.status(role, s);
                self.role_metrics
                    .lease(role, role_state.lease().map(|l| l.deadline), now);
            }
        }
    }

    fn status_of(&self, state: &RoleState, track: &Track, now_ms: i64) -> RoleStatus {
        status(
            state,
            &StatusInputs {
                now_ms,
                stagger_ms: self.config.stagger_ms,
                failovers_in_window: track.failovers.len(),
                flapping_threshold: self.config.flapping_threshold,
                coordinator_vacant: track
                    .coordinator
                    .as_ref()
                    .is_some_and(|(_, vacant)| *vacant),
            },
        )
    }

    fn view(&self, part: &Part, state: &Arc<RoleState>, partition: i32, now_ms: i64) -> RoleView {
        let track = part.tracks.get(state.role());
        let window = i64::try_from(self.config.status_window.as_millis()).unwrap_or(i64::MAX);
        let failovers_in_window = track.map_or(0, |t| {
            t.failovers
                .iter()
                .filter(|at| **at >= now_ms.saturating_sub(window))
                .count()
        });
        RoleView {
            state: Arc::clone(state),
            partition,
            offset: part.state.next_offset(),
            age: part.fetched_at.map_or(Duration::ZERO, |at| at.elapsed()),
            refreshed_at_ms: part.fetched_at_ms,
            status: Some(track.map_or_else(
                || self.status_of(state, &Track::default(), now_ms),
                |t| self.status_of(state, t, now_ms),
            )),
            failovers_in_window,
            coordinator: track.and_then(|t| t.coordinator.as_ref().map(|(c, _)| c.clone())),
        }
    }

    /// One role's view; `None` when the topic holds no record of it.
    /// An error when the topic is not readable yet.
    pub fn role(&self, role: &str) -> Result<Option<RoleView>, String> {
        let parts = self
            .parts
            .get()
            .ok_or_else(|| "the coordination topic has not been found yet".to_owned())?;
        let partition = role_partition(role, parts.len() as i32).map_err(|e| e.to_string())?;
        let Some(slot) = self.part(partition) else {
            return Ok(None);
        };
        let part = lock(slot);
        if !part.caught_up {
            return Err(format!(
                "partition {partition} is still being read: {}",
                part.error.as_deref().unwrap_or("catching up")
            ));
        }
        let now = self.clock.now_ms();
        Ok(part
            .state
            .role_shared(role)
            .map(|s| self.view(&part, &s, partition, now)))
    }

    /// Every role's view, by name.
    pub fn all(&self) -> Result<Vec<RoleView>, String> {
        let parts = self
            .parts
            .get()
            .ok_or_else(|| "the coordination topic has not been found yet".to_owned())?;
        let now = self.clock.now_ms();
        let mut views = Vec::new();
        for (p, slot) in parts.iter().enumerate() {
            let part = lock(slot);
            if !part.caught_up {
                return Err(format!(
                    "partition {p} is still being read: {}",
                    part.error.as_deref().unwrap_or("catching up")
                ));
            }
            views.extend(
                part.state
                    .roles_shared()
                    .map(|s| self.view(&part, s, p as i32, now)),
            );
        }
        views.sort_by(|a, b| a.state.role().cmp(b.state.role()));
        Ok(views)
    }

    /// `None` when every partition has caught up and its last fetch
    /// succeeded; otherwise why not.
    pub fn not_ready(&self) -> Option<String> {
        let Some(parts) = self.parts.get() else {
            return Some("the coordination topic has not been found yet".into());
        };
        for (p, slot) in parts.iter().enumerate() {
            let part = lock(slot);
            if let Some(e) = &part.error {
                return Some(format!("partition {p}: {e}"));
            }
            if !part.caught_up {
                return Some(format!("partition {p} is catching up"));
            }
        }
        None
    }

    /// Live changes of every role.
    pub fn subscribe(&self) -> broadcast::Receiver<RoleEvent> {
        self.events.subscribe()
    }

    /// The kept changes of `role` after `offset`, oldest first, and whether
    /// they are all of them (else some were dropped or happened before the
    /// service was watching).
    pub fn history(&self, role: &str, after: i64) -> (Vec<RoleEvent>, bool) {
        let Some(parts) = self.parts.get() else {
            return (Vec::new(), false);
        };
        let Ok(partition) = role_partition(role, parts.len() as i32) else {
            return (Vec::new(), false);
        };
        let Some(slot) = self.part(partition) else {
            return (Vec::new(), false);
        };
        let part = lock(slot);
        // An id this service has not reached (another topic of the same
        // name, another cluster) cannot be resumed from: reset.
        if !part.caught_up || after >= part.state.next_offset() {
            return (Vec::new(), false);
        }
        let (events, kept_from) = match part.tracks.get(role) {
            Some(track) => (
                track
                    .history
                    .iter()
                    .filter(|e| e.offset > after)
                    .cloned()
                    .collect(),
                track.history_from.max(part.live_from),
            ),
            None => (Vec::new(), part.live_from),
        };
        (events, after.saturating_add(1) >= kept_from)
    }
}
