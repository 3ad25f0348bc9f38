//! Failover time with the leadership client: members of one role, the
//! holder killed (renewals stop, no resign) again and again; for each
//! failover, the time from the kill to the next holder's first lease and
//! how long after the old lease's deadline that lease came. Prints one JSON
//! line per failover and a summary line.
//!
//! cargo run --release --example bench_failover -- --bootstrap 127.0.0.1:9092 --failovers 30
#![allow(clippy::print_stdout, clippy::print_stderr, clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use krabka_authority::coordination::FencingToken;
use krabka_authority::kafka::{
    ClientConfig, KafkaClient, KafkaTransport, TopicSpec, TransportConfig,
};
use krabka_authority::leadership::{Event, Options, acquire};
use krabka_authority::time::{Clock, SystemClock};
use tokio::sync::{mpsc, oneshot};

#[derive(Parser)]
struct Args {
    #[arg(long)]
    bootstrap: String,
    #[arg(long, default_value = "bench-failover")]
    topic: String,
    #[arg(long, default_value_t = 30)]
    failovers: usize,
    #[arg(long, default_value_t = 3)]
    members: usize,
    #[arg(long, default_value_t = 3000)]
    lease_ms: u64,
    #[arg(long, default_value_t = 1000)]
    renew_ms: u64,
    #[arg(long, default_value_t = 1000)]
    stagger_ms: u64,
}

struct Acquired {
    member: usize,
    token: FencingToken,
    at: Instant,
    granted_at_ms: i64,
    kill: oneshot::Sender<()>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let role = format!("bench-failover-{}", SystemClock.now_ms());
    let spec = TopicSpec {
        partitions: 16,
        replication_factor: 1,
        configs: vec![],
    };
    let options = Options::default()
        .with_lease_duration(Duration::from_millis(args.lease_ms))
        .with_renew_interval(Duration::from_millis(args.renew_ms))
        .with_challenge_stagger(Duration::from_millis(args.stagger_ms));
    // The latest lease deadline each member wrote (its own clock).
    let deadlines: Arc<Mutex<HashMap<usize, i64>>> = Arc::default();
    let (acquired_tx, mut acquired) = mpsc::unbounded_channel::<Acquired>();
    for m in 0..args.members {
        let client = KafkaClient::new(ClientConfig::new(args.bootstrap.split(','))).unwrap();
        let config = TransportConfig {
            topic: args.topic.clone(),
            partitions: None,
            create: Some(spec.clone()),
        };
        let transport = Arc::new(KafkaTransport::connect(client, config).await.unwrap());
        let (role, deadlines, acquired_tx) = (role.clone(), deadlines.clone(), acquired_tx.clone());
        let sink = {
            let deadlines = deadlines.clone();
            Arc::new(move |e: &Event| {
                if let Event::Renewed { deadline } = e {
                    deadlines.lock().unwrap().insert(m, *deadline);
                }
            })
        };
        let options = options.clone().with_events(sink);
        let lease_ms = args.lease_ms;
        tokio::spawn(async move {
            loop {
                let held = acquire(
                    transport.clone(),
                    &role,
                    &format!("member-{m}"),
                    options.clone(),
                )
                .await
                .unwrap();
                let granted_at_ms = deadlines
                    .lock()
                    .unwrap()
                    .get(&m)
                    .copied()
                    .unwrap_or_default()
                    - lease_ms as i64;
                let (kill, killed) = oneshot::channel();
                let _ = acquired_tx.send(Acquired {
                    member: m,
                    token: held.token(),
                    at: Instant::now(),
                    granted_at_ms,
                    kill,
                });
                let _ = killed.await;
                drop(held); // renewals stop; no resign: a crash
                tokio::time::sleep(Duration::from_millis(lease_ms)).await; // then it comes back, at the tail
            }
        });
    }
    let mut took = Vec::new();
    let mut after_deadline = Vec::new();
    let mut last: Option<(Instant, i64, FencingToken)> = None;
    for i in 0..=args.failovers {
        let a = tokio::time::timeout(Duration::from_secs(60), acquired.recv())
            .await
            .unwrap()
            .unwrap();
        if let Some((killed_at, old_deadline, old_token)) = last {
            assert!(a.token.supersedes(&old_token));
            let t = a.at.duration_since(killed_at).as_secs_f64() * 1000.0;
            let d = (a.granted_at_ms - old_deadline) as f64;
            println!(
                "{{\"failover\":{i},\"member\":{},\"kill_to_takeover_ms\":{t:.0},\"after_deadline_ms\":{d:.0}}}",
                a.member
            );
            took.push(t);
            after_deadline.push(d);
        }
        if i == args.failovers {
            break;
        }
        // Hold for a couple of renewals, then kill the holder.
        tokio::time::sleep(Duration::from_millis(args.renew_ms * 2 + 100)).await;
        let deadline = deadlines
            .lock()
            .unwrap()
            .get(&a.member)
            .copied()
            .unwrap_or_default();
        last = Some((Instant::now(), deadline, a.token));
        let _ = a.kill.send(());
    }
    took.sort_by(f64::total_cmp);
    after_deadline.sort_by(f64::total_cmp);
    let target = (args.stagger_ms + 500) as f64;
    println!(
        "{{\"summary\":true,\"failovers\":{},\"kill_to_takeover_ms\":{{\"p50\":{:.0},\"p90\":{:.0},\"max\":{:.0}}},\"after_deadline_ms\":{{\"min\":{:.0},\"p50\":{:.0},\"p90\":{:.0},\"max\":{:.0}}},\"target_p50_after_deadline_ms\":{target:.0},\"met\":{}}}",
        took.len(),
        percentile(&took, 0.5),
        percentile(&took, 0.9),
        took.last().copied().unwrap_or_default(),
        after_deadline.first().copied().unwrap_or_default(),
        percentile(&after_deadline, 0.5),
        percentile(&after_deadline, 0.9),
        after_deadline.last().copied().unwrap_or_default(),
        percentile(&after_deadline, 0.5) <= target,
    );
}
