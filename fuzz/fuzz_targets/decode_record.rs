//! Every decoder of the record format on arbitrary bytes: none may panic, and
//! whatever decodes must encode back to the same bytes.
#![no_main]

use krabka_authority::coordination::{
    decode_key, decode_lease, decode_registration, encode_key, encode_lease, encode_registration,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(key) = decode_key(data) {
        assert_eq!(encode_key(&key).expect("a decoded key encodes"), data);
    }
    if let Ok(reg) = decode_registration(data) {
        assert_eq!(encode_registration(&reg).expect("encodes"), data);
    }
    if let Ok(lease) = decode_lease(data) {
        assert_eq!(encode_lease(&lease).expect("encodes"), data);
    }
});
