//! The frozen record format of `__coordination_state` (seed 000).
//!
//! Every integer is big-endian and signed; a string is an `i16` byte length
//! followed by UTF-8, Kafka's own native string layout. Decoding is strict:
//! anything but the exact layout is a [`FormatError`] naming the record part.

use std::fmt;

use super::FencingToken;

const VERSION: i16 = 0;
const KIND_REGISTRATION: i16 = 0;
const KIND_LEASE: i16 = 1;

/// Which of the two record kinds a key names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// A member's registration (kind 0).
    Registration,
    /// The lease of a role (kind 1).
    Lease,
}

/// The key of a record: which role, which kind, and for a registration which member.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// Registration or lease.
    pub kind: KeyKind,
    /// The role the record belongs to.
    pub role: String,
    /// The member for a registration; empty for a lease.
    pub member: String,
}

impl Key {
    /// The registration key of one member of a role.
    pub fn registration(role: impl Into<String>, member: impl Into<String>) -> Key {
        Key {
            kind: KeyKind::Registration,
            role: role.into(),
            member: member.into(),
        }
    }

    /// The lease key of a role (the member is always empty).
    pub fn lease(role: impl Into<String>) -> Key {
        Key {
            kind: KeyKind::Lease,
            role: role.into(),
            member: String::new(),
        }
    }
}

/// A member's announcement that it competes for a role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// The member id.
    pub member: String,
    /// Epoch milliseconds, by the member's clock.
    pub registered_at: i64,
}

/// The holder's lease, written in a transaction under its token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The member holding the role.
    pub member: String,
    /// The token the coordinator minted for the holder; always minted.
    pub token: FencingToken,
    /// Epoch milliseconds when the lease was written.
    pub granted_at: i64,
    /// Epoch milliseconds after which standbys may challenge.
    pub deadline: i64,
}

/// The record part a decode failed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// The record key.
    Key,
    /// A registration value.
    RegistrationValue,
    /// A lease value.
    LeaseValue,
}

impl Part {
    /// A short stable name, used in metrics labels and JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            Part::Key => "key",
            Part::RegistrationValue => "registration_value",
            Part::LeaseValue => "lease_value",
        }
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Key => "key",
            Part::RegistrationValue => "registration value",
            Part::LeaseValue => "lease value",
        })
    }
}

/// Bytes that are not a valid record part.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed {part}: {reason}")]
pub struct FormatError {
    part: Part,
    reason: String,
}

impl FormatError {
    fn new(part: Part, reason: impl Into<String>) -> Self {
        FormatError {
            part,
            reason: reason.into(),
        }
    }

    /// A record whose parts decode but disagree with each other.
    pub(crate) fn inconsistent(part: Part, reason: impl Into<String>) -> Self {
        FormatError::new(part, reason)
    }

    /// The record part that failed to decode.
    pub fn part(&self) -> Part {
        self.part
    }

    /// What was wrong, in words.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// A value that cannot be written in the frozen layout.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// A string longer than the `i16` length prefix can carry; never truncated.
    #[error("{field} is {len} bytes long; the record format allows at most 32767")]
    StringTooLong {
        /// The field that is too long.
        field: &'static str,
        /// Its length in UTF-8 bytes.
        len: usize,
    },
    /// A lease must carry a minted token.
    #[error("a lease must carry a minted token, not {0}")]
    UnmintedToken(FencingToken),
}

/// Maximum byte length of a string in the record format.
pub const MAX_STRING_LEN: usize = i16::MAX as usize;

fn put_string(out: &mut Vec<u8>, field: &'static str, s: &str) -> Result<(), EncodeError> {
    let len = i16::try_from(s.len()).map_err(|_| EncodeError::StringTooLong {
        field,
        len: s.len(),
    })?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

/// Encodes a record key.
pub fn encode_key(key: &Key) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::with_capacity(8 + key.role.len() + key.member.len());
    out.extend_from_slice(&VERSION.to_be_bytes());
    let kind = match key.kind {
        KeyKind::Registration => KIND_REGISTRATION,
        KeyKind::Lease => KIND_LEASE,
    };
    out.extend_from_slice(&kind.to_be_bytes());
    put_string(&mut out, "role", &key.role)?;
    put_string(&mut out, "member", &key.member)?;
    Ok(out)
}

/// Encodes a registration value.
pub fn encode_registration(r: &Registration) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::with_capacity(12 + r.member.len());
    out.extend_from_slice(&VERSION.to_be_bytes());
    put_string(&mut out, "member", &r.member)?;
    out.extend_from_slice(&r.registered_at.to_be_bytes());
    Ok(out)
}

/// Encodes a lease value.
pub fn encode_lease(l: &Lease) -> Result<Vec<u8>, EncodeError> {
    if !l.token.minted() {
        return Err(EncodeError::UnmintedToken(l.token));
    }
    let mut out = Vec::with_capacity(30 + l.member.len());
    out.extend_from_slice(&VERSION.to_be_bytes());
    put_string(&mut out, "member", &l.member)?;
    out.extend_from_slice(&l.token.producer_id().to_be_bytes());
    out.extend_from_slice(&l.token.producer_epoch().to_be_bytes());
    out.extend_from_slice(&l.granted_at.to_be_bytes());
    out.extend_from_slice(&l.deadline.to_be_bytes());
    Ok(out)
}

/// A strict big-endian reader over one record part.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    part: Part,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], part: Part) -> Self {
        Reader {
            bytes,
            pos: 0,
            part,
        }
    }

    fn err(&self, reason: impl Into<String>) -> FormatError {
        FormatError::new(self.part, reason)
    }

    fn take<const N: usize>(&mut self, field: &str) -> Result<[u8; N], FormatError> {
        let end = self.pos + N;
        let slice = self.bytes.get(self.pos..end).ok_or_else(|| {
            self.err(format!(
                "truncated at byte {}: {field} needs {N} bytes, {} left",
                self.pos,
                self.bytes.len() - self.pos
            ))
        })?;
        self.pos = end;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    fn i16(&mut self, field: &str) -> Result<i16, FormatError> {
        self.take::<2>(field).map(i16::from_be_bytes)
    }

    fn i64(&mut self, field: &str) -> Result<i64, FormatError> {
        self.take::<8>(field).map(i64::from_be_bytes)
    }

    fn version(&mut self) -> Result<(), FormatError> {
        let v = self.i16("version")?;
        if v != VERSION {
            return Err(self.err(format!("unknown version {v}")));
        }
        Ok(())
    }

    fn string(&mut self, field: &str) -> Result<String, FormatError> {
        let len = self.i16(field)?;
        if len < 0 {
            return Err(self.err(format!("{field} has negative length {len}")));
        }
        let len = len as usize;
        let start = self.pos;
        let slice = self.bytes.get(start..start + len).ok_or_else(|| {
            self.err(format!(
                "{field} length {len} overruns the {} bytes left",
                self.bytes.len() - start
            ))
        })?;
        let s = std::str::from_utf8(slice)
            .map_err(|e| self.err(format!("{field} is not valid UTF-8: {e}")))?;
        self.pos += len;
        Ok(s.to_owned())
    }

    fn finish(&self) -> Result<(), FormatError> {
        if self.pos != self.bytes.len() {
            return Err(self.err(format!(
                "{} trailing bytes after byte {}",
                self.bytes.len() - self.pos,
                self.pos
            )));
        }
        Ok(())
    }
}

/// Decodes a record key.
pub fn decode_key(bytes: &[u8]) -> Result<Key, FormatError> {
    let mut r = Reader::new(bytes, Part::Key);
    r.version()?;
    let kind = match r.i16("kind")? {
        KIND_REGISTRATION => KeyKind::Registration,
        KIND_LEASE => KeyKind::Lease,
        other => return Err(r.err(format!("unknown kind {other}"))),
    };
    let role = r.string("role")?;
    let member = r.string("member")?;
    r.finish()?;
    if kind == KeyKind::Lease && !member.is_empty() {
        return Err(r.err("a lease key must carry an empty member"));
    }
    Ok(Key { kind, role, member })
}

/// Decodes a registration value.
pub fn decode_registration(bytes: &[u8]) -> Result<Registration, FormatError> {
    let mut r = Reader::new(bytes, Part::RegistrationValue);
    r.version()?;
    let member = r.string("member")?;
    let registered_at = r.i64("registeredAt")?;
    r.finish()?;
    Ok(Registration {
        member,
        registered_at,
    })
}

/// Decodes a lease value; a negative producer id or epoch proves no
/// leadership and is refused.
pub fn decode_lease(bytes: &[u8]) -> Result<Lease, FormatError> {
    let mut r = Reader::new(bytes, Part::LeaseValue);
    r.version()?;
    let member = r.string("member")?;
    let producer_id = r.i64("producerID")?;
    let producer_epoch = r.i16("producerEpoch")?;
    let granted_at = r.i64("grantedAt")?;
    let deadline = r.i64("deadline")?;
    r.finish()?;
    let token = FencingToken::new(producer_id, producer_epoch)
        .map_err(|e| r.err(format!("token {producer_id}:{producer_epoch}: {e}")))?;
    Ok(Lease {
        member,
        token,
        granted_at,
        deadline,
    })
}

/// True for a tombstone: a null or empty value.
pub fn is_tombstone(value: Option<&[u8]>) -> bool {
    value.is_none_or(<[u8]>::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit;
    use proptest::prelude::*;

    fn lease() -> Lease {
        testkit::lease("node-1", testkit::t(4000, 7))
    }

    #[test]
    fn lease_key_member_is_empty_and_kind_is_one() {
        let bytes = encode_key(&Key::lease("a")).unwrap();
        assert_eq!(bytes, [0, 0, 0, 1, 0, 1, b'a', 0, 0]);
    }

    #[test]
    fn a_lease_key_naming_a_member_is_refused() {
        let bytes = [0, 0, 0, 1, 0, 1, b'a', 0, 1, b'm'];
        assert_eq!(decode_key(&bytes).unwrap_err().part(), Part::Key);
    }

    #[test]
    fn strings_over_32767_bytes_are_refused_not_truncated() {
        let long = "x".repeat(MAX_STRING_LEN + 1);
        let err = encode_key(&Key::registration(long.clone(), "m")).unwrap_err();
        assert_eq!(
            err,
            EncodeError::StringTooLong {
                field: "role",
                len: 32768
            }
        );
        assert!(
            encode_registration(&Registration {
                member: long.clone(),
                registered_at: 0
            })
            .is_err()
        );
        let mut l = lease();
        l.member = long;
        assert!(encode_lease(&l).is_err());
        // The limit itself still encodes and round-trips.
        let max = "y".repeat(MAX_STRING_LEN);
        let key = Key::registration(max.clone(), max);
        assert_eq!(decode_key(&encode_key(&key).unwrap()).unwrap(), key);
    }

    #[test]
    fn an_unminted_token_is_not_encoded() {
        let mut l = lease();
        l.token = FencingToken::NO_EPOCH;
        assert_eq!(
            encode_lease(&l),
            Err(EncodeError::UnmintedToken(FencingToken::NO_EPOCH))
        );
    }

    #[test]
    fn malformed_bytes_name_their_part_and_reason() {
        let key = encode_key(&Key::registration("r", "m")).unwrap();
        let reg = encode_registration(&Registration {
            member: "m".into(),
            registered_at: 5,
        })
        .unwrap();
        let lease = encode_lease(&lease()).unwrap();

        let mut unknown_version = key.clone();
        unknown_version[1] = 1;
        let mut unknown_kind = key.clone();
        unknown_kind[3] = 2;
        let mut negative_len = key.clone();
        negative_len[4] = 0xff;
        let mut overlong = key.clone();
        overlong[5] = 9;
        let mut bad_utf8 = key.clone();
        bad_utf8[6] = 0xff;
        let mut trailing = key.clone();
        trailing.push(0);
        let truncated = &key[..key.len() - 1];

        let cases: Vec<(&[u8], &str)> = vec![
            (&unknown_version, "unknown version 1"),
            (&unknown_kind, "unknown kind 2"),
            (&negative_len, "negative length"),
            (&overlong, "overruns"),
            (&bad_utf8, "not valid UTF-8"),
            (&trailing, "1 trailing bytes"),
            (truncated, "overruns"),
            (&[], "truncated"),
            (&[0], "truncated"),
        ];
        for (bytes, reason) in cases {
            let err = decode_key(bytes).unwrap_err();
            assert_eq!(err.part(), Part::Key, "{bytes:?}");
            assert!(err.reason().contains(reason), "{bytes:?}: {err}");
        }

        for cut in 0..reg.len() {
            assert_eq!(
                decode_registration(&reg[..cut]).unwrap_err().part(),
                Part::RegistrationValue
            );
        }
        let mut reg_trailing = reg.clone();
        reg_trailing.push(1);
        assert_eq!(
            decode_registration(&reg_trailing).unwrap_err().part(),
            Part::RegistrationValue
        );

        for cut in 0..lease.len() {
            assert_eq!(
                decode_lease(&lease[..cut]).unwrap_err().part(),
                Part::LeaseValue
            );
        }
        let mut lease_version = lease.clone();
        lease_version[0] = 0x80;
        assert!(
            decode_lease(&lease_version)
                .unwrap_err()
                .reason()
                .contains("unknown version -32768")
        );
    }

    #[test]
    fn a_lease_with_a_negative_token_does_not_decode() {
        let mut bytes = encode_lease(&lease()).unwrap();
        // producerID starts after version (2) + member length (2) + "node-1" (6).
        bytes[10..18].copy_from_slice(&(-1i64).to_be_bytes());
        let err = decode_lease(&bytes).unwrap_err();
        assert_eq!(err.part(), Part::LeaseValue);
        let mut bytes = encode_lease(&lease()).unwrap();
        bytes[18..20].copy_from_slice(&(-1i16).to_be_bytes());
        assert_eq!(decode_lease(&bytes).unwrap_err().part(), Part::LeaseValue);
    }

    #[test]
    fn null_and_empty_values_are_tombstones() {
        assert!(is_tombstone(None));
        assert!(is_tombstone(Some(&[])));
        assert!(!is_tombstone(Some(&[0])));
    }

    fn arb_string() -> impl Strategy<Value = String> {
        prop_oneof![".{0,40}", "[a-z0-9:-]{0,12}"]
    }

    proptest! {
        #[test]
        fn keys_round_trip(role in arb_string(), member in arb_string(), lease_kind in any::<bool>()) {
            let key = if lease_kind { Key::lease(role) } else { Key::registration(role, member) };
            prop_assert_eq!(decode_key(&encode_key(&key).unwrap()).unwrap(), key);
        }

        #[test]
        fn registrations_round_trip(member in arb_string(), at in any::<i64>()) {
            let r = Registration { member, registered_at: at };
            prop_assert_eq!(decode_registration(&encode_registration(&r).unwrap()).unwrap(), r);
        }

        #[test]
        fn leases_round_trip(member in arb_string(), id in 0i64.., epoch in 0i16.., granted in any::<i64>(), deadline in any::<i64>()) {
            let l = Lease { member, token: FencingToken::new(id, epoch).unwrap(), granted_at: granted, deadline };
            prop_assert_eq!(decode_lease(&encode_lease(&l).unwrap()).unwrap(), l);
        }

        #[test]
        fn decoders_never_panic_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
            let _ = decode_key(&bytes);
            let _ = decode_registration(&bytes);
            let _ = decode_lease(&bytes);
        }

        #[test]
        fn decoders_never_panic_on_mutated_valid_records(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut key = encode_key(&Key::registration("orders", "node-1")).unwrap();
            let mut lease = encode_lease(&lease()).unwrap();
            for (at, byte) in &flips {
                let i = at.index(key.len());
                key[i] = *byte;
                let j = at.index(lease.len());
                lease[j] = *byte;
            }
            let _ = decode_key(&key[..cut.index(key.len() + 1)]);
            let _ = decode_lease(&lease[..cut.index(lease.len() + 1)]);
            let _ = decode_registration(&lease);
        }
    }
}
