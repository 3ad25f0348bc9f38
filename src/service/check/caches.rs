//! What the check path remembers between checks, bounded and tied to the
//! cluster it came from.
//!
//! - **Superseded tokens.** A token under the current pair's producer id
//!   with an earlier epoch can never be current again (a producer id's
//!   epoch only grows), so the verdict is kept and answered without a
//!   Kafka request. Nothing else is kept: not `authoritative`, and not a
//!   refusal of a token of another producer id (Kafka does not order
//!   producer ids: a role's next id may be any, lower or higher).
//! - **Producer ids held.** Per role, the producer ids a confirmed
//!   coordinator answer (a check's, the coordinator poller's) named, each
//!   with the highest epoch seen under it, the last few only. An answer
//!   with an earlier epoch of one of them comes from a stale coordinator
//!   (it paused and came back), and is not used; a token of one of them
//!   that is not the current pair's is over for good (a producer id never
//!   comes back to a role once it left). And a producer id is retired once
//!   another one was seen in an answer asked after an answer naming it
//!   came back: every answer naming it after that comes from a stale
//!   coordinator. Asked after, not raised after: answers are taken in in
//!   the order their callers get to it, which a slow check reorders, so
//!   each id keeps when it was asked (the describe call's start and end). Lease records in the topic, which
//!   any member writes as it likes, are not taken in. Losing an entry
//!   (evicted) may cost a retry the mark would have caused, or call a token
//!   `unknown` that would have been `superseded`, never a wrong answer: the
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
use tokio::time::Instant;

use crate::bounded::{BoundedMap, HeapSize, MOKA_ENTRY_BYTES, allocated};
use crate::cluster::Lowest;
use crate::coordination::FencingToken;
use crate::sync::{read, write};

/// The bytes a superseded entry is counted as: its role name at its
/// allocation size and moka's entry.
pub(crate) fn superseded_entry_bytes(role: &str) -> u64 {
    allocated(role.len()) + MOKA_ENTRY_BYTES
}

/// What was learned when a token was found superseded for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SupersededBy {
    /// The pair that superseded it, as described then.
    pub pair: FencingToken,
    /// When it was described (epoch ms).
    pub seen_at_ms: i64,
}

/// How many of a role's producer ids are remembered.
const HELD_IDS: usize = 4;

/// When a coordinator's confirmed answer was asked for, on the boot clock
/// (`time::boot_now`): the describe call began and ended; the pair it named
/// was current at an instant between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asked {
    /// Before the call's requests were sent.
    pub began: Instant,
    /// After its answer came back.
    pub ended: Instant,
}

/// One producer id a role held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HeldId {
    id: i64,
    /// The highest epoch seen under it.
    epoch: i16,
    /// The latest start of a call whose answer named it (as of the last
    /// write: a later answer with no new epoch is not written).
    began: Instant,
    /// The end of the first call whose answer named it: the earliest the
    /// id is known to have been current by.
    ended: Instant,
}

/// The producer ids a role was seen to hold, each with the highest epoch
/// seen under it, the most recently raised first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held([Option<HeldId>; HELD_IDS]);

impl Held {
    /// The highest epoch seen under `producer_id`, if it was seen.
    pub fn epoch_of(&self, producer_id: i64) -> Option<i16> {
        self.get(producer_id).map(|h| h.epoch)
    }

    /// What an answer naming `producer_id` may carry: retired when another
    /// id was asked after an answer naming this one ended (the other was
    /// current later, and ids never come back); else the highest epoch seen.
    pub fn lowest(&self, producer_id: i64) -> Option<Lowest> {
        let held = self.get(producer_id)?;
        let later = self
            .0
            .iter()
            .flatten()
            .any(|other| other.id != producer_id && other.began > held.ended);
        Some(if later {
            Lowest::Retired
        } else {
            Lowest::Epoch(held.epoch)
        })
    }

    /// Whether raising `pair`, `asked` then, would change what the marks
    /// refuse: not when its id is the newest at that epoch or higher and
    /// the later start would retire no id that is not retired already.
    fn would_change(&self, pair: FencingToken, asked: Asked) -> bool {
        let Some(newest) = self.0[0] else {
            return true;
        };
        let retires_more = asked.began > newest.began
            && self
                .0
                .iter()
                .flatten()
                .any(|o| o.id != newest.id && o.ended >= newest.began && o.ended < asked.began);
        newest.id != pair.producer_id() || newest.epoch < pair.producer_epoch() || retires_more
    }

    fn get(&self, producer_id: i64) -> Option<&HeldId> {
        self.0.iter().flatten().find(|h| h.id == producer_id)
    }

    /// `pair` seen in an answer `asked` then: its producer id first, with
    /// the higher epoch and the later start; the oldest id dropped when
    /// full.
    fn raise(&mut self, pair: FencingToken, asked: Asked) {
        let id = pair.producer_id();
        let held = match self.get(id) {
            Some(h) => HeldId {
                id,
                epoch: h.epoch.max(pair.producer_epoch()),
                began: h.began.max(asked.began),
                ended: h.ended.min(asked.ended),
            },
            None => HeldId {
                id,
                epoch: pair.producer_epoch(),
                began: asked.began,
                ended: asked.ended,
            },
        };
        let mut next = [None; HELD_IDS];
        next[0] = Some(held);
        let rest = self.0.iter().flatten().filter(|h| h.id != id);
        for (slot, seen) in next[1..].iter_mut().zip(rest) {
            *slot = Some(*seen);
        }
        self.0 = next;
    }
}

/// Producer ids and epochs hold nothing on the heap.
impl HeapSize for Held {
    fn heap_bytes(&self) -> u64 {
        0
    }
}

/// The id of the cluster the entries came from.
pub(super) type ClusterId = Arc<str>;

/// The check path's memory.
#[derive(Debug)]
pub struct Caches {
    superseded: Cache<(ClusterId, String, FencingToken), SupersededBy>,
    /// Of the current cluster only (cleared when it changes).
    held: BoundedMap<Held>,
    cluster: RwLock<Option<ClusterId>>,
}

impl Caches {
    /// Caches of at most `superseded_bytes` of superseded tokens and
    /// `held_bytes` of producer ids held, everything counted.
    pub fn new(superseded_bytes: u64, held_bytes: u64) -> Caches {
        Caches {
            superseded: Cache::builder()
                .max_capacity(superseded_bytes)
                .weigher(
                    |(_, role, _): &(ClusterId, String, FencingToken), _: &SupersededBy| {
                        u32::try_from(superseded_entry_bytes(role)).unwrap_or(u32::MAX)
                    },
                )
                .build(),
            held: BoundedMap::new(held_bytes),
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
                    tracing::warn!(old = %old, new = %id, "the cluster id changed; forgetting superseded tokens and producer ids of the old cluster");
                    self.superseded.invalidate_all();
                    self.held.clear();
                }
                *cluster = Some(id.clone());
                Some(id)
            }
        }
    }

    /// The cached verdict of a token found superseded for good before.
    pub fn superseded(
        &self,
        cluster: &ClusterId,
        role: &str,
        token: FencingToken,
    ) -> Option<SupersededBy> {
        self.superseded
            .get(&(cluster.clone(), role.to_owned(), token))
    }

    /// Remembers that `token` of `role` is superseded for good.
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

    /// The producer ids `role` was seen to hold (in `cluster`, the current
    /// one).
    pub fn held(&self, _cluster: &ClusterId, role: &str) -> Option<Held> {
        self.held.get(role)
    }

    /// Takes in that a confirmed answer of `cluster`, `asked` then, named
    /// `pair` current for `role`; nothing when another cluster is the
    /// current one (the answer was in flight across the change). Under the
    /// cluster's read lock: a change, which clears the marks, waits for it.
    pub fn raise(&self, cluster: &ClusterId, role: &str, pair: FencingToken, asked: Asked) {
        let current = read(&self.cluster);
        if current.as_deref() != Some(&**cluster) {
            return;
        }
        // Most checks see the pair they raised before: a read, no write.
        if self
            .held
            .get(role)
            .is_some_and(|h| !h.would_change(pair, asked))
        {
            return;
        }
        self.held.update(role, |held| {
            let mut held = held.copied().unwrap_or_default();
            held.raise(pair, asked);
            Some(held)
        });
    }

    /// Entries of each cache, for metrics.
    pub fn sizes(&self) -> (u64, u64) {
        self.superseded.run_pending_tasks();
        (self.superseded.entry_count(), self.held.size().0 as u64)
    }

    /// Bytes each cache is accounted at (superseded, producer ids held),
    /// within their bounds.
    pub fn bytes(&self) -> (u64, u64) {
        self.superseded.run_pending_tasks();
        (self.superseded.weighted_size(), self.held.size().1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::t;
    use crate::time::boot_now;
    use std::time::Duration;

    /// Asked now, answered at once.
    fn asked() -> Asked {
        let now = boot_now();
        Asked {
            began: now,
            ended: now,
        }
    }

    /// Issue 52 (6): a role's producer id 5 is replaced by 7 (its epochs
    /// ran out, or its transactional id expired). A check asked before the
    /// rotation that was slow to come back is taken in after a check of
    /// the new id: the order of raising is not the order of the answers.
    /// Id 5 is retired once 7 was asked after an answer naming 5 ended,
    /// whatever the order of raising; and not by a call that overlapped it.
    #[test]
    fn a_producer_id_is_retired_by_an_answer_asked_after_it_not_raised_after_it() {
        let caches = Caches::new(10, 1 << 20);
        let c = caches.cluster(Some("c1".into())).unwrap();
        let t0 = boot_now();
        let at = |from: u64, to: u64| Asked {
            began: t0 + Duration::from_millis(from),
            ended: t0 + Duration::from_millis(to),
        };
        // The slow check of 5 began first and overlaps the one of 7.
        caches.raise(&c, "r", t(5, 3), at(0, 50));
        caches.raise(&c, "r", t(7, 0), at(10, 20));
        let held = caches.held(&c, "r").unwrap();
        assert_eq!(held.lowest(5), Some(Lowest::Epoch(3)), "overlapping calls");
        assert_eq!(held.lowest(7), Some(Lowest::Epoch(0)));
        // 7 asked after 5's answer ended: 5 is done, though raised last.
        caches.raise(&c, "r", t(7, 0), at(60, 70));
        caches.raise(&c, "r", t(5, 3), at(1, 80));
        let held = caches.held(&c, "r").unwrap();
        assert_eq!(held.lowest(5), Some(Lowest::Retired));
        assert_eq!(held.lowest(7), Some(Lowest::Epoch(0)), "the newest stays");
        assert_eq!(held.lowest(9), None, "an id never seen: Kafka orders none");
        assert!(Lowest::Retired.refuses(i16::MAX));
        assert!(!Lowest::Epoch(3).refuses(3) && Lowest::Epoch(3).refuses(2));
    }

    #[test]
    fn each_producer_id_keeps_its_highest_epoch_the_last_few_ids_only() {
        let caches = Caches::new(10, 1 << 20);
        let c = caches.cluster(Some("c1".into())).unwrap();
        assert_eq!(caches.held(&c, "r"), None);
        caches.raise(&c, "r", t(5, 2), asked());
        caches.raise(&c, "r", t(5, 1), asked());
        let held = caches.held(&c, "r").unwrap();
        assert_eq!(held.epoch_of(5), Some(2));
        // The id went down (another broker's block): both are held.
        caches.raise(&c, "r", t(1, 0), asked());
        let held = caches.held(&c, "r").unwrap();
        assert_eq!((held.epoch_of(5), held.epoch_of(1)), (Some(2), Some(0)));
        caches.raise(&c, "r", t(5, 3), asked());
        assert_eq!(caches.held(&c, "r").unwrap().epoch_of(5), Some(3));
        for id in 10..14 {
            caches.raise(&c, "r", t(id, 0), asked());
        }
        let held = caches.held(&c, "r").unwrap();
        assert_eq!(held.epoch_of(5), None, "the oldest dropped");
        assert_eq!(held.epoch_of(13), Some(0));
        assert_eq!(held.epoch_of(10), Some(0));
    }

    #[test]
    fn another_cluster_id_forgets_everything() {
        let caches = Caches::new(10_000, 1 << 20);
        let c1 = caches.cluster(Some("c1".into())).unwrap();
        caches.raise(&c1, "r", t(5, 2), asked());
        let by = SupersededBy {
            pair: t(5, 2),
            seen_at_ms: 0,
        };
        caches.remember_superseded(&c1, "r", t(5, 1), by);
        assert_eq!(caches.superseded(&c1, "r", t(5, 1)), Some(by));
        assert_eq!(caches.cluster(None), None, "unknown: nothing cached");
        let c2 = caches.cluster(Some("c2".into())).unwrap();
        assert_eq!(caches.superseded(&c2, "r", t(5, 1)), None);
        assert_eq!(caches.held(&c2, "r"), None);
        assert_eq!(caches.superseded(&c1, "r", t(5, 1)), None, "cleared");
    }

    /// A flood of distinct names, short and long, up to and past both caps:
    /// the bytes accounted (names at their allocator size, values, per-entry
    /// and table overhead) never pass the bounds, and the caches do fill.
    #[test]
    fn a_flood_of_distinct_names_stays_within_both_bounds() {
        const SUPERSEDED: u64 = 4 << 20;
        const HELD: u64 = 2 << 20;
        let by = SupersededBy {
            pair: t(2, 0),
            seen_at_ms: 0,
        };
        for (len, count) in [(10, 30_000), (900, 12_000), (32_767, 300)] {
            let caches = Caches::new(SUPERSEDED, HELD);
            let c = caches.cluster(Some("c".into())).unwrap();
            for i in 0..count {
                let role = format!("{i:0>len$}");
                caches.raise(&c, &role, t(1, 0), asked());
                caches.remember_superseded(&c, &role, t(1, 0), by);
                if i % 1000 == 0 {
                    let (superseded, held) = caches.bytes();
                    assert!(superseded <= SUPERSEDED, "{len}: {superseded}");
                    assert!(held <= HELD, "{len}: {held}");
                }
            }
            let (superseded, held) = caches.bytes();
            assert!(superseded <= SUPERSEDED, "{len}: {superseded}");
            assert!(held <= HELD, "{len}: {held}");
            // Full, not empty: the bound is what is used.
            assert!(superseded > SUPERSEDED / 2, "{len}: {superseded}");
            assert!(held > HELD / 4, "{len}: {held}");
            let (entries, _) = caches.sizes();
            let per_entry = superseded / entries.max(1);
            assert!(
                per_entry >= allocated(len) + MOKA_ENTRY_BYTES,
                "{len}: {per_entry} bytes per entry"
            );
        }
    }
}
