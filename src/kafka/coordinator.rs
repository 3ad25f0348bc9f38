//! Transaction coordinators: which broker coordinates each transactional
//! id, looked up with batched FindCoordinator (v4+ `coordinator_keys`).
//!
//! The table, the suspect brokers and the sharing of lookups are
//! `state::coordinators`; this sends the lookups it asks for, one
//! FindCoordinator at a time (any broker can answer), and the confirmation
//! stream of `describe` (`state::confirms`): the same request, for the ids
//! of the batches waiting, to a broker other than their coordinators.

use std::collections::HashMap;

use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::oneshot;

use super::client::KafkaClient;
use super::config::Broker;
use super::error::KafkaError;
use super::state::{Answer, ConfirmRequest, Confirmation, Lesson};

/// FindCoordinator key type of a transactional id.
const TRANSACTION: i8 = 1;

/// What a confirmation says of one id's coordinator.
#[derive(Clone, Debug)]
pub(crate) enum Named {
    /// The broker that answered the describe.
    Same,
    /// Another broker: the id moved.
    Other(Broker),
    /// The confirming broker could not say.
    Failed(KafkaError),
}

/// A FindCoordinator for the transactional ids `keys`.
pub(crate) fn build_find_coordinator(keys: &[String]) -> FindCoordinatorRequest {
    FindCoordinatorRequest::default()
        .with_key_type(TRANSACTION)
        .with_coordinator_keys(
            keys.iter()
                .map(|k| StrBytes::from_string(k.clone()))
                .collect(),
        )
}

fn coordinator_error(code: i16, message: Option<StrBytes>) -> KafkaError {
    KafkaError::broker("FindCoordinator", code, message.map(|m| m.to_string()))
}

/// Per key, the coordinator a FindCoordinator answer names, or its error.
/// A key asked for and not answered gets an error too.
pub(crate) fn parse_find_coordinator(
    keys: &[String],
    response: FindCoordinatorResponse,
) -> Vec<(String, Answer)> {
    let mut answers: HashMap<String, Answer> = response
        .coordinators
        .into_iter()
        .map(|c| {
            let answer = if c.error_code == 0 {
                Ok(Broker {
                    id: c.node_id.0,
                    addr: format!("{}:{}", c.host.as_str(), c.port),
                })
            } else {
                Err(coordinator_error(c.error_code, c.error_message))
            };
            (c.key.to_string(), answer)
        })
        .collect();
    keys.iter()
        .map(|key| {
            let answer = answers.remove(key).unwrap_or_else(|| {
                Err(KafkaError::Invalid(format!(
                    "FindCoordinator answered nothing for {key:?}"
                )))
            });
            (key.clone(), answer)
        })
        .collect()
}

/// Per id, what `confirmation` says of the coordinator `at`.
pub(crate) fn named(confirmation: &Confirmation, at: &Broker) -> HashMap<String, Named> {
    confirmation
        .named
        .iter()
        .map(|(id, answer)| {
            let named = match answer {
                // Almost always: nothing to build, nothing to learn.
                Ok(broker) if broker.id == at.id => Named::Same,
                Ok(broker) => Named::Other(broker.clone()),
                Err(e) => Named::Failed(e.clone()),
            };
            (id.clone(), named)
        })
        .collect()
}

impl KafkaClient {
    /// The transaction coordinators of `keys`, one attempt: cached, else
    /// looked up (shared with concurrent lookups of the same keys). Per key,
    /// the broker or a (usually retriable) error.
    pub(crate) async fn coordinators(&self, keys: &[String]) -> HashMap<String, Answer> {
        let resolved = self.state().coordinators().resolve(keys);
        if resolved.start {
            tokio::spawn(self.clone().lookup_rounds());
        }
        let mut found = resolved.found;
        for (key, rx) in resolved.waits {
            let answer = rx.await.unwrap_or_else(|_| {
                Err(KafkaError::Invalid(
                    "the coordinator lookup was dropped".into(),
                ))
            });
            found.insert(key, answer);
        }
        found
    }

    /// The transaction coordinator of `id`, retried within the operation
    /// timeout.
    pub async fn transaction_coordinator(&self, id: &str) -> Result<Broker, KafkaError> {
        self.retrying("find coordinator", || self.coordinator(id))
            .await
    }

    /// The transaction coordinator of one id, one attempt.
    pub(crate) async fn coordinator(&self, key: &str) -> Result<Broker, KafkaError> {
        let keys = [key.to_owned()];
        self.coordinators(&keys)
            .await
            .remove(key)
            .unwrap_or_else(|| Err(KafkaError::Invalid(format!("no coordinator for {key:?}"))))
    }

    /// Sends the lookups the table asks for until none are pending; one
    /// FindCoordinator at a time.
    async fn lookup_rounds(self) {
        let table = self.state().coordinators();
        while let Some(keys) = table.next_round() {
            if let Some(observer) = self.observer() {
                observer.coordinator_lookup(keys.len());
            }
            let answers = match self.send_any(&build_find_coordinator(&keys), &[]).await {
                Ok((response, _)) => parse_find_coordinator(&keys, response),
                Err(e) => keys.into_iter().map(|k| (k, Err(e.clone()))).collect(),
            };
            for (key, answer) in &answers {
                self.state().learn(match answer {
                    Ok(broker) => Lesson::CoordinatorFound { key, broker },
                    Err(error) => Lesson::LookupFailed { key, error },
                });
            }
            table.answer(answers);
        }
    }

    /// Puts a batch of `at` with `ids`, whose checks all arrived before
    /// now, in the confirmation stream: the answer of the first
    /// confirmation sent from now on to a broker other than `at` that
    /// answers (see `describe`). `None` when the cluster never had a second
    /// broker, so a coordinator cannot have moved.
    pub(crate) fn confirmation(
        &self,
        at: &Broker,
        ids: &[String],
    ) -> Option<oneshot::Receiver<Result<Confirmation, KafkaError>>> {
        if !self.state().metadata().is_multi_broker() {
            return None;
        }
        let (rx, free) = self.state().confirms().wait(at, ids.to_vec());
        if free {
            self.send_confirmation();
        }
        Some(rx)
    }

    /// Sends the stream's next confirmation, if it is free and a batch waits.
    fn send_confirmation(&self) {
        let brokers = self.confirming_brokers();
        if let Some(request) = self.state().confirms().next_request(&brokers) {
            tokio::spawn(self.clone().confirm_batches(request));
        }
    }

    /// The brokers that may confirm, best first: not in reconnect backoff,
    /// then without a confirmation in flight; ties in random order, so the
    /// load spreads (as `brokers_by_load`).
    fn confirming_brokers(&self) -> Vec<Broker> {
        let busy = self.state().confirms().busy();
        let mut ranked: Vec<((bool, bool, u32), Broker)> = self
            .state()
            .metadata()
            .brokers()
            .into_iter()
            .map(|(id, addr)| {
                let rank = (
                    self.state().nodes().is_blocked(&addr),
                    busy.contains(&addr),
                    rand::random::<u32>(),
                );
                (rank, Broker { id, addr })
            })
            .collect();
        ranked.sort_unstable_by_key(|(rank, _)| *rank);
        ranked.into_iter().map(|(_, broker)| broker).collect()
    }

    /// One confirmation: a FindCoordinator of `request`'s ids to its
    /// broker. After the hedge delay without an answer the stream goes on
    /// without it (its waiters join the next one too); its answer, when it
    /// comes, still answers those not answered yet.
    async fn confirm_batches(self, request: ConfirmRequest) {
        let find = build_find_coordinator(&request.ids);
        let result = {
            let send = self.send_to(&request.to.addr, &find);
            tokio::pin!(send);
            tokio::select! {
                result = &mut send => result,
                () = tokio::time::sleep(self.config().hedge_after) => {
                    self.state().confirms().slow(&request);
                    self.send_confirmation();
                    send.await
                }
            }
        };
        let answer = result.map(|response| Confirmation {
            by: request.to.clone(),
            named: parse_find_coordinator(&request.ids, response)
                .into_iter()
                .collect(),
        });
        self.state().confirms().done(request, answer);
        self.send_confirmation();
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::BrokerId;
    use kafka_protocol::messages::find_coordinator_response::Coordinator;

    use super::*;

    fn coordinator(key: &str, id: i32, code: i16) -> Coordinator {
        Coordinator::default()
            .with_key(StrBytes::from_string(key.to_owned()))
            .with_node_id(BrokerId(id))
            .with_host(StrBytes::from_static_str("b"))
            .with_port(9000 + id)
            .with_error_code(code)
    }

    fn response(coordinators: Vec<Coordinator>) -> FindCoordinatorResponse {
        FindCoordinatorResponse::default().with_coordinators(coordinators)
    }

    #[test]
    fn a_lookup_asks_for_transactional_ids() {
        let keys = ["a".to_owned(), "b".to_owned()];
        let request = build_find_coordinator(&keys);
        assert_eq!(request.key_type, TRANSACTION);
        let asked: Vec<&str> = request
            .coordinator_keys
            .iter()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(asked, ["a", "b"]);
    }

    #[test]
    fn every_key_asked_for_gets_its_broker_or_an_error() {
        let keys = ["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let answers: HashMap<String, Answer> = parse_find_coordinator(
            &keys,
            response(vec![coordinator("a", 2, 0), coordinator("b", -1, 15)]),
        )
        .into_iter()
        .collect();
        assert_eq!(
            answers["a"],
            Ok(Broker {
                id: 2,
                addr: "b:9002".into()
            })
        );
        assert_eq!(answers["b"].as_ref().unwrap_err().code(), Some(15));
        assert!(
            matches!(&answers["c"], Err(KafkaError::Invalid(m)) if m.contains("nothing")),
            "{:?}",
            answers["c"]
        );
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
            .collect(),
        };
        let named = named(&confirmation, &at);
        assert!(matches!(named["same"], Named::Same));
        assert!(matches!(&named["moved"], Named::Other(b) if b.id == 2 && b.addr == "b:9002"));
        assert!(matches!(&named["unknown"], Named::Failed(e) if e.code() == Some(15)));
    }
}
