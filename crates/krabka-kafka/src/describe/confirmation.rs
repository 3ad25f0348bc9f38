//! The confirmation of a batch's answers: another broker, chosen here,
//! names each id's coordinator and the leader epoch it leads the id's
//! partition of `__transaction_state` at (a Metadata request of that
//! topic; FindCoordinator, which names no epoch, only where the client may
//! not describe it), and what that backs of the batch decides which
//! answers are kept (the argument is in `describe`). On a cluster of one
//! broker there is no other: its address is asked on a connection opened
//! for the confirmation (`Voter::Alone`).

use std::collections::HashMap;

use std::sync::Arc;

use tokio::time::Instant;

use super::quorum::{Says, Verdict, Voter, says, tally};
use super::wire::{build_leaders_request, parse_leaders, partition_for};
use super::{CONFIRM_WINDOW, DescribeAnswer, Describer, Pending};
use crate::config::Broker;
use crate::connection::{Connection, Leads};
use crate::coordinator::{build_find_coordinator, parse_find_coordinator};
use crate::error::{KafkaError, ResponseError};
use crate::metadata::{TRANSACTION_STATE, parse_metadata};
use crate::observe::StaleReason;
use crate::state::{ConfirmRequest, Confirmation, Led, Lesson, Named, confirming};
use krabka_coordination::time::boot_now;

/// Keeps the answers of the coordinator at `addr` that `verdicts` back
/// (node `coordinator`); every other answer becomes a retriable
/// [`KafkaError::Stale`]. Returns the ids another broker names a different
/// coordinator for, and whether an answer was not proven to come from the
/// process that leads.
fn confirm(
    answers: &mut HashMap<String, DescribeAnswer>,
    addr: &str,
    coordinator: i32,
    verdicts: &Result<HashMap<String, Verdict>, String>,
) -> (Vec<(String, Broker)>, bool) {
    let mut moved = Vec::new();
    let mut unproven = false;
    for (id, answer) in answers.iter_mut() {
        if answer.is_err() {
            continue;
        }
        let reason = match verdicts {
            Err(why) => why.clone(),
            Ok(verdicts) => match verdicts.get(id) {
                Some(Verdict::Confirmed) => continue,
                Some(verdict) => {
                    match verdict {
                        Verdict::Moved(broker) => moved.push((id.clone(), broker.clone())),
                        Verdict::Unproven(_) => unproven = true,
                        _ => {}
                    }
                    verdict.refusal(coordinator).unwrap_or_default()
                }
                None => "the confirmation answered nothing for it".to_owned(),
            },
        };
        *answer = Err(KafkaError::Stale {
            addr: addr.to_owned(),
            reason: format!("the answer for {id:?} is not confirmed: {reason}"),
        });
    }
    // By id, not in the map's order: the lessons and warnings follow (a
    // simulation's seed decides a run, not a hasher).
    moved.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    (moved, unproven)
}

impl Describer<'_> {
    /// Puts a batch of `at` with `ids`, whose checks all arrived before
    /// now, in the confirmation stream: the answer of the first
    /// confirmation sent from now on to a broker other than `at` that
    /// answers, or on a cluster of one broker to `at`'s address on a
    /// connection of its own (see `describe`).
    pub(crate) fn confirmation(&self, at: &Broker, ids: &[String]) -> Pending {
        let (rx, free) = self.client.state().confirms().wait(at, ids.to_vec());
        if free {
            self.send_confirmation();
        }
        rx
    }

    /// Sends the stream's next confirmation, if it is free and a batch
    /// waits (describes without rounds: see `describe`): on a cluster of
    /// one broker, to it alone.
    fn send_confirmation(&self) {
        let confirms = self.client.state().confirms();
        let only = self
            .client
            .state()
            .metadata()
            .single_broker()
            .then(|| self.client.state().metadata().brokers().into_iter().next())
            .flatten();
        let request = match only {
            Some((id, addr)) => confirms.request_alone(&Broker { id, addr }),
            None => confirms.next_request(&self.confirming_brokers()),
        };
        if let Some(request) = request {
            let client = self.client.clone();
            tokio::spawn(async move {
                client.describer().confirm(request).await;
                client.describer().send_confirmation();
            });
        }
    }

    /// The brokers that may confirm, best first (`state::ranking`).
    pub(crate) fn confirming_brokers(&self) -> Vec<Broker> {
        let brokers = self.client.state().metadata().brokers();
        confirming(
            self.client.candidates(
                brokers
                    .into_iter()
                    .map(|(id, addr)| {
                        (
                            Broker {
                                id,
                                addr: addr.clone(),
                            },
                            addr,
                        )
                    })
                    .collect(),
            ),
        )
    }

    /// Sends one confirmation and hands its answer to the stream. Returns
    /// true when it is answered, false when it has been in flight for the
    /// hedge delay: then it goes on in a task of its own, and the stream is
    /// free for the next one, which carries its waiters too.
    pub(crate) async fn confirm(&self, request: ConfirmRequest) -> bool {
        let number = request.number;
        let client = self.client.clone();
        let mut call = Box::pin(async move {
            let answer = client.describer().ask_confirmation(&request).await;
            client.state().confirms().done(request, answer);
        });
        tokio::select! {
            () = &mut call => true,
            () = tokio::time::sleep(self.client.config().hedge_after) => {
                self.client.state().confirms().slow(number);
                tokio::spawn(call);
                false
            }
        }
    }

    /// Asks `request`'s broker which broker coordinates each of its ids
    /// ([`Self::ask_named`]).
    async fn ask_confirmation(&self, request: &ConfirmRequest) -> Result<Confirmation, KafkaError> {
        self.ask_named(&request.to, &request.ids, request.alone)
            .await
    }

    /// Sends `request` to `by`: on `own` connection when there is one, on
    /// the client's otherwise.
    async fn ask<R: kafka_protocol::protocol::Request>(
        &self,
        by: &Broker,
        own: Option<&Connection>,
        request: &R,
    ) -> Result<R::Response, KafkaError> {
        match own {
            Some(conn) => {
                self.client
                    .call_on(conn, request, self.client.config().request_timeout)
                    .await
            }
            None => self.client.send_to(&by.addr, request).await,
        }
    }

    /// Asks `by` which broker coordinates each of `ids`, at which leader
    /// epoch, and where the ids' partitions are replicated: one Metadata
    /// request of `__transaction_state`, whose partition leaders are the
    /// coordinators (`partition_for` maps an id to its partition). The
    /// epoch is what tells the process that leads from another registered
    /// with the same node id (`incarnation`), the replicas who may vote
    /// (`quorum`); the broker also builds that topic's partition list once
    /// for the request, where FindCoordinator builds it again for every id
    /// (`KafkaApis.getCoordinator`: confirmations of 10 to 20 ids by
    /// FindCoordinator took twice a describe's round trip, 1.35 against
    /// 0.73 ms at concurrency 64 on three brokers). The answer is judged
    /// against every other broker's Metadata answer (`state::epochs`) like
    /// any other, and a broker it shows behind confirms nothing. A client
    /// the cluster does not let describe that topic
    /// (TOPIC_AUTHORIZATION_FAILED) confirms with FindCoordinator from then
    /// on, by node id alone (said at warn; docs/operations.md asks for the
    /// permission); any other error of the topic, this time. `alone`: on a
    /// connection opened for it ([`Voter::Alone`]).
    pub(super) async fn ask_named(
        &self,
        by: &Broker,
        ids: &[String],
        alone: bool,
    ) -> Result<Confirmation, KafkaError> {
        if let Some(observer) = self.client.observer() {
            observer.confirmation(&by.addr, ids.len());
        }
        // Opened for this confirmation, closed (reset) when it is dropped.
        let own = if alone {
            Some(self.client.connect_alone(&by.addr).await?)
        } else {
            None
        };
        if !self.client.state().confirms().by_find_coordinator() {
            let sent = boot_now();
            let response = self.ask(by, own.as_ref(), &build_leaders_request()).await?;
            let answer = parse_metadata(response);
            let leaders = parse_leaders(&answer);
            // A connection of its own asked no cluster id first: its answer
            // says which cluster it reached, and another one than known
            // confirms nothing (it is learned, as any answer's id is).
            let elsewhere = alone
                && !self
                    .client
                    .state()
                    .metadata()
                    .is_cluster(answer.cluster_id.as_deref());
            self.client.state().learn(Lesson::Metadata {
                answer,
                from: &by.addr,
                sent,
                alone,
            });
            if elsewhere {
                return Err(KafkaError::Stale {
                    addr: by.addr.clone(),
                    reason: "its address now leads to another cluster: it confirms nothing"
                        .to_owned(),
                });
            }
            if self.client.state().epochs().is_stale(&by.addr) {
                return Err(KafkaError::Stale {
                    addr: by.addr.clone(),
                    reason: "its metadata is behind another broker's: it confirms nothing"
                        .to_owned(),
                });
            }
            match leaders {
                Ok(leaders) => {
                    let named = ids
                        .iter()
                        .map(|id| {
                            let partition = partition_for(id, leaders.len());
                            let named = leaders[partition].clone().map(|p| Named {
                                broker: p.leader.broker,
                                led: Some(Led {
                                    partition: i32::try_from(partition).unwrap_or(i32::MAX),
                                    epoch: p.leader.epoch,
                                }),
                                replicas: p.replicas,
                            });
                            (id.clone(), named)
                        })
                        .collect();
                    return Ok(Confirmation {
                        by: by.clone(),
                        named,
                        alone,
                    });
                }
                Err(e) if e.is(ResponseError::TopicAuthorizationFailed) => {
                    tracing::warn!(error = %e, "this client may not describe {TRANSACTION_STATE}: describes are confirmed with FindCoordinator, by node id alone, which cannot tell a broker from a replacement registered with its node id nor count the replicas that confirm (grant DESCRIBE on {TRANSACTION_STATE})");
                    self.client.state().confirms().use_find_coordinator();
                }
                // No answer for the topic (not created yet, or hidden):
                // FindCoordinator, which answers per id, this time.
                Err(e) => {
                    tracing::debug!(error = %e, "no metadata of {TRANSACTION_STATE}; confirming with FindCoordinator")
                }
            }
        }
        let response = self
            .ask(by, own.as_ref(), &build_find_coordinator(ids))
            .await?;
        Ok(Confirmation {
            by: by.clone(),
            alone,
            named: parse_find_coordinator(ids, response)
                .into_iter()
                .map(|(id, answer)| (id, answer.map(Named::found)))
                .collect(),
        })
    }

    /// Waits for the confirmation of a batch taken at `taken` (a
    /// [`boot_now`] instant), within the window, asks the replicas it
    /// lacks (`quorum`), and keeps the answers they back: those of the
    /// process on `conn` (which answered the describe) that enough
    /// replicas name the leader.
    pub(super) async fn await_confirmation(
        &self,
        answers: &mut HashMap<String, DescribeAnswer>,
        coordinator: &Broker,
        conn: &Arc<Connection>,
        confirmation: Pending,
        taken: Instant,
    ) {
        self.client.topics().read_min_isr(TRANSACTION_STATE);
        let left = CONFIRM_WINDOW.saturating_sub(boot_now().saturating_duration_since(taken));
        let received = tokio::time::timeout(left, confirmation)
            .await
            .ok()
            .map(|r| {
                r.unwrap_or_else(|_| {
                    Err(KafkaError::Internal("the confirmation was dropped".into()))
                })
            });
        let took = boot_now().saturating_duration_since(taken);
        let (seen, leads) = conn.leads();
        let first = match received {
            None => Err(format!(
                "no other broker confirmed it within the {} ms window",
                CONFIRM_WINDOW.as_millis()
            )),
            Some(Ok(_)) if took > CONFIRM_WINDOW => Err(format!(
                "the confirmation took {} ms, over the {} ms window",
                took.as_millis(),
                CONFIRM_WINDOW.as_millis()
            )),
            Some(Ok(confirmed)) => Ok(confirmed),
            Some(Err(e)) => Err(format!("no other broker confirmed it: {e}")),
        };
        let mut votes = Vec::new();
        let verdicts = match first {
            Err(why) => Err(why),
            Ok(first) => {
                votes.push(first);
                let mut verdicts = self.tally(&votes, coordinator, leads.as_deref());
                let short: Vec<String> = verdicts
                    .iter()
                    .filter(|(id, v)| {
                        matches!(v, Verdict::Short { .. })
                            && answers.get(*id).is_some_and(Result::is_ok)
                    })
                    .map(|(id, _)| id.clone())
                    .collect();
                if !short.is_empty() {
                    let more = self
                        .ask_replicas(&verdicts, &short, coordinator, taken)
                        .await;
                    votes.extend(more);
                    verdicts = self.tally(&votes, coordinator, leads.as_deref());
                }
                Ok(verdicts)
            }
        };
        let mut give_up = false;
        if let Ok(verdicts) = &verdicts
            && verdicts.values().any(|v| matches!(v, Verdict::Unproven(_)))
        {
            // What the process leads may have changed since it said: asked
            // again, on the same connection, for the next describe. This
            // answer stays unconfirmed whatever it says now: it was given
            // before, perhaps in an earlier term of the same process (a
            // broker deposed, caught up and elected again names the new
            // epoch at once; Kafka unfences it at its first heartbeat once
            // caught up, and an election may follow at once). Still
            // unproven then, the process is not the one that leads: its
            // connections are given up.
            self.ask_leads(conn, seen).await;
            let again = self.tally(&votes, coordinator, conn.leads().1.as_deref());
            give_up = again.values().any(|v| matches!(v, Verdict::Unproven(_)));
        }
        self.keep_confirmed(answers, coordinator, conn, &verdicts, give_up);
    }

    /// Per id, what `votes` decide of `coordinator`'s answers, its process
    /// having said it leads `leads`.
    fn tally(
        &self,
        votes: &[Confirmation],
        coordinator: &Broker,
        leads: Option<&Leads>,
    ) -> HashMap<String, Verdict> {
        let epochs = self.client.state().epochs();
        let newest = |p: i32| epochs.newest_epoch(TRANSACTION_STATE, p);
        let said: Vec<(Voter, HashMap<String, Says>)> = votes
            .iter()
            .map(|c| {
                let by = if c.alone {
                    Voter::Alone
                } else {
                    Voter::Broker(c.by.id)
                };
                (by, says(c, coordinator, leads, &newest))
            })
            .collect();
        let min_isr = self.client.state().min_isrs().of(TRANSACTION_STATE);
        let mut ids: Vec<&String> = said.iter().flat_map(|(_, s)| s.keys()).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter()
            .map(|id| {
                let per: Vec<(Voter, &Says)> = said
                    .iter()
                    .filter_map(|(by, s)| s.get(id).map(|s| (*by, s)))
                    .collect();
                (id.clone(), tally(coordinator.id, &per, min_isr))
            })
            .collect()
    }

    /// Asks at once every replica the `short` ids lack a vote of (not the
    /// coordinator, not one that voted, not a stale broker nor one in
    /// reconnect backoff): their answers received within the window of the
    /// batch `taken` at. Sent now, after the batch was taken.
    async fn ask_replicas(
        &self,
        verdicts: &HashMap<String, Verdict>,
        short: &[String],
        coordinator: &Broker,
        taken: Instant,
    ) -> Vec<Confirmation> {
        let mut wanted: Vec<i32> = short
            .iter()
            .filter_map(|id| match verdicts.get(id) {
                Some(Verdict::Short {
                    replicas, voted, ..
                }) => Some(
                    replicas
                        .iter()
                        .filter(|r| **r != coordinator.id && !voted.contains(r))
                        .copied()
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            })
            .flatten()
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        let state = self.client.state();
        let brokers = state.metadata().brokers();
        let asked: Vec<Broker> = wanted
            .into_iter()
            .filter_map(|id| {
                brokers.get(&id).map(|addr| Broker {
                    id,
                    addr: addr.clone(),
                })
            })
            .filter(|b| !state.epochs().is_stale(&b.addr) && !state.nodes().is_blocked(&b.addr))
            .collect();
        let left = CONFIRM_WINDOW.saturating_sub(boot_now().saturating_duration_since(taken));
        let answers = futures::future::join_all(
            asked
                .iter()
                .map(|b| tokio::time::timeout(left, self.ask_named(b, short, false))),
        )
        .await;
        answers.into_iter().filter_map(|a| a.ok()?.ok()).collect()
    }

    /// Keeps the answers `verdicts` back (see the module docs); the
    /// others become retriable errors, and the table learns the
    /// coordinators another broker names.
    fn keep_confirmed(
        &self,
        answers: &mut HashMap<String, DescribeAnswer>,
        coordinator: &Broker,
        conn: &Arc<Connection>,
        verdicts: &Result<HashMap<String, Verdict>, String>,
        give_up: bool,
    ) {
        let addr = coordinator.addr.as_str();
        let (moved, _) = confirm(answers, addr, coordinator.id, verdicts);
        if give_up {
            self.client.state().learn(Lesson::Unproven {
                addr,
                opened: conn.opened(),
            });
        }
        for (id, named) in moved {
            self.client.state().learn(Lesson::CoordinatorFound {
                key: &id,
                broker: &named,
            });
            tracing::warn!(
                id = %id,
                broker = %addr,
                coordinator = %named.addr,
                "a broker answered as the coordinator of an id that another broker says has moved; asking the new coordinator"
            );
            if let Some(observer) = self.client.observer() {
                observer.stale_answer(StaleReason::Unconfirmed);
            }
        }
        // Answered and confirmed in full: the broker is a coordinator again.
        if answers.values().all(Result::is_ok) {
            self.client.state().learn(Lesson::Confirmed { addr });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::describe::wire::tests::described;

    fn broker(id: i32) -> Broker {
        Broker {
            id,
            addr: format!("b:{id}"),
        }
    }

    #[test]
    fn only_answers_the_verdicts_confirm_are_kept() {
        let mut answers = described(&["same", "moved", "unproven", "short", "failed", "missing"]);
        let verdicts = HashMap::from([
            ("same".to_owned(), Verdict::Confirmed),
            ("moved".to_owned(), Verdict::Moved(broker(2))),
            ("unproven".to_owned(), Verdict::Unproven("epoch".into())),
            (
                "short".to_owned(),
                Verdict::Short {
                    replicas: vec![1, 2, 3],
                    voted: vec![],
                    need: 1,
                },
            ),
            ("failed".to_owned(), Verdict::Failed("lost".into())),
        ]);
        let (moved, unproven) = confirm(&mut answers, "b:1", 1, &Ok(verdicts));
        assert_eq!(moved, [("moved".to_owned(), broker(2))]);
        assert!(unproven);
        assert!(answers["same"].is_ok());
        for id in ["moved", "unproven", "short", "failed", "missing"] {
            let error = answers[id].as_ref().unwrap_err();
            assert!(
                matches!(error, KafkaError::Stale { addr, .. } if addr == "b:1"),
                "{id}: {error}"
            );
            assert!(error.is_retriable(), "{id}: asked again");
        }
        let short = answers["short"].as_ref().unwrap_err().to_string();
        assert!(short.contains("1 replica(s)"), "{short}");
    }

    #[test]
    fn no_confirmation_keeps_no_answer() {
        let mut answers = described(&["a"]);
        confirm(&mut answers, "b:1", 1, &Err("no other broker".into()));
        assert!(
            matches!(&answers["a"], Err(KafkaError::Stale { reason, .. }) if reason.contains("no other broker"))
        );
    }
}
