//! The status of a role, for dashboards and alerts. Pure: the instant and
//! the counts are arguments.

use serde::Serialize;

use crate::coordination::{RoleState, challenge_rank};

/// What an operator should know of a role at a glance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RoleStatus {
    /// A live lease and few failovers.
    Stable,
    /// More failovers in the window than the threshold.
    Flapping,
    /// No lease: never taken, or cleared by a resign.
    Leaderless,
    /// The lease deadline passed and no candidate took over, even after the
    /// stagger of every candidate.
    Stuck,
    /// The transaction coordinator knows no holder.
    Vacant,
}

impl RoleStatus {
    /// Every status, for metric series.
    pub const ALL: [RoleStatus; 5] = [
        RoleStatus::Stable,
        RoleStatus::Flapping,
        RoleStatus::Leaderless,
        RoleStatus::Stuck,
        RoleStatus::Vacant,
    ];

    /// The label used in JSON and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            RoleStatus::Stable => "stable",
            RoleStatus::Flapping => "flapping",
            RoleStatus::Leaderless => "leaderless",
            RoleStatus::Stuck => "stuck",
            RoleStatus::Vacant => "vacant",
        }
    }
}

/// The inputs of a status besides the folded state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusInputs {
    /// The service clock (epoch ms).
    pub now_ms: i64,
    /// The members' challenge stagger (ms).
    pub stagger_ms: i64,
    /// Failovers seen within the window.
    pub failovers_in_window: usize,
    /// More than this many failovers in the window is flapping.
    pub flapping_threshold: usize,
    /// The coordinator answered "no holder" at its last poll.
    pub coordinator_vacant: bool,
}

/// The status of `state`. The first that applies wins: vacant, leaderless,
/// stuck, flapping, stable.
pub fn status(state: &RoleState, inputs: &StatusInputs) -> RoleStatus {
    if inputs.coordinator_vacant {
        return RoleStatus::Vacant;
    }
    let Some(lease) = state.lease() else {
        return RoleStatus::Leaderless;
    };
    let challengers = state
        .members()
        .iter()
        .filter(|m| challenge_rank(state, &m.member).is_some())
        .count()
        .max(1);
    let last_turn = lease
        .deadline
        .saturating_add(inputs.stagger_ms.saturating_mul(challengers as i64));
    if inputs.now_ms >= last_turn {
        return RoleStatus::Stuck;
    }
    if inputs.failovers_in_window > inputs.flapping_threshold {
        return RoleStatus::Flapping;
    }
    RoleStatus::Stable
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordination::LogRecord;
    use crate::testkit::{lease_at, lease_record, registration_record, t};

    fn records(members: &[&str], holder: Option<&str>, deadline: i64) -> RoleState {
        let mut out: Vec<LogRecord> = members
            .iter()
            .enumerate()
            .map(|(i, m)| registration_record(i as i64, "r", m, 0))
            .collect();
        if let Some(h) = holder {
            let lease = lease_at(h, t(1, 1), deadline - 3000, deadline);
            out.push(lease_record(100, "r", &lease));
        }
        RoleState::from_records("r", &out)
    }

    fn inputs(now_ms: i64) -> StatusInputs {
        StatusInputs {
            now_ms,
            stagger_ms: 1000,
            failovers_in_window: 0,
            flapping_threshold: 3,
            coordinator_vacant: false,
        }
    }

    #[test]
    fn a_live_lease_is_stable_and_many_failovers_are_flapping() {
        let s = records(&["a", "b"], Some("a"), 10_000);
        assert_eq!(status(&s, &inputs(5_000)), RoleStatus::Stable);
        let busy = StatusInputs {
            failovers_in_window: 4,
            ..inputs(5_000)
        };
        assert_eq!(status(&s, &busy), RoleStatus::Flapping);
        let three = StatusInputs {
            failovers_in_window: 3,
            ..inputs(5_000)
        };
        assert_eq!(status(&s, &three), RoleStatus::Stable);
    }

    #[test]
    fn an_expired_lease_is_stuck_only_after_every_candidate_had_its_turn() {
        // Challengers b, c: turns at 10_000 and 11_000; stuck from 12_000.
        let s = records(&["a", "b", "c"], Some("a"), 10_000);
        assert_eq!(status(&s, &inputs(10_500)), RoleStatus::Stable);
        assert_eq!(status(&s, &inputs(11_999)), RoleStatus::Stable);
        assert_eq!(status(&s, &inputs(12_000)), RoleStatus::Stuck);
        // Nobody else registered: one stagger of grace.
        let alone = records(&["a"], Some("a"), 10_000);
        assert_eq!(status(&alone, &inputs(10_999)), RoleStatus::Stable);
        assert_eq!(status(&alone, &inputs(11_000)), RoleStatus::Stuck);
    }

    #[test]
    fn no_lease_is_leaderless_and_the_coordinator_decides_vacant() {
        let s = records(&["a"], None, 0);
        assert_eq!(status(&s, &inputs(0)), RoleStatus::Leaderless);
        let held = records(&["a"], Some("a"), 10_000);
        let vacant = StatusInputs {
            coordinator_vacant: true,
            ..inputs(0)
        };
        assert_eq!(status(&held, &vacant), RoleStatus::Vacant);
        assert_eq!(status(&s, &vacant), RoleStatus::Vacant);
    }
}
