//! Transactional writes under a minted epoch, with the transaction version 1
//! request versions (AddPartitionsToTxn ≤ v3 before producing, Produce ≤ v11,
//! EndTxn ≤ v4), so a commit does not bump the epoch on a 4.x cluster.
//!
//! A transactional producer is idempotent: each batch carries a sequence
//! number per partition, starting at 0 after InitProducerId. A retry resends
//! the same batch with the same sequence, which the broker deduplicates.
//! When a write's outcome stays unknown after its retries, the sequence is
//! unknown too, and the session refuses further writes: the caller must mint
//! again rather than risk a later batch being taken for a duplicate.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse,
    InitProducerIdRequest, InitProducerIdResponse, ProducerId, TopicName, TransactionalId,
    add_partitions_to_txn_request::AddPartitionsToTxnTopic,
};
use kafka_protocol::protocol::StrBytes;

use super::client::KafkaClient;
use super::error::{KafkaError, ResponseError};
use super::produce::{Producer, ProducerFields, Write, encode_batch};
use super::retry::retrying;
use super::state::Lesson;
use krabka_coordination::FencingToken;
use krabka_coordination::sync::lock;

/// Why a transactional write failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    /// The broker rejected the epoch (47, 90, 49): a newer member holds the id.
    #[error("fenced: {0}")]
    Fenced(KafkaError),
    /// The write may or may not be in the log; the session is unusable.
    #[error("the outcome of the write is unknown ({0}); mint a new epoch before writing again")]
    Uncertain(KafkaError),
    /// The write failed and is not in the log.
    #[error(transparent)]
    Kafka(KafkaError),
}

impl TxnError {
    fn from_kafka(e: KafkaError) -> TxnError {
        if e.is_fenced() {
            TxnError::Fenced(e)
        } else {
            TxnError::Kafka(e)
        }
    }
}

/// A producer bound to one minted epoch of one transactional id.
#[derive(Debug)]
pub struct ProducerSession {
    transactional_id: String,
    token: FencingToken,
    next_sequence: HashMap<(String, i32), i32>,
    unusable: Option<KafkaError>,
}

impl ProducerSession {
    /// The minted token this session writes under.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The transactional id (the role).
    pub fn transactional_id(&self) -> &str {
        &self.transactional_id
    }

    /// Why the session can no longer write, if it can't.
    pub fn unusable(&self) -> Option<&KafkaError> {
        self.unusable.as_ref()
    }
}

fn txn_id(id: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(id.to_owned()))
}

/// InitProducerId for `id`, with the lease as the transaction timeout.
fn build_init_producer_id(id: &str, timeout_ms: i32) -> InitProducerIdRequest {
    InitProducerIdRequest::default()
        .with_transactional_id(Some(txn_id(id)))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
}

/// The minted token of an InitProducerId answer, or its error.
fn parse_init_producer_id(response: InitProducerIdResponse) -> Result<FencingToken, KafkaError> {
    if response.error_code != 0 {
        return Err(KafkaError::broker(
            "InitProducerId",
            response.error_code,
            None,
        ));
    }
    FencingToken::new(response.producer_id.0, response.producer_epoch).map_err(|e| {
        KafkaError::Malformed(format!("InitProducerId returned an unminted pair: {e}"))
    })
}

/// AddPartitionsToTxn (v3 and below: the client's own) of one partition.
fn build_add_partition(
    id: &str,
    token: FencingToken,
    topic: &str,
    partition: i32,
) -> AddPartitionsToTxnRequest {
    AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id(id))
        .with_v3_and_below_producer_id(ProducerId(token.producer_id()))
        .with_v3_and_below_producer_epoch(token.producer_epoch())
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(vec![partition]),
        ])
}

/// The first error of an AddPartitionsToTxn answer, if any.
fn parse_add_partition(response: AddPartitionsToTxnResponse) -> Result<(), KafkaError> {
    let code = match response.error_code {
        0 => response
            .results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| t.results_by_partition.iter())
            .map(|p| p.partition_error_code)
            .find(|&c| c != 0)
            .unwrap_or(0),
        code => code,
    };
    match code {
        0 => Ok(()),
        code => Err(KafkaError::broker("AddPartitionsToTxn", code, None)),
    }
}

/// EndTxn: commits or aborts the open transaction of `token`.
fn build_end_txn(id: &str, token: FencingToken, commit: bool) -> EndTxnRequest {
    EndTxnRequest::default()
        .with_transactional_id(txn_id(id))
        .with_producer_id(ProducerId(token.producer_id()))
        .with_producer_epoch(token.producer_epoch())
        .with_committed(commit)
}

/// The error of an EndTxn answer, if any.
fn parse_end_txn(response: EndTxnResponse) -> Result<(), KafkaError> {
    match response.error_code {
        0 => Ok(()),
        code => Err(KafkaError::broker("EndTxn", code, None)),
    }
}

impl<'c> Producer<'c> {
    /// InitProducerId for `transactional_id`: mints the next epoch and fences
    /// the previous holder. The lease duration goes in as the transaction
    /// timeout, so the coordinator aborts (and fences) a dead holder's open
    /// transaction.
    pub async fn init_producer_id(
        &self,
        transactional_id: &str,
        transaction_timeout: Duration,
    ) -> Result<ProducerSession, KafkaError> {
        let timeout_ms = i32::try_from(transaction_timeout.as_millis())
            .map_err(|_| KafkaError::Config("transaction timeout over i32 ms".into()))?;
        let request = build_init_producer_id(transactional_id, timeout_ms);
        let token = retrying(self.client.config(), "init producer id", || {
            self.coordinator_call(transactional_id, &request, parse_init_producer_id)
        })
        .await?;
        Ok(ProducerSession {
            transactional_id: transactional_id.to_owned(),
            token,
            next_sequence: HashMap::new(),
            unusable: None,
        })
    }

    /// One attempt of `request` about `transactional_id` at its coordinator;
    /// what a failure teaches goes to the cluster state.
    async fn coordinator_call<R, T>(
        &self,
        transactional_id: &str,
        request: &R,
        parse: impl FnOnce(R::Response) -> Result<T, KafkaError>,
    ) -> Result<T, KafkaError>
    where
        R: kafka_protocol::protocol::Request,
    {
        let coordinator = self.client.lookup().coordinator(transactional_id).await?;
        let result = match self.client.send_to(&coordinator.addr, request).await {
            Ok(response) => parse(response),
            Err(e) => Err(e),
        };
        if let Err(error) = &result {
            self.client.state().learn(Lesson::TxnFailed {
                key: transactional_id,
                error,
            });
        }
        result
    }

    /// Opens a transaction under `session`'s token. Records sent in it are
    /// invisible to read_committed readers until [`Transaction::commit`].
    /// A transaction dropped without commit or abort stays open until the
    /// coordinator aborts it at the transaction timeout, fencing the epoch.
    pub fn begin<'a>(self, session: &'a mut ProducerSession) -> Result<Transaction<'a>, TxnError>
    where
        'c: 'a,
    {
        if let Some(e) = &session.unusable {
            return Err(TxnError::Uncertain(e.clone()));
        }
        Ok(Transaction {
            client: self.client,
            session,
            added: HashSet::new(),
        })
    }

    /// Writes records in one transaction and commits it: all become visible
    /// at once, or none ever does. Returns their offsets.
    pub(crate) async fn write_transactional(
        &self,
        session: &mut ProducerSession,
        writes: &[Write<'_>],
    ) -> Result<Vec<i64>, TxnError> {
        let mut txn = self.begin(session)?;
        let mut offsets = Vec::with_capacity(writes.len());
        for write in writes {
            match txn.send_write(write).await {
                Ok(offset) => offsets.push(offset),
                Err(e) => {
                    if !matches!(e, TxnError::Fenced(_)) {
                        txn.abort_after_failure().await?;
                    }
                    return Err(e);
                }
            }
        }
        txn.commit().await?;
        Ok(offsets)
    }

    /// Sends one transactional batch, resending the same bytes on retriable
    /// errors. An error after any ambiguous attempt is reported as
    /// ambiguous, since that attempt may have landed.
    async fn produce_idempotent(
        &self,
        transactional_id: &str,
        write: &Write<'_>,
        batch: Bytes,
    ) -> Result<i64, KafkaError> {
        let ambiguous = std::sync::Mutex::new(None::<KafkaError>);
        let result = retrying(self.client.config(), "transactional produce", || {
            let batch = batch.clone();
            let ambiguous = &ambiguous;
            async move {
                let result = self
                    .produce_batch(write.topic, write.partition, batch, Some(transactional_id))
                    .await;
                match result {
                    Err(e) if e.is(ResponseError::DuplicateSequenceNumber) => Ok(-1),
                    Err(e) => {
                        if e.is_ambiguous() {
                            *lock(ambiguous) = Some(e.clone());
                        }
                        Err(e)
                    }
                    ok => ok,
                }
            }
        })
        .await;
        let earlier = lock(&ambiguous).take();
        match (result, earlier) {
            (Ok(offset), _) => Ok(offset),
            (Err(e), Some(earlier)) if !e.is_fenced() && !e.is_ambiguous() => Err(earlier),
            (Err(e), _) => Err(e),
        }
    }

    async fn add_partition(
        &self,
        transactional_id: &str,
        token: FencingToken,
        topic: &str,
        partition: i32,
    ) -> Result<(), KafkaError> {
        let request = build_add_partition(transactional_id, token, topic, partition);
        retrying(self.client.config(), "add partitions to txn", || {
            self.coordinator_call(transactional_id, &request, parse_add_partition)
        })
        .await
    }

    /// Commits (or aborts) the open transaction of `token`.
    async fn end_txn(
        &self,
        transactional_id: &str,
        token: FencingToken,
        commit: bool,
    ) -> Result<(), KafkaError> {
        let request = build_end_txn(transactional_id, token, commit);
        retrying(self.client.config(), "end txn", || {
            self.coordinator_call(transactional_id, &request, parse_end_txn)
        })
        .await
    }
}

/// An open transaction under one minted token.
#[derive(Debug)]
pub struct Transaction<'a> {
    client: &'a KafkaClient,
    session: &'a mut ProducerSession,
    added: HashSet<(String, i32)>,
}

impl Transaction<'_> {
    /// Sends one record to `topic`/`partition` inside the transaction;
    /// returns its offset. `None` as the value writes a tombstone.
    pub async fn send(
        &mut self,
        topic: &str,
        partition: i32,
        key: Bytes,
        value: Option<Bytes>,
        timestamp_ms: i64,
    ) -> Result<i64, TxnError> {
        let write = Write {
            topic,
            partition,
            key,
            value,
            timestamp_ms,
        };
        self.send_write(&write).await
    }

    async fn send_write(&mut self, write: &Write<'_>) -> Result<i64, TxnError> {
        if let Some(e) = &self.session.unusable {
            return Err(TxnError::Uncertain(e.clone()));
        }
        let client = self.client;
        let id = self.session.transactional_id.clone();
        let token = self.session.token;
        let slot = (write.topic.to_owned(), write.partition);
        if !self.added.contains(&slot) {
            client
                .producer()
                .add_partition(&id, token, write.topic, write.partition)
                .await
                .map_err(TxnError::from_kafka)?;
            self.added.insert(slot.clone());
        }
        let sequence = self.session.next_sequence.get(&slot).copied().unwrap_or(0);
        let batch = encode_batch(
            write,
            ProducerFields {
                producer_id: token.producer_id(),
                producer_epoch: token.producer_epoch(),
                sequence,
                transactional: true,
            },
        )
        .map_err(TxnError::Kafka)?;
        match client
            .producer()
            .produce_idempotent(&id, write, batch)
            .await
        {
            Ok(offset) => {
                self.session
                    .next_sequence
                    .insert(slot, sequence.wrapping_add(1) & i32::MAX);
                Ok(offset)
            }
            Err(e) if e.is_fenced() => Err(TxnError::Fenced(e)),
            Err(e) if e.is_ambiguous() || e.is(ResponseError::OutOfOrderSequenceNumber) => {
                // The batch may be in the log: the sequence is unknown now.
                self.session.unusable = Some(e.clone());
                Err(TxnError::Uncertain(e))
            }
            // Definitely not written: the sequence stays where it was.
            Err(e) => Err(TxnError::Kafka(e)),
        }
    }

    /// Commits: every record sent becomes visible at once.
    pub async fn commit(self) -> Result<(), TxnError> {
        self.end(true).await
    }

    /// Aborts: no record sent will ever be visible to read_committed readers.
    pub async fn abort(self) -> Result<(), TxnError> {
        self.end(false).await
    }

    /// Aborts after a failed send; an abort that fails leaves the
    /// transaction's state unknown, so the session becomes unusable.
    async fn abort_after_failure(self) -> Result<(), TxnError> {
        match self.end(false).await {
            Err(TxnError::Kafka(e)) => Err(TxnError::Uncertain(e)),
            other => other,
        }
    }

    async fn end(self, commit: bool) -> Result<(), TxnError> {
        if self.added.is_empty() {
            // Nothing reached the coordinator: there is no transaction to end.
            return Ok(());
        }
        let id = self.session.transactional_id.clone();
        let token = self.session.token;
        match self.client.producer().end_txn(&id, token, commit).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_fenced() => Err(TxnError::Fenced(e)),
            Err(e) => {
                // The transaction may still be open; the coordinator aborts
                // it at the timeout and fences this epoch.
                self.session.unusable = Some(e.clone());
                Err(TxnError::Uncertain(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::add_partitions_to_txn_response::{
        AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
    };

    use super::*;

    fn token() -> FencingToken {
        FencingToken::new(7, 3).unwrap()
    }

    #[test]
    fn requests_carry_the_id_and_the_minted_pair() {
        let init = build_init_producer_id("r", 10_000);
        assert_eq!(init.transactional_id.unwrap().0.as_str(), "r");
        assert_eq!(init.transaction_timeout_ms, 10_000);
        assert_eq!((init.producer_id.0, init.producer_epoch), (-1, -1));
        let add = build_add_partition("r", token(), "t", 4);
        assert_eq!(add.v3_and_below_transactional_id.0.as_str(), "r");
        assert_eq!(
            (
                add.v3_and_below_producer_id.0,
                add.v3_and_below_producer_epoch
            ),
            (7, 3)
        );
        assert_eq!(add.v3_and_below_topics[0].partitions, [4]);
        let end = build_end_txn("r", token(), false);
        assert_eq!(
            (end.producer_id.0, end.producer_epoch, end.committed),
            (7, 3, false)
        );
    }

    #[test]
    fn a_mint_gives_a_token_or_an_error() {
        let minted = InitProducerIdResponse::default()
            .with_producer_id(ProducerId(7))
            .with_producer_epoch(3);
        assert_eq!(parse_init_producer_id(minted), Ok(token()));
        let refused = InitProducerIdResponse::default().with_error_code(50);
        assert_eq!(
            parse_init_producer_id(refused).unwrap_err().code(),
            Some(50)
        );
        let unminted = InitProducerIdResponse::default().with_producer_id(ProducerId(-1));
        assert!(matches!(
            parse_init_producer_id(unminted),
            Err(KafkaError::Malformed(_))
        ));
    }

    #[test]
    fn adding_a_partition_fails_with_the_first_error_of_any_level() {
        let with = |top: i16, partition: i16| {
            AddPartitionsToTxnResponse::default()
                .with_error_code(top)
                .with_results_by_topic_v3_and_below(vec![
                    AddPartitionsToTxnTopicResult::default().with_results_by_partition(vec![
                        AddPartitionsToTxnPartitionResult::default()
                            .with_partition_error_code(partition),
                    ]),
                ])
        };
        assert_eq!(parse_add_partition(with(0, 0)), Ok(()));
        assert_eq!(
            parse_add_partition(with(0, 51)).unwrap_err().code(),
            Some(51)
        );
        assert_eq!(
            parse_add_partition(with(16, 0)).unwrap_err().code(),
            Some(16)
        );
        assert_eq!(
            parse_end_txn(EndTxnResponse::default().with_error_code(47))
                .unwrap_err()
                .code(),
            Some(47)
        );
    }
}
