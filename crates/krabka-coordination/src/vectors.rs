//! The shared golden vectors (`tests/vectors/coordination.json`, copied from
//! the steering repository), made by an independent implementation.

use serde_json::Value;

use super::*;

const VECTORS: &str = include_str!("../../../tests/vectors/coordination.json");

fn vectors() -> Value {
    serde_json::from_str(VECTORS).expect("vectors are JSON")
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn text(v: &Value, field: &str) -> String {
    v[field].as_str().expect(field).to_owned()
}

fn int(v: &Value, field: &str) -> i64 {
    v[field].as_i64().expect(field)
}

#[test]
fn partition_vectors() {
    let v = vectors();
    let cases = v["partitions"].as_array().expect("partitions");
    assert_eq!(cases.len(), 5);
    let mut abs_differs_seen = 0;
    for case in cases {
        let role = text(case, "role");
        assert_eq!(
            i64::from(murmur2(role.as_bytes())),
            int(case, "murmur2"),
            "{role:?}"
        );
        for (count, want) in case["partition"].as_object().expect("partition") {
            let count: i32 = count.parse().expect("count");
            let want = want.as_i64().expect("partition");
            assert_eq!(
                role_partition(&role, count).map(i64::from),
                Ok(want),
                "{role:?} of {count}"
            );
            let hash = murmur2(role.as_bytes());
            let by_abs = i64::from(hash.unsigned_abs() % count as u32);
            let differs = case["abs_would_differ"][count.to_string()]
                .as_bool()
                .expect("abs_would_differ");
            assert_eq!(by_abs != want, differs, "{role:?} of {count}");
            abs_differs_seen += usize::from(differs);
        }
    }
    assert!(abs_differs_seen > 0, "the vectors include abs() traps");
}

#[test]
fn key_vectors() {
    let v = vectors();
    let cases = v["keys"].as_array().expect("keys");
    assert_eq!(cases.len(), 7);
    for case in cases {
        let role = text(case, "role");
        let member = text(case, "member");
        let key = match case["kind"].as_str() {
            Some("lease") => Key::lease(role),
            Some("registration") => Key::registration(role, member),
            other => panic!("unknown kind {other:?}"),
        };
        let bytes = unhex(&text(case, "hex"));
        assert_eq!(encode_key(&key).expect("encodes"), bytes, "{key:?}");
        assert_eq!(decode_key(&bytes).expect("decodes"), key);
    }
}

#[test]
fn registration_vectors() {
    let v = vectors();
    let cases = v["registrations"].as_array().expect("registrations");
    assert_eq!(cases.len(), 2);
    for case in cases {
        let reg = Registration {
            member: text(case, "member"),
            registered_at: int(case, "registeredAt"),
        };
        let bytes = unhex(&text(case, "hex"));
        assert_eq!(encode_registration(&reg).expect("encodes"), bytes);
        assert_eq!(decode_registration(&bytes).expect("decodes"), reg);
    }
}

#[test]
fn lease_vectors() {
    let v = vectors();
    let cases = v["leases"].as_array().expect("leases");
    assert_eq!(cases.len(), 1);
    for case in cases {
        let epoch = i16::try_from(int(case, "producerEpoch")).expect("epoch");
        let lease = Lease {
            member: text(case, "member"),
            token: FencingToken::new(int(case, "producerID"), epoch).expect("token"),
            granted_at: int(case, "grantedAt"),
            deadline: int(case, "deadline"),
        };
        let bytes = unhex(&text(case, "hex"));
        assert_eq!(encode_lease(&lease).expect("encodes"), bytes);
        assert_eq!(decode_lease(&bytes).expect("decodes"), lease);
        // The lease of the vector lives in the partition of its role.
        let role = text(case, "role");
        assert!(role_partition(&role, 16).is_ok());
    }
}
