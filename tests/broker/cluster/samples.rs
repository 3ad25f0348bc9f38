//! What a service's views, `/readyz` and metrics say during a fault,
//! sampled, and how the views' claimed ages compare with what was written.

use std::time::Duration;

use krabka_authority::time::{Clock, SystemClock};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::support::http_client;

/// One sample of a role's view.
#[derive(Clone, Debug)]
pub(super) struct ViewSample {
    pub(super) at: Instant,
    /// Wall clock, epoch ms (the members' clock).
    pub(super) at_ms: i64,
    pub(super) status: u16,
    /// `view.ageMs`.
    pub(super) age_ms: u64,
    /// `x-krabka-view-age-ms`.
    pub(super) header_ms: Option<u64>,
    /// The lease's deadline, if any.
    pub(super) deadline_ms: Option<i64>,
}

/// One sample of `/readyz`.
#[derive(Clone, Debug)]
pub(super) struct ReadySample {
    pub(super) at: Instant,
    pub(super) status: u16,
    pub(super) reason: String,
}

/// The oldest view `samples` showed in `[from, to)`, in ms.
pub(super) fn oldest(samples: &[ViewSample], from: Instant, to: Instant) -> u64 {
    samples
        .iter()
        .filter(|s| s.at >= from && s.at < to)
        .map(|s| s.age_ms)
        .max()
        .unwrap_or(0)
}

/// When `/readyz` first answered 503 naming `partition`.
pub(super) fn first_naming(ready: &[ReadySample], partition: i32) -> Option<Instant> {
    ready
        .iter()
        .filter(|r| r.status == 503 && r.reason.contains(&format!("partition {partition}")))
        .map(|r| r.at)
        .min()
}

/// Samples one role's view and `/readyz` of a service every 200 ms.
pub(super) struct Sampler {
    stop: watch::Sender<bool>,
    task: JoinHandle<(Vec<ViewSample>, Vec<ReadySample>)>,
}

impl Sampler {
    pub(super) fn start(url: &str, role: &str) -> Sampler {
        let (stop, stopped) = watch::channel(false);
        let (view_url, ready_url) = (format!("{url}/roles/{role}"), format!("{url}/readyz"));
        let task = tokio::spawn(async move {
            let http = http_client().build().unwrap();
            let (mut views, mut ready) = (Vec::new(), Vec::new());
            while !*stopped.borrow() {
                let at = Instant::now();
                let at_ms = SystemClock.now_ms();
                if let Ok(response) = http
                    .get(&view_url)
                    .timeout(Duration::from_secs(2))
                    .send()
                    .await
                {
                    let status = response.status().as_u16();
                    let header_ms = response
                        .headers()
                        .get("x-krabka-view-age-ms")
                        .and_then(|v| v.to_str().ok()?.parse().ok());
                    let body: Value = response.json().await.unwrap_or(Value::Null);
                    views.push(ViewSample {
                        at,
                        at_ms,
                        status,
                        age_ms: body["view"]["ageMs"].as_u64().unwrap_or(0),
                        header_ms,
                        deadline_ms: body["lease"]["deadlineMs"].as_i64(),
                    });
                }
                if let Ok(response) = http
                    .get(&ready_url)
                    .timeout(Duration::from_secs(2))
                    .send()
                    .await
                {
                    let status = response.status().as_u16();
                    let body: Value = response.json().await.unwrap_or(Value::Null);
                    ready.push(ReadySample {
                        at,
                        status,
                        reason: body["reason"].as_str().unwrap_or_default().to_owned(),
                    });
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            (views, ready)
        });
        Sampler { stop, task }
    }

    pub(super) async fn finish(self) -> (Vec<ViewSample>, Vec<ReadySample>) {
        let _ = self.stop.send(true);
        self.task.await.unwrap()
    }
}

/// How the claimed ages of a role's views compare with the leases written.
#[derive(Debug, Default)]
pub(super) struct Honesty {
    /// Views answered.
    pub(super) views: usize,
    /// Views whose claimed age is more than 1 s below their real lag.
    pub(super) dishonest: Vec<String>,
    /// The largest real lag of a view (ms).
    pub(super) worst_lag_ms: i64,
    /// The largest claimed age (ms).
    pub(super) oldest_ms: u64,
    /// Views whose header and body disagree.
    pub(super) header_mismatches: usize,
}

/// Judges `samples` of a role against `writes` (deadline, written at) of
/// its leases: a view lacking a lease written (committed) at instant w,
/// sampled at s, lags at least s - w; it must not claim to be more than 1 s
/// younger than that.
pub(super) fn honesty(samples: &[ViewSample], writes: &[(i64, i64)]) -> Honesty {
    let mut out = Honesty::default();
    for sample in samples.iter().filter(|s| s.status == 200) {
        out.views += 1;
        out.oldest_ms = out.oldest_ms.max(sample.age_ms);
        if sample.header_ms != Some(sample.age_ms) {
            out.header_mismatches += 1;
        }
        let shown = sample.deadline_ms.unwrap_or(i64::MIN);
        let first_missing = writes
            .iter()
            .filter(|(deadline, at)| *deadline > shown && *at < sample.at_ms)
            .map(|(_, at)| *at)
            .min();
        let Some(missed) = first_missing else {
            continue;
        };
        let lag = sample.at_ms - missed;
        out.worst_lag_ms = out.worst_lag_ms.max(lag);
        if (sample.age_ms as i64) + 1000 < lag {
            out.dishonest.push(format!(
                "at {} ms: claims {} ms, lags {lag} ms",
                sample.at_ms, sample.age_ms
            ));
        }
    }
    out
}

/// One sample of a service's metrics about one broker.
#[derive(Clone, Debug)]
pub(super) struct BrokerSample {
    pub(super) at: Instant,
    /// `krabka_kafka_broker_stale`.
    pub(super) stale: bool,
    /// FindCoordinator requests sent to it (lookups and confirmations).
    pub(super) find_coordinator: u64,
    /// Metadata requests sent to it (refreshes, confirmations, probes).
    pub(super) metadata: u64,
}

/// Samples a service's metrics about the broker at `addr` every 100 ms.
pub(super) struct BrokerWatch {
    stop: watch::Sender<bool>,
    task: JoinHandle<Vec<BrokerSample>>,
}

impl BrokerWatch {
    pub(super) fn start(url: &str, addr: &str) -> BrokerWatch {
        let (stop, stopped) = watch::channel(false);
        let (url, broker) = (format!("{url}/metrics"), format!("broker=\"{addr}\""));
        let task = tokio::spawn(async move {
            let http = http_client().build().unwrap();
            let mut samples = Vec::new();
            while !*stopped.borrow() {
                let at = Instant::now();
                if let Ok(response) = http.get(&url).timeout(Duration::from_secs(2)).send().await
                    && let Ok(text) = response.text().await
                {
                    let value = |name: &str, api: Option<&str>| -> u64 {
                        text.lines()
                            .filter(|l| l.starts_with(name) && l.contains(&broker))
                            .filter(|l| api.is_none_or(|a| l.contains(&format!("api=\"{a}\""))))
                            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                            .sum::<f64>() as u64
                    };
                    samples.push(BrokerSample {
                        at,
                        stale: value("krabka_kafka_broker_stale{", None) > 0,
                        find_coordinator: value(
                            "krabka_kafka_broker_requests_total{",
                            Some("FindCoordinator"),
                        ),
                        metadata: value("krabka_kafka_broker_requests_total{", Some("Metadata")),
                    });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            samples
        });
        BrokerWatch { stop, task }
    }

    pub(super) async fn finish(self) -> Vec<BrokerSample> {
        let _ = self.stop.send(true);
        self.task.await.unwrap()
    }
}

/// What a service did with a broker from the moment it first reported it
/// stale until `until` (the end of the fault).
#[derive(Debug, Default)]
pub(super) struct SinceStale {
    /// When the service first reported it stale.
    pub(super) first: Option<Instant>,
    /// How long, until `until`, it was reported stale.
    pub(super) stale_for: Duration,
    /// FindCoordinator requests (lookups, confirmations) sent to it from
    /// then until `until`.
    pub(super) find_coordinator: u64,
    /// Metadata requests (probes) sent to it meanwhile.
    pub(super) metadata: u64,
}

pub(super) fn since_stale(samples: &[BrokerSample], until: Instant) -> SinceStale {
    let mut out = SinceStale::default();
    for pair in samples.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if b.at > until {
            break;
        }
        if a.stale {
            out.first.get_or_insert(a.at);
            if b.stale {
                out.stale_for += b.at - a.at;
            }
        }
        if out.first.is_some() {
            out.find_coordinator += b.find_coordinator.saturating_sub(a.find_coordinator);
            out.metadata += b.metadata.saturating_sub(a.metadata);
        }
    }
    out
}
