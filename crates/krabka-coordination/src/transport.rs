//! The seam between the succession rules and the cluster (seeds 000 and 002).
//!
//! The rules decide who registers, who challenges and when; a transport
//! carries those decisions to the brokers. [`crate::kafka::KafkaTransport`]
//! talks to a cluster; [`memory::MemoryCluster`] gives tests the same
//! fencing semantics with no broker.
//!
//! `acquire_epoch` and `write_lease`/`clear_lease` are the guarded pair: the
//! first mints the epoch and fences the previous holder, the others write
//! under it and the broker rejects them once a later member has taken the
//! role. A deposed holder learns it lost the role from
//! [`TransportError::Fenced`] and from nothing else.

use std::future::Future;
use std::time::Duration;

use crate::cluster::ClusterError;
use crate::{EncodeError, FencingToken, Lease, LogRecord, PartitionError};

pub mod memory;

/// A transport failure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The broker rejected the token: a later member holds the role.
    #[error("fenced: role {role} under token {token}: {reason}")]
    Fenced {
        /// The role.
        role: String,
        /// The rejected token.
        token: FencingToken,
        /// What the broker said.
        reason: String,
    },
    /// A write under a token this transport never minted (or no longer
    /// holds); a programming error, not a fence.
    #[error("token {token} of role {role} was not minted by this transport")]
    NotMinted {
        /// The role.
        role: String,
        /// The token given.
        token: FencingToken,
    },
    /// A write whose outcome is unknown; the token cannot write again.
    #[error("role {role}: {reason}")]
    Uncertain {
        /// The role.
        role: String,
        /// What happened.
        reason: String,
    },
    /// The cluster could not serve the call.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A record could not be encoded.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The partition of a role could not be computed.
    #[error(transparent)]
    Partition(#[from] PartitionError),
    /// The transport (or a simulated cluster) cannot serve the call now.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl TransportError {
    /// True when the broker fenced the token.
    pub fn is_fenced(&self) -> bool {
        matches!(self, TransportError::Fenced { .. })
    }
}

/// Result of a transport call.
pub type TransportResult<T> = Result<T, TransportError>;

/// Mints epochs and reports the current one.
pub trait Coordinator: Send + Sync {
    /// Mints a new epoch for `role` (InitProducerId with
    /// `transactional.id = role`) and fences the member that held it. The
    /// lease duration goes in as the transaction timeout, so the coordinator
    /// aborts a dead holder's open transaction.
    fn acquire_epoch(
        &self,
        role: &str,
        lease_duration: Duration,
    ) -> impl Future<Output = TransportResult<FencingToken>> + Send;

    /// The token that holds `role` now; `None` when no member holds it.
    fn describe(
        &self,
        role: &str,
    ) -> impl Future<Output = TransportResult<Option<FencingToken>>> + Send;

    /// The largest transaction timeout the cluster accepts, when it can be
    /// read (`transaction.max.timeout.ms`).
    fn max_transaction_timeout(
        &self,
    ) -> impl Future<Output = TransportResult<Option<Duration>>> + Send;
}

/// Reads the records of a role.
pub trait StateReader: Send + Sync {
    /// The partition count of the coordination topic.
    fn partitions(&self) -> i32;

    /// The committed records of `role`'s partition that belong to `role`,
    /// in offset order (records whose key does not decode are kept, so the
    /// state can report them). Aborted lease writes are never returned.
    fn read_role_records(
        &self,
        role: &str,
    ) -> impl Future<Output = TransportResult<Vec<LogRecord>>> + Send;
}

/// Appends registrations; carries no authority.
pub trait Registrar: Send + Sync {
    /// Appends the registration of `member`; returns its offset, the join sequence.
    fn register(
        &self,
        role: &str,
        member: &str,
        registered_at_ms: i64,
    ) -> impl Future<Output = TransportResult<i64>> + Send;

    /// Appends a tombstone of `member`'s registration.
    fn deregister(
        &self,
        role: &str,
        member: &str,
    ) -> impl Future<Output = TransportResult<i64>> + Send;
}

/// Writes the lease under a minted token; the broker checks the token.
pub trait LeaseWriter: Send + Sync {
    /// Writes `lease` in a transaction under `token`; returns its offset.
    fn write_lease(
        &self,
        role: &str,
        token: FencingToken,
        lease: &Lease,
    ) -> impl Future<Output = TransportResult<i64>> + Send;

    /// Clears the lease with a tombstone in a transaction under `token`.
    fn clear_lease(
        &self,
        role: &str,
        token: FencingToken,
    ) -> impl Future<Output = TransportResult<i64>> + Send;
}

/// Everything the leader-election client needs.
pub trait Transport: Coordinator + StateReader + Registrar + LeaseWriter {
    /// Releases what the transport created (connections, producers).
    fn close(&self) -> impl Future<Output = ()> + Send;
}
