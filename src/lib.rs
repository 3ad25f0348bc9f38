//! Kafka-fenced leader election, ported byte for byte from the Go and Java
//! coordination packages, and the building blocks of an authority-check
//! service.
//!
//! One member per role does the work; Kafka's transaction coordinator mints
//! the fencing token `(producer id, producer epoch)` for
//! `transactional.id = <role>` and the brokers reject writes of a deposed
//! holder. Candidates register in the compacted topic
//! `__coordination_state`; their join order is their rank.
//!
//! # Layout
//!
//! - [`coordination`]: the pure rules (token, record format, partition, role
//!   state, succession, the verdict of a check). No I/O, no clock, no
//!   randomness.
//! - [`transport`]: the seam of the leader-election client, with an
//!   in-memory cluster for tests; [`leadership`]: the client itself.
//! - [`cluster`]: the seam of the service (what it asks of a cluster).
//! - [`kafka`]: all Kafka I/O: the client, `KafkaTransport`, the settings.
//! - [`service`]: the authority-check service.
//!
//! The token, the verdict, the problem body and the input rules are shared
//! with the service's clients through the `krabka-authority-types` crate;
//! the HTTP client and its tower guard are the `krabka-authority-client`
//! crate, which depends on neither Kafka nor this server.
//! - [`time`]: clocks and how instants are written.
//!
//! The fast tier's tests share their builders and `eventually` in
//! `testkit` (compiled for tests only).

mod backoff;
mod bounded;
pub mod cluster;
pub mod coordination;
mod files;
pub mod kafka;
pub mod leadership;
pub mod service;
mod sync;
#[cfg(test)]
mod testkit;
pub mod time;
pub mod transport;

/// Compiles the README's examples, so they cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// Compiles the Rust examples of docs/client.md (the leader-election client,
/// the guard of a sink), so they cannot rot either.
#[doc = include_str!("../docs/client.md")]
#[cfg(doctest)]
pub struct ClientDocDoctests;
