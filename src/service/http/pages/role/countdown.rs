//! The lease of a role's page as a countdown bar: from its grant to its
//! deadline (by the holder's clock), now marked.

use std::fmt::Write as _;

use super::{Axis, Names, WIDTH, seconds};
use crate::service::watch::roster::LeaseView;

/// The lease as a bar from its grant to its deadline (by the holder's
/// clock), with now marked; past the deadline, the overdue stretch in red.
pub(super) fn draw(out: &mut String, lease: &LeaseView<'_>, now_ms: i64, names: &Names) {
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
        member = names.shown(lease.member),
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
