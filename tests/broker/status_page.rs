//! The status page in a real browser: Debian's headless Chromium loads `/`
//! while demo candidates compete on the real broker; the holder shown must
//! be the one the roster view reports. A screenshot is kept as an artifact
//! in `target/test-artifacts/status-page.png`.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::{bootstrap, eventually, repo, topic, unique};
use crate::service::{get, start};
use crate::watcher::watcher_config;

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
    let demo = Command::new(env!("CARGO_BIN_EXE_krabka-authority"))
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
    let mut demo = Guard(demo);

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
        row.contains(&format!("<td class=\"holder\">{holder}</td>")),
        "holder {holder} not shown: {row}"
    );
    assert!(row.contains(&token), "token {token} not shown: {row}");
    assert!(row.contains("s left"), "no countdown: {row}");
    assert!(row.contains("stable"), "{row}");
    for m in view["members"].as_array().unwrap() {
        assert!(row.contains(m["member"].as_str().unwrap()), "{row}");
    }

    let artifacts = repo().join("target/test-artifacts");
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

/// Kills the demo process however the test ends.
struct Guard(std::process::Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
