//! The confirmation of a batch's answers: another broker, chosen here,
//! names each id's coordinator and the leader epoch it leads the id's
//! partition of `__transaction_state` at (a Metadata request of that
//! topic; FindCoordinator, which names no epoch, only where the client may
//! not describe it), and what that backs of the batch decides which
//! answers are kept (the argument is in `describe`).

use std::collections::HashMap;
use std::time::Duration;

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::wire::{build_leaders_request, parse_leaders, partition_for};
use super::{CONFIRM_WINDOW, DescribeAnswer, Describer, Pending};
use crate::config::Broker;
use crate::connection::{Connection, Leads};
use crate::coordinator::{build_find_coordinator, parse_find_coordinator};
use crate::error::{KafkaError, ResponseError};
use crate::metadata::TRANSACTION_STATE;
use crate::observe::StaleReason;
use crate::state::{ConfirmRequest, Confirmation, Led, Lesson, Named, confirming};
use krabka_coordination::time::boot_now;

/// What a confirmation says of one id's coordinator.
#[derive(Clone, Debug)]
pub(crate) enum Says {
    /// The broker process that answered the describe.
    Same,
    /// Another broker: the id moved.
    Other(Broker),
    /// The node id that answered, but not proven the same process: the
    /// process on the describe's connection has not said it leads the
    /// id's partition at the leader epoch the confirming broker names (a
    /// replacement registered with that node id leads at a newer epoch
    /// than the process it replaced; a broker that took the partition
    /// after it last said what it leads has not said so yet). Why.
    Unproven(String),
    /// The confirming broker could not say.
    Failed(KafkaError),
}

/// Per id, what `confirmation` says of the coordinator `at`, whose process
/// on the describe's connection said it leads `leads`.
pub(crate) fn says(
    confirmation: &Confirmation,
    at: &Broker,
    leads: Option<&Leads>,
) -> HashMap<String, Says> {
    confirmation
        .named
        .iter()
        .map(|(id, answer)| {
            let says = match answer {
                Ok(named) if named.broker.id == at.id => match named.led {
                    // A FindCoordinator answer (a client that may not
                    // describe `__transaction_state`): the node id is all
                    // there is to go by.
                    None => Says::Same,
                    // Almost always: nothing to build, nothing to learn.
                    Some(led) if leads.and_then(|l| l.get(&led.partition)) == Some(&led.epoch) => {
                        Says::Same
                    }
                    Some(led) => Says::Unproven(format!(
                        "broker {} names node {} leader of {TRANSACTION_STATE}-{} at epoch {}, and the process on this connection {}",
                        confirmation.by.addr,
                        at.id,
                        led.partition,
                        led.epoch,
                        match leads.and_then(|l| l.get(&led.partition)) {
                            Some(epoch) => format!("said it leads it at epoch {epoch}"),
                            None => "has not said it leads it".to_owned(),
                        }
                    )),
                },
                Ok(named) => Says::Other(named.broker.clone()),
                Err(e) => Says::Failed(e.clone()),
            };
            (id.clone(), says)
        })
        .collect()
}

/// What a confirmation (another broker's answer) backs of one batch: the
/// coordinator it names for each id, or why it backs nothing.
#[derive(Debug)]
enum Backing {
    /// Its answer, in time.
    Named(HashMap<String, Says>),
    /// No answer to go by, and why.
    Failed(String),
}

impl Backing {
    /// True when an id's coordinator is named at an epoch the describing
    /// process has not named.
    fn unproven(&self) -> bool {
        matches!(self, Backing::Named(says) if says.values().any(|s| matches!(s, Says::Unproven(_))))
    }

    /// What the stream gave a batch of `at` (whose process on the
    /// describe's connection said it leads `leads`): the confirmation
    /// `received` (`None`: nothing within the window), `took` after the
    /// batch was taken.
    fn of(
        received: Option<Result<Confirmation, KafkaError>>,
        took: Duration,
        at: &Broker,
        leads: Option<&Leads>,
    ) -> Backing {
        match received {
            None => Backing::Failed(format!(
                "no other broker confirmed it within the {} ms window",
                CONFIRM_WINDOW.as_millis()
            )),
            Some(Ok(_)) if took > CONFIRM_WINDOW => Backing::Failed(format!(
                "the confirmation took {} ms, over the {} ms window",
                took.as_millis(),
                CONFIRM_WINDOW.as_millis()
            )),
            Some(Ok(confirmed)) => Backing::Named(says(&confirmed, at, leads)),
            Some(Err(e)) => Backing::Failed(format!("no other broker confirmed it: {e}")),
        }
    }
}

/// Keeps the answers of the coordinator at `addr` that `confirmation`
/// backs; every other answer becomes a retriable [`KafkaError::Stale`].
/// Returns the ids another broker names a different coordinator for, and
/// whether an answer was not proven to come from the process that leads.
fn confirm(
    answers: &mut HashMap<String, DescribeAnswer>,
    addr: &str,
    backing: &Backing,
) -> (Vec<(String, Broker)>, bool) {
    let mut moved = Vec::new();
    let mut unproven = false;
    let named = match backing {
        Backing::Named(named) => Ok(named),
        Backing::Failed(why) => Err(why),
    };
    for (id, answer) in answers.iter_mut() {
        if answer.is_err() {
            continue;
        }
        let reason = match named {
            Err(why) => why.clone(),
            Ok(named) => match named.get(id) {
                Some(Says::Same) => continue,
                Some(Says::Other(broker)) => {
                    moved.push((id.clone(), broker.clone()));
                    format!("another broker names {} as its coordinator", broker.addr)
                }
                Some(Says::Unproven(why)) => {
                    unproven = true;
                    why.clone()
                }
                Some(Says::Failed(e)) => format!("the confirmation failed: {e}"),
                None => "the confirmation answered nothing for it".to_owned(),
            },
        };
        *answer = Err(KafkaError::Stale {
            addr: addr.to_owned(),
            reason: format!("the answer for {id:?} is not confirmed: {reason}"),
        });
    }
    (moved, unproven)
}

impl Describer<'_> {
    /// Puts a batch of `at` with `ids`, whose checks all arrived before
    /// now, in the confirmation stream: the answer of the first
    /// confirmation sent from now on to a broker other than `at` that
    /// answers (see `describe`). `None` when the cluster is known to be one
    /// broker, so a coordinator cannot have moved.
    pub(crate) fn confirmation(
        &self,
        at: &Broker,
        ids: &[String],
    ) -> Option<oneshot::Receiver<Result<Confirmation, KafkaError>>> {
        if self.client.state().metadata().single_broker() {
            return None;
        }
        let (rx, free) = self.client.state().confirms().wait(at, ids.to_vec());
        if free {
            self.send_confirmation();
        }
        Some(rx)
    }

    /// Sends the stream's next confirmation, if it is free and a batch
    /// waits (describes without rounds: see `describe`).
    fn send_confirmation(&self) {
        let brokers = self.confirming_brokers();
        if let Some(request) = self.client.state().confirms().next_request(&brokers) {
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

    /// Asks `request`'s broker which broker coordinates each of its ids,
    /// and at which leader epoch: one Metadata request of
    /// `__transaction_state`, whose partition leaders are the coordinators
    /// (`partition_for` maps an id to its partition). The epoch is what
    /// tells the process that leads from another registered with the same
    /// node id (`incarnation`); the broker also builds that topic's
    /// partition list once for the request, where FindCoordinator builds it
    /// again for every id (`KafkaApis.getCoordinator`: confirmations of 10
    /// to 20 ids by FindCoordinator took twice a describe's round trip,
    /// 1.35 against 0.73 ms at concurrency 64 on three brokers). A client
    /// the cluster does not let describe that topic
    /// (TOPIC_AUTHORIZATION_FAILED) confirms with FindCoordinator from then
    /// on, by node id alone (said at warn; docs/operations.md asks for the
    /// permission); any other error of the topic, this time.
    async fn ask_confirmation(&self, request: &ConfirmRequest) -> Result<Confirmation, KafkaError> {
        let by = request.to.clone();
        if let Some(observer) = self.client.observer() {
            observer.confirmation(&request.to.addr, request.ids.len());
        }
        if !self.client.state().confirms().by_find_coordinator() {
            let response = self
                .client
                .send_to(&request.to.addr, &build_leaders_request())
                .await?;
            match parse_leaders(response) {
                Ok(leaders) => {
                    let named = request
                        .ids
                        .iter()
                        .map(|id| {
                            let partition = partition_for(id, leaders.len());
                            let named = leaders[partition].clone().map(|leader| Named {
                                broker: leader.broker,
                                led: Some(Led {
                                    partition: i32::try_from(partition).unwrap_or(i32::MAX),
                                    epoch: leader.epoch,
                                }),
                            });
                            (id.clone(), named)
                        })
                        .collect();
                    return Ok(Confirmation { by, named });
                }
                Err(e) if e.is(ResponseError::TopicAuthorizationFailed) => {
                    tracing::warn!(error = %e, "this client may not describe {TRANSACTION_STATE}: describes are confirmed with FindCoordinator, by node id alone, which cannot tell a broker from a replacement registered with its node id (grant DESCRIBE on {TRANSACTION_STATE})");
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
            .client
            .send_to(&request.to.addr, &build_find_coordinator(&request.ids))
            .await?;
        Ok(Confirmation {
            by,
            named: parse_find_coordinator(&request.ids, response)
                .into_iter()
                .map(|(id, answer)| (id, answer.map(Named::found)))
                .collect(),
        })
    }

    /// Waits for the confirmation of a batch taken at `taken` (a
    /// [`boot_now`] instant), within the window, and keeps the answers it
    /// backs: those of the process on `conn` (which answered the describe)
    /// that another broker names the leader.
    pub(super) async fn await_confirmation(
        &self,
        answers: &mut HashMap<String, DescribeAnswer>,
        coordinator: &Broker,
        conn: &Arc<Connection>,
        confirmation: Pending,
        taken: Instant,
    ) {
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
        let mut backing = Backing::of(received.clone(), took, coordinator, leads.as_deref());
        if backing.unproven() {
            // What the process leads may have changed since it said: asked
            // again, on the same connection, and judged again (its identity
            // is what counts, not when it said it).
            self.ask_leads(conn, seen).await;
            backing = Backing::of(received, took, coordinator, conn.leads().1.as_deref());
        }
        self.keep_confirmed(answers, coordinator, conn, &backing);
    }

    /// Keeps the answers `backing` backs (see the module docs); the
    /// others become retriable errors, and the table learns the
    /// coordinators another broker names.
    fn keep_confirmed(
        &self,
        answers: &mut HashMap<String, DescribeAnswer>,
        coordinator: &Broker,
        conn: &Arc<Connection>,
        backing: &Backing,
    ) {
        let addr = coordinator.addr.as_str();
        let (moved, unproven) = confirm(answers, addr, backing);
        if unproven {
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
    use crate::coordinator::tests::{coordinator, response};
    use crate::describe::wire::tests::described;

    fn broker(id: i32) -> Broker {
        Broker {
            id,
            addr: format!("b:{id}"),
        }
    }

    fn led(id: i32, partition: i32, epoch: i32) -> Result<Named, KafkaError> {
        Ok(Named {
            broker: broker(id),
            led: Some(Led { partition, epoch }),
        })
    }

    #[test]
    fn a_confirmation_names_the_same_broker_another_or_fails() {
        let at = Broker {
            id: 1,
            addr: "b:9001".into(),
        };
        let keys = ["same".to_owned(), "moved".to_owned(), "unknown".to_owned()];
        let confirmation = Confirmation {
            by: Broker {
                id: 3,
                addr: "b:9003".into(),
            },
            named: parse_find_coordinator(
                &keys,
                response(vec![
                    coordinator("same", 1, 0),
                    coordinator("moved", 2, 0),
                    coordinator("unknown", -1, 15),
                ]),
            )
            .into_iter()
            .map(|(id, answer)| (id, answer.map(Named::found)))
            .collect(),
        };
        let says = says(&confirmation, &at, None);
        assert!(
            matches!(says["same"], Says::Same),
            "FindCoordinator: by node id"
        );
        assert!(matches!(&says["moved"], Says::Other(b) if b.id == 2 && b.addr == "b:9002"));
        assert!(matches!(&says["unknown"], Says::Failed(e) if e.code() == Some(15)));
    }

    /// Node 1 answered the describe; the confirming broker names node 1
    /// leader of the id's partition at some epoch. Only the process that
    /// said it leads that partition at that epoch is node 1 now.
    #[test]
    fn the_same_node_id_is_the_same_broker_only_at_the_epoch_its_process_named() {
        let confirmation = Confirmation {
            by: broker(3),
            named: HashMap::from([
                ("led".to_owned(), led(1, 4, 9)),
                ("replaced".to_owned(), led(1, 5, 12)),
                ("taken since".to_owned(), led(1, 6, 3)),
            ]),
        };
        let leads = Leads::from([(4, 9), (5, 11)]);
        let says = says(&confirmation, &broker(1), Some(&leads));
        assert!(matches!(says["led"], Says::Same));
        assert!(
            matches!(&says["replaced"], Says::Unproven(why) if why.contains("at epoch 12") && why.contains("said it leads it at epoch 11")),
            "{:?}",
            says["replaced"]
        );
        assert!(
            matches!(&says["taken since"], Says::Unproven(why) if why.contains("has not said")),
            "{:?}",
            says["taken since"]
        );
        let unasked = super::says(&confirmation, &broker(1), None);
        assert!(
            unasked.values().all(|s| matches!(s, Says::Unproven(_))),
            "a process that never said what it leads proves nothing"
        );
        let mut answers = described(&["led", "replaced", "taken since"]);
        let (moved, unproven) = confirm(&mut answers, "b:1", &Backing::Named(says));
        assert!(moved.is_empty() && unproven);
        assert!(answers["led"].is_ok());
        assert!(matches!(answers["replaced"], Err(KafkaError::Stale { .. })));
        assert!(answers["taken since"].as_ref().unwrap_err().is_retriable());
    }

    #[test]
    fn only_answers_another_broker_confirms_are_kept() {
        let mut answers = described(&["same", "moved", "failed", "missing"]);
        let named = HashMap::from([
            ("same".to_owned(), Says::Same),
            ("moved".to_owned(), Says::Other(broker(2))),
            (
                "failed".to_owned(),
                Says::Failed(KafkaError::broker("FindCoordinator", 15, None)),
            ),
        ]);
        let (moved, unproven) = confirm(&mut answers, "b:1", &Backing::Named(named));
        assert_eq!(moved, [("moved".to_owned(), broker(2))]);
        assert!(!unproven);
        assert!(answers["same"].is_ok());
        for id in ["moved", "failed", "missing"] {
            let error = answers[id].as_ref().unwrap_err();
            assert!(
                matches!(error, KafkaError::Stale { addr, .. } if addr == "b:1"),
                "{id}: {error}"
            );
            assert!(error.is_retriable(), "{id}: asked again");
        }
    }

    #[test]
    fn no_confirmation_in_time_keeps_no_answer() {
        let leads = Leads::from([(0, 5)]);
        let confirmed = || {
            Some(Ok(Confirmation {
                by: broker(2),
                named: HashMap::from([("a".to_owned(), led(1, 0, 5))]),
            }))
        };
        let of = |received, took| Backing::of(received, took, &broker(1), Some(&leads));
        let in_time = of(confirmed(), CONFIRM_WINDOW);
        let late = of(confirmed(), CONFIRM_WINDOW + Duration::from_millis(1));
        let failed = of(Some(Err(KafkaError::Internal("x".into()))), Duration::ZERO);
        let none = of(None, CONFIRM_WINDOW);
        for confirmation in [late, failed, none] {
            let mut answers = described(&["a"]);
            confirm(&mut answers, "b:1", &confirmation);
            assert!(
                matches!(answers["a"], Err(KafkaError::Stale { .. })),
                "{confirmation:?}"
            );
        }
        let mut answers = described(&["a"]);
        confirm(&mut answers, "b:1", &in_time);
        assert!(answers["a"].is_ok(), "{in_time:?}");
    }
}
