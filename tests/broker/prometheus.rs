//! The alert rules and the Grafana dashboard against a real Prometheus
//! server (Debian's `prometheus` package; `.ci/run` installs it).
//!
//! Two replicas of `serve` watch one topic; Prometheus scrapes both while
//! `demo --chaos` churns one role and a second `demo`, without chaos, holds
//! a quiet role. Replica b starts after the churn began and is restarted
//! midway (its counters start again from nothing), so the replicas have
//! counted different parts of the window. The churn alert must reach
//! `firing` with a value that counts each epoch change once (not once per
//! replica), no alert of the quiet role may ever be pending or firing, and
//! every PromQL expression of the dashboard must return data.
//!
//! The rules are those of `helm/krabka-authority/files/alerts.yaml`, read
//! from the file, with one change: every `for:` is shortened to
//! [`FOR`] so that the test takes seconds, not minutes. The expressions,
//! their 15-minute windows and the thresholds are untouched (the test checks
//! that the server loaded exactly the file's expressions). Scrapes and rule
//! evaluations run every second instead of the chart's 30 s.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use yaml_rust2::{Yaml, YamlLoader};

use crate::support::broker::{bootstrap, topic};
use crate::support::process::{Process, binary, free_port};
use crate::support::{repo, unique};

/// The `for:` of every rule in the test's copy of the rules.
const FOR: &str = "5s";
/// Scrape and rule evaluation interval of the test's Prometheus.
const INTERVAL: &str = "1s";
/// What `$__rate_interval` stands for in the dashboard's expressions: long
/// enough to cover the whole run, as on a dashboard zoomed out to it.
const RATE_INTERVAL: &str = "1m";
/// How long the churn alert may take to fire.
const FIRING_WITHIN: Duration = Duration::from_secs(90);

/// The test's working directory; kept when the test fails, for its logs.
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "prometheus test: logs and data kept in {}",
                self.0.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Fails, saying how to install it, when Prometheus is not installed.
fn require_prometheus() -> String {
    let out = Command::new("prometheus").arg("--version").output();
    match out {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            text.lines().next().unwrap_or_default().to_owned()
        }
        _ => panic!(
            "this test needs a Prometheus server: `prometheus` is not on the PATH. \
             Install Debian's package with `apt-get install prometheus` (it also provides \
             promtool; .ci/run installs it)"
        ),
    }
}

/// The alert rules of the chart with every `for:` shortened to [`FOR`];
/// everything else, expressions included, byte for byte as in the file.
fn rules_for_the_test(original: &str) -> String {
    let mut shortened = 0;
    let mut text: String = original
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with("for: ") {
                shortened += 1;
                format!("{}for: {FOR}", &line[..line.len() - trimmed.len()])
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    text.push('\n');
    assert!(shortened > 0, "no `for:` found in the alert rules");
    text
}

/// (alert name, expression, `for`) of every rule of a rules file.
fn rules_of(yaml: &str) -> Vec<(String, String, Option<String>)> {
    let docs = YamlLoader::load_from_str(yaml).expect("the alert rules are YAML");
    let mut rules = Vec::new();
    for group in docs[0]["groups"].as_vec().expect("groups") {
        for rule in group["rules"].as_vec().expect("rules") {
            let field = |name: &str| match &rule[name] {
                Yaml::String(s) => Some(s.clone()),
                _ => None,
            };
            rules.push((
                field("alert").expect("an alert name"),
                field("expr").expect("an expression"),
                field("for"),
            ));
        }
    }
    rules
}

/// Every PromQL expression of the dashboard (panel title, refId, expr).
fn dashboard_queries(dashboard: &Value) -> Vec<(String, String, String)> {
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                queries.push((
                    panel["title"].as_str().unwrap_or_default().to_owned(),
                    target["refId"].as_str().unwrap_or_default().to_owned(),
                    expr.to_owned(),
                ));
            }
        }
    }
    queries
}

fn collapse_whitespace(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The `data` of a successful Prometheus API answer.
async fn api(http: &reqwest::Client, url: &str) -> Value {
    let response = http
        .get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("Prometheus answers {url}: {e}"));
    let body: Value = response.json().await.expect("a JSON answer");
    assert_eq!(body["status"], "success", "{url}: {body}");
    body["data"].clone()
}

/// An instant query's result vector.
async fn query(http: &reqwest::Client, prometheus: &str, expr: &str) -> Vec<Value> {
    let data = api(
        http,
        &format!("{prometheus}/api/v1/query?query={}", encode(expr)),
    )
    .await;
    data["result"].as_array().cloned().unwrap_or_default()
}

/// The value of one sample, `[time, "value"]`.
fn sample_value(sample: &Value) -> f64 {
    sample[1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// How many finite values a query result holds (instant or range).
fn finite_values(result: &[Value]) -> usize {
    result
        .iter()
        .map(|series| {
            let one = series.get("value").into_iter();
            let many = series["values"].as_array().into_iter().flatten();
            one.chain(many)
                .filter(|s| sample_value(s).is_finite())
                .count()
        })
        .sum()
}

/// Starts `serve` on `port`, logging to `dir`.
fn serve(dir: &Path, name: &str, topic: &str, port: u16) -> Process {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    Process(
        binary()
            .args([
                "serve",
                "--bootstrap-servers",
                &bootstrap(),
                "--topic",
                topic,
            ])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--poll-interval", "200ms", "--roster-ttl", "200ms"])
            .args(["--challenge-stagger", "250ms"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("serve runs"),
    )
}

/// Starts `demo` for `role` on `topic`, logging to `dir`.
fn demo(dir: &Path, name: &str, topic: &str, role: &str, extra: &[&str]) -> Process {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    Process(
        binary()
            .args([
                "demo",
                "--bootstrap-servers",
                &bootstrap(),
                "--topic",
                topic,
            ])
            .args(["--roles", role, "--for", "300s"])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("demo runs"),
    )
}

/// Polls `check` every 100 ms until it gives a value; panics after `limit`
/// saying what was awaited.
async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The active alerts (pending or firing); fails if one is of `quiet`.
async fn alerts_but_none_of(http: &reqwest::Client, prometheus: &str, quiet: &str) -> Vec<Value> {
    let alerts = api(http, &format!("{prometheus}/api/v1/alerts")).await;
    let alerts = alerts["alerts"].as_array().cloned().unwrap_or_default();
    let of_quiet: Vec<&Value> = alerts
        .iter()
        .filter(|a| a["labels"]["role"] == quiet)
        .collect();
    assert!(
        of_quiet.is_empty(),
        "alerts of the quiet role {quiet}: {of_quiet:#?}"
    );
    alerts
}

async fn ready(http: &reqwest::Client, url: &str) -> bool {
    http.get(format!("{url}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status() == 200)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_fires_the_churn_alert_once_across_two_replicas_and_serves_the_dashboard() {
    let version = require_prometheus();
    let started = Instant::now();
    let dir = WorkDir(std::env::temp_dir().join(unique("prometheus-test")));
    std::fs::create_dir_all(&dir.0).unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();

    // The rules: the chart's file with shorter `for:`s.
    let original = std::fs::read_to_string(repo().join("helm/krabka-authority/files/alerts.yaml"))
        .expect("the chart's alert rules");
    let rules = rules_for_the_test(&original);
    let (file_rules, test_rules) = (rules_of(&original), rules_of(&rules));
    assert_eq!(file_rules.len(), test_rules.len());
    for ((name, expr, _), (test_name, test_expr, test_for)) in file_rules.iter().zip(&test_rules) {
        assert_eq!((name, expr), (test_name, test_expr), "only `for:` differs");
        assert!(test_for.as_deref().is_none_or(|f| f == FOR));
    }
    std::fs::write(dir.0.join("alerts.yaml"), &rules).unwrap();

    let topic = topic(4).await;
    let churn = unique("churn");
    let quiet = unique("quiet");
    let (port_a, port_b, port_prometheus) = (free_port(), free_port(), free_port());
    let (url_a, url_b) = (
        format!("http://127.0.0.1:{port_a}"),
        format!("http://127.0.0.1:{port_b}"),
    );
    let prometheus = format!("http://127.0.0.1:{port_prometheus}");

    // Replica a, and the quiet role held before anything is scraped, so the
    // moments before its first lease (registered but not yet minted) are
    // not seen.
    let _a = serve(&dir.0, "serve-a", &topic, port_a);
    let _quiet = demo(
        &dir.0,
        "demo-quiet",
        &topic,
        &quiet,
        &["--members", "2", "--lease", "3s", "--renew", "500ms"],
    );
    wait_for("replica a ready", Duration::from_secs(30), || async {
        ready(&http, &url_a).await.then_some(())
    })
    .await;
    let quiet_token: String = wait_for("the quiet role held", Duration::from_secs(30), || async {
        let r = http
            .get(format!("{url_a}/roles/{quiet}"))
            .send()
            .await
            .ok()?;
        let view: Value = r.json().await.ok()?;
        view["lease"]["token"].as_str().map(str::to_owned)
    })
    .await;

    // Prometheus, scraping both replicas (b is not up yet).
    let config = format!(
        "global:\n  scrape_interval: {INTERVAL}\n  scrape_timeout: {INTERVAL}\n  evaluation_interval: {INTERVAL}\n\
         rule_files:\n  - alerts.yaml\n\
         scrape_configs:\n  - job_name: krabka-authority\n    static_configs:\n      - targets: ['127.0.0.1:{port_a}', '127.0.0.1:{port_b}']\n"
    );
    std::fs::write(dir.0.join("prometheus.yml"), config).unwrap();
    let log = std::fs::File::create(dir.0.join("prometheus.log")).unwrap();
    let _prometheus = Process(
        Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.0.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.0.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port_prometheus}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus runs"),
    );
    wait_for("Prometheus ready", Duration::from_secs(30), || async {
        http.get(format!("{prometheus}/-/ready"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
            .then_some(())
    })
    .await;

    // Prometheus evaluates exactly the file's expressions.
    let groups = api(&http, &format!("{prometheus}/api/v1/rules")).await;
    let loaded: Vec<(String, String)> = groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| {
            (
                r["name"].as_str().unwrap_or_default().to_owned(),
                collapse_whitespace(r["query"].as_str().unwrap_or_default()),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = file_rules
        .iter()
        .map(|(name, expr, _)| (name.clone(), collapse_whitespace(expr)))
        .collect();
    assert_eq!(loaded, expected, "the rules Prometheus loaded");

    // The churn: a holder's renewals killed every second or so; with a 1 s
    // lease a new member mints a new epoch about every 2 s.
    let _churn = demo(
        &dir.0,
        "demo-churn",
        &topic,
        &churn,
        &[
            "--members",
            "3",
            "--lease",
            "1s",
            "--renew",
            "250ms",
            "--stagger",
            "250ms",
            "--chaos",
            "--chaos-interval",
            "1s",
        ],
    );
    let churn_started = Instant::now();

    // Checks on both replicas (authoritative: each asks the coordinator).
    let answered = Arc::new(AtomicU64::new(0));
    let checks = {
        let (http, quiet, token) = (http.clone(), quiet.clone(), quiet_token.clone());
        let (urls, answered) = ([url_a.clone(), url_b.clone()], answered.clone());
        tokio::spawn(async move {
            loop {
                for url in &urls {
                    let check = format!("{url}/roles/{quiet}/authority?token={token}");
                    if ready(&http, url).await
                        && http
                            .get(&check)
                            .send()
                            .await
                            .is_ok_and(|r| r.status() == 200)
                    {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // Replica b starts 3 s into the churn and restarts 12 s into it; the
    // churn alert must fire and the quiet role must stay silent throughout.
    let mut b: Option<Process> = None;
    let mut b_restarted = false;
    let firing = loop {
        let churning = churn_started.elapsed();
        if b.is_none() && churning >= Duration::from_secs(3) {
            b = Some(serve(&dir.0, "serve-b", &topic, port_b));
        }
        if !b_restarted && churning >= Duration::from_secs(12) {
            drop(b.take());
            b = Some(serve(&dir.0, "serve-b-restarted", &topic, port_b));
            b_restarted = true;
            eprintln!("prometheus test: replica b restarted {churning:?} into the churn");
        }
        let alerts = alerts_but_none_of(&http, &prometheus, &quiet).await;
        let churn_alert = alerts.iter().find(|a| {
            a["labels"]["alertname"] == "KrabkaRoleEpochChurn"
                && a["labels"]["role"] == churn.as_str()
                && a["state"] == "firing"
        });
        if let (Some(alert), true) = (churn_alert, b_restarted) {
            break alert.clone();
        }
        assert!(
            churning < FIRING_WITHIN,
            "KrabkaRoleEpochChurn of {churn} did not fire within {FIRING_WITHIN:?}; alerts: {alerts:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let fired_after = churn_started.elapsed();
    let value: f64 = firing["value"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("the alert's value");
    let summary = firing["annotations"]["summary"]
        .as_str()
        .unwrap_or_default();
    eprintln!(
        "prometheus test: {version}; KrabkaRoleEpochChurn firing {fired_after:?} into the churn, value {value}: {summary}"
    );
    assert_eq!(firing["labels"]["severity"], "warning");
    assert!(value > 6.0, "{firing}");
    assert!(
        summary.starts_with(&format!("Role {churn}: the fencing epoch changed ")),
        "{summary}"
    );

    // Each epoch change is counted once: at most the number of epochs the
    // coordinator minted for the role (its producer id stays; the epoch
    // starts at 0), not once per replica.
    let epoch = query(
        &http,
        &prometheus,
        &format!("max(krabka_role_producer_epoch{{role=\"{churn}\"}})"),
    )
    .await
    .first()
    .map(|s| sample_value(&s["value"]))
    .expect("the churn role's epoch");
    for how in ["max", "sum"] {
        let r = query(
            &http,
            &prometheus,
            &format!("{how} by (role) (increase(krabka_role_epoch_changes_total{{role=\"{churn}\"}}[15m]))"),
        )
        .await;
        eprintln!(
            "prometheus test: {how} across replicas of the epoch changes: {:?}",
            r.first().map(|s| sample_value(&s["value"]))
        );
    }
    let per_instance = query(
        &http,
        &prometheus,
        &format!("increase(krabka_role_epoch_changes_total{{role=\"{churn}\"}}[15m])"),
    )
    .await;
    for s in &per_instance {
        eprintln!(
            "prometheus test: epoch changes by {}: {}",
            s["metric"]["instance"],
            sample_value(&s["value"])
        );
    }
    eprintln!("prometheus test: the churn role's producer epoch is now {epoch}");
    assert!(
        value <= epoch * 1.1 + 0.5,
        "the alert counted {value} epoch changes, but the coordinator minted at most {epoch}"
    );

    // Both replicas are scraped (b again since its restart) and report the
    // quiet role, stable: its silence is not for want of series.
    let stable = format!("krabka_role_status{{role=\"{quiet}\",status=\"stable\"}} == 1");
    wait_for(
        "both replicas scraped, the quiet role stable on both",
        Duration::from_secs(15),
        || async {
            let up = query(&http, &prometheus, "up == 1").await.len();
            let stable = query(&http, &prometheus, &stable).await.len();
            (up == 2 && stable == 2).then_some(())
        },
    )
    .await;

    // Every expression of the dashboard returns data: instant (tables) and
    // over the run (time series). `$role` is what Grafana sends for both
    // roles selected; `$__rate_interval` covers the run.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("helm/krabka-authority/files/dashboard.json"))
            .unwrap(),
    )
    .expect("the dashboard is JSON");
    let roles = wait_for(
        "the role variable's values",
        Duration::from_secs(5),
        || async {
            let data = api(
                &http,
                &format!(
                    "{prometheus}/api/v1/label/role/values?match[]={}",
                    encode("krabka_role_candidates")
                ),
            )
            .await;
            let roles: Vec<String> = data
                .as_array()?
                .iter()
                .filter_map(|r| r.as_str().map(str::to_owned))
                .collect();
            (roles.contains(&churn) && roles.contains(&quiet)).then_some(roles)
        },
    )
    .await;
    assert_eq!(roles.len(), 2, "{roles:?}");
    let role_regex = format!("({churn}|{quiet})");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 10, "{queries:?}");
    for (panel, ref_id, expr) in &queries {
        let expr = expr
            .replace("$__rate_interval", RATE_INTERVAL)
            .replace("$role", &role_regex);
        assert!(!expr.contains('$'), "an unknown variable in {expr}");
        let instant = query(&http, &prometheus, &expr).await;
        let range = api(
            &http,
            &format!(
                "{prometheus}/api/v1/query_range?query={}&start={}&end={now}&step=1",
                encode(&expr),
                now - 30
            ),
        )
        .await["result"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        eprintln!(
            "prometheus test: dashboard {panel:?} {ref_id}: {} series, {} finite values now, {} over the last 30 s",
            instant.len(),
            finite_values(&instant),
            finite_values(&range)
        );
        assert!(
            finite_values(&instant) > 0 && finite_values(&range) > 0,
            "the dashboard's {panel:?} ({ref_id}) shows no data: {expr}\ninstant: {instant:?}\nrange: {range:?}"
        );
    }
    alerts_but_none_of(&http, &prometheus, &quiet).await;
    checks.abort();
    let answered = answered.load(Ordering::Relaxed);
    eprintln!(
        "prometheus test: done in {:?} ({:?} of churn, {answered} authoritative checks answered)",
        started.elapsed(),
        churn_started.elapsed(),
    );
    // The quiet role was checked throughout (its checks are what must not
    // raise an alert), not merely asked of a service that never answered.
    assert!(answered > 0, "no check of {quiet} was answered 200");
}
