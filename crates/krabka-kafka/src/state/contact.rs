//! Which cluster the client is in contact with now: its live connections,
//! counted per the cluster id their broker gave when each one opened.
//!
//! What is remembered of a cluster (superseded tokens, high-water marks) is
//! only good while the client still talks to that cluster. Once every
//! connection is gone (the brokers stopped, the network cut), the next
//! broker reached behind the same addresses may be another cluster (one
//! re-created, a DNS name moved to a disaster-recovery cluster), and only a
//! new connection's first answer, its cluster id, says which. So a
//! connection counts from the moment its broker named its cluster until it
//! fails or is dropped, and the client is *in contact* with the known
//! cluster while one of its connections counts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use krabka_coordination::sync::lock;

type Live = Arc<Mutex<HashMap<Arc<str>, usize>>>;

/// Live connections per cluster id.
#[derive(Debug, Default)]
pub(crate) struct Contact {
    live: Live,
}

impl Contact {
    /// Counts one connection whose broker said it belongs to `cluster`,
    /// until the returned guard is dropped.
    pub(crate) fn connected(&self, cluster: Arc<str>) -> Counted {
        *lock(&self.live).entry(cluster.clone()).or_default() += 1;
        Counted {
            live: self.live.clone(),
            cluster,
        }
    }

    /// Connections counted for `cluster` now.
    pub(crate) fn live(&self, cluster: &str) -> usize {
        lock(&self.live).get(cluster).copied().unwrap_or(0)
    }
}

/// One counted connection; dropped when it fails or closes.
#[derive(Debug)]
pub(crate) struct Counted {
    live: Live,
    cluster: Arc<str>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut live = lock(&self.live);
        if let Some(n) = live.get_mut(&self.cluster) {
            *n -= 1;
            if *n == 0 {
                live.remove(&self.cluster);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_is_in_contact_while_one_of_its_connections_lives() {
        let contact = Contact::default();
        let a1 = contact.connected("a".into());
        let a2 = contact.connected("a".into());
        let b = contact.connected("b".into());
        assert_eq!((contact.live("a"), contact.live("b")), (2, 1));
        drop(a1);
        assert_eq!(contact.live("a"), 1);
        drop(a2);
        drop(b);
        assert_eq!((contact.live("a"), contact.live("b")), (0, 0));
        assert!(lock(&contact.live).is_empty(), "no id is kept");
    }
}
