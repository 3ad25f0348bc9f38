//! What a broker process of the model answers, from what it knows: its view
//! of the controller's metadata and the log prefixes it copied. Each answer
//! follows the broker's handler in Kafka (`KafkaApis`: `handleTopicMetadataRequest`,
//! `handleFindCoordinatorRequest`, `handleDescribeTransactionsRequest` over
//! `TransactionStateManager`, `handleListOffsetRequest`, `handleFetchRequest`
//! with `Partition.checkCurrentLeaderEpoch`): a process that names itself
//! leader answers as leader, whatever the controller decided since.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeConfigsRequest, DescribeConfigsResponse, DescribeTransactionsRequest,
    DescribeTransactionsResponse, FetchRequest, FetchResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, ListOffsetsRequest, ListOffsetsResponse, MetadataRequest,
    MetadataResponse, ProducerId, RequestHeader, TopicName,
    describe_configs_response::{DescribeConfigsResourceResult, DescribeConfigsResult},
    describe_transactions_response::TransactionState,
    fetch_response::{AbortedTransaction, FetchableTopicResponse, PartitionData},
    find_coordinator_response::Coordinator,
    list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse},
    metadata_response::{MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic},
};
use kafka_protocol::protocol::StrBytes;

use super::{Life, Model, Part, State, latest};
use crate::fake::{Gate, Script, answer, request};

const TRANSACTION_STATE: &str = "__transaction_state";
const NONE: i16 = 0;
const OFFSET_OUT_OF_RANGE: i16 = 1;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const FENCED_LEADER_EPOCH: i16 = 74;
const UNKNOWN_LEADER_EPOCH: i16 = 75;
const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;

/// The script of process `p`: each request answered under the model's
/// lock, from what `p` knows when it is answered.
pub(super) fn script(model: Arc<Model>, p: usize) -> Script {
    Arc::new(move |header: &RequestHeader, body: Bytes| {
        let now = (model.now)();
        // FNV-1a of the request's bytes.
        let hash = body.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
        });
        krabka_coordination::sync::lock(&model.requests).push((
            now,
            p,
            header.request_api_key,
            hash,
        ));
        model.with(|s| s.answer(p, header, body, now))
    })
}

/// The gate of process `p`: a request waits while `p` is paused or its
/// disk stalled; a Fetch waits for data up to its `max_wait_ms` (a long
/// poll); a request to a process that died closes the connection.
pub(super) fn gate(model: Arc<Model>, p: usize) -> Gate {
    Arc::new(move |header: &RequestHeader, body: &Bytes| {
        let model = model.clone();
        let fetch = (header.request_api_key == ApiKey::Fetch as i16)
            .then(|| request::<FetchRequest>(header.request_api_version, body.clone()));
        Box::pin(async move {
            let mut changes = model.changed.subscribe();
            let mut deadline: Option<tokio::time::Instant> = None;
            loop {
                changes.borrow_and_update();
                let (life, runs, ready) = model.with(|s| {
                    let process = &s.processes[p];
                    let ready = fetch.as_ref().is_none_or(|f| s.fetch_ready(p, f));
                    (process.life, process.answers(), ready)
                });
                if life == Life::Dead {
                    return false;
                }
                if runs {
                    let due = *deadline.get_or_insert_with(|| {
                        let wait = fetch.as_ref().map_or(0, |f| f.max_wait_ms.max(0));
                        tokio::time::Instant::now() + Duration::from_millis(wait as u64)
                    });
                    if ready || tokio::time::Instant::now() >= due {
                        return true;
                    }
                    let _ = tokio::time::timeout_at(due, changes.changed()).await;
                } else {
                    // Paused or stalled: wait, however long.
                    let _ = changes.changed().await;
                }
            }
        })
    })
}

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

impl State {
    /// Process `p`'s answer to one request.
    fn answer(
        &self,
        p: usize,
        header: &RequestHeader,
        body: Bytes,
        now: Duration,
    ) -> Option<Bytes> {
        let process = &self.processes[p];
        if process.life != Life::Running {
            return None;
        }
        let version = header.request_api_version;
        match ApiKey::try_from(header.request_api_key).ok()? {
            ApiKey::Metadata => Some(answer(header, &self.metadata(p, request(version, body)))),
            ApiKey::FindCoordinator => Some(answer(
                header,
                &self.find_coordinator(p, request(version, body)),
            )),
            ApiKey::DescribeTransactions => Some(answer(
                header,
                &self.describe_transactions(p, request(version, body), now),
            )),
            ApiKey::DescribeConfigs => Some(answer(
                header,
                &self.describe_configs(request(version, body)),
            )),
            ApiKey::ListOffsets => Some(answer(
                header,
                &self.list_offsets(p, request(version, body)),
            )),
            ApiKey::Fetch => Some(answer(header, &self.fetch(p, request(version, body)))),
            // The service writes nothing; a request it should not send is
            // never answered.
            _ => None,
        }
    }

    fn broker(&self, node: i32) -> MetadataResponseBroker {
        let addr = self
            .settings
            .brokers
            .iter()
            .find(|(n, _)| *n == node)
            .map_or("unknown:0", |(_, a)| a.as_str());
        let (host, port) = addr.rsplit_once(':').unwrap_or((addr, "0"));
        MetadataResponseBroker::default()
            .with_node_id(BrokerId(node))
            .with_host(text(host))
            .with_port(port.parse().unwrap_or(0))
    }

    /// The partitions of `topic` as process `p` knows them, `None` for a
    /// topic that does not exist.
    fn partitions_of(&self, p: usize, topic: &str) -> Option<Vec<MetadataResponsePartition>> {
        let view = &self.processes[p].view;
        let parts: Vec<Part> = if topic == TRANSACTION_STATE {
            (0..self.settings.txn_partitions).map(Part::Txn).collect()
        } else if topic == self.settings.topic {
            (0..self.settings.topic_partitions)
                .map(Part::Topic)
                .collect()
        } else {
            return None;
        };
        Some(
            parts
                .into_iter()
                .map(|part| {
                    let replicas: Vec<BrokerId> =
                        self.replicas(part).into_iter().map(BrokerId).collect();
                    let index = match part {
                        Part::Txn(i) | Part::Topic(i) => i,
                    };
                    let lead = view.leader(part);
                    MetadataResponsePartition::default()
                        .with_partition_index(index)
                        .with_leader_id(BrokerId(lead.map_or(-1, |l| l.leader)))
                        .with_leader_epoch(lead.map_or(-1, |l| l.epoch))
                        .with_replica_nodes(replicas)
                        .with_isr_nodes(
                            lead.map(|l| l.isr.iter().copied().map(BrokerId).collect())
                                .unwrap_or_default(),
                        )
                })
                .collect(),
        )
    }

    fn metadata(&self, p: usize, asked: MetadataRequest) -> MetadataResponse {
        let view = &self.processes[p].view;
        let brokers = view
            .brokers
            .iter()
            .filter(|(_, r)| !r.fenced)
            .map(|(node, _)| self.broker(*node))
            .collect();
        let names: Vec<String> = match asked.topics {
            None => vec![TRANSACTION_STATE.to_owned(), self.settings.topic.clone()],
            Some(topics) => topics
                .into_iter()
                .filter_map(|t| t.name.map(|n| n.0.to_string()))
                .collect(),
        };
        let topics = names
            .into_iter()
            .map(|name| {
                let topic =
                    MetadataResponseTopic::default().with_name(Some(TopicName(text(&name))));
                match self.partitions_of(p, &name) {
                    Some(partitions) => topic
                        .with_is_internal(name == TRANSACTION_STATE)
                        .with_partitions(partitions),
                    None => topic.with_error_code(UNKNOWN_TOPIC_OR_PARTITION),
                }
            })
            .collect();
        MetadataResponse::default()
            .with_cluster_id(Some(text(&self.data.cluster)))
            .with_controller_id(BrokerId(-1))
            .with_brokers(brokers)
            .with_topics(topics)
    }

    fn find_coordinator(&self, p: usize, asked: FindCoordinatorRequest) -> FindCoordinatorResponse {
        let view = &self.processes[p].view;
        let coordinators = asked
            .coordinator_keys
            .into_iter()
            .map(|key| {
                let part = Part::Txn(self.txn_part(key.as_str()));
                let alive = view
                    .leader(part)
                    .filter(|l| view.brokers.get(&l.leader).is_some_and(|r| !r.fenced));
                match alive {
                    Some(l) => {
                        let broker = self.broker(l.leader);
                        Coordinator::default()
                            .with_key(key)
                            .with_node_id(BrokerId(l.leader))
                            .with_host(broker.host)
                            .with_port(broker.port)
                    }
                    None => Coordinator::default()
                        .with_key(key)
                        .with_node_id(BrokerId(-1))
                        .with_error_code(COORDINATOR_NOT_AVAILABLE),
                }
            })
            .collect();
        FindCoordinatorResponse::default().with_coordinators(coordinators)
    }

    fn describe_transactions(
        &self,
        p: usize,
        asked: DescribeTransactionsRequest,
        now: Duration,
    ) -> DescribeTransactionsResponse {
        let process = &self.processes[p];
        let states = asked
            .transactional_ids
            .into_iter()
            .map(|id| {
                let i = self.txn_part(id.as_str());
                let part = Part::Txn(i);
                let state = TransactionState::default().with_transactional_id(id.clone());
                let Some((_, loaded)) = process.leading.get(&part) else {
                    return state.with_error_code(NOT_COORDINATOR);
                };
                if now < *loaded {
                    return state.with_error_code(COORDINATOR_LOAD_IN_PROGRESS);
                }
                let known = process.known.get(&part).copied().unwrap_or(0);
                match latest(&self.data.txn[&i], known, id.as_str()) {
                    None => state.with_error_code(TRANSACTIONAL_ID_NOT_FOUND),
                    Some(v) => state
                        .with_transaction_state(text(v.state))
                        .with_producer_id(ProducerId(v.pid))
                        .with_producer_epoch(v.epoch)
                        .with_transaction_timeout_ms(60_000),
                }
            })
            .collect();
        DescribeTransactionsResponse::default().with_transaction_states(states)
    }

    fn describe_configs(&self, asked: DescribeConfigsRequest) -> DescribeConfigsResponse {
        let results = asked
            .resources
            .into_iter()
            .map(|r| {
                let result = DescribeConfigsResult::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name.clone());
                let config = |name: &'static str, value: String| {
                    DescribeConfigsResourceResult::default()
                        .with_name(StrBytes::from_static_str(name))
                        .with_value(Some(StrBytes::from_string(value)))
                };
                // `__transaction_state` is created with its
                // `min.insync.replicas` from `transaction.state.log.min.isr`
                // (`TransactionStateManager.transactionTopicConfigs`); the
                // coordination topic (and a broker) has the broker's.
                let min_isr = match r.resource_name.as_str() {
                    TRANSACTION_STATE if r.resource_type == 2 => self.settings.min_isr,
                    name if r.resource_type == 2 && name != self.settings.topic => {
                        return result.with_error_code(UNKNOWN_TOPIC_OR_PARTITION);
                    }
                    _ => self.settings.topic_min_isr,
                };
                result.with_configs(vec![
                    config("cleanup.policy", "compact".to_owned()),
                    config("max.message.bytes", "1048588".to_owned()),
                    config("min.insync.replicas", min_isr.to_string()),
                ])
            })
            .collect();
        DescribeConfigsResponse::default().with_results(results)
    }

    /// Kafka's check of a request's leader epoch against what `p` knows of
    /// the partition (`Partition.checkCurrentLeaderEpoch`); `Err` the error,
    /// `Ok` the epoch.
    fn leads(&self, p: usize, part: Part, asked_epoch: i32) -> Result<i32, i16> {
        let process = &self.processes[p];
        let lead = process
            .view
            .leader(part)
            .ok_or(UNKNOWN_TOPIC_OR_PARTITION)?;
        if asked_epoch >= 0 && asked_epoch < lead.epoch {
            return Err(FENCED_LEADER_EPOCH);
        }
        if asked_epoch > lead.epoch {
            return Err(UNKNOWN_LEADER_EPOCH);
        }
        if lead.leader != process.node {
            return Err(NOT_LEADER_OR_FOLLOWER);
        }
        Ok(lead.epoch)
    }

    fn list_offsets(&self, p: usize, asked: ListOffsetsRequest) -> ListOffsetsResponse {
        let topics = asked
            .topics
            .into_iter()
            .map(|t| {
                let ours = t.name.0.as_str() == self.settings.topic;
                let partitions = t
                    .partitions
                    .into_iter()
                    .map(|q| {
                        let response = ListOffsetsPartitionResponse::default()
                            .with_partition_index(q.partition_index)
                            .with_timestamp(-1);
                        let part = Part::Topic(q.partition_index);
                        let log = self.data.topic.get(&q.partition_index).filter(|_| ours);
                        let Some(log) = log else {
                            return response.with_error_code(UNKNOWN_TOPIC_OR_PARTITION);
                        };
                        match self.leads(p, part, q.current_leader_epoch) {
                            Err(code) => response.with_error_code(code),
                            Ok(epoch) => {
                                let known =
                                    self.processes[p].known.get(&part).copied().unwrap_or(0);
                                let offset = match (q.timestamp, asked.isolation_level) {
                                    (-2, _) => 0,
                                    (_, 1) => log.last_stable_offset(known),
                                    _ => known as i64,
                                };
                                response.with_offset(offset).with_leader_epoch(epoch)
                            }
                        }
                    })
                    .collect();
                ListOffsetsTopicResponse::default()
                    .with_name(t.name)
                    .with_partitions(partitions)
            })
            .collect();
        ListOffsetsResponse::default().with_topics(topics)
    }

    /// Whether a long poll of `asked` at `p` answers now: some partition
    /// has data past its offset, or an error to give.
    fn fetch_ready(&self, p: usize, asked: &FetchRequest) -> bool {
        asked.topics.iter().any(|t| {
            t.topic.0.as_str() != self.settings.topic
                || t.partitions.iter().any(|q| {
                    let part = Part::Topic(q.partition);
                    match (
                        self.leads(p, part, q.current_leader_epoch),
                        self.data.topic.get(&q.partition),
                    ) {
                        (Ok(_), Some(log)) => {
                            let known = self.processes[p].known.get(&part).copied().unwrap_or(0);
                            log.has_data(known, q.fetch_offset) || q.fetch_offset > known as i64
                        }
                        _ => true,
                    }
                })
        })
    }

    fn fetch(&self, p: usize, asked: FetchRequest) -> FetchResponse {
        let responses = asked
            .topics
            .into_iter()
            .map(|t| {
                let ours = t.topic.0.as_str() == self.settings.topic;
                let partitions = t
                    .partitions
                    .iter()
                    .map(|q| {
                        let data = PartitionData::default().with_partition_index(q.partition);
                        let part = Part::Topic(q.partition);
                        let Some(log) = self.data.topic.get(&q.partition).filter(|_| ours) else {
                            return data.with_error_code(UNKNOWN_TOPIC_OR_PARTITION);
                        };
                        if let Err(code) = self.leads(p, part, q.current_leader_epoch) {
                            return data.with_error_code(code);
                        }
                        let known = self.processes[p].known.get(&part).copied().unwrap_or(0);
                        if q.fetch_offset > known as i64 || q.fetch_offset < 0 {
                            return data
                                .with_error_code(OFFSET_OUT_OF_RANGE)
                                .with_high_watermark(known as i64);
                        }
                        let read = log.read(known, q.fetch_offset);
                        let aborted = read
                            .aborted
                            .iter()
                            .map(|(pid, first)| {
                                AbortedTransaction::default()
                                    .with_producer_id(ProducerId(*pid))
                                    .with_first_offset(*first)
                            })
                            .collect();
                        data.with_error_code(NONE)
                            .with_high_watermark(read.high_watermark)
                            .with_last_stable_offset(read.last_stable_offset)
                            .with_log_start_offset(0)
                            .with_aborted_transactions(Some(aborted))
                            .with_records(read.records)
                    })
                    .collect();
                FetchableTopicResponse::default()
                    .with_topic(t.topic)
                    .with_partitions(partitions)
            })
            .collect();
        FetchResponse::default().with_responses(responses)
    }
}
