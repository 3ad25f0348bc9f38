//! The token parser on arbitrary text: no panic, and what parses prints back
//! to the same text (the form is canonical: no sign, no leading space).
#![no_main]

use krabka_authority::coordination::FencingToken;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(token) = text.parse::<FencingToken>() {
            let printed = token.to_string();
            // Leading zeros are accepted ("007:1"), so compare the values.
            assert_eq!(printed.parse::<FencingToken>().ok(), Some(token));
        }
    }
});
