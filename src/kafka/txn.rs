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
    AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest, ProducerId, TopicName,
    TransactionalId, add_partitions_to_txn_request::AddPartitionsToTxnTopic,
};
use kafka_protocol::protocol::StrBytes;

use super::client::KafkaClient;
use super::error::KafkaError;
use super::produce::{ProducerFields, Write, encode_batch};
use crate::coordination::FencingToken;

/// DUPLICATE_SEQUENCE_NUMBER: the batch was already written.
const DUPLICATE_SEQUENCE: i16 = 46;
/// OUT_OF_ORDER_SEQUENCE_NUMBER: our sequence and the broker's disagree.
const OUT_OF_ORDER_SEQUENCE: i16 = 45;

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

impl KafkaClient {
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
            .map_err(|_| KafkaError::Invalid("transaction timeout over i32 ms".into()))?;
        let (producer_id, producer_epoch) = self
            .retrying("init producer id", || async move {
                let coordinator = self.coordinator(transactional_id).await?;
                let request = InitProducerIdRequest::default()
                    .with_transactional_id(Some(txn_id(transactional_id)))
                    .with_transaction_timeout_ms(timeout_ms)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1);
                let response = self
                    .coordinator_call(transactional_id, &coordinator, &request)
                    .await?;
                match response.error_code {
                    0 => Ok((response.producer_id.0, response.producer_epoch)),
                    code => Err(self.coordinator_error("InitProducerId", transactional_id, code)),
                }
            })
            .await?;
        let token = FencingToken::new(producer_id, producer_epoch).map_err(|e| {
            KafkaError::Invalid(format!("InitProducerId returned an unminted pair: {e}"))
        })?;
        Ok(ProducerSession {
            transactional_id: transactional_id.to_owned(),
            token,
            next_sequence: HashMap::new(),
            unusable: None,
        })
    }

    async fn coordinator_call<R: kafka_protocol::protocol::Request>(
        &self,
        transactional_id: &str,
        coordinator: &super::client::Broker,
        request: &R,
    ) -> Result<R::Response, KafkaError> {
        let result = self.send_to(&coordinator.addr, request).await;
        if let Err(e) = &result
            && e.is_retriable()
        {
            self.core.coordinators.forget(transactional_id);
        }
        result
    }

    fn coordinator_error(
        &self,
        api: &'static str,
        transactional_id: &str,
        code: i16,
    ) -> KafkaError {
        let err = KafkaError::broker(api, code, None);
        if err.is_coordinator_error() {
            self.core.coordinators.forget(transactional_id);
        }
        err
    }

    /// Opens a transaction under `session`'s token. Records sent in it are
    /// invisible to read_committed readers until [`Transaction::commit`].
    /// A transaction dropped without commit or abort stays open until the
    /// coordinator aborts it at the transaction timeout, fencing the epoch.
    pub fn begin<'a>(
        &'a self,
        session: &'a mut ProducerSession,
    ) -> Result<Transaction<'a>, TxnError> {
        if let Some(e) = &session.unusable {
            return Err(TxnError::Uncertain(e.clone()));
        }
        Ok(Transaction {
            client: self,
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
        let result = self
            .retrying("transactional produce", || {
                let batch = batch.clone();
                let ambiguous = &ambiguous;
                async move {
                    let result = self
                        .produce_batch(write.topic, write.partition, batch, Some(transactional_id))
                        .await;
                    match result {
                        Err(e) if e.code() == Some(DUPLICATE_SEQUENCE) => Ok(-1),
                        Err(e) => {
                            if e.is_ambiguous() {
                                *crate::sync::lock(ambiguous) = Some(e.clone());
                            }
                            Err(e)
                        }
                        ok => ok,
                    }
                }
            })
            .await;
        let earlier = crate::sync::lock(&ambiguous).take();
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
        self.retrying("add partitions to txn", || async move {
            let coordinator = self.coordinator(transactional_id).await?;
            let request = AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(txn_id(transactional_id))
                .with_v3_and_below_producer_id(ProducerId(token.producer_id()))
                .with_v3_and_below_producer_epoch(token.producer_epoch())
                .with_v3_and_below_topics(vec![
                    AddPartitionsToTxnTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                        .with_partitions(vec![partition]),
                ]);
            let response = self
                .coordinator_call(transactional_id, &coordinator, &request)
                .await?;
            if response.error_code != 0 {
                return Err(self.coordinator_error(
                    "AddPartitionsToTxn",
                    transactional_id,
                    response.error_code,
                ));
            }
            let code = response
                .results_by_topic_v3_and_below
                .iter()
                .flat_map(|t| t.results_by_partition.iter())
                .map(|p| p.partition_error_code)
                .find(|&c| c != 0)
                .unwrap_or(0);
            match code {
                0 => Ok(()),
                code => Err(self.coordinator_error("AddPartitionsToTxn", transactional_id, code)),
            }
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
        self.retrying("end txn", || async move {
            let coordinator = self.coordinator(transactional_id).await?;
            let request = EndTxnRequest::default()
                .with_transactional_id(txn_id(transactional_id))
                .with_producer_id(ProducerId(token.producer_id()))
                .with_producer_epoch(token.producer_epoch())
                .with_committed(commit);
            let response = self
                .coordinator_call(transactional_id, &coordinator, &request)
                .await?;
            match response.error_code {
                0 => Ok(()),
                code => Err(self.coordinator_error("EndTxn", transactional_id, code)),
            }
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
        match client.produce_idempotent(&id, write, batch).await {
            Ok(offset) => {
                self.session
                    .next_sequence
                    .insert(slot, sequence.wrapping_add(1) & i32::MAX);
                Ok(offset)
            }
            Err(e) if e.is_fenced() => Err(TxnError::Fenced(e)),
            Err(e) if e.is_ambiguous() || e.code() == Some(OUT_OF_ORDER_SEQUENCE) => {
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
        match self.client.end_txn(&id, token, commit).await {
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
