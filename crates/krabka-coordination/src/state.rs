//! The state of a role folded from its partition: the roster in join order
//! and the current lease.
//!
//! Rank comes from the log: a member's join sequence is the offset of its
//! latest registration, so a recovered member that registers again lands at
//! the tail (the no-failback rule) without any counter or coordinator.

use bytes::Bytes;

use super::record::{
    FormatError, KeyKind, Lease, Part, decode_key, decode_lease, decode_registration,
};

/// One record of `__coordination_state` as read from the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    /// The record's offset in its partition.
    pub offset: i64,
    /// The raw key bytes.
    pub key: Bytes,
    /// The raw value bytes; `None` (or empty) is a tombstone.
    pub value: Option<Bytes>,
}

/// A record batch of `__coordination_state` a read stepped over without
/// reading its records: compressed, it decompresses to more than the
/// reader's bound (a member wrote a decompression bomb, or a batch larger
/// than the bound allows).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedBatch {
    /// The offset of its first record.
    pub base_offset: i64,
    /// The offset of its last record.
    pub last_offset: i64,
    /// Its codec, by Kafka's name: `gzip`, `snappy`, `lz4` or `zstd`.
    pub compression: &'static str,
    /// The bound it passed: the most bytes a batch may decompress to.
    pub limit_bytes: usize,
}

/// A registered member, in join order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The member id.
    pub member: String,
    /// The offset of its latest registration: its join sequence.
    pub offset: i64,
    /// When it registered, by its own clock (epoch milliseconds).
    pub registered_at: i64,
}

/// A record that did not decode; reported, never fatal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed {
    /// Where it sits in the partition.
    pub offset: i64,
    /// What was wrong with it.
    pub error: FormatError,
}

/// The roster and lease of one role.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoleState {
    role: String,
    members: Vec<Member>,
    lease: Option<Lease>,
    lease_offset: Option<i64>,
    vacant_since: Option<i64>,
    last_offset: Option<i64>,
    malformed: Vec<Malformed>,
}

/// What one applied record changed, for callers that keep history (metrics,
/// event streams).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A member registered (or registered again, moving to the tail).
    Registered(String),
    /// A member's registration was removed by a tombstone.
    Deregistered(String),
    /// A lease record was written; `previous` is the lease it replaced.
    Leased {
        /// The lease before this record, if any.
        previous: Option<Lease>,
    },
    /// The lease was cleared by a tombstone.
    Cleared {
        /// The lease that was cleared, if any.
        previous: Option<Lease>,
    },
    /// Nothing changed: a duplicate, a tombstone of nothing, or a malformed value.
    None,
}

impl RoleState {
    /// An empty state of a role, before any record.
    pub fn new(role: impl Into<String>) -> RoleState {
        RoleState {
            role: role.into(),
            ..RoleState::default()
        }
    }

    /// Folds a partition's records, in offset order, into the state of `role`.
    ///
    /// Records of other roles are dropped; malformed records are reported in
    /// [`RoleState::malformed`] and skipped.
    pub fn from_records(role: &str, records: &[LogRecord]) -> RoleState {
        let mut state = RoleState::new(role);
        for record in records {
            match decode_key(&record.key) {
                Ok(key) if key.role == role => {
                    state.apply(
                        record.offset,
                        key.kind,
                        &key.member,
                        record.value.as_deref(),
                    );
                }
                Ok(_) => {}
                Err(error) => state.malformed.push(Malformed {
                    offset: record.offset,
                    error,
                }),
            }
        }
        state
    }

    /// Applies one record whose key already decoded to this role.
    ///
    /// Records at or below the last applied offset are ignored, so re-reading
    /// an overlapping range is harmless.
    pub fn apply(
        &mut self,
        offset: i64,
        kind: KeyKind,
        member: &str,
        value: Option<&[u8]>,
    ) -> Change {
        if self.last_offset.is_some_and(|last| offset <= last) {
            return Change::None;
        }
        self.last_offset = Some(offset);
        let value = value.filter(|v| !v.is_empty());
        match (kind, value) {
            (KeyKind::Registration, Some(bytes)) => match decode_registration(bytes) {
                Ok(reg) if reg.member == member => {
                    self.members.retain(|m| m.member != member);
                    self.members.push(Member {
                        member: reg.member,
                        offset,
                        registered_at: reg.registered_at,
                    });
                    Change::Registered(member.to_owned())
                }
                Ok(reg) => self.inconsistent(
                    offset,
                    Part::RegistrationValue,
                    format!(
                        "member {:?} differs from the key's member {member:?}",
                        reg.member
                    ),
                ),
                Err(error) => {
                    self.malformed.push(Malformed { offset, error });
                    Change::None
                }
            },
            (KeyKind::Registration, None) => {
                let before = self.members.len();
                self.members.retain(|m| m.member != member);
                if self.members.len() == before {
                    Change::None
                } else {
                    Change::Deregistered(member.to_owned())
                }
            }
            (KeyKind::Lease, Some(bytes)) => match decode_lease(bytes) {
                Ok(lease) => {
                    self.vacant_since = None;
                    self.lease_offset = Some(offset);
                    Change::Leased {
                        previous: self.lease.replace(lease),
                    }
                }
                Err(error) => {
                    self.malformed.push(Malformed { offset, error });
                    Change::None
                }
            },
            (KeyKind::Lease, None) => {
                let previous = self.lease.take();
                self.lease_offset = None;
                if let Some(cleared) = &previous {
                    // The resign happened at or after the last grant.
                    self.vacant_since = Some(cleared.granted_at);
                }
                Change::Cleared { previous }
            }
        }
    }

    fn inconsistent(&mut self, offset: i64, part: Part, reason: String) -> Change {
        self.malformed.push(Malformed {
            offset,
            error: FormatError::inconsistent(part, reason),
        });
        Change::None
    }

    /// The role this state belongs to.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// The registered members in join order (rank 0 first).
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The 0-based position of `member` in join order.
    pub fn rank_of(&self, member: &str) -> Option<usize> {
        self.members.iter().position(|m| m.member == member)
    }

    /// The current lease, if one is held.
    pub fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref()
    }

    /// The offset of the current lease record.
    pub fn lease_offset(&self) -> Option<i64> {
        self.lease_offset
    }

    /// The offset of the last record applied to this role.
    pub fn last_offset(&self) -> Option<i64> {
        self.last_offset
    }

    /// Malformed records of this role (and, from `from_records`, undecodable keys).
    pub fn malformed(&self) -> &[Malformed] {
        &self.malformed
    }

    /// Drops the list of malformed records once a caller has counted them.
    pub fn take_malformed(&mut self) -> Vec<Malformed> {
        std::mem::take(&mut self.malformed)
    }

    /// True when no record of the role is left: no member, no lease.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.lease.is_none()
    }

    /// Since when the role has had no lease, as far as the log tells: the
    /// grant of a cleared lease, or for a role never taken the registration
    /// instant of rank 0. `None` while a lease is held or nobody is registered.
    pub fn vacant_since(&self) -> Option<i64> {
        if self.lease.is_some() {
            return None;
        }
        let first = self.members.first().map(|m| m.registered_at);
        match (self.vacant_since, first) {
            (Some(cleared), Some(first)) => Some(cleared.max(first)),
            (Some(cleared), None) => Some(cleared),
            (None, first) => first,
        }
    }

    /// Raises the vacancy instant to one a member observed itself (it never
    /// moves it earlier). A member that saw the lease present at `t` knows
    /// the vacancy began no earlier than `t`.
    pub fn observe_vacancy(&mut self, observed_at: i64) {
        if self.lease.is_none() {
            self.vacant_since = Some(
                self.vacant_since
                    .map_or(observed_at, |v| v.max(observed_at)),
            );
        }
    }
}

/// Every role of one partition, folded record by record: what a reader of
/// the whole topic keeps (the service's roster views, the watcher).
///
/// Roles are shared (`Arc`): a reader takes a role without copying it, and
/// a record applied while a reader holds it copies that one role first.
#[derive(Clone, Debug, Default)]
pub struct PartitionState {
    roles: std::collections::BTreeMap<String, std::sync::Arc<RoleState>>,
    next_offset: i64,
    malformed_keys: u64,
}

/// What one record did to a [`PartitionState`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The record changed (or left unchanged) this role.
    Role {
        /// The role.
        role: String,
        /// What changed.
        change: Change,
        /// True when the role has no record left and was dropped.
        removed: bool,
        /// The record's value did not decode (or disagreed with its key).
        malformed: Option<Malformed>,
    },
    /// The key did not decode; the record was skipped.
    MalformedKey(FormatError),
    /// At or below an offset already applied.
    Replayed,
}

impl PartitionState {
    /// An empty partition, to be read from offset 0.
    pub fn new() -> PartitionState {
        PartitionState::default()
    }

    /// Applies one record in offset order.
    pub fn apply(&mut self, record: &LogRecord) -> Applied {
        if record.offset < self.next_offset {
            return Applied::Replayed;
        }
        self.next_offset = record.offset + 1;
        let key = match decode_key(&record.key) {
            Ok(key) => key,
            Err(error) => {
                self.malformed_keys += 1;
                return Applied::MalformedKey(error);
            }
        };
        let state = std::sync::Arc::make_mut(
            self.roles
                .entry(key.role.clone())
                .or_insert_with(|| std::sync::Arc::new(RoleState::new(key.role.clone()))),
        );
        let change = state.apply(
            record.offset,
            key.kind,
            &key.member,
            record.value.as_deref(),
        );
        // Taken here, not left on the state: a role with nothing valid yet
        // is dropped below, and its malformed record must still be reported.
        let malformed = state.take_malformed().pop();
        let removed = state.is_empty();
        if removed {
            self.roles.remove(&key.role);
        }
        Applied::Role {
            role: key.role,
            change,
            removed,
            malformed,
        }
    }

    /// Notes that the log was read up to `next_offset` (compaction and
    /// control records leave gaps).
    pub fn advance_to(&mut self, next_offset: i64) {
        self.next_offset = self.next_offset.max(next_offset);
    }

    /// The offset the next read starts from.
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// One role's state.
    pub fn role(&self, role: &str) -> Option<&RoleState> {
        self.roles.get(role).map(|r| &**r)
    }

    /// One role's state, shared without a copy.
    pub fn role_shared(&self, role: &str) -> Option<std::sync::Arc<RoleState>> {
        self.roles.get(role).cloned()
    }

    /// Every role with records, by name.
    pub fn roles(&self) -> impl Iterator<Item = &RoleState> {
        self.roles.values().map(|r| &**r)
    }

    /// Every role with records, by name, shared without a copy.
    pub fn roles_shared(&self) -> impl Iterator<Item = &std::sync::Arc<RoleState>> {
        self.roles.values()
    }

    /// How many records had keys that did not decode.
    pub fn malformed_keys(&self) -> u64 {
        self.malformed_keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Key, encode_key};
    use crate::testkit::{lease_at, lease_record, registration_record, t, tombstone};

    fn reg(offset: i64, role: &str, member: &str, at: i64) -> LogRecord {
        registration_record(offset, role, member, at)
    }

    fn dereg(offset: i64, role: &str, member: &str) -> LogRecord {
        tombstone(offset, &Key::registration(role, member))
    }

    fn lease_rec(offset: i64, role: &str, member: &str, id: i64, epoch: i16) -> LogRecord {
        let lease = lease_at(member, t(id, epoch), 1000 + offset, 2000 + offset);
        lease_record(offset, role, &lease)
    }

    fn clear(offset: i64, role: &str, empty: bool) -> LogRecord {
        LogRecord {
            offset,
            key: encode_key(&Key::lease(role)).unwrap().into(),
            value: empty.then(Bytes::new),
        }
    }

    #[test]
    fn a_partition_folds_every_role_and_drops_emptied_ones() {
        let mut p = PartitionState::new();
        let bad_key = LogRecord {
            offset: 2,
            key: Bytes::from_static(&[1]),
            value: None,
        };
        for r in [
            reg(0, "x", "a", 1),
            reg(1, "y", "b", 1),
            bad_key,
            lease_rec(3, "y", "b", 4, 0),
        ] {
            p.apply(&r);
        }
        assert_eq!(p.roles().map(|r| r.role()).collect::<Vec<_>>(), ["x", "y"]);
        assert_eq!(p.malformed_keys(), 1);
        assert_eq!(p.next_offset(), 4);
        assert_eq!(p.apply(&reg(1, "y", "z", 1)), Applied::Replayed);
        let applied = p.apply(&dereg(4, "x", "a"));
        assert!(
            matches!(applied, Applied::Role { removed: true, .. }),
            "{applied:?}"
        );
        assert!(p.role("x").is_none());
        assert_eq!(p.role("y").unwrap().lease().unwrap().member, "b");
        // A malformed value of a role with nothing valid is still reported.
        let mut bad = reg(5, "z", "m", 1);
        bad.value = Some(Bytes::from_static(&[0, 1]));
        match p.apply(&bad) {
            Applied::Role {
                removed: true,
                malformed: Some(m),
                ..
            } => {
                assert_eq!(m.error.part(), Part::RegistrationValue);
                assert_eq!(m.offset, 5);
            }
            other => panic!("{other:?}"),
        }
        p.advance_to(10);
        assert_eq!(p.next_offset(), 10);
    }

    fn names(state: &RoleState) -> Vec<&str> {
        state.members().iter().map(|m| m.member.as_str()).collect()
    }

    #[test]
    fn join_order_is_offset_order_and_other_roles_are_dropped() {
        let records = [
            reg(0, "r", "a", 10),
            reg(1, "other", "x", 11),
            reg(2, "r", "b", 12),
            lease_rec(3, "other", "x", 9, 9),
            reg(4, "r", "c", 13),
        ];
        let state = RoleState::from_records("r", &records);
        assert_eq!(names(&state), ["a", "b", "c"]);
        assert_eq!(state.rank_of("a"), Some(0));
        assert_eq!(state.rank_of("c"), Some(2));
        assert_eq!(state.rank_of("x"), None);
        assert_eq!(state.lease(), None);
        assert_eq!(state.members()[1].offset, 2);
        assert_eq!(state.members()[1].registered_at, 12);
    }

    #[test]
    fn registering_again_moves_a_member_to_the_tail() {
        let records = [
            reg(0, "r", "a", 1),
            reg(1, "r", "b", 2),
            reg(2, "r", "a", 3),
        ];
        let state = RoleState::from_records("r", &records);
        assert_eq!(names(&state), ["b", "a"]);
        assert_eq!(state.rank_of("a"), Some(1));
        assert_eq!(state.members()[1].registered_at, 3);
    }

    #[test]
    fn tombstones_deregister_and_clear() {
        let records = [
            reg(0, "r", "a", 1),
            reg(1, "r", "b", 2),
            lease_rec(2, "r", "a", 5, 0),
            dereg(3, "r", "a"),
        ];
        let state = RoleState::from_records("r", &records);
        assert_eq!(names(&state), ["b"]);
        assert_eq!(state.lease().map(|l| l.member.as_str()), Some("a"));
        assert_eq!(state.lease_offset(), Some(2));

        let mut more = records.to_vec();
        more.push(clear(4, "r", false));
        let state = RoleState::from_records("r", &more);
        assert_eq!(state.lease(), None);
        assert_eq!(state.vacant_since(), Some(1002));

        // An empty value is a tombstone too.
        more.pop();
        more.push(clear(4, "r", true));
        assert_eq!(RoleState::from_records("r", &more).lease(), None);
    }

    #[test]
    fn the_latest_lease_wins() {
        let records = [lease_rec(0, "r", "a", 5, 0), lease_rec(1, "r", "b", 5, 1)];
        let state = RoleState::from_records("r", &records);
        let lease = state.lease().unwrap();
        assert_eq!(lease.member, "b");
        assert_eq!(lease.token, t(5, 1));
    }

    #[test]
    fn malformed_records_are_reported_and_skipped() {
        let mut bad_value = reg(1, "r", "b", 2);
        bad_value.value = Some(Bytes::from_static(&[0, 9]));
        let bad_key = LogRecord {
            offset: 2,
            key: Bytes::from_static(&[0, 0, 0, 7]),
            value: None,
        };
        let mut bad_lease = lease_rec(3, "r", "a", 1, 1);
        bad_lease.value = Some(Bytes::from_static(&[0, 0, 0]));
        // c's key with someone else's registration in its value.
        let mut mismatch = reg(4, "r", "c", 3);
        mismatch.value = reg(4, "r", "someone-else", 3).value;
        let records = [
            reg(0, "r", "a", 1),
            bad_value,
            bad_key,
            bad_lease,
            mismatch,
            reg(5, "r", "d", 4),
        ];
        let state = RoleState::from_records("r", &records);
        assert_eq!(names(&state), ["a", "d"]);
        assert_eq!(state.lease(), None);
        let parts: Vec<_> = state
            .malformed()
            .iter()
            .map(|m| (m.offset, m.error.part()))
            .collect();
        assert_eq!(
            parts,
            [
                (1, Part::RegistrationValue),
                (2, Part::Key),
                (3, Part::LeaseValue),
                (4, Part::RegistrationValue)
            ]
        );
    }

    #[test]
    fn replayed_offsets_are_ignored() {
        let mut state = RoleState::from_records("r", &[reg(0, "r", "a", 1), reg(1, "r", "b", 2)]);
        let change = state.apply(
            0,
            KeyKind::Registration,
            "a",
            reg(0, "r", "a", 1).value.as_deref(),
        );
        assert_eq!(change, Change::None);
        assert_eq!(names(&state), ["a", "b"]);
    }

    #[test]
    fn vacancy_of_a_role_never_taken_starts_at_rank_zero_registration() {
        let state = RoleState::from_records("r", &[reg(0, "r", "a", 100), reg(1, "r", "b", 50)]);
        assert_eq!(state.vacant_since(), Some(100));
        let mut observed = state.clone();
        observed.observe_vacancy(400);
        assert_eq!(observed.vacant_since(), Some(400));
        observed.observe_vacancy(300);
        assert_eq!(observed.vacant_since(), Some(400));
        assert_eq!(RoleState::new("r").vacant_since(), None);
    }
}
