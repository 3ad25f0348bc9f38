//! The model's own partition functions, written apart from the code under
//! test (`describe::partition_for`, `krabka_coordination::role_partition`):
//! a model and a checker that reuse the code's own would agree with it
//! where it is wrong. Checked against the golden vectors (made by an
//! independent implementation) and against values Java 17 printed.

/// `Utils.abs(id.hashCode()) % partitions`, as Kafka's
/// `TransactionStateManager.partitionFor` places a transactional id: Java's
/// `String.hashCode` over UTF-16 code units (s[0]·31^(n−1) + … + s[n−1],
/// modulo 2^32), and `Utils.abs`, which maps `Integer.MIN_VALUE` to 0.
pub fn txn_partition(transactional_id: &str, partitions: i32) -> i32 {
    let hash = transactional_id.encode_utf16().fold(0u32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(u32::from(unit))
    });
    // As a signed int: |h|, and 0 for -2^31 (whose |h| does not fit).
    let signed = hash as i32;
    let abs = if signed == i32::MIN {
        0
    } else {
        signed.unsigned_abs()
    };
    (abs % partitions.max(1) as u32) as i32
}

/// Kafka's `Utils.murmur2` (`DefaultPartitioner`, seed 0x9747b28c), over
/// little-endian 4-byte words and a tail of up to three bytes.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let words = data.chunks_exact(4);
    let tail = words.remainder();
    for word in words {
        let mut k = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    if !tail.is_empty() {
        for (i, byte) in tail.iter().enumerate().rev() {
            h ^= u32::from(*byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The coordination topic's partition of `role` among `partitions`:
/// `toPositive(murmur2(role)) % partitions` (`toPositive` clears the sign
/// bit; it is not `abs`).
pub fn role_partition(role: &str, partitions: i32) -> i32 {
    ((murmur2(role.as_bytes()) as u32 & 0x7fff_ffff) % partitions.max(1) as u32) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    const VECTORS: &str = include_str!("../../../../../tests/vectors/coordination.json");

    #[test]
    fn murmur2_and_role_partitions_match_the_golden_vectors() {
        let vectors: serde_json::Value = serde_json::from_str(VECTORS).unwrap();
        let cases = vectors["partitions"].as_array().unwrap();
        assert!(!cases.is_empty());
        for case in cases {
            let role = case["role"].as_str().unwrap();
            assert_eq!(
                i64::from(murmur2(role.as_bytes())),
                case["murmur2"].as_i64().unwrap(),
                "{role:?}"
            );
            for (count, want) in case["partition"].as_object().unwrap() {
                let count: i32 = count.parse().unwrap();
                assert_eq!(
                    i64::from(role_partition(role, count)),
                    want.as_i64().unwrap(),
                    "{role:?} of {count}"
                );
            }
        }
    }

    /// Printed by Java 17: `s.hashCode()`, then `Utils.abs(h) % 50` and
    /// `% 3` (a non-BMP character counts as two code units; the second
    /// string's hash is `Integer.MIN_VALUE`, whose abs is 0).
    #[test]
    fn txn_partitions_match_java() {
        for (id, of_50, of_3) in [
            ("orders", 31, 0),
            ("billing-writer", 39, 0),
            ("", 0, 0),
            ("\u{fc}\u{20ac}\u{1f600}", 35, 1),
            ("polygenelubricants", 0, 0),
            ("role-17", 19, 1),
        ] {
            assert_eq!(txn_partition(id, 50), of_50, "{id:?} of 50");
            assert_eq!(txn_partition(id, 3), of_3, "{id:?} of 3");
        }
    }
}
