//! Integration tests against a real Apache Kafka broker (one test binary).
//!
//! Run with `scripts/test`, which starts a broker and sets
//! `KRABKA_TEST_BOOTSTRAP`; without it the tests start one themselves.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    unreachable_pub
)]

mod bombs;
mod cli;
mod clients;
mod cluster;
mod faults;
mod fresh_install;
mod guarded_sink;
mod kafka_transport;
mod leadership;
mod prometheus;
mod replaced;
mod rotation;
mod security;
mod service;
mod soak;
mod split_brain;
mod status_page;
mod support;
mod watcher;
