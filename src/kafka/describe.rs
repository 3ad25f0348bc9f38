//! DescribeTransactions: the coordinator's current (producer id, epoch) of a
//! transactional id, which is the current token of a role.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use kafka_protocol::messages::{DescribeTransactionsRequest, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;

use super::backoff::Backoff;
use super::client::{Broker, KafkaClient};
use super::error::{KafkaError, TRANSACTIONAL_ID_NOT_FOUND};
use crate::coordination::FencingToken;

/// What the transaction coordinator reports for one transactional id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionDescription {
    /// Kafka's state name: Empty, Ongoing, PrepareCommit, PrepareAbort,
    /// CompleteCommit, CompleteAbort, PrepareEpochFence (or Dead).
    pub state: String,
    /// The current producer id.
    pub producer_id: i64,
    /// The current producer epoch.
    pub producer_epoch: i16,
    /// The transaction timeout the holder asked for (its lease duration).
    pub timeout_ms: i32,
    /// When the open transaction started, or -1.
    pub start_time_ms: i64,
}

impl TransactionDescription {
    /// The current token, or `None` when the pair is not a minted one.
    pub fn token(&self) -> Option<FencingToken> {
        FencingToken::new(self.producer_id, self.producer_epoch).ok()
    }
}

/// The answer for one id: `Ok(None)` when no member holds the role (105).
pub type Described = Result<Option<TransactionDescription>, KafkaError>;

impl KafkaClient {
    /// One DescribeTransactions request to one coordinator, no retries: the
    /// primitive the service's batcher sends. A coordinator error on an id
    /// (15, 16) drops that id's cached coordinator.
    pub async fn describe_at(
        &self,
        coordinator: &Broker,
        ids: &[String],
        timeout: Duration,
    ) -> Result<Vec<(String, Described)>, KafkaError> {
        let request = DescribeTransactionsRequest::default().with_transactional_ids(
            ids.iter()
                .map(|id| TransactionalId(StrBytes::from_string(id.clone())))
                .collect(),
        );
        let result = self.call_at(&coordinator.addr, &request, timeout).await;
        let response = match result {
            Ok((response, _)) => response,
            Err(e) => {
                if e.needs_metadata_refresh() || e.is_retriable() {
                    self.invalidate_coordinators_at(&coordinator.addr);
                }
                return Err(e);
            }
        };
        let mut out = Vec::with_capacity(ids.len());
        for state in response.transaction_states {
            let id = state.transactional_id.0.to_string();
            let answer = match state.error_code {
                0 => Ok(Some(TransactionDescription {
                    state: state.transaction_state.to_string(),
                    producer_id: state.producer_id.0,
                    producer_epoch: state.producer_epoch,
                    timeout_ms: state.transaction_timeout_ms,
                    start_time_ms: state.transaction_start_time_ms,
                })),
                TRANSACTIONAL_ID_NOT_FOUND => Ok(None),
                code => {
                    let err = KafkaError::broker("DescribeTransactions", code, None);
                    if err.is_coordinator_error() {
                        self.invalidate_coordinator(&id);
                    }
                    Err(err)
                }
            };
            out.push((id, answer));
        }
        for id in ids {
            if !out.iter().any(|(got, _)| got == id) {
                out.push((
                    id.clone(),
                    Err(KafkaError::Protocol {
                        addr: coordinator.addr.clone(),
                        reason: format!("DescribeTransactions answered nothing for {id:?}"),
                    }),
                ));
            }
        }
        Ok(out)
    }

    /// Describes many transactional ids at once: one request per coordinator,
    /// retried per id on retriable errors until the operation timeout.
    pub async fn describe_transactions(&self, ids: &[String]) -> HashMap<String, Described> {
        let config = self.config();
        let started = Instant::now();
        let deadline = started + config.operation_timeout;
        let mut backoff = Backoff::new(config.retry_backoff, config.retry_backoff_max);
        let mut done: HashMap<String, Described> = HashMap::with_capacity(ids.len());
        let mut pending: Vec<String> = {
            let mut seen = HashSet::new();
            ids.iter().filter(|id| seen.insert(*id)).cloned().collect()
        };
        let mut last_errors: HashMap<String, KafkaError> = HashMap::new();
        while !pending.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let timeout = left
                .min(config.request_timeout)
                .max(Duration::from_millis(1));
            let mut retry = Vec::new();
            match self.transaction_coordinators(&pending, timeout).await {
                Err(e) if e.is_retriable() => {
                    for id in pending.drain(..) {
                        last_errors.insert(id.clone(), e.clone());
                        retry.push(id);
                    }
                }
                Err(e) => {
                    for id in pending.drain(..) {
                        done.insert(id, Err(e.clone()));
                    }
                }
                Ok(coordinators) => {
                    let mut groups: HashMap<Broker, Vec<String>> = HashMap::new();
                    for id in pending.drain(..) {
                        match coordinators.get(&id) {
                            Some(Ok(broker)) => groups.entry(broker.clone()).or_default().push(id),
                            Some(Err(e)) if e.is_retriable() => {
                                last_errors.insert(id.clone(), e.clone());
                                retry.push(id);
                            }
                            Some(Err(e)) => {
                                done.insert(id, Err(e.clone()));
                            }
                            None => retry.push(id),
                        }
                    }
                    let calls = groups.iter().map(|(broker, ids)| async move {
                        (ids, self.describe_at(broker, ids, timeout).await)
                    });
                    for (ids, result) in futures::future::join_all(calls).await {
                        match result {
                            Ok(answers) => {
                                for (id, answer) in answers {
                                    match answer {
                                        Err(e) if e.is_retriable() => {
                                            last_errors.insert(id.clone(), e);
                                            retry.push(id);
                                        }
                                        answer => {
                                            done.insert(id, answer);
                                        }
                                    }
                                }
                            }
                            Err(e) if e.is_retriable() => {
                                for id in ids {
                                    last_errors.insert(id.clone(), e.clone());
                                    retry.push(id.clone());
                                }
                            }
                            Err(e) => {
                                for id in ids {
                                    done.insert(id.clone(), Err(e.clone()));
                                }
                            }
                        }
                    }
                }
            }
            if retry.is_empty() {
                break;
            }
            let delay = backoff.next_delay();
            if Instant::now() + delay >= deadline {
                for id in retry {
                    let last = last_errors
                        .remove(&id)
                        .unwrap_or(KafkaError::Invalid("no coordinator answered".into()));
                    done.insert(
                        id,
                        Err(KafkaError::GaveUp {
                            op: "describe transactions",
                            after: started.elapsed(),
                            last: Box::new(last),
                        }),
                    );
                }
                break;
            }
            tokio::time::sleep(delay).await;
            pending = retry;
        }
        done
    }

    /// Describes one transactional id, with retries.
    pub async fn describe_transaction(&self, id: &str) -> Described {
        let ids = [id.to_owned()];
        self.describe_transactions(&ids)
            .await
            .remove(id)
            .unwrap_or_else(|| Err(KafkaError::Invalid(format!("no answer for {id:?}"))))
    }
}
