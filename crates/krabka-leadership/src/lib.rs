//! The leader-election client (seed 000, "The client"): acquire a role,
//! renew its lease in the background, resign; and the third party's
//! `describe_leadership`.
//!
//! The epoch is the safety mechanism and the lease is not: a wrong lease
//! makes a failover early or late, never two writers authoritative. A holder
//! passes its token with every guarded write and the broker checks it.
//!
//! The client runs over any transport of the seam
//! (`krabka_coordination::transport`): `krabka_kafka::KafkaTransport` for
//! a real cluster, `krabka_coordination::transport::memory` in tests. A
//! member depends on this crate and `krabka-kafka` alone: no HTTP server,
//! metrics or command line.

mod acquire;
mod describe;
mod error;
mod events;
mod options;

pub use acquire::{Leadership, acquire};
pub use describe::{LeadershipStatus, describe_leadership, describe_role_state};
pub use error::LeadershipError;
pub use events::Event;
pub use options::{EventSink, Options};

#[cfg(test)]
mod tests;
