//! The role tracker of one partition: records and coordinator answers in,
//! changes and per-role facts out. Pure: the instant is an argument, and
//! what the shell must do (count a failover, send an event, set a metric)
//! comes back as [`Effect`]s.
//!
//! The rules:
//! - a lease record whose member differs from the previous lease's is a
//!   takeover (a failover, unless it is the role's first lease); the same
//!   member again is a renewal;
//! - the pair moving up (a lease under a newer token, or the coordinator
//!   reporting a newer pair) is an epoch change;
//! - a role is leaderless from the lapse of its lease (its deadline passed,
//!   or a clear) until the next takeover;
//! - failovers and epoch changes count only once the partition has caught
//!   up with its last stable offset: records before that are history the
//!   service did not see happen.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;

use super::status::{RoleStatus, StatusInputs, status};
use crate::cluster::Described;
use crate::coordination::{
    Applied, Change, FencingToken, FormatError, LogRecord, PartitionState, RoleState,
};
use crate::time::Rfc3339Ms;

/// Settings of the rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrackerConfig {
    /// The members' challenge stagger (ms), for `stuck`.
    pub stagger_ms: i64,
    /// The window over which failovers count for `flapping` (ms).
    pub status_window_ms: i64,
    /// More failovers than this within the window is `flapping`.
    pub flapping_threshold: usize,
    /// Changes kept per role for resuming event streams.
    pub history: usize,
}

/// What the coordinator said of a role at its last poll.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CoordinatorView {
    /// The current pair; `None` when no member holds the role.
    pub current: Option<FencingToken>,
    /// The transaction state.
    pub state: Option<String>,
    /// When it was asked.
    pub checked_at: Rfc3339Ms,
}

/// The kind of one change of a role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// A member registered (or came back, at the tail).
    Registered,
    /// A member's registration was removed.
    Deregistered,
    /// A member took the lease (first lease, or a takeover).
    Acquired,
    /// The holder renewed its lease.
    Renewed,
    /// The lease was cleared (a resign).
    Cleared,
}

impl ChangeKind {
    /// The name of the change, as event streams send it.
    pub fn as_str(&self) -> &'static str {
        match self {
            ChangeKind::Registered => "registered",
            ChangeKind::Deregistered => "deregistered",
            ChangeKind::Acquired => "acquired",
            ChangeKind::Renewed => "renewed",
            ChangeKind::Cleared => "cleared",
        }
    }
}

/// One change of one role, as the event stream sends it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleEvent {
    /// The role.
    pub role: String,
    /// The offset of the record that made the change: the event id.
    pub offset: i64,
    /// What changed.
    pub kind: ChangeKind,
    /// The member the record names.
    pub member: Option<String>,
    /// The lease holder after the change.
    pub holder: Option<String>,
    /// The holder's token after the change.
    pub token: Option<FencingToken>,
    /// The lease deadline after the change.
    pub deadline: Option<Rfc3339Ms>,
    /// When the watcher applied it.
    pub at: Rfc3339Ms,
}

/// What the shell must do after a record or an answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// A role appeared in the topic.
    RoleAdded(String),
    /// A role left the topic: drop its series.
    RoleRemoved(String),
    /// The role's holder changed from one member to another.
    Failover(String),
    /// The role's pair moved on: a later epoch, or another producer id.
    EpochChange(String),
    /// A role got a holder again after this many seconds without one.
    Leaderless(f64),
    /// The coordinator's current pair of a role.
    Pair(String, Option<FencingToken>),
    /// The role's facts after a change.
    Facts {
        /// The role.
        role: String,
        /// The lease holder.
        holder: Option<String>,
        /// Registered members.
        candidates: usize,
        /// The lease deadline (epoch ms).
        deadline: Option<i64>,
    },
    /// A record that does not decode; it is skipped.
    Malformed {
        /// Its offset.
        offset: i64,
        /// What is wrong with it.
        error: FormatError,
        /// Read after the partition caught up (a new one, not history).
        live: bool,
    },
    /// A change to send to event streams.
    Event(RoleEvent),
}

#[derive(Debug, Default)]
struct Track {
    last_lease_member: Option<String>,
    last_token: Option<FencingToken>,
    failovers: VecDeque<i64>,
    coordinator: Option<CoordinatorView>,
    lapsed_since: Option<i64>,
    history: VecDeque<RoleEvent>,
    /// Every change at or above this offset is in `history` (raised when an
    /// old change is dropped).
    history_from: i64,
}

/// One role as the views show it.
#[derive(Clone, Debug)]
pub struct RoleFacts {
    /// The folded state, shared with the tracker.
    pub state: Arc<RoleState>,
    /// The role's status.
    pub status: RoleStatus,
    /// Failovers within the status window.
    pub failovers_in_window: usize,
    /// The coordinator's view at the last poll.
    pub coordinator: Option<CoordinatorView>,
}

/// Every role of one partition.
#[derive(Debug)]
pub struct PartitionTracker {
    config: TrackerConfig,
    state: PartitionState,
    tracks: HashMap<String, Track>,
    caught_up: bool,
    /// The read position when the partition first caught up: changes from
    /// here on are live and kept in history.
    live_from: i64,
}

impl PartitionTracker {
    /// An empty partition.
    pub fn new(config: TrackerConfig) -> PartitionTracker {
        PartitionTracker {
            config,
            state: PartitionState::new(),
            tracks: HashMap::new(),
            caught_up: false,
            live_from: 0,
        }
    }

    /// Every record below this offset was applied.
    pub fn next_offset(&self) -> i64 {
        self.state.next_offset()
    }

    /// True once the partition caught up with its last stable offset.
    pub fn caught_up(&self) -> bool {
        self.caught_up
    }

    /// Roles with records.
    pub fn roles(&self) -> impl Iterator<Item = &str> {
        self.state.roles().map(RoleState::role)
    }

    /// Applies one record read at `now_ms`.
    pub fn apply(&mut self, record: &LogRecord, now_ms: i64, out: &mut Vec<Effect>) {
        let counting = self.caught_up;
        let (role, change, removed) = match self.state.apply(record) {
            Applied::Role {
                role,
                change,
                removed,
                malformed,
            } => {
                if let Some(m) = malformed {
                    out.push(Effect::Malformed {
                        offset: m.offset,
                        error: m.error,
                        live: counting,
                    });
                }
                (role, change, removed)
            }
            Applied::MalformedKey(error) => {
                out.push(Effect::Malformed {
                    offset: record.offset,
                    error,
                    live: counting,
                });
                return;
            }
            Applied::Replayed => return,
        };
        let current = self.state.role(&role).and_then(|s| s.lease().cloned());
        if !self.tracks.contains_key(&role) {
            out.push(Effect::RoleAdded(role.clone()));
        }
        let track = self.tracks.entry(role.clone()).or_default();
        let (kind, member) = match change {
            Change::None => return,
            Change::Registered(m) => (ChangeKind::Registered, Some(m)),
            Change::Deregistered(m) => (ChangeKind::Deregistered, Some(m)),
            Change::Cleared { previous } => {
                track.lapsed_since = Some(now_ms);
                (ChangeKind::Cleared, previous.map(|l| l.member))
            }
            Change::Leased { previous } => {
                let Some(lease) = &current else { return };
                let takeover = track.last_lease_member.as_deref() != Some(lease.member.as_str());
                // A lease after a clear is an acquisition too, but by the
                // same member it is no failover.
                let acquired = takeover || track.lapsed_since.is_some();
                if takeover && counting && track.last_lease_member.is_some() {
                    out.push(Effect::Failover(role.clone()));
                    track.failovers.push_back(now_ms);
                }
                if track
                    .last_token
                    .is_none_or(|t| lease.token.moved_on_from(&t))
                {
                    if counting && track.last_token.is_some() {
                        out.push(Effect::EpochChange(role.clone()));
                    }
                    track.last_token = Some(lease.token);
                }
                let lapse = track.lapsed_since.take().or_else(|| {
                    previous
                        .as_ref()
                        .map(|p| p.deadline)
                        .filter(|d| *d < now_ms)
                });
                if let Some(since) = lapse.filter(|_| counting && acquired) {
                    out.push(Effect::Leaderless((now_ms - since).max(0) as f64 / 1000.0));
                }
                track.last_lease_member = Some(lease.member.clone());
                let kind = if acquired {
                    ChangeKind::Acquired
                } else {
                    ChangeKind::Renewed
                };
                (kind, Some(lease.member.clone()))
            }
        };
        let event = RoleEvent {
            role: role.clone(),
            offset: record.offset,
            kind,
            member,
            holder: current.as_ref().map(|l| l.member.clone()),
            token: current.as_ref().map(|l| l.token),
            deadline: current.as_ref().map(|l| Rfc3339Ms(l.deadline)),
            at: Rfc3339Ms(now_ms),
        };
        if counting {
            track.history.push_back(event.clone());
            while track.history.len() > self.config.history {
                if let Some(dropped) = track.history.pop_front() {
                    track.history_from = dropped.offset + 1;
                }
            }
        }
        if removed {
            // The role left the topic; a later comeback starts a new history.
            self.tracks.remove(&role);
            out.push(Effect::RoleRemoved(role));
        } else if let Some(state) = self.state.role(&role) {
            out.push(Effect::Facts {
                role: role.clone(),
                holder: state.lease().map(|l| l.member.clone()),
                candidates: state.members().len(),
                deadline: state.lease().map(|l| l.deadline),
            });
        }
        out.push(Effect::Event(event));
    }

    /// Moves the read position to `next_offset` (records below it were all
    /// applied); returns the records still behind the last stable offset.
    /// The first time nothing is behind, the partition has caught up.
    pub fn advance(&mut self, next_offset: i64, last_stable_offset: i64) -> i64 {
        self.state.advance_to(next_offset);
        let lag = (last_stable_offset - self.state.next_offset()).max(0);
        if lag == 0 && !self.caught_up {
            self.caught_up = true;
            self.live_from = self.state.next_offset();
        }
        lag
    }

    /// What the coordinator answered for `role` at `now_ms`.
    pub fn observe_coordinator(
        &mut self,
        role: &str,
        described: &Described,
        now_ms: i64,
        out: &mut Vec<Effect>,
    ) {
        let counting = self.caught_up;
        let Some(track) = self.tracks.get_mut(role) else {
            return;
        };
        if let Some(pair) = described.current
            && track.last_token.is_none_or(|t| pair.moved_on_from(&t))
        {
            if counting && track.last_token.is_some() {
                out.push(Effect::EpochChange(role.to_owned()));
            }
            track.last_token = Some(pair);
        }
        out.push(Effect::Pair(role.to_owned(), described.current));
        track.coordinator = Some(CoordinatorView {
            current: described.current,
            state: described.state.clone(),
            checked_at: Rfc3339Ms(now_ms),
        });
    }

    /// Forgets failovers older than the window; returns every role's
    /// status and lease deadline at `now_ms`.
    pub fn statuses(&mut self, now_ms: i64) -> Vec<(String, RoleStatus, Option<i64>)> {
        let oldest = now_ms.saturating_sub(self.config.status_window_ms);
        let mut out = Vec::new();
        for state in self.state.roles() {
            let track = self.tracks.entry(state.role().to_owned()).or_default();
            while track.failovers.front().is_some_and(|t| *t < oldest) {
                track.failovers.pop_front();
            }
            let s = status_of(&self.config, state, track, now_ms);
            out.push((
                state.role().to_owned(),
                s,
                state.lease().map(|l| l.deadline),
            ));
        }
        out
    }

    /// One role's facts at `now_ms`; `None` when the topic holds no record
    /// of it.
    pub fn facts(&self, role: &str, now_ms: i64) -> Option<RoleFacts> {
        let state = self.state.role_shared(role)?;
        Some(self.facts_of(state, now_ms))
    }

    /// Every role's facts at `now_ms`.
    pub fn all_facts(&self, now_ms: i64) -> Vec<RoleFacts> {
        self.state
            .roles_shared()
            .map(|s| self.facts_of(s.clone(), now_ms))
            .collect()
    }

    fn facts_of(&self, state: Arc<RoleState>, now_ms: i64) -> RoleFacts {
        let default = Track::default();
        let track = self.tracks.get(state.role()).unwrap_or(&default);
        let oldest = now_ms.saturating_sub(self.config.status_window_ms);
        RoleFacts {
            status: status_of(&self.config, &state, track, now_ms),
            failovers_in_window: track.failovers.iter().filter(|t| **t >= oldest).count(),
            coordinator: track.coordinator.clone(),
            state,
        }
    }

    /// The kept changes of `role` after `offset`, oldest first, and whether
    /// they are all of them (else some were dropped or happened before the
    /// service was watching).
    pub fn history(&self, role: &str, after: i64) -> (Vec<RoleEvent>, bool) {
        // An id this service has not reached (another topic of the same
        // name, another cluster) cannot be resumed from.
        if !self.caught_up || after >= self.state.next_offset() {
            return (Vec::new(), false);
        }
        let (events, kept_from) = match self.tracks.get(role) {
            Some(track) => (
                track
                    .history
                    .iter()
                    .filter(|e| e.offset > after)
                    .cloned()
                    .collect(),
                track.history_from.max(self.live_from),
            ),
            None => (Vec::new(), self.live_from),
        };
        (events, after.saturating_add(1) >= kept_from)
    }
}

fn status_of(config: &TrackerConfig, state: &RoleState, track: &Track, now_ms: i64) -> RoleStatus {
    let oldest = now_ms.saturating_sub(config.status_window_ms);
    status(
        state,
        &StatusInputs {
            now_ms,
            stagger_ms: config.stagger_ms,
            failovers_in_window: track.failovers.iter().filter(|t| **t >= oldest).count(),
            flapping_threshold: config.flapping_threshold,
            coordinator_vacant: track
                .coordinator
                .as_ref()
                .is_some_and(|c| c.current.is_none()),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordination::{Key, encode_key};
    use crate::testkit::{lease_at, lease_record, registration_record, t, tombstone};

    const CONFIG: TrackerConfig = TrackerConfig {
        stagger_ms: 1_000,
        status_window_ms: 60_000,
        flapping_threshold: 1,
        history: 3,
    };

    struct Log {
        tracker: PartitionTracker,
        next: i64,
    }

    impl Log {
        fn new() -> Log {
            Log {
                tracker: PartitionTracker::new(CONFIG),
                next: 0,
            }
        }

        /// Appends `record` at the next offset.
        fn append(&mut self, mut record: LogRecord, now_ms: i64) -> Vec<Effect> {
            record.offset = self.next;
            self.next += 1;
            let mut out = Vec::new();
            self.tracker.apply(&record, now_ms, &mut out);
            self.tracker.advance(self.next, self.next);
            out
        }

        fn push(&mut self, key: Vec<u8>, value: Option<Vec<u8>>, now_ms: i64) -> Vec<Effect> {
            let record = LogRecord {
                offset: 0,
                key: key.into(),
                value: value.map(Into::into),
            };
            self.append(record, now_ms)
        }

        fn register(&mut self, member: &str, now_ms: i64) -> Vec<Effect> {
            self.append(registration_record(0, "r", member, now_ms), now_ms)
        }

        fn lease(
            &mut self,
            member: &str,
            token: FencingToken,
            now_ms: i64,
            deadline: i64,
        ) -> Vec<Effect> {
            let lease = lease_at(member, token, now_ms, deadline);
            self.append(lease_record(0, "r", &lease), now_ms)
        }

        fn clear(&mut self, now_ms: i64) -> Vec<Effect> {
            self.append(tombstone(0, &Key::lease("r")), now_ms)
        }
    }

    fn kinds(effects: &[Effect]) -> Vec<&'static str> {
        effects
            .iter()
            .map(|e| match e {
                Effect::RoleAdded(_) => "added",
                Effect::RoleRemoved(_) => "removed",
                Effect::Failover(_) => "failover",
                Effect::EpochChange(_) => "epoch",
                Effect::Leaderless(_) => "leaderless",
                Effect::Pair(..) => "coordinator",
                Effect::Facts { .. } => "facts",
                Effect::Malformed { .. } => "malformed",
                Effect::Event(e) => e.kind.as_str(),
            })
            .collect()
    }

    #[test]
    fn a_renewal_is_not_a_failover_and_a_takeover_is_one_with_an_epoch_change() {
        let mut log = Log::new();
        assert_eq!(
            kinds(&log.register("a", 0)),
            ["added", "facts", "registered"]
        );
        log.register("b", 0);
        assert_eq!(
            kinds(&log.lease("a", t(1, 0), 10, 3_000)),
            ["facts", "acquired"]
        );
        assert_eq!(
            kinds(&log.lease("a", t(1, 0), 1_000, 4_000)),
            ["facts", "renewed"]
        );
        // b takes over after a's deadline: a failover, an epoch change, and
        // the time without a holder since the deadline.
        let effects = log.lease("b", t(1, 1), 5_500, 8_500);
        assert_eq!(
            kinds(&effects),
            ["failover", "epoch", "leaderless", "facts", "acquired"]
        );
        assert!(effects.contains(&Effect::Leaderless(1.5)), "{effects:?}");
    }

    #[test]
    fn nothing_counts_before_the_partition_caught_up() {
        let mut tracker = PartitionTracker::new(CONFIG);
        let mut out = Vec::new();
        for (offset, member, epoch) in [(0, "a", 0), (1, "b", 1), (2, "a", 2)] {
            let record = lease_record(offset, "r", &lease_at(member, t(1, epoch), 0, 1));
            tracker.apply(&record, 100, &mut out);
        }
        assert!(
            !kinds(&out).contains(&"failover") && !kinds(&out).contains(&"epoch"),
            "{out:?}"
        );
        out.clear();
        let garbage = LogRecord {
            offset: 3,
            key: vec![0, 9].into(),
            value: None,
        };
        tracker.apply(&garbage, 100, &mut out);
        assert!(
            matches!(out[..], [Effect::Malformed { live: false, .. }]),
            "a malformed record of the history is reported, not counted: {out:?}"
        );
        assert_eq!(tracker.advance(4, 5), 1, "one record behind");
        assert!(!tracker.caught_up());
        assert_eq!(tracker.advance(5, 5), 0);
        assert!(tracker.caught_up());
        assert_eq!(
            tracker.history("r", 4),
            (Vec::new(), true),
            "live from offset 5"
        );
        assert!(
            !tracker.history("r", 2).1,
            "changes before catching up are not kept"
        );
    }

    #[test]
    fn a_clear_makes_the_role_leaderless_until_the_next_lease() {
        let mut log = Log::new();
        log.register("a", 0);
        log.lease("a", t(1, 0), 0, 10_000);
        assert_eq!(kinds(&log.clear(2_000)), ["facts", "cleared"]);
        let mut tracker_status = log.tracker.statuses(2_500);
        assert_eq!(
            tracker_status.pop().map(|s| s.1),
            Some(RoleStatus::Leaderless)
        );
        let effects = log.lease("a", t(1, 1), 4_000, 14_000);
        assert!(effects.contains(&Effect::Leaderless(2.0)), "{effects:?}");
        assert!(
            !kinds(&effects).contains(&"failover"),
            "the same member is no failover"
        );
        assert!(
            kinds(&effects).contains(&"acquired"),
            "a lease after a clear is acquired"
        );
    }

    #[test]
    fn a_newer_coordinator_pair_is_an_epoch_change_and_vacant_shows_in_the_status() {
        let mut log = Log::new();
        log.register("a", 0);
        log.lease("a", t(1, 0), 0, 100_000);
        let mut out = Vec::new();
        let newer = Described {
            current: Some(t(1, 1)),
            state: Some("Empty".into()),
        };
        log.tracker.observe_coordinator("r", &newer, 10, &mut out);
        assert_eq!(kinds(&out), ["epoch", "coordinator"]);
        out.clear();
        log.tracker.observe_coordinator("r", &newer, 20, &mut out);
        assert_eq!(
            kinds(&out),
            ["coordinator"],
            "the same pair again is no change"
        );
        let facts = log.tracker.facts("r", 30).unwrap();
        assert_eq!(facts.status, RoleStatus::Stable);
        assert_eq!(facts.coordinator.unwrap().current, Some(t(1, 1)));
        log.tracker.observe_coordinator(
            "r",
            &Described {
                current: None,
                state: None,
            },
            40,
            &mut out,
        );
        assert_eq!(
            log.tracker.facts("r", 50).unwrap().status,
            RoleStatus::Vacant
        );
    }

    #[test]
    fn failovers_beyond_the_threshold_within_the_window_are_flapping_then_age_out() {
        let mut log = Log::new();
        log.register("a", 0);
        log.register("b", 0);
        log.lease("a", t(1, 0), 0, 1_000_000);
        log.lease("b", t(1, 1), 1_000, 1_000_000);
        assert_eq!(
            log.tracker.facts("r", 2_000).unwrap().status,
            RoleStatus::Stable
        );
        log.lease("a", t(1, 2), 2_000, 1_000_000);
        let facts = log.tracker.facts("r", 3_000).unwrap();
        assert_eq!(
            (facts.status, facts.failovers_in_window),
            (RoleStatus::Flapping, 2)
        );
        let later = log.tracker.statuses(70_000);
        assert_eq!(
            later[0].1,
            RoleStatus::Stable,
            "the failovers left the window"
        );
    }

    #[test]
    fn an_expired_lease_with_no_taker_is_stuck_after_every_turn() {
        let mut log = Log::new();
        log.register("a", 0);
        log.register("b", 0);
        log.lease("a", t(1, 0), 0, 10_000);
        assert_eq!(
            log.tracker.facts("r", 10_500).unwrap().status,
            RoleStatus::Stable
        );
        assert_eq!(
            log.tracker.facts("r", 11_000).unwrap().status,
            RoleStatus::Stuck
        );
    }

    #[test]
    fn history_keeps_the_last_changes_and_says_when_it_is_incomplete() {
        let mut log = Log::new();
        log.tracker.advance(0, 0);
        for i in 0..5 {
            log.register(&format!("m{i}"), 0);
        }
        let (events, complete) = log.tracker.history("r", 1);
        assert_eq!(
            events.iter().map(|e| e.offset).collect::<Vec<_>>(),
            [2, 3, 4]
        );
        assert!(complete, "offsets 2..4 are all kept");
        let (_, complete) = log.tracker.history("r", 0);
        assert!(!complete, "offset 1 was dropped");
        assert!(!log.tracker.history("r", 5).1, "an id not reached yet");
    }

    #[test]
    fn a_removed_role_drops_its_series_and_malformed_records_are_reported() {
        let mut log = Log::new();
        log.register("a", 0);
        let effects = log.push(encode_key(&Key::registration("r", "a")).unwrap(), None, 1);
        assert_eq!(kinds(&effects), ["removed", "deregistered"]);
        let effects = log.push(vec![0, 9, 9], Some(vec![1]), 2);
        assert_eq!(kinds(&effects), ["malformed"]);
    }
}
