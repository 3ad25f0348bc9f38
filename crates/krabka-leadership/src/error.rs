//! Why acquiring or holding a role failed.

use krabka_coordination::FencingToken;
use krabka_coordination::transport::TransportError;

/// An error of the leader-election client.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeadershipError {
    /// The options cannot work with this cluster.
    #[error("invalid options: {0}")]
    InvalidOptions(String),
    /// The broker rejected the holder's token: a later member holds the role.
    /// The caller must stop the work of the role.
    #[error("fenced: token {token} of role {role} was superseded ({source})")]
    Fenced {
        /// The role.
        role: String,
        /// The deposed token.
        token: FencingToken,
        /// The broker's rejection.
        source: Box<TransportError>,
    },
    /// The transport failed.
    #[error("role {role}: {source}")]
    Transport {
        /// The role.
        role: String,
        /// What failed.
        source: Box<TransportError>,
    },
    /// The member resigned; the role ended by its own choice.
    #[error("role {role} was resigned")]
    Resigned {
        /// The role.
        role: String,
    },
    /// The handle was dropped, which stops renewals.
    #[error("role {role} was released: its handle was dropped")]
    Released {
        /// The role.
        role: String,
    },
}

impl LeadershipError {
    /// True when the role ended because the broker fenced the token.
    pub fn is_fenced(&self) -> bool {
        matches!(self, LeadershipError::Fenced { .. })
    }
}
