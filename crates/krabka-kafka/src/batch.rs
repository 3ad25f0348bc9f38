//! Record batches as a read_committed consumer must see them.
//!
//! The broker returns batches of aborted transactions below the last stable
//! offset together with an `aborted_transactions` list; dropping them is the
//! client's job. This follows Kafka's Java `CompletedFetch`: a min-heap of
//! aborted ranges by first offset, a set of producers whose open range is
//! aborted, an ABORT marker that closes a producer's range, and control
//! batches that are never records.
//!
//! Compressed records are decompressed with a bound (`inflate`): a batch
//! that decompresses to more than `limit` bytes is stepped over, its
//! records unread, and reported ([`SkippedBatch`]); the read goes on after
//! it. One chunk keeps the records of little more than `limit` decompressed
//! bytes (a fetch of many batches each just under the bound would
//! otherwise hold them all) and steps over at most [`SKIPPED_PER_CHUNK`]
//! batches past it (each costs decompressing `limit` bytes; a fetch of
//! thousands of small bombs would otherwise hold the thread for seconds):
//! past either, the rest waits for the next fetch. A chunk reads at least
//! one batch, so every fetch moves on.
//!
//! Decoded, a record takes more memory than its bytes: a record of no key,
//! no value and no header is 7 bytes, a [`LogRecord`] 72 (kafka-protocol's
//! `Record`, with its headers' map, takes more again). So records are
//! decoded here, straight into [`LogRecord`]s (headers stepped over,
//! nothing allocated for them, nothing reserved for what a batch declares),
//! and a chunk keeps at most `room` bytes of them: past that it stops, in
//! the middle of a batch if need be, and the next fetch goes on from the
//! record after the last one kept (as Java's consumer resumes within a
//! batch; the broker sends the batch again, and the records before the
//! fetch offset are stepped over, not kept).

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use bytes::{Buf, Bytes};
use kafka_protocol::records::{Compression, RecordBatchDecoder};

use super::inflate::{Inflate, codec_name, codec_of, inflate};
use krabka_coordination::{LogRecord, SkippedBatch};

/// Bytes of a batch header before the records: base offset (8), length (4),
/// leader epoch (4), magic (1), crc (4), attributes (2), last offset delta
/// (4), timestamps (16), producer id (8), epoch (2), base sequence (4),
/// record count (4).
const HEADER_LEN: usize = 61;
const ATTR_TRANSACTIONAL: i16 = 1 << 4;
/// Most batches past the bound one chunk steps over.
const SKIPPED_PER_CHUNK: usize = 64;
const ATTR_CONTROL: i16 = 1 << 5;

/// What one fetched chunk of a partition holds for a committed reader.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Visible {
    /// Data records at or above the fetch offset, in offset order.
    pub(crate) records: Vec<LogRecord>,
    /// The offset after the last whole batch read, if any was.
    pub(crate) next_offset: Option<i64>,
    /// The batches stepped over, their records unread, in offset order.
    pub(crate) skipped: Vec<SkippedBatch>,
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

/// What one decoded record takes of a chunk's `room`: its [`LogRecord`]
/// (its key and value are views of the fetched or decompressed bytes).
pub(crate) const RECORD_BYTES: usize = std::mem::size_of::<LogRecord>();

/// One batch's records, or why they were not read.
enum Decoded {
    /// The records at or above the offset asked, in offset order, and the
    /// offset after the last one kept when the batch holds more (`most`
    /// reached).
    Records(Vec<LogRecord>, Option<i64>),
    /// Compressed, they decompress to more than the bound.
    TooLarge,
}

/// Decodes `batch` (its CRC checked first), decompressing its records with
/// `limit`, adding what it decompressed to `inflated`: its records at or
/// above `from`, at most `most` of them (and at least one).
fn decode(
    batch: &Bytes,
    limit: usize,
    inflated: &Cell<usize>,
    from: i64,
    most: usize,
) -> Result<Decoded, String> {
    // The header, its CRC checked; nothing of the records decoded.
    let info = RecordBatchDecoder::decode_batch_info(&mut batch.clone())
        .map_err(|e| format!("{e:#}"))?
        .into_iter()
        .next()
        .ok_or("no batch header")?;
    let section = batch.slice(HEADER_LEN.min(batch.len())..);
    let mut records = match info.compression {
        Compression::None => section,
        compression => match inflate(compression, &section[..], limit) {
            Ok(out) => {
                inflated.set(inflated.get().saturating_add(out.len()));
                Bytes::from(out)
            }
            Err(Inflate::TooLarge) => return Ok(Decoded::TooLarge),
            Err(Inflate::Corrupt(why)) => return Err(why),
        },
    };
    let declared = usize::try_from(info.record_count).unwrap_or(0);
    // Every record takes at least one byte (Kafka's own decoder refuses
    // the same count, KAFKA-14063); nothing is reserved for it.
    if declared > records.len() {
        return Err(format!(
            "{declared} elements declared, but only {} bytes remain",
            records.len()
        ));
    }
    let last = info
        .min_offset
        .saturating_add(i64::from(read_i32(batch, 23)));
    let most = most.max(1);
    let mut kept = Vec::new();
    for _ in 0..declared {
        if kept.len() == most {
            let next = kept.last().map(|r: &LogRecord| r.offset + 1);
            return Ok(Decoded::Records(kept, next));
        }
        let record = record(&mut records, info.min_offset)?;
        if record.offset > last {
            return Err(format!(
                "a record at offset {} after its batch's last offset {last}",
                record.offset
            ));
        }
        if record.offset >= from {
            kept.push(record);
        }
    }
    Ok(Decoded::Records(kept, None))
}

/// A zigzag varint of at most `max_bytes` bytes (5 for an int, 10 for a
/// long), as Kafka's `ByteUtils.readVarint`/`readVarlong` read it.
fn varint(buf: &mut Bytes, max_bytes: u32) -> Result<i64, String> {
    let mut raw: u64 = 0;
    for i in 0..max_bytes {
        if !buf.has_remaining() {
            return Err("a record ends within a varint".to_owned());
        }
        let byte = buf.get_u8();
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    Err("a varint longer than its type".to_owned())
}

/// A length (-1 for none) and that many bytes of `buf`, as a view.
fn field(buf: &mut Bytes, what: &str) -> Result<Option<Bytes>, String> {
    match varint(buf, 5)? {
        -1 => Ok(None),
        n if n < 0 => Err(format!("a record's {what} has length {n}")),
        n => {
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            if n > buf.len() {
                return Err(format!(
                    "a record's {what} declares {n} bytes, but only {} remain",
                    buf.len()
                ));
            }
            Ok(Some(buf.split_to(n)))
        }
    }
}

/// One record of the format v2 (`DefaultRecord`) from `buf`, of a batch
/// based at `base`: its headers checked and stepped over.
fn record(buf: &mut Bytes, base: i64) -> Result<LogRecord, String> {
    let size = varint(buf, 5)?;
    let size = usize::try_from(size).map_err(|_| format!("a record of size {size}"))?;
    if size > buf.len() {
        return Err(format!(
            "a record declares {size} bytes, but only {} remain",
            buf.len()
        ));
    }
    let mut body = buf.split_to(size);
    if !body.has_remaining() {
        return Err("an empty record".to_owned());
    }
    let _attributes = body.get_u8();
    let _timestamp_delta = varint(&mut body, 10)?;
    let offset_delta = varint(&mut body, 5)?;
    let key = field(&mut body, "key")?;
    let value = field(&mut body, "value")?;
    let headers = varint(&mut body, 5)?;
    if headers < 0 {
        return Err(format!("a record declares {headers} headers"));
    }
    for _ in 0..headers {
        match field(&mut body, "header key")? {
            Some(_) => {}
            None => return Err("a record header without a key".to_owned()),
        }
        field(&mut body, "header value")?;
    }
    Ok(LogRecord {
        offset: base.saturating_add(offset_delta),
        key: key.unwrap_or_default(),
        value,
    })
}

/// Splits `bytes` into batches and keeps what a read_committed reader sees.
/// `aborted` is the response's `(producer id, first offset)` list; `limit`
/// bounds what one batch may decompress to, `room` the bytes the records
/// kept may take ([`RECORD_BYTES`] each). A partial batch at the end
/// (the broker cuts at `max_bytes`) is left for the next fetch, and so is
/// what follows the chunk's share (the module docs).
pub(crate) fn visible_records(
    bytes: &Bytes,
    aborted: &[(i64, i64)],
    fetch_offset: i64,
    limit: usize,
    room: usize,
) -> Result<Visible, String> {
    let mut heap: BinaryHeap<Reverse<(i64, i64)>> = aborted
        .iter()
        .map(|&(producer, first)| Reverse((first, producer)))
        .collect();
    let mut aborted_producers: HashSet<i64> = HashSet::new();
    let mut out = Visible::default();
    let inflated = Cell::new(0usize);
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
        let magic = batch[16] as i8;
        if magic != 2 {
            return Err(format!(
                "batch at offset {base_offset} uses message format v{magic}; only v2 is supported"
            ));
        }
        let attributes = read_i16(&batch, 21);
        let last_offset = base_offset + i64::from(read_i32(&batch, 23));
        let producer_id = read_i64(&batch, 43);
        let transactional = attributes & ATTR_TRANSACTIONAL != 0;
        let control = attributes & ATTR_CONTROL != 0;
        let compressed = codec_of(attributes) != Some(Compression::None);
        let spent = inflated.get() >= limit || out.skipped.len() >= SKIPPED_PER_CHUNK;
        let full = out.records.len().saturating_mul(RECORD_BYTES) >= room;
        if last_offset >= fetch_offset
            && ((compressed && spent) || full)
            && out.next_offset.is_some()
        {
            // This chunk decompressed or decoded its share: the next fetch
            // goes on.
            break;
        }
        pos += total;
        out.next_offset = Some(last_offset + 1);
        if last_offset < fetch_offset {
            continue;
        }

        let records = |from: i64, most: usize| match decode(&batch, limit, &inflated, from, most) {
            Ok(Decoded::Records(records, rest)) => Ok(Some((records, rest))),
            Ok(Decoded::TooLarge) => Ok(None),
            Err(e) => Err(format!("batch at offset {base_offset}: {e}")),
        };
        let skipped = |out: &mut Visible| {
            let compression = codec_of(attributes).map_or("unknown", codec_name);
            out.skipped.push(SkippedBatch {
                base_offset,
                last_offset,
                compression,
                limit_bytes: limit,
            });
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
                let Some((markers, _)) = records(i64::MIN, 1)? else {
                    skipped(&mut out);
                    continue;
                };
                let is_abort = markers
                    .first()
                    .is_some_and(|r| r.key.len() >= 4 && read_i16(&r.key, 2) == 0);
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
        let most =
            room.saturating_sub(out.records.len().saturating_mul(RECORD_BYTES)) / RECORD_BYTES;
        let Some((records, rest)) = records(fetch_offset, most)? else {
            skipped(&mut out);
            continue;
        };
        out.records.extend(records);
        if rest.is_some() {
            // The chunk is full within this batch: the next fetch reads on
            // from the record after the last one kept.
            out.next_offset = rest;
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::records::{Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

    use crate::fake::bomb_batch;

    /// A bound well above what these tests' batches decompress to.
    const LIMIT: usize = 1 << 20;

    /// The records of a chunk with room for all of them.
    fn visible(
        bytes: &Bytes,
        aborted: &[(i64, i64)],
        fetch_offset: i64,
        limit: usize,
    ) -> Result<Visible, String> {
        visible_records(bytes, aborted, fetch_offset, limit, usize::MAX)
    }

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
        let v = visible(&bytes, &[(7, 2)], 0, LIMIT).unwrap();
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
        assert_eq!(offsets(&visible(&bytes, &[], 0, LIMIT).unwrap()), [0]);
        assert!(
            visible(&bytes, &[(7, 0)], 0, LIMIT)
                .unwrap()
                .records
                .is_empty()
        );
    }

    #[test]
    fn records_below_the_fetch_offset_are_skipped() {
        let bytes = batch(10, 5, -1, false, None, Compression::None);
        let v = visible(&bytes, &[], 12, LIMIT).unwrap();
        assert_eq!(offsets(&v), [12, 13, 14]);
        assert_eq!(v.next_offset, Some(15));
    }

    #[test]
    fn a_partial_trailing_batch_waits_for_the_next_fetch() {
        let first = batch(0, 1, -1, false, None, Compression::None);
        let second = batch(1, 1, -1, false, None, Compression::None);
        let cut = join(&[first, second.slice(..second.len() - 3)]);
        let v = visible(&cut, &[], 0, LIMIT).unwrap();
        assert_eq!(offsets(&v), [0]);
        assert_eq!(v.next_offset, Some(1));
        let tiny = Bytes::from_static(&[0, 0, 0]);
        assert_eq!(visible(&tiny, &[], 0, LIMIT).unwrap(), Visible::default());
    }

    #[test]
    fn compressed_batches_are_read() {
        let bytes = join(&[
            batch(0, 3, -1, false, None, Compression::Snappy),
            batch(3, 2, -1, false, None, Compression::Zstd),
            batch(5, 2, -1, false, None, Compression::Lz4),
            batch(7, 2, -1, false, None, Compression::Gzip),
        ]);
        let v = visible(&bytes, &[], 0, LIMIT).unwrap();
        assert_eq!(offsets(&v), (0..9).collect::<Vec<_>>());
    }

    #[test]
    fn corrupt_batches_are_errors_not_panics() {
        let mut bytes = batch(0, 1, -1, false, None, Compression::None).to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff; // breaks the CRC
        assert!(visible(&Bytes::from(bytes.clone()), &[], 0, LIMIT).is_err());
        bytes[16] = 1; // message format v1
        let err = visible(&Bytes::from(bytes.clone()), &[], 0, LIMIT).unwrap_err();
        assert!(err.contains("v1"), "{err}");
        bytes[8..12].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(visible(&Bytes::from(bytes), &[], 0, LIMIT).is_err());
    }

    const CODECS: [Compression; 4] = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// `batch` moved to `base`, its CRC unchanged (the base offset is
    /// outside what the CRC covers).
    fn at(base: i64, batch: Bytes) -> Bytes {
        let mut moved = batch.to_vec();
        moved[..8].copy_from_slice(&base.to_be_bytes());
        Bytes::from(moved)
    }

    #[test]
    fn a_batch_that_decompresses_past_the_bound_is_skipped_and_reading_goes_on() {
        for codec in CODECS {
            let name = crate::inflate::codec_name(codec);
            let bytes = join(&[
                batch(0, 2, -1, false, None, Compression::None),
                at(2, bomb_batch(codec, b"k2", 2 * LIMIT as u64)),
                batch(3, 1, -1, false, None, codec),
            ]);
            let v = visible(&bytes, &[], 0, LIMIT).unwrap();
            assert_eq!(offsets(&v), [0, 1, 3], "{name}");
            assert_eq!(v.next_offset, Some(4), "{name}: past the skipped batch");
            let skipped = SkippedBatch {
                base_offset: 2,
                last_offset: 2,
                compression: name,
                limit_bytes: LIMIT,
            };
            assert_eq!(v.skipped, [skipped], "{name}");
            // Under a bound it fits, the same batch is read.
            let v = visible(&bytes, &[], 0, 3 * LIMIT).unwrap();
            assert_eq!(offsets(&v), [0, 1, 2, 3], "{name}");
            assert_eq!(v.records[2].value.as_ref().unwrap().len(), 2 * LIMIT);
            assert!(v.skipped.is_empty(), "{name}");
        }
    }

    #[test]
    fn a_chunk_decompresses_about_the_bound_and_leaves_the_rest_for_the_next_fetch() {
        // Four batches of 0.4 of the bound each: after three (1.2 of it),
        // the fourth waits; a batch without compression does not count.
        let part = (LIMIT as u64) * 4 / 10;
        let bytes = join(&[
            bomb_batch(Compression::Zstd, b"a", part),
            at(1, bomb_batch(Compression::Lz4, b"b", part)),
            batch(2, 1, -1, false, None, Compression::None),
            at(3, bomb_batch(Compression::Gzip, b"c", part)),
            at(4, bomb_batch(Compression::Snappy, b"d", part)),
        ]);
        let first = visible(&bytes, &[], 0, LIMIT).unwrap();
        assert_eq!(offsets(&first), [0, 1, 2, 3]);
        assert_eq!(first.next_offset, Some(4));
        let rest = visible(&bytes, &[], 4, LIMIT).unwrap();
        assert_eq!(offsets(&rest), [4]);
        assert_eq!(rest.next_offset, Some(5));
        // Under a bound of one byte every compressed batch is stepped over
        // (nothing kept, nothing to wait for) and the plain one read.
        let tiny = visible(&bytes, &[], 0, 1).unwrap();
        assert_eq!(offsets(&tiny), [2]);
        assert_eq!((tiny.next_offset, tiny.skipped.len()), (Some(5), 4));
    }

    #[test]
    fn a_chunk_steps_over_a_bounded_number_of_bombs_and_the_next_fetch_goes_on() {
        // 150 small bombs (twice a 64 KiB bound each), then a record.
        let bound = 64 * 1024;
        let bomb = bomb_batch(Compression::Zstd, b"b", 2 * bound as u64);
        let mut parts: Vec<Bytes> = (0..150).map(|i| at(i, bomb.clone())).collect();
        parts.push(batch(150, 1, -1, false, None, Compression::Zstd));
        let bytes = join(&parts);
        let mut from = 0;
        let mut fetches = Vec::new();
        while from < 151 {
            let v = visible(&bytes, &[], from, bound).unwrap();
            fetches.push((v.skipped.len(), offsets(&v)));
            from = v.next_offset.unwrap();
        }
        assert_eq!(
            fetches,
            [(64, vec![]), (64, vec![]), (22, vec![150])],
            "64 a chunk, then the rest"
        );
    }

    #[test]
    fn an_aborted_batch_is_dropped_without_being_decompressed() {
        // Producer 7's transactional batch, aborted: its "zstd" records are
        // not zstd at all, and reading them would fail the chunk.
        let record = Record {
            transactional: true,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: 7,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: 0,
            sequence: 0,
            timestamp: 0,
            key: Some(Bytes::from_static(b"k")),
            value: None,
            headers: Default::default(),
        };
        let garbage = |_: &mut BytesMut, out: &mut BytesMut, _: Compression| {
            out.extend_from_slice(b"not zstd at all");
            Ok(())
        };
        let mut aborted = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::Zstd,
        };
        RecordBatchEncoder::encode_with_custom_compression(
            &mut aborted,
            [&record],
            &options,
            Some(garbage),
        )
        .unwrap();
        let bytes = join(&[
            aborted.freeze(),
            batch(1, 1, 7, true, Some(true), Compression::None),
        ]);
        let v = visible(&bytes, &[(7, 0)], 0, LIMIT).unwrap();
        assert!(v.records.is_empty() && v.skipped.is_empty(), "{v:?}");
        assert_eq!(v.next_offset, Some(2));
        let err = visible(&bytes, &[], 0, LIMIT).unwrap_err();
        assert!(err.contains("zstd"), "read when not aborted: {err}");
    }

    /// `batch` with its record count set to `count`, its CRC made right.
    fn declaring(batch: Bytes, count: i32) -> Bytes {
        let mut forged = batch.to_vec();
        forged[57..61].copy_from_slice(&count.to_be_bytes());
        let crc = crc32c::crc32c(&forged[21..]);
        forged[17..21].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(forged)
    }

    #[test]
    fn a_batch_declaring_more_records_than_it_holds_is_an_error_not_an_allocation() {
        // 2^31 records declared: without the patched kafka-protocol, the
        // test process aborts reserving them (over 300 GiB).
        for codec in [Compression::None, Compression::Zstd] {
            let bytes = declaring(batch(0, 1, -1, false, None, codec), i32::MAX);
            let err = visible(&bytes, &[], 0, LIMIT).unwrap_err();
            assert!(err.contains("2147483647 elements declared"), "{err}");
        }
    }

    #[test]
    fn headers_are_stepped_over_and_a_length_past_the_record_is_an_error() {
        let mut record = Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: 0,
            sequence: -1,
            timestamp: 0,
            key: Some(Bytes::from_static(b"k0")),
            value: None,
            headers: Default::default(),
        };
        for i in 0..50 {
            record.headers.insert(
                format!("h{i}").into(),
                Some(Bytes::from_static(b"header value")),
            );
        }
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut buf, [&record], &options).unwrap();
        let v = visible(&buf.clone().freeze(), &[], 0, LIMIT).unwrap();
        assert_eq!(v.records.len(), 1);
        assert_eq!(
            (&v.records[0].key[..], v.records[0].value.as_ref()),
            (&b"k0"[..], None)
        );
        // The first header's value declares 2^30 bytes: an error, nothing
        // allocated for it.
        let mut forged = buf.to_vec();
        let at = forged
            .windows(3)
            .position(|w| w == b"h0\x18")
            .expect("the first header")
            + 2;
        forged[at..at + 5].copy_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x08]);
        let crc = crc32c::crc32c(&forged[21..]);
        forged[17..21].copy_from_slice(&crc.to_be_bytes());
        let err = visible(&Bytes::from(forged), &[], 0, LIMIT).unwrap_err();
        assert!(err.contains("header value declares"), "{err}");
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = visible(&Bytes::from(data), &[(1, 0)], 0, LIMIT);
        }
    }
}
