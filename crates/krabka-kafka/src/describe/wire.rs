//! The describe's requests and answers as Kafka writes them: pure
//! `build_*`/`parse_*`, the only place their numbers are read.

use std::collections::HashMap;

use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, MetadataRequest, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use super::DescribeAnswer;
use crate::config::Broker;
use crate::coordinator::coordinator_error;
use crate::error::{KafkaError, ResponseError};
use crate::metadata::{TRANSACTION_STATE, build_metadata};
use crate::state::{Leader, MetadataAnswer, TransactionDescription};

/// A DescribeTransactions of `ids`.
pub(super) fn build_describe(ids: &[String]) -> DescribeTransactionsRequest {
    DescribeTransactionsRequest::default().with_transactional_ids(
        ids.iter()
            .map(|id| TransactionalId(StrBytes::from_string(id.clone())))
            .collect(),
    )
}

/// Per id, what a DescribeTransactions answer says: its pair, nobody
/// (TRANSACTIONAL_ID_NOT_FOUND), or the error code.
pub(super) fn parse_describe(
    response: DescribeTransactionsResponse,
) -> HashMap<String, DescribeAnswer> {
    response
        .transaction_states
        .into_iter()
        .map(|state| {
            let answer = match state.error_code {
                0 => Ok(Some(TransactionDescription {
                    state: state.transaction_state.to_string(),
                    producer_id: state.producer_id.0,
                    producer_epoch: state.producer_epoch,
                    timeout_ms: state.transaction_timeout_ms,
                    start_time_ms: state.transaction_start_time_ms,
                })),
                code if code == ResponseError::TransactionalIdNotFound.code() => Ok(None),
                code => Err(KafkaError::broker("DescribeTransactions", code, None)),
            };
            (state.transactional_id.0.to_string(), answer)
        })
        .collect()
}

/// A Metadata request of `__transaction_state` alone, never creating it.
pub(crate) fn build_leaders_request() -> MetadataRequest {
    build_metadata(vec![TRANSACTION_STATE.to_owned()])
}

/// One partition of `__transaction_state` as a Metadata answer names it:
/// its leader at its leader epoch, and its replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Replicated {
    pub(crate) leader: Leader,
    /// The node ids of its replicas.
    pub(crate) replicas: Vec<i32>,
}

/// Per partition of `__transaction_state` (by index), its leader with its
/// leader epoch and its replicas, or why it has no leader; the topic's
/// error when it has one. Read from the answer as the view takes it, so a
/// confirmation's Metadata answer is decoded once.
pub(crate) fn parse_leaders(
    answer: &MetadataAnswer,
) -> Result<Vec<Result<Replicated, KafkaError>>, KafkaError> {
    let topic = answer
        .topics
        .iter()
        .find_map(|(name, topic)| (name == TRANSACTION_STATE).then_some(topic))
        .ok_or_else(|| {
            KafkaError::Malformed(format!("Metadata answered nothing for {TRANSACTION_STATE}"))
        })?;
    if topic.error != 0 {
        return Err(KafkaError::broker("Metadata", topic.error, None));
    }
    let count = topic.partitions.len();
    let mut leaders: Vec<Result<Replicated, KafkaError>> = (0..count)
        .map(|p| {
            Err(KafkaError::Malformed(format!(
                "Metadata named no partition {p} of {TRANSACTION_STATE}"
            )))
        })
        .collect();
    for partition in &topic.partitions {
        let Some(slot) = usize::try_from(partition.index)
            .ok()
            .and_then(|i| leaders.get_mut(i))
        else {
            return Err(KafkaError::Malformed(format!(
                "Metadata named partition {} of {TRANSACTION_STATE}, which has {count}",
                partition.index
            )));
        };
        let leader = partition.leader;
        *slot = if partition.error != 0 {
            Err(KafkaError::broker("Metadata", partition.error, None))
        } else {
            match answer.brokers.iter().find(|(id, _)| *id == leader) {
                Some((_, addr)) => Ok(Replicated {
                    leader: Leader {
                        broker: Broker {
                            id: leader,
                            addr: addr.clone(),
                        },
                        epoch: partition.leader_epoch,
                    },
                    replicas: partition.replicas.clone(),
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
pub(crate) mod tests {
    use kafka_protocol::messages::describe_transactions_response::TransactionState;
    use kafka_protocol::messages::{BrokerId, MetadataResponse, ProducerId};

    use crate::metadata::parse_metadata;

    use super::*;

    fn pair(id: &str, code: i16) -> TransactionState {
        TransactionState::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_owned())))
            .with_error_code(code)
            .with_transaction_state(StrBytes::from_static_str("Ongoing"))
            .with_producer_id(ProducerId(7))
            .with_producer_epoch(3)
            .with_transaction_timeout_ms(10_000)
            .with_transaction_start_time_ms(42)
    }

    pub(crate) fn described(ids: &[&str]) -> HashMap<String, DescribeAnswer> {
        parse_describe(
            DescribeTransactionsResponse::default()
                .with_transaction_states(ids.iter().map(|id| pair(id, 0)).collect()),
        )
    }

    #[test]
    fn a_describe_asks_for_every_id() {
        let ids = ["a".to_owned(), "b".to_owned()];
        let asked: Vec<String> = build_describe(&ids)
            .transactional_ids
            .iter()
            .map(|id| id.0.to_string())
            .collect();
        assert_eq!(asked, ids);
    }

    #[test]
    fn an_answer_is_a_pair_nobody_or_the_error() {
        let answers = parse_describe(
            DescribeTransactionsResponse::default().with_transaction_states(vec![
                pair("held", 0),
                pair("free", ResponseError::TransactionalIdNotFound.code()),
                pair("moved", 16),
            ]),
        );
        let held = answers["held"].as_ref().unwrap().as_ref().unwrap();
        assert_eq!(
            (held.state.as_str(), held.producer_id, held.producer_epoch),
            ("Ongoing", 7, 3)
        );
        assert_eq!((held.timeout_ms, held.start_time_ms), (10_000, 42));
        assert_eq!(answers["free"], Ok(None));
        assert_eq!(answers["moved"].as_ref().unwrap_err().code(), Some(16));
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
                .with_leader_epoch(index + 10)
                .with_replica_nodes(vec![BrokerId(leader), BrokerId(4)])
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
        let leaders = parse_leaders(&parse_metadata(response.clone())).unwrap();
        assert_eq!(leaders.len(), 3);
        assert_eq!(
            leaders[0],
            Ok(Replicated {
                leader: Leader {
                    broker: Broker {
                        id: 1,
                        addr: "b:9001".into()
                    },
                    epoch: 10,
                },
                replicas: vec![1, 4],
            })
        );
        assert!(leaders[1].is_err(), "a leader not among the brokers");
        assert_eq!(leaders[2].as_ref().unwrap_err().code(), Some(5));
        let mut refused = response;
        refused.topics[0].error_code = ResponseError::TopicAuthorizationFailed.code();
        assert_eq!(
            parse_leaders(&parse_metadata(refused)).unwrap_err().code(),
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
