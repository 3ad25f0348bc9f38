//! The types both sides of krabka-authority speak: the fencing token, the
//! verdict of an authority check, the problem body of an error answer, the
//! rules of a check's inputs and the check's wire contract (its answer and
//! a batch item, [`CheckAnswer`], [`BatchItem`]).
//!
//! The service (`krabka-authority`) and its client
//! (`krabka-authority-client`) both build on this crate, so a token parsed
//! by one is the token parsed by the other, and a rule changed in one place
//! changes for both. It depends on serde and thiserror only.
//!
//! ```
//! use krabka_authority_types::{FencingToken, Verdict, verdict};
//!
//! let current: FencingToken = "4000:8".parse()?;
//! let writer: FencingToken = "4000:7".parse()?;
//! assert_eq!(verdict(writer, Some(current), false), Verdict::Superseded);
//! assert_eq!(verdict(current, Some(current), false), Verdict::Authoritative);
//! # Ok::<(), krabka_authority_types::TokenError>(())
//! ```

mod input;
mod problem;
mod token;
mod verdict;
mod wire;

pub use input::{MAX_ROLE_BYTES, TOKEN_FORM, parse_token, validate_role};
pub use problem::{PROBLEM_BASE, PROBLEM_JSON, Problem};
pub use token::{FencingToken, TokenError, TokenPart};
pub use verdict::{Verdict, superseded_for_good, verdict};
pub use wire::{BatchItem, BatchOutcome, CheckAnswer, Refusal, Sighting};
