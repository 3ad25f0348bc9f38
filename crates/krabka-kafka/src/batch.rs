//! Record batches as a read_committed consumer must see them.
//!
//! The broker returns batches of aborted transactions below the last stable
//! offset together with an `aborted_transactions` list; dropping them is the
//! client's job. This follows Kafka's Java `CompletedFetch`: a min-heap of
//! aborted ranges by first offset, a set of producers whose open range is
//! aborted, an ABORT marker that closes a producer's range, and control
//! batches that are never records.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use bytes::{Buf, Bytes};
use kafka_protocol::records::RecordBatchDecoder;

use krabka_coordination::LogRecord;

/// Bytes of a batch header before the records: base offset (8), length (4),
/// leader epoch (4), magic (1), crc (4), attributes (2), last offset delta
/// (4), timestamps (16), producer id (8), epoch (2), base sequence (4),
/// record count (4).
const HEADER_LEN: usize = 61;
const ATTR_TRANSACTIONAL: i16 = 1 << 4;
const ATTR_CONTROL: i16 = 1 << 5;

/// What one fetched chunk of a partition holds for a committed reader.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Visible {
    /// Data records at or above the fetch offset, in offset order.
    pub(crate) records: Vec<LogRecord>,
    /// The offset after the last whole batch, if any batch was whole.
    pub(crate) next_offset: Option<i64>,
}

fn read_i16(b: &[u8], at: usize) -> i16 {
    (&b[at..at + 2]).get_i16()
}

fn read_i32(b: &[u8], at: usize) -> i32 {
    (&b[at..at + 4]).get_i32()
}

fn read_i64(b: &[u8], at: usize) -> i64 {
    (&b[at..at + 8]).get_i64()
}

/// Splits `bytes` into batches and keeps what a read_committed reader sees.
/// `aborted` is the response's `(producer id, first offset)` list. A partial
/// batch at the end (the broker cuts at `max_bytes`) is left for the next
/// fetch.
pub(crate) fn visible_records(
    bytes: &Bytes,
    aborted: &[(i64, i64)],
    fetch_offset: i64,
) -> Result<Visible, String> {
    let mut heap: BinaryHeap<Reverse<(i64, i64)>> = aborted
        .iter()
        .map(|&(producer, first)| Reverse((first, producer)))
        .collect();
    let mut aborted_producers: HashSet<i64> = HashSet::new();
    let mut out = Visible::default();
    let mut pos = 0usize;
    while bytes.len() - pos >= 12 {
        let base_offset = read_i64(bytes, pos);
        let length = read_i32(bytes, pos + 8);
        let total = 12usize.saturating_add(usize::try_from(length).unwrap_or(0));
        if length < 0 || total < HEADER_LEN {
            return Err(format!(
                "batch at offset {base_offset} has an invalid length {length}"
            ));
        }
        if bytes.len() - pos < total {
            break;
        }
        let batch = bytes.slice(pos..pos + total);
        pos += total;
        let magic = batch[16] as i8;
        if magic != 2 {
            return Err(format!(
                "batch at offset {base_offset} uses message format v{magic}; only v2 is supported"
            ));
        }
        let attributes = read_i16(&batch, 21);
        let last_offset = base_offset + i64::from(read_i32(&batch, 23));
        let producer_id = read_i64(&batch, 43);
        out.next_offset = Some(last_offset + 1);
        if last_offset < fetch_offset {
            continue;
        }
        let transactional = attributes & ATTR_TRANSACTIONAL != 0;
        let control = attributes & ATTR_CONTROL != 0;

        let records = || {
            RecordBatchDecoder::decode(&mut batch.clone())
                .map(|set| set.records)
                .map_err(|e| format!("batch at offset {base_offset}: {e:#}"))
        };

        if producer_id >= 0 {
            while let Some(Reverse((first, producer))) = heap.peek().copied() {
                if first > last_offset {
                    break;
                }
                heap.pop();
                aborted_producers.insert(producer);
            }
            if control {
                // Control record key: version (i16), type (i16); 0 = ABORT.
                let is_abort = records()?.first().is_some_and(|r| {
                    r.key
                        .as_ref()
                        .is_some_and(|k| k.len() >= 4 && read_i16(k, 2) == 0)
                });
                if is_abort {
                    aborted_producers.remove(&producer_id);
                }
                continue;
            }
            if transactional && aborted_producers.contains(&producer_id) {
                continue;
            }
        }
        if control {
            continue;
        }
        for record in records()? {
            if record.offset >= fetch_offset {
                out.records.push(LogRecord {
                    offset: record.offset,
                    key: record.key.unwrap_or_default(),
                    value: record.value,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    /// One encoded batch; `control` with `abort` picks the marker type.
    pub(crate) fn batch(
        base: i64,
        count: i64,
        producer: i64,
        transactional: bool,
        control: Option<bool>,
        compression: Compression,
    ) -> Bytes {
        let records: Vec<Record> = (0..count)
            .map(|i| Record {
                transactional,
                control: control.is_some(),
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: producer,
                producer_epoch: if producer >= 0 { 0 } else { -1 },
                timestamp_type: TimestampType::Creation,
                offset: base + i,
                sequence: if producer >= 0 { i as i32 } else { -1 },
                timestamp: 0,
                key: Some(match control {
                    Some(abort) => Bytes::from(vec![0, 0, 0, if abort { 0 } else { 1 }]),
                    None => Bytes::from(format!("k{}", base + i)),
                }),
                value: Some(Bytes::from(format!("v{}", base + i))),
                headers: Default::default(),
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .expect("encodes");
        buf.freeze()
    }

    fn join(parts: &[Bytes]) -> Bytes {
        let mut all = BytesMut::new();
        for p in parts {
            all.extend_from_slice(p);
        }
        all.freeze()
    }

    fn offsets(v: &Visible) -> Vec<i64> {
        v.records.iter().map(|r| r.offset).collect()
    }

    #[test]
    fn aborted_transactions_and_control_batches_are_dropped() {
        let none = Compression::None;
        let bytes = join(&[
            batch(0, 2, -1, false, None, none),      // plain: 0, 1
            batch(2, 1, 7, true, None, none),        // txn 7: aborted
            batch(3, 1, 8, true, None, none),        // txn 8: committed
            batch(4, 1, 7, true, Some(true), none),  // ABORT marker of 7
            batch(5, 1, 8, true, Some(false), none), // COMMIT marker of 8
            batch(6, 1, 7, true, None, none),        // txn 7 again: committed
            batch(7, 1, 7, true, Some(false), none), // COMMIT of 7
        ]);
        let v = visible_records(&bytes, &[(7, 2)], 0).unwrap();
        assert_eq!(offsets(&v), [0, 1, 3, 6]);
        assert_eq!(v.next_offset, Some(8));
        assert_eq!(&v.records[2].key[..], b"k3");
        assert_eq!(v.records[2].value.as_deref(), Some(&b"v3"[..]));
    }

    #[test]
    fn without_the_aborted_list_every_data_batch_is_visible() {
        let none = Compression::None;
        let bytes = join(&[
            batch(0, 1, 7, true, None, none),
            batch(1, 1, 7, true, Some(true), none),
        ]);
        assert_eq!(offsets(&visible_records(&bytes, &[], 0).unwrap()), [0]);
        assert!(
            visible_records(&bytes, &[(7, 0)], 0)
                .unwrap()
                .records
                .is_empty()
        );
    }

    #[test]
    fn records_below_the_fetch_offset_are_skipped() {
        let bytes = batch(10, 5, -1, false, None, Compression::None);
        let v = visible_records(&bytes, &[], 12).unwrap();
        assert_eq!(offsets(&v), [12, 13, 14]);
        assert_eq!(v.next_offset, Some(15));
    }

    #[test]
    fn a_partial_trailing_batch_waits_for_the_next_fetch() {
        let first = batch(0, 1, -1, false, None, Compression::None);
        let second = batch(1, 1, -1, false, None, Compression::None);
        let cut = join(&[first, second.slice(..second.len() - 3)]);
        let v = visible_records(&cut, &[], 0).unwrap();
        assert_eq!(offsets(&v), [0]);
        assert_eq!(v.next_offset, Some(1));
        let tiny = Bytes::from_static(&[0, 0, 0]);
        assert_eq!(visible_records(&tiny, &[], 0).unwrap(), Visible::default());
    }

    #[test]
    fn compressed_batches_are_read() {
        let bytes = join(&[
            batch(0, 3, -1, false, None, Compression::Snappy),
            batch(3, 2, -1, false, None, Compression::Zstd),
            batch(5, 2, -1, false, None, Compression::Lz4),
            batch(7, 2, -1, false, None, Compression::Gzip),
        ]);
        let v = visible_records(&bytes, &[], 0).unwrap();
        assert_eq!(offsets(&v), (0..9).collect::<Vec<_>>());
    }

    #[test]
    fn corrupt_batches_are_errors_not_panics() {
        let mut bytes = batch(0, 1, -1, false, None, Compression::None).to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff; // breaks the CRC
        assert!(visible_records(&Bytes::from(bytes.clone()), &[], 0).is_err());
        bytes[16] = 1; // message format v1
        let err = visible_records(&Bytes::from(bytes.clone()), &[], 0).unwrap_err();
        assert!(err.contains("v1"), "{err}");
        bytes[8..12].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(visible_records(&Bytes::from(bytes), &[], 0).is_err());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = visible_records(&Bytes::from(data), &[(1, 0)], 0);
        }
    }
}
