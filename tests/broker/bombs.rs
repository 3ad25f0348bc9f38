//! Decompression bombs in the coordination topic: every member of every
//! role may write to it, and every replica reads it from its start. A batch
//! of each codec Kafka offers, written while the service runs and before it
//! starts: the service (a `serve` process) stays up and under the chart's
//! memory limit, skips them, says so and shows them, and every other record,
//! role, view and check answers as before.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::records::Compression;
use krabka_authority::transport::Registrar;
use krabka_kafka::fake::{bomb_batch, produce_raw};
use serde_json::Value;
use tokio::time::Instant;

use crate::support::broker::{client, role_in, topic, transport};
use crate::support::leadership::holds;
use crate::support::process::{Served, memory_kib};
use crate::support::service::members;

/// The chart's `resources.limits.memory` (helm/krabka-authority/values.yaml).
const CHART_LIMIT_MIB: u64 = 256;

/// One record of zeros per codec, as large as fits the topic's default
/// `max.message.bytes` (1 MiB compressed; zeros compress about 32,000 to 1
/// with zstd, 1,000 with gzip, 240 with LZ4 and 21 with snappy): the
/// codec, the zeros, the batch (made once: about 20 s in a debug build).
fn bombs() -> &'static [(Compression, u64, Bytes)] {
    static BOMBS: OnceLock<Vec<(Compression, u64, Bytes)>> = OnceLock::new();
    BOMBS.get_or_init(|| {
        [
            (Compression::Zstd, 768u64 << 20),
            (Compression::Gzip, 768 << 20),
            (Compression::Lz4, 224 << 20),
            (Compression::Snappy, 20 << 20),
        ]
        .into_iter()
        .map(|(codec, zeros)| (codec, zeros, bomb_batch(codec, b"bomb", zeros)))
        .collect()
    })
}

/// Writes every bomb to `partition` of `topic`; their offsets.
async fn write_bombs(topic: &str, partition: i32) -> Vec<i64> {
    let batches = tokio::task::spawn_blocking(bombs).await.unwrap();
    let kafka = client();
    let mut offsets = Vec::new();
    for (codec, zeros, batch) in batches {
        let offset = produce_raw(&kafka, topic, partition, batch.clone())
            .await
            .unwrap_or_else(|e| panic!("{codec:?} bomb refused: {e}"));
        eprintln!(
            "{codec:?}: {} MiB of zeros in {} bytes, at offset {offset}",
            zeros >> 20,
            batch.len()
        );
        offsets.push(offset);
    }
    offsets
}

/// Asserts `view` lists the bombs at `offsets`, in order, each with its
/// codec and the topic's default bound.
fn shows_bombs(view: &Value, offsets: &[i64]) {
    let shown: Vec<(i64, String, u64)> = view["view"]["skippedBatches"]
        .as_array()
        .unwrap_or_else(|| panic!("no skippedBatches: {view}"))
        .iter()
        .map(|b| {
            assert_eq!(b["lastOffset"], b["offset"], "one record each");
            (
                b["offset"].as_i64().unwrap(),
                b["compression"].as_str().unwrap().to_owned(),
                b["limitBytes"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(i64, String, u64)> = offsets
        .iter()
        .zip(["zstd", "gzip", "lz4", "snappy"])
        .map(|(o, c)| (*o, c.to_owned(), 1_048_588))
        .collect();
    assert_eq!(shown, expected, "{view}");
}

/// The service's peak resident memory so far, in MiB.
fn peak_mib(served: &Served) -> u64 {
    memory_kib(served.pid(), "VmHWM") / 1024
}

#[tokio::test]
async fn bombs_written_while_the_service_runs_are_skipped_and_it_stays_under_the_charts_limit() {
    // The bombs land in partition 0 with a role; another role in partition 1.
    let topic = topic(2).await;
    let bombed = role_in(0, 2, "bombed");
    let calm = role_in(1, 2, "calm");
    let members_of = transport(&topic).await;
    members_of.register(&bombed, "before", 1).await.unwrap();
    let holder = holds(&topic, &calm, "holder").await;
    let token = holder.token();
    let served = Served::start(&topic).await;
    served
        .until(
            &format!("/roles/{calm}"),
            Duration::from_secs(10),
            |s, v| s == 200 && v["lease"]["member"] == "holder",
        )
        .await;
    let before = peak_mib(&served);

    // While the bombs are written and read: checks, views of the other
    // role and health, every 50 ms.
    let stop = tokio::sync::watch::channel(false);
    let watching = {
        let (url, mut stop) = (served.url.clone(), stop.1.clone());
        let calm = calm.clone();
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut answers: Vec<(String, u16)> = Vec::new();
            while !*stop.borrow_and_update() {
                for path in [
                    format!("/roles/{calm}/authority?token={token}"),
                    format!("/roles/{calm}"),
                    "/healthz".to_owned(),
                ] {
                    let status = match http.get(format!("{url}{path}")).send().await {
                        Ok(r) => r.status().as_u16(),
                        Err(_) => 0,
                    };
                    answers.push((path, status));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            answers
        })
    };
    let started = Instant::now();
    let offsets = write_bombs(&topic, 0).await;
    members_of.register(&bombed, "after", 2).await.unwrap();
    let view = served
        .until(
            &format!("/roles/{bombed}"),
            Duration::from_secs(60),
            |s, v| s == 200 && members(v) == ["before", "after"],
        )
        .await;
    let read_in = started.elapsed();
    stop.0.send(true).unwrap();
    let answers = watching.await.unwrap();

    let peak = peak_mib(&served);
    eprintln!(
        "peak RSS {before} MiB before the bombs, {peak} MiB after ({} bombs written and read past in {read_in:?}); the chart's limit is {CHART_LIMIT_MIB} MiB",
        offsets.len()
    );
    assert!(
        peak < CHART_LIMIT_MIB,
        "peak RSS {peak} MiB, over the chart's {CHART_LIMIT_MIB} MiB"
    );
    let failed: Vec<_> = answers.iter().filter(|(_, s)| *s != 200).collect();
    eprintln!(
        "{} checks, views and health probes meanwhile, {} not 200",
        answers.len(),
        failed.len()
    );
    assert!(failed.is_empty(), "{failed:?}");
    shows_bombs(&view, &offsets);
    assert_eq!(
        served.metric("krabka_state_skipped_batches_total").await,
        4.0
    );
    let (status, calm_view) = served.get(&format!("/roles/{calm}")).await;
    assert_eq!(status, 200);
    assert_eq!(calm_view["view"]["skippedBatches"], serde_json::json!([]));
    let (status, _) = served.get("/readyz").await;
    assert_eq!(status, 200);
    let log = served.log();
    for offset in &offsets {
        assert!(
            log.lines().any(|l| l.contains("skipped a record batch")
                && l.contains("partition=0")
                && l.contains(&format!("offset={offset} "))),
            "no warning for offset {offset}:\n{log}"
        );
    }
}

#[tokio::test]
async fn bombs_in_the_topic_before_the_service_starts_are_skipped_at_its_catch_up() {
    let topic = topic(1).await;
    let bombed = role_in(0, 1, "bombed");
    let members_of = transport(&topic).await;
    members_of.register(&bombed, "before", 1).await.unwrap();
    let offsets = write_bombs(&topic, 0).await;
    members_of.register(&bombed, "after", 2).await.unwrap();

    // The leader-election client reads the partition through the same
    // reader: a member takes the role, the bombs skipped. Measured in this
    // process (the bombs are made by now): its peak grows by what the read
    // took, and by what other tests running beside it took meanwhile, so
    // the bar is the chart's limit (the code before took 1,787 MiB).
    let own = std::process::id();
    let before = memory_kib(own, "VmHWM") / 1024;
    let leader = holds(&topic, &bombed, "leader").await;
    let grew = memory_kib(own, "VmHWM") / 1024 - before;
    eprintln!(
        "a member took the bombed role; this process's peak RSS grew by {grew} MiB (from {before} MiB)"
    );
    assert!(grew < CHART_LIMIT_MIB, "the member's read took {grew} MiB");

    // Ready (caught up past every bomb) within Served::start's 30 s.
    let started = Instant::now();
    let served = Served::start(&topic).await;
    let ready_in = started.elapsed();
    let peak = peak_mib(&served);
    eprintln!(
        "ready {ready_in:?} after start, past {} bombs; peak RSS {peak} MiB; the chart's limit is {CHART_LIMIT_MIB} MiB",
        offsets.len()
    );
    assert!(
        peak < CHART_LIMIT_MIB,
        "peak RSS {peak} MiB, over the chart's {CHART_LIMIT_MIB} MiB"
    );
    let (status, view) = served.get(&format!("/roles/{bombed}")).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(members(&view), ["before", "after", "leader"]);
    assert_eq!(view["lease"]["member"], "leader", "{view}");
    shows_bombs(&view, &offsets);
    assert_eq!(
        served.metric("krabka_state_skipped_batches_total").await,
        4.0
    );
    let path = format!("/roles/{bombed}/authority?token={}", leader.token());
    let (status, check) = served.get(&path).await;
    assert_eq!(
        (status, check["verdict"].as_str()),
        (200, Some("authoritative")),
        "{check}"
    );
}
