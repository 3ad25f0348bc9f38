//! The router and its handlers over the in-memory cluster, without a broker
//! or a socket (`tower::ServiceExt::oneshot`, as axum's testing example).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use proptest::prelude::*;
use serde_json::Value;
use tower::ServiceExt;

use super::{ROUTES, router};
use crate::service::{AppState, ServiceConfig};
use crate::testkit::{T0, app_state_at, eventually, lease, service_config};
use crate::time::ManualClock;
use crate::transport::memory::MemoryCluster;
use crate::transport::{Coordinator, LeaseWriter, Registrar};

const LEASE: Duration = Duration::from_secs(30);
const TOKEN: &str = "test-api-token";
/// How long a test waits for the watcher or the prober.
const FIVE_S: Duration = Duration::from_secs(5);

struct Rig {
    cluster: MemoryCluster,
    clock: Arc<ManualClock>,
    state: Arc<AppState>,
    app: Router,
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(path) = &self.state.config.auth.api_tokens_file {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn rig_with(config: ServiceConfig) -> Rig {
    rig_on(MemoryCluster::new(4), config)
}

fn rig_on(cluster: MemoryCluster, config: ServiceConfig) -> Rig {
    let clock = Arc::new(ManualClock::new(T0));
    let state = app_state_at(&cluster, config, clock.clone());
    tokio::spawn(state.watcher.clone().run());
    let app = router(state.clone());
    Rig {
        cluster,
        clock,
        state,
        app,
    }
}

fn rig() -> Rig {
    rig_with(service_config())
}

fn with_tokens(mut config: ServiceConfig) -> ServiceConfig {
    let file = std::env::temp_dir().join(format!(
        "krabka-http-tokens-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    config.auth.api_tokens_file = Some(file);
    config
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri)
        .header(header::HOST, "test")
        .body(Body::empty())
        .unwrap()
}

fn post_json(uri: &str, body: &str) -> Request<Body> {
    Request::post(uri)
        .header(header::HOST, "test")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

async fn call(app: &Router, request: Request<Body>) -> (StatusCode, HeaderMap, Value) {
    let response = app.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (parts.status, parts.headers, json)
}

#[tokio::test]
async fn a_check_answers_every_verdict_and_503_with_retry_after_when_the_cluster_is_down() {
    let rig = rig();
    let (status, headers, body) = call(&rig.app, get("/roles/r/authority?token=1:1")).await;
    assert_eq!(
        (status, body["verdict"].as_str()),
        (StatusCode::CONFLICT, Some("vacant"))
    );
    assert_eq!(headers[header::CACHE_CONTROL], "no-store");

    let t1 = rig
        .cluster
        .transport()
        .acquire_epoch("r", LEASE)
        .await
        .unwrap();
    let uri = format!("/roles/r/authority?token={t1}");
    let (status, _, body) = call(&rig.app, get(&uri)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["verdict"], "authoritative");
    assert_eq!(body["current"], t1.to_string());
    assert_eq!(body["state"], "Empty");
    assert_eq!(body["cached"], false);

    let t2 = rig
        .cluster
        .transport()
        .acquire_epoch("r", LEASE)
        .await
        .unwrap();
    let (status, _, body) = call(&rig.app, get(&uri)).await;
    assert_eq!(
        (status, body["verdict"].as_str()),
        (StatusCode::CONFLICT, Some("superseded"))
    );
    assert_eq!(body["current"], t2.to_string());

    rig.cluster.set_unavailable(Some("the coordinator is down"));
    let (status, headers, body) =
        call(&rig.app, get(&format!("/roles/r/authority?token={t2}"))).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "never a guess: {body}"
    );
    assert_eq!(headers[header::RETRY_AFTER], "1");
    assert_eq!(headers[header::CONTENT_TYPE], "application/problem+json");
    assert_eq!(
        (body["type"].as_str(), body["title"].as_str()),
        (
            Some("urn:krabka-authority:problem:coordinator-unavailable"),
            Some("Coordinator unavailable")
        ),
        "{body}"
    );
    let (_, _, body) = call(&rig.app, get(&uri)).await;
    assert_eq!(
        body["cached"], true,
        "a superseded token is answered from the cache"
    );
}

#[tokio::test]
async fn a_coordinator_answering_from_stale_memory_never_gets_a_200() {
    let rig = rig();
    let t1 = rig
        .cluster
        .transport()
        .acquire_epoch("r", LEASE)
        .await
        .unwrap();
    let uri = format!("/roles/r/authority?token={t1}");
    assert_eq!(call(&rig.app, get(&uri)).await.0, StatusCode::OK);
    let t2 = rig
        .cluster
        .transport()
        .acquire_epoch("r", LEASE)
        .await
        .unwrap();
    // The service learns of t2 (here from a check of it), then the old
    // coordinator comes back answering t1.
    let (status, _, _) = call(&rig.app, get(&format!("/roles/r/authority?token={t2}"))).await;
    assert_eq!(status, StatusCode::OK);
    rig.cluster.answer_stale("r", Some(t1));
    for _ in 0..3 {
        let (status, _, body) = call(&rig.app, get(&uri)).await;
        assert_ne!(status, StatusCode::OK, "{body}");
    }
    let batch = format!(r#"[{{"role":"r","token":"{t1}"}}]"#);
    let (_, _, body) = call(&rig.app, post_json("/authority/check", &batch)).await;
    assert_ne!(body["results"][0]["status"], 200, "{body}");
}

#[tokio::test]
async fn bad_input_gets_a_problem_naming_the_field() {
    let rig = rig();
    for (uri, field) in [
        ("/roles/r/authority?token=1:-1", "token"),
        ("/roles/r/authority?token=abc", "token"),
        ("/roles/r/authority", "token"),
        ("/roles/r/authority?token=99999999999999999999:1", "token"),
    ] {
        let (status, headers, body) = call(&rig.app, get(uri)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
        assert_eq!(body["field"], field, "{uri}");
        assert_eq!(headers[header::CONTENT_TYPE], "application/problem+json");
    }
    let long = "x".repeat(40_000);
    let (status, _, body) =
        call(&rig.app, get(&format!("/roles/{long}/authority?token=1:1"))).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("role"))
    );
}

#[tokio::test]
async fn a_batch_check_reads_json_only_and_answers_each_item() {
    let rig = rig();
    let t = rig
        .cluster
        .transport()
        .acquire_epoch("a", LEASE)
        .await
        .unwrap();
    let body = format!(
        r#"[{{"role":"a","token":"{t}"}},{{"role":"b","token":"1:1"}},{{"role":"a","token":"x"}},{{"token":"1:1"}}]"#
    );
    let (status, _, answer) = call(&rig.app, post_json("/authority/check", &body)).await;
    assert_eq!(status, StatusCode::OK);
    let got: Vec<(i64, Option<&str>)> = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["status"].as_i64().unwrap(), r["verdict"].as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (200, Some("authoritative")),
            (409, Some("vacant")),
            (400, None),
            (400, None)
        ]
    );
    assert_eq!(answer["results"][2]["problem"]["field"], "token");
    assert_eq!(answer["results"][3]["problem"]["field"], "role");

    let text = Request::post("/authority/check")
        .header(header::HOST, "test")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from(body.clone()))
        .unwrap();
    assert_eq!(
        call(&rig.app, text).await.0,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    let untyped = Request::post("/authority/check")
        .header(header::HOST, "test")
        .body(Body::from(body.clone()))
        .unwrap();
    assert_eq!(
        call(&rig.app, untyped).await.0,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    let (status, _, problem) = call(&rig.app, post_json("/authority/check", "{not json")).await;
    assert_eq!(
        (status, problem["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("body"))
    );
    let (status, _, _) = call(&rig.app, post_json("/authority/check", r#"[{"role":5}]"#)).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "a number where a string belongs"
    );
    let (status, _, problem) =
        call(&rig.app, post_json("/authority/check", "[[null, null]]")).await;
    assert_eq!(
        (status, problem["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("body")),
        "an item that is not an object"
    );

    // A declared length over the limit is refused before the body is read.
    let declared = Request::post("/authority/check")
        .header(header::HOST, "test")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, "99999999")
        .body(Body::from_stream(futures::stream::pending::<
            Result<bytes::Bytes, std::io::Error>,
        >()))
        .unwrap();
    assert_eq!(
        call(&rig.app, declared).await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    let big = format!(
        "[{}]",
        vec![r#"{"role":"r","token":"1:1"}"#; 60_000].join(",")
    );
    assert_eq!(
        call(&rig.app, post_json("/authority/check", &big)).await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );
}

#[tokio::test]
async fn a_body_that_arrives_too_slowly_is_408() {
    let rig = rig();
    let slow = Request::post("/authority/check")
        .header(header::HOST, "test")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(futures::stream::pending::<
            Result<bytes::Bytes, std::io::Error>,
        >()))
        .unwrap();
    let (status, _, body) = call(&rig.app, slow).await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{body}");
}

/// A body that trickles in (each byte well within the per-piece timeout)
/// and then stalls is the caller's fault: 408 when the request timeout has
/// passed since the request arrived, not the safety net's 503 "Coordinator
/// unavailable" a second later (what a body sent at a byte per 0.5 s got
/// with --request-timeout 2s: 503 at 3.0 s).
#[tokio::test]
async fn a_body_that_trickles_then_stalls_is_408_at_the_request_timeout() {
    let rig = rig();
    let trickle = futures::stream::unfold(0u8, |n| async move {
        // Longer than the safety net's 1.3 s, each piece within 300 ms.
        if n < 10 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Some((
                Ok::<_, std::io::Error>(bytes::Bytes::from_static(b" ")),
                n + 1,
            ))
        } else {
            futures::future::pending::<()>().await;
            None
        }
    });
    let slow = Request::post("/authority/check")
        .header(header::HOST, "test")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(trickle))
        .unwrap();
    let started = tokio::time::Instant::now();
    let (status, headers, body) = call(&rig.app, slow).await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{body}");
    assert!(headers.get(header::RETRY_AFTER).is_none());
    assert!(
        body["detail"].as_str().is_some_and(|d| d.contains("body")),
        "{body}"
    );
    // The request timeout (300 ms), not the safety net's (1.3 s).
    assert!(took < Duration::from_millis(1_000), "{took:?}");
}

#[tokio::test]
async fn with_api_tokens_a_stranger_learns_nothing() {
    let rig = rig_with(with_tokens(service_config()));
    let stranger = [
        ("GET", "/roles/r/authority?token=1:1"),
        ("GET", "/roles"),
        ("GET", "/roles/r"),
        ("GET", "/roles/r/page"),
        ("GET", "/"),
        ("GET", "/metrics"),
        ("GET", "/nowhere"),
        ("POST", "/roles/r/authority"),
        ("GET", "/authority/check"),
        ("DELETE", "/metrics"),
    ];
    for (method, uri) in stranger {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, "test")
            .body(Body::empty())
            .unwrap();
        let (status, headers, body) = call(&rig.app, request).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {uri}: {body}");
        assert!(
            headers.get(header::ALLOW).is_none(),
            "{method} {uri} tells its methods"
        );
        assert!(headers.contains_key(header::WWW_AUTHENTICATE));
    }
    // Open to all: liveness, readiness (without its reason) and the contract.
    assert_eq!(call(&rig.app, get("/healthz")).await.0, StatusCode::OK);
    assert_eq!(call(&rig.app, get("/openapi.yaml")).await.0, StatusCode::OK);
    let (status, _, body) = call(&rig.app, get("/readyz")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "starting");
    assert!(
        !body["reason"].as_str().unwrap().contains("starting"),
        "{body}"
    );
    // With the token, everything answers.
    let with_token = |uri: &str| bearing(uri, TOKEN);
    assert_eq!(
        call(&rig.app, with_token("/metrics")).await.0,
        StatusCode::OK
    );
    let (_, _, body) = call(&rig.app, with_token("/readyz")).await;
    assert!(
        body["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("starting: waiting for Kafka")),
        "a caller with a token is told why: {body}"
    );
    let (status, _, body) = call(&rig.app, with_token("/roles/r/authority?token=1:1")).await;
    assert_eq!(
        (status, body["verdict"].as_str()),
        (StatusCode::CONFLICT, Some("vacant"))
    );

    let mut open_metrics = with_tokens(service_config());
    open_metrics.auth.public_metrics = true;
    let rig = rig_with(open_metrics);
    assert_eq!(call(&rig.app, get("/metrics")).await.0, StatusCode::OK);
}

/// A request to `uri` with `token` as its bearer token.
fn bearing(uri: &str, token: &str) -> Request<Body> {
    Request::get(uri)
        .header(header::HOST, "test")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn emptying_or_breaking_the_tokens_secret_revokes_every_token() {
    let mut mount = crate::testkit::SecretMount::new(&[("tokens", b"alpha\nbeta\n")]);
    let mut config = service_config();
    config.auth.api_tokens_file = Some(mount.path("tokens"));
    let rig = rig_with(config);
    let protected = ["/roles", "/roles/r", "/roles/r/authority?token=1:1", "/"];
    let answers = |token: &'static str| {
        let app = rig.app.clone();
        async move {
            let mut statuses = Vec::new();
            for uri in protected {
                statuses.push(call(&app, bearing(uri, token)).await.0);
            }
            statuses
        }
    };
    let metric = |name: &'static str| {
        let app = rig.app.clone();
        async move {
            let response = app.oneshot(bearing("/metrics", "beta")).await.unwrap();
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            String::from_utf8_lossy(&bytes)
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")).map(str::to_owned))
        }
    };
    assert!(
        answers("alpha")
            .await
            .iter()
            .all(|s| *s != StatusCode::UNAUTHORIZED)
    );
    assert_eq!(
        metric("krabka_api_tokens_accepted").await.as_deref(),
        Some("2")
    );
    assert_eq!(
        metric("krabka_api_tokens_file_unusable").await.as_deref(),
        Some("0")
    );

    // Every token revoked: the file emptied (kubelet swap). Within a look.
    mount.update(&[("tokens", b"# revoked\n")]);
    tokio::time::sleep(crate::files::LOOK_EVERY + Duration::from_millis(100)).await;
    assert_eq!(
        answers("alpha").await,
        vec![StatusCode::UNAUTHORIZED; protected.len()]
    );
    assert_eq!(
        answers("beta").await,
        vec![StatusCode::UNAUTHORIZED; protected.len()]
    );

    // Back with beta only, then broken: nothing of before is accepted.
    mount.update(&[("tokens", b"beta\n")]);
    tokio::time::sleep(crate::files::LOOK_EVERY + Duration::from_millis(100)).await;
    assert!(
        answers("beta")
            .await
            .iter()
            .all(|s| *s != StatusCode::UNAUTHORIZED)
    );
    assert_eq!(
        answers("alpha").await,
        vec![StatusCode::UNAUTHORIZED; protected.len()]
    );
    assert_eq!(
        metric("krabka_api_tokens_accepted").await.as_deref(),
        Some("1")
    );
    mount.update(&[("tokens", b"beta\nnot one token\n")]);
    tokio::time::sleep(crate::files::LOOK_EVERY + Duration::from_millis(100)).await;
    assert_eq!(
        answers("beta").await,
        vec![StatusCode::UNAUTHORIZED; protected.len()]
    );
    // /metrics needs a token too: the gauges are read from the state.
    rig.state.update_gauges();
    let rendered = rig.state.metrics.render();
    assert!(
        rendered.contains("krabka_api_tokens_file_unusable 1"),
        "{rendered}"
    );
    assert!(
        rendered.contains("krabka_api_tokens_accepted 0"),
        "{rendered}"
    );
    // Open paths stay open.
    assert_eq!(call(&rig.app, get("/healthz")).await.0, StatusCode::OK);
}

#[tokio::test]
async fn every_answer_says_nosniff_and_the_page_cannot_be_framed() {
    let rig = rig();
    for uri in [
        "/healthz",
        "/nowhere",
        "/roles/r/authority?token=x",
        "/",
        "/roles/r/page",
    ] {
        let (_, headers, _) = call(&rig.app, get(uri)).await;
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{uri}");
        assert!(headers.contains_key("x-request-id"), "{uri}");
    }
    let (_, headers, _) = call(&rig.app, get("/")).await;
    let csp = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
}

#[tokio::test]
async fn an_http11_request_needs_exactly_one_host() {
    let rig = rig();
    let none = Request::get("/healthz").body(Body::empty()).unwrap();
    let (status, _, body) = call(&rig.app, none).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("Host"))
    );
    let two = Request::get("/healthz")
        .header(header::HOST, "a")
        .header(header::HOST, "b")
        .body(Body::empty())
        .unwrap();
    assert_eq!(call(&rig.app, two).await.0, StatusCode::BAD_REQUEST);
    let http10 = Request::get("/healthz")
        .version(axum::http::Version::HTTP_10)
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        call(&rig.app, http10).await.0,
        StatusCode::OK,
        "HTTP/1.0 needs none"
    );
}

/// Each 503 names its cause in its type and title, and says when to ask
/// again: views whose topic was not found yet are not a coordinator that
/// could not be asked.
#[tokio::test]
async fn every_503_names_its_own_cause() {
    let rig = rig();
    rig.cluster.set_unavailable(Some("the brokers are down"));
    let problem = |body: &Value| {
        (
            body["type"].as_str().map(str::to_owned),
            body["title"].as_str().map(str::to_owned),
        )
    };
    let of = |kind: &str, title: &str| {
        (
            Some(format!("urn:krabka-authority:problem:{kind}")),
            Some(title.to_owned()),
        )
    };
    for path in ["/roles/orders", "/roles", "/roles/orders/events"] {
        let (status, headers, body) = call(&rig.app, get(path)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {body}");
        assert_eq!(headers[header::RETRY_AFTER], "1", "{path}");
        assert_eq!(
            problem(&body),
            of("topic-unavailable", "Coordination topic unavailable"),
            "{path}: {body}"
        );
        // What to do and the request id; the cause only in the logs.
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("Ask again in 1 s"), "{body}");
        assert!(!detail.contains("brokers are down"), "{body}");
        assert_eq!(body["requestId"], headers["x-request-id"].to_str().unwrap());
    }
    let (status, headers, body) = call(&rig.app, get("/roles/orders/authority?token=1:1")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(headers[header::RETRY_AFTER], "1");
    assert_eq!(
        problem(&body),
        of("coordinator-unavailable", "Coordinator unavailable"),
        "{body}"
    );
    // Readiness is not a problem, and says when to ask again too.
    let (status, headers, _) = call(&rig.app, get("/readyz")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers[header::RETRY_AFTER], "1");
}

#[tokio::test]
async fn roster_views_follow_the_topic() {
    let rig = rig();
    let member = rig.cluster.transport();
    member.register("orders", "node-1", 1).await.unwrap();
    let token = member.acquire_epoch("orders", LEASE).await.unwrap();
    member
        .write_lease("orders", token, &lease("node-1", token))
        .await
        .unwrap();
    let view = eventually(FIVE_S, "the lease in the view", async || {
        let (status, _, body) = call(&rig.app, get("/roles/orders")).await;
        (status == StatusCode::OK && !body["lease"].is_null()).then_some(body)
    })
    .await;
    assert_eq!(view["lease"]["member"], "node-1");
    assert_eq!(view["lease"]["token"], token.to_string());
    assert_eq!(view["members"][0]["member"], "node-1");
    let (status, _, _) = call(&rig.app, get("/roles/nobody")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, body) = call(&rig.app, get("/roles")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["roles"][0]["holder"], "node-1");
    // A lease record is what a member wrote: it raises no floor of the
    // check path (only confirmed coordinator answers do).
    assert_eq!(rig.state.checker.floor("orders", token.producer_id()), None);
}

#[tokio::test]
async fn a_skipped_batch_is_counted_and_shown_on_its_partitions_views_only() {
    let rig = rig();
    let member = rig.cluster.transport();
    let partition = crate::coordination::role_partition("orders", 4).unwrap();
    let other = (0..)
        .map(|i| format!("other-{i}"))
        .find(|r| crate::coordination::role_partition(r, 4) != Ok(partition))
        .unwrap();
    member.register("orders", "node-1", 1).await.unwrap();
    member.register(&other, "node-9", 1).await.unwrap();
    let offset = rig.cluster.append_oversized(partition, "zstd");
    member.register("orders", "node-2", 2).await.unwrap();
    let view = eventually(FIVE_S, "both members of orders", async || {
        let (status, _, body) = call(&rig.app, get("/roles/orders")).await;
        let members = body["members"].as_array().map_or(0, Vec::len);
        (status == StatusCode::OK && members == 2).then_some(body)
    })
    .await;
    assert_eq!(
        view["view"]["skippedBatches"],
        serde_json::json!([{"offset": offset, "lastOffset": offset, "compression": "zstd", "limitBytes": 1_048_588}]),
        "{view}"
    );
    assert_eq!(view["view"]["offset"], offset + 2, "read past it");
    let (_, _, elsewhere) = call(&rig.app, get(&format!("/roles/{other}"))).await;
    assert_eq!(elsewhere["view"]["skippedBatches"], serde_json::json!([]));
    assert_eq!(elsewhere["members"][0]["member"], "node-9");
    let counted = sample(&rig.app, "krabka_state_skipped_batches_total").await;
    assert_eq!(counted, Some(1.0));
    rig.state.probe().await;
    assert_eq!(call(&rig.app, get("/readyz")).await.0, StatusCode::OK);
}

/// The value of one sample of `metric` in the exposition.
async fn sample(app: &Router, metric: &str) -> Option<f64> {
    let (_, _, body) = call(app, get("/metrics")).await;
    let text = body.as_str().unwrap_or_default().to_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(metric)?.trim().parse().ok())
}

#[tokio::test]
async fn a_view_whose_leader_no_other_broker_confirms_grows_old_and_readyz_names_it() {
    let rig = rig();
    let member = rig.cluster.transport();
    member.register("orders", "node-1", 1).await.unwrap();
    let partition = crate::coordination::role_partition("orders", 4).unwrap();
    let view = || {
        eventually(FIVE_S, "the view of orders", async || {
            let (status, headers, body) = call(&rig.app, get("/roles/orders")).await;
            if status != StatusCode::OK {
                return None;
            }
            let header: u64 = headers["x-krabka-view-age-ms"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            Some((body["view"]["ageMs"].as_u64().unwrap(), header))
        })
    };
    let (age, _) = view().await;
    rig.state.probe().await;
    assert_eq!(call(&rig.app, get("/readyz")).await.0, StatusCode::OK);
    assert!(age < 1_000, "fresh: {age} ms");

    // Its leader answers, and no other broker confirms it any more.
    rig.cluster.set_leader_unconfirmed(partition, true);
    tokio::time::sleep(Duration::from_millis(100)).await;
    rig.clock.advance(Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (age, header) = view().await;
    assert!(age >= 10_000, "the age grows: {age} ms");
    assert_eq!(header, age, "the header says the same");
    let metric = format!("krabka_state_view_age_seconds{{partition=\"{partition}\"}}");
    let seconds = sample(&rig.app, &metric).await.unwrap();
    assert_eq!((seconds * 1000.0).round() as u64, age, "and the metric");
    let (status, _, body) = call(&rig.app, get("/readyz")).await;
    let reason = body["reason"].as_str().unwrap_or_default();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        reason.contains(&format!("partition {partition}:")) && reason.contains("no other broker"),
        "{reason}"
    );
    // The other partitions' views stay fresh.
    let other = format!(
        "krabka_state_view_age_seconds{{partition=\"{}\"}}",
        (partition + 1) % 4
    );
    assert!(sample(&rig.app, &other).await.unwrap() < 1.0);

    // Confirmed again: fresh and ready.
    rig.cluster.set_leader_unconfirmed(partition, false);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (age, _) = view().await;
    assert!(age < 1_000, "fresh again: {age} ms");
    assert_eq!(call(&rig.app, get("/readyz")).await.0, StatusCode::OK);
}

/// Issue 44 (4): the wall clock stepped back (an NTP step, a VM restored
/// from a snapshot) while a partition's leader is no longer confirmed. Its
/// views still grow old, and `/readyz` says so: ages are measured on a
/// clock that never steps back (and counts suspends). Before, the age came
/// from the wall clock and stayed 0 ms, and the service stayed ready.
#[tokio::test]
async fn a_view_grows_old_on_a_clock_that_never_steps_back() {
    use crate::time::Clock;
    let rig = rig();
    let member = rig.cluster.transport();
    member.register("orders", "node-1", 1).await.unwrap();
    let partition = crate::coordination::role_partition("orders", 4).unwrap();
    let view = || {
        eventually(FIVE_S, "the view of orders", async || {
            let (status, _, body) = call(&rig.app, get("/roles/orders")).await;
            (status == StatusCode::OK).then_some(body)
        })
    };
    assert!(view().await["view"]["ageMs"].as_u64().unwrap() < 1_000);
    rig.cluster.set_leader_unconfirmed(partition, true);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let wall = rig.clock.now_ms();
    rig.clock.step_back(Duration::from_secs(30));
    rig.clock.advance(Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let body = view().await;
    let age = body["view"]["ageMs"].as_u64().unwrap();
    assert!(
        age >= 10_000,
        "ten seconds passed, the wall clock went back: {age} ms"
    );
    // Shown on the wall clock: as long before its now as the view is old.
    assert_eq!(rig.clock.now_ms(), wall - 20_000);
    assert_eq!(
        body["view"]["refreshedAt"],
        crate::time::rfc3339_ms(rig.clock.now_ms() - age as i64)
    );
    assert_eq!(
        call(&rig.app, get("/readyz")).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

/// Issue 44 (6): `GET /roles` is as old as its oldest partition, listed
/// roles or not (before: the listed roles' only, 0 ms for an empty list),
/// and a 404 says how old the view is that holds no record of the role
/// (before: no age at all).
#[tokio::test]
async fn a_list_and_a_missing_role_say_how_old_their_views_are() {
    let rig = rig();
    let member = rig.cluster.transport();
    member.register("orders", "node-1", 1).await.unwrap();
    let listed = crate::coordination::role_partition("orders", 4).unwrap();
    let (absent, quiet) = (0..)
        .map(|i| format!("absent-{i}"))
        .find_map(|r| {
            let p = crate::coordination::role_partition(&r, 4).unwrap();
            (p != listed).then_some((r, p))
        })
        .unwrap();
    eventually(FIVE_S, "the list", async || {
        let (status, headers, _) = call(&rig.app, get("/roles")).await;
        (status == StatusCode::OK && headers.contains_key("x-krabka-view-age-ms")).then_some(())
    })
    .await;
    rig.cluster.set_leader_unconfirmed(quiet, true);
    tokio::time::sleep(Duration::from_millis(100)).await;
    rig.clock.advance(Duration::from_secs(10));
    let age = |headers: &HeaderMap| -> u64 {
        headers["x-krabka-view-age-ms"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (status, headers, body) = call(&rig.app, get("/roles")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["roles"].as_array().unwrap().len(), 1, "{body}");
    assert!(
        age(&headers) >= 10_000,
        "partition {quiet}, which lists nothing, is old"
    );
    let (status, headers, _) = call(&rig.app, get(&format!("/roles/{absent}"))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(age(&headers) >= 10_000, "no record, as of a view 10 s old");
}

/// The events of an open stream, as (event, id) by `next`.
struct Events(
    futures::stream::BoxStream<'static, Result<bytes::Bytes, axum::Error>>,
    String,
);

impl Events {
    async fn open(app: &Router, last_event_id: Option<&str>) -> Events {
        let mut request = get("/roles/orders/events");
        if let Some(id) = last_event_id {
            request
                .headers_mut()
                .insert("last-event-id", id.parse().unwrap());
        }
        let response = app.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        Events(
            Box::pin(response.into_body().into_data_stream()),
            String::new(),
        )
    }

    /// The next event's type and id (keep-alive comments skipped).
    async fn next(&mut self) -> (String, Option<String>) {
        use futures::StreamExt;
        loop {
            if let Some(end) = self.1.find("\n\n") {
                let frame: String = self.1.drain(..end + 2).collect();
                let field = |name: &str| {
                    frame
                        .lines()
                        .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
                };
                if let Some(event) = field("event:") {
                    return (event, field("id:"));
                }
                continue;
            }
            let chunk = tokio::time::timeout(FIVE_S, self.0.next())
                .await
                .expect("an event within 5 s")
                .expect("the stream goes on")
                .unwrap();
            self.1.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

/// Issue 44 (5): another cluster answers behind the bootstrap servers (one
/// rebuilt there). From that instant no view of the old cluster is shown
/// (before: until the next --poll-interval, with ages the new cluster's
/// confirmations made fresh), an open stream gets a `reset` of the new
/// cluster (before: nothing, and events at or below its last offset were
/// dropped), and an id of the old cluster resumes nothing.
#[tokio::test]
async fn another_cluster_drops_the_old_views_at_once_and_resets_every_stream() {
    let rig = rig();
    let member = rig.cluster.transport();
    member.register("orders", "node-1", 1).await.unwrap();
    eventually(FIVE_S, "the view of orders", async || {
        (call(&rig.app, get("/roles/orders")).await.0 == StatusCode::OK).then_some(())
    })
    .await;
    let mut stream = Events::open(&rig.app, None).await;
    let (event, id) = stream.next().await;
    assert_eq!(event, "snapshot");
    let old_id = id.unwrap();
    assert!(old_id.ends_with("@memory-cluster"), "{old_id}");

    rig.cluster.set_cluster_id("rebuilt");
    let (status, _, body) = call(&rig.app, get("/roles/orders")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "at once: {body}");
    assert_eq!(
        body["type"], "urn:krabka-authority:problem:views-not-ready",
        "{body}"
    );
    let (event, id) = stream.next().await;
    assert_eq!(event, "reset");
    let reset_id = id.expect("the new cluster's roster, whole");
    assert!(reset_id.ends_with("@rebuilt"), "{reset_id}");
    member.register("orders", "node-2", 2).await.unwrap();
    let (event, id) = stream.next().await;
    assert_eq!(event, "registered");
    assert!(id.unwrap().ends_with("@rebuilt"));
    let (status, _, _) = call(&rig.app, get("/roles/orders")).await;
    assert_eq!(status, StatusCode::OK, "the new cluster's view");

    // Resuming with an id of the old cluster, or one naming none: a reset;
    // with one of the new cluster: the changes after it.
    for last in [old_id.as_str(), "0"] {
        let mut resumed = Events::open(&rig.app, Some(last)).await;
        assert_eq!(resumed.next().await.0, "reset", "{last}");
    }
    let mut resumed = Events::open(&rig.app, Some(&reset_id)).await;
    assert_eq!(resumed.next().await.0, "registered");
}

/// Issue 52 (6): records deleted before the watcher read them (the log
/// start moved past its reader: retention, DeleteRecords; Kafka answers
/// OFFSET_OUT_OF_RANGE). The partition is a new history: what the watcher
/// read of it before is dropped (node-1's registration was deleted too),
/// its views wait until it is read again, and an open stream of it gets a
/// `reset`. Before, the reader jumped to the log start and the views went
/// on showing node-1, never node-2's deregistration... and the stream was
/// never told.
#[tokio::test]
async fn records_deleted_before_they_were_read_rebuild_the_partition_and_reset_its_streams() {
    let rig = rig_on(MemoryCluster::new(1), service_config());
    let member = rig.cluster.transport();
    member.register("orders", "node-1", 1).await.unwrap();
    eventually(FIVE_S, "the view of orders", async || {
        (call(&rig.app, get("/roles/orders")).await.0 == StatusCode::OK).then_some(())
    })
    .await;
    let mut stream = Events::open(&rig.app, None).await;
    assert_eq!(stream.next().await.0, "snapshot");

    // Written and deleted before the watcher reads them.
    rig.cluster.hold_reads(true);
    member.register("orders", "node-2", 2).await.unwrap();
    member.register("shipping", "node-3", 3).await.unwrap();
    let start = member.deregister("orders", "node-2").await.unwrap();
    let last = member.register("shipping", "node-4", 4).await.unwrap();
    rig.cluster.delete_records(0, start);
    rig.cluster.hold_reads(false);

    let (event, id) = stream.next().await;
    assert_eq!(event, "reset", "the stream is told its history restarted");
    assert_eq!(
        id.as_deref(),
        Some(&*format!("{last}@memory-cluster")),
        "the new history's roster, as of the log read from its start"
    );
    // The log from its start holds no record of orders: node-1's
    // registration is gone, and nothing of it is served.
    let (status, _, body) = call(&rig.app, get("/roles/orders")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _, body) = call(&rig.app, get("/roles/shipping")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let members: Vec<&str> = body["members"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .iter()
        .filter_map(|m| m["member"].as_str())
        .collect();
    assert_eq!(members, ["node-4"], "only what the log holds: {body}");
    // The stream goes on in the new history.
    member.register("orders", "node-5", 5).await.unwrap();
    assert_eq!(stream.next().await.0, "registered");
}

/// A role whose records all went (a registration and its removal) has no
/// roster, but a stream of it still stands at an offset: the last one read
/// of its partition. Before, its `snapshot` had no id: a client could not
/// resume from it, and the simulation's checker could not tell which
/// changes it owed (seed 12396).
#[tokio::test]
async fn a_snapshot_of_no_roster_names_the_offset_it_holds_as_of() {
    let rig = rig();
    let member = rig.cluster.transport();
    member.register("orders", "node-1", 1).await.unwrap();
    let removed = member.deregister("orders", "node-1").await.unwrap();
    eventually(FIVE_S, "no view of orders", async || {
        (call(&rig.app, get("/roles/orders")).await.0 == StatusCode::NOT_FOUND).then_some(())
    })
    .await;
    let mut stream = Events::open(&rig.app, None).await;
    let (event, id) = stream.next().await;
    assert_eq!(event, "snapshot");
    assert_eq!(id.as_deref(), Some(&*format!("{removed}@memory-cluster")));
    let added = member.register("orders", "node-2", 2).await.unwrap();
    let (event, next) = stream.next().await;
    assert_eq!(event, "registered", "the change after it, nothing before");
    assert_eq!(next.as_deref(), Some(&*format!("{added}@memory-cluster")));
    // Resumed from the snapshot's id: the change after it, no reset.
    let mut resumed = Events::open(&rig.app, id.as_deref()).await;
    assert_eq!(resumed.next().await, ("registered".to_owned(), next));
}

#[tokio::test]
async fn a_role_page_is_html_under_the_strict_policy_with_503_and_404_pages() {
    let rig = rig();
    // Not ready: the watcher has not found the topic (it has not run yet).
    rig.cluster.set_unavailable(Some("the brokers are down"));
    let (status, headers, body) = call(&rig.app, get("/roles/orders/page")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
    assert_eq!(headers[header::RETRY_AFTER], "1");
    assert!(body.as_str().unwrap().contains("Not ready: "), "{body}");
    rig.cluster.set_unavailable(None);
    // Ready: an unknown role is a 404 page. Changes from here on are kept.
    let (headers, body) = eventually(FIVE_S, "a 404 page once ready", async || {
        let (status, headers, body) = call(&rig.app, get("/roles/orders/page")).await;
        if status == StatusCode::NOT_FOUND {
            return Some((headers, body));
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        None
    })
    .await;
    assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
    assert!(headers.contains_key(header::CONTENT_SECURITY_POLICY));
    assert!(
        body.as_str()
            .unwrap()
            .contains("holds no record of role <code><bdi>orders</bdi></code>"),
        "{body}"
    );

    let member = rig.cluster.transport();
    member.register("orders", "node-1", 1).await.unwrap();
    let token = member.acquire_epoch("orders", LEASE).await.unwrap();
    member
        .write_lease("orders", token, &lease("node-1", token))
        .await
        .unwrap();
    let (headers, page) = eventually(FIVE_S, "the holder on the page", async || {
        let (status, headers, body) = call(&rig.app, get("/roles/orders/page")).await;
        let page = body.as_str().filter(|b| b.contains("Held by"))?.to_owned();
        (status == StatusCode::OK).then_some((headers, page))
    })
    .await;
    assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
    assert_eq!(headers[header::CACHE_CONTROL], "no-store");
    assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    assert!(headers.contains_key("x-request-id"));
    assert!(headers.contains_key("x-krabka-view-offset"));
    let csp = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && !csp.contains("script"),
        "{csp}"
    );
    assert!(
        page.contains("<b><bdi>node-1</bdi></b> under token"),
        "{page}"
    );
    assert!(page.contains(&format!("<code>{token}</code>")));
    assert!(page.contains("<svg class=\"countdown live\""), "{page}");
    assert_eq!(
        page.matches("class=\"holder-bar\"").count(),
        1,
        "the lease was written after the service caught up: {page}"
    );
    assert!(!page.contains("<script"));

    // `/` links each row to its role's page.
    let (_, _, index) = call(&rig.app, get("/")).await;
    assert!(
        index
            .as_str()
            .unwrap()
            .contains("<a href=\"/roles/orders/page\"><bdi>orders</bdi></a>"),
        "{index}"
    );

    // A role name that needs escaping in a path still reaches its page.
    let (status, _, body) = call(&rig.app, get("/roles/%3Cb%3E%22x/page")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body.as_str()
            .unwrap()
            .contains("<code><bdi>&lt;b&gt;&quot;x</bdi></code>"),
        "{body}"
    );
}

fn method() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH",
    ])
}

fn path() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        Just("roles".to_owned()),
        Just("authority".to_owned()),
        Just("check".to_owned()),
        Just("events".to_owned()),
        Just("metrics".to_owned()),
        "[a-zA-Z0-9%._~-]{0,40}",
        "%[0-9A-F]{2}",
    ];
    (
        prop::collection::vec(segment, 0..5),
        "(\\?[a-z=:0-9&%-]{0,30})?",
    )
        .prop_map(|(segments, query)| format!("/{}{query}", segments.join("/")))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whatever arrives: no panic, and no 5xx but a 503.
    #[test]
    fn no_request_makes_the_service_fail(
        requests in prop::collection::vec(
            (method(), path(), prop::option::of("[ -~]{0,40}"), prop::collection::vec(any::<u8>(), 0..200)),
            1..20,
        )
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let rig = rig();
            for (method, path, content_type, body) in requests {
                let mut request = Request::builder().method(method).uri(&path).header(header::HOST, "fuzz");
                if let Some(ct) = content_type {
                    request = request.header(header::CONTENT_TYPE, ct);
                }
                let Ok(request) = request.body(Body::from(body)) else { continue };
                // Event streams never end: look at the status only.
                let status = rig.app.clone().oneshot(request).await.unwrap().status();
                prop_assert!(
                    !status.is_server_error() || status == StatusCode::SERVICE_UNAVAILABLE,
                    "{method} {path}: {status}"
                );
            }
            Ok(())
        })?;
    }
}

#[tokio::test]
async fn memory_stays_bounded_whatever_role_names_are_asked_about() {
    let mut config = service_config();
    config.check.superseded_cache_bytes = 200_000;
    config.check.high_water_bytes = 200_000;
    let rig = rig_with(config);
    let minter = rig.cluster.transport();
    for i in 0..300 {
        let role = format!("{i:0>20000}");
        let old = minter.acquire_epoch(&role, LEASE).await.unwrap();
        minter.acquire_epoch(&role, LEASE).await.unwrap();
        let (status, _, _) = call(
            &rig.app,
            get(&format!("/roles/{role}/authority?token={old}")),
        )
        .await;
        assert_eq!(status, StatusCode::CONFLICT);
    }
    let (superseded, marks) = rig.state.checker.caches().sizes();
    assert!(
        superseded <= 200_000 / 20_000,
        "{superseded} superseded entries of 20 KB names"
    );
    let (superseded_bytes, mark_bytes) = rig.state.checker.caches().bytes();
    assert!(superseded_bytes <= 200_000 && mark_bytes <= 200_000);
    assert!(
        marks <= 200_000 / 20_000,
        "{marks} high-water marks of 20 KB names"
    );
}

/// A fresh cluster, without the coordination topic: the service is ready
/// (with a note), checks answer, views say no role is registered; when the
/// first candidate registers (creating the topic), the watcher finds it
/// without a restart and the views show the role.
#[tokio::test]
async fn a_fresh_cluster_without_the_topic_is_ready_and_the_first_candidate_shows() {
    let rig = rig_on(MemoryCluster::without_topic(4), service_config());
    let (status, _, body) = eventually(FIVE_S, "ready without the topic", async || {
        rig.state.probe().await;
        let answer = call(&rig.app, get("/readyz")).await;
        (answer.0 == StatusCode::OK).then_some(answer)
    })
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body["note"]
            .as_str()
            .is_some_and(|n| n.contains("does not exist yet")),
        "{body}"
    );
    let (status, _, body) = call(&rig.app, get("/roles")).await;
    assert_eq!(
        (status, &body["roles"]),
        (StatusCode::OK, &serde_json::json!([]))
    );
    let (status, _, body) = call(&rig.app, get("/roles/r")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("no role is registered yet")),
        "{body}"
    );
    let (status, _, body) = call(&rig.app, get("/roles/r/authority?token=1:1")).await;
    assert_eq!(
        (status, body["verdict"].as_str()),
        (StatusCode::CONFLICT, Some("vacant"))
    );
    assert!(!rig.cluster.topic_exists(), "the service created the topic");
    let metrics = call(&rig.app, get("/metrics")).await.2;
    assert!(
        metrics
            .as_str()
            .is_some_and(|m| m.contains("krabka_state_topic_exists 0")),
        "{metrics}"
    );

    // The first candidate registers, which creates the topic.
    rig.cluster
        .transport()
        .register("r", "a", 1_700_000_000_000)
        .await
        .unwrap();
    let body = eventually(FIVE_S, "the role in the views", async || {
        let (status, _, body) = call(&rig.app, get("/roles/r")).await;
        (status == StatusCode::OK).then_some(body)
    })
    .await;
    assert_eq!(body["members"][0]["member"], "a", "{body}");
    rig.state.probe().await;
    let (status, _, body) = call(&rig.app, get("/readyz")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.get("note").is_none(), "{body}");
    let metrics = call(&rig.app, get("/metrics")).await.2;
    assert!(
        metrics
            .as_str()
            .is_some_and(|m| m.contains("krabka_state_topic_exists 1")),
        "{metrics}"
    );
}

/// With --create-topic the service creates the missing topic itself, with
/// the partition count of its flags.
#[tokio::test]
async fn with_create_topic_the_service_creates_the_missing_topic() {
    let mut config = service_config();
    config.topic_creation.create_topic = true;
    config.topic_creation.topic_partitions = 3;
    let cluster = MemoryCluster::without_topic(4);
    let rig = rig_on(cluster.clone(), config);
    eventually(FIVE_S, "the topic created", async || {
        cluster.topic_exists().then_some(())
    })
    .await;
    let partitions = eventually(FIVE_S, "the watcher on it", async || {
        rig.state.watcher.partitions()
    })
    .await;
    assert_eq!(partitions, 3);
    rig.state.probe().await;
    let (status, _, body) = call(&rig.app, get("/readyz")).await;
    assert_eq!((status, body.get("note")), (StatusCode::OK, None), "{body}");
}

/// During start-up, while Kafka's first answer is still awaited, /readyz
/// says why the client cannot reach it (the OS's reason) as soon as the
/// client knows, not after the operation gives up.
#[tokio::test]
async fn while_kafka_is_unreachable_at_start_readyz_says_why_at_once() {
    let cluster = MemoryCluster::new(4);
    cluster.set_unreachable(Some("127.0.0.1:9092: Connection refused (os error 111)"));
    let rig = rig_on(cluster.clone(), service_config());
    let prober = tokio::spawn(rig.state.clone().probe_forever(Duration::from_secs(1)));
    let logs = crate::testkit::Logs::capture();
    let (headers, body) = eventually(FIVE_S, "the reason in /readyz", async || {
        let (status, headers, body) = call(&rig.app, get("/readyz")).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        (body["reason"] != "starting: waiting for Kafka's first answer").then_some((headers, body))
    })
    .await;
    // Anyone may ask /readyz: the address and the system's error are in
    // the log line of the request id the body gives, not in the body.
    assert_eq!(body["reason"], "starting: cannot reach Kafka", "{body}");
    let id = headers["x-request-id"].to_str().unwrap();
    assert_eq!(body["requestId"], id);
    let said = logs.lines("INFO", id);
    assert!(
        said.iter().any(|l| l.contains(
            "starting: cannot reach Kafka: 127.0.0.1:9092: Connection refused (os error 111)"
        )),
        "{said:#?}"
    );
    cluster.set_unreachable(None);
    eventually(FIVE_S, "ready once Kafka answers", async || {
        (call(&rig.app, get("/readyz")).await.0 == StatusCode::OK).then_some(())
    })
    .await;
    prober.abort();
}

#[tokio::test]
async fn a_503_is_an_answer_logged_at_debug_not_an_error() {
    // /readyz answers 503 until ready, a probe every few seconds; checks
    // answer 503 while Kafka cannot be asked. Neither is a fault to log at
    // error (tower-http's default for every 5xx).
    let logs = crate::testkit::Logs::capture();
    let rig = rig();
    assert_eq!(
        call(&rig.app, get("/readyz")).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(logs.lines("ERROR", "").len(), 0, "{:?}", logs.lines("", ""));
    assert_eq!(logs.lines("DEBUG", "answered 503").len(), 1);
}

/// Until the watcher says it reads the topic.
async fn watching(logs: &crate::testkit::Logs) {
    eventually(FIVE_S, "the watcher reading", async || {
        (!logs
            .lines("INFO", "watching the coordination topic")
            .is_empty())
        .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_partition_that_keeps_failing_is_logged_at_warn_once_until_it_reads_again() {
    let logs = crate::testkit::Logs::capture();
    let rig = rig();
    let partitions = 4;
    watching(&logs).await;
    let warned = || logs.lines("WARN", "cannot read a partition").len();
    rig.cluster.set_unavailable(Some("the broker is down"));
    eventually(
        FIVE_S,
        "three polls of every partition failed",
        async || (logs.lines("", "cannot read a partition").len() >= 3 * partitions).then_some(()),
    )
    .await;
    assert_eq!(warned(), partitions, "at warn once per partition");

    rig.cluster.set_unavailable(None);
    eventually(FIVE_S, "every partition read again", async || {
        (logs.lines("INFO", "readable again").len() == partitions).then_some(())
    })
    .await;
    rig.cluster.set_unavailable(Some("the broker is down"));
    eventually(FIVE_S, "failing anew is said anew", async || {
        (warned() == 2 * partitions).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_topic_that_stays_unreadable_is_logged_at_warn_once_per_error() {
    let logs = crate::testkit::Logs::capture();
    let cluster = MemoryCluster::new(4);
    cluster.set_unavailable(Some("the broker is down"));
    let _rig = rig_on(cluster.clone(), service_config());
    eventually(FIVE_S, "three looks at the topic failed", async || {
        (logs.lines("", "coordination topic is").len() >= 3).then_some(())
    })
    .await;
    assert_eq!(logs.lines("WARN", "not readable yet").len(), 1);
    cluster.set_unavailable(Some("access denied"));
    eventually(FIVE_S, "another error is said at warn", async || {
        (logs.lines("WARN", "not readable yet").len() == 2).then_some(())
    })
    .await;
    cluster.set_unavailable(None);
    watching(&logs).await;
}

/// What a Kafka client's failure may say (a broker address, a file path,
/// the system's and a TLS library's errors), made the cause of every 503.
const CAUSE: &str = "cannot connect to 10.9.8.7:9093: Connection refused (os error 111); TLS /etc/krabka/kafka-tls/ca.crt: invalid peer certificate: UnknownIssuer";

/// What no 4xx or 5xx body may hold: the parts of [`CAUSE`], and the words
/// of the libraries that parse requests (serde, axum, hyper).
const INSIDES: [&str; 14] = [
    "10.9.8.7",
    "9093",
    "/etc/krabka",
    "os error",
    "Connection refused",
    "UnknownIssuer",
    "Failed to",
    "deserialize",
    "invalid type",
    "expected a",
    "duplicate field",
    "at line",
    "serde",
    "axum",
];

/// Every route with input a user gets wrong: roles that are not UTF-8 or
/// empty, a token missing, twice, malformed or out of range, another
/// method, bodies of every wrong shape or type, a bad Last-Event-ID.
fn every_route_with_bad_input() -> Vec<Request<Body>> {
    let mut requests = Vec::new();
    let with = |method: &str, uri: &str| {
        Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, "test")
    };
    for (method, path) in ROUTES {
        for role in ["orders", "%FF%FE", "a%20b%0A"] {
            let path = path.replace("{role}", role);
            for query in [
                "",
                "?token=1:1",
                "?token=1:1&token=2:2",
                "?token=nope",
                "?token=99999999999999999999999:1",
                "?token=1:-1",
                "?q=%FF",
            ] {
                let uri = format!("{path}{query}");
                requests.push(with(method, &uri).body(Body::empty()).unwrap());
                requests.push(with("DELETE", &uri).body(Body::empty()).unwrap());
            }
            requests.push(
                with(method, &path)
                    .header("last-event-id", "yesterday")
                    .body(Body::empty())
                    .unwrap(),
            );
            if *method == "POST" {
                for body in [
                    r#"{"role":"orders","token":"1:1"}"#,
                    "not json",
                    "",
                    "[1]",
                    r#"[{"role":5,"token":"1:1"}]"#,
                    r#"[{"role":"orders","token":"1:1"}"#,
                    r#"[{"role":"orders","token":"1:1"}]"#,
                    r#"[{"role":"orders"},{"token":"1:1"},{"role":"","token":"x"}]"#,
                ] {
                    requests.push(
                        with(method, &path)
                            .header(header::CONTENT_TYPE, "application/json")
                            .body(Body::from(body))
                            .unwrap(),
                    );
                }
                requests.push(with(method, &path).body(Body::from("[]")).unwrap());
                requests.push(
                    with(method, &path)
                        .header(header::CONTENT_TYPE, "application/json")
                        .body(Body::from(vec![b' '; 2 << 20]))
                        .unwrap(),
                );
            }
        }
    }
    requests.push(Request::get("/healthz").body(Body::empty()).unwrap());
    requests.push(with("GET", "/nowhere").body(Body::empty()).unwrap());
    requests
}

/// Walks every route with bad input on `rig`: each 4xx or 5xx body holds
/// none of [`INSIDES`]; a problem is `application/problem+json` (a 4xx
/// names the field and what to do, a 5xx says when to ask again and the
/// request id), as are all but `/readyz`'s status and the role page's HTML.
/// Returns how many answers were 4xx or 5xx.
async fn walk(rig: &Rig) -> usize {
    let mut refused = 0;
    for request in every_route_with_bad_input() {
        let what = format!("{} {}", request.method(), request.uri());
        let response = rig.app.clone().oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        if what.starts_with("POST") && parts.status == StatusCode::OK {
            // A batch's items refused: the same rule inside the 200.
            let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            let text = String::from_utf8_lossy(&bytes);
            for inside in INSIDES {
                assert!(!text.contains(inside), "{what}: {inside:?} in {text}");
            }
            continue;
        }
        if parts.status.as_u16() < 400 || parts.status == StatusCode::CONFLICT {
            continue; // a verdict; an event stream would never end
        }
        refused += 1;
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        let text = String::from_utf8_lossy(&bytes);
        for inside in INSIDES {
            assert!(!text.contains(inside), "{what}: {inside:?} in {text}");
        }
        let kind = parts.headers[header::CONTENT_TYPE].to_str().unwrap();
        if what.contains("/readyz") || kind.starts_with("text/html") {
            assert!(
                what.contains("/readyz") || what.contains("/page"),
                "{what}: {kind}"
            );
            continue;
        }
        assert_eq!(kind, "application/problem+json", "{what}: {text}");
        assert!(text.ends_with("}\n"), "{what}: {text:?}");
        let problem: Value = serde_json::from_slice(&bytes).unwrap();
        let detail = problem["detail"].as_str().unwrap_or_default();
        if parts.status.is_client_error() {
            assert!(problem["field"].is_string(), "{what}: no field: {text}");
            assert!(detail.len() > 20, "{what}: no fix: {text}");
            assert!(problem.get("requestId").is_none(), "{what}: {text}");
        } else {
            let id = parts.headers["x-request-id"].to_str().unwrap();
            assert_eq!(problem["requestId"], id, "{what}: {text}");
            assert!(
                parts.status == StatusCode::INTERNAL_SERVER_ERROR
                    || detail.contains("Ask again in 1 s"),
                "{what}: {text}"
            );
        }
    }
    refused
}

#[tokio::test]
async fn no_refusal_of_any_route_tells_an_address_a_path_or_a_librarys_words() {
    // Kafka unreachable and every request failing, with all of CAUSE.
    let broken = rig();
    broken.cluster.set_unreachable(Some(CAUSE));
    broken.cluster.set_unavailable(Some(CAUSE));
    let prober = tokio::spawn(
        broken
            .state
            .clone()
            .probe_forever(Duration::from_millis(100)),
    );
    eventually(FIVE_S, "the prober knows the cause", async || {
        broken
            .state
            .readiness
            .reason()
            .filter(|r| r.why.contains("10.9.8.7"))
    })
    .await;
    let down = walk(&broken).await;
    prober.abort();
    // Kafka up, a role held: the 4xx of input alone.
    let healthy = rig();
    let member = healthy.cluster.transport();
    member.register("orders", "node-1", 1).await.unwrap();
    member.acquire_epoch("orders", LEASE).await.unwrap();
    let up = walk(&healthy).await;
    // With API tokens and none given: the 401s.
    let protected = rig_with(with_tokens(service_config()));
    let strangers = walk(&protected).await;
    eprintln!(
        "answers refused: {down} with Kafka down, {up} with Kafka up, {strangers} to strangers"
    );
    assert!(
        down > 100 && up > 100 && strangers > 100,
        "{down} {up} {strangers}"
    );
}

#[tokio::test]
async fn roles_named_dot_and_dot_dot_link_to_their_own_pages() {
    let rig = rig();
    let member = rig.cluster.transport();
    for role in [".", "..", "..."] {
        member.register(role, "node-1", 1).await.unwrap();
    }
    let page = eventually(FIVE_S, "the three roles on the status page", async || {
        let (_, _, page) = call(&rig.app, get("/")).await;
        let page = page.as_str().unwrap_or_default().to_owned();
        page.contains("data-role=\"...\"").then_some(page)
    })
    .await;
    // A browser resolves `/roles/../page` (and `%2E%2E`) to `/page`: the
    // links of dot names go through the query.
    assert!(page.contains("href=\"/page?role=.\""), "{page}");
    assert!(page.contains("href=\"/page?role=..\""), "{page}");
    assert!(page.contains("href=\"/roles/.../page\""), "{page}");
    for role in [".", ".."] {
        let (status, _, page) = call(&rig.app, get(&format!("/page?role={role}"))).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let page = page.as_str().unwrap_or_default();
        assert!(
            page.contains(&format!("<h1>Role <code><bdi>{role}</bdi></code>")),
            "{page}"
        );
        // A client that keeps percent-encoded dots reaches the JSON.
        let segment = crate::service::path_segment(role);
        let (status, _, body) = call(&rig.app, get(&format!("/roles/{segment}"))).await;
        assert_eq!(
            (status, body["role"].as_str()),
            (StatusCode::OK, Some(role))
        );
    }
    let (status, _, body) = call(&rig.app, get("/page")).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("role"))
    );
}

#[tokio::test]
async fn a_member_has_one_rank_in_members_and_challengers() {
    let rig = rig();
    let member = rig.cluster.transport();
    for (i, m) in ["first", "holder", "third"].iter().enumerate() {
        member.register("r", m, i as i64).await.unwrap();
    }
    let token = member.acquire_epoch("r", LEASE).await.unwrap();
    member
        .write_lease("r", token, &lease("holder", token))
        .await
        .unwrap();
    let body = eventually(FIVE_S, "the roster with its lease", async || {
        let (_, _, body) = call(&rig.app, get("/roles/r")).await;
        (body["lease"]["member"] == "holder").then_some(body)
    })
    .await;
    let rank_of = |list: &str, name: &str| {
        body[list]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["member"] == name)
            .map(|m| m["rank"].clone())
    };
    for name in ["first", "third"] {
        assert_eq!(
            rank_of("challengers", name),
            rank_of("members", name),
            "{body}"
        );
    }
    assert_eq!(rank_of("challengers", "third"), Some(2.into()), "{body}");
    // Listed in the order they may challenge.
    assert_eq!(body["challengers"][0]["member"], "first", "{body}");
}

/// Issue 52, finding 4: a poll of the coordinator in flight while the
/// cluster behind the address is rebuilt. Its answer (the old cluster's
/// 1000:5) arrives after the change; before, the poller took it as a floor
/// of the new cluster, whose pair 1000:0 reuses the producer id, and every
/// check of that pair answered 503 until its epoch passed 5 or the service
/// restarted. Now a poll's answer counts only for the cluster its reading
/// reads.
#[tokio::test]
async fn a_poll_answered_by_the_old_cluster_is_no_floor_for_the_rebuilt_one() {
    let rig = rig();
    let member = rig.cluster.transport();
    member.register("orders", "node-1", 1).await.unwrap();
    let mut old = None;
    for _ in 0..6 {
        old = Some(member.acquire_epoch("orders", LEASE).await.unwrap());
    }
    assert_eq!(old.unwrap().to_string(), "1000:5");
    eventually(FIVE_S, "the view of orders", async || {
        (call(&rig.app, get("/roles/orders")).await.0 == StatusCode::OK).then_some(())
    })
    .await;
    let hold = rig.cluster.hold_describes();
    hold.entered().await;
    // A poll holds the old cluster's answer; the cluster is rebuilt and
    // its first mint of the role draws the same producer id.
    rig.cluster.set_cluster_id("rebuilt");
    rig.cluster.expire("orders");
    rig.cluster.set_next_producer_id(1000);
    let new = member.acquire_epoch("orders", LEASE).await.unwrap();
    assert_eq!(new.to_string(), "1000:0");
    rig.cluster.unhold_describes();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (status, _, body) = call(
        &rig.app,
        get(&format!("/roles/orders/authority?token={new}")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["verdict"], "authoritative", "{body}");
    assert_eq!(body["cluster"], "rebuilt", "{body}");
}

/// Issue 52: items in no sorted order, each answered as itself. The batch
/// describes the distinct roles sorted; an answer taken from that list by
/// the item's index would answer "c" with "a"'s pair.
#[tokio::test]
async fn a_batch_answers_each_item_for_its_own_role_in_the_order_asked() {
    let rig = rig();
    let member = rig.cluster.transport();
    let c = member.acquire_epoch("c", LEASE).await.unwrap();
    let a = member.acquire_epoch("a", LEASE).await.unwrap();
    let a2 = member.acquire_epoch("a", LEASE).await.unwrap();
    let body = format!(
        r#"[{{"role":"c","token":"{c}"}},{{"role":"b","token":"1:1"}},{{"role":"a","token":"{a}"}},{{"role":"a","token":"{a2}"}},{{"role":"c","token":"{a2}"}}]"#
    );
    let (status, _, answer) = call(&rig.app, post_json("/authority/check", &body)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let got: Vec<(&str, &str, &str, Option<&str>)> = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["role"].as_str().unwrap(),
                r["token"].as_str().unwrap(),
                r["verdict"].as_str().unwrap(),
                r["current"].as_str(),
            )
        })
        .collect();
    let (c, a, a2) = (c.to_string(), a.to_string(), a2.to_string());
    assert_eq!(
        got,
        [
            ("c", c.as_str(), "authoritative", Some(c.as_str())),
            ("b", "1:1", "vacant", None),
            ("a", a.as_str(), "superseded", Some(a2.as_str())),
            ("a", a2.as_str(), "authoritative", Some(a2.as_str())),
            ("c", a2.as_str(), "unknown", Some(c.as_str())),
        ],
        "{answer}"
    );
}

/// Issue 52, finding 6: a token revoked by rewriting the file in place with
/// one of the same length, its modification time put back (`cp -p`,
/// `touch -r`), right after the service last looked. Before, the stamp
/// (inode, size, mtime) was unchanged and the revoked token stayed accepted
/// for good: revocation failed open.
#[tokio::test]
async fn a_token_revoked_by_a_same_length_rewrite_with_its_time_restored_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    std::fs::write(&path, "alpha-token\n").unwrap();
    let mut config = service_config();
    config.auth.api_tokens_file = Some(path.clone());
    let rig = rig_with(config);
    assert_ne!(
        call(&rig.app, bearing("/roles", "alpha-token")).await.0,
        StatusCode::UNAUTHORIZED
    );
    // Past the racy moment: the stamp the service holds is settled.
    tokio::time::sleep(crate::files::RACY + crate::files::LOOK_EVERY).await;
    assert_ne!(
        call(&rig.app, bearing("/roles", "alpha-token")).await.0,
        StatusCode::UNAUTHORIZED
    );
    crate::testkit::rewrite_keeping_mtime(&path, b"omega-token\n");
    tokio::time::sleep(crate::files::LOOK_EVERY + Duration::from_millis(100)).await;
    assert_eq!(
        call(&rig.app, bearing("/roles", "alpha-token")).await.0,
        StatusCode::UNAUTHORIZED,
        "the revoked token is still accepted"
    );
    assert_ne!(
        call(&rig.app, bearing("/roles", "omega-token")).await.0,
        StatusCode::UNAUTHORIZED
    );
}
