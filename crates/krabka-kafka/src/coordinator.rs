//! Transaction coordinators: which broker coordinates each transactional
//! id, looked up with batched FindCoordinator (v4+ `coordinator_keys`).
//!
//! The table, the suspect brokers and the sharing of lookups are
//! `state::coordinators`; this sends the lookups it asks for, one
//! FindCoordinator at a time (any broker can answer). The same request
//! confirms the describes' answers (`describe::confirmation`).

use std::collections::HashMap;

use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use super::client::KafkaClient;
use super::config::Broker;
use super::error::KafkaError;
use super::retry::retrying;
use super::state::{Answer, Lesson};

/// FindCoordinator key type of a transactional id.
const TRANSACTION: i8 = 1;

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

pub(crate) fn coordinator_error(code: i16, message: Option<StrBytes>) -> KafkaError {
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
                Err(KafkaError::Malformed(format!(
                    "FindCoordinator answered nothing for {key:?}"
                )))
            });
            (key.clone(), answer)
        })
        .collect()
}

/// The coordinator lookup: which broker coordinates a transactional id
/// (`KafkaClient::lookup`).
#[derive(Clone, Copy, Debug)]
pub struct Lookup<'a> {
    pub(crate) client: &'a KafkaClient,
}

impl KafkaClient {
    /// The coordinator lookup.
    pub fn lookup(&self) -> Lookup<'_> {
        Lookup { client: self }
    }
}

impl Lookup<'_> {
    /// The transaction coordinators of `keys`, one attempt: cached, else
    /// looked up (shared with concurrent lookups of the same keys). Per key,
    /// the broker or a (usually retriable) error.
    pub(crate) async fn coordinators(&self, keys: &[String]) -> HashMap<String, Answer> {
        let resolved = self.client.state().coordinators().resolve(keys);
        if resolved.start {
            let client = self.client.clone();
            tokio::spawn(async move { client.lookup().lookup_rounds().await });
        }
        let mut found = resolved.found;
        for (key, rx) in resolved.waits {
            let answer = rx.await.unwrap_or_else(|_| {
                Err(KafkaError::Internal(
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
        retrying(self.client.config(), "find coordinator", || {
            self.coordinator(id)
        })
        .await
    }

    /// The transaction coordinator of one id, one attempt.
    pub(crate) async fn coordinator(&self, key: &str) -> Result<Broker, KafkaError> {
        // Every check comes here: the common case builds no map.
        if let Some(broker) = self.client.state().coordinators().known(key) {
            return Ok(broker);
        }
        let keys = [key.to_owned()];
        self.coordinators(&keys)
            .await
            .remove(key)
            .unwrap_or_else(|| Err(KafkaError::Internal(format!("no coordinator for {key:?}"))))
    }

    /// Sends the lookups the table asks for until none are pending; one
    /// FindCoordinator at a time.
    async fn lookup_rounds(&self) {
        let table = self.client.state().coordinators();
        while let Some(keys) = table.next_round() {
            if let Some(observer) = self.client.observer() {
                observer.coordinator_lookup(keys.len());
            }
            let answers = match self
                .client
                .send_any(&build_find_coordinator(&keys), &[])
                .await
            {
                Ok((response, _)) => parse_find_coordinator(&keys, response),
                Err(e) => keys.into_iter().map(|k| (k, Err(e.clone()))).collect(),
            };
            for (key, answer) in &answers {
                self.client.state().learn(match answer {
                    Ok(broker) => Lesson::CoordinatorFound { key, broker },
                    Err(error) => Lesson::LookupFailed { key, error },
                });
            }
            table.answer(answers);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use kafka_protocol::messages::BrokerId;
    use kafka_protocol::messages::find_coordinator_response::Coordinator;

    use super::*;

    pub(crate) fn coordinator(key: &str, id: i32, code: i16) -> Coordinator {
        Coordinator::default()
            .with_key(StrBytes::from_string(key.to_owned()))
            .with_node_id(BrokerId(id))
            .with_host(StrBytes::from_static_str("b"))
            .with_port(9000 + id)
            .with_error_code(code)
    }

    pub(crate) fn response(coordinators: Vec<Coordinator>) -> FindCoordinatorResponse {
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
            matches!(&answers["c"], Err(KafkaError::Malformed(m)) if m.contains("nothing")),
            "{:?}",
            answers["c"]
        );
    }
}
