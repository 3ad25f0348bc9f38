//! The one check path: `GET /roles/{role}/authority`, `POST
//! /authority/check` and the `check` subcommand all come here.
//!
//! A check is answered from the superseded cache when the token was found
//! superseded before; otherwise from the transaction coordinator, asked
//! after the check arrived (batched with every concurrent check by the
//! cluster client), with the role's high-water mark as the floor below which
//! an answer is stale. An `authoritative` verdict is never cached.

mod caches;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::time::Instant;

pub use caches::{Caches, SupersededBy};

use crate::cluster::{Cluster, ClusterError, Described};
use crate::coordination::{FencingToken, Verdict, verdict};
use crate::time::{Clock, Rfc3339Ms};

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
    /// superseded tokens and `high_water_bytes` of high-water marks.
    pub fn new(
        cluster: Arc<dyn Cluster>,
        clock: Arc<dyn Clock>,
        superseded_bytes: u64,
        high_water_bytes: u64,
    ) -> Checker {
        Checker {
            cluster,
            caches: Caches::new(superseded_bytes, high_water_bytes),
            clock,
        }
    }

    /// The caches, for metrics.
    pub fn caches(&self) -> &Caches {
        &self.caches
    }

    /// Raises the high-water mark of `role` with a pair seen elsewhere (a
    /// lease record, the coordinator poller).
    pub fn observe(&self, role: &str, pair: FencingToken) {
        if let Some(cluster) = self.caches.cluster(self.cluster.cluster_id()) {
            self.caches.raise(&cluster, role, pair);
        }
    }

    /// The highest pair seen for `role`.
    pub fn high_water(&self, role: &str) -> Option<FencingToken> {
        let cluster = self.caches.cluster(self.cluster.cluster_id())?;
        self.caches.high_water(&cluster, role)
    }

    /// Checks one token of one role.
    pub async fn check(
        &self,
        role: &str,
        token: FencingToken,
        deadline: Instant,
    ) -> Result<CheckAnswer, ClusterError> {
        let cluster = self.caches.cluster(self.cluster.cluster_id());
        if let Some(hit) = self.cached(cluster.as_ref(), role, token) {
            return Ok(hit);
        }
        let floor = |role: &str| self.floor(cluster.as_ref(), role);
        let described = self.cluster.describe_role(role, &floor, deadline).await?;
        let checked_at_ms = self.clock.now_ms();
        let cluster = self.still(cluster);
        Ok(self.judge(cluster.as_ref(), role, token, described, checked_at_ms))
    }

    /// Checks many (role, token) pairs in one round: cache hits first, then
    /// one describe of every remaining role, whose requests the roles of one
    /// coordinator share. Answers in the order asked.
    pub async fn check_many(
        &self,
        pairs: &[(String, FencingToken)],
        deadline: Instant,
    ) -> Vec<Result<CheckAnswer, ClusterError>> {
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
        let described: HashMap<String, Result<Described, ClusterError>> = if roles.is_empty() {
            HashMap::new()
        } else {
            let floor = |role: &str| self.floor(cluster.as_ref(), role);
            self.cluster.describe(&roles, &floor, deadline).await
        };
        let checked_at_ms = self.clock.now_ms();
        let cluster = self.still(cluster);
        for ((role, token), answer) in pairs.iter().zip(answers.iter_mut()) {
            if answer.is_some() {
                continue;
            }
            let result = described
                .get(role)
                .cloned()
                .unwrap_or_else(|| Err(ClusterError::Internal(format!("no answer for {role:?}"))))
                .map(|d| self.judge(cluster.as_ref(), role, *token, d, checked_at_ms));
            *answer = Some(result);
        }
        answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(ClusterError::Internal("unanswered".into()))))
            .collect()
    }

    /// The answer of the superseded cache of `cluster`, if it has one.
    fn cached(
        &self,
        cluster: Option<&Arc<str>>,
        role: &str,
        token: FencingToken,
    ) -> Option<CheckAnswer> {
        let hit = self.caches.superseded(cluster?, role, token)?;
        Some(CheckAnswer {
            role: role.to_owned(),
            token,
            verdict: Verdict::Superseded,
            current: Some(hit.current),
            state: Some(hit.state),
            checked_at: Rfc3339Ms(hit.checked_at_ms),
            cached: true,
        })
    }

    /// The high-water mark of `role` in `cluster`, while the cluster is
    /// still the one in contact: the old cluster's marks say nothing of
    /// another one's pairs.
    fn floor(&self, cluster: Option<&Arc<str>>, role: &str) -> Option<FencingToken> {
        cluster
            .filter(|c| self.cluster.cluster_id().as_ref() == Some(*c))
            .and_then(|c| self.caches.high_water(c, role))
    }

    /// `before`, if the cluster in contact now is still that one: an answer
    /// of another cluster must not land in the old one's caches.
    fn still(&self, before: Option<Arc<str>>) -> Option<Arc<str>> {
        self.caches
            .cluster(self.cluster.cluster_id())
            .filter(|now| before.as_ref().is_some_and(|before| before == now))
    }

    fn judge(
        &self,
        cluster: Option<&Arc<str>>,
        role: &str,
        token: FencingToken,
        described: Described,
        checked_at_ms: i64,
    ) -> CheckAnswer {
        let verdict = verdict(token, described.current);
        if let (Some(cluster), Some(current)) = (cluster, described.current) {
            self.caches.raise(cluster, role, current);
            if verdict == Verdict::Superseded {
                self.caches.remember_superseded(
                    cluster,
                    role,
                    token,
                    SupersededBy {
                        current,
                        state: described.state.clone().unwrap_or_default(),
                        checked_at_ms,
                    },
                );
            }
        }
        CheckAnswer {
            role: role.to_owned(),
            token,
            verdict,
            current: described.current,
            state: described.state,
            checked_at: Rfc3339Ms(checked_at_ms),
            cached: false,
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

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(300)
    }

    const LEASE: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn every_verdict_and_only_superseded_is_cached() {
        let cluster = MemoryCluster::new(4);
        let checker = checker(&cluster);
        let any = t(1, 1);
        let vacant = checker.check("r", any, soon()).await.unwrap();
        assert_eq!((vacant.verdict, vacant.current), (Verdict::Vacant, None));

        let a = cluster.transport();
        let ta = a.acquire_epoch("r", LEASE).await.unwrap();
        let yes = checker.check("r", ta, soon()).await.unwrap();
        assert_eq!(yes.verdict, Verdict::Authoritative);
        assert!(!yes.cached);
        let again = checker.check("r", ta, soon()).await.unwrap();
        assert!(!again.cached, "authoritative is never cached");

        let tb = cluster.transport().acquire_epoch("r", LEASE).await.unwrap();
        let no = checker.check("r", ta, soon()).await.unwrap();
        assert_eq!(
            (no.verdict, no.current, no.cached),
            (Verdict::Superseded, Some(tb), false)
        );
        // The coordinator down, the cluster still in contact: the superseded
        // verdict needs no Kafka request, the others are not guessed.
        cluster.set_unavailable(Some("the coordinator is down"));
        let cached = checker.check("r", ta, soon()).await.unwrap();
        assert_eq!(
            (cached.verdict, cached.current, cached.cached),
            (Verdict::Superseded, Some(tb), true)
        );
        assert!(
            checker.check("r", tb, soon()).await.is_err(),
            "no guess when down"
        );
        cluster.set_unavailable(None);

        let ahead = FencingToken::new(tb.producer_id(), tb.producer_epoch() + 1).unwrap();
        assert_eq!(
            checker.check("r", ahead, soon()).await.unwrap().verdict,
            Verdict::Unknown
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
        assert_eq!(checker.high_water("r"), None, "nor a floor");
        cluster.set_contact(true);
        let back = checker.check("r", t1, soon()).await.unwrap();
        assert_eq!(
            (back.verdict, back.current, back.cached),
            (Verdict::Superseded, Some(t2), true),
            "the same cluster again: its cache is good"
        );

        // Replaced while out of contact: the new cluster's answer, fresh.
        cluster.set_contact(false);
        assert!(checker.check("r", t1, soon()).await.is_err());
        cluster.set_cluster_id("rebuilt");
        cluster.set_contact(true);
        let rebuilt = checker.check("r", t1, soon()).await.unwrap();
        assert!(!rebuilt.cached, "{rebuilt:?}");
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
        // A newer holder mints elsewhere; the service sees it (a lease
        // record, the poller, another check) ...
        let t2 = cluster.transport().acquire_epoch("r", LEASE).await.unwrap();
        checker.observe("r", t2);
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

    #[tokio::test]
    async fn a_check_raises_the_high_water_mark_and_a_new_cluster_resets_it() {
        let cluster = MemoryCluster::new(4);
        let checker = checker(&cluster);
        let t1 = cluster.transport().acquire_epoch("r", LEASE).await.unwrap();
        checker.check("r", t1, soon()).await.unwrap();
        assert_eq!(checker.high_water("r"), Some(t1));
        let t2 = cluster.transport().acquire_epoch("r", LEASE).await.unwrap();
        checker.check("r", t1, soon()).await.unwrap();
        assert_eq!(checker.high_water("r"), Some(t2));
        // Another cluster behind the same address: its pairs start low, and
        // the old cluster's verdicts and marks must not apply.
        cluster.set_cluster_id("rebuilt");
        assert_eq!(checker.high_water("r"), None);
        let answer = checker.check("r", t1, soon()).await.unwrap();
        assert!(
            !answer.cached,
            "the old cluster's superseded verdict is forgotten"
        );
    }
}
