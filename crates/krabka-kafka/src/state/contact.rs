//! Which cluster the client is in contact with now: its live connections
//! whose broker is still heard from, per the cluster id their broker gave
//! when each one opened.
//!
//! What is remembered of a cluster (superseded tokens, high-water marks) is
//! only good while the client still talks to that cluster. Once every
//! connection is gone (the brokers stopped, the network cut), the next
//! broker reached behind the same addresses may be another cluster (one
//! re-created, a DNS name moved to a disaster-recovery cluster), and only a
//! new connection's first answer, its cluster id, says which. So a
//! connection counts from the moment its broker named its cluster until it
//! fails or is dropped, and only while its broker was heard from within
//! `connection::SILENCE` (a hung link resets nothing: the connection looks
//! alive until a request on it times out, and for ever with nothing to
//! ask); the client is *in contact* with the known cluster while one of
//! its connections counts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::connection::Answering;
use krabka_coordination::sync::lock;

/// Per cluster id, its connections by a number of their own.
type Live = Arc<Mutex<HashMap<Arc<str>, HashMap<u64, Answering>>>>;

/// Live connections per cluster id.
#[derive(Debug, Default)]
pub(crate) struct Contact {
    live: Live,
    next: std::sync::atomic::AtomicU64,
}

impl Contact {
    /// Counts one connection whose broker said it belongs to `cluster`,
    /// while `answering` says it is heard from, until the returned guard
    /// is dropped.
    pub(crate) fn connected(&self, cluster: Arc<str>, answering: Answering) -> Counted {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.live)
            .entry(cluster.clone())
            .or_default()
            .insert(id, answering);
        Counted {
            live: self.live.clone(),
            cluster,
            id,
        }
    }

    /// Connections of `cluster` that count now.
    pub(crate) fn live(&self, cluster: &str) -> usize {
        lock(&self.live)
            .get(cluster)
            .map_or(0, |c| c.values().filter(|a| a.now()).count())
    }
}

/// One counted connection; dropped when it fails or closes.
#[derive(Debug)]
pub(crate) struct Counted {
    live: Live,
    cluster: Arc<str>,
    id: u64,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut live = lock(&self.live);
        if let Some(c) = live.get_mut(&self.cluster) {
            c.remove(&self.id);
            if c.is_empty() {
                live.remove(&self.cluster);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::{ConnSettings, Connection};

    fn connection() -> Connection {
        let (ours, _peer) = tokio::io::duplex(1024);
        let settings = ConnSettings {
            client_id: "test".into(),
            max_frame_bytes: 1024,
        };
        Connection::start(ours, "b:1", settings)
    }

    #[tokio::test]
    async fn a_cluster_is_in_contact_while_one_of_its_connections_is_heard_from() {
        let contact = Contact::default();
        let (c1, c2, c3) = (connection(), connection(), connection());
        let a1 = contact.connected("a".into(), c1.answering());
        let a2 = contact.connected("a".into(), c2.answering());
        let b = contact.connected("b".into(), c3.answering());
        assert_eq!((contact.live("a"), contact.live("b")), (2, 1));
        drop(a1);
        assert_eq!(contact.live("a"), 1);
        // A connection gone (failed, dropped) no longer counts, even
        // before its guard is dropped.
        c2.close("gone");
        assert_eq!(contact.live("a"), 0);
        drop(a2);
        drop(b);
        assert_eq!((contact.live("a"), contact.live("b")), (0, 0));
        assert!(lock(&contact.live).is_empty(), "no id is kept");
    }
}
