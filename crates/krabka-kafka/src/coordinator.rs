//! Transaction coordinators: which broker coordinates each transactional
//! id, looked up with batched FindCoordinator (v4+ `coordinator_keys`).
//!
//! The table, the suspect brokers and the sharing of lookups are
//! `state::coordinators`; this sends the lookups it asks for, one
//! FindCoordinator at a time (any broker can answer), and the confirmation
//! stream of `describe` (`state::confirms`): the same request, for the ids
//! of the batches waiting, to a broker other than their coordinators.

use std::collections::HashMap;

use kafka_protocol::messages::{
    FindCoordinatorRequest, FindCoordinatorResponse, MetadataRequest, MetadataResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::oneshot;

use super::client::KafkaClient;
use super::config::Broker;
use super::error::{KafkaError, ResponseError};
use super::metadata::{TRANSACTION_STATE, build_metadata};
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
                Err(KafkaError::Malformed(format!(
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
        self.retrying("find coordinator", || self.coordinator(id))
            .await
    }

    /// The transaction coordinator of one id, one attempt.
    pub(crate) async fn coordinator(&self, key: &str) -> Result<Broker, KafkaError> {
        let keys = [key.to_owned()];
        self.coordinators(&keys)
            .await
            .remove(key)
            .unwrap_or_else(|| Err(KafkaError::Internal(format!("no coordinator for {key:?}"))))
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

    /// Sends the stream's next confirmation, if it is free and a batch
    /// waits (describes without rounds: see `describe`).
    fn send_confirmation(&self) {
        let brokers = self.confirming_brokers();
        if let Some(request) = self.state().confirms().next_request(&brokers) {
            let client = self.clone();
            tokio::spawn(async move {
                client.confirm(request).await;
                client.send_confirmation();
            });
        }
    }

    /// The brokers that may confirm, best first: neither stale (metadata
    /// behind another broker's, `state::epochs`) nor in reconnect backoff
    /// (those are left out); then the sound ones before the doubtful, ties
    /// in random order, so the load spreads (as `brokers_by_load`). A
    /// broker is doubtful while it has not answered since a failure (a hung
    /// one, whose requests time out, stays so after its backoff: nothing it
    /// was sent since came back) or has a slow confirmation in flight; as
    /// Java's `leastLoadedNode` prefers a ready node to one it must
    /// reconnect to, doubtful brokers are left out while two sound ones can
    /// confirm each other's batches (the rounds prefer a broker without
    /// batches of its own, which a hung broker, its describes in flight,
    /// always is).
    pub(crate) fn confirming_brokers(&self) -> Vec<Broker> {
        let busy = self.state().confirms().busy();
        let (epochs, nodes) = (self.state().epochs(), self.state().nodes());
        let mut ranked: Vec<((bool, u32), Broker)> = self
            .state()
            .metadata()
            .brokers()
            .into_iter()
            .filter(|(_, addr)| !epochs.is_stale(addr) && !nodes.is_blocked(addr))
            .map(|(id, addr)| {
                let doubtful = busy.contains(&addr) || nodes.failures(&addr) > 0;
                ((doubtful, rand::random::<u32>()), Broker { id, addr })
            })
            .collect();
        ranked.sort_unstable_by_key(|(rank, _)| *rank);
        let sound = ranked.iter().filter(|((doubtful, _), _)| !doubtful).count();
        if sound >= 2 {
            ranked.truncate(sound);
        }
        ranked.into_iter().map(|(_, broker)| broker).collect()
    }

    /// Sends one confirmation and hands its answer to the stream. Returns
    /// true when it is answered, false when it has been in flight for the
    /// hedge delay: then it goes on in a task of its own, and the stream is
    /// free for the next one, which carries its waiters too.
    pub(crate) async fn confirm(&self, request: ConfirmRequest) -> bool {
        let number = request.number;
        let client = self.clone();
        let mut call = Box::pin(async move {
            let answer = client.ask_confirmation(&request).await;
            client.state().confirms().done(request, answer);
        });
        tokio::select! {
            () = &mut call => true,
            () = tokio::time::sleep(self.config().hedge_after) => {
                self.state().confirms().slow(number);
                tokio::spawn(call);
                false
            }
        }
    }

    /// Asks `request`'s broker which broker coordinates each of its ids:
    /// for more than [`FIND_COORDINATOR_UP_TO`] ids, one Metadata request
    /// of `__transaction_state`, whose partition leaders are the
    /// coordinators (`partition_for` maps an id to its partition). The
    /// broker builds that topic's partition list once for it, where
    /// FindCoordinator builds it again for every id
    /// (`KafkaApis.getCoordinator`): confirmations of 10 to 20 ids by
    /// FindCoordinator took twice a describe's round trip (1.35 against
    /// 0.73 ms at concurrency 64 on three brokers). A client the cluster
    /// does not let describe that topic (TOPIC_AUTHORIZATION_FAILED)
    /// confirms with FindCoordinator from then on; any other error of the
    /// topic, this time.
    async fn ask_confirmation(&self, request: &ConfirmRequest) -> Result<Confirmation, KafkaError> {
        let by = request.to.clone();
        if let Some(observer) = self.observer() {
            observer.confirmation(&request.to.addr, request.ids.len());
        }
        if request.ids.len() > FIND_COORDINATOR_UP_TO
            && !self.state().confirms().by_find_coordinator()
        {
            let response = self
                .send_to(&request.to.addr, &build_leaders_request())
                .await?;
            match parse_leaders(response) {
                Ok(leaders) => {
                    let named = request
                        .ids
                        .iter()
                        .map(|id| {
                            (
                                id.clone(),
                                leaders[partition_for(id, leaders.len())].clone(),
                            )
                        })
                        .collect();
                    return Ok(Confirmation { by, named });
                }
                Err(e) if e.is(ResponseError::TopicAuthorizationFailed) => {
                    tracing::info!(error = %e, "this client may not describe {TRANSACTION_STATE}: describes are confirmed with FindCoordinator");
                    self.state().confirms().use_find_coordinator();
                }
                // No answer for the topic (not created yet, or hidden):
                // FindCoordinator, which answers per id, this time.
                Err(e) => {
                    tracing::debug!(error = %e, "no metadata of {TRANSACTION_STATE}; confirming with FindCoordinator")
                }
            }
        }
        let response = self
            .send_to(&request.to.addr, &build_find_coordinator(&request.ids))
            .await?;
        Ok(Confirmation {
            by,
            named: parse_find_coordinator(&request.ids, response)
                .into_iter()
                .collect(),
        })
    }
}

/// Confirmations of at most this many ids are FindCoordinator requests:
/// for one or two ids the broker's work is the same, and the client decodes
/// one coordinator per id instead of every partition of the topic.
const FIND_COORDINATOR_UP_TO: usize = 2;

/// A Metadata request of `__transaction_state` alone, never creating it.
pub(crate) fn build_leaders_request() -> MetadataRequest {
    build_metadata(vec![TRANSACTION_STATE.to_owned()])
}

/// Per partition of `__transaction_state` (by index), its leader or why
/// it has none; the topic's error when it has one.
pub(crate) fn parse_leaders(response: MetadataResponse) -> Result<Vec<Answer>, KafkaError> {
    let brokers: HashMap<i32, String> = response
        .brokers
        .iter()
        .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
        .collect();
    let topic = response
        .topics
        .into_iter()
        .find(|t| {
            t.name
                .as_ref()
                .is_some_and(|n| n.0.as_str() == TRANSACTION_STATE)
        })
        .ok_or_else(|| {
            KafkaError::Malformed(format!("Metadata answered nothing for {TRANSACTION_STATE}"))
        })?;
    if topic.error_code != 0 {
        return Err(KafkaError::broker("Metadata", topic.error_code, None));
    }
    let count = topic.partitions.len();
    let mut leaders: Vec<Answer> = (0..count)
        .map(|p| {
            Err(KafkaError::Malformed(format!(
                "Metadata named no partition {p} of {TRANSACTION_STATE}"
            )))
        })
        .collect();
    for partition in topic.partitions {
        let Some(slot) = usize::try_from(partition.partition_index)
            .ok()
            .and_then(|i| leaders.get_mut(i))
        else {
            return Err(KafkaError::Malformed(format!(
                "Metadata named partition {} of {TRANSACTION_STATE}, which has {count}",
                partition.partition_index
            )));
        };
        let leader = partition.leader_id.0;
        *slot = if partition.error_code != 0 {
            Err(KafkaError::broker("Metadata", partition.error_code, None))
        } else {
            match brokers.get(&leader) {
                Some(addr) => Ok(Broker {
                    id: leader,
                    addr: addr.clone(),
                }),
                None => Err(coordinator_error(
                    ResponseError::CoordinatorNotAvailable.code(),
                    None,
                )),
            }
        };
    }
    if leaders.is_empty() {
        return Err(KafkaError::Malformed(format!(
            "{TRANSACTION_STATE} has no partition"
        )));
    }
    Ok(leaders)
}

/// The partition of `__transaction_state` that holds `id`, as Kafka's
/// `TransactionStateManager.partitionFor` computes it:
/// `Utils.abs(id.hashCode()) % partitions`, with Java's `String.hashCode`
/// over UTF-16 code units and `Utils.abs(Integer.MIN_VALUE) == 0`.
pub(crate) fn partition_for(id: &str, partitions: usize) -> usize {
    let hash = id.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    usize::try_from(abs).unwrap_or(0) % partitions.max(1)
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
            matches!(&answers["c"], Err(KafkaError::Malformed(m)) if m.contains("nothing")),
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

    #[test]
    fn an_id_maps_to_its_partition_as_kafka_maps_it() {
        // Java's String.hashCode: "hello" 99162322, "é" 233, "😀" (two
        // UTF-16 units) 1772899, "polygenelubricants" Integer.MIN_VALUE,
        // whose Utils.abs is 0.
        assert_eq!(partition_for("hello", 50), 99_162_322 % 50);
        assert_eq!(partition_for("é", 50), 233 % 50);
        assert_eq!(partition_for("😀", 50), 1_772_899 % 50);
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        assert_eq!(partition_for("bench-role-1", 50), 1_191_920_343 % 50);
        // "bench-role-100".hashCode() is -1320816873: its absolute value.
        assert_eq!(partition_for("bench-role-100", 50), 1_320_816_873 % 50);
        assert_eq!(partition_for("", 50), 0);
    }

    #[test]
    fn the_leaders_of_transaction_state_are_the_coordinators() {
        use kafka_protocol::messages::TopicName;
        use kafka_protocol::messages::metadata_response::{
            MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
        };
        let partition = |index: i32, leader: i32, code: i16| {
            MetadataResponsePartition::default()
                .with_partition_index(index)
                .with_leader_id(BrokerId(leader))
                .with_error_code(code)
        };
        let response = MetadataResponse::default()
            .with_brokers(vec![
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(1))
                    .with_host(StrBytes::from_static_str("b"))
                    .with_port(9001),
            ])
            .with_topics(vec![
                MetadataResponseTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_static_str(
                        TRANSACTION_STATE,
                    ))))
                    .with_partitions(vec![
                        partition(1, 7, 0),
                        partition(0, 1, 0),
                        partition(2, -1, 5),
                    ]),
            ]);
        let leaders = parse_leaders(response.clone()).unwrap();
        assert_eq!(leaders.len(), 3);
        assert_eq!(
            leaders[0],
            Ok(Broker {
                id: 1,
                addr: "b:9001".into()
            })
        );
        assert!(leaders[1].is_err(), "a leader not among the brokers");
        assert_eq!(leaders[2].as_ref().unwrap_err().code(), Some(5));
        let mut refused = response;
        refused.topics[0].error_code = ResponseError::TopicAuthorizationFailed.code();
        assert_eq!(
            parse_leaders(refused).unwrap_err().code(),
            Some(ResponseError::TopicAuthorizationFailed.code())
        );
        let request = build_leaders_request();
        assert!(!request.allow_auto_topic_creation);
        assert_eq!(
            request.topics.unwrap()[0].name.as_ref().unwrap().0.as_str(),
            TRANSACTION_STATE
        );
    }
}
