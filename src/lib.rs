//! The authority-check service of Kafka-fenced leader election, and the
//! command line around it.
//!
//! One member per role does the work; Kafka's transaction coordinator mints
//! the fencing token `(producer id, producer epoch)` for
//! `transactional.id = <role>` and the brokers reject writes of a deposed
//! holder. The service answers whether a token is a role's authority now,
//! live from the coordinator, and serves who holds each role.
//!
//! # Layout
//!
//! The library is three crates of its own, re-exported here under their
//! old names:
//! - [`coordination`] (`krabka-coordination`): the pure rules (token,
//!   record format, partition, role state, succession, the verdict of a
//!   check), the transport seam with an in-memory cluster
//!   ([`transport`]), the service's seam ([`cluster`]), clocks ([`time`]);
//! - [`kafka`] (`krabka-kafka`): all Kafka I/O, `KafkaTransport`;
//! - [`leadership`] (`krabka-leadership`): the leader-election client.
//!
//! A member that takes a role depends on `krabka-leadership` and
//! `krabka-kafka` alone. This crate adds:
//! - [`service`]: the authority-check service;
//! - [`kafka_settings`]: the Kafka flags of every subcommand;
//! - the binary `krabka-authority` (`src/main.rs`, `src/cli/`).
//!
//! The token, the verdict, the problem body and the input rules are shared
//! with the service's clients through the `krabka-authority-types` crate;
//! the HTTP client and its tower guard are the `krabka-authority-client`
//! crate, which depends on neither Kafka nor this server.
//!
//! The fast tier's tests share their builders and `eventually` in
//! `krabka_coordination::testkit`, and the service's in `testkit`.

pub use krabka_coordination as coordination;
pub use krabka_coordination::{cluster, time, transport};
pub use krabka_kafka as kafka;
pub use krabka_leadership as leadership;

pub mod kafka_settings;
pub mod service;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod testkit;

use krabka_coordination::sync;
use krabka_kafka::{backoff, bounded, files};

/// Compiles the README's examples, so they cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// Compiles the Rust examples of docs/client.md (the leader-election client,
/// the guard of a sink), so they cannot rot either.
#[doc = include_str!("../docs/client.md")]
#[cfg(doctest)]
pub struct ClientDocDoctests;
