//! The client's memory of superseded verdicts: a token found superseded
//! never turns current again (a transactional id's pair only grows), so the
//! verdict is answered locally from then on. `authoritative` is never kept.
//!
//! Bounded by bytes, counting each entry's strings and a fixed overhead for
//! the rest (the table slot, the allocations' headers). When an insert
//! would pass the bound, entries are dropped in the table's hash order
//! (arbitrary, not chosen by whoever names the roles) until half the bound
//! is free: a dropped verdict only costs a request.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use krabka_authority_types::FencingToken;

/// What an entry weighs besides its strings: the key and value structs in
/// the table (about 100 bytes with the control byte) and the allocator's
/// headers of its three strings, rounded up.
pub(crate) const ENTRY_OVERHEAD: u64 = 200;

/// A superseded verdict as remembered: what the service said when it found
/// the token superseded.
#[derive(Clone, Debug)]
pub(crate) struct Remembered {
    pub(crate) current: FencingToken,
    pub(crate) state: Option<String>,
    pub(crate) checked_at: String,
}

type Key = (String, FencingToken);

fn weight(key: &Key, seen: &Remembered) -> u64 {
    let strings = key.0.len() + seen.checked_at.len() + seen.state.as_ref().map_or(0, String::len);
    ENTRY_OVERHEAD + strings as u64
}

#[derive(Debug, Default)]
struct Table {
    entries: HashMap<Key, Remembered>,
    bytes: u64,
}

/// Superseded verdicts by (role, token), at most `max_bytes` as weighed.
#[derive(Debug)]
pub(crate) struct SupersededMemory {
    table: Mutex<Table>,
    max_bytes: u64,
}

impl SupersededMemory {
    pub(crate) fn new(max_bytes: u64) -> SupersededMemory {
        SupersededMemory {
            table: Mutex::default(),
            max_bytes,
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn get(&self, role: &str, token: FencingToken) -> Option<Remembered> {
        // The key is built only to look up; roles are short in practice.
        self.table().entries.get(&(role.to_owned(), token)).cloned()
    }

    pub(crate) fn insert(&self, role: String, token: FencingToken, seen: Remembered) {
        let key = (role, token);
        let cost = weight(&key, &seen);
        if cost > self.max_bytes {
            return;
        }
        let mut table = self.table();
        if let Some(old) = table.entries.remove(&key) {
            table.bytes -= weight(&key, &old);
        }
        if table.bytes + cost > self.max_bytes {
            let target = self.max_bytes / 2;
            let Table { entries, bytes } = &mut *table;
            entries.retain(|k, v| {
                if *bytes + cost <= target {
                    return true;
                }
                *bytes -= weight(k, v);
                false
            });
        }
        table.bytes += cost;
        table.entries.insert(key, seen);
    }

    /// Entries and their weight in bytes.
    pub(crate) fn usage(&self) -> (u64, u64) {
        let table = self.table();
        (table.entries.len() as u64, table.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen() -> Remembered {
        Remembered {
            current: FencingToken::new(1, 1).expect("a token"),
            state: Some("CompleteCommit".into()),
            checked_at: "2026-12-01T00:00:00.000Z".into(),
        }
    }

    #[test]
    fn the_weight_never_passes_the_bound_and_half_is_freed_when_full() {
        let bound = 10_000;
        let memory = SupersededMemory::new(bound);
        let token = FencingToken::new(1, 0).expect("a token");
        let mut most = 0;
        for i in 0..1_000 {
            memory.insert(format!("{i:0>100}"), token, seen());
            let (entries, bytes) = memory.usage();
            assert!(bytes <= bound, "{bytes} > {bound}");
            most = most.max(entries);
        }
        let per_entry = weight(&("r".repeat(100), token), &seen());
        assert_eq!(most, bound / per_entry, "fills up to the bound");
        let (entries, _) = memory.usage();
        assert!(entries >= most / 2, "keeps about half when full: {entries}");
        assert!(
            memory.get(&format!("{:0>100}", 999), token).is_some(),
            "the last one is kept"
        );
    }

    #[test]
    fn an_entry_over_the_whole_bound_is_not_kept_and_a_repeat_is_counted_once() {
        let memory = SupersededMemory::new(1_000);
        let token = FencingToken::new(1, 0).expect("a token");
        memory.insert("r".repeat(2_000), token, seen());
        assert_eq!(memory.usage(), (0, 0));
        memory.insert("orders".into(), token, seen());
        let once = memory.usage();
        memory.insert("orders".into(), token, seen());
        assert_eq!(memory.usage(), once);
    }
}
