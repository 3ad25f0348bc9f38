//! `GET /`: a small server-rendered status page that refreshes itself:
//! every role with its holder, token, lease countdown, candidates in rank
//! order and status; each role links to its page
//! ([`super::role`]).

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;

use super::names::{self, Names, escape};
use super::{STYLE, html, names_of, role_page};
use crate::service::http::extract::query_values;
use crate::service::state::AppState;
use crate::service::watch::{NotReady, RoleView};

/// Most roles listed on one page.
const PAGE: usize = 500;

fn countdown(view: &RoleView, now_ms: i64) -> String {
    match view.state.lease() {
        None => "—".into(),
        // A deadline is whatever i64 a record holds: no overflow.
        Some(l) if now_ms >= l.deadline => format!(
            "expired {:.1} s ago",
            now_ms.saturating_sub(l.deadline) as f64 / 1000.0
        ),
        Some(l) => format!(
            "{:.1} s left",
            l.deadline.saturating_sub(now_ms) as f64 / 1000.0
        ),
    }
}

fn row(out: &mut String, view: &RoleView, now_ms: i64, names: &Names) {
    let state = &view.state;
    let lease = state.lease();
    let holder = lease
        .map(|l| names.shown(&l.member))
        .unwrap_or_else(|| "—".into());
    let token = lease.map(|l| l.token.to_string()).unwrap_or_default();
    let status = view.status.map_or("unknown", |s| s.as_str());
    let candidates: Vec<String> = state
        .members()
        .iter()
        .map(|m| {
            let name = names.shown(&m.member);
            if lease.is_some_and(|l| l.member == m.member) {
                format!("<b>{name}</b>")
            } else {
                name
            }
        })
        .collect();
    let _ = write!(
        out,
        "<tr data-role=\"{role}\"><td class=\"role\"><a href=\"{link}\">{name}</a></td><td><span class=\"status {status}\">{status}</span></td>\
         <td class=\"holder\">{holder}</td><td><code>{token}</code></td><td class=\"lease\">{countdown}</td>\
         <td class=\"candidates\">{candidates}</td><td class=\"num\">{failovers}</td></tr>",
        role = escape(state.role()),
        name = names.shown(state.role()),
        link = role_page(state.role()),
        countdown = countdown(view, now_ms),
        candidates = candidates.join(" → "),
        failovers = view.failovers_in_window,
    );
}

/// Renders the page for `views` at `now_ms`, their names as `names` has
/// them.
pub(crate) fn render(
    topic: &str,
    views: Result<&[RoleView], &NotReady>,
    filter: Option<&str>,
    now_ms: i64,
    names: &Names,
) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"2\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>krabka-authority</title>\
         <style>{STYLE}{names}</style></head><body><h1>Roles</h1>",
        names = names::STYLE,
    );
    match views {
        Err(why) => {
            let _ = write!(
                out,
                "<p class=\"muted\">Not ready: {}</p>",
                escape(&why.said())
            );
        }
        Ok(views) => {
            let shown: Vec<&RoleView> = views
                .iter()
                .filter(|v| filter.is_none_or(|f| v.state.role().contains(f)))
                .take(PAGE)
                .collect();
            let _ = write!(
                out,
                "<p class=\"muted\">Topic <code>{}</code> · {} roles{} · refreshes every 2 s · \
                 <a href=\"/roles\">JSON</a> · <a href=\"/metrics\">metrics</a></p>",
                escape(topic),
                views.len(),
                if shown.len() < views.len() {
                    format!(", {} shown", shown.len())
                } else {
                    String::new()
                },
            );
            out.push_str(
                "<table><thead><tr><th>Role</th><th>Status</th><th>Holder</th><th>Token</th>\
                 <th>Lease</th><th>Candidates in rank order</th><th class=\"num\">Failovers</th></tr></thead><tbody>",
            );
            for view in shown {
                row(&mut out, view, now_ms, names);
            }
            out.push_str("</tbody></table>");
        }
    }
    out.push_str("</body></html>");
    out
}

/// `GET /`.
pub(crate) async fn page(State(state): State<Arc<AppState>>, parts: Parts) -> Response {
    let views = state.watcher.all();
    // `?q=` filters by a part of the name; the last one given counts.
    let filter = query_values(&parts, "q").pop();
    let names = match &views {
        Ok(views) => names_of(&state, views, []),
        Err(_) => state.page_names(),
    };
    let body = render(
        &state.config.kafka.topic,
        views.as_deref(),
        filter.as_deref().filter(|q| !q.is_empty()),
        state.clock.now_ms(),
        &names,
    );
    html(StatusCode::OK, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordination::RoleState;

    /// A fresh view of `state` with nothing else known.
    fn view_of(state: RoleState) -> RoleView {
        RoleView {
            state: std::sync::Arc::new(state),
            partition: 0,
            offset: 0,
            age: std::time::Duration::ZERO,
            refreshed_at_ms: 0,
            status: None,
            failovers_in_window: 0,
            coordinator: None,
            skipped: Vec::new(),
        }
    }

    #[test]
    fn escaping_covers_markup_and_quotes() {
        assert_eq!(
            escape("<a href='x'>&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
        );
        assert_eq!(escape("plain ünïcödé"), "plain ünïcödé");
    }

    #[test]
    fn an_extreme_deadline_prints_without_overflow() {
        use crate::testkit::{lease_at, lease_record, t};
        let record = |deadline: i64| lease_record(0, "r", &lease_at("m", t(1, 1), 0, deadline));
        for deadline in [i64::MIN, i64::MAX] {
            let view = view_of(RoleState::from_records("r", &[record(deadline)]));
            assert!(countdown(&view, 1_000).contains(" s "));
        }
    }

    #[test]
    fn role_names_cannot_inject_markup() {
        let view = view_of(RoleState::new("<script>alert(1)</script>"));
        let html = render("t", Ok(&[view]), None, 0, &Names::default());
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    }

    #[test]
    fn names_that_impersonate_show_their_hidden_characters_on_the_status_page() {
        use crate::coordination::LogRecord;
        use crate::service::http::pages::names::{assert_shown_visibly, tests::LOOKALIKES};
        use crate::testkit::{T0, lease_at, lease_record, registration_record, t};
        let views: Vec<RoleView> = LOOKALIKES
            .iter()
            .map(|name| {
                let records: Vec<LogRecord> = vec![
                    registration_record(0, name, name, T0),
                    registration_record(1, name, "plain", T0),
                    lease_record(2, name, &lease_at(name, t(1, 0), T0, T0 + 1_000)),
                ];
                view_of(RoleState::from_records(name, &records))
            })
            .collect();
        let names = Names::of(
            LOOKALIKES.iter().copied().chain(["plain"]),
            &Names::default(),
        );
        let html = render("t", Ok(&views), None, T0, &names);
        for name in LOOKALIKES {
            assert_shown_visibly(&html, name);
            assert!(html.contains(&format!("data-role=\"{}\"", escape(name))));
        }
    }
}
