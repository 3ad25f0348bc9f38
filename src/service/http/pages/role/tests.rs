//! The role page rendered from hand-made rosters and histories.

use std::sync::Arc;
use std::time::Duration;

use super::timeline::*;
use super::*;
use crate::coordination::FencingToken;
use crate::coordination::{LogRecord, RoleState};
use crate::service::watch::ChangeKind;
use crate::service::watch::{CoordinatorView, NotReady, RoleStatus, RoleView};
use crate::testkit::{T0, lease_at, lease_record, registration_record, t};
use crate::time::Rfc3339Ms;

const STAGGER: i64 = 1_000;

/// A role with `members` registered in order and `lease` as its lease.
fn view(role: &str, members: &[&str], lease: Option<(&str, FencingToken, i64, i64)>) -> RoleView {
    let mut records: Vec<LogRecord> = members
        .iter()
        .enumerate()
        .map(|(i, member)| registration_record(i as i64, role, member, T0))
        .collect();
    if let Some((member, token, granted_at, deadline)) = lease {
        let lease = lease_at(member, token, granted_at, deadline);
        records.push(lease_record(records.len() as i64, role, &lease));
    }
    RoleView {
        state: Arc::new(RoleState::from_records(role, &records)),
        partition: 2,
        offset: records.len() as i64,
        age: Duration::from_millis(40),
        refreshed_at_ms: T0,
        status: Some(RoleStatus::Stable),
        failovers_in_window: 1,
        coordinator: None,
        skipped: Vec::new(),
    }
}

fn event(
    offset: i64,
    kind: ChangeKind,
    holder: Option<(&str, FencingToken, i64)>,
    at: i64,
) -> RoleEvent {
    RoleEvent {
        role: "r".into(),
        offset,
        kind,
        member: holder.map(|h| h.0.to_owned()),
        holder: holder.map(|h| h.0.to_owned()),
        token: holder.map(|h| h.1),
        deadline: holder.map(|h| Rfc3339Ms(h.2)),
        at: Rfc3339Ms(at),
    }
}

/// a holds 1:0 and lets it lapse; b takes over (1:1) and resigns; c takes
/// 1:2 and holds it now (T0 + 12 s).
fn failovers() -> Vec<RoleEvent> {
    use ChangeKind::*;
    vec![
        event(10, Acquired, Some(("a", t(1, 0), T0 + 2_000)), T0),
        event(11, Renewed, Some(("a", t(1, 0), T0 + 3_000)), T0 + 1_000),
        event(12, Acquired, Some(("b", t(1, 1), T0 + 8_000)), T0 + 5_000),
        event(13, Cleared, None, T0 + 7_000),
        event(14, Deregistered, None, T0 + 7_001),
        event(15, Acquired, Some(("c", t(1, 2), T0 + 14_000)), T0 + 9_000),
        event(16, Renewed, Some(("c", t(1, 2), T0 + 20_000)), T0 + 10_000),
    ]
}

fn page(view: &RoleView, history: &[RoleEvent], now_ms: i64) -> String {
    let roster = roster(view, now_ms, STAGGER);
    let state = &view.state;
    let names = Names::of(
        std::iter::once(state.role())
            .chain(state.members().iter().map(|m| m.member.as_str()))
            .chain(history.iter().filter_map(|e| e.holder.as_deref())),
        &Names::default(),
    );
    render(&PageInput {
        topic: "coordination",
        roster: &roster,
        history,
        history_complete: false,
        history_limit: 128,
        now_ms,
        names: &names,
    })
}

/// The elements and attributes of `html`, assuming every `<` starts a tag
/// (which holds exactly when text was escaped).
fn tags(html: &str) -> Vec<String> {
    html.split('<')
        .skip(1)
        .map(|rest| rest[..rest.find('>').unwrap_or(rest.len())].to_owned())
        .collect()
}

const ELEMENTS: &[&str] = &[
    "!doctype", "html", "head", "meta", "title", "style", "body", "nav", "a", "h1", "h2", "code",
    "span", "bdi", "p", "b", "table", "thead", "tbody", "tr", "th", "td", "svg", "defs", "pattern",
    "rect", "line", "path", "text", "g",
];

/// Every tag is one the page writes, with no event handler attribute.
fn only_own_markup(html: &str) {
    for tag in tags(html) {
        let name = tag
            .trim_start_matches('/')
            .split([' ', '/'])
            .next()
            .unwrap_or("");
        assert!(
            ELEMENTS.contains(&name),
            "foreign element <{tag}> in:\n{html}"
        );
        // Attributes sit outside quoted values; a value cannot end early
        // because quotes inside names are escaped.
        let outside: String = tag.split('"').step_by(2).collect();
        assert!(
            !outside.split_whitespace().any(|a| a.starts_with("on")),
            "an event handler in <{tag}>"
        );
    }
}

#[test]
fn periods_follow_takeovers_lapses_and_resigns() {
    let history = failovers();
    let got = periods(&history, T0 + 12_000);
    let summary: Vec<_> = got
        .iter()
        .map(|p| (p.member, p.token, p.from_ms - T0, p.to_ms - T0, p.ended))
        .collect();
    assert_eq!(
        summary,
        [
            ("a", t(1, 0), 0, 3_000, Ended::Expired),
            ("b", t(1, 1), 5_000, 7_000, Ended::Cleared),
            ("c", t(1, 2), 9_000, 12_000, Ended::Holding),
        ]
    );
    assert!(got.iter().all(|p| !p.held_before));
    // Later, c's lease lapses with nobody taking over.
    let later = periods(&history, T0 + 30_000);
    assert_eq!(
        (later[2].to_ms - T0, later[2].ended),
        (20_000, Ended::Expired)
    );
}

#[test]
fn a_history_that_starts_mid_lease_a_late_renewal_and_a_newer_token() {
    use ChangeKind::*;
    let history = [
        event(5, Renewed, Some(("a", t(1, 0), T0 + 2_000)), T0),
        event(6, Registered, Some(("a", t(1, 0), T0 + 2_000)), T0 + 500),
        // Applied after the deadline it extends: a late renewal or a late
        // read, the same period either way.
        event(7, Renewed, Some(("a", t(1, 0), T0 + 9_000)), T0 + 4_000),
        // a under a newer token: a new period, no gap.
        event(8, Renewed, Some(("a", t(1, 1), T0 + 10_000)), T0 + 5_000),
        // A clear read after the deadline ends the period at the deadline.
        event(9, Cleared, None, T0 + 11_000),
    ];
    let got = periods(&history, T0 + 12_000);
    let summary: Vec<_> = got
        .iter()
        .map(|p| {
            (
                p.token,
                p.from_ms - T0,
                p.to_ms - T0,
                p.held_before,
                p.ended,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (t(1, 0), 0, 5_000, true, Ended::Replaced),
            (t(1, 1), 5_000, 10_000, false, Ended::Cleared),
        ]
    );
}

#[test]
fn the_timeline_draws_bars_gaps_epoch_changes_and_an_axis_in_order() {
    let now = T0 + 12_000;
    let v = view(
        "r",
        &["a", "b", "c"],
        Some(("c", t(1, 2), T0 + 10_000, T0 + 20_000)),
    );
    let html = page(&v, &failovers(), now);
    only_own_markup(&html);
    let svg_start = html.find("<svg class=\"timeline\"").expect("a timeline");
    let svg = &html[svg_start..svg_start + html[svg_start..].find("</svg>").unwrap()];

    let bars: Vec<&str> = svg
        .match_indices("<g class=\"holder-bar\" data-member=\"")
        .map(|(i, m)| {
            let rest = &svg[i + m.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect();
    assert_eq!(
        bars,
        ["a", "b", "c"],
        "one bar per holding period, in order"
    );
    let labels: Vec<usize> = ["a · 1:0", "b · 1:1", "c · 1:2"]
        .iter()
        .map(|l| svg.find(&format!(">{l}</text>")).expect(l))
        .collect();
    assert!(labels.is_sorted(), "labels in order: {labels:?}");
    assert_eq!(
        svg.matches("class=\"gap\"").count(),
        2,
        "the lapse and the resign"
    );
    assert!(svg.contains("no holder: the lease expired from 2023-11-14T22:13:23.000Z"));
    assert!(svg.contains("no holder: the holder resigned"));
    assert_eq!(svg.matches("class=\"epoch-change\"").count(), 2);
    assert!(svg.contains("epoch change to 1:2"));

    let ticks: Vec<&str> = svg
        .match_indices("class=\"tick\"")
        .map(|(i, _)| {
            let rest = &svg[i..];
            let text = &rest[rest.find('>').unwrap() + 1..];
            &text[..text.find('<').unwrap()]
        })
        .collect();
    assert_eq!(ticks.len(), 5);
    assert_eq!(
        ticks[0],
        Rfc3339Ms(T0).to_string(),
        "starts at the first change"
    );
    assert_eq!(ticks[4], Rfc3339Ms(now).to_string(), "ends now");
    assert_eq!(ticks[2], "2023-11-14T22:13:26.000Z");

    // The same periods as text, newest first.
    let table = &html[html.find("<table class=\"periods\"").unwrap()..];
    let rows: Vec<usize> = ["1:2", "1:1", "1:0"]
        .iter()
        .map(|tok| table.find(&format!("<code>{tok}</code>")).unwrap())
        .collect();
    assert!(rows.is_sorted(), "{rows:?}");
    assert!(html.contains("7 changes kept (older changes are not kept; at most 128"));
}

#[test]
fn a_long_flapping_history_draws_only_the_latest_bars() {
    let history: Vec<RoleEvent> = (0..(MAX_BARS as i64 + 50))
        .map(|i| {
            let member = if i % 2 == 0 { "a" } else { "b" };
            event(
                i,
                ChangeKind::Acquired,
                Some((member, t(1, i as i16), T0 + i * 1_000 + 5_000)),
                T0 + i * 1_000,
            )
        })
        .collect();
    let now = T0 + 300_000;
    let html = page(&view("r", &["a", "b"], None), &history, now);
    assert_eq!(html.matches("class=\"holder-bar\"").count(), MAX_BARS);
    assert!(html.contains("50 older holding periods are kept but not drawn"));
    assert_eq!(
        html.matches("<tr><td>").count(),
        MAX_ROWS,
        "the table lists the latest"
    );
    assert!(html.len() < 200_000, "{} bytes", html.len());
}

#[test]
fn the_countdown_of_a_live_lease_shows_what_is_left() {
    let v = view("r", &["a", "b"], Some(("a", t(7, 3), T0, T0 + 10_000)));
    let html = page(&v, &[], T0 + 4_000);
    assert!(html.contains("<svg class=\"countdown live\""), "{html}");
    assert!(html.contains("<span class=\"live\">6.0 s left</span>"));
    assert!(html.contains("class=\"remaining\""));
    assert!(!html.contains("class=\"overdue\""));
    // now sits 40 % of the way from the grant to the deadline.
    let now_x = PAD + 0.4 * (WIDTH - 2.0 * PAD);
    assert!(
        html.contains(&format!("<line x1=\"{now_x:.1}\" y1=\"14\"")),
        "{html}"
    );
    assert!(html.contains("No change of this role since the service caught up"));
}

#[test]
fn the_countdown_of_an_expired_lease_says_so() {
    let v = view("r", &["a", "b"], Some(("a", t(7, 3), T0, T0 + 10_000)));
    let html = page(&v, &[], T0 + 12_500);
    assert!(html.contains("<svg class=\"countdown expired\""), "{html}");
    assert!(html.contains("<span class=\"expired\">expired 2.5 s ago</span>"));
    assert!(html.contains("class=\"overdue\""));
    assert!(!html.contains("class=\"remaining\""));
    let html = page(&view("r", &["a"], None), &[], T0);
    assert!(html.contains("Nobody holds the lease."));
    assert!(!html.contains("class=\"countdown"));
}

#[test]
fn candidates_come_in_rank_order_with_their_challenge_instants() {
    let deadline = T0 + 10_000;
    let mut v = view("r", &["c", "a", "b"], Some(("a", t(7, 3), T0, deadline)));
    v.coordinator = Some(CoordinatorView {
        current: Some(t(7, 4)),
        state: Some("Ongoing".into()),
        checked_at: Rfc3339Ms(T0 + 500),
    });
    let html = page(&v, &[], T0 + 4_000);
    let table = &html[html.find("<table class=\"candidates\"").unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    let order: Vec<usize> = [
        // Ranks in join order (c, a, b), as in the JSON's members; the
        // rows in the order the members may challenge.
        "<td>1 · holder</td><td class=\"name\"><b><bdi>a</bdi></b>".to_owned(),
        format!(
            "<td>0</td><td class=\"name\"><bdi>c</bdi></td><td>{}</td><td>{} <span class=\"muted\">(in 6.0 s)",
            Rfc3339Ms(T0),
            Rfc3339Ms(deadline)
        ),
        format!(
            "<td>2</td><td class=\"name\"><bdi>b</bdi></td><td>{}</td><td>{} <span class=\"muted\">(in 7.0 s)",
            Rfc3339Ms(T0),
            Rfc3339Ms(deadline + STAGGER)
        ),
    ]
    .iter()
    .map(|row| {
        table
            .find(row.as_str())
            .unwrap_or_else(|| panic!("{row} not in {table}"))
    })
    .collect();
    assert!(order.is_sorted(), "{order:?}");
    assert!(html.contains("pair was <code>7:4</code> — newer than the lease"));
    assert!(html.contains("transaction state <code>Ongoing</code>"));
}

#[test]
fn hostile_role_and_member_names_stay_text() {
    let role = "</svg><script>alert('r')</script>\"'&";
    let members = [
        "<img src=x onerror=alert(1)>",
        "\" onmouseover=\"alert(2)",
        "'/></svg><script>alert(3)</script>",
    ];
    let mut v = view(role, &members, Some((members[0], t(1, 1), T0, T0 + 10_000)));
    v.coordinator = Some(CoordinatorView {
        current: None,
        state: Some("<b>evil</b>".into()),
        checked_at: Rfc3339Ms(T0),
    });
    let history: Vec<RoleEvent> = members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            event(
                i as i64,
                ChangeKind::Acquired,
                Some((m, t(1, i as i16), T0 + 100_000)),
                T0 + i as i64 * 1_000,
            )
        })
        .collect();
    let html = page(&v, &history, T0 + 5_000);
    only_own_markup(&html);
    assert!(
        !html.contains("<script") && !html.contains("<img"),
        "{html}"
    );
    assert_eq!(
        html.matches("</svg>").count(),
        2,
        "the countdown and the timeline only"
    );
    assert!(
        html.contains(
            "&lt;/svg&gt;&lt;script&gt;alert(&#39;r&#39;)&lt;/script&gt;&quot;&#39;&amp;"
        )
    );
    assert!(html.contains("data-member=\"&quot; onmouseover=&quot;alert(2)\""));
    assert!(html.contains("&lt;b&gt;evil&lt;/b&gt;"));
    assert_eq!(
        html.matches("class=\"holder-bar\"").count(),
        3,
        "the names did not break the bars"
    );
    // Links carry the role percent-encoded, never as markup.
    assert!(html.contains(&format!("href=\"/roles/{}/events\"", path_segment(role))));
    assert!(!path_segment(role).contains(['<', '"', '\'', '/']));

    let why = NotReady::Topic {
        topic: "<why>".into(),
        why: Some("<script>".into()),
    };
    let names = Names::default();
    for page in [
        render_not_found("t", role, &names),
        render_not_ready(role, &why, &names),
    ] {
        only_own_markup(&page);
        assert!(page.contains("&lt;/svg&gt;&lt;script&gt;"), "{page}");
        assert!(!page.contains("<script"));
    }
}

#[test]
fn long_names_are_cut_to_their_bar_on_a_character_boundary() {
    assert_eq!(fitted("ab", 100.0).as_deref(), Some("ab"));
    assert_eq!(
        fitted("ünïcödé-member-name", 60.0).as_deref(),
        Some("ünïcöd…")
    );
    assert_eq!(fitted("anything", 20.0), None);
    // A cut never lands inside an entity: escaping comes after.
    let v = view("r", &["a"], None);
    let history = [event(
        0,
        ChangeKind::Acquired,
        Some((
            "<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<",
            t(1, 0),
            T0 + 1_000,
        )),
        T0,
    )];
    let html = page(&v, &history, T0 + 100_000);
    only_own_markup(&html);
}

#[test]
fn holders_get_distinct_colours_that_do_not_depend_on_the_window() {
    let history: Vec<RoleEvent> = (0..10)
        .map(|i| {
            event(
                i,
                ChangeKind::Acquired,
                Some((
                    ["m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9"][i as usize],
                    t(1, i as i16),
                    T0 + 100_000,
                )),
                T0 + i * 1_000,
            )
        })
        .collect();
    let all = periods(&history, T0 + 20_000);
    let slots = colours(&all);
    let mut used: Vec<usize> = slots.values().copied().collect();
    used.sort_unstable();
    used.dedup();
    assert_eq!(used.len(), 10, "ten holders, ten colours");
    // Without collisions a holder keeps its colour when others come and go.
    let alone = colours(&all[3..4]);
    assert_eq!(alone["m3"], (fnv("m3") % FILLS.len() as u64) as usize);
}

#[test]
fn any_instants_a_record_may_hold_render_without_overflow() {
    for (granted, deadline) in [(i64::MIN, i64::MAX), (i64::MAX, i64::MIN), (0, 0)] {
        let v = view("r", &["a", "b"], Some(("a", t(1, 0), granted, deadline)));
        let history = [
            event(0, ChangeKind::Acquired, Some(("a", t(1, 0), deadline)), T0),
            event(
                1,
                ChangeKind::Renewed,
                Some(("a", t(1, 0), granted)),
                T0 + 1,
            ),
            event(
                2,
                ChangeKind::Acquired,
                Some(("b", t(1, 1), i64::MAX)),
                T0 + 2,
            ),
        ];
        only_own_markup(&page(&v, &history, T0 + 3));
    }
}

#[test]
fn names_that_impersonate_show_their_hidden_characters_on_the_role_page() {
    use crate::service::http::pages::names::{assert_shown_visibly, tests::LOOKALIKES};
    for (i, name) in LOOKALIKES.iter().enumerate() {
        // The name as the role, as the holder, as a challenger and in the
        // history.
        let other = LOOKALIKES[(i + 1) % LOOKALIKES.len()];
        let v = view(name, &[name, other], Some((name, t(1, 1), T0, T0 + 10_000)));
        let history = [event(
            0,
            ChangeKind::Acquired,
            Some((name, t(1, 1), T0 + 10_000)),
            T0,
        )];
        let html = page(&v, &history, T0 + 5_000);
        only_own_markup(&html);
        assert_shown_visibly(&html, name);
        assert_shown_visibly(&html, other);
        // The data attributes stay exact.
        assert!(
            html.contains(&format!("data-member=\"{}\"", escape(name))),
            "{name:?}"
        );
    }
}
