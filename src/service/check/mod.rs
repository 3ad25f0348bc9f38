//! The one check path: `GET /roles/{role}/authority`, `POST
//! /authority/check` and the `check` subcommand all come here.
//!
//! A check is answered from the superseded cache when the token was found
//! superseded for good before; otherwise from the transaction coordinator,
//! asked after the check arrived (batched with every concurrent check by
//! the cluster client), with the highest epoch seen under each producer id
//! of the role as the floor below which an answer is stale. An
//! `authoritative` verdict is never cached. Every answer names the cluster
//! it speaks for; a check during which another cluster answered behind the
//! addresses is not answered (503: ask again).

mod caches;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::time::Instant;

pub use caches::{Asked, Caches, Held, SupersededBy};

use crate::cluster::{Cluster, ClusterError, Described, Lowest};
use crate::coordination::{FencingToken, Verdict, superseded_for_good, verdict};
use crate::time::{Clock, Rfc3339Ms, boot_now};
use caches::ClusterId;
use krabka_authority_types::Sighting;

/// The answer to one check, as the wire contract of the types crate has
/// it, with the service's own instant.
pub type CheckAnswer = krabka_authority_types::CheckAnswer<Rfc3339Ms>;

/// Checks tokens against the coordinator, with the caches.
#[derive(Debug)]
pub struct Checker {
    cluster: Arc<dyn Cluster>,
    caches: Caches,
    clock: Arc<dyn Clock>,
}

impl Checker {
    /// A checker over `cluster`, remembering at most `superseded_bytes` of
    /// superseded tokens and `held_bytes` of the producer ids roles held.
    pub fn new(
        cluster: Arc<dyn Cluster>,
        clock: Arc<dyn Clock>,
        superseded_bytes: u64,
        held_bytes: u64,
    ) -> Checker {
        Checker {
            cluster,
            caches: Caches::new(superseded_bytes, held_bytes),
            clock,
        }
    }

    /// The caches, for metrics.
    pub fn caches(&self) -> &Caches {
        &self.caches
    }

    /// Takes in a pair a confirmed coordinator answer of `cluster`,
    /// `asked` then, named current for `role` elsewhere (the coordinator
    /// poller): nothing when another cluster answers now (the answer was
    /// in flight across the change, and its epochs would be a floor for the
    /// new cluster's pairs of the same producer id).
    pub fn observe(&self, cluster: &str, role: &str, pair: FencingToken, asked: Asked) {
        if let Some(current) = self.caches.cluster(self.cluster.cluster_id())
            && *current == *cluster
        {
            self.caches.raise(&current, role, pair, asked);
        }
    }

    /// What an answer for `role` under `producer_id` may carry, while the
    /// cluster is still the one in contact (`caches`).
    pub fn floor(&self, role: &str, producer_id: i64) -> Option<Lowest> {
        let cluster = self.caches.cluster(self.cluster.cluster_id())?;
        self.caches.held(&cluster, role)?.lowest(producer_id)
    }

    /// Checks one token of one role.
    pub async fn check(
        &self,
        role: &str,
        token: FencingToken,
        deadline: Instant,
    ) -> Result<CheckAnswer, ClusterError> {
        let changes = self.cluster.cluster_changes();
        let cluster = self.caches.cluster(self.cluster.cluster_id());
        if let Some(hit) = self.cached(cluster.as_ref(), role, token) {
            return Ok(hit);
        }
        let floor = |role: &str, id: i64| self.floor_of(cluster.as_ref(), role, id);
        let began = boot_now();
        let described = self.cluster.describe_role(role, &floor, deadline).await?;
        let asked = Asked {
            began,
            ended: boot_now(),
        };
        let checked_at_ms = self.clock.now_ms();
        let (label, cache) = self.answered_for(changes)?;
        Ok(self.judge(
            &label,
            cache.as_ref(),
            role,
            token,
            described,
            (checked_at_ms, asked),
        ))
    }

    /// Checks many (role, token) pairs in one round: cache hits first, then
    /// one describe of every remaining role, whose requests the roles of one
    /// coordinator share. Answers in the order asked.
    pub async fn check_many(
        &self,
        pairs: &[(String, FencingToken)],
        deadline: Instant,
    ) -> Vec<Result<CheckAnswer, ClusterError>> {
        let changes = self.cluster.cluster_changes();
        let cluster = self.caches.cluster(self.cluster.cluster_id());
        let mut answers: Vec<Option<Result<CheckAnswer, ClusterError>>> = pairs
            .iter()
            .map(|(role, token)| self.cached(cluster.as_ref(), role, *token).map(Ok))
            .collect();
        let mut roles: Vec<String> = pairs
            .iter()
            .zip(&answers)
            .filter(|(_, a)| a.is_none())
            .map(|((role, _), _)| role.clone())
            .collect();
        roles.sort_unstable();
        roles.dedup();
        let began = boot_now();
        let described: HashMap<String, Result<Described, ClusterError>> = if roles.is_empty() {
            HashMap::new()
        } else {
            let floor = |role: &str, id: i64| self.floor_of(cluster.as_ref(), role, id);
            self.cluster.describe(&roles, &floor, deadline).await
        };
        let asked = Asked {
            began,
            ended: boot_now(),
        };
        let checked_at_ms = self.clock.now_ms();
        let cluster = self.answered_for(changes);
        for ((role, token), answer) in pairs.iter().zip(answers.iter_mut()) {
            if answer.is_some() {
                continue;
            }
            let result = described
                .get(role)
                .cloned()
                .unwrap_or_else(|| Err(ClusterError::Internal(format!("no answer for {role:?}"))))
                .and_then(|d| {
                    let (label, cache) = cluster.clone()?;
                    let at = (checked_at_ms, asked);
                    Ok(self.judge(&label, cache.as_ref(), role, *token, d, at))
                });
            *answer = Some(result);
        }
        answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(ClusterError::Internal("unanswered".into()))))
            .collect()
    }

    /// The answer of the superseded cache of `cluster`, if it has one: the
    /// pair that superseded the token then, and no current pair (the
    /// coordinator was not asked).
    fn cached(
        &self,
        cluster: Option<&ClusterId>,
        role: &str,
        token: FencingToken,
    ) -> Option<CheckAnswer> {
        let cluster = cluster?;
        let hit = self.caches.superseded(cluster, role, token)?;
        Some(CheckAnswer {
            role: role.to_owned(),
            token,
            verdict: Verdict::Superseded,
            current: None,
            state: None,
            superseded_by: Some(Sighting {
                pair: hit.pair,
                seen_at: Rfc3339Ms(hit.seen_at_ms),
            }),
            checked_at: Rfc3339Ms(self.clock.now_ms()),
            cached: true,
            cluster: cluster.to_string(),
        })
    }

    /// What an answer for `role` under `producer_id` may carry in
    /// `cluster`, while the cluster is still the one in contact: the old
    /// cluster's marks say nothing of another one's pairs.
    fn floor_of(
        &self,
        cluster: Option<&ClusterId>,
        role: &str,
        producer_id: i64,
    ) -> Option<Lowest> {
        let cluster = cluster.filter(|c| self.cluster.cluster_id().as_ref() == Some(*c))?;
        self.caches.held(cluster, role)?.lowest(producer_id)
    }

    /// The cluster an answer begun when the cluster id had changed
    /// `changes` times speaks for (the one the client knows; unless another
    /// cluster answered behind the addresses meanwhile, then the answer may
    /// be either's), and the key of the caches it may go to: that cluster,
    /// while still in contact (an answer received just before every
    /// connection died is still that cluster's answer, but nothing is
    /// remembered without contact).
    fn answered_for(&self, changes: u64) -> Result<(ClusterId, Option<ClusterId>), ClusterError> {
        let known = self.cluster.known_cluster_id();
        if self.cluster.cluster_changes() != changes {
            return Err(ClusterError::Unavailable(
                "another cluster answered behind the bootstrap servers during the check; ask again"
                    .into(),
            ));
        }
        let known = known.ok_or_else(|| {
            ClusterError::Unavailable("no broker has said which cluster it is".into())
        })?;
        let cache = self
            .caches
            .cluster(self.cluster.cluster_id())
            .filter(|c| **c == *known);
        Ok((known, cache))
    }

    /// The answer to `token` of `role` from `described`, which speaks for
    /// the cluster `label`, at `checked_at_ms` and `asked` then; what it
    /// teaches goes to the caches of `cache` (`None`: out of contact,
    /// nothing remembered).
    fn judge(
        &self,
        label: &ClusterId,
        cache: Option<&ClusterId>,
        role: &str,
        token: FencingToken,
        described: Described,
        (checked_at_ms, asked): (i64, Asked),
    ) -> CheckAnswer {
        let retired = cache
            .and_then(|c| self.caches.held(c, role))
            .is_some_and(|held| held.epoch_of(token.producer_id()).is_some());
        let verdict = verdict(token, described.current, retired);
        let mut superseded_by = None;
        if let Some(current) = described.current {
            if let Some(cache) = cache {
                self.caches.raise(cache, role, current, asked);
            }
            if verdict == Verdict::Superseded {
                superseded_by = Some(Sighting {
                    pair: current,
                    seen_at: Rfc3339Ms(checked_at_ms),
                });
                if let Some(cache) = cache
                    && superseded_for_good(token, current)
                {
                    self.caches.remember_superseded(
                        cache,
                        role,
                        token,
                        SupersededBy {
                            pair: current,
                            seen_at_ms: checked_at_ms,
                        },
                    );
                }
            }
        }
        CheckAnswer {
            role: role.to_owned(),
            token,
            verdict,
            current: described.current,
            state: described.state,
            superseded_by,
            checked_at: Rfc3339Ms(checked_at_ms),
            cached: false,
            cluster: label.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::testkit::t;
    use crate::time::ManualClock;
    use crate::transport::Coordinator;
    use crate::transport::memory::MemoryCluster;

    fn checker(cluster: &MemoryCluster) -> Checker {
        Checker::new(
            Arc::new(cluster.clone()),
            Arc::new(ManualClock::new(1_000)),
            1 << 20,
            1 << 20,
        )
    }

    /// Asked now, answered at once.
    fn now() -> Asked {
        let now = boot_now();
        Asked {
            began: now,
            ended: now,
        }
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(300)
    }

    const LEASE: Duration = Duration::from_secs(30);

    /// The verdict, the current pair, the superseding pair and whether it
    /// came from the cache.
    fn said(answer: &CheckAnswer) -> (Verdict, Option<FencingToken>, Option<FencingToken>, bool) {
        (
            answer.verdict,
            answer.current,
            answer.superseded_by.as_ref().map(|s| s.pair),
            answer.cached,
        )
    }

    #[tokio::test]
    async fn every_verdict_and_only_superseded_is_cached() {
        let cluster = MemoryCluster::new(4);
        let checker = checker(&cluster);
        let any = t(1, 1);
        let vacant = checker.check("r", any, soon()).await.unwrap();
        assert_eq!(said(&vacant), (Verdict::Vacant, None, None, false));
        assert_eq!(vacant.cluster, "memory-cluster");

        let a = cluster.transport();
        let ta = a.acquire_epoch("r", LEASE).await.unwrap();
        let yes = checker.check("r", ta, soon()).await.unwrap();
        assert_eq!(said(&yes), (Verdict::Authoritative, Some(ta), None, false));
        let again = checker.check("r", ta, soon()).await.unwrap();
        assert!(!again.cached, "authoritative is never cached");

        let tb = cluster.transport().acquire_epoch("r", LEASE).await.unwrap();
        let no = checker.check("r", ta, soon()).await.unwrap();
        assert_eq!(said(&no), (Verdict::Superseded, Some(tb), Some(tb), false));
        // The coordinator down, the cluster still in contact: the superseded
        // verdict needs no Kafka request, the others are not guessed. The
        // cached answer names the pair that superseded the token then, and
        // no current pair: the service did not ask.
        let tc = cluster.transport().acquire_epoch("r", LEASE).await.unwrap();
        cluster.set_unavailable(Some("the coordinator is down"));
        let cached = checker.check("r", ta, soon()).await.unwrap();
        assert_eq!(said(&cached), (Verdict::Superseded, None, Some(tb), true));
        assert_eq!(cached.state, None);
        assert_eq!(
            cached.contradiction("r", ta, 409),
            None,
            "the client crate's rules take it"
        );
        assert!(
            checker.check("r", tc, soon()).await.is_err(),
            "no guess when down"
        );
        cluster.set_unavailable(None);

        let ahead = FencingToken::new(tc.producer_id(), tc.producer_epoch() + 1).unwrap();
        assert_eq!(
            checker.check("r", ahead, soon()).await.unwrap().verdict,
            Verdict::Unknown
        );
    }

    /// Issue 44 (3): a role's producer id goes down (its transactional id
    /// expired, or its epoch ran out, and the coordinator of the day draws
    /// from a lower block). The role stays checkable: the new pair is
    /// authoritative at once, the old id's pairs are superseded (and not
    /// cached), a pair checked before it was minted is not remembered as
    /// refused. Before, every check answered 503 ("answered 1:0 after
    /// 1001:5 was seen") until the deadline.
    #[tokio::test]
    async fn a_role_whose_producer_id_goes_down_stays_checkable() {
        let cluster = MemoryCluster::new(4);
        let checker = checker(&cluster);
        let holder = cluster.transport();
        cluster.set_next_producer_id(1001);
        let mut old = holder.acquire_epoch("r", LEASE).await.unwrap();
        for _ in 0..5 {
            old = holder.acquire_epoch("r", LEASE).await.unwrap();
        }
        assert_eq!(old, t(1001, 5));
        assert_eq!(
            checker.check("r", old, soon()).await.unwrap().verdict,
            Verdict::Authoritative
        );
        // The coordinator moved to the broker of block 0; the id expired.
        cluster.expire("r");
        cluster.set_next_producer_id(1);
        let early = t(1, 1);
        for (token, verdict) in [(t(1, 0), Verdict::Vacant), (early, Verdict::Vacant)] {
            assert_eq!(
                checker.check("r", token, soon()).await.unwrap().verdict,
                verdict
            );
        }
        let new = holder.acquire_epoch("r", LEASE).await.unwrap();
        assert_eq!(new, t(1, 0));
        let yes = checker.check("r", new, soon()).await.unwrap();
        assert_eq!(said(&yes), (Verdict::Authoritative, Some(new), None, false));
        for token in [old, t(1001, 2)] {
            let no = checker.check("r", token, soon()).await.unwrap();
            assert_eq!(
                said(&no),
                (Verdict::Superseded, Some(new), Some(new), false),
                "{token}"
            );
            assert_eq!(no.contradiction("r", token, 409), None);
        }
        // Not cached: each asks the coordinator.
        assert!(!checker.check("r", old, soon()).await.unwrap().cached);
        // A token of the new id checked before it was minted is unknown,
        // and right once minted.
        assert_eq!(
            checker.check("r", early, soon()).await.unwrap().verdict,
            Verdict::Unknown
        );
        let next = holder.acquire_epoch("r", LEASE).await.unwrap();
        assert_eq!(next, early);
        assert_eq!(
            checker.check("r", early, soon()).await.unwrap().verdict,
            Verdict::Authoritative
        );
        let gone = checker.check("r", new, soon()).await.unwrap();
        assert_eq!(
            said(&gone),
            (Verdict::Superseded, Some(early), Some(early), false)
        );
        assert!(
            checker.check("r", new, soon()).await.unwrap().cached,
            "an earlier epoch of the same id is for good"
        );
        // A producer id the role was never seen to hold: unknown.
        assert_eq!(
            checker
                .check("r", t(5000, 0), soon())
                .await
                .unwrap()
                .verdict,
            Verdict::Unknown
        );
        // And the epoch running out lands on a lower id alike.
        cluster.set_next_producer_id(0);
        let mut last = early;
        while last.producer_id() == 1 {
            last = holder.acquire_epoch("r", LEASE).await.unwrap();
        }
        assert_eq!(last, t(0, 0));
        assert_eq!(
            checker.check("r", last, soon()).await.unwrap().verdict,
            Verdict::Authoritative
        );
        assert_eq!(
            checker.check("r", early, soon()).await.unwrap().verdict,
            Verdict::Superseded
        );
    }

    /// Once every connection is lost, the next cluster reached behind the
    /// same addresses may be another: nothing cached answers until contact
    /// with a cluster of the same id is back.
    #[tokio::test]
    async fn a_cached_verdict_is_served_only_in_contact_with_its_cluster() {
        let cluster = MemoryCluster::new(4);
        let checker = checker(&cluster);
        let t1 = cluster.transport().acquire_epoch("r", LEASE).await.unwrap();
        let t2 = cluster.transport().acquire_epoch("r", LEASE).await.unwrap();
        assert_eq!(
            checker.check("r", t1, soon()).await.unwrap().verdict,
            Verdict::Superseded
        );
        assert!(checker.check("r", t1, soon()).await.unwrap().cached);

        cluster.set_contact(false);
        let lost = checker.check("r", t1, soon()).await;
        assert!(
            matches!(lost, Err(ClusterError::Unavailable(_))),
            "no contact, no cached verdict: {lost:?}"
        );
        assert_eq!(checker.floor("r", t2.producer_id()), None, "nor a floor");
        cluster.set_contact(true);
        let back = checker.check("r", t1, soon()).await.unwrap();
        assert_eq!(
            said(&back),
            (Verdict::Superseded, None, Some(t2), true),
            "the same cluster again: its cache is good"
        );

        // Replaced while out of contact: the new cluster's answer, fresh.
        cluster.set_contact(false);
        assert!(checker.check("r", t1, soon()).await.is_err());
        cluster.set_cluster_id("rebuilt");
        cluster.set_contact(true);
        let rebuilt = checker.check("r", t1, soon()).await.unwrap();
        assert!(!rebuilt.cached, "{rebuilt:?}");
        assert_eq!(rebuilt.cluster, "rebuilt");
    }

    /// Issue 44 (5): an answer that began under one cluster and ended under
    /// another (rebuilt behind the same addresses) may be either's: it is
    /// not given, the caller asks again.
    #[tokio::test]
    async fn a_check_during_which_the_cluster_changed_is_asked_again() {
        let cluster = MemoryCluster::new(4);
        let checker = Arc::new(checker(&cluster));
        let t0 = cluster.transport().acquire_epoch("r", LEASE).await.unwrap();
        let t1 = cluster.transport().acquire_epoch("r", LEASE).await.unwrap();
        cluster.answer_stale("r", Some(t0));
        checker.observe("memory-cluster", "r", t1, now());
        // The stale answer keeps the check retrying; the cluster changes
        // meanwhile.
        let check = {
            let checker = checker.clone();
            tokio::spawn(async move {
                checker
                    .check("r", t1, Instant::now() + Duration::from_secs(2))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        cluster.set_cluster_id("rebuilt");
        cluster.clear_stale("r");
        let answer = check.await.unwrap();
        assert!(
            matches!(&answer, Err(ClusterError::Unavailable(why)) if why.contains("another cluster")),
            "{answer:?}"
        );
        let many = checker.check_many(&[("r".into(), t1)], soon()).await;
        assert_eq!(many[0].as_ref().unwrap().cluster, "rebuilt");
    }

    #[tokio::test]
    async fn a_coordinator_answering_an_old_pair_after_a_newer_was_seen_never_says_yes() {
        let cluster = MemoryCluster::new(4);
        let checker = checker(&cluster);
        let t1 = cluster.transport().acquire_epoch("r", LEASE).await.unwrap();
        assert_eq!(
            checker.check("r", t1, soon()).await.unwrap().verdict,
            Verdict::Authoritative
        );
        // A newer holder mints elsewhere; the service sees it (the
        // poller, another check) ...
        let t2 = cluster.transport().acquire_epoch("r", LEASE).await.unwrap();
        checker.observe("memory-cluster", "r", t2, now());
        // ... then the old coordinator comes back and answers t1 as current.
        cluster.answer_stale("r", Some(t1));
        let started = Instant::now();
        let answer = checker.check("r", t1, soon()).await;
        assert!(
            matches!(answer, Err(ClusterError::Unavailable(_))),
            "a stale answer is retried until the deadline, then undecided: {answer:?}"
        );
        assert!(started.elapsed() >= Duration::from_millis(250));
        let batch = checker
            .check_many(&[("r".into(), t1), ("r".into(), t2)], soon())
            .await;
        assert!(batch.iter().all(Result::is_err), "{batch:?}");
        // Once it has caught up, the answer is right.
        cluster.clear_stale("r");
        let answer = checker.check("r", t1, soon()).await.unwrap();
        assert_eq!(
            (answer.verdict, answer.current),
            (Verdict::Superseded, Some(t2))
        );
    }

    /// Issue 52 (6): the role's producer id is replaced (its transactional
    /// id expired; or its epochs ran out), the new one checked; then a
    /// stale coordinator answers the old id's last pair as current. That
    /// epoch is no lower than the highest seen under the old id, so the
    /// epoch floor let it through: the deposed token was `authoritative`.
    #[tokio::test]
    async fn a_coordinator_answering_a_retired_producer_id_never_says_yes() {
        let cluster = MemoryCluster::new(4);
        let checker = checker(&cluster);
        let t1 = cluster.transport().acquire_epoch("r", LEASE).await.unwrap();
        let first = checker.check("r", t1, soon()).await.unwrap();
        assert_eq!(first.verdict, Verdict::Authoritative);
        cluster.expire("r");
        cluster.set_next_producer_id(t1.producer_id() + 1_000);
        let t2 = cluster.transport().acquire_epoch("r", LEASE).await.unwrap();
        assert!(!t2.same_producer(&t1), "{t1} {t2}");
        let second = checker.check("r", t2, soon()).await.unwrap();
        assert_eq!(second.verdict, Verdict::Authoritative);
        cluster.answer_stale("r", Some(t1));
        let answer = checker.check("r", t1, soon()).await;
        assert!(
            matches!(answer, Err(ClusterError::Unavailable(_))),
            "a retired producer id's pair is retried until the deadline, then undecided: {answer:?}"
        );
        cluster.clear_stale("r");
        let answer = checker.check("r", t1, soon()).await.unwrap();
        assert_eq!(answer.verdict, Verdict::Superseded);
    }

    #[tokio::test]
    async fn a_check_raises_the_floor_of_its_producer_id_and_a_new_cluster_resets_it() {
        let cluster = MemoryCluster::new(4);
        let checker = checker(&cluster);
        let t1 = cluster.transport().acquire_epoch("r", LEASE).await.unwrap();
        let id = t1.producer_id();
        checker.check("r", t1, soon()).await.unwrap();
        assert_eq!(
            checker.floor("r", id),
            Some(Lowest::Epoch(t1.producer_epoch()))
        );
        let t2 = cluster.transport().acquire_epoch("r", LEASE).await.unwrap();
        checker.check("r", t1, soon()).await.unwrap();
        assert_eq!(
            checker.floor("r", id),
            Some(Lowest::Epoch(t2.producer_epoch()))
        );
        assert_eq!(checker.floor("r", id + 1), None, "per producer id");
        // Another cluster behind the same address: its pairs start low, and
        // the old cluster's verdicts and marks must not apply.
        cluster.set_cluster_id("rebuilt");
        assert_eq!(checker.floor("r", id), None);
        let answer = checker.check("r", t1, soon()).await.unwrap();
        assert!(
            !answer.cached,
            "the old cluster's superseded verdict is forgotten"
        );
    }
}
