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
//!   state, succession). No I/O, no clock, no randomness.

pub mod cli;
#[cfg(feature = "client")]
pub mod client;
pub mod commands;
pub mod coordination;
pub mod demo;
pub mod kafka;
pub mod leadership;
pub mod service;
pub mod transport;

/// Compiles the README's examples, so they cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
