//! The status pages in a real browser (Debian's headless Chromium): `/`
//! while demo candidates compete on the real broker, the holder shown being
//! the one the roster view reports; and a role's page after failovers
//! driven by the leadership client, its timeline holding one bar per
//! holding period and a hostile member name staying text. Screenshots are
//! kept as artifacts in the cargo target's `tmp/test-artifacts/`
//! (`status-page.png`, `role-page.png`; `CARGO_TARGET_DIR` honoured).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use krabka_authority::coordination::FencingToken;
use krabka_authority::service::path_segment;
use serde_json::Value;

use krabka_authority::transport::Registrar;

use crate::support::broker::{bootstrap, topic, transport};
use crate::support::leadership::{Pending, candidate, holds};
use crate::support::process::{Process, binary};
use crate::support::service::{Service, get, ready, start, watcher_config};
use crate::support::{eventually, repo, unique};

fn chromium() -> PathBuf {
    for candidate in ["chromium", "chromium-browser", "google-chrome"] {
        if let Ok(out) = Command::new("which").arg(candidate).output()
            && out.status.success()
        {
            return PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        }
    }
    panic!("the status page test needs Chromium: apt-get install chromium (.ci/run installs it)");
}

fn browse(url: &str, args: &[&str]) -> String {
    let profile = std::env::temp_dir().join(unique("chromium-profile"));
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .expect("chromium runs");
    let _ = std::fs::remove_dir_all(profile);
    assert!(out.status.success(), "chromium failed: {:?}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_status_page_shows_the_holder_in_a_real_browser() {
    let topic = topic(3).await;
    let service = start(watcher_config(&topic)).await;
    let role = unique("page");
    let demo = binary()
        .args([
            "demo",
            "--bootstrap-servers",
            &bootstrap(),
            "--topic",
            &topic,
        ])
        .args([
            "--roles",
            &role,
            "--members",
            "3",
            "--lease",
            "10s",
            "--renew",
            "2s",
            "--stagger",
            "2s",
            "--for",
            "60s",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the demo runs");
    let mut demo = Process(demo);

    let view: Value = eventually(|| async {
        let (status, v, _) = get(&format!("{}/roles/{role}", service.url)).await;
        (status == 200
            && v["lease"].is_object()
            && v["members"].as_array().map_or(0, Vec::len) == 3)
            .then_some(v)
    })
    .await;
    let holder = view["lease"]["member"].as_str().unwrap().to_owned();
    let token = view["lease"]["token"].as_str().unwrap().to_owned();

    let url = format!("{}/?q={role}", service.url);
    let dom = tokio::task::block_in_place(|| browse(&url, &["--dump-dom"]));
    let row_start = dom
        .find(&format!("data-role=\"{role}\""))
        .unwrap_or_else(|| panic!("no row for {role}:\n{dom}"));
    let row = &dom[row_start
        ..dom[row_start..]
            .find("</tr>")
            .map_or(dom.len(), |e| row_start + e)];
    assert!(
        row.contains(&format!("<td class=\"holder\"><bdi>{holder}</bdi></td>")),
        "holder {holder} not shown: {row}"
    );
    assert!(row.contains(&token), "token {token} not shown: {row}");
    assert!(row.contains("s left"), "no countdown: {row}");
    assert!(
        row.contains(&format!("href=\"/roles/{role}/page\"")),
        "no link to the role's page: {row}"
    );
    assert!(row.contains("stable"), "{row}");
    for m in view["members"].as_array().unwrap() {
        assert!(row.contains(m["member"].as_str().unwrap()), "{row}");
    }

    let artifacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    tokio::task::block_in_place(|| {
        browse(
            &url,
            &[
                &format!("--screenshot={}", shot.display()),
                "--window-size=1280,600",
            ],
        )
    });
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 1000, "no screenshot at {}", shot.display());
    eprintln!(
        "status page screenshot: {} ({size} bytes), holder {holder}",
        shot.display()
    );
    let _ = demo.0.kill();
}

/// Undoes the entities Chromium writes when it serializes the DOM.
fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// The values of attribute `name` on the elements whose tag starts with
/// `start`, in document order. Serialized attribute values hold no `"`.
fn attributes(dom: &str, start: &str, name: &str) -> Vec<String> {
    dom.match_indices(start)
        .map(|(i, _)| {
            let rest = &dom[i..];
            let at = rest
                .find(&format!(" {name}=\""))
                .unwrap_or_else(|| panic!("no {name} in {}", &rest[..200.min(rest.len())]));
            let value = &rest[at + name.len() + 3..];
            unescape(&value[..value.find('"').unwrap()])
        })
        .collect()
}

async fn lease_token(service: &Service, role: &str) -> Option<FencingToken> {
    let (_, view, _) = get(&format!("{}/roles/{}", service.url, path_segment(role))).await;
    view["lease"]["token"].as_str()?.parse().ok()
}

async fn members(service: &Service, role: &str) -> usize {
    let (_, view, _) = get(&format!("{}/roles/{}", service.url, path_segment(role))).await;
    view["members"].as_array().map_or(0, Vec::len)
}

async fn takes_over(
    pending: Pending,
) -> krabka_authority::leadership::Leadership<krabka_authority::kafka::KafkaTransport> {
    tokio::time::timeout(Duration::from_secs(20), pending)
        .await
        .expect("takes over in time")
        .unwrap()
        .expect("acquires")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_role_page_after_failovers_draws_every_holding_period_and_keeps_names_text() {
    let topic = topic(3).await;
    let service = start(watcher_config(&topic)).await;
    // Caught up before the role's first record: every change of it is kept.
    ready(&service).await;
    let prefix = unique("role-page");
    let role = format!("{prefix}-<i>\"'&");
    let hostile = "\"><img src=x onerror=document.title='pwned'></svg><script>document.title='pwned'</script>";

    // node-a holds, resigns: node-b takes over; node-b goes silent: the
    // hostile member takes over after its deadline; node-a comes back and
    // takes over when the hostile member resigns.
    let a = holds(&topic, &role, "node-a").await;
    let b = candidate(&topic, &role, "node-b").await;
    // Each registers in a task of its own: b first, so b is next in rank.
    eventually(|| async { (members(&service, &role).await == 2).then_some(()) }).await;
    let h = candidate(&topic, &role, hostile).await;
    eventually(|| async { (members(&service, &role).await == 3).then_some(()) }).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let mut periods = vec![("node-a", a.token())];
    a.resign().await.unwrap();
    let b = takes_over(b).await;
    periods.push(("node-b", b.token()));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    drop(b);
    let h = takes_over(h).await;
    periods.push((hostile, h.token()));
    let a = candidate(&topic, &role, "node-a").await;
    eventually(|| async { (members(&service, &role).await == 3).then_some(()) }).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    h.resign().await.unwrap();
    let a = takes_over(a).await;
    periods.push(("node-a", a.token()));
    eventually(|| async { (lease_token(&service, &role).await == Some(a.token())).then_some(()) })
        .await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    // `/` links the role to its page.
    let index = tokio::task::block_in_place(|| {
        browse(&format!("{}/?q={prefix}", service.url), &["--dump-dom"])
    });
    let hrefs = attributes(&index, "<a href=\"/roles/", "href");
    assert_eq!(hrefs.len(), 1, "one row links to a role page: {index}");
    let url = format!("{}{}", service.url, hrefs[0]);
    assert_eq!(hrefs[0], format!("/roles/{}/page", path_segment(&role)));

    let dom = tokio::task::block_in_place(|| browse(&url, &["--dump-dom"]));
    let bars: Vec<(String, String)> = attributes(&dom, "<g class=\"holder-bar\"", "data-member")
        .into_iter()
        .zip(attributes(&dom, "<g class=\"holder-bar\"", "data-token"))
        .collect();
    let expected: Vec<(String, String)> = periods
        .iter()
        .map(|(m, t)| ((*m).to_owned(), t.to_string()))
        .collect();
    assert_eq!(
        bars, expected,
        "one bar per holding period, in order:\n{dom}"
    );
    assert_eq!(
        attributes(&dom, "<g class=\"holder-bar\"", "data-ended"),
        ["resigned", "expired", "resigned", "holding"]
    );
    assert_eq!(dom.matches("<g class=\"epoch-change\"").count(), 3, "{dom}");
    assert!(dom.contains("no holder: the lease expired"), "{dom}");
    assert!(dom.contains("no holder: the holder resigned"), "{dom}");
    assert!(dom.contains("<svg class=\"countdown live\""), "{dom}");
    assert!(
        dom.contains(
            "<tr class=\"holder\"><td>holder</td><td class=\"name\"><b><bdi>node-a</bdi></b>"
        ),
        "{dom}"
    );

    // The hostile names stayed text: no element but the page's own, no
    // script ran (it would have renamed the document), and the names read
    // back exactly.
    assert!(!dom.contains("<img") && !dom.contains("<script"), "{dom}");
    assert_eq!(dom.matches("<svg").count(), 2, "{dom}");
    assert_eq!(dom.matches("</svg>").count(), 2, "{dom}");
    let title = &dom[dom.find("<title>").unwrap() + 7..dom.find("</title>").unwrap()];
    assert_eq!(unescape(title), format!("{role} · krabka-authority"));
    assert!(!dom.contains("pwned</title>"));
    let h1 = &dom[dom.find("<h1>").unwrap()..dom.find("</h1>").unwrap()];
    assert!(
        unescape(h1).contains(&format!("<code><bdi>{role}</bdi></code>")),
        "{h1}"
    );

    let artifacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("role-page.png");
    let _ = std::fs::remove_file(&shot);
    tokio::task::block_in_place(|| {
        browse(
            &url,
            &[
                &format!("--screenshot={}", shot.display()),
                "--window-size=1280,1100",
            ],
        )
    });
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 1000, "no screenshot at {}", shot.display());
    eprintln!(
        "role page screenshot: {} ({size} bytes), periods {expected:?}",
        shot.display()
    );
    drop(a);
}

/// Names that look like `orders`, or like each other, on a plain page
/// (the library's `service::http::names` tests hold the same list).
const LOOKALIKES: [&str; 16] = [
    "orders",
    "orders\u{202E}",
    "\u{202E}sredro",
    "\u{2067}sredro\u{2069}",
    "\u{200F}orders",
    "ord\u{200B}ers",
    "ord\u{200D}ers",
    "orders\u{FEFF}",
    "orders\u{2060}",
    "orders ",
    "orders\u{00A0}",
    "o\u{0336}rders",
    "\u{043E}rders",
    "orders\u{3164}",
    "caf\u{00E9}",
    "cafe\u{0301}",
];

/// One photographed name: which name, and what the browser drew.
#[derive(Debug, serde::Deserialize)]
struct Shot {
    name: String,
    sha256: String,
    text: String,
}

/// Runs `tests/broker/pages/shots.mjs` (Playwright driving the machine's
/// Chromium) over `jobs`; installs playwright-core from the npm registry
/// into the cargo target's tmp folder the first time.
fn shots(jobs: &Value) -> Vec<Shot> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("page-shots");
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["package.json", "shots.mjs"] {
        std::fs::copy(repo().join("tests/broker/pages").join(file), dir.join(file)).unwrap();
    }
    if !dir.join("node_modules/playwright-core").exists() {
        let out = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .output()
            .expect("npm runs");
        assert!(
            out.status.success(),
            "npm install playwright-core: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = Command::new("node")
        .arg("shots.mjs")
        .arg(jobs.to_string())
        .env("CHROMIUM", chromium())
        .current_dir(&dir)
        .output()
        .expect("node runs");
    assert!(
        out.status.success(),
        "shots.mjs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Roles and members named to impersonate each other, on both pages in a
/// real browser: no two different names are drawn the same, pixel for
/// pixel, and none draws a character it hides.
#[tokio::test(flavor = "multi_thread")]
async fn names_built_to_impersonate_never_look_alike_in_a_browser() {
    let topic = topic(1).await;
    let service = start(watcher_config(&topic)).await;
    ready(&service).await;
    let registrar = transport(&topic).await;
    for name in LOOKALIKES {
        // Each name as a role, with a member of the same name.
        registrar.register(name, name, 0).await.unwrap();
    }
    eventually(|| async {
        let (_, roles, _) = get(&format!("{}/roles", service.url)).await;
        (roles["roles"].as_array().map_or(0, Vec::len) == LOOKALIKES.len()).then_some(())
    })
    .await;
    let mut jobs = vec![
        serde_json::json!({"url": format!("{}/", service.url), "rows": "tr[data-role]", "key": "data-role", "part": "td.role bdi"}),
        serde_json::json!({"url": format!("{}/", service.url), "rows": "tr[data-role]", "key": "data-role", "part": "td.candidates bdi"}),
    ];
    for name in LOOKALIKES {
        let url = format!("{}/roles/{}/page", service.url, path_segment(name));
        jobs.push(serde_json::json!({"url": url, "rows": "h1", "name": name, "part": "code bdi"}));
        jobs.push(serde_json::json!({"url": url, "rows": "tr.challenger", "name": name, "part": "td.name bdi"}));
    }
    let shots = tokio::task::block_in_place(|| shots(&Value::Array(jobs)));
    // Per place: the status page's roles and members, the role pages'
    // headings and members (4 places x 16 names).
    assert_eq!(shots.len(), 4 * LOOKALIKES.len(), "{shots:#?}");
    let mut same = Vec::new();
    for (place, group) in shots.chunks(LOOKALIKES.len()).enumerate() {
        for (i, a) in group.iter().enumerate() {
            for b in &group[i + 1..] {
                if a.name != b.name && a.sha256 == b.sha256 {
                    same.push(format!(
                        "place {place}: {:?} and {:?} both drawn as {:?}",
                        a.name, b.name, a.text
                    ));
                }
            }
        }
    }
    for shot in &shots {
        // Every character but ASCII and the é of the composed café is
        // drawn as its code point, never as itself.
        for c in shot
            .name
            .chars()
            .filter(|c| !c.is_ascii() && *c != '\u{00E9}')
        {
            assert!(
                !shot.text.contains(c),
                "{:?} drawn as {:?}",
                shot.name,
                shot.text
            );
        }
    }
    eprintln!(
        "{} names photographed in 4 places of the pages: {} pairs drawn alike; e.g. {:?}",
        LOOKALIKES.len(),
        same.len(),
        shots
            .iter()
            .map(|s| s.text.as_str())
            .take(4)
            .collect::<Vec<_>>()
    );
    assert!(same.is_empty(), "{same:#?}");
}
