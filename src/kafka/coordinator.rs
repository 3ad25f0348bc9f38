//! Transaction coordinators: which broker coordinates each transactional
//! id, looked up with batched FindCoordinator (v4+ `coordinator_keys`).
//!
//! As Kafka's Java `Admin` (`AdminApiDriver`, `CoordinatorStrategy`), one
//! lookup per key is in flight and everyone asking for that key meanwhile
//! shares it; keys asked for while a lookup runs go together in the next
//! one. Storms are prevented in two ways:
//! - a key whose lookup answered an error waits out a growing backoff before
//!   it is looked up again;
//! - when a coordinator's broker fails (or answers NOT_COORDINATOR), the
//!   ids cached there are *suspect*: when a caller asks for one of them, all
//!   of them are looked up again in one batch, at most once per growing
//!   backoff of that broker, whatever the number of ids and callers; until
//!   then the cached broker is used, which fails at once while the broker is
//!   in reconnect backoff. So when a coordinator moves, every id moves with
//!   the first lookup after the move.
//!
//! What is remembered is bounded: the coordinator table by the bytes of its
//! ids (half of it dropped when full: a lost entry costs a lookup), the
//! per-key backoffs by count.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use moka::sync::Cache;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::client::{Broker, ClientConfig, KafkaClient, lock};
use super::error::KafkaError;
use crate::bounded::BoundedMap;

/// FindCoordinator key type of a transactional id.
const TRANSACTION: i8 = 1;
/// Most keys in one FindCoordinator.
const MAX_KEYS: usize = 1000;
/// How long an unused coordinator entry is kept.
const IDLE: Duration = Duration::from_secs(600);
/// Most ids with an error backoff.
const MAX_KEY_GATES: u64 = 10_000;

type Reply = oneshot::Sender<Result<Broker, KafkaError>>;

/// When something may be looked up again.
#[derive(Clone, Copy, Debug, Default)]
struct Gate {
    next: Option<Instant>,
    attempts: u32,
}

impl Gate {
    fn open(&self, now: Instant) -> bool {
        self.next.is_none_or(|at| at <= now)
    }

    /// Closes the gate for the next step: `base` doubling up to `max`.
    fn close(&mut self, now: Instant, base: Duration, max: Duration) {
        let step = base.saturating_mul(1 << self.attempts.min(20)).min(max);
        self.attempts = self.attempts.saturating_add(1);
        self.next = Some(now + step);
    }
}

#[derive(Debug, Default)]
struct Waiting {
    replies: Vec<Reply>,
    /// The suspect broker the key was cached at, if that is why it is
    /// looked up.
    suspect: Option<String>,
}

#[derive(Debug, Default)]
struct Lookups {
    pending: HashMap<String, Waiting>,
    in_flight: HashMap<String, Vec<Reply>>,
    running: bool,
}

/// The coordinator table and the lookups in flight.
#[derive(Debug)]
pub(crate) struct Coordinators {
    known: BoundedMap<Broker>,
    suspects: Mutex<HashMap<String, Gate>>,
    /// True while `suspects` holds any broker: checks of a healthy
    /// cluster skip its lock.
    any_suspect: AtomicBool,
    key_gates: Cache<String, (Gate, KafkaError)>,
    lookups: Mutex<Lookups>,
    base: Duration,
    max: Duration,
}

impl Coordinators {
    pub(crate) fn new(config: &ClientConfig) -> Coordinators {
        Coordinators {
            known: BoundedMap::new(config.coordinator_cache_bytes),
            suspects: Mutex::default(),
            any_suspect: AtomicBool::new(false),
            key_gates: Cache::builder()
                .max_capacity(MAX_KEY_GATES)
                .time_to_idle(IDLE)
                .build(),
            lookups: Mutex::default(),
            base: config.retry_backoff,
            max: config.retry_backoff_max,
        }
    }

    /// The broker at `addr` failed: the ids cached there are looked up
    /// again, at most once per backoff.
    pub(crate) fn suspect(&self, addr: &str) {
        lock(&self.suspects).entry(addr.to_owned()).or_default();
        self.any_suspect.store(true, Ordering::Release);
    }

    /// The broker at `addr` answered: it is no longer suspect.
    pub(crate) fn trust(&self, addr: &str) {
        if !self.any_suspect.load(Ordering::Acquire) {
            return;
        }
        let mut suspects = lock(&self.suspects);
        suspects.remove(addr);
        self.any_suspect
            .store(!suspects.is_empty(), Ordering::Release);
    }

    /// Forgets the coordinator of `key` (after 15/16, or when another broker
    /// names a different one).
    pub(crate) fn forget(&self, key: &str) {
        self.known.remove(key);
    }

    /// Learns that `broker` coordinates `key`.
    pub(crate) fn learn(&self, key: &str, broker: Broker) {
        self.key_gates.invalidate(key);
        self.known.insert(key, broker);
    }

    /// Forgets everything (the cluster changed).
    pub(crate) fn clear(&self) {
        self.known.clear();
        self.key_gates.invalidate_all();
        lock(&self.suspects).clear();
        self.any_suspect.store(false, Ordering::Release);
    }

    /// Bytes of ids remembered, for metrics.
    pub(crate) fn weighted_size(&self) -> u64 {
        self.known.size().1
    }
}

/// The coordinators' part of FindCoordinator answers, by key.
fn answers(response: FindCoordinatorResponse) -> Vec<(String, Result<Broker, KafkaError>)> {
    response
        .coordinators
        .into_iter()
        .map(|c| {
            let key = c.key.to_string();
            let answer = if c.error_code == 0 {
                Ok(Broker {
                    id: c.node_id.0,
                    addr: format!("{}:{}", c.host.as_str(), c.port),
                })
            } else {
                Err(KafkaError::broker(
                    "FindCoordinator",
                    c.error_code,
                    c.error_message.map(|m| m.to_string()),
                ))
            };
            (key, answer)
        })
        .collect()
}

fn request(keys: &[String]) -> FindCoordinatorRequest {
    FindCoordinatorRequest::default()
        .with_key_type(TRANSACTION)
        .with_coordinator_keys(
            keys.iter()
                .map(|k| StrBytes::from_string(k.clone()))
                .collect(),
        )
}

impl KafkaClient {
    /// The transaction coordinators of `keys`, one attempt: cached, else
    /// looked up (shared with concurrent lookups of the same keys). Per key,
    /// the broker or a (usually retriable) error.
    pub(crate) async fn coordinators(
        &self,
        keys: &[String],
    ) -> HashMap<String, Result<Broker, KafkaError>> {
        let table = &self.core.coordinators;
        let now = Instant::now();
        let mut found = HashMap::with_capacity(keys.len());
        // The common case, a healthy cluster and known ids: no lock but the
        // table's shared one.
        if !table.any_suspect.load(Ordering::Acquire) {
            for key in keys {
                if let Some(broker) = table.known.get(key) {
                    found.insert(key.clone(), Ok(broker));
                }
            }
            if found.len() == keys.len() {
                return found;
            }
        }
        let mut waits = Vec::new();
        let mut start = false;
        {
            let suspects = lock(&table.suspects);
            let mut lookups = lock(&table.lookups);
            for key in keys {
                if found.contains_key(key) {
                    continue;
                }
                let suspect = match table.known.get(key) {
                    Some(broker) => match suspects.get(&broker.addr) {
                        Some(gate) if gate.open(now) => Some(broker.addr),
                        _ => {
                            found.insert(key.clone(), Ok(broker));
                            continue;
                        }
                    },
                    None => None,
                };
                if suspect.is_none()
                    && let Some((gate, error)) = table.key_gates.get(key)
                    && !gate.open(now)
                {
                    found.insert(key.clone(), Err(error));
                    continue;
                }
                let (tx, rx) = oneshot::channel();
                if let Some(replies) = lookups.in_flight.get_mut(key) {
                    replies.push(tx);
                } else {
                    let waiting = lookups.pending.entry(key.clone()).or_default();
                    waiting.replies.push(tx);
                    waiting.suspect = waiting.suspect.take().or(suspect);
                }
                waits.push((key.clone(), rx));
            }
            if !lookups.pending.is_empty() && !lookups.running {
                lookups.running = true;
                start = true;
            }
        }
        if start {
            tokio::spawn(self.clone().lookup_rounds());
        }
        for (key, rx) in waits {
            let answer = rx.await.unwrap_or_else(|_| {
                Err(KafkaError::Invalid(
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
            .unwrap_or_else(|| Err(KafkaError::Invalid(format!("no coordinator for {key:?}"))))
    }

    /// Sends lookups until none are pending; one FindCoordinator at a time.
    async fn lookup_rounds(self) {
        let table = &self.core.coordinators;
        loop {
            let keys: Vec<String> = {
                // Lock order: suspects, then lookups (as in `coordinators`).
                let mut suspects = lock(&table.suspects);
                let mut lookups = lock(&table.lookups);
                if lookups.pending.is_empty() {
                    lookups.running = false;
                    return;
                }
                let mut keys: Vec<String> =
                    lookups.pending.keys().take(MAX_KEYS).cloned().collect();
                let now = Instant::now();
                let mut reopened = Vec::new();
                for key in &keys {
                    if let Some(waiting) = lookups.pending.remove(key) {
                        if let Some(addr) = &waiting.suspect
                            && let Some(gate) = suspects.get_mut(addr)
                            && gate.open(now)
                        {
                            gate.close(now, table.base, table.max);
                            reopened.push(addr.clone());
                        }
                        lookups.in_flight.insert(key.clone(), waiting.replies);
                    }
                }
                // Every other id cached at a suspect broker goes along: when
                // its coordinator moved, they all moved.
                for addr in reopened {
                    let room = MAX_KEYS.saturating_sub(keys.len());
                    for key in table.known.keys_where(room, |b| b.addr == addr) {
                        if !lookups.in_flight.contains_key(&key) {
                            lookups.in_flight.insert(key.clone(), Vec::new());
                            keys.push(key);
                        }
                    }
                }
                keys
            };
            if let Some(observer) = self.observer() {
                observer.coordinator_lookup(keys.len());
            }
            let result = self.send_any(&request(&keys), &[]).await;
            let mut answered: HashMap<String, Result<Broker, KafkaError>> = match result {
                Ok((response, _)) => answers(response).into_iter().collect(),
                Err(e) => keys.iter().map(|k| (k.clone(), Err(e.clone()))).collect(),
            };
            let now = Instant::now();
            let mut lookups = lock(&table.lookups);
            for key in keys {
                let answer = answered.remove(&key).unwrap_or_else(|| {
                    Err(KafkaError::Invalid(format!(
                        "FindCoordinator answered nothing for {key:?}"
                    )))
                });
                match &answer {
                    Ok(broker) => table.learn(&key, broker.clone()),
                    Err(e) => {
                        let mut gate = table
                            .key_gates
                            .get(&key)
                            .map(|(g, _)| g)
                            .unwrap_or_default();
                        gate.close(now, table.base, table.max);
                        table.key_gates.insert(key.clone(), (gate, e.clone()));
                    }
                }
                for reply in lookups.in_flight.remove(&key).unwrap_or_default() {
                    let _ = reply.send(answer.clone());
                }
            }
        }
    }

    /// Asks a broker other than `at` which broker coordinates each of
    /// `keys`: the confirmation that `at`'s answers are current (see
    /// `describe`). Learns the answers that name another broker. `None`
    /// when the cluster never had a second broker, so a coordinator cannot
    /// have moved.
    pub(crate) async fn confirm_coordinators(
        &self,
        keys: &[String],
        at: &Broker,
    ) -> Option<Result<HashMap<String, Named>, KafkaError>> {
        if !self.core.metadata.is_multi_broker() {
            return None;
        }
        let result = self.send_any(&request(keys), &[at.addr.as_str()]).await;
        Some(result.map(|(response, _)| {
            response
                .coordinators
                .into_iter()
                .map(|c| {
                    let named = if c.error_code != 0 {
                        Named::Failed(KafkaError::broker(
                            "FindCoordinator",
                            c.error_code,
                            c.error_message.map(|m| m.to_string()),
                        ))
                    } else if c.node_id.0 == at.id {
                        // Almost always: nothing to build, nothing to learn.
                        Named::Same
                    } else {
                        let broker = Broker {
                            id: c.node_id.0,
                            addr: format!("{}:{}", c.host.as_str(), c.port),
                        };
                        self.core.coordinators.learn(c.key.as_str(), broker.clone());
                        Named::Other(broker)
                    };
                    (c.key.to_string(), named)
                })
                .collect()
        }))
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gate_closes_for_a_doubling_step_up_to_the_cap() {
        let now = Instant::now();
        let mut gate = Gate::default();
        assert!(gate.open(now));
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(1);
        for step in [100, 200, 400, 800, 1000, 1000] {
            gate.close(now, base, max);
            assert!(!gate.open(now));
            assert!(!gate.open(now + Duration::from_millis(step - 1)));
            assert!(gate.open(now + Duration::from_millis(step)));
        }
    }

    #[test]
    fn the_table_is_bounded_by_the_bytes_of_its_ids() {
        let mut config = ClientConfig::new(["b:1"]);
        config.coordinator_cache_bytes = 100_000;
        let table = Coordinators::new(&config);
        let broker = Broker {
            id: 1,
            addr: "b:1".into(),
        };
        for i in 0..1_000 {
            table.learn(&format!("{i:0>1000}"), broker.clone());
        }
        let size = table.weighted_size();
        assert!(size <= 100_000, "{size} bytes remembered");
        assert!(table.known.size().0 < 100);
    }
}
