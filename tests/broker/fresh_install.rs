//! A first install: `serve` with the chart's settings against a cluster
//! where the coordination topic does not exist yet. It ends ready (checks
//! work, views say no role is registered), and the first candidate, which
//! creates the topic, shows in its views without a restart. With
//! `--create-topic` the service creates the topic itself, compacted, with
//! the partitions of its flags.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_authority::kafka::{KafkaTransport, TopicSpec, TransportConfig};
use krabka_authority::leadership::acquire;
use serde_json::Value;

use crate::common::{bootstrap, client, unique};
use crate::leadership::fast_options;

/// `serve` as the chart runs it (its environment: JSON logs, the shutdown
/// delay, the binary's defaults for the rest), on a free port.
struct Served {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Served {
    fn start(topic: &str, extra: &[&str]) -> Served {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(unique("fresh") + ".log");
        let child = Command::new(env!("CARGO_BIN_EXE_krabka-authority"))
            .arg("serve")
            .args(extra)
            .env("KRABKA_BOOTSTRAP_SERVERS", bootstrap())
            .env("KRABKA_TOPIC", topic)
            .env("KRABKA_LISTEN", format!("127.0.0.1:{port}"))
            .env("KRABKA_LOG_FORMAT", "json")
            .env("KRABKA_SHUTDOWN_DELAY", "5s")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the binary runs");
        Served {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        match reqwest::get(format!("{}{path}", self.url)).await {
            Ok(response) => {
                let status = response.status().as_u16();
                (status, response.json().await.unwrap_or(Value::Null))
            }
            Err(_) => (0, Value::Null),
        }
    }

    /// Polls `path` until `accept` takes the answer; panics after `limit`.
    async fn until(
        &self,
        path: &str,
        limit: Duration,
        accept: impl Fn(u16, &Value) -> bool,
    ) -> Value {
        let started = Instant::now();
        loop {
            let (status, body) = self.get(path).await;
            if accept(status, &body) {
                return body;
            }
            assert!(
                started.elapsed() < limit,
                "{path}: last {status} {body} after {limit:?}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fresh_install_without_the_topic_ends_ready_and_sees_the_first_candidate() {
    let topic = unique("fresh-install");
    let served = Served::start(&topic, &[]);
    let started = Instant::now();
    let ready = served
        .until("/readyz", Duration::from_secs(30), |s, _| s == 200)
        .await;
    eprintln!(
        "ready without the topic after {:?}: {ready}",
        started.elapsed()
    );
    assert!(
        ready["note"]
            .as_str()
            .is_some_and(|n| n.contains("does not exist yet")),
        "{ready}"
    );
    assert_eq!(
        served.get("/roles").await,
        (200, serde_json::json!({ "roles": [] }))
    );
    let role = unique("first-role");
    let (status, body) = served.get(&format!("/roles/{role}")).await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("no role is registered yet")),
        "{body}"
    );
    let (status, body) = served
        .get(&format!("/roles/{role}/authority?token=1:0"))
        .await;
    assert_eq!(
        (status, body["verdict"].as_str()),
        (409, Some("vacant")),
        "{body}"
    );
    assert!(
        client().partition_count(&topic).await.is_err(),
        "the service created the topic without --create-topic"
    );

    // The first candidate, as the leadership client is deployed: it creates
    // the topic when missing.
    let transport = KafkaTransport::connect(
        client(),
        TransportConfig {
            topic: topic.clone(),
            partitions: None,
            create: Some(TopicSpec {
                partitions: 3,
                replication_factor: 1,
                configs: Vec::new(),
            }),
        },
    )
    .await
    .expect("the candidate creates the topic");
    let held = acquire(Arc::new(transport), &role, "a", fast_options())
        .await
        .expect("the first candidate leads");
    let token = held.token().to_string();
    let created = Instant::now();
    let view = served
        .until(
            &format!("/roles/{role}"),
            Duration::from_secs(30),
            |s, b| s == 200 && b["lease"]["member"] == "a",
        )
        .await;
    eprintln!(
        "the first candidate in the views {:?} after it created the topic",
        created.elapsed()
    );
    assert_eq!(view["lease"]["token"], token, "{view}");
    let ready = served
        .until("/readyz", Duration::from_secs(10), |s, b| {
            s == 200 && b.get("note").is_none()
        })
        .await;
    assert_eq!(ready["status"], "ready");
    let (status, body) = served
        .get(&format!("/roles/{role}/authority?token={token}"))
        .await;
    assert_eq!(
        (status, body["verdict"].as_str()),
        (200, Some("authoritative")),
        "{body}"
    );
    held.resign().await.ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn with_create_topic_the_service_creates_it_compacted_with_its_partitions() {
    let topic = unique("fresh-create");
    let served = Served::start(
        &topic,
        &[
            "--create-topic",
            "--topic-partitions",
            "5",
            "--topic-replication-factor",
            "1",
        ],
    );
    let ready = served
        .until("/readyz", Duration::from_secs(30), |s, b| {
            s == 200 && b.get("note").is_none()
        })
        .await;
    assert_eq!(ready["status"], "ready");
    let kafka = client();
    assert_eq!(kafka.partition_count(&topic).await.unwrap(), 5);
    assert_eq!(kafka.cleanup_policy(&topic).await.unwrap(), "compact");
    assert!(
        served.log().contains("created the coordination topic"),
        "{}",
        served.log()
    );
}
