//! `GET /roles/{role}/page`: one role drawn for people. A timeline of its
//! holders over the service's kept history, the current lease as a
//! countdown bar, and the candidates in rank order with their challenge
//! instants. Server-rendered HTML with inline SVG: no script, readable
//! without JavaScript, under the same strict policy as `/`.
//!
//! Rendering is a pure function of the roster, the kept changes and the
//! instant, so it is tested without a broker. Names (roles, members, the
//! coordinator's state) reach the markup only through `names` (exactly in
//! attributes, with their misleading characters marked in text); every
//! number and instant is the service's own.
//!
//! The drawings are rooms of their own: [`timeline`] (the holding periods
//! and their bars) and [`countdown`] (the lease).

mod countdown;
#[cfg(test)]
mod tests;
mod timeline;

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::names::{self, Names, escape};
use super::{STYLE, html, names_of, path_segment};
use crate::service::http::extract::{Role, query_values, validate_role};
use crate::service::http::problem::ApiError;
use crate::service::http::views::view_headers;
use crate::service::state::AppState;
use crate::service::watch::roster::{RosterView, roster};
use crate::service::watch::{NotReady, RoleEvent};
use std::fmt::Write as _;

pub(crate) use timeline::periods;

/// Width of both drawings in SVG units; they scale to the page's width.
const WIDTH: f64 = 1000.0;
/// Horizontal margin inside the drawings, so end labels are not clipped.
const PAD: f64 = 12.0;

/// What one page shows.
#[derive(Debug)]
pub(crate) struct PageInput<'a> {
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
    /// The names the service shows, to write this page's names with.
    pub names: &'a Names,
}

fn head(out: &mut String, title: &str, refresh: bool, names: &Names) {
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
        title = names.shown_plain(title),
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

/// The holder, then the challengers in the order they would challenge.
fn candidates(out: &mut String, roster: &RosterView<'_>, now_ms: i64, names: &Names) {
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
            "<tr class=\"holder\"><td>{} · holder</td><td class=\"name\"><b>{}</b></td><td>{}</td><td>holds the lease</td></tr>",
            roster
                .members
                .iter()
                .find(|m| m.member == lease.member)
                .map_or_else(|| "—".to_owned(), |m| m.rank.to_string()),
            names.shown(lease.member),
            registered(lease.member),
        );
    }
    for c in &roster.challengers {
        let _ = write!(
            out,
            "<tr class=\"challenger\" data-member=\"{exact}\"><td>{rank}</td><td class=\"name\">{member}</td><td>{registered}</td>\
             <td>{at} <span class=\"muted\">({relative})</span></td></tr>",
            rank = c.rank,
            member = names.shown(c.member),
            exact = escape(c.member),
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

/// The links to the role's JSON and events. A browser resolves the path of
/// `.` and `..` away (`%2E` too), so for them the paths are written for a
/// client that sends them as they are.
fn api_links(role: &str) -> String {
    let segment = path_segment(role);
    if matches!(role, "." | "..") {
        format!(
            "JSON and events: <code>GET /roles/{segment}</code>, <code>/roles/{segment}/events</code> (with <code>curl --path-as-is</code>: a browser resolves dot segments)"
        )
    } else {
        format!(
            "<a href=\"/roles/{segment}\">JSON</a> · <a href=\"/roles/{segment}/events\">events</a>"
        )
    }
}

/// Renders the page of one role.
pub(crate) fn render(input: &PageInput<'_>) -> String {
    let roster = input.roster;
    let role = roster.role;
    let now_ms = input.now_ms;
    let names = input.names;
    let mut out = String::with_capacity(32 * 1024);
    head(&mut out, role, true, names);
    let status = roster.status.map_or("unknown", |s| s.as_str());
    let _ = write!(
        out,
        "<h1>Role <code>{role}</code> <span class=\"status {status}\">{status}</span></h1>\
         <p class=\"muted\">Topic <code>{topic}</code> · partition {partition} · {failovers} in the status window · \
         view at offset {offset}, {age} ms old · refreshes every 2 s · {links}</p>",
        role = names.shown(role),
        topic = escape(input.topic),
        partition = roster.partition,
        failovers = count(roster.failovers_in_window, "failover"),
        offset = roster.view.offset,
        age = roster.view.age_ms,
        links = api_links(role),
    );

    out.push_str("<h2>Lease</h2>");
    match &roster.lease {
        Some(lease) => countdown::draw(&mut out, lease, now_ms, names),
        None => out.push_str("<p class=\"lease\">Nobody holds the lease.</p>"),
    }

    out.push_str("<h2>Candidates in rank order</h2>");
    candidates(&mut out, roster, now_ms, names);
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
        timeline::draw(
            &mut out,
            role,
            &all,
            input.history.first().map(|e| e.at.0),
            now_ms,
            names,
        );
    }
    out.push_str("<p><a href=\"/\">← all roles</a></p></body></html>");
    out
}

/// The page of a role the topic holds no record of.
pub(crate) fn render_not_found(topic: &str, role: &str, names: &Names) -> String {
    let mut out = String::with_capacity(1024);
    head(&mut out, role, false, names);
    let _ = write!(
        out,
        "<h1>No such role</h1><p>The coordination topic <code>{}</code> holds no record of role <code>{}</code>.</p>\
         <p><a href=\"/\">← all roles</a></p></body></html>",
        escape(topic),
        names.shown(role),
    );
    out
}

/// The page while the views are not ready (it refreshes itself).
pub(crate) fn render_not_ready(role: &str, why: &NotReady, names: &Names) -> String {
    let mut out = String::with_capacity(1024);
    head(&mut out, role, true, names);
    let _ = write!(
        out,
        "<h1>Role <code>{}</code></h1><p class=\"muted\">Not ready: {}</p>\
         <p><a href=\"/\">← all roles</a></p></body></html>",
        names.shown(role),
        escape(&why.said()),
    );
    out
}

/// `GET /roles/{role}/page`.
pub(crate) async fn page(State(state): State<Arc<AppState>>, Role(role): Role) -> Response {
    page_of(&state, role)
}

/// `GET /page?role=...`: the same page for a role named in the query, the
/// link of `.` and `..`, which no path can carry ([`super::role_page`]).
pub(crate) async fn page_by_query(
    State(state): State<Arc<AppState>>,
    parts: axum::http::request::Parts,
) -> Result<Response, ApiError> {
    let role = match query_values(&parts, "role").as_slice() {
        [one] => one.clone(),
        [] => {
            return Err(ApiError::invalid(
                "role",
                "the role query parameter is missing; add ?role=<role> (percent-encoded)",
            ));
        }
        _ => {
            return Err(ApiError::invalid(
                "role",
                "the role query parameter is given more than once; give it once",
            ));
        }
    };
    validate_role(&role)?;
    Ok(page_of(&state, role))
}

fn page_of(state: &Arc<AppState>, role: String) -> Response {
    let now_ms = state.clock.now_ms();
    match state.watcher.role(&role) {
        Ok(Some(view)) => {
            let (history, history_complete) = state.watcher.history(&role, -1);
            let roster = roster(&view, now_ms, state.stagger_ms());
            // Every name the service shows, and this page's past holders.
            let all = state.watcher.all();
            let listed = all.as_deref().unwrap_or(std::slice::from_ref(&view));
            let names = names_of(
                state,
                listed,
                history
                    .iter()
                    .flat_map(|e| [e.member.as_deref(), e.holder.as_deref()])
                    .flatten(),
            );
            let body = render(&PageInput {
                topic: &state.config.kafka.topic,
                roster: &roster,
                history: &history,
                history_complete,
                history_limit: state.config.watch.event_history,
                now_ms,
                names: &names,
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
            render_not_found(&state.config.kafka.topic, &role, &state.page_names()),
        ),
        Err(why) => {
            tracing::warn!(cause = %why, "answered the role page with 503");
            html(
                StatusCode::SERVICE_UNAVAILABLE,
                render_not_ready(&role, &why, &state.page_names()),
            )
        }
    }
}
