//! The pages for people: `/` (every role, [`status`]) and
//! `/roles/{role}/page` (one role, [`role`]), server-rendered HTML with
//! inline SVG under a strict policy (no script, nothing loaded), and how
//! names are written into them ([`names`]).

use std::fmt::Write as _;
use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::service::state::AppState;
use crate::service::watch::RoleView;

pub(crate) mod names;
pub(crate) mod role;
pub(crate) mod status;

/// The names the pages show now, as a book ([`names::Names`]): every role,
/// member and holder of `views`, and `more` (a role page's past holders).
/// The skeletons of the book drawn last are reused, and this one is kept
/// for the next page.
pub(crate) fn names_of<'a>(
    state: &AppState,
    views: &'a [RoleView],
    more: impl IntoIterator<Item = &'a str>,
) -> Arc<names::Names> {
    let listed = views.iter().flat_map(|v| {
        let state = &v.state;
        std::iter::once(state.role())
            .chain(state.members().iter().map(|m| m.member.as_str()))
            .chain(state.lease().map(|l| l.member.as_str()))
    });
    let last = state.page_names();
    let book = Arc::new(names::Names::of(listed.chain(more), &last));
    *crate::sync::lock(&state.page_names) = book.clone();
    book
}

/// Percent-encodes `text` as one path segment: everything but RFC 3986's
/// unreserved characters, so a role named `a/b?c#d` links to its own page
/// (the router decodes the segment back); `.` and `..` as `%2E` and
/// `%2E%2E`, which a client that keeps percent-encoded dots (curl) sends as
/// they are. A browser resolves those too (the URL Standard counts `%2e`
/// as a dot), so the pages link such roles with [`role_page`].
pub fn path_segment(text: &str) -> String {
    if is_dot_segment(text) {
        return "%2E".repeat(text.len());
    }
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// True for `.` and `..`, which no URL path can carry as a segment.
fn is_dot_segment(text: &str) -> bool {
    matches!(text, "." | "..")
}

/// The link to `role`'s page: `/roles/{role}/page`, or for `.` and `..`
/// `/page?role=...` (the query keeps dots; a path resolves them away).
pub fn role_page(role: &str) -> String {
    if is_dot_segment(role) {
        format!("/page?role={role}")
    } else {
        format!("/roles/{}/page", path_segment(role))
    }
}

/// The pages' shared style sheet (inline: the policy loads nothing).
pub(super) const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5rem;color:#1d1d1f}\
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.35rem .6rem;border-bottom:1px solid #ddd;vertical-align:top}\
th{font-size:.8rem;text-transform:uppercase;color:#666}.num{text-align:right}code{font-size:.95em}\
.status{padding:.1rem .45rem;border-radius:.6rem;font-size:.85rem}.stable{background:#d9f2dd}.flapping{background:#ffe6b3}\
.leaderless,.vacant{background:#e8e8e8}.stuck{background:#ffd0d0}.muted{color:#777}a{color:#0b57d0}";

/// The pages' policy: nothing loaded, no script, inline style only, never
/// framed.
const POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'";

/// An HTML page with `status`, never cached, under [`POLICY`].
pub(super) fn html(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    response
}
