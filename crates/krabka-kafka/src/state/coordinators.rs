//! The coordinator table: which broker coordinates each transactional id,
//! which brokers are suspect, and the lookups waiting or in flight.
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
//! The gates step exactly (no jitter): they are per client and opened by
//! callers whose retries are jittered already.
//!
//! What is remembered is bounded by the bytes it takes, everything counted
//! ([`crate::bounded`]): the table (half of it dropped when full: a lost
//! entry costs a lookup) and the per-key backoffs (4 MiB; one lost costs a
//! lookup before its backoff ended).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use moka::sync::Cache;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::backoff::{Backoff, Gate, Jitter};
use crate::bounded::{BoundedMap, MOKA_ENTRY_BYTES, allocated};
use crate::config::Broker;
use crate::error::KafkaError;
use krabka_coordination::sync::lock;

/// Most keys in one FindCoordinator.
const MAX_KEYS: usize = 1000;
/// How long an unused per-key backoff is kept.
const IDLE: Duration = Duration::from_secs(600);
/// Most bytes of ids with an error backoff, everything counted: an id is a
/// role name of up to 32 KiB from whoever can reach the API, and during an
/// outage every id asked about gets one (10,000 of them took up to 330 MB).
const MAX_KEY_GATE_BYTES: u64 = 4 << 20;

/// What a key's error backoff is counted as: the id and the error's text
/// (its strings, which may name the id) at their allocation sizes, and
/// moka's entry.
fn key_gate_bytes(key: &str, error: &KafkaError) -> u32 {
    let bytes = allocated(key.len()) + allocated(error.to_string().len()) + MOKA_ENTRY_BYTES;
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

/// One id's coordinator, or why it is not known.
pub(crate) type Answer = Result<Broker, KafkaError>;

type Reply = oneshot::Sender<Answer>;

#[derive(Debug, Default)]
struct Waiting {
    replies: Vec<Reply>,
    /// The suspect broker the key was cached at, if that is why it is
    /// looked up.
    suspect: Option<String>,
}

/// Ordered maps: the keys of a lookup, and whom its answer wakes first,
/// follow their names (a simulation's seed decides a run, not a hasher).
#[derive(Debug, Default)]
struct Lookups {
    pending: BTreeMap<String, Waiting>,
    in_flight: BTreeMap<String, Vec<Reply>>,
    running: bool,
}

/// What the table says of some keys at once.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// Keys answered from the table (a broker, or the error a key's
    /// backoff holds).
    pub(crate) found: HashMap<String, Answer>,
    /// Keys waiting for a lookup.
    pub(crate) waits: Vec<(String, oneshot::Receiver<Answer>)>,
    /// No lookup runs: the caller starts them ([`Coordinators::next_round`]).
    pub(crate) start: bool,
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
    /// Every gate's backoff: `retry.backoff.ms` doubling to its max.
    backoff: Backoff,
}

impl Coordinators {
    pub(super) fn new(
        retry_backoff: Duration,
        retry_max: Duration,
        max_bytes: u64,
    ) -> Coordinators {
        Coordinators {
            known: BoundedMap::new(max_bytes),
            suspects: Mutex::default(),
            any_suspect: AtomicBool::new(false),
            key_gates: Cache::builder()
                .max_capacity(MAX_KEY_GATE_BYTES)
                .weigher(|key: &String, (_, error): &(Gate, KafkaError)| key_gate_bytes(key, error))
                .time_to_idle(IDLE)
                .build(),
            lookups: Mutex::default(),
            backoff: Backoff::new(retry_backoff, retry_max, Jitter::NONE),
        }
    }

    /// The ids cached at `addr` are looked up again, at most once per
    /// backoff.
    pub(super) fn suspect(&self, addr: &str) {
        lock(&self.suspects)
            .entry(addr.to_owned())
            .or_insert_with(|| Gate::new(self.backoff.clone()));
        self.any_suspect.store(true, Ordering::Release);
    }

    /// `addr` is no longer suspect.
    pub(super) fn trust(&self, addr: &str) {
        if !self.any_suspect.load(Ordering::Acquire) {
            return;
        }
        let mut suspects = lock(&self.suspects);
        suspects.remove(addr);
        self.any_suspect
            .store(!suspects.is_empty(), Ordering::Release);
    }

    /// Forgets the coordinator of `key`.
    pub(super) fn forget(&self, key: &str) {
        self.known.remove(key);
    }

    /// `broker` coordinates `key`.
    pub(super) fn learn(&self, key: &str, broker: Broker) {
        self.key_gates.invalidate(key);
        self.known.insert(key, broker);
    }

    /// The lookup of `key` failed with `error`: callers get it until the
    /// key's next backoff ends.
    pub(super) fn lookup_failed(&self, key: &str, error: KafkaError) {
        let mut gate = self
            .key_gates
            .get(key)
            .map_or_else(|| Gate::new(self.backoff.clone()), |(g, _)| g);
        gate.shut(Instant::now());
        self.key_gates.insert(key.to_owned(), (gate, error));
    }

    /// Forgets everything (the cluster changed).
    pub(super) fn clear(&self) {
        self.known.clear();
        self.key_gates.invalidate_all();
        lock(&self.suspects).clear();
        self.any_suspect.store(false, Ordering::Release);
    }

    /// Bytes of ids remembered, for metrics.
    pub(crate) fn weighted_size(&self) -> u64 {
        self.known.size().1
    }

    /// The cached coordinator of `key`.
    #[cfg(test)]
    pub(crate) fn cached(&self, key: &str) -> Option<Broker> {
        self.known.get(key)
    }

    /// True while `addr` is suspect.
    #[cfg(test)]
    pub(crate) fn is_suspect(&self, addr: &str) -> bool {
        lock(&self.suspects).contains_key(addr)
    }

    /// The coordinator of `key` when the table knows it and no broker is
    /// suspect, the common case: no lock but the table's shared one,
    /// nothing built.
    pub(crate) fn known(&self, key: &str) -> Option<Broker> {
        if self.any_suspect.load(Ordering::Acquire) {
            return None;
        }
        self.known.get(key)
    }

    /// The coordinators of `keys` the table can answer, and a place in the
    /// lookups for the others (shared with lookups of the same keys).
    pub(crate) fn resolve(&self, keys: &[String]) -> Resolved {
        let now = Instant::now();
        let mut found = HashMap::with_capacity(keys.len());
        for key in keys {
            if let Some(broker) = self.known(key) {
                found.insert(key.clone(), Ok(broker));
            }
        }
        if found.len() == keys.len() {
            return Resolved {
                found,
                waits: Vec::new(),
                start: false,
            };
        }
        let mut waits = Vec::new();
        let suspects = lock(&self.suspects);
        let mut lookups = lock(&self.lookups);
        for key in keys {
            if found.contains_key(key) {
                continue;
            }
            let suspect = match self.known.get(key) {
                Some(broker) => match suspects.get(&broker.addr) {
                    Some(gate) if gate.is_open(now) => Some(broker.addr),
                    _ => {
                        found.insert(key.clone(), Ok(broker));
                        continue;
                    }
                },
                None => None,
            };
            if suspect.is_none()
                && let Some((gate, error)) = self.key_gates.get(key)
                && !gate.is_open(now)
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
        let start = !lookups.pending.is_empty() && !lookups.running;
        lookups.running |= start;
        Resolved {
            found,
            waits,
            start,
        }
    }

    /// The keys of the next lookup, now in flight: pending keys, and every
    /// other id cached at a suspect broker whose gate they opened (when its
    /// coordinator moved, they all moved). `None` when none are pending:
    /// the lookups stop.
    pub(crate) fn next_round(&self) -> Option<Vec<String>> {
        // Lock order: suspects, then lookups (as in `resolve`).
        let mut suspects = lock(&self.suspects);
        let mut lookups = lock(&self.lookups);
        if lookups.pending.is_empty() {
            lookups.running = false;
            return None;
        }
        let mut keys: Vec<String> = lookups.pending.keys().take(MAX_KEYS).cloned().collect();
        let now = Instant::now();
        let mut reopened = Vec::new();
        for key in &keys {
            if let Some(waiting) = lookups.pending.remove(key) {
                if let Some(addr) = &waiting.suspect
                    && let Some(gate) = suspects.get_mut(addr)
                    && gate.is_open(now)
                {
                    gate.shut(now);
                    reopened.push(addr.clone());
                }
                lookups.in_flight.insert(key.clone(), waiting.replies);
            }
        }
        for addr in reopened {
            let room = MAX_KEYS.saturating_sub(keys.len());
            for key in self.known.keys_where(room, |b| b.addr == addr) {
                if !lookups.in_flight.contains_key(&key) {
                    lookups.in_flight.insert(key.clone(), Vec::new());
                    keys.push(key);
                }
            }
        }
        Some(keys)
    }

    /// Hands a lookup's answers to everyone waiting for them.
    pub(crate) fn answer(&self, answers: Vec<(String, Answer)>) {
        let mut lookups = lock(&self.lookups);
        for (key, answer) in answers {
            for reply in lookups.in_flight.remove(&key).unwrap_or_default() {
                let _ = reply.send(answer.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BACKOFF: Duration = Duration::from_millis(100);

    fn broker(addr: &str) -> Broker {
        Broker {
            id: 1,
            addr: addr.to_owned(),
        }
    }

    fn table() -> Coordinators {
        Coordinators::new(BACKOFF, Duration::from_secs(1), 1 << 20)
    }

    #[test]
    fn the_table_is_bounded_by_the_bytes_of_its_ids() {
        let table = Coordinators::new(BACKOFF, Duration::from_secs(1), 100_000);
        for i in 0..1_000 {
            table.learn(&format!("{i:0>1000}"), broker("b:1"));
        }
        let size = table.weighted_size();
        assert!(size <= 100_000, "{size} bytes remembered");
        assert!(table.known.size().0 < 100);
    }

    /// An outage: every id asked about gets an error backoff. Long ids and
    /// errors that name them stay within the bound in bytes.
    #[test]
    fn the_error_backoffs_are_bounded_by_their_bytes() {
        let table = table();
        for i in 0..2_000 {
            let key = format!("{i:0>32000}");
            let error =
                KafkaError::Malformed(format!("FindCoordinator answered nothing for {key:?}"));
            table.lookup_failed(&key, error);
        }
        table.key_gates.run_pending_tasks();
        let bytes = table.key_gates.weighted_size();
        assert!(bytes <= MAX_KEY_GATE_BYTES, "{bytes}");
        let entries = table.key_gates.entry_count();
        assert!(
            entries > 0 && entries <= MAX_KEY_GATE_BYTES / 64_000,
            "{entries}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_suspect_brokers_ids_go_in_one_lookup_once_per_backoff() {
        let table = table();
        for key in ["a", "b", "c"] {
            table.learn(key, broker("b:1"));
        }
        table.learn("elsewhere", broker("b:2"));
        table.suspect("b:1");
        let asked = table.resolve(&["a".to_owned()]);
        assert!(asked.start && asked.found.is_empty());
        let mut keys = table.next_round().unwrap();
        keys.sort();
        assert_eq!(keys, ["a", "b", "c"], "every id of the suspect broker");
        table.answer(
            keys.iter()
                .map(|k| (k.clone(), Ok(broker("b:1"))))
                .collect(),
        );
        assert!(
            table.next_round().is_none(),
            "nothing pending: the lookups stop"
        );

        // Within the backoff the cached broker answers.
        let asked = table.resolve(&["b".to_owned()]);
        assert_eq!(asked.found["b"].as_ref().unwrap().addr, "b:1");
        assert!(asked.waits.is_empty() && !asked.start);
        tokio::time::advance(BACKOFF).await;
        let asked = table.resolve(&["b".to_owned()]);
        assert!(asked.start, "the gate opened again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_lookup_answers_its_error_until_the_keys_backoff_ends() {
        let table = table();
        let error = KafkaError::broker("FindCoordinator", 15, None);
        table.lookup_failed("k", error.clone());
        let asked = table.resolve(&["k".to_owned()]);
        assert_eq!(asked.found["k"], Err(error));
        tokio::time::advance(BACKOFF).await;
        let asked = table.resolve(&["k".to_owned()]);
        assert_eq!(asked.waits.len(), 1, "looked up again");
    }
}
