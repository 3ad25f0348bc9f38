//! The client and the guard against a fake service on 127.0.0.1: no Kafka.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Extension, Path, Query};
use axum::http::{HeaderMap, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::*;

fn t(text: &str) -> FencingToken {
    text.parse().expect("a token")
}

/// A verdict body as the service writes it, of cluster "c1".
fn answer(role: &str, token: &str, verdict: &str, current: Option<&str>) -> Value {
    let by = (verdict == "superseded")
        .then(|| json!({"pair": current, "seenAt": "2026-11-30T03:05:42.291Z"}));
    json!({
        "role": role, "token": token, "verdict": verdict, "current": current,
        "state": current.map(|_| "CompleteCommit"), "supersededBy": by,
        "checkedAt": "2026-11-30T03:05:42.291Z", "cached": false, "cluster": "c1",
    })
}

fn reply(status: u16, body: Value) -> Response {
    let status = StatusCode::from_u16(status).expect("a status");
    (status, axum::Json(body)).into_response()
}

fn unavailable(retry_after: &str) -> Response {
    let body = json!({"type": "urn:krabka-authority:problem:coordinator-unavailable",
        "title": "Coordinator unavailable", "status": 503,
        "detail": "the transaction coordinator could not be asked: timed out"});
    let mut response = reply(503, body);
    if !retry_after.is_empty() {
        response
            .headers_mut()
            .insert("retry-after", retry_after.parse().expect("a header"));
    }
    response
}

/// Serves `router` on a free port; returns its base URL.
async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

#[derive(serde::Deserialize)]
struct TokenQuery {
    token: String,
}

/// A fake single check: `1:1` is the current pair of every role, `1:0` is
/// superseded, anything else vacant. Counts requests.
fn fake_service(hits: Arc<AtomicUsize>) -> Router {
    Router::new().route(
        "/roles/{role}/authority",
        get(
            move |Path(role): Path<String>, Query(q): Query<TokenQuery>| {
                let hits = hits.clone();
                async move {
                    hits.fetch_add(1, Ordering::SeqCst);
                    match q.token.as_str() {
                        "1:1" => reply(200, answer(&role, "1:1", "authoritative", Some("1:1"))),
                        "1:0" => reply(409, answer(&role, "1:0", "superseded", Some("1:1"))),
                        token => reply(409, answer(&role, token, "vacant", None)),
                    }
                }
            },
        ),
    )
}

fn client(url: &str) -> AuthorityClient {
    AuthorityClient::builder(url)
        .deadline(Duration::from_secs(3))
        .build()
        .expect("a client")
}

#[tokio::test]
async fn a_200_is_authoritative_and_every_yes_is_asked_again() {
    let hits = Arc::new(AtomicUsize::new(0));
    let client = client(&serve(fake_service(hits.clone())).await);
    for n in 1..=3 {
        let outcome = client.check("orders", t("1:1")).await;
        assert!(outcome.is_authoritative(), "{outcome}");
        let decision = outcome.decision().expect("a decision");
        assert_eq!(decision.current, Some(t("1:1")));
        assert!(!decision.remembered);
        assert_eq!(hits.load(Ordering::SeqCst), n, "a yes is never remembered");
    }
    let vacant = client.check("orders", t("5:5")).await;
    assert_eq!(vacant.verdict(), Some(Verdict::Vacant));
    assert!(!vacant.is_authoritative());
}

#[tokio::test]
async fn a_409_superseded_is_remembered_and_answered_without_a_request() {
    let hits = Arc::new(AtomicUsize::new(0));
    let client = client(&serve(fake_service(hits.clone())).await);
    let first = client.check("orders", t("1:0")).await;
    let decision = first.decision().expect("a decision").clone();
    assert_eq!(decision.verdict, Verdict::Superseded);
    assert_eq!(decision.current, Some(t("1:1")));
    assert!(!decision.remembered);
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    let again = client.check("orders", t("1:0")).await;
    let remembered = again.decision().expect("a decision");
    assert!(remembered.remembered, "{again:?}");
    assert_eq!(remembered.verdict, Verdict::Superseded);
    assert_eq!(remembered.current, None, "nobody asked the coordinator now");
    assert_eq!(
        remembered.superseded_by.as_ref().map(|s| s.pair),
        Some(t("1:1"))
    );
    assert_eq!(remembered.cluster, "c1");
    assert_eq!(
        remembered.to_string(),
        "token 1:0 of role \"orders\" is superseded (by pair 1:1, seen at 2026-11-30T03:05:42.291Z)"
    );
    // Clones share the memory; a batch uses it too.
    let batch = client.clone().check_batch(&[("orders", t("1:0"))]).await;
    assert!(batch[0].decision().is_some_and(|d| d.remembered));
    assert_eq!(hits.load(Ordering::SeqCst), 1, "no request after the first");

    // Only that role: the same token of another role is asked.
    let other = client.check("billing", t("1:0")).await;
    assert!(!other.decision().expect("a decision").remembered);
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

/// Issue 44 (5): the cluster behind the service is rebuilt (a new cluster
/// id) and mints 0:0 again, which the old one had superseded. The client
/// must not refuse it from the old cluster's memory: a verdict naming
/// another cluster clears it, a 503 (what a cluster going away looks like)
/// suspends it, and it answers only within its trust window.
#[tokio::test]
async fn the_memory_of_one_cluster_never_refuses_a_token_of_another() {
    // 0: cluster a, where 0:0 is superseded by 0:1; 1: unavailable; 2:
    // cluster b, where 0:0 is current.
    let phase = Arc::new(AtomicUsize::new(0));
    let hits = Arc::new(AtomicUsize::new(0));
    let router = {
        let (phase, hits) = (phase.clone(), hits.clone());
        Router::new().route(
            "/roles/{role}/authority",
            get(
                move |Path(role): Path<String>, Query(q): Query<TokenQuery>| {
                    let (phase, hits) = (phase.clone(), hits.clone());
                    async move {
                        hits.fetch_add(1, Ordering::SeqCst);
                        match (phase.load(Ordering::SeqCst), q.token.as_str()) {
                            (0, "0:0") => {
                                reply(409, answer(&role, "0:0", "superseded", Some("0:1")))
                            }
                            (0, token) => reply(409, answer(&role, token, "vacant", None)),
                            (1, _) => unavailable("0"),
                            (_, token) => {
                                let mut body = answer(&role, token, "authoritative", Some(token));
                                body["cluster"] = json!("c2");
                                reply(200, body)
                            }
                        }
                    }
                },
            ),
        )
    };
    let url = serve(router).await;
    let client = AuthorityClient::builder(&url)
        .deadline(Duration::from_millis(300))
        .default_retry_after(Duration::from_millis(100))
        .superseded_memory_trust(Duration::from_millis(400))
        .build()
        .expect("a client");
    let remembered = |outcome: &Outcome| outcome.decision().is_some_and(|d| d.remembered);
    assert!(!remembered(&client.check("orders", t("0:0")).await));
    assert!(
        remembered(&client.check("orders", t("0:0")).await),
        "cluster a: remembered"
    );

    // Going away: a 503 suspends the memory.
    phase.store(1, Ordering::SeqCst);
    assert!(client.check("other", t("1:1")).await.decision().is_none());
    let gap = client.check("orders", t("0:0")).await;
    assert!(gap.decision().is_none(), "asked, not remembered: {gap}");
    // Cluster b answers: its verdicts are the only ones.
    phase.store(2, Ordering::SeqCst);
    let current = client.check("orders", t("0:0")).await;
    assert!(current.is_authoritative(), "{current}");
    assert_eq!(current.decision().map(|d| d.cluster.as_str()), Some("c2"));
    assert_eq!(
        client.superseded_memory_usage().0,
        0,
        "cluster a's verdicts forgotten"
    );

    // Without any 503: another cluster's verdict clears the memory at
    // once, and a quiet client stops trusting it after the window.
    phase.store(0, Ordering::SeqCst);
    client.check("orders", t("0:0")).await;
    assert!(remembered(&client.check("orders", t("0:0")).await));
    phase.store(2, Ordering::SeqCst);
    assert!(client.check("other", t("1:1")).await.is_authoritative());
    assert!(client.check("orders", t("0:0")).await.is_authoritative());
    phase.store(0, Ordering::SeqCst);
    client.check("orders", t("0:0")).await;
    let before = hits.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(450)).await;
    phase.store(2, Ordering::SeqCst);
    assert!(
        client.check("orders", t("0:0")).await.is_authoritative(),
        "asked after the window"
    );
    assert_eq!(hits.load(Ordering::SeqCst), before + 1);
}

/// Issue 52 (6): the trust window counts the time the host was suspended
/// (a VM paused, a laptop asleep), which `Instant` (CLOCK_MONOTONIC) does
/// not: after a suspend longer than the window, the memory asks again.
#[tokio::test]
async fn a_suspend_longer_than_the_trust_window_ends_the_memorys_trust() {
    let hits = Arc::new(AtomicUsize::new(0));
    let client = client(&serve(fake_service(hits.clone())).await);
    client.check("orders", t("1:0")).await;
    let again = client.check("orders", t("1:0")).await;
    assert!(again.decision().is_some_and(|d| d.remembered), "{again:?}");
    clock::simulate_suspend(DEFAULT_SUPERSEDED_MEMORY_TRUST + Duration::from_secs(50));
    let woken = client.check("orders", t("1:0")).await;
    assert!(
        woken.decision().is_some_and(|d| !d.remembered),
        "asked again after the suspend: {woken:?}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

/// A fake single check of token `1:0`, superseded by `1:1` in cluster c1:
/// fresh for role `orders`; from the service's cache for `billing`; fresh
/// for `slow` but 6 s in coming (the host's boot clock moves while the
/// service answers, as it would in a slow describe). Counts requests.
fn aged_service(hits: Arc<AtomicUsize>) -> Router {
    Router::new().route(
        "/roles/{role}/authority",
        get(
            move |Path(role): Path<String>, Query(q): Query<TokenQuery>| {
                let hits = hits.clone();
                async move {
                    hits.fetch_add(1, Ordering::SeqCst);
                    let mut body = answer(&role, &q.token, "superseded", Some("1:1"));
                    match role.as_str() {
                        "billing" => {
                            body["cached"] = json!(true);
                            body["current"] = Value::Null;
                            body["state"] = Value::Null;
                        }
                        "slow" => clock::simulate_suspend(Duration::from_secs(6)),
                        _ => {}
                    }
                    reply(409, body)
                }
            },
        ),
    )
}

/// Issue 52 (6): a verdict from the service's cache says the service was
/// in contact with the cluster lately, not when (the wire has no such
/// age): it must not renew the memory's window, which stays counted from
/// the last verdict the coordinator was asked for.
#[tokio::test]
async fn a_cached_verdict_does_not_renew_the_memorys_trust() {
    let hits = Arc::new(AtomicUsize::new(0));
    let client = client(&serve(aged_service(hits.clone())).await);
    let remembered = |outcome: &Outcome| outcome.decision().is_some_and(|d| d.remembered);
    assert!(!remembered(&client.check("orders", t("1:0")).await));
    clock::simulate_suspend(Duration::from_secs(6));
    let cached = client.check("billing", t("1:0")).await;
    assert!(
        cached.decision().is_some_and(|d| d.cached && !d.remembered),
        "{cached:?}"
    );
    assert!(
        remembered(&client.check("orders", t("1:0")).await),
        "within 10 s of the fresh verdict"
    );
    clock::simulate_suspend(Duration::from_secs(6));
    let after = client.check("orders", t("1:0")).await;
    assert!(
        after.decision().is_some_and(|d| !d.remembered),
        "12 s after the fresh verdict was asked, 6 s after the cached one: asked again: {after:?}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 3);
}

/// Issue 52 (6): the window counts from when the request was sent (the
/// coordinator was asked after that), not from when the answer came: an
/// answer 6 s in coming leaves 4 s of the 10, not 10.
#[tokio::test]
async fn the_memorys_trust_counts_from_the_request_not_the_answer() {
    let hits = Arc::new(AtomicUsize::new(0));
    let client = client(&serve(aged_service(hits.clone())).await);
    let first = client.check("slow", t("1:0")).await;
    assert!(first.decision().is_some_and(|d| !d.remembered), "{first:?}");
    let again = client.check("slow", t("1:0")).await;
    assert!(again.decision().is_some_and(|d| d.remembered), "{again:?}");
    clock::simulate_suspend(Duration::from_secs(6));
    let after = client.check("slow", t("1:0")).await;
    assert!(
        after.decision().is_some_and(|d| !d.remembered),
        "12 s after the request, 6 s after the answer: asked again: {after:?}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_503_is_retried_after_retry_after_within_the_deadline_then_undecided() {
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    let router = Router::new().route(
        "/roles/{role}/authority",
        get(move || {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                unavailable("1")
            }
        }),
    );
    let client = client(&serve(router).await);
    let started = Instant::now();
    let outcome = client
        .check_within("orders", t("1:1"), Duration::from_millis(2_500))
        .await;
    let took = started.elapsed();
    // Asked at 0 s, 1 s and 2 s; a third wait would pass the deadline.
    match &outcome {
        Outcome::Undecided(Undecided::Unavailable {
            attempts,
            retry_after,
            detail,
        }) => {
            assert_eq!(*attempts, 3);
            assert_eq!(*retry_after, Some(Duration::from_secs(1)));
            assert!(detail.contains("timed out"), "{detail}");
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
    assert_eq!(hits.load(Ordering::SeqCst), 3);
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_millis(2_500),
        "{took:?}"
    );

    // A Retry-After beyond the deadline: undecided at once, no waiting.
    let started = Instant::now();
    let outcome = client
        .check_within("orders", t("1:1"), Duration::from_millis(500))
        .await;
    assert!(matches!(
        outcome,
        Outcome::Undecided(Undecided::Unavailable { attempts: 1, .. })
    ));
    assert!(started.elapsed() < Duration::from_millis(400));
}

#[tokio::test]
async fn a_503_then_a_200_is_authoritative() {
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    let router = Router::new().route(
        "/roles/{role}/authority",
        get(move |Path(role): Path<String>| {
            let seen = seen.clone();
            async move {
                if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                    unavailable("0")
                } else {
                    reply(200, answer(&role, "1:1", "authoritative", Some("1:1")))
                }
            }
        }),
    );
    let outcome = client(&serve(router).await).check("orders", t("1:1")).await;
    assert!(outcome.is_authoritative(), "{outcome}");
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn garbage_errors_and_contradictions_are_undecided_never_a_yes() {
    let cases: Vec<(&str, Response)> = vec![
        (
            "not json",
            (StatusCode::OK, "<html>hello</html>").into_response(),
        ),
        ("empty", StatusCode::OK.into_response()),
        (
            "another token",
            reply(200, answer("orders", "1:2", "authoritative", Some("1:2"))),
        ),
        (
            "another role",
            reply(200, answer("billing", "1:1", "authoritative", Some("1:1"))),
        ),
        (
            "a 200 that is not authoritative",
            reply(200, answer("orders", "1:1", "superseded", Some("1:2"))),
        ),
        (
            "a 409 that says authoritative",
            reply(409, answer("orders", "1:1", "authoritative", Some("1:1"))),
        ),
        (
            "authoritative with another current pair",
            reply(200, answer("orders", "1:1", "authoritative", Some("1:2"))),
        ),
        (
            "superseded by an older pair",
            reply(409, answer("orders", "1:1", "superseded", Some("1:0"))),
        ),
        ("a 500", reply(500, json!({"detail": "boom"}))),
        (
            "a 401",
            reply(
                401,
                json!({"type": "x", "title": "Unauthorized", "status": 401, "detail": "a valid bearer token is required"}),
            ),
        ),
        (
            "a redirect",
            (StatusCode::TEMPORARY_REDIRECT, [("location", "/elsewhere")]).into_response(),
        ),
    ];
    for (what, response) in cases {
        let response = Arc::new(std::sync::Mutex::new(Some(response)));
        let router = Router::new().route(
            "/roles/{role}/authority",
            get(move || {
                let response = response.clone();
                async move {
                    response
                        .lock()
                        .expect("a lock")
                        .take()
                        .unwrap_or_else(|| StatusCode::GONE.into_response())
                }
            }),
        );
        let outcome = client(&serve(router).await).check("orders", t("1:1")).await;
        assert!(
            matches!(outcome, Outcome::Undecided(_)),
            "{what}: {outcome:?}"
        );
        assert!(!outcome.is_authoritative(), "{what}");
    }
}

#[tokio::test]
async fn unreachable_slow_and_invalid_are_not_a_yes() {
    // Nothing listens on the port of a dropped listener.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a port")
        .local_addr()
        .expect("an address")
        .port();
    let outcome = client(&format!("http://127.0.0.1:{port}"))
        .check("orders", t("1:1"))
        .await;
    assert!(
        matches!(&outcome, Outcome::Undecided(Undecided::Transport(why)) if why.contains("onnect")),
        "{outcome:?}"
    );

    let router = Router::new().route(
        "/roles/{role}/authority",
        get(|| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            StatusCode::OK
        }),
    );
    let url = serve(router).await;
    let started = Instant::now();
    let outcome = client(&url)
        .check_within("orders", t("1:1"), Duration::from_millis(300))
        .await;
    assert!(
        matches!(outcome, Outcome::Undecided(Undecided::Timeout(_))),
        "{outcome:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));

    let router = Router::new().route(
        "/roles/{role}/authority",
        get(|| async {
            reply(
                400,
                json!({"type": "urn:krabka-authority:problem:invalid-role",
                "title": "Invalid role", "status": 400, "detail": "bad", "field": "role"}),
            )
        }),
    );
    let outcome = client(&serve(router).await).check("orders", t("1:1")).await;
    assert!(
        matches!(&outcome, Outcome::Invalid(p) if p.field.as_deref() == Some("role")),
        "{outcome:?}"
    );
    // Refused before asking: nothing listens there.
    let local = client(&format!("http://127.0.0.1:{port}"));
    let long = "r".repeat(32_768);
    for (role, token) in [
        ("", t("1:1")),
        (long.as_str(), t("1:1")),
        ("orders", FencingToken::NO_EPOCH),
    ] {
        assert!(matches!(
            local.check(role, token).await,
            Outcome::Invalid(_)
        ));
    }
}

#[tokio::test]
async fn requests_carry_the_bearer_and_an_encoded_role_under_the_base_path() {
    let router = Router::new().route(
        "/prefix/roles/{role}/authority",
        get(|Path(role): Path<String>, Query(q): Query<TokenQuery>, headers: HeaderMap| async move {
            let bearer = headers.get("authorization").and_then(|v| v.to_str().ok());
            if bearer != Some("Bearer s3cret") {
                return reply(401, json!({"type": "x", "title": "Unauthorized", "status": 401, "detail": "no"}));
            }
            reply(200, answer(&role, &q.token, "authoritative", Some(&q.token)))
        }),
    );
    let url = serve(router).await;
    let client = AuthorityClient::builder(format!("{url}/prefix/"))
        .bearer_token("s3cret")
        .build()
        .expect("a client");
    let role = "team/orders ü?#";
    let outcome = client.check(role, t("7:3")).await;
    assert!(outcome.is_authoritative(), "{outcome:?}");
    assert_eq!(outcome.decision().map(|d| d.role.as_str()), Some(role));
    assert!(
        !format!("{client:?}").contains("s3cret"),
        "the token is redacted"
    );

    let anonymous = AuthorityClient::new(format!("{url}/prefix")).expect("a client");
    let outcome = anonymous.check(role, t("7:3")).await;
    assert!(matches!(
        outcome,
        Outcome::Undecided(Undecided::Status { status: 401, .. })
    ));

    assert_eq!(
        AuthorityClient::new("https://x").is_ok(),
        cfg!(feature = "tls"),
        "https needs the tls feature"
    );
    for bad in ["ftp://x", "not a url", "http://x/?q=1", "http://u:p@x"] {
        assert!(AuthorityClient::new(bad).is_err(), "{bad}");
    }
}

/// A fake batch check: per item as [`fake_service`]; role `bad` answers a
/// 400 item, role `busy` a 503 item.
fn fake_batch(items_seen: Arc<AtomicUsize>) -> Router {
    Router::new().route(
        "/authority/check",
        post(move |axum::Json(items): axum::Json<Vec<Value>>| {
            let seen = items_seen.clone();
            async move {
                seen.fetch_add(items.len(), Ordering::SeqCst);
                let results: Vec<Value> = items
                    .iter()
                    .map(|item| {
                        let role = item["role"].as_str().unwrap_or_default();
                        let token = item["token"].as_str().unwrap_or_default();
                        let problem = |status: u16, detail: &str| {
                            json!({"status": status, "role": role, "token": token,
                                "problem": {"type": "x", "title": "x", "status": status, "detail": detail}})
                        };
                        let mut verdict = match (role, token) {
                            ("bad", _) => return problem(400, "bad role"),
                            ("busy", _) => return problem(503, "coordinator timed out"),
                            (_, "1:1") => answer(role, token, "authoritative", Some("1:1")),
                            (_, "1:0") => answer(role, token, "superseded", Some("1:1")),
                            _ => answer(role, token, "vacant", None),
                        };
                        verdict["status"] = json!(if token == "1:1" { 200 } else { 409 });
                        verdict
                    })
                    .collect();
                reply(200, json!({ "results": results }))
            }
        }),
    )
}

#[tokio::test]
async fn a_batch_answers_each_item_and_remembers_superseded_ones() {
    let seen = Arc::new(AtomicUsize::new(0));
    let client = AuthorityClient::builder(serve(fake_batch(seen.clone())).await)
        .default_retry_after(Duration::from_millis(300))
        .build()
        .expect("a client");
    let items = [
        ("orders", t("1:1")),
        ("orders", t("1:0")),
        ("bad", t("1:1")),
        ("orders", t("9:9")),
        ("busy", t("1:1")),
        ("", t("1:1")),
    ];
    let started = Instant::now();
    let outcomes = client
        .check_batch_within(&items, Duration::from_millis(800))
        .await;
    assert_eq!(outcomes.len(), items.len());
    assert!(outcomes[0].is_authoritative(), "{:?}", outcomes[0]);
    assert_eq!(outcomes[1].verdict(), Some(Verdict::Superseded));
    assert!(matches!(&outcomes[2], Outcome::Invalid(p) if p.detail == "bad role"));
    assert_eq!(outcomes[3].verdict(), Some(Verdict::Vacant));
    // The 503 item was asked at 0, 300 and 600 ms; a wait to 900 ms would
    // pass the deadline.
    assert!(
        matches!(
            &outcomes[4],
            Outcome::Undecided(Undecided::Unavailable { attempts: 3, .. })
        ),
        "{:?}",
        outcomes[4]
    );
    assert!(
        matches!(&outcomes[5], Outcome::Invalid(_)),
        "empty role: refused locally"
    );
    assert_eq!(seen.load(Ordering::SeqCst), 5 + 1 + 1);
    assert!(started.elapsed() < Duration::from_secs(1));

    let again = client.check_batch(&items[..2]).await;
    assert!(again[0].is_authoritative());
    assert!(again[1].decision().is_some_and(|d| d.remembered));
    assert_eq!(
        seen.load(Ordering::SeqCst),
        8,
        "only the yes was asked again"
    );
}

#[tokio::test]
async fn large_batches_are_split_and_the_memory_stays_within_its_bound() {
    let seen = Arc::new(AtomicUsize::new(0));
    let bound = 64 * 1024;
    let client = AuthorityClient::builder(serve(fake_batch(seen.clone())).await)
        .max_batch_items(400)
        .superseded_memory(bound)
        .build()
        .expect("a client");
    // 3,000 superseded tokens of distinct roles: far more than the bound holds.
    let roles: Vec<String> = (0..3_000).map(|i| format!("role-{i:05}")).collect();
    let items: Vec<(&str, FencingToken)> = roles.iter().map(|r| (r.as_str(), t("1:0"))).collect();
    let outcomes = client.check_batch(&items).await;
    assert!(
        outcomes
            .iter()
            .all(|o| o.verdict() == Some(Verdict::Superseded))
    );
    assert_eq!(seen.load(Ordering::SeqCst), 3_000);
    let (entries, weight) = client.superseded_memory_usage();
    eprintln!("superseded memory: {entries} entries weighing {weight} of {bound} bytes");
    assert!(weight <= bound, "{weight} > {bound}");
    assert!(entries > 100 && entries < 3_000, "{entries}");
}

// The guard.

async fn written(Extension(decision): Extension<Decision>) -> String {
    format!("stored under {}", decision.token)
}

fn guarded(url: &str, layer: impl FnOnce(AuthorityGuardLayer) -> AuthorityGuardLayer) -> Router {
    let client = AuthorityClient::builder(url)
        .deadline(Duration::from_millis(1_500))
        .build()
        .expect("a client");
    Router::new()
        .route("/write", post(written))
        .route_layer(layer(AuthorityGuardLayer::new(client)))
}

fn write(role: Option<&str>, token: Option<&str>) -> Request<Body> {
    let mut request = Request::post("/write");
    if let Some(role) = role {
        request = request.header("Krabka-Role", role);
    }
    if let Some(token) = token {
        request = request.header("Krabka-Token", token);
    }
    request.body(Body::from("data")).expect("a request")
}

async fn send(app: &Router, request: Request<Body>) -> (StatusCode, HeaderMap, Value) {
    let response = app.clone().oneshot(request).await.expect("infallible");
    let (parts, body) = response.into_parts();
    let bytes = to_bytes(body, 1 << 20).await.expect("a body");
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (parts.status, parts.headers, body)
}

#[tokio::test]
async fn the_guard_admits_only_an_authoritative_writer() {
    let hits = Arc::new(AtomicUsize::new(0));
    let app = guarded(&serve(fake_service(hits.clone())).await, |l| l);

    for n in 1..=2 {
        let (status, _, body) = send(&app, write(Some("orders"), Some("1:1"))).await;
        assert_eq!((status, body), (StatusCode::OK, json!("stored under 1:1")));
        assert_eq!(hits.load(Ordering::SeqCst), n, "each write asks");
    }

    let (status, headers, body) = send(&app, write(Some("orders"), Some("1:0"))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(headers["cache-control"], "no-store");
    assert_eq!(body["verdict"], "superseded");
    assert_eq!(body["current"], "1:1");
    assert_eq!(body["token"], "1:0");
    assert_eq!(body["remembered"], false);
    let (status, _, body) = send(&app, write(Some("orders"), Some("1:0"))).await;
    assert_eq!(
        (status, &body["remembered"]),
        (StatusCode::CONFLICT, &json!(true))
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        3,
        "a deposed writer is refused from memory"
    );

    let (status, _, body) = send(&app, write(Some("orders"), Some("4:4"))).await;
    assert_eq!(
        (status, &body["verdict"]),
        (StatusCode::CONFLICT, &json!("vacant"))
    );
    assert!(body["current"].is_null());
}

#[tokio::test]
async fn the_guard_answers_503_with_retry_after_when_undecided() {
    let router = Router::new().route(
        "/roles/{role}/authority",
        get(|| async { unavailable("7") }),
    );
    let app = guarded(&serve(router).await, |l| l);
    let (status, headers, body) = send(&app, write(Some("orders"), Some("1:1"))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(headers["retry-after"], "7", "the service's wait");
    assert_eq!(body["status"], 503);
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("timed out")),
        "{body}"
    );

    // Garbage, and a service that is not there: 503, the guard's own wait.
    let router = Router::new().route("/roles/{role}/authority", get(|| async { "ok" }));
    let app = guarded(&serve(router).await, |l| {
        l.with_retry_after(Duration::from_millis(1_500))
    });
    let (status, headers, _) = send(&app, write(Some("orders"), Some("1:1"))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["retry-after"], "2");
    let app = guarded("http://127.0.0.1:9", |l| l);
    let (status, headers, _) = send(&app, write(Some("orders"), Some("1:1"))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["retry-after"], "1");
}

#[tokio::test]
async fn the_guard_refuses_missing_or_malformed_credentials_with_400() {
    let hits = Arc::new(AtomicUsize::new(0));
    let url = serve(fake_service(hits.clone())).await;
    let app = guarded(&url, |l| l);
    let cases = [
        (Some("orders"), None, "Krabka-Token"),
        (Some("orders"), Some("1:-1"), "Krabka-Token"),
        (Some("orders"), Some("nope"), "Krabka-Token"),
        (Some("orders"), Some("1:1:1"), "Krabka-Token"),
        (None, Some("1:1"), "Krabka-Role"),
        (Some(""), Some("1:1"), "Krabka-Role"),
    ];
    for (role, token, field) in cases {
        let (status, headers, body) = send(&app, write(role, token)).await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "{role:?} {token:?}: {body}"
        );
        assert_eq!(body["field"], field, "{body}");
        assert_eq!(headers["content-type"], "application/problem+json");
    }
    let mut twice = write(Some("orders"), Some("1:1"));
    twice
        .headers_mut()
        .append("krabka-token", "1:0".parse().expect("a value"));
    let (status, _, _) = send(&app, twice).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing was asked");

    // A fixed role: the header may be left out, and must not disagree.
    let fixed = guarded(&url, |l| l.with_role("orders"));
    let (status, _, _) = send(&fixed, write(None, Some("1:1"))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = send(&fixed, write(Some("orders"), Some("1:1"))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, body) = send(&fixed, write(Some("billing"), Some("1:1"))).await;
    assert_eq!(
        (status, &body["field"]),
        (StatusCode::BAD_REQUEST, &json!("Krabka-Role"))
    );
}

/// Serves `router` over TLS with a fresh self-signed certificate for
/// `localhost`; returns its base URL and the certificate's PEM.
#[cfg(feature = "tls")]
async fn serve_tls(router: Router) -> (String, String) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::service::TowerToHyperService;

    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("a cert");
    let pem = cert.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der())
        .expect("a key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .expect("a server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let port = listener.local_addr().expect("an address").port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, router) = (acceptor.clone(), router.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else {
                    return;
                };
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(router))
                    .await;
            });
        }
    });
    (format!("https://localhost:{port}"), pem)
}

#[cfg(feature = "tls")]
#[tokio::test]
async fn an_https_service_is_checked_when_its_ca_is_trusted_and_undecided_otherwise() {
    let hits = Arc::new(AtomicUsize::new(0));
    let (url, ca) = serve_tls(fake_service(hits.clone())).await;
    let trusting = AuthorityClient::builder(&url)
        .ca_certificates_pem(ca.as_bytes())
        .expect("a PEM")
        .deadline(Duration::from_secs(3))
        .build()
        .expect("a client");
    let outcome = trusting.check("orders", t("1:1")).await;
    assert!(outcome.is_authoritative(), "{outcome}");

    let untrusting = client(&url);
    let outcome = untrusting.check("orders", t("1:1")).await;
    assert!(
        matches!(outcome, Outcome::Undecided(Undecided::Transport(_))),
        "an untrusted certificate is undecided, never a yes: {outcome}"
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "only the trusting client got through"
    );

    assert!(matches!(
        AuthorityClient::builder(&url).ca_certificates_pem(b"not a pem"),
        Err(ClientError::CaCertificate(_))
    ));
}
