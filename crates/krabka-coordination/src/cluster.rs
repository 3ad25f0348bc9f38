//! The seam under the service: the little it asks of a Kafka cluster.
//!
//! The service reads; it never writes. It asks the transaction coordinator
//! for the current pair of roles, reads the coordination topic's layout, and
//! tails the topic. [`crate::kafka::KafkaClient`] answers from a real
//! cluster; [`crate::transport::memory::MemoryCluster`] answers from memory
//! with the same semantics, so the service's rules and HTTP handlers are
//! tested without a broker.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::{FencingToken, LogRecord, SkippedBatch};

/// What the transaction coordinator reports for a role now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    /// The current pair; `None` when no member holds the role.
    pub current: Option<FencingToken>,
    /// The coordinator's transaction state (`Empty`, `Ongoing`, ...);
    /// `None` when no member holds the role.
    pub state: Option<String>,
}

/// Why the cluster could not answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// Not now: unreachable, moving, timed out. Asking later may work.
    #[error("{0}")]
    Unavailable(String),
    /// The cluster refuses the service's credentials or permissions; an
    /// operator must act.
    #[error("{0}")]
    Denied(String),
    /// The request cannot work as made (bad settings, a topic that is not
    /// compacted).
    #[error("{0}")]
    Invalid(String),
    /// The topic does not exist (yet): on a fresh cluster, until the first
    /// candidate (or the service, when allowed) creates it.
    #[error("{0}")]
    NoTopic(String),
    /// What cannot happen did: a bug of the client, not Kafka's doing.
    #[error("{0}")]
    Internal(String),
}

/// What tailing learned of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tailed {
    /// Committed records read (maybe none), and where the partition's reader
    /// stands now: every record below `next_offset` was delivered.
    Read {
        /// The partition.
        partition: i32,
        /// The records, in offset order.
        records: Vec<LogRecord>,
        /// The batches stepped over, their records unread (they
        /// decompress past the reader's bound), in offset order.
        skipped: Vec<SkippedBatch>,
        /// Where the next read starts.
        next_offset: i64,
        /// The partition's last stable offset at the read.
        last_stable_offset: i64,
        /// The instant as of which the log held nothing more than what was
        /// read, as far as anyone can know: the earlier of the read's send
        /// instant and the last time another broker confirmed its leader,
        /// and no later than the send instant of the latest read whose high
        /// watermark the reads have reached (an open transaction holds the
        /// last stable offset back, and what was written after it unread).
        /// `None` when its leader is not confirmed (then the reader's
        /// freshness stays where it was).
        complete_as_of: Option<Instant>,
    },
    /// The partition's history restarts at `from`: records between where
    /// the reader stood and `from` were deleted before it reached them (its
    /// log start moved past it: retention, DeleteRecords, a topic
    /// recreated), so what was read of it before is not its history any
    /// more. Reads go on from `from`; whoever folds the partition starts
    /// again from nothing.
    Restarted {
        /// The partition.
        partition: i32,
        /// Its log start: where the next read starts.
        from: i64,
    },
    /// A read of the partition failed; it is tried again.
    Failed {
        /// The partition.
        partition: i32,
        /// Why.
        error: ClusterError,
    },
}

/// The TLS material of a client's broker connections now, for metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsStatus {
    /// The client certificate's file and the end of its validity (epoch
    /// ms), when one is configured.
    pub client_certificate: Option<(PathBuf, i64)>,
    /// Times changed files were taken in.
    pub reloads: u64,
    /// Times changed files were refused (the previous material kept).
    pub refused: u64,
}

/// What the answers seen so far allow of a role's pair under one producer
/// id (Kafka orders the epochs of one producer id, and nothing across
/// producer ids; but a producer id never comes back to a role once another
/// replaced it: a new one is drawn from the controller's blocks, never an
/// old one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lowest {
    /// The highest epoch seen under it: an answer below it is stale.
    Epoch(i16),
    /// Another producer id of the role was current after this one was:
    /// every answer naming it is stale.
    Retired,
}

impl Lowest {
    /// Whether an answer at `epoch` under this producer id is stale.
    pub fn refuses(self, epoch: i16) -> bool {
        match self {
            Lowest::Epoch(seen) => epoch < seen,
            Lowest::Retired => true,
        }
    }
}

/// What an answer may carry for a role under a producer id ([`Lowest`]),
/// `None` when nothing was seen under it.
pub type Floor<'a> = &'a (dyn Fn(&str, i64) -> Option<Lowest> + Sync);

/// What the service asks of a cluster.
pub trait Cluster: Send + Sync + std::fmt::Debug + 'static {
    /// The current pair of each role, from requests sent after this call
    /// began, retried until `deadline`. An answer with an epoch below
    /// `floor(role, its producer id)` comes from a stale coordinator: it is
    /// asked again, never returned.
    fn describe<'a>(
        &'a self,
        roles: &'a [String],
        floor: Floor<'a>,
        deadline: Instant,
    ) -> BoxFuture<'a, HashMap<String, Result<Described, ClusterError>>>;

    /// [`Cluster::describe`] of one role, retried alone: a check's path,
    /// without the maps of many roles.
    fn describe_role<'a>(
        &'a self,
        role: &'a str,
        floor: Floor<'a>,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Described, ClusterError>> {
        Box::pin(async move {
            let roles = [role.to_owned()];
            self.describe(&roles, floor, deadline)
                .await
                .remove(role)
                .unwrap_or_else(|| Err(ClusterError::Internal(format!("no answer for {role:?}"))))
        })
    }

    /// The partition count of `topic`, from fresh metadata.
    fn partitions<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<i32, ClusterError>>;

    /// Creates `topic` compacted with `partitions` partitions and
    /// `replication_factor` replicas (-1: the broker's default) when it is
    /// missing; returns its partition count, which is the existing topic's
    /// when another client created it first.
    fn create_topic<'a>(
        &'a self,
        topic: &'a str,
        partitions: i32,
        replication_factor: i16,
    ) -> BoxFuture<'a, Result<i32, ClusterError>>;

    /// Refuses a topic that is not compacted (retention would forget
    /// registrations and leases).
    fn check_compacted<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<(), ClusterError>>;

    /// Tails every partition of `topic` from `from[p]` with read_committed
    /// long polls of up to `long_poll`, until the receiver is dropped.
    fn tail(&self, topic: &str, from: Vec<i64>, long_poll: Duration) -> mpsc::Receiver<Tailed>;

    /// Why the bootstrap brokers cannot be reached now: each one's last
    /// failure while it waits out its reconnect backoff (the OS's reason:
    /// refused, DNS, TLS, SASL). `None` when none failed lately. Readiness
    /// shows it during start-up, before an operation gives up.
    fn unreachable(&self) -> Option<String> {
        None
    }

    /// The id of the cluster the client is in contact with now, verified
    /// since it last lost contact with every broker; `None` while it has
    /// none (the cluster behind the addresses may have been replaced
    /// meanwhile). Cached answers are tied to it and used only while it is
    /// `Some`.
    fn cluster_id(&self) -> Option<std::sync::Arc<str>>;

    /// How many times the cluster id changed (another cluster answered
    /// behind the addresses): an answer begun under one count and ended
    /// under another may speak for either cluster.
    fn cluster_changes(&self) -> u64;

    /// The id of the cluster the client knows, in contact or not (what an
    /// answer received from it speaks for, while [`Cluster::cluster_changes`]
    /// stays).
    fn known_cluster_id(&self) -> Option<std::sync::Arc<str>>;

    /// The TLS material of broker connections, after a look at its files
    /// (a changed file is taken in, or refused and said); `None` without
    /// TLS.
    fn tls(&self) -> Option<TlsStatus> {
        None
    }

    /// Bytes of role names the client remembers (their coordinators), for
    /// the metric of that bounded memory.
    fn remembered_bytes(&self) -> u64 {
        0
    }
}
