//! Reading a partition with read_committed: from an offset to the last
//! stable offset, never waiting for the high watermark.

use std::time::Duration;

use kafka_protocol::messages::{
    FetchRequest, ListOffsetsRequest, TopicName,
    fetch_request::{FetchPartition, FetchTopic},
    list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic},
};
use kafka_protocol::protocol::StrBytes;

use super::batch::visible_records;
use super::client::KafkaClient;
use super::error::KafkaError;
use crate::coordination::LogRecord;

const READ_COMMITTED: i8 = 1;
/// ListOffsets timestamp for the end of the log (the LSO under read_committed).
pub const LATEST: i64 = -1;
/// ListOffsets timestamp for the log start offset.
pub const EARLIEST: i64 = -2;

/// Records read from one partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionRead {
    /// Committed data records, in offset order.
    pub records: Vec<LogRecord>,
    /// Where the next read starts.
    pub next_offset: i64,
    /// The last stable offset the read went up to.
    pub last_stable_offset: i64,
    /// The partition's log start offset.
    pub log_start_offset: i64,
    /// The high watermark at the last fetch.
    pub high_watermark: i64,
}

/// One fetch response for one partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FetchChunk {
    /// Committed data records at or above the fetch offset.
    pub records: Vec<LogRecord>,
    /// The offset after the last whole batch returned, if any.
    pub next_offset: Option<i64>,
    /// The partition's last stable offset.
    pub last_stable_offset: i64,
    /// The high watermark.
    pub high_watermark: i64,
    /// The log start offset.
    pub log_start_offset: i64,
}

impl KafkaClient {
    /// One ListOffsets (read_committed) for a partition: `LATEST` gives the
    /// last stable offset, `EARLIEST` the log start offset.
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<i64, KafkaError> {
        self.retrying("list offsets", |timeout| async move {
            let leader = self.leader(topic, partition).await?;
            let request = ListOffsetsRequest::default()
                .with_replica_id(kafka_protocol::messages::BrokerId(-1))
                .with_isolation_level(READ_COMMITTED)
                .with_topics(vec![
                    ListOffsetsTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                        .with_partitions(vec![
                            ListOffsetsPartition::default()
                                .with_partition_index(partition)
                                .with_current_leader_epoch(-1)
                                .with_timestamp(timestamp),
                        ]),
                ]);
            let (response, _) = self.call_at(&leader.addr, &request, timeout).await?;
            let p = response
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter())
                .find(|p| p.partition_index == partition)
                .ok_or_else(|| KafkaError::Protocol {
                    addr: leader.addr.clone(),
                    reason: format!("ListOffsets answered nothing for {topic}-{partition}"),
                })?;
            if p.error_code != 0 {
                let err = KafkaError::broker("ListOffsets", p.error_code, None);
                if err.needs_metadata_refresh() {
                    self.invalidate_topic(topic);
                }
                return Err(err);
            }
            Ok(p.offset)
        })
        .await
    }

    /// One read_committed fetch of a partition from `offset`, waiting up to
    /// `max_wait` for new data (0 answers at once). No retries: the caller
    /// decides (a long-polling watcher retries forever, a read gives up).
    pub async fn fetch_once(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait: Duration,
        max_bytes: i32,
        timeout: Duration,
    ) -> Result<FetchChunk, KafkaError> {
        let mut answers = self
            .fetch_many(topic, &[(partition, offset)], max_wait, max_bytes, timeout)
            .await?;
        answers.pop().map_or_else(
            || Err(KafkaError::Invalid("no fetch answer".into())),
            |(_, chunk)| chunk,
        )
    }

    /// One read_committed fetch of many partitions of `topic`: one request
    /// per partition leader, sent concurrently. A broker answers one request
    /// per connection at a time, so a watcher long-polling many partitions
    /// must ask for them together, not one request each. Returns each
    /// partition's chunk or error; the outer error is only for a request
    /// that failed as a whole on every leader asked.
    pub async fn fetch_many(
        &self,
        topic: &str,
        offsets: &[(i32, i64)],
        max_wait: Duration,
        partition_max_bytes: i32,
        timeout: Duration,
    ) -> Result<Vec<(i32, Result<FetchChunk, KafkaError>)>, KafkaError> {
        let mut by_leader: std::collections::HashMap<String, Vec<(i32, i64)>> = Default::default();
        let mut out = Vec::with_capacity(offsets.len());
        for &(partition, offset) in offsets {
            match self.leader(topic, partition).await {
                Ok(leader) => by_leader
                    .entry(leader.addr)
                    .or_default()
                    .push((partition, offset)),
                Err(e) => out.push((partition, Err(e))),
            }
        }
        let requests = by_leader.iter().map(|(addr, partitions)| async move {
            (
                partitions,
                self.fetch_from(
                    addr,
                    topic,
                    partitions,
                    max_wait,
                    partition_max_bytes,
                    timeout,
                )
                .await,
            )
        });
        let mut last_error = None;
        for (partitions, result) in futures::future::join_all(requests).await {
            match result {
                Ok(chunks) => out.extend(chunks),
                Err(e) => {
                    for &(partition, _) in partitions {
                        out.push((partition, Err(e.clone())));
                    }
                    last_error = Some(e);
                }
            }
        }
        if out.iter().all(|(_, r)| r.is_err())
            && let Some(e) = last_error
        {
            return Err(e);
        }
        Ok(out)
    }

    async fn fetch_from(
        &self,
        addr: &str,
        topic: &str,
        partitions: &[(i32, i64)],
        max_wait: Duration,
        partition_max_bytes: i32,
        timeout: Duration,
    ) -> Result<Vec<(i32, Result<FetchChunk, KafkaError>)>, KafkaError> {
        let request = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(i32::try_from(max_wait.as_millis()).unwrap_or(i32::MAX))
            .with_min_bytes(1)
            .with_max_bytes(partition_max_bytes.saturating_mul(partitions.len().min(16) as i32))
            .with_isolation_level(READ_COMMITTED)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partitions(
                        partitions
                            .iter()
                            .map(|&(partition, offset)| {
                                FetchPartition::default()
                                    .with_partition(partition)
                                    .with_current_leader_epoch(-1)
                                    .with_fetch_offset(offset)
                                    .with_last_fetched_epoch(-1)
                                    .with_log_start_offset(-1)
                                    .with_partition_max_bytes(partition_max_bytes)
                            })
                            .collect(),
                    ),
            ]);
        let result = self.call_at(addr, &request, timeout + max_wait).await;
        let (response, _) = match result {
            Ok(r) => r,
            Err(e) => {
                if e.needs_metadata_refresh() {
                    self.invalidate_topic(topic);
                }
                return Err(e);
            }
        };
        if response.error_code != 0 {
            return Err(KafkaError::broker("Fetch", response.error_code, None));
        }
        let mut data: std::collections::HashMap<i32, _> = response
            .responses
            .into_iter()
            .flat_map(|t| t.partitions)
            .map(|p| (p.partition_index, p))
            .collect();
        let mut out = Vec::with_capacity(partitions.len());
        for &(partition, offset) in partitions {
            let Some(data) = data.remove(&partition) else {
                out.push((
                    partition,
                    Err(KafkaError::Protocol {
                        addr: addr.to_owned(),
                        reason: format!("Fetch answered nothing for {topic}-{partition}"),
                    }),
                ));
                continue;
            };
            if data.error_code != 0 {
                let err = KafkaError::broker("Fetch", data.error_code, None);
                if err.needs_metadata_refresh() {
                    self.invalidate_topic(topic);
                }
                out.push((partition, Err(err)));
                continue;
            }
            let aborted: Vec<(i64, i64)> = data
                .aborted_transactions
                .unwrap_or_default()
                .iter()
                .map(|a| (a.producer_id.0, a.first_offset))
                .collect();
            let visible = match &data.records {
                Some(bytes) => visible_records(bytes, &aborted, offset).map_err(|reason| {
                    KafkaError::Protocol {
                        addr: addr.to_owned(),
                        reason: format!("{topic}-{partition}: {reason}"),
                    }
                }),
                None => Ok(Default::default()),
            };
            out.push((
                partition,
                visible.map(|visible| FetchChunk {
                    records: visible.records,
                    next_offset: visible.next_offset,
                    last_stable_offset: data.last_stable_offset,
                    high_watermark: data.high_watermark,
                    log_start_offset: data.log_start_offset,
                }),
            ));
        }
        Ok(out)
    }

    /// Reads a partition with read_committed from `from` up to the last
    /// stable offset as it stood when the read began. Aborted transactions
    /// and control batches are dropped. An open transaction holds the LSO
    /// back, so this returns what lies before it without waiting.
    pub async fn read_committed(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
    ) -> Result<PartitionRead, KafkaError> {
        let end = self.list_offset(topic, partition, LATEST).await?;
        let mut read = PartitionRead {
            next_offset: from.max(0),
            last_stable_offset: end,
            high_watermark: end,
            ..PartitionRead::default()
        };
        let max_bytes = 4 * 1024 * 1024;
        let mut empty_fetches = 0;
        while read.next_offset < end {
            let offset = read.next_offset;
            let chunk = self
                .retrying("fetch", |timeout| async move {
                    self.fetch_once(topic, partition, offset, Duration::ZERO, max_bytes, timeout)
                        .await
                })
                .await;
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(e) if e.code() == Some(1) => {
                    // OFFSET_OUT_OF_RANGE: retention moved the log start past us.
                    let start = self.list_offset(topic, partition, EARLIEST).await?;
                    if start <= offset {
                        return Err(e);
                    }
                    tracing::warn!(
                        topic,
                        partition,
                        offset,
                        start,
                        "offset out of range; reading from the log start"
                    );
                    read.next_offset = start;
                    continue;
                }
                Err(e) => return Err(e),
            };
            read.log_start_offset = chunk.log_start_offset;
            read.high_watermark = chunk.high_watermark;
            read.records.extend(chunk.records);
            match chunk.next_offset {
                Some(next) if next > offset => {
                    read.next_offset = next;
                    empty_fetches = 0;
                }
                _ => {
                    // Nothing whole came back below the LSO: the rest of the
                    // range holds no batch (compacted away). Stop at `end`.
                    empty_fetches += 1;
                    if empty_fetches >= 2 || chunk.last_stable_offset >= end {
                        read.next_offset = end;
                    }
                }
            }
        }
        Ok(read)
    }
}
