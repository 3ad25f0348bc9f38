//! The checker: reads a whole history against the model's truth.
//!
//! - **200s.** Every `authoritative` (the service's 200, the CLI's exit 0)
//!   names a pair that was the role's current pair, in the cluster the
//!   answer names, at some instant between the request's sending and its
//!   answer's arrival.
//! - **409s.** No verdict names a cluster that was not the one behind the
//!   addresses at some instant of its request (a cached one: of the
//!   [`CACHED_CONTACT`] before it too; the cache answers `superseded`
//!   only), nor a `current` pair that was
//!   not current then, nor a `supersededBy` pair the role never held there;
//!   `superseded` is said only of a token that is over (an earlier epoch of
//!   a producer id the role held, or a producer id it moved on from),
//!   `vacant` only when nobody held the role at some instant, `unknown`
//!   never of a token current throughout.
//! - **Views.** No view claims to be younger than it is: its `ageMs` is at
//!   least the time since its partition first held a record (visible to a
//!   committed reader) past the view's offset, as of the request's sending.
//!   Its members (in rank order, with their offsets) and its lease are what
//!   the log held below its offset, by the checker's own fold of the
//!   model's records (the seed's rules: [`Roster::fold`]).
//! - **Streams.** Every stream delivers every change of its role in order,
//!   or says `reset`: between two changes it delivered, the role's partition
//!   made no change of the role visible that it did not deliver. Each
//!   change says what its record says (kind, member, holder, token).
//! - **After the faults heal.** Every check sent [`BOUND`] after the quiet
//!   began is answered, with the verdict the truth gives; every view is
//!   answered and at most [`HEALED_VIEW_AGE`] old; every change of the
//!   cluster then behind the addresses reaches the role's stream within
//!   [`DELIVER`] of that instant or of its own, whichever is later.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::history::{Answer, Check, History, StreamEvent, View};
use super::schedule::{Event, Plan};
use super::world::Run;
use crate::coordination::{KeyKind, decode_key, decode_lease, is_tombstone};
use crate::kafka::fake::model::hashing::role_partition;
use crate::kafka::fake::model::{Truth, Visible};

/// How long after the faults healed every check must be answered right:
/// a broker's session timeout (9 s, after which a dead coordinator's roles
/// move) and a coordinator lookup's backoffs fit in it.
pub(super) const BOUND: Duration = Duration::from_secs(12);

/// How long before its request a cached verdict's cluster may last have
/// been behind the addresses: the service answers from its cache while it
/// heard from that cluster within the last second (docs/trust.md), and a
/// cluster that vanishes without a reset (hosts crashed, a link hung while
/// the address moved) is only known gone when that second is over. Stated
/// here, not taken from the code, so a longer silence there is found.
const CACHED_CONTACT: Duration = Duration::from_secs(1);

/// How much below its true age a view's `ageMs` may be: the milliseconds
/// it is rounded to, both ways.
const AGE_SLACK_MS: i64 = 2;

/// How old a view may be once the faults healed: the age past which
/// `/readyz` calls a partition behind (five roster TTLs, 500 ms in the
/// world: docs/api.md).
const HEALED_VIEW_AGE: Duration = Duration::from_millis(2_500);

/// How long a change may take to reach its role's stream once the faults
/// healed: a long poll (half a roster TTL), the fold, the stream's send,
/// and a stream opened again (200 ms after one ends) with its snapshot.
const DELIVER: Duration = Duration::from_secs(2);

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Violation {
    pub(super) kind: &'static str,
    pub(super) detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.detail)
    }
}

type Pair = (i64, i16);

/// Per (cluster, role): each pair it held from when (`None`: nobody).
type HeldLines<'a> = BTreeMap<(&'a str, &'a str), Vec<(Duration, Option<Pair>)>>;

/// Per (cluster, partition): each visible record, in the order it became
/// visible.
type VisibleRecords<'a> = BTreeMap<(&'a str, i32), Vec<&'a Visible>>;

/// The truth, indexed: per cluster and role, every pair in order; when each
/// cluster answered.
struct Timelines<'a> {
    held: HeldLines<'a>,
    clusters: &'a [(Duration, String)],
}

impl<'a> Timelines<'a> {
    fn new(truth: &'a Truth) -> Timelines<'a> {
        let mut held: HeldLines<'a> = BTreeMap::new();
        for h in &truth.held {
            held.entry((h.cluster.as_str(), h.role.as_str()))
                .or_default()
                .push((h.at, h.pair));
        }
        Timelines {
            held,
            clusters: &truth.clusters,
        }
    }

    /// When `cluster` was the one behind the addresses: from its start to
    /// the next one's.
    fn live(&self, cluster: &str) -> Option<(Duration, Duration)> {
        let i = self.clusters.iter().position(|(_, c)| c == cluster)?;
        let end = self
            .clusters
            .get(i + 1)
            .map_or(Duration::MAX, |(at, _)| *at);
        Some((self.clusters[i].0, end))
    }

    /// `cluster`'s live span within `[from, to]`, if they meet.
    fn within(&self, cluster: &str, from: Duration, to: Duration) -> Option<(Duration, Duration)> {
        let (start, end) = self.live(cluster)?;
        let (from, to) = (from.max(start), to.min(end));
        (from <= to).then_some((from, to))
    }

    /// The pairs `role` held in `cluster` at some instant of `[from, to]`
    /// (`None`: nobody).
    fn current(
        &self,
        cluster: &str,
        role: &str,
        from: Duration,
        to: Duration,
    ) -> Vec<Option<Pair>> {
        let line = self
            .held
            .get(&(cluster, role))
            .map_or(&[][..], Vec::as_slice);
        let before = line.iter().rev().find(|(at, _)| *at <= from);
        let mut pairs = vec![before.and_then(|(_, p)| *p)];
        pairs.extend(
            line.iter()
                .filter(|(at, _)| *at > from && *at <= to)
                .map(|(_, p)| *p),
        );
        pairs
    }

    /// Every pair `role` held in `cluster` up to `to`.
    fn held_until(&self, cluster: &str, role: &str, to: Duration) -> Vec<Pair> {
        self.held
            .get(&(cluster, role))
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter(|(at, _)| *at <= to)
            .filter_map(|(_, p)| *p)
            .collect()
    }
}

fn show(pair: Option<Pair>) -> String {
    pair.map_or("none".into(), |(id, epoch)| format!("{id}:{epoch}"))
}

fn describe(check: &Check) -> String {
    format!(
        "{:?} check of {} {} sent {:.3}s, answered {:.3}s: {:?}",
        check.asker,
        check.role,
        show(Some(check.token)),
        check.sent.as_secs_f64(),
        check.received.as_secs_f64(),
        check.answer
    )
}

/// The verdicts the truth allows for `token` when the role's pair is
/// `current`: authoritative, superseded, unknown or vacant.
fn allowed(token: Pair, current: Option<Pair>, held_before: &[Pair]) -> &'static [&'static str] {
    match current {
        // A token over for good may be called so while nobody holds the
        // role (seed 12620: a cached `superseded` once the role's id had
        // expired).
        None if over(token, held_before) => &["vacant", "superseded"],
        None => &["vacant"],
        Some(c) if c == token => &["authoritative"],
        Some(c) if c.0 == token.0 && token.1 < c.1 => &["superseded"],
        Some(c) if c.0 == token.0 => &["unknown"],
        // Another producer id: superseded when the role held it (and the
        // service saw it), unknown otherwise.
        Some(_) if held_before.iter().any(|p| p.0 == token.0) => &["superseded", "unknown"],
        Some(_) => &["unknown"],
    }
}

/// Whether `token` is over for good, by what the role held (in order): a
/// later epoch of its producer id, or another producer id after it.
fn over(token: Pair, held: &[Pair]) -> bool {
    held.iter().any(|p| p.0 == token.0 && p.1 > token.1)
        || held
            .iter()
            .position(|p| p.0 == token.0)
            .is_some_and(|i| held[i..].iter().any(|p| p.0 != token.0))
}

/// When `plan`'s faults begin, and when they have healed for [`BOUND`].
fn fault_span(plan: &Plan) -> (Duration, Duration) {
    let faults = plan
        .events
        .iter()
        .filter(|e| !is_member_event(&e.event))
        .map(|e| e.at);
    let first = faults.clone().min().unwrap_or(plan.quiet_from);
    let quiet = faults.max().unwrap_or_default().max(plan.quiet_from);
    (first, quiet + BOUND)
}

/// How many checks got a verdict, of those sent, per span of a run: a
/// figure, not an invariant (a 503 is the honest answer while a fault
/// stands).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Availability {
    /// Sent from the first fault until [`BOUND`] after the last healed.
    pub(super) faulted: (usize, usize),
    /// Sent after that.
    pub(super) healed: (usize, usize),
}

impl fmt::Display for Availability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let share = |(answered, sent): (usize, usize)| 100.0 * answered as f64 / sent.max(1) as f64;
        write!(
            f,
            "verdicts {:.1} % of {} checks while faulted, {:.1} % of {} healed",
            share(self.faulted),
            self.faulted.1,
            share(self.healed),
            self.healed.1
        )
    }
}

/// The [`Availability`] of `run`.
pub(super) fn availability(plan: &Plan, run: &Run) -> Availability {
    let (first, settled) = fault_span(plan);
    let mut out = Availability::default();
    for c in &run.history.checks {
        let span = match c.sent {
            t if t >= settled => &mut out.healed,
            t if t >= first => &mut out.faulted,
            _ => continue,
        };
        span.1 += 1;
        if matches!(c.answer, Answer::Verdict { .. }) {
            span.0 += 1;
        }
    }
    out
}

/// Every broken invariant of `run`.
pub(super) fn check(plan: &Plan, run: &Run) -> Vec<Violation> {
    let lines = Timelines::new(&run.truth);
    let mut found = Vec::new();
    let (_, settled) = fault_span(plan);
    for check in &run.history.checks {
        check_answer(&lines, check, &mut found);
        if check.sent >= settled {
            check_settled(&lines, check, &mut found);
        }
    }
    let visible = visible(&run.truth);
    check_views(&run.history, &visible, &lines, settled, &mut found);
    check_streams(&run.history, &visible, &mut found);
    check_delivered(
        &run.history,
        &visible,
        &lines,
        settled,
        plan.duration,
        &mut found,
    );
    found
}

fn is_member_event(event: &Event) -> bool {
    matches!(
        event,
        Event::Init { .. }
            | Event::Commit { .. }
            | Event::Expire { .. }
            | Event::Register { .. }
            | Event::Deregister { .. }
            | Event::Lease { .. }
            | Event::Resign { .. }
            | Event::Compact { .. }
    )
}

fn check_answer(lines: &Timelines<'_>, check: &Check, found: &mut Vec<Violation>) {
    let Answer::Verdict { verdict, .. } = &check.answer else {
        return;
    };
    let mut broken = |kind: &'static str| {
        found.push(Violation {
            kind,
            detail: describe(check),
        })
    };
    // The cache answers `superseded` only (a yes is never cached).
    let cached = verdict.cached && verdict.verdict == "superseded";
    if verdict.cached && !cached {
        broken("a cached verdict other than superseded");
    }
    let since = if cached {
        check.sent.saturating_sub(CACHED_CONTACT)
    } else {
        check.sent
    };
    let Some((from, to)) = lines.within(&verdict.cluster, since, check.received) else {
        broken("a verdict of a cluster not behind the addresses during its request");
        return;
    };
    let pairs = lines.current(&verdict.cluster, check.role, from, to);
    let token = Some(check.token);
    match verdict.verdict.as_str() {
        "authoritative" => {
            if !pairs.contains(&token) {
                broken("authoritative for a pair not current during its request");
            }
        }
        "vacant" => {
            if !pairs.contains(&None) {
                broken("vacant while the role was held throughout its request");
            }
        }
        "unknown" => {
            if pairs.iter().all(|p| *p == token) {
                broken("unknown for the pair current throughout its request");
            }
        }
        "superseded" => {
            let held = lines.held_until(&verdict.cluster, check.role, to);
            if !over(check.token, &held) || pairs.iter().all(|p| *p == token) {
                broken("superseded for a token that was not over");
            }
            if let Some(by) = verdict.superseded_by
                && !held.contains(&by)
            {
                broken("superseded by a pair the role never held there");
            }
        }
        _ => broken("a verdict the contract does not have"),
    }
    if let Some(current) = verdict.current
        && !verdict.cached
        && !pairs.contains(&Some(current))
    {
        broken("a current pair that was not current during its request");
    }
}

fn check_settled(lines: &Timelines<'_>, check: &Check, found: &mut Vec<Violation>) {
    let Answer::Verdict { verdict, .. } = &check.answer else {
        found.push(Violation {
            kind: "unanswered after the faults healed",
            detail: describe(check),
        });
        return;
    };
    let Some((from, to)) = lines.within(&verdict.cluster, check.sent, check.received) else {
        return;
    };
    let pairs = lines.current(&verdict.cluster, check.role, from, to);
    let held = lines.held_until(&verdict.cluster, check.role, from);
    let right = pairs
        .iter()
        .any(|p| allowed(check.token, *p, &held).contains(&verdict.verdict.as_str()));
    if !right {
        found.push(Violation {
            kind: "a wrong verdict after the faults healed",
            detail: describe(check),
        });
    }
}

/// The visible records of each partition of each cluster.
fn visible(truth: &Truth) -> VisibleRecords<'_> {
    let mut out: VisibleRecords<'_> = BTreeMap::new();
    for t in &truth.topics {
        out.entry((t.cluster.as_str(), t.partition))
            .or_default()
            .extend(t.visible.iter());
    }
    out
}

/// The visible records of `role` in `cluster`.
fn records_of<'a>(visible: &VisibleRecords<'a>, cluster: &str, role: &str) -> Vec<&'a Visible> {
    visible
        .get(&(cluster, role_partition(role, 2)))
        .into_iter()
        .flatten()
        .copied()
        .filter(|v| v.role == role)
        .collect()
}

/// A record as the checker reads it: which kind, which member (a
/// registration's), its lease (member and pair) unless a tombstone. The
/// bytes are decoded with the library's decoders (held to the golden
/// vectors by their own tests); what the records mean together is the
/// checker's own ([`Roster::fold`]).
#[derive(Debug)]
struct Read {
    kind: KeyKind,
    member: String,
    lease: Option<(String, Pair)>,
    tombstone: bool,
}

fn read(v: &Visible) -> Option<Read> {
    let key = decode_key(&v.key).ok()?;
    let tombstone = is_tombstone(v.value.as_deref());
    let lease = match (key.kind, &v.value) {
        (KeyKind::Lease, Some(value)) if !tombstone => {
            let l = decode_lease(value).ok()?;
            Some((l.member, (l.token.producer_id(), l.token.producer_epoch())))
        }
        _ => None,
    };
    Some(Read {
        kind: key.kind,
        member: key.member,
        lease,
        tombstone,
    })
}

/// What the log says of a role below an offset.
#[derive(Debug, Default, PartialEq, Eq)]
struct Roster {
    /// Members in rank order, each with its registration's offset.
    members: Vec<(String, i64)>,
    lease: Option<(String, Pair)>,
}

impl Roster {
    /// The seed's rules, in offset order: a registration puts its member
    /// at the tail with its offset (a member registering again moves
    /// there), its tombstone removes it; a lease record is the lease, its
    /// tombstone clears it.
    fn fold<'a>(records: impl Iterator<Item = &'a Visible>, below: i64) -> Roster {
        let mut records: Vec<&Visible> = records.filter(|v| v.offset < below).collect();
        records.sort_by_key(|v| v.offset);
        let mut roster = Roster::default();
        for v in records {
            let Some(r) = read(v) else { continue };
            match r.kind {
                KeyKind::Registration => {
                    roster.members.retain(|(m, _)| *m != r.member);
                    if !r.tombstone {
                        roster.members.push((r.member, v.offset));
                    }
                }
                KeyKind::Lease => roster.lease = r.lease,
            }
        }
        roster
    }
}

fn check_views(
    history: &History,
    visible: &VisibleRecords<'_>,
    lines: &Timelines<'_>,
    settled: Duration,
    found: &mut Vec<Violation>,
) {
    for view in &history.views {
        if view.sent >= settled {
            check_view_healed(view, found);
        }
        check_view_content(view, visible, lines, found);
        let (Some(offset), Some(age_ms)) = (view.offset, view.age_ms) else {
            continue;
        };
        // The cluster behind the addresses throughout the request.
        let cluster = lines
            .clusters
            .iter()
            .find(|(_, c)| lines.within(c, view.sent, view.sent).is_some());
        let Some((_, cluster)) = cluster else {
            continue;
        };
        if lines
            .within(cluster, view.received, view.received)
            .is_none()
        {
            continue;
        }
        let partition = role_partition(view.role, 2);
        let newer = visible
            .get(&(cluster.as_str(), partition))
            .into_iter()
            .flatten()
            .filter(|v| v.offset >= offset && v.at <= view.sent)
            .map(|v| v.at)
            .min();
        if let Some(since) = newer {
            let true_ms = crate::time::millis(view.sent - since);
            if age_ms + AGE_SLACK_MS < true_ms {
                found.push(Violation {
                    kind: "a view younger than it is",
                    detail: format!(
                        "view of {} at offset {offset} sent {:.3}s says {age_ms} ms old; its partition held a newer record from {:.3}s on ({true_ms} ms)",
                        view.role,
                        view.sent.as_secs_f64(),
                        since.as_secs_f64()
                    ),
                });
            }
        }
    }
}

/// A view once the faults healed: answered, and fresh.
fn check_view_healed(view: &View, found: &mut Vec<Violation>) {
    let fresh = view
        .age_ms
        .is_some_and(|ms| ms <= crate::time::millis(HEALED_VIEW_AGE) as i64);
    if view.status != 200 || !fresh {
        found.push(Violation {
            kind: "a view unanswered or behind after the faults healed",
            detail: format!(
                "view of {} sent {:.3}s: {} {:?} ms old",
                view.role,
                view.sent.as_secs_f64(),
                view.status,
                view.age_ms
            ),
        });
    }
}

/// A 200 view's roster against the log below its offset, in a cluster
/// that had begun to answer by its answer (the view names no cluster, and
/// one not yet told of a switch serves the old one's until it is).
fn check_view_content(
    view: &View,
    visible: &VisibleRecords<'_>,
    lines: &Timelines<'_>,
    found: &mut Vec<Violation>,
) {
    let Some(offset) = view.offset.filter(|_| view.status == 200) else {
        return;
    };
    let said = Roster {
        members: view.members.clone(),
        lease: view.lease.clone(),
    };
    let folds: Vec<Roster> = lines
        .clusters
        .iter()
        .filter(|(at, _)| *at <= view.received)
        .map(|(_, c)| Roster::fold(records_of(visible, c, view.role).into_iter(), offset))
        .collect();
    if !folds.contains(&said) {
        found.push(Violation {
            kind: "a view that says what the log did not hold",
            detail: format!(
                "view of {} at offset {offset} sent {:.3}s says {said:?}; the log below it held {folds:?}",
                view.role,
                view.sent.as_secs_f64(),
            ),
        });
    }
}

/// A change event against the record at its offset.
fn check_event_content(
    e: &StreamEvent,
    offset: i64,
    cluster: &str,
    visible: &VisibleRecords<'_>,
    found: &mut Vec<Violation>,
) {
    let records = records_of(visible, cluster, e.role);
    let Some(record) = records.iter().find(|v| v.offset == offset) else {
        found.push(Violation {
            kind: "an event of no visible record",
            detail: format!("{e:?}"),
        });
        return;
    };
    let Some(r) = read(record) else {
        found.push(Violation {
            kind: "an event of a record that does not decode",
            detail: format!("{e:?}"),
        });
        return;
    };
    // The lease before it: a `renewed` says the same member held it.
    let before = records
        .iter()
        .filter(|v| v.offset < offset)
        .filter_map(|v| read(v).map(|r| (v.offset, r)))
        .filter(|(_, r)| r.kind == KeyKind::Lease)
        .max_by_key(|(o, _)| *o)
        .and_then(|(_, r)| r.lease);
    let member = Some(r.member.as_str());
    let holder = r.lease.as_ref().map(|(m, _)| m.as_str());
    let token = r.lease.as_ref().map(|(_, p)| *p);
    let right = match (r.kind, r.tombstone, e.kind.as_str()) {
        (KeyKind::Registration, false, "registered")
        | (KeyKind::Registration, true, "deregistered") => e.member.as_deref() == member,
        (KeyKind::Lease, false, "acquired") => e.holder.as_deref() == holder && e.token == token,
        (KeyKind::Lease, false, "renewed") => {
            e.holder.as_deref() == holder
                && e.token == token
                && before.as_ref().map(|(m, _)| m.as_str()) == holder
        }
        (KeyKind::Lease, true, "cleared") => e.holder.is_none(),
        _ => false,
    };
    if !right {
        found.push(Violation {
            kind: "an event that says what its record does not",
            detail: format!("{e:?}; the record: {r:?}, the lease before it {before:?}"),
        });
    }
}

/// Once the faults healed, every change of the cluster then behind the
/// addresses reaches its role's stream (or a snapshot or reset holding
/// it) within [`DELIVER`] of the later of its becoming visible and the
/// healing, as long as the observers listen.
fn check_delivered(
    history: &History,
    visible: &VisibleRecords<'_>,
    lines: &Timelines<'_>,
    settled: Duration,
    until: Duration,
    found: &mut Vec<Violation>,
) {
    let Some((_, cluster)) = lines.clusters.last() else {
        return;
    };
    for role in super::schedule::ROLES {
        for v in records_of(visible, cluster, role) {
            let due = v.at.max(settled) + DELIVER;
            if due > until {
                continue;
            }
            let delivered = history.events.iter().any(|e| {
                e.role == role
                    && e.cluster.as_deref() == Some(cluster.as_str())
                    && e.offset.is_some_and(|o| o >= v.offset)
                    && e.received <= due
            });
            if !delivered {
                found.push(Violation {
                    kind: "a change not delivered after the faults healed",
                    detail: format!(
                        "{role}'s record at offset {} of {cluster}, visible from {:.3}s, not on its stream by {:.3}s",
                        v.offset,
                        v.at.as_secs_f64(),
                        due.as_secs_f64()
                    ),
                });
            }
        }
    }
}

fn check_streams(history: &History, visible: &VisibleRecords<'_>, found: &mut Vec<Violation>) {
    let mut by_role: BTreeMap<&str, Vec<&StreamEvent>> = BTreeMap::new();
    for e in &history.events {
        by_role.entry(e.role).or_default().push(e);
    }
    for (role, events) in by_role {
        let partition = role_partition(role, 2);
        // Where the stream stands: the cluster (`None`: whichever its
        // next event names) and the last offset it delivered (or that its
        // snapshot included).
        let mut at: Option<(Option<String>, i64)> = None;
        for e in events {
            let whole = e.kind == "snapshot" || e.kind == "reset";
            let (Some(offset), Some(cluster)) = (e.offset, e.cluster.clone()) else {
                if whole {
                    // A roster of nothing (the role has no record in the
                    // partition read now, or it is not read yet): no id,
                    // and the stream goes on from the start of whichever
                    // cluster its next event names.
                    at = Some((None, -1));
                } else {
                    found.push(Violation {
                        kind: "an event without its offset and cluster",
                        detail: format!("{e:?}"),
                    });
                }
                continue;
            };
            if whole {
                at = Some((Some(cluster), offset));
                continue;
            }
            check_event_content(e, offset, &cluster, visible, found);
            match &at {
                Some((c, last)) if c.as_ref().is_none_or(|c| *c == cluster) => {
                    let missed: Vec<i64> = visible
                        .get(&(cluster.as_str(), partition))
                        .into_iter()
                        .flatten()
                        .filter(|v| v.role == role && v.offset > *last && v.offset < offset)
                        .map(|v| v.offset)
                        .collect();
                    if offset <= *last || !missed.is_empty() {
                        found.push(Violation {
                            kind: "a stream that missed a change without a reset",
                            detail: format!(
                                "stream {} of {role}: after offset {last}, {} at {offset} (received {:.3}s); changes at {missed:?} not delivered",
                                e.stream,
                                e.kind,
                                e.received.as_secs_f64()
                            ),
                        });
                    }
                }
                _ => found.push(Violation {
                    kind: "a stream event of another cluster without a reset",
                    detail: format!("stream {} of {role}: {e:?} after {at:?}", e.stream),
                }),
            }
            at = Some((Some(cluster), offset));
        }
    }
}
