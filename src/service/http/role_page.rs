//! `GET /roles/{role}/page`: one role drawn for people. A timeline of its
//! holders over the service's kept history, the current lease as a
//! countdown bar, and the candidates in rank order with their challenge
//! instants. Server-rendered HTML with inline SVG: no script, readable
//! without JavaScript, under the same strict policy as `/`.
//!
//! Rendering is a pure function of the roster, the kept changes and the
//! instant, so it is tested without a broker. Names (roles, members, the
//! coordinator's state) reach the markup only through [`escape`]; every
//! number and instant is the service's own.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::extract::Role;
use super::names::{self, escape, shown, shown_plain};
use super::status_page::{STYLE, html, path_segment};
use super::views::view_headers;
use crate::coordination::FencingToken;
use crate::service::state::AppState;
use crate::service::watch::roster::{LeaseView, RosterView, roster};
use crate::service::watch::{ChangeKind, NotReady, RoleEvent};
use crate::time::Rfc3339Ms;

/// Most holding periods drawn: a flapping role with a long history would
/// otherwise make a page of megabytes, and bars narrower than a pixel show
/// nothing anyway.
const MAX_BARS: usize = 200;
/// Most holding periods listed in the table under the timeline.
const MAX_ROWS: usize = 20;
/// Width of both drawings in SVG units; they scale to the page's width.
const WIDTH: f64 = 1000.0;
/// Horizontal margin inside the drawings, so end labels are not clipped.
const PAD: f64 = 12.0;
/// Rough width of one character of the 12-unit label font, to decide what
/// fits in a bar (SVG cannot wrap or clip text by itself without a script).
const CHAR_WIDTH: f64 = 7.0;

/// Bar fills and strokes (Tableau 10, light and full), one per holder.
const FILLS: [&str; 10] = [
    "#a0cbe8", "#ffbe7d", "#8cd17d", "#ff9d9a", "#d4a6c8", "#f1ce63", "#86bcb6", "#fabfd2",
    "#d7b5a6", "#c7c7c7",
];
const STROKES: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#b6992d", "#499894", "#d37295",
    "#9d7660", "#79706e",
];

/// How a holding period ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// It has not: the holder's lease is live now.
    Holding,
    /// Its deadline passed before anything else happened.
    Expired,
    /// The holder resigned (the lease was cleared).
    Cleared,
    /// Another lease replaced it: a takeover, or the same member under a
    /// newer token.
    Replaced,
}

impl Ended {
    fn as_str(self) -> &'static str {
        match self {
            Ended::Holding => "holding",
            Ended::Expired => "expired",
            Ended::Cleared => "resigned",
            Ended::Replaced => "replaced",
        }
    }
}

/// One stretch during which one member held the lease under one token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Period<'a> {
    /// The holder.
    pub member: &'a str,
    /// Its token throughout the period.
    pub token: FencingToken,
    /// When it started (the service clock; see [`RoleEvent::at`]).
    pub from_ms: i64,
    /// When it ended, or now.
    pub to_ms: i64,
    /// The member already held the lease at the first kept change, so the
    /// true start is older than `from_ms`.
    pub held_before: bool,
    /// How it ended.
    pub ended: Ended,
}

/// The holding periods of a kept history (oldest first) at `now_ms`.
///
/// A period is a run of changes under one holder and one token. It ends at
/// a clear (a resign), or at the change to another holder or token: at the
/// old deadline when that passed first (a lapse, drawn as a gap until the
/// next lease), else at the change. A run is never split on a deadline
/// between two renewals: instants are when the watcher applied each change
/// (`at`), so a renewal read late cannot be told from a late renewal.
/// Deadlines are the holder's clock: skew moves an end, never before its
/// start.
pub fn periods(history: &[RoleEvent], now_ms: i64) -> Vec<Period<'_>> {
    let mut out = Vec::new();
    let mut open: Option<(Period<'_>, i64)> = None;
    for (i, event) in history.iter().enumerate() {
        let at = event.at.0;
        let held = event.holder.as_deref().zip(event.token);
        let deadline = event.deadline.map_or(i64::MAX, |d| d.0);
        if let Some((mut period, until)) = open.take() {
            if held.is_some_and(|(m, t)| m == period.member && t == period.token) {
                open = Some((period, deadline));
                continue;
            }
            (period.to_ms, period.ended) = if held.is_none() {
                (at.min(until), Ended::Cleared)
            } else if until < at {
                (until, Ended::Expired)
            } else {
                (at, Ended::Replaced)
            };
            period.to_ms = period.to_ms.max(period.from_ms);
            out.push(period);
        }
        if let Some((member, token)) = held {
            let from_ms = out.last().map_or(at, |p: &Period<'_>| at.max(p.to_ms));
            let period = Period {
                member,
                token,
                from_ms,
                to_ms: from_ms,
                held_before: i == 0 && event.kind != ChangeKind::Acquired,
                ended: Ended::Holding,
            };
            open = Some((period, deadline));
        }
    }
    if let Some((mut period, until)) = open {
        (period.to_ms, period.ended) = if until <= now_ms {
            (until.max(period.from_ms), Ended::Expired)
        } else {
            (now_ms.max(period.from_ms), Ended::Holding)
        };
        out.push(period);
    }
    out
}

/// What one page shows.
#[derive(Debug)]
pub struct PageInput<'a> {
    /// The coordination topic.
    pub topic: &'a str,
    /// The role's roster (members, lease, challengers, status, coordinator).
    pub roster: &'a RosterView<'a>,
    /// The role's kept changes, oldest first.
    pub history: &'a [RoleEvent],
    /// True when `history` reaches back to the role's first record.
    pub history_complete: bool,
    /// Changes kept per role (`--event-history`).
    pub history_limit: usize,
    /// Now, by the service clock.
    pub now_ms: i64,
}

fn head(out: &mut String, title: &str, refresh: bool) {
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">{refresh}\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>{title} · krabka-authority</title>\
         <style>{STYLE}{names}{PAGE_STYLE}</style></head><body>\
         <nav class=\"muted\"><a href=\"/\">← all roles</a></nav>",
        refresh = if refresh {
            "<meta http-equiv=\"refresh\" content=\"2\">"
        } else {
            ""
        },
        title = shown_plain(title),
        names = names::STYLE,
    );
}

const PAGE_STYLE: &str = "h1{overflow-wrap:anywhere;font-size:1.5rem}h1 code{font-size:1em}\
h2{font-size:1.05rem;margin:1.6rem 0 .5rem}svg{display:block;width:100%;height:auto;max-width:1200px}\
svg text{font-family:system-ui,sans-serif}.swatch{display:inline-block;width:.8em;height:.8em;\
border:1px solid #0004;border-radius:2px;margin:0 .3em 0 .8em;vertical-align:-.05em}\
table.candidates,table.periods{width:auto;min-width:min(100%,44rem)}\
td.name{overflow-wrap:anywhere;max-width:28rem}.expired{color:#b00020}.live{color:#1b7a2e}";

/// `n` and `noun`, plural unless `n` is 1.
fn count(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

fn seconds(ms: i64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// Where an instant sits relative to now, in words.
fn relative(at_ms: i64, now_ms: i64) -> String {
    if at_ms >= now_ms {
        format!("in {}", seconds(at_ms.saturating_sub(now_ms)))
    } else {
        format!("{} ago", seconds(now_ms.saturating_sub(at_ms)))
    }
}

/// A map from instants to SVG x coordinates. In floating point: a lease
/// record may hold any i64 for its instants, and no difference of two may
/// overflow.
struct Axis {
    start: i64,
    end: i64,
}

impl Axis {
    fn x(&self, t: i64) -> f64 {
        let span = (self.end as f64 - self.start as f64).max(1.0);
        let t = t.clamp(self.start, self.end.max(self.start));
        PAD + (t as f64 - self.start as f64) / span * (WIDTH - 2.0 * PAD)
    }

    /// The instant `i` quarters along.
    fn quarter(&self, i: i64) -> i64 {
        let (start, end) = (i128::from(self.start), i128::from(self.end));
        i64::try_from(start + (end - start) * i128::from(i) / 4).unwrap_or(self.end)
    }
}

/// FNV-1a: a colour per name that stays put across refreshes and builds.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A palette slot per holder: by the name's hash, moved to the next free
/// slot on a collision so up to ten holders never share a colour.
fn colours<'a>(periods: &[Period<'a>]) -> HashMap<&'a str, usize> {
    let mut names: Vec<&str> = periods.iter().map(|p| p.member).collect();
    names.sort_unstable();
    names.dedup();
    let mut taken = [false; FILLS.len()];
    let mut out = HashMap::new();
    for name in names {
        let preferred = (fnv(name) % FILLS.len() as u64) as usize;
        let slot = (0..FILLS.len())
            .map(|i| (preferred + i) % FILLS.len())
            .find(|s| !taken[*s])
            .unwrap_or(preferred);
        taken[slot] = true;
        out.insert(name, slot);
    }
    out
}

/// The part of `label` that fits in `width` units, never cut inside a
/// character (and cut before escaping, never inside an entity).
fn fitted(label: &str, width: f64) -> Option<String> {
    let room = ((width - 8.0) / CHAR_WIDTH).floor();
    if room < 3.0 {
        return None;
    }
    let room = room as usize;
    if label.chars().count() <= room {
        return Some(label.to_owned());
    }
    let mut cut: String = label.chars().take(room - 1).collect();
    cut.push('…');
    Some(cut)
}

const LANE_TOP: f64 = 24.0;
const LANE_HEIGHT: f64 = 40.0;
const AXIS_Y: f64 = 74.0;

fn timeline(out: &mut String, role: &str, all: &[Period<'_>], first_at: Option<i64>, now_ms: i64) {
    let skipped = all.len().saturating_sub(MAX_BARS);
    let drawn = &all[skipped..];
    let start = match (skipped, drawn.first(), first_at) {
        (0, Some(p), Some(at)) => at.min(p.from_ms),
        (_, Some(p), _) => p.from_ms,
        (_, None, Some(at)) => at,
        (_, None, None) => now_ms,
    };
    let end = drawn.iter().map(|p| p.to_ms).fold(now_ms, i64::max);
    let axis = Axis {
        start: start.min(end.saturating_sub(1_000)),
        end,
    };
    let colour = colours(drawn);
    let lane_mid = LANE_TOP + LANE_HEIGHT / 2.0;
    let _ = write!(
        out,
        "<svg class=\"timeline\" viewBox=\"0 0 {WIDTH} 100\" role=\"img\" aria-labelledby=\"timeline-title\">\
         <title id=\"timeline-title\">Holders of {role} from {from} to {to}</title>\
         <defs><pattern id=\"gap\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">\
         <rect width=\"6\" height=\"6\" fill=\"#f6f6f6\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#ddd\" stroke-width=\"2\"/></pattern></defs>\
         <rect class=\"lane\" x=\"{PAD}\" y=\"{LANE_TOP}\" width=\"{lane_w}\" height=\"{LANE_HEIGHT}\" fill=\"none\" stroke=\"#ccc\"/>",
        role = shown_plain(role),
        from = Rfc3339Ms(axis.start),
        to = Rfc3339Ms(axis.end),
        lane_w = WIDTH - 2.0 * PAD,
    );

    // Empty stretches: before the first holder, between holders, after a
    // lapse or a resign.
    let mut cursor = axis.start;
    let mut why = "no holder";
    for p in drawn.iter().map(Some).chain([None]) {
        let until = p.map_or(axis.end, |p| p.from_ms);
        let (x1, x2) = (axis.x(cursor), axis.x(until));
        // Every gap is in the markup, however thin: its title tells.
        if until > cursor {
            let _ = write!(
                out,
                "<g class=\"gap\"><title>{why} from {} to {}</title>\
                 <rect x=\"{x1:.1}\" y=\"{LANE_TOP}\" width=\"{w:.1}\" height=\"{LANE_HEIGHT}\" fill=\"url(#gap)\"/>",
                Rfc3339Ms(cursor),
                Rfc3339Ms(until),
                w = x2 - x1,
            );
            if x2 - x1 >= 70.0 {
                let _ = write!(
                    out,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"#888\" text-anchor=\"middle\">no holder</text>",
                    (x1 + x2) / 2.0,
                    lane_mid + 4.0,
                );
            }
            out.push_str("</g>");
        }
        if let Some(p) = p {
            cursor = cursor.max(p.to_ms);
            why = match p.ended {
                Ended::Expired => "no holder: the lease expired",
                Ended::Cleared => "no holder: the holder resigned",
                _ => "no holder",
            };
        }
    }

    // One bar per holding period; a marker where the token changed.
    let mut previous = skipped
        .checked_sub(1)
        .and_then(|i| all.get(i))
        .map(|p| p.token);
    for p in drawn {
        let (x1, x2) = (axis.x(p.from_ms), axis.x(p.to_ms));
        let w = (x2 - x1).max(1.5);
        let slot = colour.get(p.member).copied().unwrap_or(0);
        let since = if p.held_before {
            "since before the kept history, from"
        } else {
            "from"
        };
        let _ = write!(
            out,
            "<g class=\"holder-bar\" data-member=\"{member}\" data-token=\"{token}\" data-ended=\"{ended}\">\
             <title>{shown} held {token} {since} {from} to {to} ({ended})</title>\
             <rect x=\"{x1:.1}\" y=\"{LANE_TOP}\" width=\"{w:.1}\" height=\"{LANE_HEIGHT}\" rx=\"3\" fill=\"{fill}\" stroke=\"{stroke}\"{dash}/>",
            member = escape(p.member),
            shown = shown_plain(p.member),
            token = p.token,
            ended = p.ended.as_str(),
            from = Rfc3339Ms(p.from_ms),
            to = Rfc3339Ms(p.to_ms),
            fill = FILLS[slot],
            stroke = STROKES[slot],
            dash = if p.held_before {
                " stroke-dasharray=\"4 3\""
            } else {
                ""
            },
        );
        let member = names::visible(p.member);
        let label = format!(
            "{}{member} · {}",
            if p.held_before { "…" } else { "" },
            p.token
        );
        let text = fitted(&label, w).or_else(|| fitted(&member, w));
        if let Some(text) = text {
            let _ = write!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" fill=\"#1d1d1f\">{}</text>",
                x1 + 4.0,
                lane_mid + 4.0,
                escape(&text),
            );
        }
        out.push_str("</g>");
        if previous.is_some_and(|t| t != p.token) {
            let _ = write!(
                out,
                "<g class=\"epoch-change\"><title>epoch change to {token} at {at}</title>\
                 <path d=\"M{l:.1} 12 L{r:.1} 12 L{x:.1} 21 Z\" fill=\"#333\"/>\
                 <line x1=\"{x:.1}\" y1=\"21\" x2=\"{x:.1}\" y2=\"{bottom}\" stroke=\"#333\" stroke-width=\"1.5\"/></g>",
                token = p.token,
                at = Rfc3339Ms(p.from_ms),
                l = x1 - 4.0,
                r = x1 + 4.0,
                x = x1,
                bottom = LANE_TOP + LANE_HEIGHT,
            );
        }
        previous = Some(p.token);
    }

    // "now" at the right end, and a time axis with five RFC 3339 labels.
    let now_x = axis.x(now_ms);
    let _ = write!(
        out,
        "<line x1=\"{now_x:.1}\" y1=\"16\" x2=\"{now_x:.1}\" y2=\"{AXIS_Y}\" stroke=\"#1d1d1f\" stroke-dasharray=\"2 2\"/>\
         <text x=\"{now_x:.1}\" y=\"10\" font-size=\"11\" text-anchor=\"end\" fill=\"#1d1d1f\">now</text>\
         <line x1=\"{PAD}\" y1=\"{AXIS_Y}\" x2=\"{right}\" y2=\"{AXIS_Y}\" stroke=\"#999\"/>",
        right = WIDTH - PAD,
    );
    for i in 0..5i64 {
        let t = axis.quarter(i);
        let x = axis.x(t);
        let anchor = match i {
            0 => "start",
            4 => "end",
            _ => "middle",
        };
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{AXIS_Y}\" x2=\"{x:.1}\" y2=\"{tick}\" stroke=\"#999\"/>\
             <text class=\"tick\" x=\"{x:.1}\" y=\"{label}\" font-size=\"11\" fill=\"#555\" text-anchor=\"{anchor}\">{t}</text>",
            tick = AXIS_Y + 5.0,
            label = AXIS_Y + 19.0,
            t = Rfc3339Ms(t),
        );
    }
    out.push_str("</svg>");

    // A legend (names may not fit in their bars) and the latest periods as
    // text, for exact instants and for readers without the drawing.
    if !colour.is_empty() {
        let mut legend: Vec<(&str, usize)> = colour.iter().map(|(m, s)| (*m, *s)).collect();
        legend.sort_unstable();
        out.push_str("<p class=\"legend muted\">");
        for (member, slot) in legend {
            let _ = write!(
                out,
                "<span class=\"swatch\" style=\"background:{}\"></span>{}",
                FILLS[slot],
                shown(member)
            );
        }
        out.push_str("</p>");
    }
    if skipped > 0 {
        let _ = write!(
            out,
            "<p class=\"muted\">{skipped} older holding periods are kept but not drawn.</p>"
        );
    }
    if !all.is_empty() {
        out.push_str(
            "<table class=\"periods\"><thead><tr><th>From</th><th>To</th><th>Holder</th>\
             <th>Token</th><th>Ended</th></tr></thead><tbody>",
        );
        for p in all.iter().rev().take(MAX_ROWS) {
            let _ = write!(
                out,
                "<tr><td>{from}</td><td>{to}</td><td class=\"name\">{member}</td><td><code>{token}</code></td><td>{ended}</td></tr>",
                from = if p.held_before {
                    format!("before {}", Rfc3339Ms(p.from_ms))
                } else {
                    Rfc3339Ms(p.from_ms).to_string()
                },
                to = if p.ended == Ended::Holding {
                    "now".to_owned()
                } else {
                    Rfc3339Ms(p.to_ms).to_string()
                },
                member = shown(p.member),
                token = p.token,
                ended = p.ended.as_str(),
            );
        }
        out.push_str("</tbody></table>");
        if all.len() > MAX_ROWS {
            let _ = write!(
                out,
                "<p class=\"muted\">The latest {MAX_ROWS} of {} periods.</p>",
                all.len()
            );
        }
    }
}

/// The lease as a bar from its grant to its deadline (by the holder's
/// clock), with now marked; past the deadline, the overdue stretch in red.
fn countdown(out: &mut String, lease: &LeaseView<'_>, now_ms: i64) {
    let granted = lease.granted_at.0;
    let deadline = lease.deadline_ms.max(granted);
    let axis = Axis {
        start: granted.min(now_ms),
        end: deadline.max(now_ms),
    };
    let (x0, xd, xn) = (axis.x(granted), axis.x(deadline), axis.x(now_ms));
    let (class, words) = if lease.expired {
        (
            "expired",
            format!(
                "expired {} ago",
                seconds(lease.remaining_ms.saturating_neg())
            ),
        )
    } else {
        ("live", format!("{} left", seconds(lease.remaining_ms)))
    };
    let _ = write!(
        out,
        "<p class=\"lease\">Held by <b>{member}</b> under token <code>{token}</code>: \
         <span class=\"{class}\">{words}</span> · granted {granted_at} · deadline {deadline_at} \
         <span class=\"muted\">(the holder's clock)</span></p>\
         <svg class=\"countdown {class}\" viewBox=\"0 0 {WIDTH} 58\" role=\"img\" aria-label=\"lease {words}\">\
         <rect class=\"track\" x=\"{x0:.1}\" y=\"20\" width=\"{track:.1}\" height=\"16\" rx=\"3\" fill=\"#e8e8e8\"/>",
        member = shown(lease.member),
        token = lease.token,
        granted_at = lease.granted_at,
        deadline_at = lease.deadline,
        track = (xd - x0).max(1.0),
    );
    if lease.expired {
        let _ = write!(
            out,
            "<rect class=\"overdue\" x=\"{xd:.1}\" y=\"20\" width=\"{w:.1}\" height=\"16\" fill=\"#e15759\"/>",
            w = (xn - xd).max(1.0),
        );
    } else {
        let _ = write!(
            out,
            "<rect class=\"remaining\" x=\"{xn:.1}\" y=\"20\" width=\"{w:.1}\" height=\"16\" rx=\"3\" fill=\"#59a14f\"/>",
            w = (xd - xn).max(1.0),
        );
    }
    let _ = write!(
        out,
        "<line x1=\"{xn:.1}\" y1=\"14\" x2=\"{xn:.1}\" y2=\"42\" stroke=\"#1d1d1f\" stroke-width=\"2\"/>\
         <text x=\"{xn:.1}\" y=\"10\" font-size=\"11\" text-anchor=\"{now_anchor}\" fill=\"#1d1d1f\">now</text>\
         <line x1=\"{xd:.1}\" y1=\"18\" x2=\"{xd:.1}\" y2=\"40\" stroke=\"#555\"/>\
         <text x=\"{xd:.1}\" y=\"54\" font-size=\"11\" text-anchor=\"{deadline_anchor}\" fill=\"#555\">deadline</text>",
        now_anchor = if xn > WIDTH / 2.0 { "end" } else { "start" },
        deadline_anchor = if xd > WIDTH / 2.0 { "end" } else { "start" },
    );
    if xd - x0 > 150.0 {
        let _ = write!(
            out,
            "<text x=\"{x0:.1}\" y=\"54\" font-size=\"11\" fill=\"#555\">granted</text>"
        );
    }
    out.push_str("</svg>");
}

/// The holder, then the challengers in the order they would challenge.
fn candidates(out: &mut String, roster: &RosterView<'_>, now_ms: i64) {
    let registered = |member: &str| {
        roster
            .members
            .iter()
            .find(|m| m.member == member)
            .map_or_else(
                || "not registered".to_owned(),
                |m| m.registered_at.to_string(),
            )
    };
    if roster.lease.is_none() && roster.challengers.is_empty() {
        out.push_str("<p class=\"muted\">No member is registered.</p>");
        return;
    }
    out.push_str(
        "<table class=\"candidates\"><thead><tr><th>Rank</th><th>Member</th><th>Registered</th>\
         <th>May challenge at</th></tr></thead><tbody>",
    );
    if let Some(lease) = &roster.lease {
        let _ = write!(
            out,
            "<tr class=\"holder\"><td>holder</td><td class=\"name\"><b>{}</b></td><td>{}</td><td>holds the lease</td></tr>",
            shown(lease.member),
            registered(lease.member),
        );
    }
    for c in &roster.challengers {
        let _ = write!(
            out,
            "<tr class=\"challenger\"><td>{rank}</td><td class=\"name\">{member}</td><td>{registered}</td>\
             <td>{at} <span class=\"muted\">({relative})</span></td></tr>",
            rank = c.rank,
            member = shown(c.member),
            registered = registered(c.member),
            at = c.challenge_at,
            relative = relative(c.challenge_at.0, now_ms),
        );
    }
    out.push_str("</tbody></table>");
}

fn coordinator(out: &mut String, roster: &RosterView<'_>) {
    let Some(c) = roster.coordinator else {
        out.push_str("<p class=\"muted\">The coordinator has not been asked yet.</p>");
        return;
    };
    let pair = c.current.map_or_else(
        || "none (no producer holds the role)".to_owned(),
        |t| format!("<code>{t}</code>"),
    );
    let newer = match (c.current, roster.lease.as_ref()) {
        (Some(current), Some(lease)) if current.supersedes(&lease.token) => {
            " — newer than the lease's token: a member minted an epoch it has not written a lease under yet"
        }
        _ => "",
    };
    let _ = write!(
        out,
        "<p class=\"coordinator\">At its last poll ({at}) the transaction coordinator's pair was {pair}{newer}; \
         transaction state {state}.</p>",
        at = c.checked_at,
        state = c.state.as_deref().map_or_else(
            || "unknown".to_owned(),
            |s| format!("<code>{}</code>", escape(s))
        ),
    );
}

/// Renders the page of one role.
pub fn render(input: &PageInput<'_>) -> String {
    let roster = input.roster;
    let role = roster.role;
    let now_ms = input.now_ms;
    let mut out = String::with_capacity(32 * 1024);
    head(&mut out, role, true);
    let status = roster.status.map_or("unknown", |s| s.as_str());
    let _ = write!(
        out,
        "<h1>Role <code>{role}</code> <span class=\"status {status}\">{status}</span></h1>\
         <p class=\"muted\">Topic <code>{topic}</code> · partition {partition} · {failovers} in the status window · \
         view at offset {offset}, {age} ms old · refreshes every 2 s · \
         <a href=\"/roles/{segment}\">JSON</a> · <a href=\"/roles/{segment}/events\">events</a></p>",
        role = shown(role),
        topic = escape(input.topic),
        partition = roster.partition,
        failovers = count(roster.failovers_in_window, "failover"),
        offset = roster.view.offset,
        age = roster.view.age_ms,
        segment = path_segment(role),
    );

    out.push_str("<h2>Lease</h2>");
    match &roster.lease {
        Some(lease) => countdown(&mut out, lease, now_ms),
        None => out.push_str("<p class=\"lease\">Nobody holds the lease.</p>"),
    }

    out.push_str("<h2>Candidates in rank order</h2>");
    candidates(&mut out, roster, now_ms);
    coordinator(&mut out, roster);

    out.push_str("<h2>Holders over the kept history</h2>");
    let all = periods(input.history, now_ms);
    let _ = write!(
        out,
        "<p class=\"muted\">{n} kept ({scope}; at most {limit} per role, counted from when the service caught up). \
         Bars are holding periods labelled with the holder and its token; hatched stretches had no holder; \
         a triangle marks an epoch change.</p>",
        n = count(input.history.len(), "change"),
        scope = if input.history_complete {
            "the role's whole history"
        } else {
            "older changes are not kept"
        },
        limit = input.history_limit,
    );
    if input.history.is_empty() {
        out.push_str("<p class=\"muted\">No change of this role since the service caught up.</p>");
    } else {
        timeline(
            &mut out,
            role,
            &all,
            input.history.first().map(|e| e.at.0),
            now_ms,
        );
    }
    out.push_str("<p><a href=\"/\">← all roles</a></p></body></html>");
    out
}

/// The page of a role the topic holds no record of.
pub fn render_not_found(topic: &str, role: &str) -> String {
    let mut out = String::with_capacity(1024);
    head(&mut out, role, false);
    let _ = write!(
        out,
        "<h1>No such role</h1><p>The coordination topic <code>{}</code> holds no record of role <code>{}</code>.</p>\
         <p><a href=\"/\">← all roles</a></p></body></html>",
        escape(topic),
        shown(role),
    );
    out
}

/// The page while the views are not ready (it refreshes itself).
pub fn render_not_ready(role: &str, why: &NotReady) -> String {
    let mut out = String::with_capacity(1024);
    head(&mut out, role, true);
    let _ = write!(
        out,
        "<h1>Role <code>{}</code></h1><p class=\"muted\">Not ready: {}</p>\
         <p><a href=\"/\">← all roles</a></p></body></html>",
        shown(role),
        escape(&why.to_string()),
    );
    out
}

/// `GET /roles/{role}/page`.
pub async fn page(State(state): State<Arc<AppState>>, Role(role): Role) -> Response {
    let now_ms = state.clock.now_ms();
    match state.watcher.role(&role) {
        Ok(Some(view)) => {
            let (history, history_complete) = state.watcher.history(&role, -1);
            let roster = roster(&view, now_ms, state.stagger_ms());
            let body = render(&PageInput {
                topic: &state.config.kafka.topic,
                roster: &roster,
                history: &history,
                history_complete,
                history_limit: state.config.watch.event_history,
                now_ms,
            });
            let mut response = html(StatusCode::OK, body);
            view_headers(
                response.headers_mut(),
                roster.view.offset,
                roster.view.age_ms,
            );
            response
        }
        Ok(None) => html(
            StatusCode::NOT_FOUND,
            render_not_found(&state.config.kafka.topic, &role),
        ),
        Err(why) => html(
            StatusCode::SERVICE_UNAVAILABLE,
            render_not_ready(&role, &why),
        ),
    }
}

#[cfg(test)]
mod tests;
