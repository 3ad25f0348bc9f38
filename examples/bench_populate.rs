//! Benchmark setup for the watcher's catch-up: N roles with one registration
//! and one lease record each, across the topic's partitions, written in
//! large plain batches (the watcher folds lease records whatever wrote them).
//!
//! cargo run --release --example bench_populate -- --bootstrap 127.0.0.1:9092 --roles 100000
#![allow(clippy::print_stdout, clippy::print_stderr, clippy::unwrap_used)]

use std::time::Instant;

use bytes::Bytes;
use clap::Parser;
use krabka_authority::coordination::{
    FencingToken, Key, Lease, Registration, encode_key, encode_lease, encode_registration,
    role_partition,
};
use krabka_authority::kafka::{ClientConfig, KafkaClient, TopicSpec};
use krabka_authority::time::{Clock, SystemClock};

#[derive(Parser)]
struct Args {
    #[arg(long)]
    bootstrap: String,
    #[arg(long, default_value = "bench-catchup")]
    topic: String,
    #[arg(long, default_value_t = 16)]
    partitions: i32,
    #[arg(long, default_value_t = 100_000)]
    roles: usize,
    #[arg(long, default_value = "catchup-role")]
    prefix: String,
    #[arg(long, default_value_t = 2000)]
    batch: usize,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let started = Instant::now();
    let client = KafkaClient::new(ClientConfig::new(args.bootstrap.split(','))).unwrap();
    let spec = TopicSpec {
        partitions: args.partitions,
        replication_factor: 1,
        configs: vec![],
    };
    client
        .topics()
        .ensure_topic(&args.topic, &spec)
        .await
        .unwrap();
    let mut by_partition: Vec<Vec<(Bytes, Option<Bytes>)>> =
        vec![Vec::new(); args.partitions as usize];
    let now = SystemClock.now_ms();
    for i in 0..args.roles {
        let role = format!("{}-{i}", args.prefix);
        let member = format!("member-{}", i % 7);
        let p = role_partition(&role, args.partitions).unwrap() as usize;
        let reg = Registration {
            member: member.clone(),
            registered_at: now,
        };
        by_partition[p].push((
            encode_key(&Key::registration(&role, &member))
                .unwrap()
                .into(),
            Some(encode_registration(&reg).unwrap().into()),
        ));
        let lease = Lease {
            member,
            token: FencingToken::new(i as i64, 0).unwrap(),
            granted_at: now,
            deadline: now + 30_000,
        };
        by_partition[p].push((
            encode_key(&Key::lease(&role)).unwrap().into(),
            Some(encode_lease(&lease).unwrap().into()),
        ));
    }
    let topic = &args.topic;
    let writes = by_partition.iter().enumerate().map(|(p, records)| {
        let client = &client;
        async move {
            for chunk in records.chunks(args.batch) {
                client
                    .producer()
                    .append_batch(topic, p as i32, chunk, now)
                    .await
                    .unwrap();
            }
        }
    });
    futures::future::join_all(writes).await;
    eprintln!(
        "bench_populate: {} roles ({} records) in {:?}",
        args.roles,
        args.roles * 2,
        started.elapsed()
    );
}
