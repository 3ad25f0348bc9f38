//! A record batch's records decompressed with a bound.
//!
//! `max.message.bytes` limits a batch as written, compressed: one record of
//! 768 MiB of zeros is a few KiB of zstd. So each codec is read through its
//! streaming decoder and the reading stops as soon as the output passes
//! the bound: a bomb costs the bound, never what it would inflate to.
//! Snappy declares each block's length before its data; a block that would
//! pass the bound is refused on its declaration, before anything is
//! allocated for it.
//!
//! The codecs are Kafka's (`CompressionType`): gzip (RFC 1952, members
//! concatenated as Java's `GZIPInputStream` reads them), snappy in
//! snappy-java's framing (a 16-byte header, then blocks each behind their
//! compressed length; raw snappy without the header, as snappy-java falls
//! back to), LZ4 frames and zstd frames.

use std::io::Read;

use kafka_protocol::records::Compression;

/// Snappy-java's framing: the magic that starts its 16-byte header (then
/// its version and the oldest compatible one, two big-endian i32).
const SNAPPY_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const SNAPPY_HEADER_LEN: usize = 16;

/// Why records could not be decompressed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Inflate {
    /// They decompress to more than the bound: reading stopped there.
    TooLarge,
    /// They are not valid for their codec.
    Corrupt(String),
}

/// The codec a batch's attributes name (their lowest three bits); `None`
/// for a number Kafka does not define.
pub(crate) fn codec_of(attributes: i16) -> Option<Compression> {
    match attributes & 0x7 {
        0 => Some(Compression::None),
        1 => Some(Compression::Gzip),
        2 => Some(Compression::Snappy),
        3 => Some(Compression::Lz4),
        4 => Some(Compression::Zstd),
        _ => None,
    }
}

/// Kafka's name of a codec, as logs, metrics and views show it.
pub(crate) fn codec_name(compression: Compression) -> &'static str {
    match compression {
        Compression::None => "none",
        Compression::Gzip => "gzip",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        Compression::Zstd => "zstd",
    }
}

/// The records of `input`, compressed by `compression`, decompressed;
/// [`Inflate::TooLarge`] as soon as they pass `limit` bytes.
pub(crate) fn inflate(
    compression: Compression,
    input: impl Read,
    limit: usize,
) -> Result<Vec<u8>, Inflate> {
    let corrupt = |e: std::io::Error| Inflate::Corrupt(format!("{}: {e}", codec_name(compression)));
    match compression {
        Compression::None => bounded(input, limit),
        Compression::Gzip => bounded(flate2::read::MultiGzDecoder::new(input), limit),
        Compression::Lz4 => bounded(lz4::Decoder::new(input).map_err(corrupt)?, limit),
        Compression::Zstd => bounded(
            zstd::stream::read::Decoder::new(input).map_err(corrupt)?,
            limit,
        ),
        Compression::Snappy => snappy(input, limit),
    }
    .map_err(|e| match e {
        Inflate::Corrupt(why) if !why.starts_with(codec_name(compression)) => {
            Inflate::Corrupt(format!("{}: {why}", codec_name(compression)))
        }
        other => other,
    })
}

/// Reads `decoder` to its end, or [`Inflate::TooLarge`] once past `limit`
/// bytes: no more than `limit + 1` bytes are ever asked of it.
fn bounded(decoder: impl Read, limit: usize) -> Result<Vec<u8>, Inflate> {
    let mut out = Vec::new();
    let wanted = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    decoder
        .take(wanted)
        .read_to_end(&mut out)
        .map_err(|e| Inflate::Corrupt(e.to_string()))?;
    if out.len() > limit {
        return Err(Inflate::TooLarge);
    }
    Ok(out)
}

/// Snappy-java's framing, or raw snappy when the header is not there.
fn snappy(mut input: impl Read, limit: usize) -> Result<Vec<u8>, Inflate> {
    let corrupt = |e: &dyn std::fmt::Display| Inflate::Corrupt(e.to_string());
    let mut header = Vec::with_capacity(SNAPPY_HEADER_LEN);
    (&mut input)
        .take(SNAPPY_HEADER_LEN as u64)
        .read_to_end(&mut header)
        .map_err(|e| corrupt(&e))?;
    let mut out = Vec::new();
    if header.len() < SNAPPY_HEADER_LEN || !header.starts_with(SNAPPY_MAGIC) {
        // Raw snappy: the whole input is one block (the batch holds it).
        input.read_to_end(&mut header).map_err(|e| corrupt(&e))?;
        snappy_block(&header, &mut out, limit)?;
        return Ok(out);
    }
    loop {
        let mut len = [0u8; 4];
        match input.read(&mut len[..1]).map_err(|e| corrupt(&e))? {
            0 => return Ok(out),
            _ => input.read_exact(&mut len[1..]).map_err(|e| corrupt(&e))?,
        }
        let len = u64::from(u32::from_be_bytes(len));
        // Read as it arrives: the length is declared, the input may be short.
        let mut block = Vec::new();
        (&mut input)
            .take(len)
            .read_to_end(&mut block)
            .map_err(|e| corrupt(&e))?;
        if block.len() as u64 != len {
            return Err(Inflate::Corrupt(format!(
                "a block declares {len} bytes, {} follow",
                block.len()
            )));
        }
        snappy_block(&block, &mut out, limit)?;
    }
}

/// Appends one raw snappy block to `out`, refused on its declared length
/// when that would take `out` past `limit`.
fn snappy_block(block: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), Inflate> {
    let corrupt = |e: snap::Error| Inflate::Corrupt(e.to_string());
    let len = snap::raw::decompress_len(block).map_err(corrupt)?;
    let start = out.len();
    if len > limit - start {
        return Err(Inflate::TooLarge);
    }
    out.resize(start + len, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(corrupt)?;
    out.truncate(start + written);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    const MIB: usize = 1 << 20;

    /// A lazily made bomb: `compression` of `size` zeros (up to many GiB),
    /// produced as it is read, never held. The decoder under test pulls as
    /// little of it as it needs, so a decoder that does not stop at its
    /// bound runs for minutes and fills the memory instead of failing.
    fn zeros_compressed(compression: Compression, size: u64) -> Box<dyn Read + Send> {
        let zeros = std::io::repeat(0).take(size);
        match compression {
            Compression::None => Box::new(zeros),
            Compression::Gzip => Box::new(flate2::read::GzEncoder::new(
                zeros,
                flate2::Compression::fast(),
            )),
            Compression::Zstd => Box::new(zstd::stream::read::Encoder::new(zeros, 1).unwrap()),
            Compression::Lz4 => repeated_blocks(lz4_frame, size),
            Compression::Snappy => repeated_blocks(snappy_frame, size),
        }
    }

    /// A frame's head, one block, its tail.
    type Frame = (Vec<u8>, Vec<u8>, Vec<u8>);

    /// A frame of `size` zeros made from the frame of one block of zeros
    /// (`frame(n)`: its head, the block, its tail) by repeating the block:
    /// both framings allow independent blocks back to back.
    fn repeated_blocks(frame: fn(usize) -> Frame, size: u64) -> Box<dyn Read + Send> {
        let block = size.min(4 * MIB as u64);
        assert_eq!(size % block, 0, "whole blocks");
        let (head, one, tail) = frame(block as usize);
        let blocks = std::iter::repeat_n(one, (size / block) as usize);
        let parts = std::iter::once(head)
            .chain(blocks)
            .chain(std::iter::once(tail));
        Box::new(Parts {
            parts: Box::new(parts),
            current: std::io::Cursor::new(Vec::new()),
        })
    }

    /// Reads byte vectors one after the other, each made when reached.
    struct Parts {
        parts: Box<dyn Iterator<Item = Vec<u8>> + Send>,
        current: std::io::Cursor<Vec<u8>>,
    }

    impl Read for Parts {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            loop {
                let n = self.current.read(buf)?;
                if n > 0 || buf.is_empty() {
                    return Ok(n);
                }
                match self.parts.next() {
                    Some(next) => self.current = std::io::Cursor::new(next),
                    None => return Ok(0),
                }
            }
        }
    }

    /// An LZ4 frame of `n` zeros as (header, the one block, end mark).
    fn lz4_frame(n: usize) -> Frame {
        let mut encoder = lz4::EncoderBuilder::new()
            .block_size(lz4::BlockSize::Max4MB)
            .block_mode(lz4::BlockMode::Independent)
            .checksum(lz4::ContentChecksum::NoChecksum)
            .build(Vec::new())
            .unwrap();
        encoder.write_all(&vec![0; n]).unwrap();
        let (frame, result) = encoder.finish();
        result.unwrap();
        // Header: magic (4), flags, block descriptor, header checksum.
        let head = frame[..7].to_vec();
        let tail = frame[frame.len() - 4..].to_vec();
        (head, frame[7..frame.len() - 4].to_vec(), tail)
    }

    /// Snappy-java's framing of `n` zeros as (header, the one block, nothing).
    fn snappy_frame(n: usize) -> Frame {
        let compressed = snap::raw::Encoder::new().compress_vec(&vec![0; n]).unwrap();
        let mut head = SNAPPY_MAGIC.to_vec();
        head.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        let mut block = (compressed.len() as u32).to_be_bytes().to_vec();
        block.extend_from_slice(&compressed);
        (head, block, Vec::new())
    }

    const CODECS: [Compression; 4] = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    #[test]
    fn a_bomb_of_each_codec_stops_at_the_bound() {
        // 64 GiB of zeros each: inflated whole, any of them would take the
        // machine's memory; bounded, each stops a little past 1 MiB.
        for codec in CODECS {
            let started = std::time::Instant::now();
            let result = inflate(codec, zeros_compressed(codec, 64 << 30), MIB);
            assert_eq!(result, Err(Inflate::TooLarge), "{}", codec_name(codec));
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "{}: {:?}",
                codec_name(codec),
                started.elapsed()
            );
        }
    }

    #[test]
    fn what_fits_the_bound_decompresses_whole_and_one_byte_more_does_not() {
        for codec in CODECS {
            let name = codec_name(codec);
            let zeros = std::io::repeat(0).take(3 * MIB as u64);
            let exact = crate::fake::compress(codec, zeros);
            let out = inflate(codec, &exact[..], 3 * MIB).unwrap();
            assert_eq!(out.len(), 3 * MIB, "{name}");
            assert!(out.iter().all(|&b| b == 0), "{name}");
            assert_eq!(
                inflate(codec, &exact[..], 3 * MIB - 1),
                Err(Inflate::TooLarge),
                "{name}"
            );
        }
    }

    #[test]
    fn broken_input_is_corrupt_not_too_large_and_never_a_panic() {
        for codec in CODECS {
            let name = codec_name(codec);
            match inflate(
                codec,
                &b"\x82SNAPPY\x00\0\0\0\x01\0\0\0\x01\xff\xff\xff\xff garbage"[..],
                MIB,
            ) {
                Err(Inflate::Corrupt(why)) => assert!(why.starts_with(name), "{why}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        // Snappy refuses a block on its declared length: 4 GiB declared in
        // five bytes, nothing allocated for it.
        let declared = [0xff, 0xff, 0xff, 0xff, 0x0f]; // a varint before the data
        assert_eq!(
            inflate(Compression::Snappy, &declared[..], MIB),
            Err(Inflate::TooLarge)
        );
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_input_never_panics(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            codec in 0usize..4,
        ) {
            let _ = inflate(CODECS[codec], &data[..], 4096);
        }
    }
}
