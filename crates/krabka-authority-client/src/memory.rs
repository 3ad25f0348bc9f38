//! The client's memory of superseded verdicts: a token under the current
//! pair's producer id with an earlier epoch is never current again (a
//! producer id's epoch only grows), so the verdict is answered locally
//! from then on. `authoritative` is never kept, nor a refusal of a token
//! of another producer id (Kafka does not order producer ids).
//!
//! Tied to a cluster: each verdict names the Kafka cluster it speaks for,
//! and a cluster rebuilt behind the same addresses mints low pairs again
//! (0:0, 0:1), so a verdict of one cluster says nothing of another. The
//! memory keeps the verdicts of the cluster the service named last, and
//! answers only while that is recent: the service asked that cluster's
//! coordinator for a verdict within the trust window, and no check came
//! back undecided since (a 503 is what a cluster going away looks like). A
//! verdict naming another cluster clears it.
//!
//! The window counts from when the service's word could at the earliest
//! have been taken, never from when it arrived: from the moment the request
//! of a fresh verdict was sent (the service asks the coordinator after a
//! request arrives), on the boot clock ([`crate::clock`]), so neither a
//! slow answer nor a suspended host stretches it. A verdict from the
//! service's cache renews nothing: the service serves it while a broker of
//! the cluster answered within the last second or so, and the wire does not
//! say when (`checkedAt` is when the cache was read, `supersededBy.seenAt`
//! when the pair was first seen).
//!
//! Bounded by bytes, counting each entry's strings and a fixed overhead for
//! the rest (the table slot, the allocations' headers). When an insert
//! would pass the bound, entries are dropped in the table's hash order
//! (arbitrary, not chosen by whoever names the roles) until half the bound
//! is free: a dropped verdict only costs a request.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use krabka_authority_types::FencingToken;

use crate::clock::boot_now;

/// What an entry weighs besides its strings: the key and value structs in
/// the table (about 100 bytes with the control byte) and the allocator's
/// headers of its strings, rounded up.
pub(crate) const ENTRY_OVERHEAD: u64 = 200;

/// A superseded verdict as remembered: the pair that superseded the token
/// and when the service saw it.
#[derive(Clone, Debug)]
pub(crate) struct Remembered {
    pub(crate) by: FencingToken,
    pub(crate) seen_at: String,
}

type Key = (String, FencingToken);

fn weight(key: &Key, seen: &Remembered) -> u64 {
    let strings = key.0.len() + seen.seen_at.len();
    ENTRY_OVERHEAD + strings as u64
}

#[derive(Debug, Default)]
struct Table {
    /// The cluster the entries speak for, and since when on the boot clock
    /// a fresh verdict backs it (its request's sending; `None`: distrusted
    /// until the next).
    cluster: Option<(String, Option<Duration>)>,
    /// When a check last came back undecided, on the boot clock: a verdict
    /// asked before then (in flight meanwhile) backs nothing after it.
    distrusted: Option<Duration>,
    entries: HashMap<Key, Remembered>,
    bytes: u64,
}

/// Superseded verdicts by (role, token) of one cluster, at most
/// `max_bytes` as weighed, answered within `trust` of the request of a
/// fresh verdict naming it.
#[derive(Debug)]
pub(crate) struct SupersededMemory {
    table: Mutex<Table>,
    max_bytes: u64,
    trust: Duration,
}

impl SupersededMemory {
    pub(crate) fn new(max_bytes: u64, trust: Duration) -> SupersededMemory {
        SupersededMemory {
            table: Mutex::default(),
            max_bytes,
            trust,
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The remembered verdict on `token` of `role` and its cluster, while
    /// the memory is trusted.
    pub(crate) fn get(&self, role: &str, token: FencingToken) -> Option<(Remembered, String)> {
        let table = self.table();
        let (cluster, named) = table.cluster.as_ref()?;
        if named.is_none_or(|at| boot_now().saturating_sub(at) > self.trust) {
            return None;
        }
        // The key is built only to look up; roles are short in practice.
        let seen = table.entries.get(&(role.to_owned(), token))?.clone();
        Some((seen, cluster.clone()))
    }

    /// The service reached a verdict that speaks for `cluster`, asked at
    /// `asked_at` on the boot clock (`None`: from the service's cache, of
    /// no known age): another cluster's verdicts are forgotten, this one's
    /// trusted from `asked_at`, unless a check came back undecided since.
    pub(crate) fn named(&self, cluster: &str, asked_at: Option<Duration>) {
        let mut table = self.table();
        let distrusted = table.distrusted;
        let backs = asked_at.filter(|at| distrusted.is_none_or(|d| *at > d));
        match &mut table.cluster {
            Some((known, at)) if known == cluster => {
                // The latest backing wins: an answer that arrives after a
                // later-sent one does not pull the window back.
                if backs.is_some() {
                    *at = (*at).max(backs);
                }
            }
            _ => {
                table.entries.clear();
                table.bytes = 0;
                table.cluster = Some((cluster.to_owned(), backs));
            }
        }
    }

    /// A check came back undecided: nothing is answered from memory until
    /// the service names its cluster again in a verdict asked after now.
    pub(crate) fn distrust(&self) {
        let mut table = self.table();
        table.distrusted = Some(boot_now());
        if let Some((_, at)) = &mut table.cluster {
            *at = None;
        }
    }

    /// Remembers a verdict of `cluster` (the one named last; another's is
    /// not kept).
    pub(crate) fn insert(
        &self,
        cluster: &str,
        role: String,
        token: FencingToken,
        seen: Remembered,
    ) {
        let key = (role, token);
        let cost = weight(&key, &seen);
        if cost > self.max_bytes {
            return;
        }
        let mut table = self.table();
        if table
            .cluster
            .as_ref()
            .is_none_or(|(known, _)| known != cluster)
        {
            return;
        }
        if let Some(old) = table.entries.remove(&key) {
            table.bytes -= weight(&key, &old);
        }
        if table.bytes + cost > self.max_bytes {
            let target = self.max_bytes / 2;
            let Table { entries, bytes, .. } = &mut *table;
            entries.retain(|k, v| {
                if *bytes + cost <= target {
                    return true;
                }
                *bytes -= weight(k, v);
                false
            });
        }
        table.bytes += cost;
        table.entries.insert(key, seen);
    }

    /// Entries and their weight in bytes.
    pub(crate) fn usage(&self) -> (u64, u64) {
        let table = self.table();
        (table.entries.len() as u64, table.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRUST: Duration = Duration::from_secs(10);

    fn seen() -> Remembered {
        Remembered {
            by: FencingToken::new(1, 1).expect("a token"),
            seen_at: "2026-12-01T00:00:00.000Z".into(),
        }
    }

    #[test]
    fn the_weight_never_passes_the_bound_and_half_is_freed_when_full() {
        let bound = 10_000;
        let memory = SupersededMemory::new(bound, TRUST);
        memory.named("c", Some(boot_now()));
        let token = FencingToken::new(1, 0).expect("a token");
        let mut most = 0;
        for i in 0..1_000 {
            memory.insert("c", format!("{i:0>100}"), token, seen());
            let (entries, bytes) = memory.usage();
            assert!(bytes <= bound, "{bytes} > {bound}");
            most = most.max(entries);
        }
        let per_entry = weight(&("r".repeat(100), token), &seen());
        assert_eq!(most, bound / per_entry, "fills up to the bound");
        let (entries, _) = memory.usage();
        assert!(entries >= most / 2, "keeps about half when full: {entries}");
        assert!(
            memory.get(&format!("{:0>100}", 999), token).is_some(),
            "the last one is kept"
        );
    }

    #[test]
    fn an_entry_over_the_whole_bound_is_not_kept_and_a_repeat_is_counted_once() {
        let memory = SupersededMemory::new(1_000, TRUST);
        memory.named("c", Some(boot_now()));
        let token = FencingToken::new(1, 0).expect("a token");
        memory.insert("c", "r".repeat(2_000), token, seen());
        assert_eq!(memory.usage(), (0, 0));
        memory.insert("c", "orders".into(), token, seen());
        let once = memory.usage();
        memory.insert("c", "orders".into(), token, seen());
        assert_eq!(memory.usage(), once);
    }

    /// Issue 44 (5): a cluster rebuilt behind the service's addresses
    /// mints 0:0 again; the old cluster's "0:0 is superseded" must not
    /// refuse it.
    #[test]
    fn verdicts_answer_only_for_the_cluster_named_last_and_lately() {
        let memory = SupersededMemory::new(10_000, Duration::from_millis(50));
        let token = FencingToken::new(0, 0).expect("a token");
        memory.insert("a", "r".into(), token, seen());
        assert_eq!(memory.usage().0, 0, "no cluster named yet: nothing kept");
        memory.named("a", Some(boot_now()));
        memory.insert("a", "r".into(), token, seen());
        assert_eq!(memory.get("r", token).map(|(_, c)| c).as_deref(), Some("a"));
        memory.distrust();
        assert!(memory.get("r", token).is_none(), "undecided since");
        memory.named("a", Some(boot_now()));
        assert!(memory.get("r", token).is_some(), "named again");
        crate::clock::simulate_suspend(Duration::from_millis(60));
        assert!(memory.get("r", token).is_none(), "not named lately");
        memory.named("b", Some(boot_now()));
        assert_eq!(memory.usage().0, 0, "another cluster: forgotten");
        assert!(memory.get("r", token).is_none());
        memory.insert("a", "r".into(), token, seen());
        assert_eq!(
            memory.usage().0,
            0,
            "a late verdict of the old cluster is not kept"
        );
    }

    /// Issue 52 (6): trust rests on a word of the coordinator asked for
    /// after the latest undecided check; neither a cached verdict nor one
    /// whose request was in flight across a 503 restores it, and a window
    /// counts from the request's sending.
    #[test]
    fn only_a_verdict_asked_after_the_latest_undecided_check_restores_trust() {
        use crate::clock::simulate_suspend;
        let memory = SupersededMemory::new(10_000, TRUST);
        let token = FencingToken::new(0, 0).expect("a token");
        memory.named("c", Some(boot_now()));
        memory.insert("c", "r".into(), token, seen());
        let in_flight = boot_now();
        simulate_suspend(Duration::from_millis(1));
        memory.distrust();
        simulate_suspend(Duration::from_millis(1));
        memory.named("c", Some(in_flight));
        assert!(memory.get("r", token).is_none(), "asked before the 503");
        memory.named("c", None);
        assert!(memory.get("r", token).is_none(), "a cached verdict");
        memory.named("c", Some(boot_now()));
        assert!(memory.get("r", token).is_some(), "asked after the 503");
        // Arriving late, an earlier request does not pull the window back.
        memory.named("c", Some(in_flight));
        simulate_suspend(TRUST - Duration::from_millis(500));
        assert!(memory.get("r", token).is_some(), "within the window");
        simulate_suspend(Duration::from_secs(1));
        assert!(memory.get("r", token).is_none(), "past it");
    }
}
