//! What the views say of a role, computed from the watcher's [`RoleView`]:
//! its roster (members in rank order, the lease, the challengers in the
//! order they would challenge and when) and its line in the list of roles.
//! The HTTP views, the role page and the CLI's `roster` serialize these;
//! none computes them again.

use serde::Serialize;

use super::{CoordinatorView, RoleStatus, RoleView};
use crate::coordination::{FencingToken, challenge_at, challenge_rank};
use crate::time::Rfc3339Ms;

/// A registered member in rank order.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberView<'a> {
    /// The member id.
    pub member: &'a str,
    /// Its 0-based position in join order.
    pub rank: usize,
    /// The offset of its latest registration (its join sequence).
    pub offset: i64,
    /// When it registered, by its own clock.
    pub registered_at: Rfc3339Ms,
}

/// The current lease.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseView<'a> {
    /// The holder.
    pub member: &'a str,
    /// The holder's token.
    pub token: FencingToken,
    /// The lease record's offset.
    pub offset: Option<i64>,
    /// When it was written, by the holder's clock.
    pub granted_at: Rfc3339Ms,
    /// When standbys may challenge, by the holder's clock.
    pub deadline: Rfc3339Ms,
    /// The deadline as epoch milliseconds.
    pub deadline_ms: i64,
    /// True when the deadline has passed by the service clock.
    pub expired: bool,
    /// Milliseconds until the deadline by the service clock (negative once expired).
    pub remaining_ms: i64,
}

/// A member that may challenge, and when.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChallengerView<'a> {
    /// The member id.
    pub member: &'a str,
    /// Its rank: its place in join order, as in the members (0 first; the
    /// holder's place counts). The challengers are listed in the order they
    /// may challenge.
    pub rank: usize,
    /// When it may challenge, by the succession rules and the configured stagger.
    pub challenge_at: Rfc3339Ms,
}

/// A batch of the partition the view's reads stepped over.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkippedView {
    /// The offset of its first record.
    pub offset: i64,
    /// The offset of its last record.
    pub last_offset: i64,
    /// Its codec: `gzip`, `snappy`, `lz4` or `zstd`.
    pub compression: &'static str,
    /// The bound it decompresses past, in bytes.
    pub limit_bytes: usize,
}

/// How fresh a view is, and what it could not read.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Staleness {
    /// Every record below this offset of the partition is included, but
    /// those of the skipped batches.
    pub offset: i64,
    /// Milliseconds since `refreshed_at`.
    pub age_ms: u64,
    /// The instant the partition's log is known to have held nothing more
    /// (the watcher's module docs).
    pub refreshed_at: Rfc3339Ms,
    /// The partition's batches stepped over, their records unread: they
    /// decompress past the bound (the latest 16, oldest first).
    pub skipped_batches: Vec<SkippedView>,
}

/// The roster of one role.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RosterView<'a> {
    /// The role.
    pub role: &'a str,
    /// Its partition of the topic.
    pub partition: i32,
    /// Registered members in rank (join) order.
    pub members: Vec<MemberView<'a>>,
    /// The lease, or `null` when nobody holds one.
    pub lease: Option<LeaseView<'a>>,
    /// The members that would challenge next, in order.
    pub challengers: Vec<ChallengerView<'a>>,
    /// The role's status (the CLI's `roster` too: never flapping there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<RoleStatus>,
    /// Failovers within the status window.
    pub failovers_in_window: usize,
    /// What the coordinator said at its last poll; `null` before the first.
    pub coordinator: Option<&'a CoordinatorView>,
    /// The view's staleness.
    pub view: Staleness,
}

/// One line of `GET /roles`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleSummary<'a> {
    /// The role.
    pub role: &'a str,
    /// Its partition.
    pub partition: i32,
    /// The lease holder, if any.
    pub holder: Option<&'a str>,
    /// The holder's token, if any.
    pub token: Option<FencingToken>,
    /// The lease deadline, if any.
    pub deadline: Option<Rfc3339Ms>,
    /// True when the lease deadline has passed.
    pub expired: bool,
    /// Registered members.
    pub candidates: usize,
    /// The role's status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<RoleStatus>,
    /// Failovers within the status window.
    pub failovers_in_window: usize,
    /// The age of the role's view.
    pub age_ms: u64,
}

/// Builds the roster of one role at `now_ms`.
pub fn roster(view: &RoleView, now_ms: i64, stagger_ms: i64) -> RosterView<'_> {
    let state = &view.state;
    let members = state
        .members()
        .iter()
        .enumerate()
        .map(|(rank, m)| MemberView {
            member: &m.member,
            rank,
            offset: m.offset,
            registered_at: Rfc3339Ms(m.registered_at),
        })
        .collect();
    let lease = state.lease().map(|l| LeaseView {
        member: &l.member,
        token: l.token,
        offset: state.lease_offset(),
        granted_at: Rfc3339Ms(l.granted_at),
        deadline: Rfc3339Ms(l.deadline),
        deadline_ms: l.deadline,
        expired: now_ms >= l.deadline,
        remaining_ms: l.deadline.saturating_sub(now_ms),
    });
    // In challenge order (the succession rule's rank, the holder excluded),
    // each with its rank in join order.
    let mut challengers: Vec<(usize, ChallengerView<'_>)> = state
        .members()
        .iter()
        .enumerate()
        .filter_map(|(rank, m)| {
            Some((
                challenge_rank(state, &m.member)?,
                ChallengerView {
                    member: &m.member,
                    rank,
                    challenge_at: Rfc3339Ms(challenge_at(state, &m.member, stagger_ms)?),
                },
            ))
        })
        .collect();
    challengers.sort_by_key(|(order, _)| *order);
    let challengers = challengers.into_iter().map(|(_, c)| c).collect();
    RosterView {
        role: state.role(),
        partition: view.partition,
        members,
        lease,
        challengers,
        status: view.status,
        failovers_in_window: view.failovers_in_window,
        coordinator: view.coordinator.as_ref(),
        view: staleness(view),
    }
}

fn staleness(view: &RoleView) -> Staleness {
    Staleness {
        offset: view.offset,
        age_ms: view.age.as_millis() as u64,
        refreshed_at: Rfc3339Ms(view.refreshed_at_ms),
        skipped_batches: view
            .skipped
            .iter()
            .map(|b| SkippedView {
                offset: b.base_offset,
                last_offset: b.last_offset,
                compression: b.compression,
                limit_bytes: b.limit_bytes,
            })
            .collect(),
    }
}

/// The line of `view` in the list of roles at `now_ms`.
pub fn summary(view: &RoleView, now_ms: i64) -> RoleSummary<'_> {
    let lease = view.state.lease();
    RoleSummary {
        role: view.state.role(),
        partition: view.partition,
        holder: lease.map(|l| l.member.as_str()),
        token: lease.map(|l| l.token),
        deadline: lease.map(|l| Rfc3339Ms(l.deadline)),
        expired: lease.is_some_and(|l| now_ms >= l.deadline),
        candidates: view.state.members().len(),
        status: view.status,
        failovers_in_window: view.failovers_in_window,
        age_ms: view.age.as_millis() as u64,
    }
}
