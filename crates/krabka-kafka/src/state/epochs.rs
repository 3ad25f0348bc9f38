//! Which brokers' metadata is current, and which partition leaders another
//! broker confirmed: leader epochs compared across the brokers that answer
//! Metadata.
//!
//! Kafka's Java `Metadata` keeps the newer leader epoch of a partition when
//! a broker answers an older one, and goes on asking that broker. Here a
//! broker that stays behind is *stale*: a broker cut off from the controller
//! (a network partition of one link) keeps answering from the metadata it
//! had, naming itself leader and coordinator of partitions the controller
//! gave to others long ago, for as long as the partition lasts. Its
//! metadata log stopped as a whole, so one partition it reports behind
//! makes it stale for everything. The rules:
//!
//! - **Behind.** An answer reporting a lower leader epoch for a partition
//!   than another broker reported at least [`LAG_GRACE`] before the request
//!   was sent makes its broker stale. (A broker naming itself leader where
//!   another named a newer leader is the same rule: the newer leader has
//!   the higher epoch.) Brokers follow the controller's metadata log within
//!   milliseconds of each other, so a broker that reports an epoch another
//!   broker reported moments ago is lagging by a record, not cut off: its
//!   answer keeps the newer entries (Java's rule) and the broker is not
//!   suspected.
//! - **Deposed.** An answer that brings a newer leader for a partition makes
//!   the old leader stale (unless the answer is its own): it is asked for
//!   metadata before it is used again, since a deposed leader that did not
//!   hear of it is the broker this guards against. A healthy one catches up
//!   at its first probe.
//! - **Caught up.** A stale broker is not asked for metadata, coordinator
//!   lookups or confirmations; it is probed instead, with a Metadata request
//!   once per backoff step (`retry.backoff.ms` doubling to its max), and an
//!   answer that is behind nowhere *and reports every partition it was
//!   found behind on or deposed from* makes it current again. An answer
//!   that leaves those out (another topic list, a topic without its
//!   partitions) says nothing of them: a cut-off broker was seen caught up by
//!   one, and asked for lookups again while still cut off.
//!
//! Every instant here but a probe's gate is a [`boot_now`] instant (the
//! callers' send instants too): the grace and the confirmations are
//! measured on the clock that counts the time the host was suspended.
//! - **Confirmed.** An answer of a current broker Y naming broker L leader
//!   of a partition at the newest epoch, Y ≠ L, confirms that L led the
//!   partition when the request was sent. A read from L under that epoch is
//!   complete as of the earlier of its own send instant and the
//!   confirmation's ([`Epochs::complete_as_of`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::view::MetadataAnswer;
use crate::backoff::{Backoff, Gate, Jitter};
use crate::error::ResponseError;
use krabka_coordination::sync::lock;
use krabka_coordination::time::boot_now;

/// How long after another broker reported a newer leader epoch a broker may
/// still report the older one without being stale: brokers apply a
/// metadata record within milliseconds of each other; one half a second
/// behind is not following the controller. A broker cut off from the
/// controller keeps its partitions until `broker.session.timeout.ms` (9 s)
/// and is behind from then on.
pub(crate) const LAG_GRACE: Duration = Duration::from_millis(500);

/// The newest leader of one partition any broker reported.
#[derive(Debug)]
struct Newest {
    leader: i32,
    epoch: i32,
    /// When it was first reported.
    since: Instant,
    /// The partition's replicas at this epoch, as first reported (empty
    /// when no answer named them).
    replicas: Vec<i32>,
    /// Per other broker (node id), the send instant of its latest answer
    /// naming the same leader at the same epoch.
    confirmations: BTreeMap<i32, Instant>,
    /// The send instant of the leader's latest answer naming itself at this
    /// epoch on a connection opened for it (a cluster of one broker): it
    /// proves which process the address leads to, no replica's vote.
    alone: Option<Instant>,
}

impl Newest {
    /// The instant as of which enough replicas confirmed the leader: the
    /// latest instant `τ` such that RF − `min_isr` replicas other than the
    /// leader (one broker at least; any broker while the replicas are not
    /// known) named it in answers sent at `τ` or later. Kafka commits a
    /// write once every replica in the ISR fetched it, and only while the
    /// ISR holds `min_isr`: of those replicas and the leader, one fetched
    /// whatever another leader committed, and names that leader from then
    /// on (`describe::quorum` has the same rule for the coordinators).
    fn confirmed(&self, min_isr: i32) -> Option<Instant> {
        let need = self.need(min_isr);
        let identity = self.alone.filter(|_| self.replicas_needed(min_isr) == 0);
        let mut voters: Vec<Instant> = self
            .confirmations
            .iter()
            .filter(|(node, _)| self.votes(**node, min_isr))
            .map(|(_, at)| *at)
            .chain(identity)
            .collect();
        voters.sort_unstable_by(|a, b| b.cmp(a));
        voters.get(need - 1).copied()
    }

    /// How many brokers besides the leader must confirm it: RF − min.isr
    /// replicas, or one broker when that is none (RF 1, min.isr = RF, or
    /// replicas not known: the confirmation then proves the leader's epoch
    /// only, as before a quorum was asked).
    fn need(&self, min_isr: i32) -> usize {
        self.replicas_needed(min_isr).max(1)
    }

    fn replicas_needed(&self, min_isr: i32) -> usize {
        let min_isr = usize::try_from(min_isr.max(1)).unwrap_or(1);
        self.replicas.len().saturating_sub(min_isr)
    }

    /// Whether `node`'s confirmation counts (module docs of `describe::quorum`).
    fn votes(&self, node: i32, min_isr: i32) -> bool {
        node != self.leader && (self.replicas_needed(min_isr) == 0 || self.replicas.contains(&node))
    }
}

/// A broker whose metadata is behind.
#[derive(Debug)]
struct Behind {
    /// When it was first found behind.
    since: Instant,
    /// The next probe waits for this gate.
    probe: Gate,
    /// The partitions it was found behind on or deposed from: its answer
    /// must report each to catch up.
    on: Vec<(String, i32)>,
}

/// What one Metadata answer is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Judgement {
    /// As new as anything known: it is used.
    Current {
        /// Its broker was stale until this answer.
        caught_up: bool,
        /// Brokers deposed as leaders by this answer, newly stale, with why.
        deposed: Vec<(String, String)>,
    },
    /// Behind another broker's answer: not used.
    Stale {
        /// Its broker was not stale before.
        first: bool,
        /// It reported a partition behind (not merely left out one it
        /// was behind on).
        behind: bool,
        /// Which partition it reports behind.
        why: String,
    },
}

#[derive(Debug, Default)]
struct Inner {
    newest: HashMap<(String, i32), Newest>,
    stale: HashMap<String, Behind>,
}

/// Leader epochs across brokers: the stale brokers and the confirmations.
#[derive(Debug)]
pub(crate) struct Epochs {
    inner: Mutex<Inner>,
    /// True while any broker is stale: routing in a healthy cluster skips
    /// the lock.
    any_stale: AtomicBool,
    backoff: Backoff,
}

impl Epochs {
    /// Stale brokers are probed `probe` after they were found behind,
    /// doubling to `probe_max`.
    pub(super) fn new(probe: Duration, probe_max: Duration) -> Epochs {
        Epochs {
            inner: Mutex::default(),
            any_stale: AtomicBool::new(false),
            backoff: Backoff::new(probe, probe_max, Jitter::EQUAL),
        }
    }

    /// Judges `answer` of the broker at `from` (node id `from_id` when the
    /// answer lists it), whose request was sent at `sent`; see the module
    /// docs. A current answer's partitions reported behind the newest
    /// known (within the grace) are rewritten to the newest, so the view
    /// never goes back; `addr_of` names the brokers by id.
    pub(super) fn judge(
        &self,
        from: &str,
        from_id: Option<i32>,
        sent: Instant,
        answer: &mut MetadataAnswer,
        addr_of: &HashMap<i32, String>,
    ) -> Judgement {
        let now = boot_now();
        let mut inner = lock(&self.inner);
        let behind = answer.topics.iter().find_map(|(topic, meta)| {
            meta.partitions.iter().find_map(|p| {
                let newest = inner.newest.get(&(topic.clone(), p.index))?;
                (p.leader_epoch >= 0 && newest.epoch > p.leader_epoch).then(|| {
                    let why = format!(
                        "it reports leader {} at epoch {} for {topic}-{}, where another broker reported leader {} at epoch {} {} ms before the request",
                        p.leader,
                        p.leader_epoch,
                        p.index,
                        newest.leader,
                        newest.epoch,
                        sent.saturating_duration_since(newest.since).as_millis()
                    );
                    (why, newest.since, (topic.clone(), p.index))
                })
            })
        });
        let was_stale = inner.stale.contains_key(from);
        if was_stale
            && behind.is_none()
            && let Some(missing) = unreported(&inner.stale[from].on, answer)
        {
            return Judgement::Stale {
                first: false,
                behind: false,
                why: format!("its answer does not report {missing}, which it was behind on"),
            };
        }
        let caught_up = was_stale && behind.is_none();
        match behind {
            // Behind for longer than a moment, or still behind: stale.
            Some((why, since, on)) if was_stale || since + LAG_GRACE <= sent => {
                let first = self.mark(&mut inner, from, now, on);
                return Judgement::Stale {
                    first,
                    behind: true,
                    why,
                };
            }
            // Lagging by a moment: used (with the newer entries), and
            // nothing said of the broker.
            Some(_) => {}
            None => {
                inner.stale.remove(from);
            }
        }
        let mut deposed = Vec::new();
        for (topic, meta) in &mut answer.topics {
            for p in &mut meta.partitions {
                if p.leader_epoch < 0 {
                    continue;
                }
                let names_another = from_id.is_some_and(|id| id != p.leader) && p.leader >= 0;
                let key = (topic.clone(), p.index);
                match inner.newest.get(&key).map(|n| (n.leader, n.epoch)) {
                    // Lagging by a moment: keep the newer leader.
                    Some((leader, epoch)) if epoch > p.leader_epoch => {
                        p.leader = leader;
                        p.leader_epoch = epoch;
                    }
                    Some((leader, epoch)) if epoch == p.leader_epoch => {
                        if leader == p.leader
                            && let Some(newest) = inner.newest.get_mut(&key)
                        {
                            if newest.replicas.is_empty() {
                                newest.replicas.clone_from(&p.replicas);
                            }
                            if names_another && let Some(id) = from_id {
                                let at = newest.confirmations.entry(id).or_insert(sent);
                                *at = (*at).max(sent);
                            }
                        }
                    }
                    previous => {
                        if let Some((old_leader, old_epoch)) = previous
                            && old_leader >= 0
                            && old_leader != p.leader
                            && Some(old_leader) != from_id
                            && let Some(addr) = addr_of.get(&old_leader)
                            && addr != from
                        {
                            deposed.push((
                                addr.clone(),
                                format!(
                                    "it led {topic}-{} at epoch {old_epoch}, and broker {from} names leader {} at epoch {}",
                                    p.index, p.leader, p.leader_epoch
                                ),
                                key.clone(),
                            ));
                        }
                        let confirmations = from_id
                            .filter(|_| names_another)
                            .map(|id| (id, sent))
                            .into_iter()
                            .collect();
                        inner.newest.insert(
                            key,
                            Newest {
                                leader: p.leader,
                                epoch: p.leader_epoch,
                                since: now,
                                replicas: p.replicas.clone(),
                                confirmations,
                                alone: None,
                            },
                        );
                    }
                }
            }
        }
        // Each deposed broker once, and only when newly stale.
        let deposed = deposed
            .into_iter()
            .filter(|(addr, _, on)| self.mark(&mut inner, addr, now, on.clone()))
            .map(|(addr, why, _)| (addr, why))
            .collect();
        self.any_stale
            .store(!inner.stale.is_empty(), Ordering::Release);
        Judgement::Current { caught_up, deposed }
    }

    /// Marks `addr` stale; true when it was not before.
    fn mark(&self, inner: &mut Inner, addr: &str, now: Instant, on: (String, i32)) -> bool {
        if let Some(behind) = inner.stale.get_mut(addr) {
            if !behind.on.contains(&on) {
                behind.on.push(on);
            }
            return false;
        }
        let mut probe = Gate::new(self.backoff.clone());
        probe.shut(Instant::now());
        inner.stale.insert(
            addr.to_owned(),
            Behind {
                since: now,
                probe,
                on: vec![on],
            },
        );
        self.any_stale.store(true, Ordering::Release);
        true
    }

    /// True while `addr` is stale: not asked for metadata, lookups or
    /// confirmations.
    pub(crate) fn is_stale(&self, addr: &str) -> bool {
        self.any_stale.load(Ordering::Acquire) && lock(&self.inner).stale.contains_key(addr)
    }

    /// The stale brokers and since when.
    pub(crate) fn stale(&self) -> Vec<(String, Instant)> {
        if !self.any_stale.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut stale: Vec<(String, Instant)> = lock(&self.inner)
            .stale
            .iter()
            .map(|(addr, b)| (addr.clone(), b.since))
            .collect();
        stale.sort();
        stale
    }

    /// The stale brokers whose next probe is due, each with the topics of
    /// the partitions it must report to catch up; each one's gate shuts
    /// for the next step.
    pub(crate) fn due_probes(&self) -> Vec<(String, Vec<String>)> {
        if !self.any_stale.load(Ordering::Acquire) {
            return Vec::new();
        }
        let now = Instant::now();
        let mut inner = lock(&self.inner);
        let mut due: Vec<(&String, &mut Behind)> = inner
            .stale
            .iter_mut()
            .filter(|(_, b)| b.probe.is_open(now))
            .collect();
        // By address, not in the map's order: each shut draws its jitter,
        // so the order decides which broker gets which draw (a simulation's
        // seed decides a run, not a hasher).
        due.sort_unstable_by(|a, b| a.0.cmp(b.0));
        due.into_iter()
            .map(|(addr, b)| {
                b.probe.shut(now);
                let mut topics: Vec<String> = b.on.iter().map(|(t, _)| t.clone()).collect();
                topics.sort_unstable();
                topics.dedup();
                (addr.clone(), topics)
            })
            .collect()
    }

    /// The instant a read of `topic`-`partition` under leader epoch `epoch`
    /// sent at `fetched` is complete as of: the earlier of `fetched` and the
    /// instant enough replicas had confirmed that leader at that epoch
    /// (`Newest::confirmed`, the topic's `min_isr`). `None` when that epoch
    /// is not the newest or was never confirmed so.
    pub(crate) fn complete_as_of(
        &self,
        topic: &str,
        partition: i32,
        epoch: i32,
        fetched: Instant,
        min_isr: i32,
    ) -> Option<Instant> {
        let inner = lock(&self.inner);
        let newest = inner.newest.get(&(topic.to_owned(), partition))?;
        if newest.epoch != epoch {
            return None;
        }
        newest
            .confirmed(min_isr)
            .map(|confirmed| confirmed.min(fetched))
    }

    /// Takes in that `answer`, given at the leader's own address on a
    /// connection opened for it (sent at `sent`; `leader` is the node the
    /// answer lists there), names that node leader: for every partition
    /// where that is the newest leader at the newest epoch, the leader's
    /// process is the one the address leads to (counted where no replica
    /// besides the leader is needed: a cluster of one broker).
    pub(crate) fn confirm_alone(&self, leader: i32, sent: Instant, answer: &MetadataAnswer) {
        let mut inner = lock(&self.inner);
        for (topic, meta) in &answer.topics {
            for p in meta.partitions.iter().filter(|p| p.leader == leader) {
                if let Some(newest) = inner.newest.get_mut(&(topic.clone(), p.index))
                    && newest.leader == leader
                    && newest.epoch == p.leader_epoch
                {
                    newest.alone = Some(newest.alone.map_or(sent, |at| at.max(sent)));
                }
            }
        }
    }

    /// True when the newest leader of `topic`-`partition` was confirmed by
    /// enough replicas within `within`.
    pub(crate) fn confirmed_within(
        &self,
        topic: &str,
        partition: i32,
        within: Duration,
        min_isr: i32,
    ) -> bool {
        lock(&self.inner)
            .newest
            .get(&(topic.to_owned(), partition))
            .and_then(|n| n.confirmed(min_isr))
            .is_some_and(|at| boot_now().saturating_duration_since(at) < within)
    }

    /// The partitions of `topic` whose newest leader enough replicas have
    /// not confirmed in answers sent at `since` or later, each with the
    /// brokers (node ids) whose answer would add a confirmation: its
    /// replicas but the leader and those that confirmed since (every
    /// broker but those while its replicas are not known: `None`).
    pub(crate) fn unconfirmed_since(
        &self,
        topic: &str,
        since: Instant,
        min_isr: i32,
    ) -> Vec<(i32, Option<Vec<i32>>, Vec<i32>)> {
        let inner = lock(&self.inner);
        let mut lacking: Vec<(i32, Option<Vec<i32>>, Vec<i32>)> = inner
            .newest
            .iter()
            .filter(|((t, _), n)| t == topic && n.leader >= 0)
            .filter(|(_, n)| n.confirmed(min_isr).is_none_or(|at| at < since))
            .map(|((_, p), n)| {
                let done: Vec<i32> = n
                    .confirmations
                    .iter()
                    .filter(|(_, at)| **at >= since)
                    .map(|(node, _)| *node)
                    .chain(std::iter::once(n.leader))
                    .collect();
                let helpers = (n.replicas_needed(min_isr) > 0).then(|| {
                    n.replicas
                        .iter()
                        .copied()
                        .filter(|r| !done.contains(r))
                        .collect()
                });
                (*p, helpers, done)
            })
            .collect();
        lacking.sort_unstable_by_key(|(p, _, _)| *p);
        lacking
    }

    /// The newest leader epoch any current broker reported for
    /// `topic`-`partition`, if one did.
    pub(crate) fn newest_epoch(&self, topic: &str, partition: i32) -> Option<i32> {
        lock(&self.inner)
            .newest
            .get(&(topic.to_owned(), partition))
            .map(|n| n.epoch)
    }

    /// Forgets everything (another cluster).
    pub(super) fn clear(&self) {
        let mut inner = lock(&self.inner);
        inner.newest.clear();
        inner.stale.clear();
        self.any_stale.store(false, Ordering::Release);
    }
}

/// The first of `on` that `answer` does not report with a leader epoch
/// (as `topic-partition`), or `None` when it reports them all. A topic the
/// broker calls unknown reports its partitions: it was deleted (a broker
/// cut off before then still knows it, since it led a partition of it).
fn unreported(on: &[(String, i32)], answer: &MetadataAnswer) -> Option<String> {
    on.iter()
        .find(|(topic, index)| {
            !answer.topics.iter().any(|(t, meta)| {
                t == topic
                    && (meta.error == ResponseError::UnknownTopicOrPartition.code()
                        || meta
                            .partitions
                            .iter()
                            .any(|p| p.index == *index && p.leader_epoch >= 0))
            })
        })
        .map(|(topic, index)| format!("{topic}-{index}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BACKOFF: Duration = Duration::from_millis(100);

    fn epochs() -> Epochs {
        Epochs::new(BACKOFF, Duration::from_secs(1))
    }

    /// Partitions of topic "t" as (index, leader, epoch).
    fn answer(partitions: &[(i32, i32, i32)]) -> MetadataAnswer {
        MetadataAnswer::of_t("c", &[], partitions)
    }

    fn addrs() -> HashMap<i32, String> {
        (1..=3).map(|id| (id, format!("b:{id}"))).collect()
    }

    fn judge(epochs: &Epochs, from: i32, partitions: &[(i32, i32, i32)]) -> Judgement {
        let mut answer = answer(partitions);
        epochs.judge(
            &format!("b:{from}"),
            Some(from),
            boot_now(),
            &mut answer,
            &addrs(),
        )
    }

    fn current() -> Judgement {
        Judgement::Current {
            caught_up: false,
            deposed: Vec::new(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_broker_behind_another_is_stale_until_it_catches_up() {
        let epochs = epochs();
        // Broker 1 leads at epoch 4; broker 2 says broker 3 leads at 5.
        assert_eq!(judge(&epochs, 1, &[(0, 1, 4)]), current());
        let Judgement::Current { deposed, .. } = judge(&epochs, 2, &[(0, 3, 5)]) else {
            panic!("broker 2 is current");
        };
        assert_eq!(deposed.len(), 1, "the old leader");
        assert_eq!(deposed[0].0, "b:1");
        assert!(epochs.is_stale("b:1"));
        tokio::time::advance(LAG_GRACE).await;
        // Broker 1 still names itself at 4: cut off.
        let Judgement::Stale { first, why, .. } = judge(&epochs, 1, &[(0, 1, 4)]) else {
            panic!("broker 1 is behind");
        };
        assert!(!first, "already stale as the deposed leader");
        assert!(why.contains("t-0") && why.contains("epoch 4"), "{why}");
        assert_eq!(epochs.stale().len(), 1);
        // The leader moves again (broker 3, deposed, is stale too); broker
        // 1 catching up with the move before is still behind, even within
        // the grace of the newest: it stays stale.
        judge(&epochs, 2, &[(0, 2, 6)]);
        assert!(matches!(
            judge(&epochs, 1, &[(0, 3, 5)]),
            Judgement::Stale { first: false, .. }
        ));
        // It caught up.
        let caught = judge(&epochs, 1, &[(0, 2, 6)]);
        assert_eq!(
            caught,
            Judgement::Current {
                caught_up: true,
                deposed: Vec::new()
            }
        );
        assert!(!epochs.is_stale("b:1"));
        assert_eq!(epochs.stale().len(), 1, "broker 3 until it answers");
        judge(&epochs, 3, &[(0, 2, 6)]);
        assert!(epochs.stale().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_broker_catches_up_only_by_reporting_the_partitions_it_was_behind_on() {
        // Broker 1 led t-0 at epoch 4; broker 2 names broker 3 at 5: broker
        // 1 is deposed, stale on t-0.
        let epochs = epochs();
        judge(&epochs, 1, &[(0, 1, 4)]);
        judge(&epochs, 2, &[(0, 3, 5)]);
        assert!(epochs.is_stale("b:1"));
        // Answers that leave t-0 out say nothing of it: a cut-off broker
        // answering another partition, or the topic without partitions, is
        // still stale.
        for silent in [&[(1, 2, 7)][..], &[]] {
            let judged = judge(&epochs, 1, silent);
            assert!(
                matches!(&judged, Judgement::Stale { first: false, why, .. } if why.contains("t-0")),
                "{silent:?}: {judged:?}"
            );
            assert!(epochs.is_stale("b:1"));
        }
        // Its probe asks for t.
        tokio::time::advance(Duration::from_secs(60)).await;
        let probes = epochs.due_probes();
        assert_eq!(probes, [("b:1".to_owned(), vec!["t".to_owned()])]);
        // Reporting t-0 at the newest epoch catches it up.
        let caught = judge(&epochs, 1, &[(0, 3, 5), (1, 2, 7)]);
        assert!(matches!(
            caught,
            Judgement::Current {
                caught_up: true,
                ..
            }
        ));
        assert!(!epochs.is_stale("b:1"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_broker_lagging_by_a_moment_is_not_stale_and_keeps_the_newer_leader() {
        let epochs = epochs();
        judge(&epochs, 1, &[(0, 1, 4), (1, 2, 7)]);
        judge(&epochs, 2, &[(0, 3, 5), (1, 2, 7)]);
        tokio::time::advance(LAG_GRACE - Duration::from_millis(1)).await;
        let mut lagging = answer(&[(0, 1, 4), (1, 2, 7)]);
        let judged = epochs.judge("b:3", Some(3), boot_now(), &mut lagging, &addrs());
        assert_eq!(judged, current(), "broker 3 lags by a record");
        let p0 = &lagging.topics[0].1.partitions[0];
        assert_eq!(
            (p0.leader, p0.leader_epoch),
            (3, 5),
            "the newer leader kept"
        );
        assert!(!epochs.is_stale("b:3"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_broker_is_probed_once_per_growing_step() {
        let epochs = epochs();
        judge(&epochs, 2, &[(0, 3, 5)]);
        tokio::time::advance(LAG_GRACE).await;
        assert!(matches!(
            judge(&epochs, 1, &[(0, 1, 4)]),
            Judgement::Stale { first: true, .. }
        ));
        assert!(epochs.due_probes().is_empty(), "not at once");
        let mut probes = 0;
        for _ in 0..40 {
            tokio::time::advance(Duration::from_millis(50)).await;
            probes += epochs.due_probes().len();
        }
        // Steps of 100, 200, 400, 800, 1000 ms (each 50-100 %) within 2 s.
        assert!((3..=6).contains(&probes), "{probes} probes in 2 s");
    }

    #[tokio::test(start_paused = true)]
    async fn another_broker_confirms_a_leader_as_of_its_request() {
        let epochs = epochs();
        let t0 = boot_now();
        // The leader's own answer confirms nothing.
        judge(&epochs, 1, &[(0, 1, 4)]);
        assert_eq!(epochs.complete_as_of("t", 0, 4, t0, 2), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        let confirmed = boot_now();
        judge(&epochs, 2, &[(0, 1, 4)]);
        tokio::time::advance(Duration::from_secs(1)).await;
        let read = boot_now();
        assert_eq!(
            epochs.complete_as_of("t", 0, 4, read, 2),
            Some(confirmed),
            "a later read: as of the confirmation"
        );
        assert_eq!(
            epochs.complete_as_of("t", 0, 4, t0, 2),
            Some(t0),
            "an earlier one"
        );
        assert_eq!(
            epochs.complete_as_of("t", 0, 3, read, 2),
            None,
            "another epoch"
        );
        // The leader moves: reads under the old epoch are not confirmed.
        judge(&epochs, 2, &[(0, 3, 5)]);
        assert_eq!(epochs.complete_as_of("t", 0, 4, read, 2), None);
        assert_eq!(
            epochs.complete_as_of("t", 0, 5, read, 2),
            Some(read),
            "the answer that moved it confirms the new leader"
        );
        epochs.clear();
        assert_eq!(epochs.complete_as_of("t", 0, 5, read, 2), None);
    }

    /// Issue 52: the leader of partition 0 is broker 1, its replicas
    /// [1, 2, 3]; broker 4 holds none. Broker 4's word confirms nothing
    /// (a rack cut from the controllers: broker 4 and a deposed broker 1
    /// behind together); RF − min.isr replicas besides the leader must
    /// speak, and the read is complete as of the earliest of them.
    #[tokio::test(start_paused = true)]
    async fn only_enough_replicas_confirm_a_leader() {
        let epochs = epochs();
        let from = |epochs: &Epochs, id: i32| {
            let mut answer = answer(&[(0, 1, 4)]);
            answer.topics[0].1.partitions[0].replicas = vec![1, 2, 3];
            let mut addrs = addrs();
            addrs.insert(4, "b:4".into());
            epochs.judge(
                &format!("b:{id}"),
                Some(id),
                boot_now(),
                &mut answer,
                &addrs,
            )
        };
        from(&epochs, 1);
        from(&epochs, 4);
        let read = boot_now();
        assert_eq!(epochs.complete_as_of("t", 0, 4, read, 2), None, "broker 4");
        tokio::time::advance(Duration::from_secs(1)).await;
        let by_2 = boot_now();
        from(&epochs, 2);
        tokio::time::advance(Duration::from_secs(1)).await;
        let later = boot_now();
        assert_eq!(epochs.complete_as_of("t", 0, 4, later, 2), Some(by_2));
        // min.isr 1: both other replicas, as of the earlier of the two.
        assert_eq!(epochs.complete_as_of("t", 0, 4, later, 1), None);
        from(&epochs, 3);
        assert_eq!(epochs.complete_as_of("t", 0, 4, later, 1), Some(by_2));
        assert!(epochs.confirmed_within("t", 0, Duration::from_secs(2), 1));
        // What a round of confirmations still lacks, since an instant.
        tokio::time::advance(Duration::from_secs(1)).await;
        let round = boot_now();
        let lacking = epochs.unconfirmed_since("t", round, 2);
        assert_eq!(lacking, [(0, Some(vec![2, 3]), vec![1])]);
        assert!(epochs.unconfirmed_since("t", later, 2).is_empty());
        // RF 1 (or min.isr = RF): any other broker, for the epoch alone.
        assert_eq!(epochs.complete_as_of("t", 0, 4, later, 3), Some(later));
    }

    /// Issue 52 (2): one broker, RF 1. Its answers on its shared
    /// connections confirm nothing; its address asked on a connection of
    /// its own confirms the epoch it names, and only that one (a
    /// replacement behind the address leads at a newer epoch), and never
    /// where a replica besides the leader is needed.
    #[tokio::test(start_paused = true)]
    async fn on_one_broker_its_own_answer_on_a_connection_of_its_own_confirms_it() {
        let fresh = epochs();
        let epochs = epochs();
        let one = |epoch: i32| {
            let mut answer = answer(&[(0, 1, epoch)]);
            answer.topics[0].1.partitions[0].replicas = vec![1];
            answer
        };
        let addrs: HashMap<i32, String> = HashMap::from([(1, "b:1".into())]);
        epochs.judge("b:1", Some(1), boot_now(), &mut one(4), &addrs);
        let read = boot_now();
        assert_eq!(
            epochs.complete_as_of("t", 0, 4, read, 1),
            None,
            "its own word"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        let alone = boot_now();
        let mut answered = one(4);
        epochs.judge("b:1", Some(1), alone, &mut answered, &addrs);
        epochs.confirm_alone(1, alone, &answered);
        assert_eq!(epochs.complete_as_of("t", 0, 4, read, 1), Some(read));
        tokio::time::advance(Duration::from_secs(1)).await;
        let later = boot_now();
        assert_eq!(epochs.complete_as_of("t", 0, 4, later, 1), Some(alone));
        assert!(epochs.confirmed_within("t", 0, Duration::from_secs(2), 1));
        // Three replicas, two of them unlisted (fenced): no replica voted.
        let mut three = answer(&[(0, 1, 4)]);
        three.topics[0].1.partitions[0].replicas = vec![1, 2, 3];
        fresh.judge("b:1", Some(1), later, &mut three.clone(), &addrs);
        fresh.confirm_alone(1, later, &three);
        assert_eq!(fresh.complete_as_of("t", 0, 4, later, 2), None);
        // The replacement answers at epoch 6: the old epoch is done.
        let mut moved = one(6);
        epochs.judge("b:1", Some(1), later, &mut moved, &addrs);
        epochs.confirm_alone(1, later, &moved);
        assert_eq!(epochs.complete_as_of("t", 0, 4, later, 1), None);
        assert_eq!(epochs.complete_as_of("t", 0, 6, later, 1), Some(later));
    }
}
