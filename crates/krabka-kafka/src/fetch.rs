//! Reading a partition with read_committed: from an offset to the last
//! stable offset, never waiting for the high watermark, always from the
//! partition's leader.
//!
//! Fetch v11+ may be served by a follower, which would keep a reader on the
//! old leader after a leadership move, lagging by its replication. So every
//! Fetch and ListOffsets carries the partition's leader epoch from metadata
//! (`current_leader_epoch`): a broker that is not the leader of that epoch
//! answers FENCED_LEADER_EPOCH (74), UNKNOWN_LEADER_EPOCH (75) or
//! NOT_LEADER_OR_FOLLOWER (6), and metadata is refreshed, as Kafka's Java
//! consumer does.
//!
//! A leader cut off from the controller does not know it was deposed and
//! keeps answering reads at its old epoch, from a log that no longer grows,
//! without any error that would refresh metadata. So a read
//! ([`KafkaClient::read_committed`]: the leader-election client's, the
//! CLI's) first has its partition's leader confirmed by another broker when
//! no confirmation of it is younger than `READ_CONFIRMED_WITHIN`
//! (`state::epochs`; the tailer confirms its leaders itself): a member then
//! reads the new leader's log, not the deposed one's, and does not
//! challenge a holder whose leases it cannot see.
//!
//! Every member of every role may write to the topic, and every reader
//! reads it from the start: so a compressed batch is decompressed with a
//! bound ([`Reader::max_batch_bytes`]) and one past it is skipped, said at
//! warn with its partition and offsets, and reported with the read
//! ([`FetchChunk::skipped`]); the read goes on after it (`batch`).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use kafka_protocol::messages::{
    BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse, TopicName,
    fetch_request::{FetchPartition, FetchTopic},
    fetch_response::PartitionData,
    list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic},
};
use kafka_protocol::protocol::StrBytes;

use super::batch::visible_records;
use super::client::KafkaClient;
use super::config::Broker;
use super::error::{KafkaError, ResponseError};
use super::retry::retrying;
use super::state::Lesson;
use krabka_coordination::{LogRecord, SkippedBatch};

const READ_COMMITTED: i8 = 1;
/// ListOffsets timestamp for the end of the log (the LSO under read_committed).
pub const LATEST: i64 = -1;
/// ListOffsets timestamp for the log start offset.
pub const EARLIEST: i64 = -2;
/// Most bytes asked of one partition per fetch.
const PARTITION_MAX_BYTES: i32 = 4 * 1024 * 1024;
/// Most partitions whose bytes a fetch asks for in all.
const FETCH_MAX_PARTITIONS: usize = 16;

/// The most bytes a fetch of `partitions` asks for in all (its
/// `max_bytes`): also the most its answer's decoded records may take, each
/// partition an equal share ([`record_room`]).
fn fetch_max_bytes(partitions: usize) -> i32 {
    PARTITION_MAX_BYTES.saturating_mul(partitions.clamp(1, FETCH_MAX_PARTITIONS) as i32)
}

/// The bytes the decoded records of one partition of an answer to a fetch
/// of `partitions` may take. Decoded, a record takes up to ten times its
/// bytes (`batch`): without this share, a 64 MiB answer of small records
/// would decode to over 600 MiB. With it, an answer's records take no more
/// than the answer was allowed to weigh; the rest is read by the next
/// fetches.
fn record_room(partitions: usize) -> usize {
    usize::try_from(fetch_max_bytes(partitions)).unwrap_or(0) / partitions.max(1)
}
/// A read's leader is confirmed by another broker first unless a
/// confirmation younger than this stands.
const READ_CONFIRMED_WITHIN: Duration = Duration::from_secs(1);
/// Kafka's default `max.message.bytes` (1 MiB and a batch header's 12
/// bytes): the bound on a batch's decompressed size when neither the
/// client's settings nor the topic say.
pub const DEFAULT_MAX_BATCH_BYTES: usize = 1_048_588;

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
    /// The batches stepped over, their records unread (they decompress
    /// past the bound), in offset order.
    pub skipped: Vec<SkippedBatch>,
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
    /// The batches stepped over, their records unread (they decompress
    /// past the bound), in offset order.
    pub skipped: Vec<SkippedBatch>,
}

/// Where a read_committed reader of one partition stands, and how a fetch
/// moves it. The one place for the two rules every reader needs:
/// - a fetch returns whole batches; the next read starts after the last;
/// - a fetch that returns nothing although the last stable offset is ahead
///   means that range holds no batch any more (compacted away): after two
///   such fetches in a row, the reader skips to the last stable offset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    next: i64,
    empty_below_lso: u32,
}

impl Cursor {
    /// A cursor at `offset`.
    pub fn at(offset: i64) -> Cursor {
        Cursor {
            next: offset.max(0),
            empty_below_lso: 0,
        }
    }

    /// Where the next fetch starts.
    pub fn next_offset(&self) -> i64 {
        self.next
    }

    /// Moves past what `chunk` returned (fetched from the current position).
    pub fn advance(&mut self, chunk: &FetchChunk) {
        match chunk.next_offset {
            Some(next) if next > self.next => {
                self.next = next;
                self.empty_below_lso = 0;
            }
            _ if chunk.last_stable_offset > self.next => {
                self.empty_below_lso += 1;
                if self.empty_below_lso >= 2 {
                    self.next = chunk.last_stable_offset;
                    self.empty_below_lso = 0;
                }
            }
            _ => self.empty_below_lso = 0,
        }
    }

    /// Resumes at the log start after OFFSET_OUT_OF_RANGE; false when that
    /// does not move the cursor forward (the error is then real).
    pub fn skip_to_log_start(&mut self, start: i64) -> bool {
        if start <= self.next {
            return false;
        }
        self.next = start;
        self.empty_below_lso = 0;
        true
    }
}

/// Per partition of one fetch, what it brought or its error.
pub(crate) type Chunks = Vec<(i32, Result<FetchChunk, KafkaError>)>;

/// One partition of a fetch: where to read and under which leader epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchPosition {
    /// The partition.
    pub partition: i32,
    /// The offset to read from.
    pub offset: i64,
    /// The leader epoch from metadata, or -1.
    pub leader_epoch: i32,
}

/// A read_committed ListOffsets of one partition under its leader epoch.
fn build_list_offsets(
    topic: &str,
    partition: i32,
    leader_epoch: i32,
    timestamp: i64,
) -> ListOffsetsRequest {
    ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(READ_COMMITTED)
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(vec![
                    ListOffsetsPartition::default()
                        .with_partition_index(partition)
                        .with_current_leader_epoch(leader_epoch)
                        .with_timestamp(timestamp),
                ]),
        ])
}

/// The offset a ListOffsets answer gives for `topic`-`partition` (asked of
/// `addr`), or its error.
fn parse_list_offsets(
    response: &ListOffsetsResponse,
    addr: &str,
    topic: &str,
    partition: i32,
) -> Result<i64, KafkaError> {
    let p = response
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition)
        .ok_or_else(|| KafkaError::Protocol {
            addr: addr.to_owned(),
            reason: format!("ListOffsets answered nothing for {topic}-{partition}"),
        })?;
    match p.error_code {
        0 => Ok(p.offset),
        code => Err(KafkaError::broker("ListOffsets", code, None)),
    }
}

/// A read_committed Fetch of `positions` of `topic`, waiting up to
/// `max_wait` for new data. No fetch session: every fetch names its
/// partitions, each with the leader epoch it expects.
fn build_fetch(topic: &str, positions: &[FetchPosition], max_wait: Duration) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(i32::try_from(max_wait.as_millis()).unwrap_or(i32::MAX))
        .with_min_bytes(1)
        .with_max_bytes(fetch_max_bytes(positions.len()))
        .with_isolation_level(READ_COMMITTED)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(
                    positions
                        .iter()
                        .map(|p| {
                            FetchPartition::default()
                                .with_partition(p.partition)
                                .with_current_leader_epoch(p.leader_epoch)
                                .with_fetch_offset(p.offset)
                                .with_last_fetched_epoch(-1)
                                .with_log_start_offset(-1)
                                .with_partition_max_bytes(PARTITION_MAX_BYTES)
                        })
                        .collect(),
                ),
        ])
}

/// Per position, the committed records a Fetch answer (from `addr`) holds
/// at or above its offset, no batch decompressed past `limit` bytes and no
/// more than each partition's [`record_room`], or the partition's error.
/// The outer error is the request's as a whole.
fn parse_fetch(
    response: FetchResponse,
    addr: &str,
    topic: &str,
    positions: &[FetchPosition],
    limit: usize,
) -> Result<Chunks, KafkaError> {
    if response.error_code != 0 {
        return Err(KafkaError::broker("Fetch", response.error_code, None));
    }
    let room = record_room(positions.len());
    let mut data: HashMap<i32, PartitionData> = response
        .responses
        .into_iter()
        .flat_map(|t| t.partitions)
        .map(|p| (p.partition_index, p))
        .collect();
    Ok(positions
        .iter()
        .map(|position| {
            let partition = position.partition;
            let protocol = |reason: String| KafkaError::Protocol {
                addr: addr.to_owned(),
                reason,
            };
            let chunk = match data.remove(&partition) {
                None => Err(protocol(format!(
                    "Fetch answered nothing for {topic}-{partition}"
                ))),
                Some(data) if data.error_code != 0 => {
                    Err(KafkaError::broker("Fetch", data.error_code, None))
                }
                Some(data) => chunk_of(data, position.offset, limit, room)
                    .map_err(|reason| protocol(format!("{topic}-{partition}: {reason}"))),
            };
            for skipped in chunk.iter().flat_map(|c| &c.skipped) {
                tracing::warn!(
                    topic,
                    partition,
                    offset = skipped.base_offset,
                    last_offset = skipped.last_offset,
                    compression = skipped.compression,
                    limit_bytes = skipped.limit_bytes,
                    "skipped a record batch that decompresses to more than the bound: its records are not read (a decompression bomb, or a batch larger than the topic's max.message.bytes unless the bound is set higher)"
                );
            }
            (partition, chunk)
        })
        .collect())
}

/// The visible part of one partition's fetched data, read from `offset`,
/// no batch decompressed past `limit` bytes, its records taking at most
/// `room` bytes.
fn chunk_of(
    data: PartitionData,
    offset: i64,
    limit: usize,
    room: usize,
) -> Result<FetchChunk, String> {
    let aborted: Vec<(i64, i64)> = data
        .aborted_transactions
        .unwrap_or_default()
        .iter()
        .map(|a| (a.producer_id.0, a.first_offset))
        .collect();
    let visible = match &data.records {
        Some(bytes) => visible_records(bytes, &aborted, offset, limit, room)?,
        None => Default::default(),
    };
    Ok(FetchChunk {
        records: visible.records,
        next_offset: visible.next_offset,
        last_stable_offset: data.last_stable_offset,
        high_watermark: data.high_watermark,
        log_start_offset: data.log_start_offset,
        skipped: visible.skipped,
    })
}

/// Reads (`KafkaClient::reader`): offsets, read_committed fetches, and the
/// tailing of a topic (`tail`).
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a> {
    pub(crate) client: &'a KafkaClient,
}

impl KafkaClient {
    /// Offsets, fetches and tails.
    pub fn reader(&self) -> Reader<'_> {
        Reader { client: self }
    }
}

impl Reader<'_> {
    /// Groups `partitions` of `topic` by their current leader (from fresh
    /// metadata), each with its leader epoch; partitions without a leader
    /// come back as errors.
    pub async fn partition_leaders(
        &self,
        topic: &str,
        partitions: &[(i32, i64)],
    ) -> (BTreeMap<Broker, Vec<FetchPosition>>, Vec<(i32, KafkaError)>) {
        let mut groups: BTreeMap<Broker, Vec<FetchPosition>> = BTreeMap::new();
        let mut errors = Vec::new();
        for &(partition, offset) in partitions {
            match self.client.metadata().leader(topic, partition).await {
                Ok(leader) => groups
                    .entry(leader.broker)
                    .or_default()
                    .push(FetchPosition {
                        partition,
                        offset,
                        leader_epoch: leader.epoch,
                    }),
                Err(e) => errors.push((partition, e)),
            }
        }
        (groups, errors)
    }

    /// The most bytes one batch of `topic` may decompress to: the client's
    /// `max_decompressed_batch_bytes`, else the topic's `max.message.bytes`
    /// (learned with the check that the topic is compacted, or asked once
    /// at the first read), else [`DEFAULT_MAX_BATCH_BYTES`] when it cannot
    /// be read (said once at warn; a later check of the topic may still
    /// learn it).
    pub async fn max_batch_bytes(&self, topic: &str) -> usize {
        if let Some(limit) = self.client.config().max_decompressed_batch_bytes {
            return limit;
        }
        if let Some(limit) = self.client.batch_limit(topic) {
            return limit;
        }
        let why = match self.client.topics().max_message_bytes(topic).await {
            Ok(Some(limit)) => return limit,
            Ok(None) => "the topic's configs do not say".to_owned(),
            Err(error) => error.to_string(),
        };
        if self
            .client
            .remember_batch_limit(topic, DEFAULT_MAX_BATCH_BYTES)
        {
            tracing::warn!(topic, reason = %why, limit_bytes = DEFAULT_MAX_BATCH_BYTES, "cannot read the topic's max.message.bytes: its batches are read decompressed up to Kafka's default");
        }
        DEFAULT_MAX_BATCH_BYTES
    }

    /// One ListOffsets (read_committed) for a partition: `LATEST` gives the
    /// last stable offset, `EARLIEST` the log start offset. Retried.
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<i64, KafkaError> {
        retrying(self.client.config(), "list offsets", || async move {
            let leader = self.client.metadata().leader(topic, partition).await?;
            let request = build_list_offsets(topic, partition, leader.epoch, timestamp);
            let response = self.client.send_to(&leader.broker.addr, &request).await?;
            let offset = parse_list_offsets(&response, &leader.broker.addr, topic, partition);
            if let Err(error) = &offset {
                self.client.state().learn(Lesson::PartitionError {
                    topic,
                    addr: &leader.broker.addr,
                    error,
                });
            }
            offset
        })
        .await
    }

    /// One read_committed fetch of `positions` (partitions of `topic` led by
    /// `leader`), waiting up to `max_wait` for new data (0 answers at once).
    /// No retries: the caller decides (a long-polling watcher retries
    /// forever, a read gives up). The outer error is for the request as a
    /// whole; each partition has its chunk or its error.
    pub async fn fetch_from(
        &self,
        leader: &Broker,
        topic: &str,
        positions: &[FetchPosition],
        max_wait: Duration,
    ) -> Result<Chunks, KafkaError> {
        let limit = self.max_batch_bytes(topic).await;
        let request = build_fetch(topic, positions, max_wait);
        let timeout = self.client.config().request_timeout + max_wait;
        let response = self
            .client
            .send_to_within(&leader.addr, &request, timeout)
            .await?;
        let chunks = parse_fetch(response, &leader.addr, topic, positions, limit)?;
        for (_, chunk) in &chunks {
            if let Err(error) = chunk {
                self.client.state().learn(Lesson::PartitionError {
                    topic,
                    addr: &leader.addr,
                    error,
                });
            }
        }
        Ok(chunks)
    }

    /// One read_committed fetch of one partition from its leader, no wait.
    async fn fetch_now(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<FetchChunk, KafkaError> {
        let leader = self.client.metadata().leader(topic, partition).await?;
        let position = FetchPosition {
            partition,
            offset,
            leader_epoch: leader.epoch,
        };
        self.fetch_from(&leader.broker, topic, &[position], Duration::ZERO)
            .await?
            .pop()
            .map_or_else(
                || Err(KafkaError::Internal("no fetch answer".into())),
                |(_, c)| c,
            )
    }

    /// Reads a partition with read_committed from `from` up to the last
    /// stable offset as it stood when the read began. Aborted transactions
    /// and control batches are dropped. An open transaction holds the LSO
    /// back, so this returns what lies before it without waiting. The
    /// partition's leader is confirmed by another broker first (see the
    /// module docs).
    pub async fn read_committed(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
    ) -> Result<PartitionRead, KafkaError> {
        let min_isr = self.client.state().min_isrs().of(topic);
        if !self.client.state().epochs().confirmed_within(
            topic,
            partition,
            READ_CONFIRMED_WITHIN,
            min_isr,
        ) {
            self.client.metadata().confirm_leaders(topic).await;
        }
        let end = self.list_offset(topic, partition, LATEST).await?;
        let mut cursor = Cursor::at(from);
        let mut read = PartitionRead {
            last_stable_offset: end,
            high_watermark: end,
            ..PartitionRead::default()
        };
        while cursor.next_offset() < end {
            let offset = cursor.next_offset();
            let chunk = retrying(self.client.config(), "fetch", || {
                self.fetch_now(topic, partition, offset)
            })
            .await;
            let mut chunk = match chunk {
                Ok(chunk) => chunk,
                Err(e) if e.is(ResponseError::OffsetOutOfRange) => {
                    let start = self.list_offset(topic, partition, EARLIEST).await?;
                    if !cursor.skip_to_log_start(start) {
                        return Err(e);
                    }
                    tracing::warn!(
                        topic,
                        partition,
                        offset,
                        start,
                        "offset out of range; reading from the log start"
                    );
                    continue;
                }
                Err(e) => return Err(e),
            };
            // Read no further than the end seen at the start.
            chunk.last_stable_offset = chunk.last_stable_offset.min(end);
            read.log_start_offset = chunk.log_start_offset;
            read.high_watermark = chunk.high_watermark;
            cursor.advance(&chunk);
            read.records.extend(chunk.records);
            read.skipped.extend(chunk.skipped);
        }
        read.next_offset = cursor.next_offset().max(from.max(0));
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 52 (6): decoded, a record takes several times its bytes (72
    /// bytes a `LogRecord`, more as kafka-protocol's `Record`): an answer
    /// of small records decoded whole takes several times the frame.
    /// Each partition's chunk keeps what its share of the fetch's
    /// `max_bytes` holds, stopping within a batch if need be, and the
    /// fetches after it read on from there: every record once, in order.
    /// Before, one chunk held all 100,000 records (7 MiB of them, after
    /// 100,000 kafka-protocol `Record`s at once).
    #[test]
    fn an_answer_of_small_records_decodes_to_no_more_than_its_share_of_the_fetch() {
        use kafka_protocol::messages::fetch_response::FetchableTopicResponse;
        use kafka_protocol::records::Compression;
        const RECORDS: i64 = 100_000;
        let room = PARTITION_MAX_BYTES as usize;
        let per_record = std::mem::size_of::<LogRecord>();
        for codec in [Compression::Zstd, Compression::None] {
            let bytes = crate::batch::tests::batch(0, RECORDS, -1, false, None, codec);
            assert!(
                RECORDS as usize * per_record > room + room / 2,
                "decoded whole, well past it"
            );
            let (mut from, mut fetches) = (0, 0);
            while from < RECORDS {
                let response = FetchResponse::default().with_responses(vec![
                    FetchableTopicResponse::default()
                        .with_topic(TopicName(StrBytes::from_static_str("t")))
                        .with_partitions(vec![
                            PartitionData::default()
                                .with_partition_index(0)
                                .with_records(Some(bytes.clone()))
                                .with_last_stable_offset(RECORDS)
                                .with_high_watermark(RECORDS),
                        ]),
                ]);
                let position = FetchPosition {
                    partition: 0,
                    offset: from,
                    leader_epoch: -1,
                };
                let mut chunks =
                    parse_fetch(response, "b:9092", "t", &[position], 8 << 20).unwrap();
                let chunk = chunks.remove(0).1.unwrap();
                assert!(
                    chunk.records.len() * per_record <= room + per_record,
                    "{codec:?}: {} records decoded in one chunk",
                    chunk.records.len()
                );
                let offsets: Vec<i64> = chunk.records.iter().map(|r| r.offset).collect();
                let next = chunk.next_offset.unwrap();
                assert_eq!(offsets, (from..next).collect::<Vec<_>>(), "{codec:?}");
                from = next;
                fetches += 1;
            }
            assert_eq!(from, RECORDS);
            assert!(fetches >= 2, "{codec:?}: {fetches}");
        }
    }

    fn chunk(next: Option<i64>, lso: i64) -> FetchChunk {
        FetchChunk {
            next_offset: next,
            last_stable_offset: lso,
            ..FetchChunk::default()
        }
    }

    #[test]
    fn a_cursor_moves_past_whole_batches() {
        let mut c = Cursor::at(0);
        c.advance(&chunk(Some(5), 9));
        assert_eq!(c.next_offset(), 5);
        c.advance(&chunk(Some(9), 9));
        assert_eq!(c.next_offset(), 9);
        c.advance(&chunk(None, 9));
        assert_eq!(c.next_offset(), 9, "nothing new at the LSO: stay");
    }

    #[test]
    fn two_empty_fetches_below_the_lso_skip_to_it() {
        let mut c = Cursor::at(3);
        c.advance(&chunk(None, 10));
        assert_eq!(c.next_offset(), 3, "one empty fetch may be a race");
        c.advance(&chunk(None, 10));
        assert_eq!(c.next_offset(), 10, "the range holds no batch");
        let mut c = Cursor::at(3);
        c.advance(&chunk(None, 10));
        c.advance(&chunk(Some(4), 10));
        c.advance(&chunk(None, 10));
        assert_eq!(c.next_offset(), 4, "a batch in between resets the count");
    }

    fn position(partition: i32, offset: i64) -> FetchPosition {
        FetchPosition {
            partition,
            offset,
            leader_epoch: 6,
        }
    }

    #[test]
    fn a_fetch_reads_committed_under_the_leader_epoch_from_each_offset() {
        let request = build_fetch(
            "t",
            &[position(0, 5), position(3, 9)],
            Duration::from_secs(2),
        );
        assert_eq!(
            (request.isolation_level, request.max_wait_ms),
            (READ_COMMITTED, 2000)
        );
        let asked: Vec<(i32, i64, i32)> = request.topics[0]
            .partitions
            .iter()
            .map(|p| (p.partition, p.fetch_offset, p.current_leader_epoch))
            .collect();
        assert_eq!(asked, [(0, 5, 6), (3, 9, 6)]);
        let list = build_list_offsets("t", 2, 6, LATEST);
        let p = &list.topics[0].partitions[0];
        assert_eq!(list.isolation_level, READ_COMMITTED);
        assert_eq!(
            (p.partition_index, p.current_leader_epoch, p.timestamp),
            (2, 6, LATEST)
        );
    }

    #[test]
    fn every_position_gets_its_chunk_or_its_error() {
        use kafka_protocol::messages::fetch_response::FetchableTopicResponse;
        let data = |index: i32, code: i16| {
            PartitionData::default()
                .with_partition_index(index)
                .with_error_code(code)
                .with_last_stable_offset(12)
                .with_high_watermark(14)
        };
        let response = FetchResponse::default().with_responses(vec![
            FetchableTopicResponse::default().with_partitions(vec![data(0, 0), data(1, 74)]),
        ]);
        let positions = [position(0, 5), position(1, 5), position(2, 5)];
        let chunks = parse_fetch(response, "b:1", "t", &positions, 1024).unwrap();
        let chunk = chunks[0].1.as_ref().unwrap();
        assert_eq!((chunk.last_stable_offset, chunk.high_watermark), (12, 14));
        assert!(chunk.records.is_empty() && chunk.next_offset.is_none());
        assert_eq!(chunks[1].1.as_ref().unwrap_err().code(), Some(74));
        assert!(matches!(chunks[2].1, Err(KafkaError::Protocol { .. })));
        let failed = FetchResponse::default().with_error_code(58);
        assert_eq!(
            parse_fetch(failed, "b:1", "t", &positions, 1024)
                .unwrap_err()
                .code(),
            Some(58)
        );
    }

    #[test]
    fn out_of_range_resumes_at_the_log_start_only_forward() {
        let mut c = Cursor::at(7);
        assert!(!c.skip_to_log_start(5));
        assert_eq!(c.next_offset(), 7);
        assert!(c.skip_to_log_start(12));
        assert_eq!(c.next_offset(), 12);
    }
}
