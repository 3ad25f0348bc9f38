//! The pure coordination core: fencing token, record format, role partition,
//! role state, succession rules and the verdict of an authority check.
//!
//! Nothing here does I/O, reads a clock or draws a random number; time is an
//! argument (`now_ms`), so every rule is tested with explicit instants.

mod partition;
mod record;
mod state;
mod succession;

pub use partition::{PartitionError, murmur2, role_partition, to_positive};
pub use record::{
    EncodeError, FormatError, Key, KeyKind, Lease, MAX_STRING_LEN, Part, Registration, decode_key,
    decode_lease, decode_registration, encode_key, encode_lease, encode_registration, is_tombstone,
};
pub use state::{Applied, Change, LogRecord, Malformed, Member, PartitionState, RoleState};
pub use succession::{Decision, SuccessionConfig, challenge_at, challenge_rank, evaluate};
// The token and the verdict are spoken by the clients too: they live in
// the types crate the service and its clients share.
pub use krabka_authority_types::{FencingToken, TokenError, TokenPart, Verdict, verdict};

#[cfg(test)]
mod vectors;
