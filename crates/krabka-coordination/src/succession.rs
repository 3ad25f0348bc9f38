//! The succession rules: what one member does next, given the state of its
//! role and the time.
//!
//! The stagger only saves epoch churn. Safety comes from the coordinator:
//! InitProducerId is atomic, so even a simultaneous challenge by every
//! standby leaves exactly one member with the newest epoch.

use super::FencingToken;
use super::record::Lease;
use super::state::RoleState;

/// The timing a member runs with, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SuccessionConfig {
    /// How long a lease lasts after it is written.
    pub lease_duration_ms: i64,
    /// How often the holder writes a fresh lease.
    pub renew_interval_ms: i64,
    /// The delay between the challenges of consecutive ranks.
    pub challenge_stagger_ms: i64,
}

impl SuccessionConfig {
    /// The lease a member writes at `now_ms` under `token`.
    pub fn grant(&self, member: &str, token: FencingToken, now_ms: i64) -> Lease {
        Lease {
            member: member.to_owned(),
            token,
            granted_at: now_ms,
            deadline: now_ms.saturating_add(self.lease_duration_ms),
        }
    }
}

/// One step of a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Not registered: append a registration first.
    Register,
    /// This member holds the lease: renew it at this instant.
    Renew {
        /// When the next renewal is due (epoch ms).
        at: i64,
    },
    /// Another member's turn, or not yet this member's: look again then.
    Wait {
        /// When this member may challenge (epoch ms).
        until: i64,
    },
    /// Mint the epoch now.
    Challenge,
}

/// The position of `member` among the registered members other than the
/// lease holder: 0 challenges first.
pub fn challenge_rank(state: &RoleState, member: &str) -> Option<usize> {
    let holder = state.lease().map(|l| l.member.as_str());
    if holder == Some(member) {
        return None;
    }
    state
        .members()
        .iter()
        .filter(|m| Some(m.member.as_str()) != holder)
        .position(|m| m.member == member)
}

/// The instant at which `member` may challenge, or `None` when it holds the
/// lease or is not registered.
///
/// With a lease held by another member, rank n (among the registered members
/// other than the holder) challenges at `deadline + n × stagger`; with no
/// lease, at `vacant_since + n × stagger`.
pub fn challenge_at(state: &RoleState, member: &str, stagger_ms: i64) -> Option<i64> {
    let rank = challenge_rank(state, member)?;
    let base = match state.lease() {
        Some(lease) => lease.deadline,
        None => state.vacant_since()?,
    };
    let delay = i64::try_from(rank)
        .unwrap_or(i64::MAX)
        .saturating_mul(stagger_ms.max(0));
    Some(base.saturating_add(delay))
}

/// Turns the state of a role into the next step of `me` at `now_ms`.
pub fn evaluate(state: &RoleState, me: &str, now_ms: i64, config: &SuccessionConfig) -> Decision {
    if state.rank_of(me).is_none() && state.lease().is_none_or(|l| l.member != me) {
        return Decision::Register;
    }
    if let Some(lease) = state.lease().filter(|l| l.member == me) {
        return Decision::Renew {
            at: lease.granted_at.saturating_add(config.renew_interval_ms),
        };
    }
    match challenge_at(state, me, config.challenge_stagger_ms) {
        Some(at) if now_ms < at => Decision::Wait { until: at },
        Some(_) => Decision::Challenge,
        // Registered but with no instant to wait for: cannot happen while
        // registered (vacant_since exists), but never stall on it.
        None => Decision::Challenge,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Key;
    use crate::state::LogRecord;
    use crate::testkit::{lease_at, lease_record, registration_record, t, tombstone};

    const CONFIG: SuccessionConfig = SuccessionConfig {
        lease_duration_ms: 30_000,
        renew_interval_ms: 10_000,
        challenge_stagger_ms: 5_000,
    };

    fn reg(offset: i64, member: &str, at: i64) -> LogRecord {
        registration_record(offset, "r", member, at)
    }

    fn lease(offset: i64, member: &str, granted_at: i64, deadline: i64) -> LogRecord {
        lease_record(
            offset,
            "r",
            &lease_at(member, t(1, 0), granted_at, deadline),
        )
    }

    fn clear(offset: i64) -> LogRecord {
        tombstone(offset, &Key::lease("r"))
    }

    fn state(records: &[LogRecord]) -> RoleState {
        RoleState::from_records("r", records)
    }

    #[test]
    fn a_grant_lasts_one_lease_duration() {
        let token = FencingToken::new(3, 4).unwrap();
        let lease = CONFIG.grant("a", token, 1_000);
        assert_eq!(
            lease,
            Lease {
                member: "a".into(),
                token,
                granted_at: 1_000,
                deadline: 31_000
            }
        );
    }

    #[test]
    fn an_unregistered_member_registers_first() {
        let s = state(&[reg(0, "a", 0)]);
        assert_eq!(evaluate(&s, "b", 0, &CONFIG), Decision::Register);
        assert_eq!(
            evaluate(&RoleState::new("r"), "a", 0, &CONFIG),
            Decision::Register
        );
    }

    #[test]
    fn the_holder_renews_one_interval_after_its_grant() {
        let s = state(&[reg(0, "a", 0), lease(1, "a", 1_000, 31_000)]);
        assert_eq!(
            evaluate(&s, "a", 2_000, &CONFIG),
            Decision::Renew { at: 11_000 }
        );
        // Still Renew after the deadline: only the broker can depose it.
        assert_eq!(
            evaluate(&s, "a", 99_000, &CONFIG),
            Decision::Renew { at: 11_000 }
        );
    }

    #[test]
    fn a_holder_that_deregistered_still_renews() {
        let s = state(&[lease(0, "a", 1_000, 31_000)]);
        assert_eq!(
            evaluate(&s, "a", 2_000, &CONFIG),
            Decision::Renew { at: 11_000 }
        );
    }

    #[test]
    fn rank_n_challenges_at_deadline_plus_n_staggers() {
        // Join order a (holder), b, c, d; challengers rank b=0, c=1, d=2.
        let s = state(&[
            reg(0, "a", 0),
            reg(1, "b", 0),
            reg(2, "c", 0),
            reg(3, "d", 0),
            lease(4, "a", 1_000, 31_000),
        ]);
        assert_eq!(
            evaluate(&s, "b", 30_999, &CONFIG),
            Decision::Wait { until: 31_000 }
        );
        assert_eq!(evaluate(&s, "b", 31_000, &CONFIG), Decision::Challenge);
        assert_eq!(
            evaluate(&s, "c", 31_000, &CONFIG),
            Decision::Wait { until: 36_000 }
        );
        assert_eq!(evaluate(&s, "c", 36_000, &CONFIG), Decision::Challenge);
        assert_eq!(
            evaluate(&s, "d", 40_000, &CONFIG),
            Decision::Wait { until: 41_000 }
        );
        assert_eq!(evaluate(&s, "d", 41_000, &CONFIG), Decision::Challenge);
    }

    #[test]
    fn the_holder_is_not_counted_in_challenger_rank() {
        // b holds; a ranks before b in join order but is challenger rank 0.
        let s = state(&[
            reg(0, "a", 0),
            reg(1, "b", 0),
            reg(2, "c", 0),
            lease(3, "b", 1_000, 31_000),
        ]);
        assert_eq!(challenge_at(&s, "a", 5_000), Some(31_000));
        assert_eq!(challenge_at(&s, "c", 5_000), Some(36_000));
        assert_eq!(challenge_at(&s, "b", 5_000), None);
        assert_eq!(challenge_at(&s, "z", 5_000), None);
    }

    #[test]
    fn a_recovered_member_waits_at_the_tail() {
        // a held, died, and registered again: it now ranks behind b and c.
        let s = state(&[
            reg(0, "a", 0),
            reg(1, "b", 0),
            reg(2, "c", 0),
            lease(3, "b", 1_000, 31_000),
            reg(4, "a", 20_000),
        ]);
        assert_eq!(
            evaluate(&s, "a", 31_000, &CONFIG),
            Decision::Wait { until: 36_000 }
        );
        assert_eq!(evaluate(&s, "c", 31_000, &CONFIG), Decision::Challenge);
    }

    #[test]
    fn a_role_never_taken_is_challenged_from_the_first_registration() {
        let s = state(&[reg(0, "a", 1_000), reg(1, "b", 1_200), reg(2, "c", 1_400)]);
        assert_eq!(evaluate(&s, "a", 1_000, &CONFIG), Decision::Challenge);
        assert_eq!(
            evaluate(&s, "b", 1_500, &CONFIG),
            Decision::Wait { until: 6_000 }
        );
        assert_eq!(evaluate(&s, "b", 6_000, &CONFIG), Decision::Challenge);
        assert_eq!(
            evaluate(&s, "c", 6_000, &CONFIG),
            Decision::Wait { until: 11_000 }
        );
    }

    #[test]
    fn a_cleared_lease_lets_rank_zero_take_over_at_once() {
        // a resigned: its lease was cleared and its registration removed.
        let mut records = vec![
            reg(0, "a", 0),
            reg(1, "b", 0),
            reg(2, "c", 0),
            lease(3, "a", 10_000, 40_000),
            clear(4),
        ];
        records.push(tombstone(5, &Key::registration("r", "a")));
        let mut s = state(&records);
        assert_eq!(evaluate(&s, "b", 10_001, &CONFIG), Decision::Challenge);
        // c observed the vacancy at 12_000: one stagger after that.
        s.observe_vacancy(12_000);
        assert_eq!(
            evaluate(&s, "c", 12_000, &CONFIG),
            Decision::Wait { until: 17_000 }
        );
        assert_eq!(evaluate(&s, "b", 12_000, &CONFIG), Decision::Challenge);
    }

    #[test]
    fn extreme_instants_saturate_instead_of_overflowing() {
        let s = state(&[
            reg(0, "a", 0),
            reg(1, "b", 0),
            reg(2, "c", 0),
            lease(3, "a", i64::MAX, i64::MAX),
        ]);
        let huge = SuccessionConfig {
            challenge_stagger_ms: i64::MAX,
            ..CONFIG
        };
        assert_eq!(
            evaluate(&s, "c", i64::MAX - 1, &huge),
            Decision::Wait { until: i64::MAX }
        );
        assert_eq!(
            evaluate(&s, "a", 0, &huge),
            Decision::Renew { at: i64::MAX }
        );
    }
}
