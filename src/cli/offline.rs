//! The offline operator subcommands: `partition` and `decode`. They read no
//! network and no clock, so they answer the same on any machine.

use serde_json::{Value, json};

use krabka_authority::coordination::{
    FormatError, KeyKind, Lease, Registration, decode_key, decode_lease, decode_registration,
    role_partition,
};

/// Why an offline command failed; the message is what the operator sees.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CommandError {
    /// Bad arguments.
    #[error("{0}")]
    Usage(String),
    /// Bytes that are not a record part.
    #[error("{error} (part: {})", error.part().as_str())]
    Format {
        /// The decode failure.
        error: FormatError,
    },
}

/// `partition ROLE --partitions N`: the partition number alone.
pub(crate) fn partition(role: &str, partitions: i32) -> Result<i32, CommandError> {
    role_partition(role, partitions).map_err(|e| CommandError::Usage(e.to_string()))
}

fn unhex(flag: &str, text: &str) -> Result<Vec<u8>, CommandError> {
    let text = text.trim();
    let text = text.strip_prefix("0x").unwrap_or(text);
    hex::decode(text).map_err(|e| CommandError::Usage(format!("{flag} is not hex: {e}")))
}

/// The JSON form of a registration value.
pub(crate) fn registration_json(r: &Registration) -> Value {
    json!({ "member": r.member, "registeredAt": r.registered_at })
}

/// The JSON form of a lease value.
pub(crate) fn lease_json(l: &Lease) -> Value {
    json!({
        "member": l.member,
        "token": l.token.to_string(),
        "producerId": l.token.producer_id(),
        "producerEpoch": l.token.producer_epoch(),
        "grantedAt": l.granted_at,
        "deadline": l.deadline,
    })
}

/// `decode --key HEX [--value HEX]`: the record as JSON. A missing or empty
/// value is a tombstone.
pub(crate) fn decode(key_hex: &str, value_hex: Option<&str>) -> Result<Value, CommandError> {
    let key_bytes = unhex("--key", key_hex)?;
    let key = decode_key(&key_bytes).map_err(|error| CommandError::Format { error })?;
    let value_bytes = value_hex.map(|v| unhex("--value", v)).transpose()?;
    let kind = match key.kind {
        KeyKind::Registration => "registration",
        KeyKind::Lease => "lease",
    };
    let value = match value_bytes.as_deref() {
        None | Some([]) => Value::Null,
        Some(bytes) => match key.kind {
            KeyKind::Registration => registration_json(
                &decode_registration(bytes).map_err(|error| CommandError::Format { error })?,
            ),
            KeyKind::Lease => {
                lease_json(&decode_lease(bytes).map_err(|error| CommandError::Format { error })?)
            }
        },
    };
    Ok(json!({
        "key": { "kind": kind, "role": key.role, "member": key.member },
        "tombstone": value.is_null(),
        "value": value,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use krabka_authority::coordination::Part;

    #[test]
    fn decodes_the_shared_lease_vector() {
        let out = decode(
            "0000000100066f72646572730000",
            Some("000000066e6f64652d310000000000000fa000070000018bcfe568000000018bcfe5dd30"),
        )
        .unwrap();
        assert_eq!(out["key"]["kind"], "lease");
        assert_eq!(out["key"]["role"], "orders");
        assert_eq!(out["value"]["token"], "4000:7");
        assert_eq!(out["value"]["deadline"], 1_700_000_030_000i64);
        assert_eq!(out["tombstone"], false);
    }

    #[test]
    fn a_key_without_value_is_a_tombstone() {
        let out = decode("0000000000066f726465727300066e6f64652d31", None).unwrap();
        assert_eq!(out["key"]["member"], "node-1");
        assert_eq!(out["tombstone"], true);
        assert!(out["value"].is_null());
    }

    #[test]
    fn bad_input_names_the_part() {
        match decode("00000007", None) {
            Err(CommandError::Format { error }) => assert_eq!(error.part(), Part::Key),
            other => panic!("{other:?}"),
        }
        let err = decode("0000000100066f72646572730000", Some("0001")).unwrap_err();
        assert!(err.to_string().contains("part: lease_value"), "{err}");
        assert!(matches!(decode("zz", None), Err(CommandError::Usage(_))));
    }

    #[test]
    fn partition_matches_the_vectors() {
        assert_eq!(partition("orders", 16).unwrap(), 12);
        assert!(partition("orders", 0).is_err());
    }
}
