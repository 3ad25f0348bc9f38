//! Which broker to ask, best first: the one rule for a request any broker
//! can answer (metadata, coordinator lookups, topic configs) and for the
//! broker that confirms the describes' answers, as Kafka's Java client
//! ranks nodes (`NetworkClient.leastLoadedNode`, which prefers a ready
//! node to one it must connect to, and skips nodes in reconnect backoff).
//!
//! What is known of a broker is one [`Candidate`]; the two orders are
//! made from it here, and nowhere else:
//! - [`rank`], for a request any broker can answer: brokers with a live
//!   connection, the fewest requests in flight first; then brokers not
//!   connected yet; then those being connected to (maybe a hung one that
//!   accepts and answers nothing); then those whose reconnect backoff ended
//!   without an answer since (asked first, a hung broker would cost every
//!   request a hedge delay); brokers in reconnect backoff last;
//! - [`confirming`], for the broker that confirms describes: the sound
//!   ones before the *doubtful* (a broker that has not answered since a
//!   failure: a hung one, whose requests time out, stays so after its
//!   backoff; or one with a slow confirmation in flight), none in
//!   reconnect backoff, and the doubtful left out while two sound ones can
//!   confirm each other's batches. Within each group the load spreads at
//!   random: every broker confirms in turn, the connected or not.
//!
//! Ties go in random order in both. Brokers whose metadata is behind
//! another broker's (stale, `epochs`) are never asked.

/// The connection the client has to a broker now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Link {
    /// Open, with this many requests in flight.
    Live { in_flight: usize },
    /// Being opened by another caller.
    Connecting,
    /// None.
    Closed,
}

/// What is known of one broker when choosing one to ask.
#[derive(Clone, Debug)]
pub(crate) struct Candidate<T> {
    /// What the caller gets back for it (an address, a broker).
    pub(crate) item: T,
    pub(crate) link: Link,
    /// Failures since it last answered.
    pub(crate) failures: u32,
    /// In reconnect backoff.
    pub(crate) blocked: bool,
    /// Its metadata is behind another broker's.
    pub(crate) stale: bool,
    /// A confirmation sent to it is slower than the hedge delay.
    pub(crate) slow: bool,
}

impl<T> Candidate<T> {
    /// Not answered since a failure, or slow to confirm.
    fn doubtful(&self) -> bool {
        self.slow || self.failures > 0
    }

    /// Its place for a request any broker can answer (and its load).
    fn routing(&self) -> (u8, usize) {
        match self.link {
            Link::Live { in_flight } => (0, in_flight),
            Link::Connecting => (2, 0),
            Link::Closed if self.blocked => (4, 0),
            Link::Closed if self.failures > 0 => (3, 0),
            Link::Closed => (1, 0),
        }
    }
}

/// Every candidate that is not stale, best first for a request any broker
/// can answer.
pub(crate) fn rank<T>(candidates: Vec<Candidate<T>>) -> Vec<T> {
    sorted(candidates, |c| Some(c.routing()))
}

/// The brokers that may confirm, best first (the module docs).
pub(crate) fn confirming<T>(candidates: Vec<Candidate<T>>) -> Vec<T> {
    let sound = candidates
        .iter()
        .filter(|c| !c.stale && !c.blocked && !c.doubtful())
        .count();
    sorted(candidates, |c| {
        let doubtful = c.doubtful();
        (!c.blocked && (!doubtful || sound < 2)).then_some((u8::from(doubtful), 0))
    })
}

/// The candidates `key` keeps (and is not stale), by that key, ties at
/// random.
fn sorted<T>(
    candidates: Vec<Candidate<T>>,
    key: impl Fn(&Candidate<T>) -> Option<(u8, usize)>,
) -> Vec<T> {
    let mut ranked: Vec<((u8, usize, u32), T)> = candidates
        .into_iter()
        .filter(|c| !c.stale)
        .filter_map(|c| {
            let (tier, load) = key(&c)?;
            Some(((tier, load, crate::host::random::<u32>()), c.item))
        })
        .collect();
    ranked.sort_unstable_by_key(|(key, _)| *key);
    ranked.into_iter().map(|(_, item)| item).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(item: &'static str, link: Link) -> Candidate<&'static str> {
        Candidate {
            item,
            link,
            failures: 0,
            blocked: false,
            stale: false,
            slow: false,
        }
    }

    #[test]
    fn live_and_least_loaded_first_then_fresh_then_connecting_failed_and_blocked() {
        let mut failed = candidate("failed", Link::Closed);
        failed.failures = 1;
        let mut blocked = candidate("blocked", Link::Closed);
        blocked.blocked = true;
        let mut stale = candidate("stale", Link::Live { in_flight: 0 });
        stale.stale = true;
        let order = rank(vec![
            blocked.clone(),
            failed.clone(),
            candidate("connecting", Link::Connecting),
            candidate("fresh", Link::Closed),
            candidate("busy", Link::Live { in_flight: 5 }),
            candidate("idle", Link::Live { in_flight: 1 }),
            stale,
        ]);
        assert_eq!(
            order,
            ["idle", "busy", "fresh", "connecting", "failed", "blocked"]
        );
    }

    #[test]
    fn a_confirmation_skips_backoff_and_the_doubtful_while_two_sound_brokers_remain() {
        let mut slow = candidate("slow", Link::Live { in_flight: 0 });
        slow.slow = true;
        let mut blocked = candidate("blocked", Link::Closed);
        blocked.blocked = true;
        let mut two = confirming(vec![
            slow.clone(),
            blocked.clone(),
            candidate("a", Link::Live { in_flight: 0 }),
            candidate("b", Link::Closed),
        ]);
        two.sort_unstable();
        assert_eq!(two, ["a", "b"], "the sound, connected or not, in any order");
        let one = confirming(vec![
            slow,
            blocked,
            candidate("a", Link::Live { in_flight: 0 }),
        ]);
        assert_eq!(one, ["a", "slow"], "a doubtful broker is better than none");
    }
}
