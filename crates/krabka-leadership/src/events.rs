//! Transitions of a member, reported to an optional sink and to `tracing`.

use std::fmt;

use krabka_coordination::FencingToken;
use krabka_coordination::time::rfc3339_ms as instant;

/// One transition of one member of one role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The registration was appended at this offset (the join sequence).
    Registered {
        /// Its offset.
        offset: i64,
    },
    /// Not this member's turn; it looks again at the latest at `until`.
    Waiting {
        /// The instant it may challenge (epoch ms).
        until: i64,
        /// Its challenger rank.
        rank: Option<usize>,
    },
    /// It is minting the epoch.
    Challenged,
    /// It holds the role under this token.
    Acquired {
        /// The minted token.
        token: FencingToken,
    },
    /// A lease was written; standbys wait until `deadline`.
    Renewed {
        /// The new deadline (epoch ms).
        deadline: i64,
    },
    /// A renewal failed for a reason other than a fence; it will retry.
    RenewFailed {
        /// What failed.
        error: String,
    },
    /// The broker rejected the token: a later member holds the role.
    Fenced {
        /// The deposed token.
        token: FencingToken,
    },
    /// The role ended for another reason (the write outcome became unknown).
    Lost {
        /// Why.
        error: String,
    },
    /// The member cleared its lease and deregistered.
    Resigned,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Registered { offset } => write!(f, "registered at offset {offset}"),
            Event::Waiting { until, rank } => match rank {
                Some(rank) => write!(
                    f,
                    "waiting until {} (challenger rank {rank})",
                    instant(*until)
                ),
                None => write!(f, "waiting until {}", instant(*until)),
            },
            Event::Challenged => f.write_str("challenged"),
            Event::Acquired { token } => write!(f, "acquired with token {token}"),
            Event::Renewed { deadline } => write!(f, "renewed until {}", instant(*deadline)),
            Event::RenewFailed { error } => write!(f, "renewal failed: {error}"),
            Event::Fenced { token } => write!(f, "fenced: token {token} was superseded"),
            Event::Lost { error } => write!(f, "lost the role: {error}"),
            Event::Resigned => f.write_str("resigned"),
        }
    }
}
