//! The authority-check service over real HTTP on a bound port, against the
//! real broker, with tokens minted by the leadership client.

use std::sync::Arc;
use std::time::Duration;

use krabka_authority::coordination::FencingToken;
use krabka_authority::kafka::{KafkaClient, KafkaTransport, TopicSpec};
use krabka_authority::leadership::acquire;
use krabka_authority::transport::Coordinator;
use serde_json::Value;
use tokio::time::Instant;

use crate::support::broker::{OwnBroker, bootstrap, config_for, topic, transport};
use crate::support::leadership::fast_options;
use crate::support::service::{Service, config, get, start};
use crate::support::{eventually, unique};

fn authority(service: &Service, role: &str, token: &str) -> String {
    format!("{}/roles/{role}/authority?token={token}", service.url)
}

#[tokio::test]
async fn every_verdict_from_tokens_the_leadership_client_minted() {
    let topic = topic(3).await;
    let service = start(config(&bootstrap(), &topic)).await;
    let role = unique("verdicts");

    let (status, body, headers) = get(&authority(&service, &role, "1:1")).await;
    assert_eq!(
        (status, body["verdict"].as_str()),
        (409, Some("vacant")),
        "{body}"
    );
    assert!(body["current"].is_null());
    assert_eq!(headers["cache-control"], "no-store");
    assert!(headers.contains_key("x-request-id"));

    let a = acquire(
        Arc::new(transport(&topic).await),
        &role,
        "a",
        fast_options(),
    )
    .await
    .unwrap();
    let token = a.token();
    let (status, body, _) = get(&authority(&service, &role, &token.to_string())).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["verdict"], "authoritative");
    assert_eq!(body["current"], token.to_string());
    assert_eq!(body["role"], role);
    assert_eq!(body["cached"], false);
    assert!(body["state"].is_string());
    assert!(body["checkedAt"].as_str().unwrap().ends_with('Z'));

    let ahead = FencingToken::new(token.producer_id(), token.producer_epoch() + 5).unwrap();
    let (status, body, _) = get(&authority(&service, &role, &ahead.to_string())).await;
    assert_eq!(
        (status, body["verdict"].as_str()),
        (409, Some("unknown")),
        "{body}"
    );

    // A takeover: the very next request says superseded.
    let b = transport(&topic).await;
    let newer = b
        .acquire_epoch(&role, Duration::from_secs(2))
        .await
        .unwrap();
    let (status, body, _) = get(&authority(&service, &role, &token.to_string())).await;
    assert_eq!(
        (status, body["verdict"].as_str()),
        (409, Some("superseded")),
        "{body}"
    );
    assert_eq!(body["current"], newer.to_string());
    assert_eq!(body["cached"], false);
    let (_, again, _) = get(&authority(&service, &role, &token.to_string())).await;
    assert_eq!(again["verdict"], "superseded");
    assert_eq!(
        again["cached"], true,
        "a superseded token is answered from the cache"
    );
    assert!(
        again["current"].is_null(),
        "the coordinator was not asked: {again}"
    );
    assert_eq!(again["supersededBy"]["pair"], newer.to_string());
    assert_eq!(again["cluster"], body["cluster"]);
    let (status, body, _) = get(&authority(&service, &role, &newer.to_string())).await;
    assert_eq!(
        (status, body["verdict"].as_str()),
        (200, Some("authoritative")),
        "{body}"
    );

    let (_, metrics, _) = get(&format!("{}/metrics", service.url)).await;
    let metrics = metrics.as_str().unwrap().to_owned();
    for verdict in ["authoritative", "superseded", "vacant", "unknown"] {
        assert!(
            metrics.lines().any(|l| l.starts_with(&format!(
                "krabka_authority_checks_total{{verdict=\"{verdict}\"}}"
            )) && !l.ends_with(" 0")),
            "no {verdict} counted:\n{metrics}"
        );
    }
    assert!(
        metrics.contains("krabka_superseded_cache_hits_total 1"),
        "{metrics}"
    );
    drop(a);
}

#[tokio::test]
async fn malformed_tokens_and_roles_are_400_problems_naming_the_field() {
    let topic = topic(1).await;
    let service = start(config(&bootstrap(), &topic)).await;
    let long = "9".repeat(10_000);
    let tokens = [
        "1", "1:", ":1", "-1:0", "1:-1", "1:40000", "%2B1:1", "1:1:1", "%201:1", "1%20:1", "",
        &long,
    ];
    for token in tokens {
        let (status, body, headers) = get(&authority(&service, "orders", token)).await;
        assert_eq!(status, 400, "token {token:?}: {body}");
        assert_eq!(body["field"], "token", "{body}");
        assert_eq!(body["status"], 400);
        assert!(!body["detail"].as_str().unwrap().is_empty());
        assert_eq!(headers["content-type"], "application/problem+json");
    }
    let (status, body, _) = get(&format!("{}/roles/orders/authority", service.url)).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (400, Some("token")),
        "{body}"
    );
    assert!(body["detail"].as_str().unwrap().contains("missing"));

    let huge_role = "r".repeat(32_768);
    let (status, body, _) = get(&authority(&service, &huge_role, "1:1")).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (400, Some("role")),
        "{body}"
    );
    assert!(
        body["detail"].as_str().unwrap().contains("32768 bytes"),
        "{body}"
    );
    let (status, _, _) = get(&format!("{}/roles//authority?token=1:1", service.url)).await;
    assert!(status == 400 || status == 404, "empty role: {status}");
    let (status, body, _) = get(&format!("{}/no/such/path", service.url)).await;
    assert_eq!((status, body["status"].as_i64()), (404, Some(404)));
}

#[tokio::test]
async fn concurrent_checks_share_describe_requests_and_are_all_right() {
    let topic = topic(3).await;
    let service = start(config(&bootstrap(), &topic)).await;
    let minter = transport(&topic).await;
    let prefix = unique("many");
    let mut tokens = Vec::new();
    for i in 0..50 {
        let role = format!("{prefix}-{i}");
        let token = minter
            .acquire_epoch(&role, Duration::from_secs(30))
            .await
            .unwrap();
        tokens.push((role, token));
    }
    // Warm the coordinator cache so the count below is only describes.
    let (status, _, _) = get(&authority(&service, &tokens[0].0, &tokens[0].1.to_string())).await;
    assert_eq!(status, 200);
    let before = describe_requests(&service).await;

    let client = reqwest::Client::new();
    let checks = (0..200).map(|i| {
        let (role, token) = &tokens[i % 50];
        // Every other check carries a stale epoch, never cached before.
        let asked = if i % 2 == 0 {
            *token
        } else {
            FencingToken::new(token.producer_id(), token.producer_epoch() - 1).unwrap_or(*token)
        };
        let url = authority(&service, role, &asked.to_string());
        let client = client.clone();
        async move {
            let response = client.get(url).send().await.unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap();
            (i, asked == *token, status, body)
        }
    });
    for (i, current, status, body) in futures::future::join_all(checks).await {
        if current {
            assert_eq!(
                (status, body["verdict"].as_str()),
                (200, Some("authoritative")),
                "check {i}: {body}"
            );
        } else {
            assert_eq!(status, 409, "check {i}: {body}");
            assert!(
                body["verdict"] == "superseded" || body["verdict"] == "unknown",
                "{body}"
            );
        }
    }
    let sent = describe_requests(&service).await - before;
    eprintln!("200 concurrent checks over 50 roles: {sent} DescribeTransactions requests");
    assert!(sent <= 50, "{sent} requests for 200 checks");
    assert!(sent >= 1);
}

async fn describe_requests(service: &Service) -> u64 {
    let (_, metrics, _) = get(&format!("{}/metrics", service.url)).await;
    metrics
        .as_str()
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("krabka_kafka_requests_total{api=\"DescribeTransactions\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
async fn a_batch_check_answers_each_item_in_one_round() {
    let topic = topic(3).await;
    let service = start(config(&bootstrap(), &topic)).await;
    let minter = transport(&topic).await;
    let (r1, r2) = (unique("batch-a"), unique("batch-b"));
    let t1 = minter
        .acquire_epoch(&r1, Duration::from_secs(30))
        .await
        .unwrap();
    let t2_old = minter
        .acquire_epoch(&r2, Duration::from_secs(30))
        .await
        .unwrap();
    let t2 = minter
        .acquire_epoch(&r2, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(t2.same_producer(&t2_old), "a second mint bumps the epoch");
    let body = serde_json::json!([
        {"role": r1, "token": t1.to_string()},
        {"role": r2, "token": t2_old.to_string()},
        {"role": unique("never"), "token": "5:5"},
        {"role": r1, "token": "nope"},
        {"token": "1:1"},
    ]);
    let response = reqwest::Client::new()
        .post(format!("{}/authority/check", service.url))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    let results = answer["results"].as_array().unwrap();
    let got: Vec<(i64, Option<&str>)> = results
        .iter()
        .map(|r| (r["status"].as_i64().unwrap(), r["verdict"].as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (200, Some("authoritative")),
            (409, Some("superseded")),
            (409, Some("vacant")),
            (400, None),
            (400, None)
        ]
    );
    assert_eq!(results[1]["current"], t2.to_string());
    assert_eq!(results[3]["problem"]["field"], "token");
    assert_eq!(results[4]["problem"]["field"], "role");

    let bad = reqwest::Client::new()
        .post(format!("{}/authority/check", service.url))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}

#[tokio::test]
async fn a_roster_view_shows_ranks_and_holder_and_follows_a_takeover() {
    let topic = topic(3).await;
    let service = start(config(&bootstrap(), &topic)).await;
    let role = unique("roster");
    let a = acquire(
        Arc::new(transport(&topic).await),
        &role,
        "a",
        fast_options(),
    )
    .await
    .unwrap();
    let t = Arc::new(transport(&topic).await);
    let (r, tt) = (role.clone(), t.clone());
    let b = tokio::spawn(async move { acquire(tt, &r, "b", fast_options()).await });
    let view_url = format!("{}/roles/{role}", service.url);
    let body = eventually(|| async {
        let (status, body, _) = get(&view_url).await;
        (status == 200 && body["members"].as_array().map_or(0, Vec::len) == 2).then_some(body)
    })
    .await;
    assert_eq!(body["members"][0]["member"], "a");
    assert_eq!(body["members"][0]["rank"], 0);
    assert_eq!(body["members"][1]["member"], "b");
    assert_eq!(body["lease"]["member"], "a");
    assert_eq!(body["lease"]["token"], a.token().to_string());
    assert_eq!(body["lease"]["expired"], false);
    assert_eq!(body["challengers"][0]["member"], "b");
    // One rank for a member: its place in join order, as in members.
    assert_eq!(body["challengers"][0]["rank"], body["members"][1]["rank"]);
    assert_eq!(
        body["challengers"][0]["challengeAt"],
        body["lease"]["deadline"]
    );
    assert!(body["view"]["offset"].as_i64().unwrap() > 0);

    // Takeover: a stops renewing; b holds within the deadline, and the view
    // shows it within TTL + one refresh.
    drop(a);
    let b = tokio::time::timeout(Duration::from_secs(10), b)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let taken = Instant::now();
    let body = eventually(|| async {
        let (_, body, _) = get(&view_url).await;
        (body["lease"]["member"] == "b").then_some(body)
    })
    .await;
    let lag = taken.elapsed();
    eprintln!("roster view showed the takeover after {lag:?}");
    assert!(lag < Duration::from_millis(500 + 1500), "took {lag:?}");
    assert_eq!(body["lease"]["token"], b.token().to_string());

    let (status, list, headers) = get(&format!("{}/roles", service.url)).await;
    assert_eq!(status, 200);
    assert!(headers.contains_key("x-krabka-view-age-ms"));
    let line = list["roles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["role"] == role)
        .unwrap()
        .clone();
    assert_eq!(line["holder"], "b");
    assert_eq!(line["candidates"], 2);

    let (status, body, _) = get(&format!("{}/roles/{}", service.url, unique("nobody"))).await;
    assert_eq!((status, body["status"].as_i64()), (404, Some(404)));
}

#[tokio::test]
async fn with_the_broker_down_checks_answer_503_and_recover_without_a_restart() {
    let broker = OwnBroker::start("svc-down", &[]);
    let kafka = KafkaClient::new(config_for(&broker.addr)).unwrap();
    let topic = unique("svc-down");
    kafka
        .topics()
        .ensure_topic(
            &topic,
            &TopicSpec {
                partitions: 1,
                replication_factor: 1,
                configs: vec![],
            },
        )
        .await
        .unwrap();
    let minter = KafkaTransport::connect(
        kafka,
        krabka_authority::kafka::TransportConfig {
            topic: topic.clone(),
            partitions: None,
            create: None,
        },
    )
    .await
    .unwrap();
    let role = unique("down");
    let token = minter
        .acquire_epoch(&role, Duration::from_secs(60))
        .await
        .unwrap();
    let service = start(config(&broker.addr, &topic)).await;
    let url = authority(&service, &role, &token.to_string());
    assert_eq!(get(&url).await.0, 200);
    let ready = eventually(|| async {
        let (status, _, _) = get(&format!("{}/readyz", service.url)).await;
        (status == 200).then_some(())
    });
    ready.await;

    broker.stop();
    let mut answered = 0;
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        let started = Instant::now();
        let (status, body, headers) = get(&url).await;
        let took = started.elapsed();
        assert_ne!(status, 200, "never authoritative without asking: {body}");
        assert_eq!(status, 503, "{body}");
        assert!(headers.contains_key("retry-after"), "{headers:?}");
        assert!(took < Duration::from_millis(3000 + 1000), "took {took:?}");
        answered += 1;
    }
    eprintln!("broker down: {answered} checks answered 503");
    let (status, body, _) = get(&format!("{}/readyz", service.url)).await;
    assert_eq!(status, 503, "{body}");

    broker.restart();
    let started = Instant::now();
    let recovered = eventually(|| async {
        let (status, body, _) = get(&url).await;
        (status == 200).then_some(body)
    })
    .await;
    eprintln!("recovered after {:?}: {recovered}", started.elapsed());
    assert_eq!(recovered["verdict"], "authoritative");
}

#[tokio::test]
async fn sigterm_turns_not_ready_then_drains_and_stops() {
    let topic = topic(1).await;
    let mut config = config(&bootstrap(), &topic);
    config.http.shutdown_delay = Duration::from_millis(1500);
    config.http.drain_timeout = Duration::from_secs(2);
    let service = start(config).await;
    eventually(|| async { (get(&format!("{}/readyz", service.url)).await.0 == 200).then_some(()) })
        .await;
    let stream = reqwest::get(format!("{}/roles/{}/events", service.url, unique("sse")))
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);

    let asked = Instant::now();
    service.stop.send_replace(true);
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Still serving during the delay, but not ready.
    let (status, body, _) = get(&format!("{}/readyz", service.url)).await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (503, Some("shutting down")),
        "{body}"
    );
    assert_eq!(get(&format!("{}/healthz", service.url)).await.0, 200);
    // The open event stream ends once the listener closes; then run() returns.
    let ended = tokio::time::timeout(Duration::from_secs(6), stream.bytes()).await;
    assert!(ended.is_ok(), "the event stream ended");
    tokio::time::timeout(Duration::from_secs(6), service.done)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let took = asked.elapsed();
    eprintln!("shutdown took {took:?} (delay 1.5 s)");
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    assert!(
        reqwest::get(format!("{}/healthz", service.url))
            .await
            .is_err(),
        "no new connections"
    );
}
