//! An in-memory cluster with Kafka's fencing semantics, for unit tests of
//! the rules and of the service. It never replaces the broker tests of the
//! same behaviour.
//!
//! Each [`MemoryTransport`] is one member's producer: it can write only under
//! a token it minted, and only while that token is the coordinator's current
//! one, as a broker would check. The cluster itself is the service's
//! [`Cluster`]: it describes roles and tails its one topic.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::{
    Coordinator, LeaseWriter, Registrar, StateReader, Transport, TransportError, TransportResult,
};
use crate::cluster::{Cluster, ClusterError, Described, Floor, Tailed};
use crate::sync::lock;
use crate::{
    FencingToken, Key, Lease, LogRecord, Registration, SkippedBatch, decode_key, encode_key,
    encode_lease, encode_registration, role_partition,
};

/// Epochs at or above this are exhausted; the next mint rotates the producer
/// id (Kafka's `isEpochExhausted`).
const EXHAUSTED_EPOCH: i16 = 32766;

#[derive(Debug, Default)]
struct ClusterState {
    partitions: i32,
    /// False on a fresh cluster until the topic is created: by the service
    /// ([`Cluster::create_topic`]) or by a member's first write, as a
    /// candidate connecting with a topic spec would.
    topic_exists: bool,
    logs: HashMap<i32, Vec<LogRecord>>,
    /// Per partition, the batches a reader steps over (they decompress past
    /// its bound); each holds one offset of the log, its record unread.
    oversized: HashMap<i32, Vec<SkippedBatch>>,
    current: HashMap<String, FencingToken>,
    /// The coordinator's transaction state per role.
    txn_states: HashMap<String, &'static str>,
    /// Roles whose coordinator answers an old pair (a paused broker).
    stale: HashMap<String, Option<FencingToken>>,
    /// Partitions whose leader no other broker confirms (a deposed leader
    /// that does not know): their reads say nothing of freshness.
    unconfirmed: std::collections::HashSet<i32>,
    next_producer_id: i64,
    unavailable: Option<String>,
    /// Calls hang and the cluster reports this reason (an unreachable
    /// bootstrap address).
    unreachable: Option<String>,
    max_transaction_timeout: Duration,
    cluster_id: String,
    /// Times the cluster id changed.
    cluster_changes: u64,
    /// The service lost every connection: calls fail and no cluster id is
    /// known until contact is back.
    no_contact: bool,
    /// Describes of many roles (the coordinator poller's) answer as of
    /// their call but arrive once this is released.
    held_describes: Option<DescribeHold>,
    /// Per partition, its log start: records below it were deleted.
    log_starts: HashMap<i32, i64>,
    /// Tailers read nothing while set (their reads are in flight).
    reads_held: bool,
}

/// Describes held in flight: taken with [`MemoryCluster::hold_describes`].
#[derive(Clone, Debug, Default)]
pub struct DescribeHold {
    entered: Arc<tokio::sync::Notify>,
    released: Arc<tokio::sync::Notify>,
}

impl DescribeHold {
    /// Waits until a held describe has its answer and waits.
    pub async fn entered(&self) {
        self.entered.notified().await;
    }

    /// Lets every held describe arrive.
    pub fn release(&self) {
        self.released.notify_waiters();
    }
}

/// A shared simulated cluster.
#[derive(Clone, Debug)]
pub struct MemoryCluster {
    state: Arc<Mutex<ClusterState>>,
    /// Bumped at every append, to wake tailers.
    appended: watch::Sender<u64>,
}

impl MemoryCluster {
    /// A cluster whose coordination topic has `partitions` partitions.
    pub fn new(partitions: i32) -> MemoryCluster {
        MemoryCluster {
            state: Arc::new(Mutex::new(ClusterState {
                partitions,
                topic_exists: true,
                next_producer_id: 1000,
                max_transaction_timeout: Duration::from_secs(900),
                cluster_id: "memory-cluster".into(),
                ..ClusterState::default()
            })),
            appended: watch::Sender::new(0),
        }
    }

    /// A fresh cluster: no coordination topic until the service creates it
    /// or a member writes (then with `partitions` partitions).
    pub fn without_topic(partitions: i32) -> MemoryCluster {
        let cluster = MemoryCluster::new(partitions);
        cluster.lock().topic_exists = false;
        cluster
    }

    /// Whether the coordination topic exists.
    pub fn topic_exists(&self) -> bool {
        self.lock().topic_exists
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ClusterState> {
        lock(&self.state)
    }

    /// A new member's producer on this cluster.
    pub fn transport(&self) -> MemoryTransport {
        MemoryTransport {
            cluster: self.clone(),
            minted: Arc::default(),
        }
    }

    /// Fences the current holder of `role` as a transaction timeout would:
    /// the epoch moves without any member asking.
    pub fn fence(&self, role: &str) -> Option<FencingToken> {
        let mut state = self.lock();
        let current = state.current.get(role).copied();
        let next = current.map(|t| bump(t, &mut state.next_producer_id));
        if let Some(token) = next {
            state.current.insert(role.to_owned(), token);
        }
        next
    }

    /// Makes every call fail with `reason` until set back to `None`.
    pub fn set_unavailable(&self, reason: Option<&str>) {
        self.lock().unavailable = reason.map(str::to_owned);
    }

    /// Makes `partitions` hang and [`Cluster::unreachable`] say `reason`
    /// until set back to `None`, as a client retrying an unreachable
    /// bootstrap address does.
    pub fn set_unreachable(&self, reason: Option<&str>) {
        self.lock().unreachable = reason.map(str::to_owned);
    }

    /// Sets the cluster's `transaction.max.timeout.ms`.
    pub fn set_max_transaction_timeout(&self, max: Duration) {
        self.lock().max_transaction_timeout = max;
    }

    /// Every record of a partition, in offset order.
    pub fn log(&self, partition: i32) -> Vec<LogRecord> {
        self.lock()
            .logs
            .get(&partition)
            .cloned()
            .unwrap_or_default()
    }

    /// The coordinator's current token of `role`.
    pub fn current(&self, role: &str) -> Option<FencingToken> {
        self.lock().current.get(role).copied()
    }

    /// Makes the coordinator of `role` answer `pair` (`None`: no holder)
    /// whatever was minted since, as a broker that paused and came back
    /// does until it catches up; `clear_stale` ends it.
    pub fn answer_stale(&self, role: &str, pair: Option<FencingToken>) {
        self.lock().stale.insert(role.to_owned(), pair);
    }

    /// The coordinator of `role` answers the truth again.
    pub fn clear_stale(&self, role: &str) {
        self.lock().stale.remove(role);
    }

    /// Makes reads of `partition` come from a leader no other broker
    /// confirms (`true`), as a deposed leader cut off from the controller
    /// answers, or confirmed again (`false`).
    pub fn set_leader_unconfirmed(&self, partition: i32, unconfirmed: bool) {
        let mut state = self.lock();
        if unconfirmed {
            state.unconfirmed.insert(partition);
        } else {
            state.unconfirmed.remove(&partition);
        }
    }

    /// Cuts (`false`) or restores the contact with every broker, as when a
    /// client's connections all died: every call fails and
    /// [`Cluster::cluster_id`] is `None` until contact is back (with the id
    /// set then: the cluster may have been replaced meanwhile).
    pub fn set_contact(&self, contact: bool) {
        self.lock().no_contact = !contact;
    }

    /// From now on, a describe of many roles (the coordinator poller's)
    /// takes its answers at once and hands them over only when the hold is
    /// released: an answer in flight while the cluster changes. Until
    /// [`MemoryCluster::unhold_describes`].
    pub fn hold_describes(&self) -> DescribeHold {
        let hold = DescribeHold::default();
        self.lock().held_describes = Some(hold.clone());
        hold
    }

    /// Describes arrive at once again.
    pub fn unhold_describes(&self) {
        if let Some(hold) = self.lock().held_describes.take() {
            hold.release();
        }
    }

    /// Replaces the cluster's id (a rebuilt cluster behind the same address).
    pub fn set_cluster_id(&self, id: &str) {
        let mut state = self.lock();
        if state.cluster_id != id {
            state.cluster_changes += 1;
        }
        id.clone_into(&mut state.cluster_id);
    }

    /// The next producer id the coordinator draws, for a role minted anew
    /// or whose epoch runs out: another broker's block, lower or higher
    /// (Kafka's `ProducerIdsBlock`).
    pub fn set_next_producer_id(&self, id: i64) {
        self.lock().next_producer_id = id;
    }

    /// The role's transactional id expires (`transactional.id.expiration.ms`
    /// after it was last used): nobody holds it, and the next mint draws a
    /// new producer id at epoch 0.
    pub fn expire(&self, role: &str) {
        let mut state = self.lock();
        state.current.remove(role);
        state.txn_states.remove(role);
    }

    /// Appends a batch that decompresses to more than readers' bound (a
    /// member's decompression bomb) to `partition`: it takes an offset,
    /// and reads step over it and report it.
    pub fn append_oversized(&self, partition: i32, compression: &'static str) -> i64 {
        let offset = self.append_raw(partition, Bytes::new(), None);
        self.lock()
            .oversized
            .entry(partition)
            .or_default()
            .push(SkippedBatch {
                base_offset: offset,
                last_offset: offset,
                compression,
                limit_bytes: 1_048_588,
            });
        self.appended.send_modify(|n| *n += 1);
        offset
    }

    /// Deletes the records of `partition` below `before` (Kafka's
    /// DeleteRecords, or retention): its log start moves there. A tailer
    /// that had not read up to it learns that its history restarts there
    /// ([`Tailed::Restarted`]), as the Kafka reader does on
    /// OFFSET_OUT_OF_RANGE.
    pub fn delete_records(&self, partition: i32, before: i64) {
        {
            let mut state = self.lock();
            let start = state.log_starts.entry(partition).or_default();
            *start = (*start).max(before);
        }
        self.appended.send_modify(|n| *n += 1);
    }

    /// Holds every tailer's reads (`true`: they are in flight, nothing is
    /// read), or lets them go on.
    pub fn hold_reads(&self, held: bool) {
        self.lock().reads_held = held;
        self.appended.send_modify(|n| *n += 1);
    }

    /// Appends a raw record to `partition` (malformed data, for tests).
    pub fn append_raw(&self, partition: i32, key: Bytes, value: Option<Bytes>) -> i64 {
        let offset = {
            let mut state = self.lock();
            let log = state.logs.entry(partition).or_default();
            let offset = log.len() as i64;
            log.push(LogRecord { offset, key, value });
            offset
        };
        self.appended.send_modify(|n| *n += 1);
        offset
    }

    fn describe_now(&self, role: &str) -> Result<Described, ClusterError> {
        let state = self.lock();
        if let Some(reason) = state.failure() {
            return Err(ClusterError::Unavailable(reason));
        }
        let current = match state.stale.get(role) {
            Some(stale) => *stale,
            None => state.current.get(role).copied(),
        };
        Ok(Described {
            current,
            state: current.map(|_| {
                state
                    .txn_states
                    .get(role)
                    .copied()
                    .unwrap_or("Empty")
                    .to_owned()
            }),
        })
    }
}

/// How often a describe below its floor is asked again.
const STALE_RETRY: Duration = Duration::from_millis(10);

impl Cluster for MemoryCluster {
    fn describe<'a>(
        &'a self,
        roles: &'a [String],
        floor: Floor<'a>,
        deadline: Instant,
    ) -> BoxFuture<'a, HashMap<String, Result<Described, ClusterError>>> {
        async move {
            let mut out = HashMap::with_capacity(roles.len());
            for role in roles {
                let answer = loop {
                    let answer = self.describe_now(role);
                    let stale = matches!(
                        &answer,
                        Ok(Described { current: Some(c), .. })
                            if floor(role, c.producer_id()).is_some_and(|f| f.refuses(c.producer_epoch()))
                    );
                    if !stale {
                        break answer;
                    }
                    if Instant::now() + STALE_RETRY >= deadline {
                        break Err(ClusterError::Unavailable(format!(
                            "the coordinator of {role:?} keeps answering a pair below one already seen"
                        )));
                    }
                    tokio::time::sleep(STALE_RETRY).await;
                };
                out.insert(role.clone(), answer);
            }
            let hold = self.lock().held_describes.clone();
            if let Some(hold) = hold {
                let released = hold.released.notified();
                hold.entered.notify_one();
                released.await;
            }
            out
        }
        .boxed()
    }

    fn partitions<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<i32, ClusterError>> {
        async move {
            while self.lock().unreachable.is_some() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let state = self.lock();
            match state.failure() {
                Some(reason) => Err(ClusterError::Unavailable(reason)),
                None if !state.topic_exists => Err(ClusterError::NoTopic(format!(
                    "topic {topic}: does not exist"
                ))),
                None => Ok(state.partitions),
            }
        }
        .boxed()
    }

    fn create_topic<'a>(
        &'a self,
        _topic: &'a str,
        partitions: i32,
        _replication_factor: i16,
    ) -> BoxFuture<'a, Result<i32, ClusterError>> {
        async move {
            let mut state = self.lock();
            if let Some(reason) = state.failure() {
                return Err(ClusterError::Unavailable(reason));
            }
            if !state.topic_exists {
                state.topic_exists = true;
                state.partitions = partitions;
            }
            Ok(state.partitions)
        }
        .boxed()
    }

    fn check_compacted<'a>(&'a self, _topic: &'a str) -> BoxFuture<'a, Result<(), ClusterError>> {
        async { Ok(()) }.boxed()
    }

    fn tail(&self, _topic: &str, from: Vec<i64>, long_poll: Duration) -> mpsc::Receiver<Tailed> {
        let (tx, rx) = mpsc::channel(64);
        let cluster = self.clone();
        let mut appended = self.appended.subscribe();
        tokio::spawn(async move {
            let mut next = from;
            loop {
                for (p, offset) in next.iter_mut().enumerate() {
                    let partition = p as i32;
                    let restarted = {
                        let state = cluster.lock();
                        let start = state.log_starts.get(&partition).copied().unwrap_or(0);
                        let readable = !state.reads_held && state.failure().is_none();
                        (readable && *offset < start).then(|| {
                            *offset = start;
                            Tailed::Restarted {
                                partition,
                                from: start,
                            }
                        })
                    };
                    if let Some(restarted) = restarted
                        && tx.send(restarted).await.is_err()
                    {
                        return;
                    }
                    let update = {
                        let state = cluster.lock();
                        match state.failure() {
                            _ if state.reads_held => continue,
                            Some(reason) => Tailed::Failed {
                                partition,
                                error: ClusterError::Unavailable(reason),
                            },
                            None => {
                                let log = state.logs.get(&partition).map_or(&[][..], |l| &l[..]);
                                let skipped: Vec<SkippedBatch> = state
                                    .oversized
                                    .get(&partition)
                                    .into_iter()
                                    .flatten()
                                    .filter(|b| b.base_offset >= *offset)
                                    .cloned()
                                    .collect();
                                let records: Vec<LogRecord> = log
                                    .iter()
                                    .filter(|r| {
                                        r.offset >= *offset
                                            && !state.is_oversized(partition, r.offset)
                                    })
                                    .cloned()
                                    .collect();
                                *offset = (*offset).max(log.len() as i64);
                                Tailed::Read {
                                    partition,
                                    records,
                                    skipped,
                                    next_offset: *offset,
                                    last_stable_offset: log.len() as i64,
                                    complete_as_of: (!state.unconfirmed.contains(&partition))
                                        .then(crate::time::boot_now),
                                }
                            }
                        }
                    };
                    if tx.send(update).await.is_err() {
                        return;
                    }
                }
                tokio::select! {
                    _ = appended.changed() => {}
                    () = tokio::time::sleep(long_poll) => {}
                    () = tx.closed() => return,
                }
            }
        });
        rx
    }

    fn unreachable(&self) -> Option<String> {
        self.lock().unreachable.clone()
    }

    fn cluster_id(&self) -> Option<Arc<str>> {
        let state = self.lock();
        (!state.no_contact).then(|| state.cluster_id.as_str().into())
    }

    fn known_cluster_id(&self) -> Option<Arc<str>> {
        Some(self.lock().cluster_id.as_str().into())
    }

    fn cluster_changes(&self) -> u64 {
        self.lock().cluster_changes
    }
}

fn bump(token: FencingToken, next_producer_id: &mut i64) -> FencingToken {
    if token.producer_epoch() >= EXHAUSTED_EPOCH {
        let id = *next_producer_id;
        *next_producer_id += 1;
        FencingToken::new(id, 0).unwrap_or(token)
    } else {
        FencingToken::new(token.producer_id(), token.producer_epoch() + 1).unwrap_or(token)
    }
}

impl ClusterState {
    /// Why every call fails now, if it does.
    fn failure(&self) -> Option<String> {
        match &self.unavailable {
            Some(reason) => Some(reason.clone()),
            None if self.no_contact => Some("cannot reach any broker".into()),
            None => None,
        }
    }

    fn check(&self) -> TransportResult<()> {
        match self.failure() {
            Some(reason) => Err(TransportError::Unavailable(reason)),
            None => Ok(()),
        }
    }

    /// Whether `offset` of `partition` is held by an oversized batch.
    fn is_oversized(&self, partition: i32, offset: i64) -> bool {
        self.oversized
            .get(&partition)
            .is_some_and(|b| b.iter().any(|b| b.base_offset == offset))
    }

    fn append(&mut self, role: &str, key: &Key, value: Option<Vec<u8>>) -> TransportResult<i64> {
        if key.kind == crate::KeyKind::Lease {
            self.txn_states.insert(role.to_owned(), "CompleteCommit");
        }
        self.topic_exists = true;
        let partition = role_partition(role, self.partitions)?;
        let log = self.logs.entry(partition).or_default();
        let offset = log.len() as i64;
        log.push(LogRecord {
            offset,
            key: Bytes::from(encode_key(key)?),
            value: value.map(Bytes::from),
        });
        Ok(offset)
    }
}

/// One member's producer on a [`MemoryCluster`].
#[derive(Clone, Debug)]
pub struct MemoryTransport {
    cluster: MemoryCluster,
    minted: Arc<Mutex<HashMap<String, FencingToken>>>,
}

impl MemoryTransport {
    fn guarded_write(
        &self,
        role: &str,
        token: FencingToken,
        value: Option<Vec<u8>>,
    ) -> TransportResult<i64> {
        let minted = lock(&self.minted).get(role).copied();
        if minted != Some(token) {
            return Err(TransportError::NotMinted {
                role: role.to_owned(),
                token,
            });
        }
        let mut state = self.cluster.lock();
        state.check()?;
        if state.current.get(role) != Some(&token) {
            return Err(TransportError::Fenced {
                role: role.to_owned(),
                token,
                reason: "PRODUCER_FENCED (code 90)".into(),
            });
        }
        let offset = state.append(role, &Key::lease(role), value);
        drop(state);
        self.cluster.appended.send_modify(|n| *n += 1);
        offset
    }
}

impl Coordinator for MemoryTransport {
    async fn acquire_epoch(
        &self,
        role: &str,
        lease_duration: Duration,
    ) -> TransportResult<FencingToken> {
        let mut state = self.cluster.lock();
        state.check()?;
        if lease_duration.is_zero() || lease_duration > state.max_transaction_timeout {
            return Err(TransportError::Unavailable(format!(
                "INVALID_TRANSACTION_TIMEOUT (code 50): {lease_duration:?}"
            )));
        }
        let token = match state.current.get(role).copied() {
            Some(current) => bump(current, &mut state.next_producer_id),
            None => {
                let id = state.next_producer_id;
                state.next_producer_id += 1;
                FencingToken::new(id, 0).map_err(|e| TransportError::Unavailable(e.to_string()))?
            }
        };
        state.current.insert(role.to_owned(), token);
        state.txn_states.insert(role.to_owned(), "Empty");
        drop(state);
        lock(&self.minted).insert(role.to_owned(), token);
        Ok(token)
    }

    async fn describe(&self, role: &str) -> TransportResult<Option<FencingToken>> {
        let state = self.cluster.lock();
        state.check()?;
        Ok(state.current.get(role).copied())
    }

    async fn max_transaction_timeout(&self) -> TransportResult<Option<Duration>> {
        Ok(Some(self.cluster.lock().max_transaction_timeout))
    }
}

impl StateReader for MemoryTransport {
    fn partitions(&self) -> i32 {
        self.cluster.lock().partitions
    }

    async fn read_role_records(&self, role: &str) -> TransportResult<Vec<LogRecord>> {
        let state = self.cluster.lock();
        state.check()?;
        let partition = role_partition(role, state.partitions)?;
        Ok(state
            .logs
            .get(&partition)
            .map(|log| {
                log.iter()
                    .filter(|r| !state.is_oversized(partition, r.offset))
                    .filter(|r| decode_key(&r.key).map_or(true, |k| k.role == role))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }
}

impl Registrar for MemoryTransport {
    async fn register(
        &self,
        role: &str,
        member: &str,
        registered_at_ms: i64,
    ) -> TransportResult<i64> {
        let value = encode_registration(&Registration {
            member: member.to_owned(),
            registered_at: registered_at_ms,
        })?;
        let offset = {
            let mut state = self.cluster.lock();
            state.check()?;
            state.append(role, &Key::registration(role, member), Some(value))
        };
        self.cluster.appended.send_modify(|n| *n += 1);
        offset
    }

    async fn deregister(&self, role: &str, member: &str) -> TransportResult<i64> {
        let offset = {
            let mut state = self.cluster.lock();
            state.check()?;
            state.append(role, &Key::registration(role, member), None)
        };
        self.cluster.appended.send_modify(|n| *n += 1);
        offset
    }
}

impl LeaseWriter for MemoryTransport {
    async fn write_lease(
        &self,
        role: &str,
        token: FencingToken,
        lease: &Lease,
    ) -> TransportResult<i64> {
        let value = encode_lease(lease)?;
        self.guarded_write(role, token, Some(value))
    }

    async fn clear_lease(&self, role: &str, token: FencingToken) -> TransportResult<i64> {
        self.guarded_write(role, token, None)
    }
}

impl Transport for MemoryTransport {
    async fn close(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RoleState;
    use crate::testkit::lease;

    const LEASE: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn a_second_mint_fences_the_first_writer() {
        let cluster = MemoryCluster::new(4);
        let (a, b) = (cluster.transport(), cluster.transport());
        assert_eq!(a.describe("r").await, Ok(None));
        let ta = a.acquire_epoch("r", LEASE).await.unwrap();
        assert_eq!(a.describe("r").await, Ok(Some(ta)));
        a.write_lease("r", ta, &lease("a", ta)).await.unwrap();
        let tb = b.acquire_epoch("r", LEASE).await.unwrap();
        assert!(tb.supersedes(&ta));
        assert!(
            a.write_lease("r", ta, &lease("a", ta))
                .await
                .unwrap_err()
                .is_fenced()
        );
        // b cannot write under a's token: it never minted it.
        assert!(matches!(
            b.write_lease("r", ta, &lease("b", ta)).await,
            Err(TransportError::NotMinted { .. })
        ));
        b.write_lease("r", tb, &lease("b", tb)).await.unwrap();
        let state = RoleState::from_records("r", &b.read_role_records("r").await.unwrap());
        assert_eq!(state.lease().unwrap().member, "b");
    }

    #[tokio::test]
    async fn an_exhausted_epoch_rotates_the_producer_id() {
        let cluster = MemoryCluster::new(1);
        let t = cluster.transport();
        let first = t.acquire_epoch("r", LEASE).await.unwrap();
        let mut last = first;
        // Drawn from another broker's block: a lower id.
        cluster.set_next_producer_id(7);
        for _ in 0..=EXHAUSTED_EPOCH {
            let next = t.acquire_epoch("r", LEASE).await.unwrap();
            assert!(next.same_producer(&last) && next.supersedes(&last) || next.producer_id() == 7);
            last = next;
        }
        assert_eq!(last.producer_id(), 7, "lower than {first}");
        // (id, 32766) was exhausted: the next mint is a fresh id at epoch 0.
        assert_eq!(last.producer_epoch(), 0);
        assert_ne!(last.producer_id(), first.producer_id());
    }

    #[tokio::test]
    async fn a_timeout_above_the_cluster_maximum_is_refused() {
        let cluster = MemoryCluster::new(1);
        cluster.set_max_transaction_timeout(Duration::from_secs(10));
        let t = cluster.transport();
        assert!(t.acquire_epoch("r", Duration::from_secs(11)).await.is_err());
        assert!(t.acquire_epoch("r", Duration::from_secs(10)).await.is_ok());
    }
}
