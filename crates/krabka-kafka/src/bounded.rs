//! A map whose memory outside input cannot grow without bound, and the
//! arithmetic of what an entry really costs.
//!
//! The map is bounded by the bytes it really takes: each key's allocation
//! as the allocator rounds it (role names, up to 32 KiB each, come from
//! whoever can reach the API), what each value holds on the heap, and the
//! hash table itself at its capacity (a slot per entry and then some: the
//! table keeps an eighth of its slots empty and grows by doubling). When a
//! new entry would not fit, half of the entries go, chosen by the hash order
//! (arbitrary, not attacker-ordered).
//!
//! Reads take a shared lock and copy nothing but the value: it sits on the
//! path of every check, where a cache with per-read bookkeeping cost more
//! CPU than the check itself.

use krabka_coordination::sync::{read, write};
use std::collections::HashMap;
use std::sync::RwLock;

/// The bytes an allocation of `n` bytes takes from the allocator: its size
/// class. mimalloc (the binary's allocator) has classes of whole words up
/// to 8 words, then four per doubling (`mi_bin`), so a 900-byte name takes
/// 1024 bytes. Objects over 128 KiB (tables, not names) are page-rounded.
pub fn allocated(n: usize) -> u64 {
    const WORD: usize = 8;
    if n == 0 {
        return 0;
    }
    let words = n.div_ceil(WORD);
    if words <= 8 {
        return (words * WORD) as u64;
    }
    if n > 128 * 1024 {
        return n.next_multiple_of(4096) as u64;
    }
    let w = words - 1;
    let bits = usize::BITS - 1 - w.leading_zeros();
    let step = 1usize << (bits - 2);
    ((((w >> (bits - 2)) + 1) * step) * WORD) as u64
}

/// What one entry of a moka cache takes besides the allocations its key
/// and value own: the key and value behind `Arc`s, the entry's
/// bookkeeping, its access-order deque node and its slot in the concurrent
/// hash table, measured at 336 to 395 bytes with a counting allocator at
/// 1,000 to 150,000 entries (a key of a `String` and a small tuple, a value
/// of about 40 bytes), plus up to 16 bytes of the frequency sketch; rounded
/// up.
pub const MOKA_ENTRY_BYTES: u64 = 448;

/// What a value holds on the heap beyond its own bytes (counted in the
/// table's slot).
pub trait HeapSize {
    /// Bytes allocated for this value, as [`allocated`] counts them.
    fn heap_bytes(&self) -> u64;
}

/// A token (a high-water mark) holds nothing on the heap.
impl HeapSize for krabka_coordination::FencingToken {
    fn heap_bytes(&self) -> u64 {
        0
    }
}

/// The bytes of a hash table of `(String, V)` with `buckets` buckets
/// (hashbrown, std's map): one slot and one control byte per bucket, plus a
/// group of control bytes.
fn table_bytes<V>(buckets: usize) -> u64 {
    if buckets == 0 {
        return 0;
    }
    let slot = std::mem::size_of::<(String, V)>();
    allocated(buckets * (slot + 1) + 16)
}

/// hashbrown's `capacity_to_buckets`: a power of two keeping an eighth of
/// the buckets empty (at least one for tiny tables).
fn buckets_for(capacity: usize) -> usize {
    match capacity {
        0 => 0,
        1..=3 => 4,
        4..=7 => 8,
        8..=14 => 16,
        _ => (capacity * 8).div_ceil(7).next_power_of_two(),
    }
}

/// hashbrown's `bucket_mask_to_capacity`: the entries `buckets` hold.
fn capacity_of(buckets: usize) -> usize {
    if buckets <= 8 {
        buckets.saturating_sub(1)
    } else {
        buckets / 8 * 7
    }
}

#[derive(Debug, Default)]
struct Inner<V> {
    map: HashMap<String, V>,
    /// Bytes of the keys' and the values' allocations.
    entries: u64,
    /// The table's buckets. std's map does not say; `capacity()` is the
    /// entries it takes before it grows, which removals (tombstones) lower,
    /// so the buckets are followed here: a table grows (`capacity()` rises
    /// past what the buckets hold) or shrinks only where this map resizes.
    buckets: usize,
}

impl<V> Inner<V> {
    fn bytes(&self) -> u64 {
        self.entries + table_bytes::<V>(self.buckets)
    }

    /// Follows the table after an insert: a resize shows as a capacity the
    /// buckets known cannot hold.
    fn grown(&mut self) {
        let capacity = self.map.capacity();
        if capacity > capacity_of(self.buckets) {
            self.buckets = buckets_for(capacity);
        }
    }

    /// The table's buckets once it holds one more entry: the same, unless
    /// it is full (`len == capacity()`), when hashbrown rehashes in place
    /// (tombstones, half full or less) or resizes to the buckets of one
    /// more than its full capacity.
    fn buckets_after_insert(&self) -> usize {
        let (len, full) = (self.map.len(), capacity_of(self.buckets));
        if len < self.map.capacity() || (self.buckets > 0 && len < full / 2) {
            self.buckets
        } else {
            buckets_for((len + 1).max(full + 1))
        }
    }

    /// A table rebuilt to fit its entries (no tombstones).
    fn shrink(&mut self) {
        self.map.shrink_to_fit();
        self.buckets = buckets_for(self.map.capacity());
    }
}

/// A string-keyed map of at most `max_bytes`, everything counted.
#[derive(Debug)]
pub struct BoundedMap<V> {
    inner: RwLock<Inner<V>>,
    max_bytes: u64,
}

fn entry_cost<V: HeapSize>(key: &str, value: &V) -> u64 {
    allocated(key.len()) + value.heap_bytes()
}

impl<V: Clone + HeapSize> BoundedMap<V> {
    pub fn new(max_bytes: u64) -> BoundedMap<V> {
        BoundedMap {
            inner: RwLock::new(Inner {
                map: HashMap::new(),
                entries: 0,
                buckets: 0,
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

    pub fn get(&self, key: &str) -> Option<V> {
        self.read().map.get(key).cloned()
    }

    /// Sets `key` to what `f` makes of its current value (`None`: remove).
    pub fn update(&self, key: &str, f: impl FnOnce(Option<&V>) -> Option<V>) {
        let mut inner = self.write();
        let old = inner.map.get(key).map(|v| entry_cost(key, v));
        match (f(inner.map.get(key)), old) {
            (Some(value), Some(old)) => {
                let new = entry_cost(key, &value);
                inner.entries = inner.entries - old + new;
                if let Some(slot) = inner.map.get_mut(key) {
                    *slot = value;
                }
                // A value that grew may tip the map over: make room as for
                // a new entry (this one may go too; it costs a lookup).
                while inner.bytes() > self.max_bytes && !inner.map.is_empty() {
                    halve(&mut inner);
                }
            }
            (Some(value), None) => {
                let cost = entry_cost(key, &value);
                let fits = |inner: &Inner<V>| {
                    inner.entries + cost + table_bytes::<V>(inner.buckets_after_insert())
                        <= self.max_bytes
                };
                while !fits(&inner) {
                    if inner.map.is_empty() {
                        // Even alone it does not fit (with the table it
                        // needs): not kept.
                        inner.shrink();
                        if !fits(&inner) {
                            return;
                        }
                        break;
                    }
                    halve(&mut inner);
                }
                inner.entries += cost;
                inner.map.insert(key.to_owned(), value);
                inner.grown();
            }
            (None, Some(old)) => {
                inner.map.remove(key);
                inner.entries -= old;
            }
            (None, None) => {}
        }
    }

    pub fn insert(&self, key: &str, value: V) {
        self.update(key, |_| Some(value));
    }

    pub fn remove(&self, key: &str) {
        if self.read().map.contains_key(key) {
            self.update(key, |_| None);
        }
    }

    pub fn clear(&self) {
        let mut inner = self.write();
        inner.map = HashMap::new();
        inner.entries = 0;
        inner.buckets = 0;
    }

    /// Up to `most` keys whose value satisfies `keep`, the smallest first:
    /// which keys and in what order never depend on the map's random
    /// hashing (a simulated run must replay its requests byte for byte).
    pub fn keys_where(&self, most: usize, keep: impl Fn(&V) -> bool) -> Vec<String> {
        let mut keys: Vec<String> = self
            .read()
            .map
            .iter()
            .filter(|(_, v)| keep(v))
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort_unstable();
        keys.truncate(most);
        keys
    }

    /// Entries and bytes held (everything counted), for metrics.
    pub fn size(&self) -> (usize, u64) {
        let inner = self.read();
        (inner.map.len(), inner.bytes())
    }
}

/// Drops every other entry (the odd one too). The table keeps its size (it would grow back
/// at once) unless a quarter of it or less is in use.
fn halve<V: HeapSize>(inner: &mut Inner<V>) {
    // The first goes, so that one entry alone goes too.
    let mut keep = true;
    let mut freed = 0;
    inner.map.retain(|key, value| {
        keep = !keep;
        if !keep {
            freed += entry_cost(key, value);
        }
        keep
    });
    inner.entries -= freed;
    if inner.map.len() <= capacity_of(inner.buckets) / 4 {
        inner.shrink();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl HeapSize for i32 {
        fn heap_bytes(&self) -> u64 {
            0
        }
    }

    impl HeapSize for String {
        fn heap_bytes(&self) -> u64 {
            allocated(self.capacity())
        }
    }

    #[test]
    fn allocations_are_counted_at_mimallocs_size_classes() {
        assert_eq!(allocated(0), 0);
        assert_eq!(allocated(1), 8);
        assert_eq!(allocated(64), 64);
        assert_eq!(allocated(65), 80);
        assert_eq!(allocated(900), 1024);
        assert_eq!(allocated(1025), 1280);
        assert_eq!(allocated(32_767), 32_768);
        assert_eq!(allocated(200_000), 200_704);
        for n in 1..100_000 {
            let a = allocated(n);
            assert!(
                a >= n as u64 && a <= n as u64 + n as u64 / 4 + 8,
                "{n}: {a}"
            );
        }
    }

    #[test]
    fn the_bytes_stay_under_the_bound_with_the_table_counted() {
        let map = BoundedMap::new(100_000);
        for i in 0..1_000 {
            map.insert(&format!("{i:0>1000}"), i);
            assert!(map.size().1 <= 100_000, "{:?}", map.size());
        }
        let (entries, bytes) = map.size();
        assert!(bytes <= 100_000, "{bytes}");
        // 1000-byte names take 1024 bytes each, plus a 32-byte slot (and
        // some) in the table.
        assert!(entries > 10 && entries < 100_000 / 1024, "{entries}");
        assert_eq!(
            map.get(&format!("{:0>1000}", 999)),
            Some(999),
            "the newest stays"
        );
        map.insert("too-long", 1);
        let huge = "x".repeat(200_000);
        map.insert(&huge, 2);
        assert_eq!(map.get(&huge), None, "a key over the bound is not kept");
        assert!(map.size().1 <= 100_000);
    }

    #[test]
    fn a_table_grown_by_short_keys_still_counts_against_long_ones() {
        let map = BoundedMap::new(200_000);
        for i in 0..20_000 {
            map.insert(&i.to_string(), 0);
        }
        let (short, after_short) = map.size();
        assert!(
            after_short <= 200_000 && short > 500,
            "{short} {after_short}"
        );
        for i in 0..1_000 {
            map.insert(&format!("{i:0>4000}"), 0);
            assert!(map.size().1 <= 200_000, "{:?}", map.size());
        }
    }

    /// The buckets followed are std's: a table grown from empty has the
    /// buckets hashbrown gives its capacity, removals or not.
    #[test]
    fn the_buckets_followed_are_the_tables() {
        let map = BoundedMap::new(1 << 30);
        for i in 0..20_000 {
            map.insert(&i.to_string(), 0);
            let inner = map.read();
            assert_eq!(inner.buckets, buckets_for(inner.map.capacity()), "{i}");
        }
        map.clear();
        for i in 0..50_000 {
            map.insert(&i.to_string(), 0);
            if i % 3 == 0 {
                map.remove(&(i / 2).to_string());
            }
            let inner = map.read();
            assert!(inner.map.capacity() <= capacity_of(inner.buckets), "{i}");
            assert!(inner.map.len() <= inner.map.capacity());
        }
        let inner = map.read();
        let mut fresh: HashMap<String, i32> = HashMap::new();
        for (k, v) in &inner.map {
            fresh.insert(k.clone(), *v);
        }
        assert!(buckets_for(fresh.capacity()) <= inner.buckets);
    }

    #[test]
    fn a_value_that_grows_is_counted() {
        let map = BoundedMap::new(10_000);
        map.insert("a", String::new());
        let before = map.size().1;
        map.update("a", |_| Some("x".repeat(1000)));
        assert_eq!(map.size().1, before + 1024);
        map.update("a", |_| Some("x".repeat(20_000)));
        assert_eq!(map.get("a"), None, "over the bound: dropped");
        assert!(map.size().1 <= 10_000);
    }

    #[test]
    fn update_insert_remove_and_clear_keep_the_count_right() {
        let map = BoundedMap::new(10_000);
        map.update("a", |v| Some(v.copied().unwrap_or(0) + 1));
        map.update("a", |v| Some(v.copied().unwrap_or(0) + 1));
        assert_eq!(map.get("a"), Some(2));
        let (n, bytes) = map.size();
        assert_eq!(n, 1);
        assert_eq!(bytes, 8 + table_bytes::<i32>(4));
        map.remove("a");
        map.remove("nothing");
        assert_eq!(map.read().entries, 0);
        map.insert("b", 1);
        map.clear();
        assert_eq!((map.get("b"), map.size()), (None, (0, 0)));
    }
}
