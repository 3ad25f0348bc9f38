//! Produce requests: plain appends (registrations) and the batch a
//! transactional write sends. Every write is pinned to a partition and
//! waits for acks=all.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ProduceRequest, ProduceResponse, TopicName, TransactionalId,
    produce_request::{PartitionProduceData, TopicProduceData},
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::client::KafkaClient;
use super::error::KafkaError;
use super::retry::retrying;
use super::state::Lesson;

const ACKS_ALL: i16 = -1;

/// The producer fields of a batch: none for a plain append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProducerFields {
    pub(crate) producer_id: i64,
    pub(crate) producer_epoch: i16,
    pub(crate) sequence: i32,
    pub(crate) transactional: bool,
}

impl ProducerFields {
    pub(crate) const NONE: ProducerFields = ProducerFields {
        producer_id: -1,
        producer_epoch: -1,
        sequence: -1,
        transactional: false,
    };
}

/// One record to write.
#[derive(Clone, Debug)]
pub(crate) struct Write<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) key: Bytes,
    /// `None` writes a tombstone.
    pub(crate) value: Option<Bytes>,
    pub(crate) timestamp_ms: i64,
}

/// Encodes one record as a v2 batch.
pub(crate) fn encode_batch(
    write: &Write<'_>,
    producer: ProducerFields,
) -> Result<Bytes, KafkaError> {
    let record = Record {
        transactional: producer.transactional,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: producer.producer_id,
        producer_epoch: producer.producer_epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: producer.sequence,
        timestamp: write.timestamp_ms,
        key: Some(write.key.clone()),
        value: write.value.clone(),
        headers: Default::default(),
    };
    let mut buf = BytesMut::with_capacity(128);
    RecordBatchEncoder::encode(
        &mut buf,
        [&record],
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| KafkaError::Internal(format!("cannot encode a record batch: {e:#}")))?;
    Ok(buf.freeze())
}

/// Encodes many records as ONE v2 batch without producer state (plain
/// appends): a produce request may carry only one batch per partition.
pub(crate) fn encode_plain_batch(
    records: &[(Bytes, Option<Bytes>)],
    timestamp_ms: i64,
) -> Result<Bytes, KafkaError> {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder keeps records in one batch only while offset minus
            // sequence is constant; the batch's base sequence stays -1 (none).
            sequence: i as i32 - 1,
            timestamp: timestamp_ms,
            key: Some(key.clone()),
            value: value.clone(),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::with_capacity(64 * records.len() + 64);
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| KafkaError::Internal(format!("cannot encode a record batch: {e:#}")))?;
    Ok(buf.freeze())
}

/// A Produce of one prepared batch to `topic`-`partition` with acks=all,
/// in the transaction of `transactional_id` if any.
fn build_produce(
    topic: &str,
    partition: i32,
    batch: Bytes,
    transactional_id: Option<&str>,
    timeout: Duration,
) -> ProduceRequest {
    ProduceRequest::default()
        .with_transactional_id(
            transactional_id.map(|id| TransactionalId(StrBytes::from_string(id.to_owned()))),
        )
        .with_acks(ACKS_ALL)
        .with_timeout_ms(i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX))
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(batch)),
                ]),
        ])
}

/// The base offset a Produce answer (from `addr`) gives the batch written
/// to `topic`-`partition`, or its error.
fn parse_produce(
    response: &ProduceResponse,
    addr: &str,
    topic: &str,
    partition: i32,
) -> Result<i64, KafkaError> {
    let p = response
        .responses
        .iter()
        .flat_map(|t| t.partition_responses.iter())
        .find(|p| p.index == partition)
        .ok_or_else(|| KafkaError::Protocol {
            addr: addr.to_owned(),
            reason: format!("Produce answered nothing for {topic}-{partition}"),
        })?;
    match p.error_code {
        0 => Ok(p.base_offset),
        code => Err(KafkaError::broker(
            "Produce",
            code,
            p.error_message.as_ref().map(|m| m.to_string()),
        )),
    }
}

/// Writes (`KafkaClient::producer`): idempotent appends, producer ids and
/// transactions (`txn`).
#[derive(Clone, Copy, Debug)]
pub struct Producer<'a> {
    pub(crate) client: &'a KafkaClient,
}

impl KafkaClient {
    /// Appends, producer ids and transactions.
    pub fn producer(&self) -> Producer<'_> {
        Producer { client: self }
    }
}

impl Producer<'_> {
    /// Sends one produce request for a prepared batch to the partition's
    /// leader; returns the base offset. No retries.
    pub(crate) async fn produce_batch(
        &self,
        topic: &str,
        partition: i32,
        batch: Bytes,
        transactional_id: Option<&str>,
    ) -> Result<i64, KafkaError> {
        let leader = self
            .client
            .metadata()
            .leader(topic, partition)
            .await?
            .broker;
        let timeout = self.client.config().request_timeout;
        let request = build_produce(topic, partition, batch, transactional_id, timeout);
        let offset = match self.client.send_to(&leader.addr, &request).await {
            Ok(response) => parse_produce(&response, &leader.addr, topic, partition),
            Err(e) => Err(e),
        };
        if let Err(error) = &offset {
            self.client.state().learn(Lesson::PartitionError {
                topic,
                addr: &leader.addr,
                error,
            });
        }
        offset
    }

    /// Appends many records to one partition in one batch, outside any
    /// transaction, with acks=all; returns the first record's offset. For
    /// bulk loads (tools, benchmarks); the coordination clients append one
    /// registration at a time.
    pub async fn append_batch(
        &self,
        topic: &str,
        partition: i32,
        records: &[(Bytes, Option<Bytes>)],
        timestamp_ms: i64,
    ) -> Result<i64, KafkaError> {
        if records.is_empty() {
            return Err(KafkaError::Config("an empty batch".into()));
        }
        let batch = encode_plain_batch(records, timestamp_ms)?;
        retrying(self.client.config(), "append batch", || {
            let batch = batch.clone();
            async move { self.produce_batch(topic, partition, batch, None).await }
        })
        .await
    }

    /// Appends one record outside any transaction (a registration or its
    /// tombstone) with acks=all; returns its offset. A retried append after
    /// an ambiguous failure may be written twice, which the registration
    /// rules tolerate (the later copy counts).
    pub async fn append(
        &self,
        topic: &str,
        partition: i32,
        key: Bytes,
        value: Option<Bytes>,
        timestamp_ms: i64,
    ) -> Result<i64, KafkaError> {
        let write = Write {
            topic,
            partition,
            key,
            value,
            timestamp_ms,
        };
        let batch = encode_batch(&write, ProducerFields::NONE)?;
        retrying(self.client.config(), "append", || {
            let batch = batch.clone();
            async move { self.produce_batch(topic, partition, batch, None).await }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::RecordBatchDecoder;

    #[test]
    fn a_produce_waits_for_every_replica_and_names_its_transaction() {
        let request = build_produce(
            "t",
            3,
            Bytes::from_static(b"x"),
            Some("r"),
            Duration::from_secs(5),
        );
        assert_eq!((request.acks, request.timeout_ms), (ACKS_ALL, 5000));
        assert_eq!(request.transactional_id.unwrap().0.as_str(), "r");
        let data = &request.topic_data[0].partition_data[0];
        assert_eq!((data.index, data.records.as_deref()), (3, Some(&b"x"[..])));
        let plain = build_produce("t", 3, Bytes::new(), None, Duration::ZERO);
        assert!(plain.transactional_id.is_none());
    }

    #[test]
    fn an_answer_gives_the_base_offset_or_the_error_with_its_message() {
        use kafka_protocol::messages::produce_response::{
            PartitionProduceResponse, TopicProduceResponse,
        };
        let answer = |code: i16| {
            ProduceResponse::default().with_responses(vec![
                TopicProduceResponse::default().with_partition_responses(vec![
                    PartitionProduceResponse::default()
                        .with_index(3)
                        .with_error_code(code)
                        .with_base_offset(41)
                        .with_error_message(Some(StrBytes::from_static_str("why"))),
                ]),
            ])
        };
        assert_eq!(parse_produce(&answer(0), "b:1", "t", 3), Ok(41));
        let fenced = parse_produce(&answer(90), "b:1", "t", 3).unwrap_err();
        assert!(
            fenced.is_fenced() && fenced.to_string().contains("why"),
            "{fenced}"
        );
        let missing = parse_produce(&answer(0), "b:1", "t", 4).unwrap_err();
        assert!(matches!(missing, KafkaError::Protocol { .. }), "{missing}");
    }

    #[test]
    fn many_records_make_exactly_one_batch_without_a_sequence() {
        let records: Vec<(Bytes, Option<Bytes>)> = (0..50)
            .map(|i| {
                (
                    Bytes::from(format!("k{i}")),
                    Some(Bytes::from(format!("v{i}"))),
                )
            })
            .collect();
        let mut bytes = encode_plain_batch(&records, 7).unwrap();
        let batches = RecordBatchDecoder::decode_batch_info(&mut bytes.clone()).unwrap();
        assert_eq!(batches.len(), 1, "a produce request carries one batch");
        assert_eq!(batches[0].record_count, 50);
        assert_eq!(batches[0].base_sequence, -1);
        assert_eq!(batches[0].producer_id, -1);
        let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
        let offsets: Vec<i64> = set.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, (0..50).collect::<Vec<_>>());
        assert_eq!(set.records[49].key.as_deref(), Some(&b"k49"[..]));
    }
}
