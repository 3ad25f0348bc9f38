//! One partition of the coordination topic as the model keeps it: the log
//! every replica copies a prefix of, its transactions, and what a
//! read_committed reader may see of a prefix (Kafka's `UnifiedLog`:
//! `lastStableOffset`, `collectAbortedTransactions`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// What one offset holds (one record, in a batch of its own).
#[derive(Clone, Debug)]
enum Body {
    /// A data record; `txn` is its producer's pair when written in a
    /// transaction.
    Data {
        key: Bytes,
        value: Option<Bytes>,
        txn: Option<(i64, i16)>,
    },
    /// A transaction's end: a COMMIT or ABORT control record.
    Marker { pid: i64, epoch: i16, commit: bool },
}

#[derive(Clone, Debug)]
struct Entry {
    body: Body,
    /// The role the record is of (markers: the transaction's role).
    role: String,
    /// Removed by compaction: a gap in the offsets.
    removed: bool,
    /// When it was appended: its timestamp, as the broker stamps it
    /// (`message.timestamp.type=LogAppendTime`).
    appended: Duration,
}

/// A transaction open in the partition.
#[derive(Clone, Debug)]
pub(crate) struct Open {
    /// The role (transactional id) whose holder writes it.
    pub(crate) role: String,
    /// When it began.
    pub(crate) since: Duration,
    /// The producer epoch it is written under.
    pub(crate) epoch: i16,
}

/// A data record a read_committed reader may see, and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Visible {
    /// Its offset.
    pub offset: i64,
    /// Its role.
    pub role: String,
    /// Its key and value (`None`: a tombstone), as written: what a view or
    /// an event of this offset must say.
    pub key: Bytes,
    pub value: Option<Bytes>,
    /// When the last stable offset first passed it with its transaction
    /// committed (at once for a record outside any transaction).
    pub at: Duration,
}

/// One partition's log.
#[derive(Clone, Debug, Default)]
pub(crate) struct Log {
    entries: Vec<Entry>,
    /// Open transactions by producer id.
    pub(crate) open: BTreeMap<i64, Open>,
    /// Every data record that became visible, in the order it did.
    pub(crate) visible: Vec<Visible>,
    /// Offsets already in `visible`.
    seen: BTreeSet<i64>,
}

/// What a read of a prefix returns.
#[derive(Debug)]
pub(crate) struct Read {
    pub(crate) records: Option<Bytes>,
    pub(crate) high_watermark: i64,
    pub(crate) last_stable_offset: i64,
    /// `(producer id, first offset)` of the aborted transactions the read
    /// overlaps.
    pub(crate) aborted: Vec<(i64, i64)>,
}

impl Log {
    /// The log end offset.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// A record written outside any transaction; its offset.
    pub(crate) fn append(
        &mut self,
        role: &str,
        key: Bytes,
        value: Option<Bytes>,
        now: Duration,
    ) -> i64 {
        self.push(
            role,
            Body::Data {
                key,
                value,
                txn: None,
            },
            now,
        )
    }

    /// A record of the transaction of `pair` (opened by its first record,
    /// as AddPartitionsToTxn then Produce do); its offset.
    pub(crate) fn append_txn(
        &mut self,
        role: &str,
        pair: (i64, i16),
        key: Bytes,
        value: Option<Bytes>,
        now: Duration,
    ) -> i64 {
        self.open.entry(pair.0).or_insert_with(|| Open {
            role: role.to_owned(),
            since: now,
            epoch: pair.1,
        });
        self.push(
            role,
            Body::Data {
                key,
                value,
                txn: Some(pair),
            },
            now,
        )
    }

    /// Ends the open transaction of producer `pid` with a marker written at
    /// `epoch` (the coordinator's, which a timeout abort bumps); its offset,
    /// `None` when none is open.
    pub(crate) fn end(&mut self, pid: i64, epoch: i16, commit: bool, now: Duration) -> Option<i64> {
        let open = self.open.remove(&pid)?;
        Some(self.push(&open.role, Body::Marker { pid, epoch, commit }, now))
    }

    fn push(&mut self, role: &str, body: Body, now: Duration) -> i64 {
        self.entries.push(Entry {
            body,
            role: role.to_owned(),
            removed: false,
            appended: now,
        });
        self.entries.len() as i64 - 1
    }

    /// The transactions of `entries[..len]`: for each data record of a
    /// transaction, whether it ended (`Some(commit)`) within the prefix.
    fn outcomes(&self, len: usize) -> BTreeMap<i64, Option<bool>> {
        // Per producer, the data offsets of its current transaction.
        let mut current: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        let mut outcome = BTreeMap::new();
        for (offset, entry) in self.entries[..len].iter().enumerate() {
            match &entry.body {
                Body::Data {
                    txn: Some((pid, _)),
                    ..
                } => {
                    current.entry(*pid).or_default().push(offset as i64);
                }
                Body::Marker { pid, commit, .. } => {
                    for o in current.remove(pid).unwrap_or_default() {
                        outcome.insert(o, Some(*commit));
                    }
                }
                Body::Data { .. } => {}
            }
        }
        for o in current.into_values().flatten() {
            outcome.insert(o, None);
        }
        outcome
    }

    /// The last stable offset of `entries[..len]`: the first offset of the
    /// earliest transaction still open there, else the end.
    pub(crate) fn last_stable_offset(&self, len: usize) -> i64 {
        self.outcomes(len)
            .into_iter()
            .find(|(_, outcome)| outcome.is_none())
            .map_or(len as i64, |(offset, _)| offset)
    }

    /// Takes in what became visible (the whole log's last stable offset
    /// passed it, its transaction committed) at `now`.
    pub(crate) fn refresh_visible(&mut self, now: Duration) {
        let len = self.entries.len();
        let stable = self.last_stable_offset(len);
        let outcomes = self.outcomes(len);
        for (offset, entry) in self.entries[..stable as usize].iter().enumerate() {
            let offset = offset as i64;
            if self.seen.contains(&offset) {
                continue;
            }
            let shown = match &entry.body {
                Body::Data {
                    txn: None,
                    key,
                    value,
                } => Some((key, value)),
                Body::Data {
                    txn: Some(_),
                    key,
                    value,
                } => (outcomes.get(&offset) == Some(&Some(true))).then_some((key, value)),
                Body::Marker { .. } => None,
            };
            // Aborted records and markers are never visible; they need not
            // be looked at again either.
            self.seen.insert(offset);
            if let Some((key, value)) = shown {
                self.visible.push(Visible {
                    offset,
                    role: entry.role.clone(),
                    key: key.clone(),
                    value: value.clone(),
                    at: now,
                });
            }
        }
    }

    /// A read_committed read of the prefix `entries[..len]` (a replica's
    /// copy) from `from`: every batch below the prefix's last stable
    /// offset, and the aborted transactions they overlap.
    pub(crate) fn read(&self, len: usize, from: i64) -> Read {
        let stable = self.last_stable_offset(len);
        let mut out = BytesMut::new();
        let mut aborted = Vec::new();
        // Aborted transactions (producer, first offset) overlapping
        // [from, stable): Kafka's `collectAbortedTransactions`.
        let mut firsts: BTreeMap<i64, i64> = BTreeMap::new();
        for (offset, entry) in self.entries[..len].iter().enumerate() {
            let offset = offset as i64;
            match &entry.body {
                Body::Data {
                    txn: Some((pid, _)),
                    ..
                } => {
                    firsts.entry(*pid).or_insert(offset);
                }
                Body::Marker { pid, commit, .. } => {
                    let first = firsts.remove(pid);
                    if let Some(first) = first
                        && !commit
                        && offset >= from
                        && first < stable
                    {
                        aborted.push((*pid, first));
                    }
                }
                Body::Data { .. } => {}
            }
        }
        let start = usize::try_from(from.max(0)).unwrap_or(usize::MAX);
        for (offset, entry) in self.entries[..len].iter().enumerate() {
            let offset_i = offset as i64;
            if offset < start || offset_i >= stable || entry.removed {
                continue;
            }
            out.extend_from_slice(&batch(offset_i, &entry.body));
        }
        Read {
            records: (!out.is_empty()).then(|| out.freeze()),
            high_watermark: len as i64,
            last_stable_offset: stable,
            aborted,
        }
    }

    /// Whether a read_committed reader of `entries[..len]` at `from` gets
    /// anything (a long poll answers then).
    pub(crate) fn has_data(&self, len: usize, from: i64) -> bool {
        self.last_stable_offset(len) > from
    }

    /// Compaction below the last stable offset: a data record whose key a
    /// later visible record of the partition has again is removed once it
    /// was appended `min_lag` ago (`min.compaction.lag.ms`: Kafka counts it
    /// from the largest timestamp of the record's segment, never earlier
    /// than the record's own; not from when a transaction's commit made it
    /// visible, which may be later), and so is every record of an aborted
    /// transaction (Kafka's `LogCleaner`; markers stay, as they do for
    /// `delete.retention.ms`).
    pub(crate) fn compact(&mut self, now: Duration, min_lag: Duration) {
        let len = self.entries.len();
        let stable = self.last_stable_offset(len) as usize;
        let outcomes = self.outcomes(len);
        let mut latest: BTreeMap<Bytes, usize> = BTreeMap::new();
        for (offset, entry) in self.entries[..stable].iter().enumerate() {
            if let Body::Data { key, txn, .. } = &entry.body {
                let committed =
                    txn.is_none() || outcomes.get(&(offset as i64)) == Some(&Some(true));
                if committed {
                    latest.insert(key.clone(), offset);
                }
            }
        }
        for (offset, entry) in self.entries[..stable].iter_mut().enumerate() {
            if let Body::Data { key, txn, .. } = &entry.body {
                let aborted = txn.is_some() && outcomes.get(&(offset as i64)) == Some(&Some(false));
                let superseded = latest.get(key).is_some_and(|&last| last > offset);
                let old_enough = entry.appended + min_lag <= now;
                if aborted || (superseded && old_enough) {
                    entry.removed = true;
                }
            }
        }
    }
}

/// One entry as a record batch of its own, at `offset`.
fn batch(offset: i64, body: &Body) -> Bytes {
    let (key, value, producer, transactional, control) = match body {
        Body::Data { key, value, txn } => (key.clone(), value.clone(), *txn, txn.is_some(), false),
        Body::Marker { pid, epoch, commit } => (
            // The control record's key: version 0, type 0 ABORT or 1 COMMIT;
            // its value: version 0 and the coordinator's epoch.
            Bytes::from(vec![0, 0, 0, u8::from(*commit)]),
            Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
            Some((*pid, *epoch)),
            true,
            true,
        ),
    };
    let record = Record {
        transactional,
        control,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: producer.map_or(-1, |p| p.0),
        producer_epoch: producer.map_or(-1, |p| p.1),
        timestamp_type: TimestampType::Creation,
        offset,
        sequence: if producer.is_some() { 0 } else { -1 },
        timestamp: 0,
        key: Some(key),
        value,
        headers: Default::default(),
    };
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    #[allow(clippy::expect_used)]
    RecordBatchEncoder::encode(&mut buf, [&record], &options).expect("a record batch encodes");
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Bytes {
        Bytes::from(k.to_owned())
    }

    #[test]
    fn the_last_stable_offset_waits_for_the_earliest_open_transaction() {
        let now = Duration::ZERO;
        let mut log = Log::default();
        log.append("r", key("a"), None, now); // 0
        log.append_txn("r", (7, 0), key("b"), None, now); // 1, open
        log.append("s", key("c"), None, now); // 2
        assert_eq!(log.last_stable_offset(log.len()), 1);
        log.refresh_visible(now);
        assert_eq!(
            log.visible.iter().map(|v| v.offset).collect::<Vec<_>>(),
            [0]
        );
        log.end(7, 0, true, now); // 3
        assert_eq!(log.last_stable_offset(log.len()), 4);
        log.refresh_visible(Duration::from_secs(1));
        let seen: Vec<_> = log
            .visible
            .iter()
            .map(|v| (v.offset, v.at.as_secs()))
            .collect();
        assert_eq!(seen, [(0, 0), (1, 1), (2, 1)]);
        // A replica with the prefix before the marker still waits.
        assert_eq!(log.last_stable_offset(3), 1);
    }

    #[test]
    fn aborted_records_are_listed_and_never_visible_and_compaction_keeps_the_latest() {
        let now = Duration::ZERO;
        let mut log = Log::default();
        log.append_txn("r", (7, 0), key("k"), Some(key("1")), now); // 0
        log.end(7, 1, false, now); // 1 ABORT
        log.append("r", key("k"), Some(key("2")), now); // 2
        log.append("r", key("k"), Some(key("3")), now); // 3
        log.refresh_visible(now);
        assert_eq!(
            log.visible.iter().map(|v| v.offset).collect::<Vec<_>>(),
            [2, 3]
        );
        let read = log.read(log.len(), 0);
        assert_eq!(read.aborted, [(7, 0)]);
        assert_eq!(read.last_stable_offset, 4);
        log.compact(Duration::ZERO, Duration::ZERO);
        let kept: Vec<bool> = log.entries.iter().map(|e| e.removed).collect();
        assert_eq!(kept, [true, false, true, false]);
    }

    #[test]
    fn compaction_keeps_a_superseded_record_until_the_lag_passed() {
        let secs = Duration::from_secs;
        let mut log = Log::default();
        log.append("r", key("k"), Some(key("1")), secs(1)); // 0
        log.append("r", key("k"), Some(key("2")), secs(5)); // 1
        log.refresh_visible(secs(5));
        log.compact(secs(10), secs(10));
        assert!(
            !log.entries[0].removed,
            "appended 9 s before, of a 10 s lag"
        );
        log.compact(secs(11), secs(10));
        assert!(log.entries[0].removed);
        assert!(!log.entries[1].removed, "the latest of its key stays");
    }

    #[test]
    fn the_lag_counts_from_the_append_not_from_the_commit() {
        let secs = Duration::from_secs;
        let mut log = Log::default();
        // Written at 1 s in a transaction committed at 8 s: visible from 8 s,
        // its timestamp (the segment's, at most) still 1 s.
        log.append_txn("r", (7, 0), key("k"), Some(key("1")), secs(1)); // 0
        log.end(7, 0, true, secs(8)); // 1
        log.refresh_visible(secs(8));
        log.append("r", key("k"), Some(key("2")), secs(9)); // 2
        log.refresh_visible(secs(9));
        assert_eq!(log.visible[0].at, secs(8));
        log.compact(secs(11), secs(10));
        assert!(log.entries[0].removed, "3 s after it became visible");
    }
}
