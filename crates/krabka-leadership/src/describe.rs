//! What a third party asks: who holds a role, and the role's roster.

use krabka_coordination::transport::{Coordinator, StateReader, TransportError};
use krabka_coordination::{FencingToken, RoleState, Verdict, verdict};

/// The coordinator's answer for one role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeadershipStatus {
    /// The role.
    pub role: String,
    /// The current token; `None` when no member holds the role.
    pub current: Option<FencingToken>,
}

impl LeadershipStatus {
    /// True only for the current token: a writer with any other token is
    /// deposed (or was never minted here).
    pub fn authoritative(&self, token: &FencingToken) -> bool {
        verdict(*token, self.current, false) == Verdict::Authoritative
    }
}

/// Asks the transaction coordinator which token holds `role` now; one
/// request, no group, no epoch taken.
pub async fn describe_leadership<C: Coordinator>(
    coordinator: &C,
    role: &str,
) -> Result<LeadershipStatus, TransportError> {
    Ok(LeadershipStatus {
        role: role.to_owned(),
        current: coordinator.describe(role).await?,
    })
}

/// Reads the roster and lease of `role`, for tools that report a cluster.
pub async fn describe_role_state<R: StateReader>(
    reader: &R,
    role: &str,
) -> Result<RoleState, TransportError> {
    Ok(RoleState::from_records(
        role,
        &reader.read_role_records(role).await?,
    ))
}
