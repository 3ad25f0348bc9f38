//! The watcher's metrics, statuses and event streams, with the leadership
//! client driving real failovers on the real broker.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use krabka_authority::coordination::{Key, encode_key, role_partition};
use krabka_authority::leadership::acquire;
use krabka_authority::transport::{Coordinator, Registrar};
use serde_json::Value;
use tokio::time::Instant;

use crate::support::broker::{bootstrap, client, topic, transport};
use crate::support::leadership::{fast_options, holds};
use crate::support::service::{
    Service, config, get, members, metric, ready, start, watcher_config,
};
use crate::support::{eventually, unique};

async fn view(service: &Service, role: &str) -> Value {
    get(&format!("{}/roles/{role}", service.url)).await.1
}

#[tokio::test]
async fn n_forced_failovers_count_n_and_renewals_count_nothing() {
    let topic = topic(3).await;
    let service = start(watcher_config(&topic)).await;
    ready(&service).await;
    let role = unique("failovers");
    let mut holder = holds(&topic, &role, "m0").await;
    eventually(|| async { (view(&service, &role).await["lease"]["member"] == "m0").then_some(()) })
        .await;
    // Renewals only: two lease durations.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        metric(&service, "krabka_role_failovers_total", &[("role", &role)]).await,
        0.0
    );

    const N: usize = 4;
    for i in 1..=N {
        let next = format!("m{}", i % 2);
        let t = Arc::new(transport(&topic).await);
        let (r, n) = (role.clone(), next.clone());
        let standby = tokio::spawn(async move { acquire(t, &r, &n, fast_options()).await });
        eventually(|| async {
            let v = view(&service, &role).await;
            let members = v["members"].as_array().map_or(0, Vec::len);
            (members == 2).then_some(())
        })
        .await;
        holder.resign().await.unwrap();
        holder = tokio::time::timeout(Duration::from_secs(10), standby)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(holder.member(), next);
        tokio::time::sleep(Duration::from_millis(1200)).await; // a couple of renewals
    }
    let counted = eventually(|| async {
        let n = metric(&service, "krabka_role_failovers_total", &[("role", &role)]).await;
        (n >= N as f64 && view(&service, &role).await["lease"]["member"] == holder.member())
            .then_some(n)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let counted_later = metric(&service, "krabka_role_failovers_total", &[("role", &role)]).await;
    eprintln!("failovers counted: {counted} (then {counted_later}) for {N} forced failovers");
    assert_eq!(
        counted_later, N as f64,
        "exactly one per failover, none for renewals"
    );
    assert_eq!(
        metric(
            &service,
            "krabka_role_holder_info",
            &[("role", &role), ("member", holder.member())]
        )
        .await,
        1.0
    );
    let v = view(&service, &role).await;
    assert_eq!(v["failoversInWindow"], N);
    assert_eq!(v["status"], "flapping", "{v}");
    assert!(metric(&service, "krabka_role_leaderless_seconds_count", &[]).await >= N as f64);
}

#[tokio::test]
async fn a_challenger_that_mints_without_writing_is_an_epoch_change() {
    let topic = topic(3).await;
    let service = start(watcher_config(&topic)).await;
    ready(&service).await;
    let role = unique("epoch");
    let holder = holds(&topic, &role, "a").await;
    let token = holder.token();
    eventually(|| async {
        let id = metric(&service, "krabka_role_producer_epoch", &[("role", &role)]).await;
        (id == f64::from(token.producer_epoch())).then_some(())
    })
    .await;
    assert_eq!(
        metric(
            &service,
            "krabka_role_epoch_changes_total",
            &[("role", &role)]
        )
        .await,
        0.0
    );

    let challenger = transport(&topic).await;
    let minted = challenger
        .acquire_epoch(&role, Duration::from_secs(2))
        .await
        .unwrap();
    let changes = eventually(|| async {
        let n = metric(
            &service,
            "krabka_role_epoch_changes_total",
            &[("role", &role)],
        )
        .await;
        (n >= 1.0).then_some(n)
    })
    .await;
    assert_eq!(changes, 1.0);
    assert_eq!(
        metric(&service, "krabka_role_producer_epoch", &[("role", &role)]).await,
        f64::from(minted.producer_epoch())
    );
    assert_eq!(
        metric(&service, "krabka_role_failovers_total", &[("role", &role)]).await,
        0.0
    );
    let v = view(&service, &role).await;
    assert_eq!(v["coordinator"]["current"], minted.to_string());
    // The old holder learns it at its next renewal.
    tokio::time::timeout(Duration::from_secs(5), holder.done())
        .await
        .unwrap();
    assert!(holder.err().unwrap().is_fenced());
}

#[tokio::test]
async fn status_goes_stable_stuck_stable_across_a_silent_holder_and_a_late_standby() {
    let topic = topic(3).await;
    let service = start(watcher_config(&topic)).await;
    ready(&service).await;
    let role = unique("stuck");
    let holder = holds(&topic, &role, "a").await;
    // b registers but does not run yet: nobody will take over.
    transport(&topic)
        .await
        .register(&role, "b", 0)
        .await
        .unwrap();
    let status = || async {
        view(&service, &role).await["status"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    eventually(|| async { (status().await == "stable").then_some(()) }).await;

    drop(holder);
    let stopped = Instant::now();
    eventually(|| async { (status().await == "stuck").then_some(()) }).await;
    eprintln!(
        "stuck after {:?} (lease 2 s + one stagger of 0.5 s)",
        stopped.elapsed()
    );
    assert!(stopped.elapsed() >= Duration::from_millis(2000));
    // The series follow at the next coordinator poll.
    eventually(|| async {
        let stuck = metric(
            &service,
            "krabka_role_status",
            &[("role", &role), ("status", "stuck")],
        )
        .await;
        let expired = metric(&service, "krabka_role_lease_expired", &[("role", &role)]).await;
        (stuck == 1.0 && expired == 1.0).then_some(())
    })
    .await;

    let b = holds(&topic, &role, "b").await;
    eventually(|| async { (status().await == "stable").then_some(()) }).await;
    eventually(|| async {
        let stable = metric(
            &service,
            "krabka_role_status",
            &[("role", &role), ("status", "stable")],
        )
        .await;
        // 0 also means the stuck series is gone.
        let stuck = metric(
            &service,
            "krabka_role_status",
            &[("role", &role), ("status", "stuck")],
        )
        .await;
        (stable == 1.0 && stuck == 0.0).then_some(())
    })
    .await;
    drop(b);
}

/// A minimal Server-Sent Events reader over a streaming response.
struct Sse {
    response: reqwest::Response,
    buffer: String,
}

#[derive(Debug, Clone)]
struct SseEvent {
    /// `<offset>@<cluster id>`.
    id: Option<String>,
    event: String,
    data: Value,
}

impl SseEvent {
    /// The offset its id names.
    fn offset(&self) -> Option<i64> {
        self.id.as_deref()?.split('@').next()?.parse().ok()
    }
}

impl Sse {
    async fn open(url: &str, last_event_id: Option<&str>) -> Sse {
        let mut request = reqwest::Client::new().get(url);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Sse {
            response,
            buffer: String::new(),
        }
    }

    /// A new stream and its first event, a `snapshot`.
    async fn snapshot(url: &str) -> (Sse, SseEvent) {
        let mut stream = Sse::open(url, None).await;
        let first = stream
            .next(Duration::from_secs(5))
            .await
            .expect("a snapshot");
        assert_eq!(first.event, "snapshot", "{first:?}");
        (stream, first)
    }

    async fn next(&mut self, within: Duration) -> Option<SseEvent> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = SseEvent {
                    id: None,
                    event: "message".into(),
                    data: Value::Null,
                };
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        event.id = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event.event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() && event.id.is_none() {
                    continue; // a keep-alive comment
                }
                event.data = serde_json::from_str(&data).unwrap_or(Value::String(data));
                return Some(event);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let chunk = tokio::time::timeout(left, self.response.chunk())
                .await
                .ok()?
                .ok()??;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

#[tokio::test]
async fn a_resumed_event_stream_delivers_every_change_in_between() {
    let topic = topic(3).await;
    let service = start(watcher_config(&topic)).await;
    ready(&service).await;
    let role = unique("events");
    let url = format!("{}/roles/{role}/events", service.url);
    let registrar = transport(&topic).await;

    let (mut stream, _) = Sse::snapshot(&url).await;
    registrar.register(&role, "x", 1).await.unwrap();
    let first = stream.next(Duration::from_secs(5)).await.expect("an event");
    assert_eq!(first.event, "registered");
    assert_eq!(first.data["member"], "x");
    let last_id = first.id.clone().expect("an id");
    assert!(
        last_id.contains('@'),
        "an offset of a named cluster: {last_id}"
    );
    let last_seen = first.offset().expect("an offset");
    drop(stream); // the client disconnects

    // Changes while disconnected: registrations, a holder, renewals.
    let mut offsets = Vec::new();
    for m in ["y", "z"] {
        offsets.push(registrar.register(&role, m, 2).await.unwrap());
    }
    let holder = holds(&topic, &role, "y").await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    drop(holder);

    let mut resumed = Sse::open(&url, Some(&last_id)).await;
    let mut got = Vec::new();
    while let Some(e) = resumed.next(Duration::from_secs(2)).await {
        assert_ne!(e.event, "reset", "the history covers the gap: {e:?}");
        got.push(e);
    }
    // Every record of the role after the last id seen, as the topic has it.
    let partition = role_partition(&role, 3).unwrap();
    let read = client()
        .reader()
        .read_committed(&topic, partition, last_seen + 1)
        .await
        .unwrap();
    let want: Vec<i64> = read
        .records
        .iter()
        .filter(|r| {
            krabka_authority::coordination::decode_key(&r.key).is_ok_and(|k| k.role == role)
        })
        .map(|r| r.offset)
        .collect();
    let ids: Vec<i64> = got.iter().filter_map(SseEvent::offset).collect();
    eprintln!(
        "resumed after {last_seen}: {} events {:?}",
        ids.len(),
        got.iter().map(|e| e.event.as_str()).collect::<Vec<_>>()
    );
    assert_eq!(
        &ids[..want.len().min(ids.len())],
        &want[..],
        "every change, in order, none twice"
    );
    assert!(ids.len() >= want.len());
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert!(
        got.iter()
            .any(|e| e.event == "acquired" && e.data["member"] == "y")
    );
    assert!(got.iter().any(|e| e.event == "renewed"));
    assert!(offsets.iter().all(|o| ids.contains(o)));

    // A service that started watching after those changes has no history
    // of them: resuming there from the old id gets a reset (the whole
    // current roster) instead of a silent gap.
    let late = start(watcher_config(&topic)).await;
    ready(&late).await;
    let mut old = Sse::open(&format!("{}/roles/{role}/events", late.url), Some(&last_id)).await;
    let e = old.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(e.event, "reset");
    assert_eq!(e.data["role"], role);
    assert_eq!(e.data["members"].as_array().map(Vec::len), Some(3));
}

/// A role whose records all went (registered, then deregistered) before
/// the service started has no roster; its stream's `snapshot` still names
/// the offset it holds as of, so the next change follows it, and resuming
/// from it gets that change, not a `reset` (the simulation's seed 12396:
/// the id was missing, and the stream could not say which changes it held).
#[tokio::test]
async fn a_snapshot_of_a_role_with_no_record_left_is_resumable() {
    let topic = topic(1).await;
    let role = unique("gone");
    let registrar = transport(&topic).await;
    registrar.register(&role, "x", 1).await.unwrap();
    let removed = registrar.deregister(&role, "x").await.unwrap();
    let service = start(watcher_config(&topic)).await;
    ready(&service).await;
    let url = format!("{}/roles/{role}/events", service.url);
    let (mut stream, snapshot) = Sse::snapshot(&url).await;
    assert_eq!(snapshot.data["roster"], Value::Null, "{snapshot:?}");
    let id = snapshot.id.clone().expect("an id: the offset read to");
    assert!(id.contains('@'), "{id}");
    let at = snapshot.offset().unwrap();
    assert!(at >= removed, "{id} holds the removal at {removed}");
    let added = registrar.register(&role, "y", 2).await.unwrap();
    let next = stream
        .next(Duration::from_secs(5))
        .await
        .expect("the change");
    assert_eq!(
        (next.event.as_str(), next.offset()),
        ("registered", Some(added))
    );
    let mut resumed = Sse::open(&url, Some(&id)).await;
    let first = resumed
        .next(Duration::from_secs(5))
        .await
        .expect("an event");
    assert_eq!(
        (first.event.as_str(), first.offset()),
        ("registered", Some(added)),
        "{first:?}"
    );
}

#[tokio::test]
async fn malformed_records_are_counted_and_skipped_and_good_ones_still_served() {
    let topic = topic(1).await;
    let service = start(watcher_config(&topic)).await;
    ready(&service).await;
    let role = unique("bad-data");
    let registrar = transport(&topic).await;
    registrar.register(&role, "good-1", 1).await.unwrap();
    let before = metric(
        &service,
        "krabka_state_malformed_records_total",
        &[("part", "key")],
    )
    .await;
    let kafka = client();
    kafka
        .producer()
        .append(
            &topic,
            0,
            Bytes::from_static(b"\x00\x07garbage"),
            Some(Bytes::from_static(b"x")),
            0,
        )
        .await
        .unwrap();
    let key = Bytes::from(encode_key(&Key::lease(&role)).unwrap());
    kafka
        .producer()
        .append(&topic, 0, key, Some(Bytes::from_static(b"\x00\x00\x00")), 0)
        .await
        .unwrap();
    registrar.register(&role, "good-2", 2).await.unwrap();
    let v = eventually(|| async {
        let v = view(&service, &role).await;
        (v["members"].as_array().map_or(0, Vec::len) == 2).then_some(v)
    })
    .await;
    assert_eq!(v["members"][1]["member"], "good-2");
    assert!(v["lease"].is_null(), "the malformed lease is skipped");
    assert_eq!(
        metric(
            &service,
            "krabka_state_malformed_records_total",
            &[("part", "key")]
        )
        .await,
        before + 1.0
    );
    assert!(
        metric(
            &service,
            "krabka_state_malformed_records_total",
            &[("part", "lease_value")]
        )
        .await
            >= 1.0
    );
}

#[tokio::test]
async fn random_garbage_in_the_topic_is_counted_by_part_and_skipped() {
    use krabka_authority::coordination::{
        KeyKind, Lease, Registration, decode_key, decode_lease, decode_registration, encode_lease,
        encode_registration,
    };
    use rand::{RngExt, SeedableRng};

    let topic = topic(2).await;
    let service = start(watcher_config(&topic)).await;
    ready(&service).await;
    let role = unique("garbage");
    let partition = role_partition(&role, 2).unwrap();
    let kafka = client();
    let parts = ["key", "registration_value", "lease_value"];
    let mut before = Vec::new();
    for part in parts {
        before.push(
            metric(
                &service,
                "krabka_state_malformed_records_total",
                &[("part", part)],
            )
            .await,
        );
    }

    let mut rng = rand::rngs::StdRng::seed_from_u64(20261130);
    let reg_key = Bytes::from(encode_key(&Key::registration(&role, "good")).unwrap());
    let lease_key = Bytes::from(encode_key(&Key::lease(&role)).unwrap());
    let good_lease = encode_lease(&Lease {
        member: "x".into(),
        token: krabka_authority::coordination::FencingToken::new(1, 1).unwrap(),
        granted_at: 0,
        deadline: 1,
    })
    .unwrap();
    let mut expected = [0u64; 3];
    let mut good = Vec::new();
    for i in 0..120 {
        let (key, value): (Bytes, Option<Bytes>) = match i % 8 {
            0 => {
                let n = rng.random_range(0..40);
                (
                    Bytes::from((0..n).map(|_| rng.random()).collect::<Vec<u8>>()),
                    Some(Bytes::from_static(b"v")),
                )
            }
            1 => {
                let mut k = encode_key(&Key::registration(&role, "m")).unwrap();
                k[1] = 1; // unknown version
                (k.into(), Some(Bytes::from_static(b"v")))
            }
            2 => {
                let k = encode_key(&Key::registration(&role, "m")).unwrap();
                let cut = rng.random_range(0..k.len());
                (
                    Bytes::copy_from_slice(&k[..cut]),
                    Some(Bytes::from_static(b"v")),
                )
            }
            3 => {
                let mut k = encode_key(&Key::lease(&role)).unwrap();
                k[3] = 7; // unknown kind
                (k.into(), None)
            }
            4 => {
                let n = rng.random_range(1..30);
                (
                    reg_key.clone(),
                    Some(Bytes::from(
                        (0..n).map(|_| rng.random()).collect::<Vec<u8>>(),
                    )),
                )
            }
            5 => {
                let mut v = good_lease.clone();
                v[1] = 3; // unknown version
                (lease_key.clone(), Some(v.into()))
            }
            6 => {
                let cut = rng.random_range(1..good_lease.len());
                (
                    lease_key.clone(),
                    Some(Bytes::copy_from_slice(&good_lease[..cut])),
                )
            }
            _ => {
                // A good registration between the garbage.
                let member = format!("good-{i}");
                let key = Bytes::from(encode_key(&Key::registration(&role, &member)).unwrap());
                let value = encode_registration(&Registration {
                    member: member.clone(),
                    registered_at: i,
                })
                .unwrap();
                good.push(member);
                (key, Some(value.into()))
            }
        };
        // What the strict decoders say of it: the oracle for the counters.
        match decode_key(&key) {
            Err(_) => expected[0] += 1,
            Ok(k) if k.role != role => panic!("garbage made a valid key of another role"),
            Ok(k) => match (k.kind, value.as_deref().filter(|v| !v.is_empty())) {
                (KeyKind::Registration, Some(v)) => match decode_registration(v) {
                    Ok(r) if r.member == k.member => {}
                    _ => expected[1] += 1,
                },
                (KeyKind::Lease, Some(v)) if decode_lease(v).is_err() => expected[2] += 1,
                _ => {}
            },
        }
        kafka
            .producer()
            .append(&topic, partition, key, value, 0)
            .await
            .unwrap();
    }
    let view = eventually(|| async {
        let v = view(&service, &role).await;
        (v["members"].as_array().map_or(0, Vec::len) == good.len()).then_some(v)
    })
    .await;
    let shown: Vec<&str> = view["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["member"].as_str().unwrap())
        .collect();
    assert_eq!(shown, good.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(view["lease"].is_null());
    for (i, part) in parts.iter().enumerate() {
        let counted = metric(
            &service,
            "krabka_state_malformed_records_total",
            &[("part", part)],
        )
        .await
            - before[i];
        assert_eq!(counted, expected[i] as f64, "{part}");
    }
    eprintln!(
        "garbage counted by part (key, registration value, lease value): {expected:?}; {} good members served",
        good.len()
    );
    for path in ["/", "/roles", "/metrics", "/readyz"] {
        assert_eq!(
            get(&format!("{}{path}", service.url)).await.0,
            200,
            "{path}"
        );
    }
}

/// A partition nothing is written to is read by long polls of half the
/// roster TTL: its view is never much more than one TTL old (with waits of
/// a whole TTL it grew two TTLs old before each read landed).
#[tokio::test]
async fn a_quiet_partitions_view_is_at_most_one_roster_ttl_old() {
    let topic = topic(3).await;
    let config = config(&bootstrap(), &topic);
    let ttl = config.watch.roster_ttl;
    let service = start(config).await;
    ready(&service).await;
    let role = unique("quiet");
    transport(&topic)
        .await
        .register(&role, "m0", 1)
        .await
        .unwrap();
    eventually(|| async {
        (view(&service, &role).await["members"][0]["member"] == "m0").then_some(())
    })
    .await;
    let mut oldest = 0;
    let until = Instant::now() + ttl * 8;
    while Instant::now() < until {
        oldest = oldest.max(
            view(&service, &role).await["view"]["ageMs"]
                .as_u64()
                .unwrap(),
        );
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    let ttl = ttl.as_millis() as u64;
    assert!(
        oldest <= ttl + 250,
        "a view {oldest} ms old, roster TTL {ttl} ms"
    );
    assert!(
        oldest >= ttl / 4,
        "the view ages between reads: {oldest} ms"
    );
}

/// A transaction left open on a partition (another producer's, its timeout
/// far off) holds the partition's last stable offset back: what is written
/// after it stays unread, and its roles' views age from the moment it began
/// instead of claiming each read's freshness. Once it commits, the view is
/// fresh again and holds what waited behind it.
#[tokio::test]
async fn a_transaction_left_open_ages_the_view_from_when_it_began() {
    let topic = topic(1).await;
    let service = start(watcher_config(&topic)).await;
    ready(&service).await;
    let role = unique("held-back");
    let t = transport(&topic).await;
    t.register(&role, "before", 1).await.unwrap();
    eventually(|| async { (members(&view(&service, &role).await) == ["before"]).then_some(()) })
        .await;

    let kafka = client();
    let writer = unique("open-txn");
    let mut session = kafka
        .producer()
        .init_producer_id(&writer, Duration::from_secs(60))
        .await
        .unwrap();
    let key = Bytes::from(encode_key(&Key::lease(&writer)).unwrap());
    let mut txn = kafka.producer().begin(&mut session).unwrap();
    let opened = Instant::now();
    txn.send(&topic, 0, key, Some(Bytes::from_static(b"{}")), 1)
        .await
        .unwrap();
    t.register(&role, "after", 2).await.unwrap();
    // Reads keep reaching the last stable offset; the view must not say so.
    let mut youngest_late = u64::MAX;
    while opened.elapsed() < Duration::from_secs(4) {
        let v = view(&service, &role).await;
        let held = opened.elapsed();
        assert_eq!(members(&v), ["before"], "read past the open transaction");
        if held > Duration::from_secs(1) {
            let age = v["view"]["ageMs"].as_u64().unwrap();
            // The view was complete at best when the transaction began.
            assert!(
                age + 100 >= held.as_millis() as u64,
                "a view claiming {age} ms, {held:?} after the transaction began"
            );
            youngest_late = youngest_late.min(age);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    txn.commit().await.unwrap();
    let committed = Instant::now();
    let fresh = eventually(|| async {
        let v = view(&service, &role).await;
        (members(&v) == ["before", "after"]).then_some(v)
    })
    .await;
    let age = fresh["view"]["ageMs"].as_u64().unwrap();
    eprintln!(
        "views 1-4 s into the open transaction at least {youngest_late} ms old; fresh again {:?} after the commit, {age} ms old",
        committed.elapsed()
    );
    assert!(age < 1_000, "a view {age} ms old after the commit");
}
