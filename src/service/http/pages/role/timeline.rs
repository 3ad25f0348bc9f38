//! The timeline of a role's page: its holding periods over the kept
//! history, as SVG bars (one colour per holder), hatched gaps without a
//! holder, a marker at each epoch change, an axis, then a legend and the
//! latest periods as a table.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::{Axis, PAD, WIDTH};
use crate::coordination::FencingToken;
use crate::service::http::pages::names::{Names, escape};
use crate::service::watch::{ChangeKind, RoleEvent};
use crate::time::Rfc3339Ms;

/// Most holding periods drawn: a flapping role with a long history would
/// otherwise make a page of megabytes, and bars narrower than a pixel show
/// nothing anyway.
pub(super) const MAX_BARS: usize = 200;
/// Most holding periods listed in the table under the timeline.
pub(super) const MAX_ROWS: usize = 20;
/// Rough width of one character of the 12-unit label font, to decide what
/// fits in a bar (SVG cannot wrap or clip text by itself without a script).
const CHAR_WIDTH: f64 = 7.0;

/// Bar fills and strokes (Tableau 10, light and full), one per holder.
pub(super) const FILLS: [&str; 10] = [
    "#a0cbe8", "#ffbe7d", "#8cd17d", "#ff9d9a", "#d4a6c8", "#f1ce63", "#86bcb6", "#fabfd2",
    "#d7b5a6", "#c7c7c7",
];
const STROKES: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#b6992d", "#499894", "#d37295",
    "#9d7660", "#79706e",
];

/// How a holding period ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
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
pub(crate) struct Period<'a> {
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
pub(crate) fn periods(history: &[RoleEvent], now_ms: i64) -> Vec<Period<'_>> {
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

/// FNV-1a: a colour per name that stays put across refreshes and builds.
pub(super) fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A palette slot per holder: by the name's hash, moved to the next free
/// slot on a collision so up to ten holders never share a colour.
pub(super) fn colours<'a>(periods: &[Period<'a>]) -> HashMap<&'a str, usize> {
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
pub(super) fn fitted(label: &str, width: f64) -> Option<String> {
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

pub(super) fn draw(
    out: &mut String,
    role: &str,
    all: &[Period<'_>],
    first_at: Option<i64>,
    now_ms: i64,
    names: &Names,
) {
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
        role = names.shown_plain(role),
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
            shown = names.shown_plain(p.member),
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
        let member = names.visible(p.member);
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
                names.shown(member)
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
                member = names.shown(p.member),
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
