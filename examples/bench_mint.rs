//! Benchmark setup: N roles, each held by a real token (InitProducerId plus
//! a lease written in a transaction under it, and a registration). Writes
//! `<role> <producer id>:<epoch>` lines for the load generators.
//!
//! cargo run --release --example bench_mint -- --bootstrap 127.0.0.1:9092 --roles 1000 --out roles.txt
#![allow(clippy::print_stdout, clippy::print_stderr, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use krabka_authority::coordination::Lease;
use krabka_authority::kafka::{
    ClientConfig, KafkaClient, KafkaTransport, TopicSpec, TransportConfig,
};
use krabka_authority::time::{Clock, SystemClock};
use krabka_authority::transport::{Coordinator, LeaseWriter, Registrar};
use tokio::sync::Semaphore;

#[derive(Parser)]
struct Args {
    #[arg(long)]
    bootstrap: String,
    #[arg(long, default_value = "bench-coordination")]
    topic: String,
    #[arg(long, default_value_t = 16)]
    partitions: i32,
    /// Replicas of each partition; -1 (the default) takes the cluster's
    /// `default.replication.factor` (3 on `scripts/kafka start --brokers 3`):
    /// a topic of one replica on a cluster loses partitions with a broker.
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    replication: i16,
    #[arg(long, default_value_t = 1000)]
    roles: usize,
    #[arg(long, default_value = "bench-role")]
    prefix: String,
    #[arg(long)]
    out: String,
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let started = Instant::now();
    let client = KafkaClient::new(ClientConfig::new(args.bootstrap.split(','))).unwrap();
    let transport = Arc::new(
        KafkaTransport::connect(
            client,
            TransportConfig {
                topic: args.topic.clone(),
                partitions: None,
                create: Some(TopicSpec {
                    partitions: args.partitions,
                    replication_factor: args.replication,
                    configs: vec![],
                }),
            },
        )
        .await
        .unwrap(),
    );
    let gate = Arc::new(Semaphore::new(args.concurrency));
    let mut tasks = Vec::new();
    for i in 0..args.roles {
        let (transport, gate) = (transport.clone(), gate.clone());
        let role = format!("{}-{i}", args.prefix);
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire().await.unwrap();
            let now = SystemClock.now_ms();
            transport
                .register(&role, "bench-holder", now)
                .await
                .unwrap();
            let token = transport
                .acquire_epoch(&role, Duration::from_secs(900))
                .await
                .unwrap();
            let lease = Lease {
                member: "bench-holder".into(),
                token,
                granted_at: now,
                deadline: now + 900_000,
            };
            transport.write_lease(&role, token, &lease).await.unwrap();
            format!("{role} {token}")
        }));
    }
    let mut lines = Vec::with_capacity(args.roles);
    for t in tasks {
        lines.push(t.await.unwrap());
    }
    std::fs::write(&args.out, lines.join("\n") + "\n").unwrap();
    eprintln!(
        "bench_mint: {} roles held in {:?} -> {}",
        args.roles,
        started.elapsed(),
        args.out
    );
}
