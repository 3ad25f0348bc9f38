//! The rules of a check's two inputs, shared by the service (which answers
//! 400) and its clients (which refuse before asking): a role is a Kafka
//! transactional id, written in the coordination records as a string with
//! an `i16` length; a token is `<producer id>:<producer epoch>`.

use crate::{FencingToken, Problem};

/// The longest role in bytes: the record format's `i16` string length.
pub const MAX_ROLE_BYTES: usize = i16::MAX as usize;

/// What a malformed token's problem says a token looks like.
pub const TOKEN_FORM: &str = "a token looks like 4000:7 (<producer id>:<producer epoch>)";

/// Checks a role name: 1 to [`MAX_ROLE_BYTES`] bytes.
pub fn validate_role(role: &str) -> Result<(), Problem> {
    if role.is_empty() {
        return Err(Problem::invalid("role", "the role is empty"));
    }
    if role.len() > MAX_ROLE_BYTES {
        return Err(Problem::invalid(
            "role",
            format!(
                "the role is {} bytes long; at most {MAX_ROLE_BYTES} are allowed",
                role.len()
            ),
        ));
    }
    Ok(())
}

/// Parses a token, naming the wrong part.
pub fn parse_token(text: &str) -> Result<FencingToken, Problem> {
    text.parse::<FencingToken>()
        .map_err(|e| Problem::invalid("token", format!("{e}; {TOKEN_FORM}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_is_one_to_max_bytes() {
        assert!(validate_role("orders").is_ok());
        assert!(validate_role(&"r".repeat(MAX_ROLE_BYTES)).is_ok());
        let empty = validate_role("").unwrap_err();
        assert_eq!((empty.status, empty.field.as_deref()), (400, Some("role")));
        let long = validate_role(&"r".repeat(MAX_ROLE_BYTES + 1)).unwrap_err();
        assert!(long.detail.contains("32768 bytes"), "{}", long.detail);
    }

    #[test]
    fn a_malformed_token_names_the_part_and_the_form() {
        assert_eq!(
            parse_token("4000:7").unwrap(),
            FencingToken::new(4000, 7).unwrap()
        );
        let bad = parse_token("4000:x").unwrap_err();
        assert_eq!(bad.field.as_deref(), Some("token"));
        assert!(bad.detail.contains("producer epoch"), "{}", bad.detail);
        assert!(bad.detail.ends_with(TOKEN_FORM), "{}", bad.detail);
    }
}
