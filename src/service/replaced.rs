//! The cluster behind the bootstrap address replaced by another, many times
//! in a row, under the service (fast tier, scripted brokers), as a real one
//! is: stopped (every connection closed, the ports refusing), then another
//! started on the same ports. While no broker can be reached, nothing of
//! the old cluster answers, its caches included; every change is noticed
//! before any verdict from the new cluster is given. The broker tier's
//! `replaced` module does the same to a real Kafka (where this test, when
//! it swapped the brokers' scripts without a moment of refused ports,
//! missed what the real broker showed).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeConfigsResponse, FetchRequest, FetchResponse, MetadataRequest,
    MetadataResponse, RequestHeader,
    describe_configs_response::{DescribeConfigsResourceResult, DescribeConfigsResult},
    fetch_response::{FetchableTopicResponse, PartitionData},
    metadata_response::{MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic},
};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;

use crate::coordination::{FencingToken, Verdict};
use crate::kafka::ClientConfig;
use crate::kafka::fake::{FakeBroker, Script, answer, described, naming, request};
use crate::service::{AppState, ServiceConfig};

const TOPIC: &str = "__coordination_state";
const ROLE: &str = "r";

/// Cluster number `generation`: its id, its partitions' leader epoch (each
/// cluster's lower than the one before: a freshly formatted cluster starts
/// low) and the current pair of `ROLE`, alternately 7:5 and 7:2.
struct Generation {
    id: String,
    epoch: i32,
    current: FencingToken,
}

impl Generation {
    fn new(generation: usize) -> Generation {
        Generation {
            id: format!("cluster-{generation}"),
            epoch: 1000 - generation as i32,
            current: FencingToken::new(7, if generation.is_multiple_of(2) { 5 } else { 2 })
                .unwrap(),
        }
    }
}

/// Broker `me` (1 or 2; broker 1 leads every partition and coordinates
/// every id) of `generation`, whose brokers listen at `addrs`.
fn broker(generation: usize, me: i32, addrs: Arc<std::sync::Mutex<Vec<String>>>) -> Script {
    let cluster = Generation::new(generation);
    Arc::new(move |header: &RequestHeader, body: Bytes| {
        let addrs = addrs.lock().unwrap().clone();
        let version = header.request_api_version;
        match ApiKey::try_from(header.request_api_key).unwrap() {
            ApiKey::Metadata => {
                let asked: MetadataRequest = request(version, body);
                let topics = asked
                    .topics
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|t| t.name)
                    .map(|name| {
                        MetadataResponseTopic::default()
                            .with_name(Some(name))
                            .with_partitions(vec![
                                MetadataResponsePartition::default()
                                    .with_partition_index(0)
                                    .with_leader_id(BrokerId(1))
                                    .with_leader_epoch(cluster.epoch),
                            ])
                    })
                    .collect();
                let brokers = addrs
                    .iter()
                    .zip(1..)
                    .map(|(addr, id)| {
                        let (host, port) = addr.rsplit_once(':').unwrap();
                        MetadataResponseBroker::default()
                            .with_node_id(BrokerId(id))
                            .with_host(StrBytes::from_string(host.to_owned()))
                            .with_port(port.parse().unwrap())
                    })
                    .collect();
                let response = MetadataResponse::default()
                    .with_cluster_id(Some(StrBytes::from_string(cluster.id.clone())))
                    .with_brokers(brokers)
                    .with_topics(topics);
                Some(answer(header, &response))
            }
            ApiKey::DescribeConfigs => {
                let response = DescribeConfigsResponse::default().with_results(vec![
                    DescribeConfigsResult::default()
                        .with_resource_type(2)
                        .with_resource_name(StrBytes::from_static_str(TOPIC))
                        .with_configs(vec![
                            DescribeConfigsResourceResult::default()
                                .with_name(StrBytes::from_static_str("cleanup.policy"))
                                .with_value(Some(StrBytes::from_static_str("compact"))),
                        ]),
                ]);
                Some(answer(header, &response))
            }
            ApiKey::FindCoordinator => {
                let asked = request(version, body);
                Some(answer(header, &naming(asked, |_| (1, &addrs[0]))))
            }
            ApiKey::DescribeTransactions if me == 1 => {
                let pair = (
                    cluster.current.producer_id(),
                    cluster.current.producer_epoch(),
                );
                Some(described(header, body, pair, "Ongoing"))
            }
            ApiKey::Fetch if me == 1 => {
                let asked: FetchRequest = request(version, body);
                let partitions = asked.topics[0]
                    .partitions
                    .iter()
                    .map(|p| {
                        // Kafka's check of the fetch's leader epoch.
                        let code = match p.current_leader_epoch {
                            e if e < cluster.epoch => 74,
                            e if e > cluster.epoch => 75,
                            _ => 0,
                        };
                        PartitionData::default()
                            .with_partition_index(p.partition)
                            .with_error_code(code)
                    })
                    .collect();
                let response = FetchResponse::default().with_responses(vec![
                    FetchableTopicResponse::default()
                        .with_topic(asked.topics[0].topic.clone())
                        .with_partitions(partitions),
                ]);
                Some(answer(header, &response))
            }
            _ => None,
        }
    })
}

/// How long each cluster is down between the old one's stop and the new
/// one's start (a real one takes seconds: stop, wipe, format, start).
const DOWN: Duration = Duration::from_millis(300);

/// What the old code did wrong, and the real broker showed (one run in
/// three): with every connection gone and the new cluster not reached yet,
/// checks were answered from the old cluster's cache.
const GRACE: Duration = Duration::from_millis(50);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_replaced_behind_the_address_is_noticed_before_any_verdict_of_it() {
    const REPLACEMENTS: usize = 20;
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let brokers = [
        FakeBroker::start(broker(0, 1, addrs.clone())).await,
        FakeBroker::start(broker(0, 2, addrs.clone())).await,
    ];
    *addrs.lock().unwrap() = brokers.iter().map(|b| b.addr.clone()).collect();
    let bootstrap = addrs.lock().unwrap().join(",");
    let mut config = ServiceConfig::new(&bootstrap);
    config.kafka.topic = TOPIC.into();
    config.watch.roster_ttl = Duration::from_millis(200);
    config.watch.poll_interval = Duration::from_millis(200);
    let mut client = ClientConfig::new(bootstrap.split(','));
    client.request_timeout = Duration::from_secs(2);
    client.operation_timeout = Duration::from_secs(2);
    let state = AppState::with_client_config(config, client).unwrap();
    let watcher = tokio::spawn(state.watcher.clone().run());
    let check = |token: FencingToken| {
        let state = state.clone();
        async move {
            let deadline = Instant::now() + Duration::from_millis(500);
            state.checker.check(ROLE, token, deadline).await
        }
    };
    let first = Generation::new(0);
    let started = Instant::now();
    while !check(first.current)
        .await
        .is_ok_and(|a| a.verdict == Verdict::Authoritative)
    {
        assert!(started.elapsed() < Duration::from_secs(10), "never served");
    }

    let down_checks = AtomicUsize::new(0);
    let unavailable = AtomicUsize::new(0);
    let mut slowest = Duration::ZERO;
    for generation in 1..=REPLACEMENTS {
        // The old cluster's caches: the next cluster's current pair is
        // superseded here (answered from the cache from now on), and the
        // high-water mark is this cluster's pair.
        let old = Generation::new(generation - 1);
        let new = Generation::new(generation);
        let below = FencingToken::new(7, 1).unwrap();
        let olds: Vec<FencingToken> = [new.current, below]
            .into_iter()
            .filter(|t| *t < old.current)
            .collect();
        for &token in &olds {
            check(token).await.unwrap();
            let answer = check(token).await.unwrap();
            assert_eq!(
                (answer.verdict, answer.cached),
                (Verdict::Superseded, true),
                "{generation}: {answer:?}"
            );
        }
        for b in &brokers {
            b.stop().await;
        }
        let stopped = Instant::now();
        tokio::time::sleep(GRACE).await;
        // No broker to ask: nothing of the old cluster answers either.
        while stopped.elapsed() < DOWN {
            for &token in olds.iter().chain([&new.current, &old.current]) {
                let answer = check(token).await;
                assert!(
                    answer.is_err(),
                    "{generation}: {:?} after every broker stopped: {answer:?}",
                    stopped.elapsed()
                );
                down_checks.fetch_add(1, Ordering::Relaxed);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for (b, me) in brokers.iter().zip(1..) {
            b.restart(broker(generation, me, addrs.clone())).await;
        }
        let replaced = Instant::now();
        loop {
            match check(new.current).await {
                Ok(answer) => {
                    // Every verdict from the new cluster, noticed before it.
                    assert_eq!(
                        answer.current,
                        Some(new.current),
                        "{generation}: an answer of the old cluster: {answer:?}"
                    );
                    assert_eq!(
                        state.metrics.cluster_changes.get(),
                        generation as u64,
                        "{generation}: a verdict of {} before its cluster id was noticed: {answer:?}",
                        new.id
                    );
                    assert_eq!(
                        (answer.verdict, answer.cached),
                        (Verdict::Authoritative, false),
                        "{generation}"
                    );
                    break;
                }
                Err(_) => {
                    unavailable.fetch_add(1, Ordering::Relaxed);
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert!(
                replaced.elapsed() < Duration::from_secs(5),
                "{generation}: {} never answered within 5 s",
                new.id
            );
        }
        slowest = slowest.max(replaced.elapsed());
        // Once the new cluster answered, nothing of the old one does.
        for token in olds.iter().chain([&new.current]) {
            let answer = check(*token).await.unwrap();
            assert_eq!(answer.current, Some(new.current), "{generation}");
        }
    }
    watcher.abort();
    assert_eq!(state.metrics.cluster_changes.get(), REPLACEMENTS as u64);
    eprintln!(
        "{REPLACEMENTS} replacements: {} checks while every broker was down, all unanswered; {} more before the new cluster's first verdict, at most {slowest:?} after its start",
        down_checks.load(Ordering::Relaxed),
        unavailable.load(Ordering::Relaxed)
    );
}
