//! A map whose memory outside input cannot grow without bound: it is
//! bounded by the bytes of its keys (role names, up to 32 KiB each, come
//! from whoever can reach the API), and when full it drops half of its
//! entries, chosen by the hash order (arbitrary, not attacker-ordered).
//!
//! Reads take a shared lock and copy nothing but the value: it sits on the
//! path of every check, where a cache with per-read bookkeeping cost more
//! CPU than the check itself.

use crate::sync::{read, write};
use std::collections::HashMap;
use std::sync::RwLock;

/// What one entry is counted as besides its key's bytes.
const ENTRY_OVERHEAD: u64 = 64;

#[derive(Debug, Default)]
struct Inner<V> {
    map: HashMap<String, V>,
    bytes: u64,
}

/// A string-keyed map of at most `max_bytes` (keys plus an overhead each).
#[derive(Debug)]
pub(crate) struct BoundedMap<V> {
    inner: RwLock<Inner<V>>,
    max_bytes: u64,
}

fn cost(key: &str) -> u64 {
    key.len() as u64 + ENTRY_OVERHEAD
}

impl<V: Clone> BoundedMap<V> {
    pub(crate) fn new(max_bytes: u64) -> BoundedMap<V> {
        BoundedMap {
            inner: RwLock::new(Inner {
                map: HashMap::new(),
                bytes: 0,
            }),
            max_bytes,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner<V>> {
        read(&self.inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner<V>> {
        write(&self.inner)
    }

    pub(crate) fn get(&self, key: &str) -> Option<V> {
        self.read().map.get(key).cloned()
    }

    /// Sets `key` to what `f` makes of its current value (`None`: remove).
    pub(crate) fn update(&self, key: &str, f: impl FnOnce(Option<&V>) -> Option<V>) {
        let mut inner = self.write();
        match (f(inner.map.get(key)), inner.map.contains_key(key)) {
            (Some(value), true) => {
                inner.map.insert(key.to_owned(), value);
            }
            (Some(value), false) => {
                if cost(key) > self.max_bytes {
                    return;
                }
                while inner.bytes + cost(key) > self.max_bytes {
                    halve(&mut inner);
                }
                inner.bytes += cost(key);
                inner.map.insert(key.to_owned(), value);
            }
            (None, true) => {
                inner.map.remove(key);
                inner.bytes -= cost(key);
            }
            (None, false) => {}
        }
    }

    pub(crate) fn insert(&self, key: &str, value: V) {
        self.update(key, |_| Some(value));
    }

    pub(crate) fn remove(&self, key: &str) {
        if self.read().map.contains_key(key) {
            self.update(key, |_| None);
        }
    }

    pub(crate) fn clear(&self) {
        let mut inner = self.write();
        inner.map.clear();
        inner.bytes = 0;
    }

    /// Up to `most` keys whose value satisfies `keep`.
    pub(crate) fn keys_where(&self, most: usize, keep: impl Fn(&V) -> bool) -> Vec<String> {
        self.read()
            .map
            .iter()
            .filter(|(_, v)| keep(v))
            .take(most)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Entries and bytes held, for metrics.
    pub(crate) fn size(&self) -> (usize, u64) {
        let inner = self.read();
        (inner.map.len(), inner.bytes)
    }
}

/// Drops every other entry.
fn halve<V>(inner: &mut Inner<V>) {
    let mut keep = false;
    let mut freed = 0;
    inner.map.retain(|key, _| {
        keep = !keep;
        if !keep {
            freed += cost(key);
        }
        keep
    });
    inner.bytes -= freed;
    if inner.map.is_empty() {
        inner.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bytes_of_the_keys_stay_under_the_bound() {
        let map = BoundedMap::new(100_000);
        for i in 0..1_000 {
            map.insert(&format!("{i:0>1000}"), i);
        }
        let (entries, bytes) = map.size();
        assert!(bytes <= 100_000, "{bytes}");
        assert!(entries > 10 && entries < 100, "{entries}");
        assert_eq!(
            map.get(&format!("{:0>1000}", 999)),
            Some(999),
            "the newest stays"
        );
        map.insert("too-long", 1);
        let huge = "x".repeat(200_000);
        map.insert(&huge, 2);
        assert_eq!(map.get(&huge), None, "a key over the bound is not kept");
    }

    #[test]
    fn update_insert_remove_and_clear_keep_the_count_right() {
        let map = BoundedMap::new(10_000);
        map.update("a", |v| Some(v.copied().unwrap_or(0) + 1));
        map.update("a", |v| Some(v.copied().unwrap_or(0) + 1));
        assert_eq!(map.get("a"), Some(2));
        assert_eq!(map.size(), (1, cost("a")));
        map.remove("a");
        map.remove("nothing");
        assert_eq!(map.size(), (0, 0));
        map.insert("b", 1);
        map.clear();
        assert_eq!((map.get("b"), map.size()), (None, (0, 0)));
    }
}
