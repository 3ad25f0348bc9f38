//! Kafka-fenced leader election, its core: ported byte for byte from the
//! Go and Java coordination packages.
//!
//! # Layout
//!
//! - At the root, the pure rules: fencing token, record format, role
//!   partition, role state, succession rules and the verdict of an
//!   authority check. Nothing there does I/O, reads a clock or draws a
//!   random number; time is an argument (`now_ms`), so every rule is tested
//!   with explicit instants.
//! - [`transport`]: the seam of the leader-election client (what a member
//!   asks of Kafka), with an in-memory cluster ([`transport::memory`]) for
//!   tests of the rules without a broker.
//! - [`cluster`]: the seam of the authority-check service (what it asks of
//!   a cluster), which the in-memory cluster answers too.
//! - [`time`]: clocks (the system's, and a manual one for tests) and how
//!   instants are written.
//! - [`sync`]: locks that survive a panic elsewhere, for every crate of the
//!   workspace.
//!
//! The Kafka client is `krabka-kafka`, the leader-election client
//! `krabka-leadership`.

mod partition;
mod record;
mod state;
mod succession;

pub mod cluster;
pub mod sync;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod time;
pub mod transport;

pub use partition::{PartitionError, murmur2, role_partition, to_positive};
pub use record::{
    EncodeError, FormatError, Key, KeyKind, Lease, MAX_STRING_LEN, Part, Registration, decode_key,
    decode_lease, decode_registration, encode_key, encode_lease, encode_registration, is_tombstone,
};
pub use state::{
    Applied, Change, LogRecord, Malformed, Member, PartitionState, RoleState, SkippedBatch,
};
pub use succession::{Decision, SuccessionConfig, challenge_at, challenge_rank, evaluate};
// The token and the verdict are spoken by the clients too: they live in
// the types crate the service and its clients share.
pub use krabka_authority_types::{
    FencingToken, TokenError, TokenPart, Verdict, superseded_for_good, verdict,
};

#[cfg(test)]
mod vectors;
