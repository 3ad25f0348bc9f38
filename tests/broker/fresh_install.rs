//! A first install: `serve` with the chart's settings against a cluster
//! where the coordination topic does not exist yet. It ends ready (checks
//! work, views say no role is registered), and the first candidate, which
//! creates the topic, shows in its views without a restart. With
//! `--create-topic` the service creates the topic itself, compacted, with
//! the partitions of its flags.

use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_authority::kafka::{KafkaTransport, TopicSpec, TransportConfig};
use krabka_authority::leadership::acquire;

use crate::support::broker::{bootstrap, client};
use crate::support::leadership::fast_options;
use crate::support::process::{Served, binary, free_port};
use crate::support::unique;

/// `serve` as the chart runs it (its environment: JSON logs, the shutdown
/// delay, the binary's defaults for the rest), on a free port.
fn serve(topic: &str, extra: &[&str]) -> Served {
    let port = free_port();
    let mut command = binary();
    command
        .arg("serve")
        .args(extra)
        .env("KRABKA_BOOTSTRAP_SERVERS", bootstrap())
        .env("KRABKA_TOPIC", topic)
        .env("KRABKA_LISTEN", format!("127.0.0.1:{port}"))
        .env("KRABKA_LOG_FORMAT", "json")
        .env("KRABKA_SHUTDOWN_DELAY", "5s")
        .env("RUST_LOG", "info");
    Served::spawn(command, port, "fresh")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fresh_install_without_the_topic_ends_ready_and_sees_the_first_candidate() {
    let topic = unique("fresh-install");
    let served = serve(&topic, &[]);
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
        client().topics().partition_count(&topic).await.is_err(),
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
    let served = serve(
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
    assert_eq!(kafka.topics().partition_count(&topic).await.unwrap(), 5);
    assert_eq!(
        kafka.topics().cleanup_policy(&topic).await.unwrap(),
        "compact"
    );
    // An hour before a superseded record may be compacted away (a reader
    // lagging less than that sees every change), counted from the
    // broker's clock, not from whatever a member stamps.
    for (key, value) in [
        ("min.compaction.lag.ms", "3600000"),
        ("message.timestamp.type", "LogAppendTime"),
    ] {
        let set = kafka.topics().topic_config(&topic, key).await.unwrap();
        assert_eq!(set.as_deref(), Some(value), "{key}");
    }
    assert!(
        served.log().contains("created the coordination topic"),
        "{}",
        served.log()
    );
}
