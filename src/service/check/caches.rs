//! What the check path remembers between checks, bounded and tied to the
//! cluster it came from.
//!
//! - **Superseded tokens.** A token found superseded can never turn current
//!   again (a transactional id's pair only grows), so the verdict is kept
//!   and answered without a Kafka request. An `authoritative` verdict is
//!   never kept.
//! - **High-water marks.** The highest pair seen for each role, from any
//!   source: describes, lease records the watcher reads, the coordinator
//!   poller. A coordinator answering below it is stale (it paused and came
//!   back), and its answer is not used. Losing an entry (evicted, expired)
//!   may cost a retry the mark would have caused, never a wrong answer: the
//!   confirmation of every answer by a second broker is the first line.
//!
//! Both are keyed by the cluster's id: when the bootstrap address leads to
//! another cluster (rebuilt, disaster recovery), nothing learned of the old
//! one is used, and both are cleared.
//!
//! Both are bounded by the bytes their entries really take, everything
//! counted (see [`crate::bounded`]).

use std::sync::{Arc, RwLock};

use moka::sync::Cache;

use crate::bounded::{BoundedMap, MOKA_ENTRY_BYTES, allocated};
use crate::coordination::FencingToken;
use crate::sync::{read, write};

/// The bytes a superseded entry is counted as: its role name and state at
/// their allocation sizes and moka's entry.
pub(crate) fn superseded_entry_bytes(role: &str, by: &SupersededBy) -> u64 {
    allocated(role.len()) + allocated(by.state.len()) + MOKA_ENTRY_BYTES
}

/// What was learned when a token was found superseded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SupersededBy {
    /// The pair that superseded it, as described then.
    pub current: FencingToken,
    /// The transaction state described then.
    pub state: String,
    /// When it was described (epoch ms).
    pub checked_at_ms: i64,
}

/// The id of the cluster the entries came from.
pub(super) type ClusterId = Arc<str>;

/// The check path's memory.
#[derive(Debug)]
pub struct Caches {
    superseded: Cache<(ClusterId, String, FencingToken), SupersededBy>,
    /// Of the current cluster only (cleared when it changes).
    high_water: BoundedMap<FencingToken>,
    cluster: RwLock<Option<ClusterId>>,
}

impl Caches {
    /// Caches of at most `superseded_bytes` of superseded tokens and
    /// `high_water_bytes` of high-water marks, everything counted.
    pub fn new(superseded_bytes: u64, high_water_bytes: u64) -> Caches {
        Caches {
            superseded: Cache::builder()
                .max_capacity(superseded_bytes)
                .weigher(
                    |(_, role, _): &(ClusterId, String, FencingToken), by: &SupersededBy| {
                        u32::try_from(superseded_entry_bytes(role, by)).unwrap_or(u32::MAX)
                    },
                )
                .build(),
            high_water: BoundedMap::new(high_water_bytes),
            cluster: RwLock::default(),
        }
    }

    /// Follows the cluster's id: a new id clears everything. Returns the id
    /// to key entries by, `None` while it is unknown (nothing is cached then).
    pub fn cluster(&self, id: Option<Arc<str>>) -> Option<ClusterId> {
        let id = id?;
        if let Some(known) = read(&self.cluster).as_ref().filter(|known| ***known == *id) {
            return Some(known.clone());
        }
        let mut cluster = write(&self.cluster);
        match cluster.as_ref() {
            Some(known) if **known == *id => Some(known.clone()),
            known => {
                if let Some(old) = known {
                    tracing::warn!(old = %old, new = %id, "the cluster id changed; forgetting superseded tokens and high-water marks of the old cluster");
                    self.superseded.invalidate_all();
                    self.high_water.clear();
                }
                *cluster = Some(id.clone());
                Some(id)
            }
        }
    }

    /// The cached verdict of a token found superseded before.
    pub fn superseded(
        &self,
        cluster: &ClusterId,
        role: &str,
        token: FencingToken,
    ) -> Option<SupersededBy> {
        self.superseded
            .get(&(cluster.clone(), role.to_owned(), token))
    }

    /// Remembers that `token` of `role` is superseded.
    pub fn remember_superseded(
        &self,
        cluster: &ClusterId,
        role: &str,
        token: FencingToken,
        by: SupersededBy,
    ) {
        self.superseded
            .insert((cluster.clone(), role.to_owned(), token), by);
    }

    /// The highest pair seen for `role` (in `cluster`, the current one).
    pub fn high_water(&self, _cluster: &ClusterId, role: &str) -> Option<FencingToken> {
        self.high_water.get(role)
    }

    /// Raises the high-water mark of `role` to `pair` (never lowers it).
    pub fn raise(&self, _cluster: &ClusterId, role: &str, pair: FencingToken) {
        // Most checks see the mark they raised before: a read, no write.
        if self.high_water.get(role).is_some_and(|seen| seen >= pair) {
            return;
        }
        self.high_water.update(role, |seen| match seen {
            Some(seen) if *seen >= pair => Some(*seen),
            _ => Some(pair),
        });
    }

    /// Entries of each cache, for metrics.
    pub fn sizes(&self) -> (u64, u64) {
        self.superseded.run_pending_tasks();
        (
            self.superseded.entry_count(),
            self.high_water.size().0 as u64,
        )
    }

    /// Bytes each cache is accounted at (superseded, high-water marks),
    /// within their bounds.
    pub fn bytes(&self) -> (u64, u64) {
        self.superseded.run_pending_tasks();
        (self.superseded.weighted_size(), self.high_water.size().1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::t;

    #[test]
    fn a_high_water_mark_only_rises() {
        let caches = Caches::new(10, 1 << 20);
        let c = caches.cluster(Some("c1".into())).unwrap();
        assert_eq!(caches.high_water(&c, "r"), None);
        caches.raise(&c, "r", t(5, 2));
        caches.raise(&c, "r", t(5, 1));
        assert_eq!(caches.high_water(&c, "r"), Some(t(5, 2)));
        caches.raise(&c, "r", t(6, 0));
        assert_eq!(caches.high_water(&c, "r"), Some(t(6, 0)));
    }

    #[test]
    fn another_cluster_id_forgets_everything() {
        let caches = Caches::new(10, 1 << 20);
        let c1 = caches.cluster(Some("c1".into())).unwrap();
        caches.raise(&c1, "r", t(5, 2));
        let by = SupersededBy {
            current: t(5, 2),
            state: "Empty".into(),
            checked_at_ms: 0,
        };
        caches.remember_superseded(&c1, "r", t(5, 1), by.clone());
        assert_eq!(caches.superseded(&c1, "r", t(5, 1)), Some(by));
        assert_eq!(caches.cluster(None), None, "unknown: nothing cached");
        let c2 = caches.cluster(Some("c2".into())).unwrap();
        assert_eq!(caches.superseded(&c2, "r", t(5, 1)), None);
        assert_eq!(caches.high_water(&c2, "r"), None);
        assert_eq!(caches.superseded(&c1, "r", t(5, 1)), None, "cleared");
    }

    /// A flood of distinct names, short and long, up to and past both caps:
    /// the bytes accounted (names at their allocator size, values, per-entry
    /// and table overhead) never pass the bounds, and the caches do fill.
    #[test]
    fn a_flood_of_distinct_names_stays_within_both_bounds() {
        const SUPERSEDED: u64 = 4 << 20;
        const HIGH_WATER: u64 = 2 << 20;
        let by = SupersededBy {
            current: t(2, 0),
            state: "CompleteCommit".into(),
            checked_at_ms: 0,
        };
        for (len, count) in [(10, 30_000), (900, 12_000), (32_767, 300)] {
            let caches = Caches::new(SUPERSEDED, HIGH_WATER);
            let c = caches.cluster(Some("c".into())).unwrap();
            for i in 0..count {
                let role = format!("{i:0>len$}");
                caches.raise(&c, &role, t(1, 0));
                caches.remember_superseded(&c, &role, t(1, 0), by.clone());
                if i % 1000 == 0 {
                    let (superseded, high_water) = caches.bytes();
                    assert!(superseded <= SUPERSEDED, "{len}: {superseded}");
                    assert!(high_water <= HIGH_WATER, "{len}: {high_water}");
                }
            }
            let (superseded, high_water) = caches.bytes();
            assert!(superseded <= SUPERSEDED, "{len}: {superseded}");
            assert!(high_water <= HIGH_WATER, "{len}: {high_water}");
            // Full, not empty: the bound is what is used.
            assert!(superseded > SUPERSEDED / 2, "{len}: {superseded}");
            assert!(high_water > HIGH_WATER / 4, "{len}: {high_water}");
            let (entries, _) = caches.sizes();
            let per_entry = superseded / entries.max(1);
            assert!(
                per_entry >= allocated(len) + MOKA_ENTRY_BYTES,
                "{len}: {per_entry} bytes per entry"
            );
        }
    }
}
