//! Kafka for Kafka-fenced leader election: a small client over the
//! `kafka-protocol` message types (framing, pipelining, version
//! negotiation, metadata, leader and coordinator routing, retries, TLS and
//! SASL) and [`KafkaTransport`], the leader-election client's transport.
//! It answers the authority-check service's seam too
//! (`krabka_coordination::cluster::Cluster` for [`KafkaClient`]).
//!
//! Every Kafka struct stays inside this crate.
//!
//! # Layout
//!
//! State and operations are apart. `state/` holds what the client knows of
//! the cluster (brokers' failures, metadata, coordinators, waiting
//! describes), each table with one owner, and `ClusterState::learn`, the one
//! place that decides what an outcome teaches (suspect, refresh, forget).
//! [`KafkaClient`] is the connector (connections and routing); each
//! operation is a handle it hands out, in the operation's file:
//! [`Describer`], [`Lookup`], [`ClusterMetadata`], [`Producer`], [`Topics`],
//! [`Reader`]. Each builds its request and parses the answer with pure
//! `build_*`/`parse_*` functions, sends it through the client, and hands
//! the outcome to the state. Imports go one way (`a ─► b`: `a` imports
//! `b`); a test below keeps it so:
//!
//! ```text
//!  transport ─► txn ─► produce                         (the seams)
//!      └──────► topic
//!  tail ─► fetch ─► batch ─► inflate     describe/ ─► coordinator, retry
//!  metadata    cluster                   (the handles and the seams' impls)
//!      │ every operation
//!      ▼
//!  client ─► connection, security, tls, versions       (connections, routing)
//!      │
//!      ▼
//!  state/: mod ─► nodes, contact, view, epochs, coordinators, describes,
//!         confirms, ranking (what is known, and whom to ask)
//!      │
//!      ▼
//!  config ─► security ─► connection ─► versions
//!      └───► observe
//!  error: every file; backoff, bounded, files, host below all
//! ```
//!
//! [`backoff`], [`bounded`] and [`files`] are the workspace's one retry
//! policy, bounded memory and watched files, and [`host`] its sockets and
//! random draws (a simulation's in the simulation tier); the service uses
//! them too.
//! The scripted brokers of the tests are `fake` (feature `fake`).

pub mod backoff;
mod batch;
pub mod bounded;
mod client;
mod cluster;
mod config;
mod connection;
mod coordinator;
mod describe;
mod error;
#[cfg(test)]
mod failures;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
mod fetch;
pub mod files;
pub mod host;
mod inflate;
mod metadata;
mod observe;
mod produce;
mod retry;
#[cfg(test)]
mod rotation;
mod security;
mod settled;
mod state;
mod tail;
mod tls;
mod topic;
mod transport;
mod txn;
mod versions;

pub use client::KafkaClient;
pub use config::{Broker, ClientConfig};
pub use coordinator::Lookup;
pub use describe::CONFIRM_WINDOW;
pub use describe::Describer;
pub use error::{FENCED, KafkaError, ResponseError, is_retriable};
pub use fetch::Reader;
pub use fetch::{
    Cursor, DEFAULT_MAX_BATCH_BYTES, EARLIEST, FetchChunk, FetchPosition, LATEST, PartitionRead,
};
pub use metadata::ClusterMetadata;
pub use observe::{Outcome, RequestObserver, StaleReason};
pub use produce::Producer;
pub use security::{SaslConfig, SaslMechanism, Secret, Security, TlsConfig};
pub use state::{DescribeAnswer, PartitionMeta, TopicMeta, TransactionDescription};
pub use tls::TlsStatus;
pub use topic::TopicSpec;
pub use topic::Topics;
pub use transport::{DEFAULT_TOPIC, GuardedRecord, KafkaTransport, TransportConfig};
pub use txn::{ProducerSession, Transaction, TxnError};
pub use versions::api_name;

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    /// The files of this crate a file imports (`use super::x` or
    /// `use crate::x`, outside its tests); `nested` for a file of
    /// `state/` other than its `mod.rs`, whose `super` is `state`.
    fn imports(source: &str, nested: bool) -> BTreeSet<String> {
        let code = source
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or(source);
        let prefixes: &[&str] = if nested {
            &["use super::super::", "use crate::"]
        } else {
            &["use super::", "use crate::"]
        };
        code.lines()
            .filter_map(|line| prefixes.iter().find_map(|p| line.strip_prefix(p)))
            .filter_map(|rest| rest.split([':', ';', '{']).next())
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn no_file_of_the_kafka_room_imports_one_that_imports_it_back() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        // The crate's files, and its folders as one node each (their
        // files' `super` is the folder); the test-only `failures/` apart.
        for (folder, room) in [
            (dir.clone(), None),
            (dir.join("state"), Some("state")),
            (dir.join("describe"), Some("describe")),
        ] {
            for entry in std::fs::read_dir(&folder).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                let name = path.file_stem().unwrap().to_string_lossy().into_owned();
                if name == "lib" && room.is_none() {
                    continue;
                }
                let nested = room.is_some() && name != "mod";
                let node = room.map_or(name, str::to_owned);
                let mut uses = imports(&std::fs::read_to_string(&path).unwrap(), nested);
                uses.remove(&node);
                uses.remove("failures");
                graph.entry(node).or_default().extend(uses);
            }
        }
        assert!(graph["client"].contains("state"), "the walk reads imports");
        assert!(graph["state"].contains("observe"), "and those of state/");
        assert!(
            graph["describe"].contains("client"),
            "and those of describe/"
        );
        // Depth-first: a file met again while its own imports are walked
        // closes a circle.
        fn walk<'a>(
            node: &'a str,
            graph: &'a BTreeMap<String, BTreeSet<String>>,
            path: &mut Vec<&'a str>,
            done: &mut BTreeSet<&'a str>,
        ) {
            if done.contains(node) {
                return;
            }
            assert!(!path.contains(&node), "a circle: {path:?} -> {node}");
            path.push(node);
            for next in graph.get(node).into_iter().flatten() {
                walk(next, graph, path, done);
            }
            path.pop();
            done.insert(node);
        }
        let mut done = BTreeSet::new();
        for node in graph.keys() {
            walk(node, &graph, &mut Vec::new(), &mut done);
        }
    }
}
