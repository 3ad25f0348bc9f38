//! The partition of a role: Kafka's own key partitioning applied to the role
//! name, so the registration and lease records of one role share one total
//! order.

/// A partition count that cannot hold a role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the partition count must be positive, got {0}")]
pub struct PartitionError(pub i32);

/// Kafka's `Utils.murmur2` (seed 0x9747b28c), bit for bit.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;

    let length = data.len() as u32;
    let mut h: u32 = SEED ^ length;

    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }

    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }

    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `Utils.toPositive`: clears the sign bit. Not `abs`, which differs
/// for every negative hash.
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition that holds every record of `role` in a topic of `partitions`.
pub fn role_partition(role: &str, partitions: i32) -> Result<i32, PartitionError> {
    if partitions <= 0 {
        return Err(PartitionError(partitions));
    }
    Ok(to_positive(murmur2(role.as_bytes())) % partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_kafka_hashes() {
        // Values from Kafka's UtilsTest.testMurmur2.
        let cases: &[(&[u8], i32)] = &[
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (data, want) in cases {
            assert_eq!(murmur2(data), *want, "{:?}", std::str::from_utf8(data));
        }
    }

    #[test]
    fn zero_and_negative_counts_are_errors() {
        assert_eq!(role_partition("orders", 0), Err(PartitionError(0)));
        assert_eq!(role_partition("orders", -3), Err(PartitionError(-3)));
    }

    #[test]
    fn mask_differs_from_abs_for_negative_hashes() {
        // murmur2("orders") is negative; abs() would pick partition 2 of 3.
        let h = murmur2(b"orders");
        assert!(h < 0);
        assert_eq!(role_partition("orders", 3), Ok(0));
        assert_eq!(h.unsigned_abs() % 3, 2);
    }

    #[test]
    fn i32_min_hash_stays_in_range() {
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(-1), i32::MAX);
    }
}
