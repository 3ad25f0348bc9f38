//! The client under broker failure, against scripted brokers (the fast
//! tier; the broker tier kills and hangs real ones in tests/broker/cluster.rs).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, FindCoordinatorRequest, MetadataRequest, MetadataResponse,
    RequestHeader, TopicName,
    fetch_response::{FetchableTopicResponse, PartitionData},
};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;

use super::client::KafkaClient;
use super::config::{Broker, ClientConfig};
use super::error::KafkaError;
use super::fake::{Delay, FakeBroker, answer, described, metadata, naming, request};
use super::state::Lesson;
use krabka_coordination::testkit::Logs;

fn client(bootstrap: &[&str]) -> KafkaClient {
    let mut config = ClientConfig::new(bootstrap.iter().copied());
    config.request_timeout = Duration::from_secs(5);
    config.operation_timeout = Duration::from_secs(8);
    KafkaClient::new(config).unwrap()
}

/// A broker that answers Metadata with `brokers` and FindCoordinator with
/// `coordinator` for every key, counting the lookups.
async fn answering(
    brokers: Arc<std::sync::Mutex<Vec<(i32, String)>>>,
    coordinator: Arc<std::sync::Mutex<(i32, String)>>,
    lookups: Arc<AtomicUsize>,
) -> FakeBroker {
    FakeBroker::start(Arc::new(move |header, body| {
        let brokers = brokers.lock().unwrap().clone();
        let list: Vec<(i32, &str)> = brokers.iter().map(|(i, a)| (*i, a.as_str())).collect();
        match header.request_api_key {
            k if k == ApiKey::Metadata as i16 => Some(answer(header, &metadata(&list, None))),
            k if k == ApiKey::FindCoordinator as i16 => {
                lookups.fetch_add(1, Ordering::SeqCst);
                let (id, addr) = coordinator.lock().unwrap().clone();
                let asked = request(header.request_api_version, body);
                Some(answer(header, &naming(asked, |_| (id, &addr))))
            }
            _ => None,
        }
    }))
    .await
}

#[tokio::test]
async fn a_hung_broker_costs_a_hedge_not_a_request_timeout() {
    // A answers nothing after ApiVersions (a SIGSTOPped broker answers
    // nothing at all; the kernel still accepts); B answers.
    let hung = FakeBroker::start(Arc::new(|_, _| None)).await;
    let brokers = Arc::new(std::sync::Mutex::new(Vec::new()));
    let coordinator = Arc::new(std::sync::Mutex::new((0, String::new())));
    let live = answering(brokers.clone(), coordinator, Arc::default()).await;
    *brokers.lock().unwrap() = vec![(1, hung.addr.clone()), (2, live.addr.clone())];
    // Equally idle brokers are tried in random order (as Kafka's
    // leastLoadedNode starts at a random offset), so rounds go on until the
    // hung one was asked in three of them: a fixed count of rounds misses it
    // by chance (six rounds, one time in 64).
    let mut asked = 0;
    for round in 0..64 {
        let client = client(&[&hung.addr, &live.addr]);
        let before = hung.requests(ApiKey::Metadata).len();
        let started = Instant::now();
        client.refresh_metadata(&[]).await.unwrap();
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(1500),
            "round {round}: metadata took {took:?} with one broker hung"
        );
        if hung.requests(ApiKey::Metadata).len() > before {
            asked += 1;
            if asked == 3 {
                return;
            }
        }
    }
    panic!("the hung broker was asked in {asked} of 64 rounds");
}

#[tokio::test]
async fn a_fetch_carries_the_leader_epoch_and_a_fenced_epoch_moves_it_to_the_new_leader() {
    let moved = Arc::new(AtomicBool::new(false));
    let addrs: Arc<std::sync::Mutex<(String, String)>> = Arc::default();
    let script = |me: i32| {
        let (moved, addrs) = (moved.clone(), addrs.clone());
        Arc::new(
            move |header: &kafka_protocol::messages::RequestHeader, body: Bytes| {
                let (a, b) = addrs.lock().unwrap().clone();
                let brokers = [(1, a.as_str()), (2, b.as_str())];
                match header.request_api_key {
                    k if k == ApiKey::Metadata as i16 => {
                        let partitions: &[(i32, i32, i32)] = if moved.load(Ordering::SeqCst) {
                            &[(0, 2, 6)]
                        } else {
                            &[(0, 1, 5)]
                        };
                        let response: MetadataResponse =
                            metadata(&brokers, Some(("t", partitions)));
                        Some(answer(header, &response))
                    }
                    k if k == ApiKey::Fetch as i16 => {
                        let fetch: FetchRequest = request(header.request_api_version, body);
                        let epoch = fetch.topics[0].partitions[0].current_leader_epoch;
                        // Broker 1 lost the leadership at epoch 6.
                        let code = if me == 1 && epoch < 6 {
                            moved.store(true, Ordering::SeqCst);
                            74 // FENCED_LEADER_EPOCH
                        } else {
                            0
                        };
                        let response = FetchResponse::default().with_responses(vec![
                            FetchableTopicResponse::default()
                                .with_topic(TopicName(StrBytes::from_static_str("t")))
                                .with_partitions(vec![
                                    PartitionData::default()
                                        .with_partition_index(0)
                                        .with_error_code(code),
                                ]),
                        ]);
                        Some(answer(header, &response))
                    }
                    _ => None,
                }
            },
        ) as super::fake::Script
    };
    let one = FakeBroker::start(script(1)).await;
    let two = FakeBroker::start(script(2)).await;
    *addrs.lock().unwrap() = (one.addr.clone(), two.addr.clone());
    let client = client(&[&one.addr]);

    let (groups, errors) = client.partition_leaders("t", &[(0, 0)]).await;
    assert!(errors.is_empty(), "{errors:?}");
    let (leader, positions) = groups.into_iter().next().unwrap();
    assert_eq!((leader.id, positions[0].leader_epoch), (1, 5));
    let answers = client
        .fetch_from(&leader, "t", &positions, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(answers[0].1.as_ref().unwrap_err().code(), Some(74));

    // The fenced epoch asked for fresh metadata: the new leader, its epoch.
    let (groups, _) = client.partition_leaders("t", &[(0, 0)]).await;
    let (leader, positions) = groups.into_iter().next().unwrap();
    assert_eq!((leader.id, positions[0].leader_epoch), (2, 6));
    let answers = client
        .fetch_from(&leader, "t", &positions, Duration::ZERO)
        .await
        .unwrap();
    assert!(answers[0].1.is_ok());
    let sent: FetchRequest = {
        let (version, body) = two.requests(ApiKey::Fetch).remove(0);
        request(version, body)
    };
    assert_eq!(sent.topics[0].partitions[0].current_leader_epoch, 6);
}

#[tokio::test]
async fn concurrent_lookups_of_one_key_share_one_find_coordinator() {
    let brokers = Arc::new(std::sync::Mutex::new(Vec::new()));
    let coordinator = Arc::new(std::sync::Mutex::new((1, String::new())));
    let lookups = Arc::new(AtomicUsize::new(0));
    let broker = answering(brokers.clone(), coordinator.clone(), lookups.clone()).await;
    *brokers.lock().unwrap() = vec![(1, broker.addr.clone())];
    *coordinator.lock().unwrap() = (1, broker.addr.clone());
    let client = client(&[&broker.addr]);
    let keys = ["r".to_owned()];
    let calls = (0..50).map(|_| client.coordinators(&keys));
    let answers = futures::future::join_all(calls).await;
    assert!(answers.iter().all(|a| a["r"].as_ref().unwrap().id == 1));
    assert_eq!(
        lookups.load(Ordering::SeqCst),
        1,
        "one lookup for 50 callers"
    );
}

#[tokio::test]
async fn the_ids_of_a_failed_coordinator_are_looked_up_once_per_backoff() {
    let brokers = Arc::new(std::sync::Mutex::new(Vec::new()));
    let coordinator = Arc::new(std::sync::Mutex::new((1, String::new())));
    let lookups = Arc::new(AtomicUsize::new(0));
    let broker = answering(brokers.clone(), coordinator.clone(), lookups.clone()).await;
    *brokers.lock().unwrap() = vec![(1, broker.addr.clone())];
    *coordinator.lock().unwrap() = (1, broker.addr.clone());
    let client = client(&[&broker.addr]);
    let keys: Vec<String> = (0..20).map(|i| format!("role-{i}")).collect();
    client.coordinators(&keys).await;
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
    // The coordinator's broker says it no longer coordinates them (and
    // keeps naming itself): every caller of every one of its ids, every
    // 10 ms for 1.5 s.
    let unavailable = KafkaError::broker("DescribeTransactions", 15, None);
    client.state().learn(Lesson::DescribeFailed {
        addr: &broker.addr,
        error: &unavailable,
    });
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        for key in &keys {
            client.coordinators(std::slice::from_ref(key)).await;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Gates open at 0, 100, 300, 700 and 1500 ms: at most five lookups for
    // 20 ids and ~3,000 calls.
    let after = lookups.load(Ordering::SeqCst) - 1;
    assert!((2..=5).contains(&after), "{after} lookups in 1.5 s");
}

/// Waits out `addr`'s reconnect backoff; panics when it lasts past 5 s
/// (a backoff that never ends fails the test instead of hanging it).
async fn until_unblocked(client: &KafkaClient, addr: &str) {
    let waited = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(blocked) = client.state().nodes().blocked(addr) {
            tokio::time::sleep(blocked.left).await;
        }
    });
    waited.await.expect("the reconnect backoff ends within 5 s");
}

#[tokio::test]
async fn a_broker_that_accepts_and_never_answers_backs_off_longer_each_time() {
    // What the kernel does for a SIGSTOPped broker: it accepts, nothing more.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let held = tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            sockets.push(socket);
        }
    });
    let mut config = ClientConfig::new([addr.as_str()]);
    config.request_timeout = Duration::from_millis(100);
    config.connect_timeout = Duration::from_millis(100);
    let client = KafkaClient::new(config).unwrap();
    let mut blocks = Vec::new();
    for _ in 0..5 {
        until_unblocked(&client, &addr).await;
        assert!(client.connection(&addr).await.is_err());
        blocks.push(client.state().nodes().blocked(&addr).unwrap().left);
    }
    held.abort();
    // 50, 100, 200, 400, 800 ms, each within 20 %.
    for (i, block) in blocks.iter().enumerate() {
        let step = Duration::from_millis(50 << i);
        assert!(
            *block <= step.mul_f64(1.2) && *block >= step.mul_f64(0.7),
            "failure {i}: blocked {block:?}, expected about {step:?} ({blocks:?})"
        );
    }
}

#[tokio::test]
async fn not_coordinator_looks_every_id_of_the_broker_up_again_in_one_batch() {
    let brokers = Arc::new(std::sync::Mutex::new(Vec::new()));
    let coordinator = Arc::new(std::sync::Mutex::new((1, String::new())));
    let lookups = Arc::new(AtomicUsize::new(0));
    let broker = answering(brokers.clone(), coordinator.clone(), lookups.clone()).await;
    *brokers.lock().unwrap() = vec![(1, broker.addr.clone())];
    *coordinator.lock().unwrap() = (1, broker.addr.clone());
    let client = client(&[&broker.addr]);
    let keys: Vec<String> = (0..50).map(|i| format!("role-{i}")).collect();
    client.coordinators(&keys).await;
    // The coordinator moved: a describe answered NOT_COORDINATOR for one id.
    let moved = KafkaError::broker("DescribeTransactions", 16, None);
    client.state().learn(Lesson::DescribeFailed {
        addr: &broker.addr,
        error: &moved,
    });
    let before = broker.requests(ApiKey::FindCoordinator).len();
    client.coordinators(&keys[..1]).await;
    let sent = broker.requests(ApiKey::FindCoordinator);
    assert_eq!(sent.len(), before + 1, "one lookup");
    let (version, body) = sent.last().unwrap().clone();
    let asked: FindCoordinatorRequest = request(version, body);
    assert_eq!(
        asked.coordinator_keys.len(),
        50,
        "with every id of the broker"
    );
}

/// True for a confirmation: a FindCoordinator (these tests look nothing
/// up), or a Metadata request of `__transaction_state`.
fn is_confirmation(header: &RequestHeader, body: &Bytes) -> bool {
    header.request_api_key == ApiKey::FindCoordinator as i16
        || header.request_api_key == ApiKey::Metadata as i16 && {
            let asked: MetadataRequest = request(header.request_api_version, body.clone());
            asked.topics.is_some_and(|topics| {
                topics.iter().any(|t| {
                    t.name
                        .as_ref()
                        .is_some_and(|n| n.0.as_str() == "__transaction_state")
                })
            })
        }
}

/// Brokers 0, 1, … answering DescribeTransactions with `pairs[broker]`
/// for every id, and FindCoordinator (and Metadata of the one partition of
/// `__transaction_state`) with the broker `named` holds as the coordinator
/// of every id, as it stands when the request is read; broker `b` holds
/// its answer to its first confirmation `first_confirmation[b]` long.
async fn scripted_brokers(
    pairs: &[(i64, i16)],
    named: Arc<AtomicUsize>,
    first_confirmation: &[Duration],
) -> Vec<FakeBroker> {
    let delays = first_confirmation.iter().map(|&first_confirmation| {
        let confirmations = AtomicUsize::new(0);
        Arc::new(move |header: &RequestHeader, body: &Bytes| {
            if is_confirmation(header, body) && confirmations.fetch_add(1, Ordering::SeqCst) == 0 {
                first_confirmation
            } else {
                Duration::ZERO
            }
        }) as Delay
    });
    scripted_brokers_delayed(pairs, named, delays.collect()).await
}

/// [`scripted_brokers`], broker `b` holding each answer as `delays[b]` says.
async fn scripted_brokers_delayed(
    pairs: &[(i64, i16)],
    named: Arc<AtomicUsize>,
    delays: Vec<Delay>,
) -> Vec<FakeBroker> {
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let mut brokers = Vec::new();
    for (&(pid, epoch), delay) in pairs.iter().zip(delays) {
        let (addrs, named) = (addrs.clone(), named.clone());
        let script = Arc::new(move |header: &RequestHeader, body| {
            let addrs = addrs.lock().unwrap().clone();
            let version = header.request_api_version;
            let at = named.load(Ordering::SeqCst);
            match ApiKey::try_from(header.request_api_key).unwrap() {
                ApiKey::Metadata => {
                    let list: Vec<(i32, &str)> =
                        (0..).zip(addrs.iter().map(String::as_str)).collect();
                    let leaders = [(0, at as i32, 1)];
                    let topic = Some(("__transaction_state", &leaders[..]));
                    Some(answer(header, &metadata(&list, topic)))
                }
                ApiKey::FindCoordinator => {
                    let asked = request(version, body);
                    Some(answer(
                        header,
                        &naming(asked, |_| (at as i32, addrs[at].as_str())),
                    ))
                }
                ApiKey::DescribeTransactions => {
                    Some(described(header, body, (pid, epoch), "Empty"))
                }
                _ => None,
            }
        });
        brokers.push(FakeBroker::start_delayed(script, delay).await);
    }
    *addrs.lock().unwrap() = brokers.iter().map(|b| b.addr.clone()).collect();
    brokers
}

/// Two brokers, both naming broker 1 the coordinator of every id.
async fn two_brokers(pairs: [(i64, i16); 2]) -> Vec<FakeBroker> {
    scripted_brokers(&pairs, Arc::new(AtomicUsize::new(1)), &[Duration::ZERO; 2]).await
}

#[tokio::test]
async fn an_answer_another_broker_does_not_confirm_is_never_used() {
    // Broker 0 paused and came back: its metadata already names broker 1 as
    // the coordinator of "r", its transaction state still has the old pair.
    let brokers = two_brokers([(7, 1), (7, 2)]).await;
    let client = client(&[&brokers[0].addr]);
    client.refresh_metadata(&[]).await.unwrap();
    let paused = Broker {
        id: 0,
        addr: brokers[0].addr.clone(),
    };
    client.state().learn(Lesson::CoordinatorFound {
        key: "r",
        broker: &paused,
    });
    let answer = client.describe_transaction("r").await.unwrap().unwrap();
    assert_eq!((answer.producer_id, answer.producer_epoch), (7, 2));
    assert_eq!(brokers[0].requests(ApiKey::DescribeTransactions).len(), 1);
    assert_eq!(brokers[1].requests(ApiKey::DescribeTransactions).len(), 1);
}

#[tokio::test]
async fn a_stale_answer_whose_confirmation_was_sent_before_the_check_arrived_is_never_believed() {
    // One id: the confirmations are FindCoordinator requests.
    stale_answer_confirmed_before_the_check_arrived(&["r"]).await;
}

#[tokio::test]
async fn a_stale_answer_is_never_believed_when_many_ids_are_confirmed_at_once() {
    // Three ids: the confirmations are Metadata requests of
    // `__transaction_state`.
    stale_answer_confirmed_before_the_check_arrived(&["r", "s", "t"]).await;
}

/// Broker 1 coordinates `ids` with the pair 7:1. A first check's
/// confirmation goes to broker 0 or 2, which names broker 1 and holds its
/// answer 600 ms. Meanwhile broker 1 is deposed: broker 2 mints 7:2 and
/// every broker names it; broker 1, paused and back, still answers 7:1. A
/// second check arrives while the first confirmation, which carries the ids
/// and names broker 1, is still in flight: it must wait for a confirmation
/// sent after it arrived, which names broker 2.
async fn stale_answer_confirmed_before_the_check_arrived(ids: &[&str]) {
    let named = Arc::new(AtomicUsize::new(1));
    let brokers = scripted_brokers(
        &[(7, 2), (7, 1), (7, 2)],
        named.clone(),
        &[Duration::from_millis(600); 3],
    )
    .await;
    let mut config = ClientConfig::new([brokers[0].addr.as_str()]);
    // The held confirmation keeps the stream: no hedge around it.
    config.hedge_after = Duration::from_secs(5);
    config.operation_timeout = Duration::from_secs(8);
    let client = KafkaClient::new(config).unwrap();
    client.refresh_metadata(&[]).await.unwrap();
    let deposed = Broker {
        id: 1,
        addr: brokers[1].addr.clone(),
    };
    for key in ids {
        client.state().learn(Lesson::CoordinatorFound {
            key,
            broker: &deposed,
        });
    }
    let ids: Vec<String> = ids.iter().map(|id| (*id).to_owned()).collect();
    let check = |client: KafkaClient, ids: Vec<String>| async move {
        let deadline = Instant::now() + Duration::from_secs(8);
        let answers = client
            .describe_transactions(&ids, &|_| None, deadline)
            .await;
        ids.iter()
            .map(|id| {
                let d = answers[id].as_ref().unwrap().as_ref().unwrap();
                (d.producer_id, d.producer_epoch)
            })
            .collect::<Vec<_>>()
    };
    let first = tokio::spawn(check(client.clone(), ids.clone()));
    let confirmations = |b: usize| {
        brokers[b]
            .seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(api, version, body)| {
                let header = RequestHeader::default()
                    .with_request_api_key(*api as i16)
                    .with_request_api_version(*version);
                is_confirmation(&header, body)
            })
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while confirmations(0) + confirmations(2) == 0 {
        assert!(Instant::now() < deadline, "no confirmation was sent");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    named.store(2, Ordering::SeqCst);
    let second = check(client.clone(), ids.clone()).await;
    let first = first.await.unwrap();

    assert_eq!(
        second,
        vec![(7, 2); ids.len()],
        "the second check believed broker 1's old pair"
    );
    // The first check's confirmation was sent after it arrived, and named
    // broker 1 then: 7:1 was current within its request.
    assert_eq!(first, vec![(7, 1); ids.len()]);
    assert_eq!(brokers[1].requests(ApiKey::DescribeTransactions).len(), 2);
    assert_eq!(brokers[2].requests(ApiKey::DescribeTransactions).len(), 1);
}

#[tokio::test]
async fn a_lone_check_whose_confirming_broker_hangs_costs_a_hedge_not_the_window() {
    // Broker 1 coordinates "r"; broker 0 holds its first confirmation 10 s
    // (hung), broker 2 answers at once. A lone check whose confirmation
    // went to broker 0 is confirmed by the next round, at broker 2, once
    // the hedge delay passed: not after the 1.5 s window.
    let brokers = scripted_brokers(
        &[(7, 2), (7, 2), (7, 2)],
        Arc::new(AtomicUsize::new(1)),
        &[Duration::from_secs(10), Duration::ZERO, Duration::ZERO],
    )
    .await;
    let coordinator = Broker {
        id: 1,
        addr: brokers[1].addr.clone(),
    };
    // The first confirmation goes to 0 or 2 at random: a fresh client
    // each time, until one was sent to the hung broker.
    for _ in 0..20 {
        let client = client(&[&brokers[2].addr]);
        client.refresh_metadata(&[]).await.unwrap();
        client.state().learn(Lesson::CoordinatorFound {
            key: "r",
            broker: &coordinator,
        });
        let started = Instant::now();
        let answer = client.describe_transaction("r").await.unwrap().unwrap();
        let took = started.elapsed();
        assert_eq!((answer.producer_id, answer.producer_epoch), (7, 2));
        if !brokers[0].requests(ApiKey::FindCoordinator).is_empty() {
            assert!(
                took < Duration::from_secs(1),
                "the hung confirmation held the check {took:?}"
            );
            return;
        }
    }
    panic!("no confirmation went to the hung broker in 20 checks");
}

#[tokio::test]
async fn a_broker_that_hung_is_not_asked_to_confirm_again_while_two_others_can() {
    // Broker 1 coordinates "r"; broker 0 hangs from its first confirmation
    // on (every request but ApiVersions held a minute, as a stopped process
    // whose kernel still accepts), broker 2 answers. The rounds prefer a
    // confirming broker without batches of its own, which the hung one
    // always is; once a request to it timed out it must not be asked again
    // while brokers 1 and 2 can confirm, although its reconnect backoff
    // ends several times during the checks.
    let hung = Arc::new(AtomicBool::new(false));
    let hold = {
        let hung = hung.clone();
        Arc::new(move |header: &RequestHeader, body: &Bytes| {
            if is_confirmation(header, body) {
                hung.store(true, Ordering::SeqCst);
            }
            if hung.load(Ordering::SeqCst) {
                Duration::from_secs(60)
            } else {
                Duration::ZERO
            }
        }) as Delay
    };
    let at_once = || Arc::new(|_: &RequestHeader, _: &Bytes| Duration::ZERO) as Delay;
    let brokers = scripted_brokers_delayed(
        &[(7, 2), (7, 2), (7, 2)],
        Arc::new(AtomicUsize::new(1)),
        vec![hold, at_once(), at_once()],
    )
    .await;
    let confirmations_to_0 = || {
        brokers[0].requests(ApiKey::FindCoordinator).len()
            + brokers[0].requests(ApiKey::Metadata).len()
    };
    let mut config = ClientConfig::new([brokers[2].addr.as_str()]);
    config.request_timeout = Duration::from_millis(300);
    config.operation_timeout = Duration::from_secs(8);
    let client = KafkaClient::new(config).unwrap();
    client.refresh_metadata(&[]).await.unwrap();
    client.state().learn(Lesson::CoordinatorFound {
        key: "r",
        broker: &Broker {
            id: 1,
            addr: brokers[1].addr.clone(),
        },
    });
    // Lone checks until one's confirmation went to broker 0 (each goes to
    // 0 or 2 at random while 0 is sound), then past its request timeout.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !hung.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "no confirmation went to broker 0"
        );
        client.describe_transaction("r").await.unwrap().unwrap();
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let before = confirmations_to_0();
    let until = Instant::now() + Duration::from_secs(3);
    let mut checks = 0;
    while Instant::now() < until {
        let answer = client.describe_transaction("r").await.unwrap().unwrap();
        assert_eq!((answer.producer_id, answer.producer_epoch), (7, 2));
        checks += 1;
    }
    assert!(checks > 10, "only {checks} checks in 3 s");
    assert_eq!(
        confirmations_to_0() - before,
        0,
        "the hung broker was asked to confirm again ({checks} checks)"
    );
}

/// An address nothing listens on.
fn closed_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

#[tokio::test]
async fn a_refused_connection_says_so_even_while_its_broker_backs_off() {
    let addr = closed_port();
    let mut config = ClientConfig::new([addr.as_str()]);
    config.operation_timeout = Duration::from_millis(300);
    config.reconnect_backoff = Duration::from_secs(5);
    config.reconnect_backoff_max = Duration::from_secs(5);
    let client = KafkaClient::new(config).unwrap();
    let first = client.connection(&addr).await.unwrap_err().to_string();
    assert!(first.contains("refused"), "{first}");
    let second = client.connection(&addr).await.unwrap_err().to_string();
    assert!(
        second.contains("refused") && second.contains("next try in"),
        "within the backoff: {second}"
    );
    // What /readyz shows ("Kafka: <this>") after an operation gave up.
    let probe = krabka_coordination::cluster::Cluster::partitions(&client, "t")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        probe.contains("gave up") && probe.contains(&addr) && probe.contains("refused"),
        "{probe}"
    );
}

#[tokio::test]
async fn the_first_failure_per_address_is_a_warning_with_its_reason_and_repeats_are_debug() {
    let logs = Logs::capture();
    let addrs = [closed_port(), closed_port()];
    let mut config = ClientConfig::new(addrs.iter().map(String::as_str));
    config.reconnect_backoff = Duration::from_millis(1);
    config.reconnect_backoff_max = Duration::from_millis(1);
    let client = KafkaClient::new(config).unwrap();
    for _ in 0..4 {
        for addr in &addrs {
            until_unblocked(&client, addr).await;
            assert!(client.connection(addr).await.is_err());
        }
    }
    for addr in &addrs {
        let warnings = logs.lines("WARN", addr);
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert!(warnings[0].contains("refused"), "{}", warnings[0]);
        assert_eq!(logs.lines("DEBUG", &format!("addr=\"{addr}\"")).len(), 3);
    }
}

/// Counts the answers refused as stale, and records where each
/// confirmation went with how many ids.
#[derive(Debug, Default)]
struct Refusals(AtomicUsize, std::sync::Mutex<Vec<(String, usize)>>);

impl super::observe::RequestObserver for Refusals {
    fn observe(&self, _: &'static str, _: super::observe::Outcome, _: Duration) {}
    fn stale_answer(&self, _: super::observe::StaleReason) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn confirmation(&self, addr: &str, ids: usize) {
        self.1.lock().unwrap().push((addr.to_owned(), ids));
    }
}

/// Three brokers. Broker 1 (X) is cut off from the controller: its metadata
/// still has it leading `__transaction_state`-0 at epoch 4 (while
/// `behind`), and it names itself the coordinator of every id and answers
/// the deposed pair 7:1. Brokers 2 and 3 know broker 3 leads at epoch 5,
/// name it coordinator, and broker 3 answers 7:2.
async fn one_cut_off(behind: Arc<AtomicBool>) -> Vec<FakeBroker> {
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let mut brokers = Vec::new();
    for me in 1..=3 {
        let (addrs, behind) = (addrs.clone(), behind.clone());
        brokers.push(
            FakeBroker::start(Arc::new(move |header, body| {
                let addrs = addrs.lock().unwrap().clone();
                let list: Vec<(i32, &str)> =
                    (1..=3).zip(addrs.iter().map(String::as_str)).collect();
                let cut_off = me == 1 && behind.load(Ordering::SeqCst);
                let (leader, epoch) = if cut_off { (1, 4) } else { (3, 5) };
                let version = header.request_api_version;
                match ApiKey::try_from(header.request_api_key).unwrap() {
                    ApiKey::Metadata => {
                        let partitions = [(0, leader, epoch)];
                        let response = metadata(&list, Some(("__transaction_state", &partitions)));
                        Some(answer(header, &response))
                    }
                    ApiKey::FindCoordinator => {
                        let asked = request(version, body);
                        let named = leader as usize;
                        Some(answer(
                            header,
                            &naming(asked, |_| (leader, &addrs[named - 1])),
                        ))
                    }
                    ApiKey::DescribeTransactions => {
                        let epoch = if me == 1 { 1 } else { 2 };
                        Some(described(header, body, (7, epoch), "Empty"))
                    }
                    _ => None,
                }
            }))
            .await,
        );
    }
    *addrs.lock().unwrap() = brokers.iter().map(|b| b.addr.clone()).collect();
    brokers
}

#[tokio::test]
async fn a_broker_whose_metadata_is_behind_is_never_asked_to_look_up_or_confirm() {
    let behind = Arc::new(AtomicBool::new(true));
    let brokers = one_cut_off(behind.clone()).await;
    let (x, y) = (brokers[0].addr.clone(), brokers[1].addr.clone());
    let refusals = Arc::new(Refusals::default());
    let mut config = ClientConfig::new([x.as_str()]);
    config.request_timeout = Duration::from_secs(5);
    config.operation_timeout = Duration::from_secs(8);
    config.observer = Some(refusals.clone());
    let client = KafkaClient::new(config).unwrap();
    // Bootstrapped from X: its metadata is all the client knows ...
    client.refresh_metadata(&[]).await.unwrap();
    assert!(client.state().epochs().stale().is_empty());
    // ... until another broker names the newer leader: X was deposed.
    client
        .metadata_from(&y, vec!["__transaction_state".into()])
        .await
        .unwrap();
    assert_eq!(
        client
            .state()
            .epochs()
            .stale()
            .iter()
            .map(|(a, _)| a)
            .collect::<Vec<_>>(),
        [&x],
        "the deposed leader is stale"
    );
    let asked_before = brokers[0].requests(ApiKey::FindCoordinator).len();
    let ids: Vec<String> = (0..60).map(|i| format!("role-{i}")).collect();
    for id in &ids {
        let answer = client.describe_transaction(id).await.unwrap().unwrap();
        assert_eq!((answer.producer_id, answer.producer_epoch), (7, 2), "{id}");
    }
    // All at once: one batch, confirmed by a Metadata request of
    // `__transaction_state` (more than two ids).
    let deadline = Instant::now() + Duration::from_secs(8);
    let answers = client
        .describe_transactions(&ids, &|_| None, deadline)
        .await;
    for id in &ids {
        let answer = answers[id].as_ref().unwrap().as_ref().unwrap();
        assert_eq!((answer.producer_id, answer.producer_epoch), (7, 2), "{id}");
    }
    assert_eq!(
        brokers[0].requests(ApiKey::FindCoordinator).len(),
        asked_before,
        "no lookup or confirmation went to the stale broker"
    );
    let confirmations = refusals.1.lock().unwrap().clone();
    assert!(
        confirmations.iter().all(|(addr, _)| *addr != x),
        "a confirmation went to the stale broker: {confirmations:?}"
    );
    assert!(
        confirmations.iter().any(|(_, n)| *n == 1),
        "lone checks confirmed"
    );
    assert!(confirmations.iter().any(|(_, n)| *n > 2), "by Metadata too");
    assert!(brokers[0].requests(ApiKey::DescribeTransactions).is_empty());
    assert_eq!(refusals.0.load(Ordering::SeqCst), 0, "no answer refused");

    // Refreshes never take X's metadata, and probe it meanwhile; once it
    // has caught up, it is asked again.
    let probes = || brokers[0].requests(ApiKey::Metadata).len();
    let before = probes();
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        client.refresh_metadata(&[]).await.unwrap();
    }
    assert!(probes() > before, "the stale broker was probed");
    assert_eq!(client.state().epochs().stale().len(), 1, "still behind");
    behind.store(false, Ordering::SeqCst);
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        client.refresh_metadata(&[]).await.unwrap();
    }
    assert!(client.state().epochs().stale().is_empty(), "caught up");
}

#[tokio::test]
async fn a_connection_asks_the_cluster_id_first_and_answers_of_an_old_cluster_are_refused() {
    let brokers = Arc::new(std::sync::Mutex::new(Vec::new()));
    let coordinator = Arc::new(std::sync::Mutex::new((1, String::new())));
    let broker = answering(brokers.clone(), coordinator, Arc::default()).await;
    *brokers.lock().unwrap() = vec![(1, broker.addr.clone())];
    let client = client(&[&broker.addr]);
    let conn = client.connection(&broker.addr).await.unwrap();
    assert_eq!(conn.cluster_id(), Some("fake-cluster"));
    assert_eq!(client.cluster_id().as_deref(), Some("fake-cluster"));
    let first: Vec<ApiKey> = broker.seen.lock().unwrap().iter().map(|s| s.0).collect();
    assert_eq!(
        first,
        [ApiKey::Metadata],
        "the first request after ApiVersions"
    );
    // Another connection found another cluster behind the address: what
    // this one answers now is of the old cluster.
    client.state().learn(Lesson::ClusterId {
        addr: &broker.addr,
        id: Some("rebuilt".into()),
    });
    let request = kafka_protocol::messages::MetadataRequest::default();
    let refused = client
        .call_on(&conn, &request, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, KafkaError::ConnectionClosed { reason, .. } if reason.contains("another cluster")),
        "{refused}"
    );
    assert!(conn.is_closed());
    let again = client.connection(&broker.addr).await.unwrap();
    assert!(!Arc::ptr_eq(&conn, &again), "a new connection");
    assert_eq!(
        client.cluster_id().as_deref(),
        Some("fake-cluster"),
        "which asked again"
    );
}

/// Three brokers' addresses by id (1, 2, 3).
fn numbered(addrs: &[String]) -> [(i32, &str); 3] {
    [
        (1, addrs[0].as_str()),
        (2, addrs[1].as_str()),
        (3, addrs[2].as_str()),
    ]
}

/// Every asked topic with one partition led by `leader` at `epoch`.
fn leading(
    header: &kafka_protocol::messages::RequestHeader,
    body: Bytes,
    brokers: &[(i32, &str)],
    (leader, epoch): (i32, i32),
) -> Bytes {
    let asked: kafka_protocol::messages::MetadataRequest =
        request(header.request_api_version, body);
    let names: Vec<String> = asked
        .topics
        .unwrap_or_default()
        .into_iter()
        .filter_map(|t| t.name.map(|n| n.0.to_string()))
        .collect();
    let mut response = metadata(brokers, None);
    for name in names {
        let mut one = metadata(brokers, Some((name.as_str(), &[(0, leader, epoch)])));
        response.topics.append(&mut one.topics);
    }
    answer(header, &response)
}

/// A Fetch answer for partition 0: `code`, no records.
fn fetched(header: &kafka_protocol::messages::RequestHeader, body: Bytes, code: i16) -> Bytes {
    let asked: FetchRequest = request(header.request_api_version, body);
    let response = FetchResponse::default().with_responses(vec![
        FetchableTopicResponse::default()
            .with_topic(asked.topics[0].topic.clone())
            .with_partitions(vec![
                PartitionData::default()
                    .with_partition_index(0)
                    .with_error_code(code),
            ]),
    ]);
    answer(header, &response)
}

#[tokio::test]
async fn reads_of_a_deposed_leader_are_never_fresher_than_its_last_confirmation() {
    // Broker 1 leads t-0 at epoch 4 and, cut off from the controller, keeps
    // believing it (and serving reads at epoch 4). Brokers 2 and 3 confirm
    // it until they learn that broker 2 leads at epoch 5 (`moved`); they do
    // not answer metadata while `silent`; broker 2 serves reads at epoch 5
    // once `serving`.
    let moved = Arc::new(AtomicBool::new(false));
    let silent = Arc::new(AtomicBool::new(false));
    let serving = Arc::new(AtomicBool::new(false));
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let script = |me: i32| {
        let (moved, silent, serving, addrs) = (
            moved.clone(),
            silent.clone(),
            serving.clone(),
            addrs.clone(),
        );
        Arc::new(
            move |header: &kafka_protocol::messages::RequestHeader, body: Bytes| {
                let addrs = addrs.lock().unwrap().clone();
                let brokers = numbered(&addrs);
                let believed = if me != 1 && moved.load(Ordering::SeqCst) {
                    (2, 5)
                } else {
                    (1, 4)
                };
                match ApiKey::try_from(header.request_api_key).unwrap() {
                    ApiKey::Metadata if me != 1 && silent.load(Ordering::SeqCst) => None,
                    ApiKey::Metadata => Some(leading(header, body, &brokers, believed)),
                    ApiKey::Fetch if believed.0 == me => {
                        let asked: FetchRequest = request(header.request_api_version, body.clone());
                        let epoch = asked.topics[0].partitions[0].current_leader_epoch;
                        match epoch.cmp(&believed.1) {
                            std::cmp::Ordering::Less => Some(fetched(header, body, 74)),
                            std::cmp::Ordering::Greater => Some(fetched(header, body, 75)),
                            _ if me == 2 && !serving.load(Ordering::SeqCst) => None,
                            _ => Some(fetched(header, body, 0)),
                        }
                    }
                    ApiKey::Fetch => Some(fetched(header, body, 6)),
                    _ => None,
                }
            },
        ) as super::fake::Script
    };
    let one = FakeBroker::start(script(1)).await;
    let two = FakeBroker::start(script(2)).await;
    let three = FakeBroker::start(script(3)).await;
    *addrs.lock().unwrap() = vec![one.addr.clone(), two.addr.clone(), three.addr.clone()];
    let mut config = ClientConfig::new([one.addr.as_str(), two.addr.as_str()]);
    config.request_timeout = Duration::from_secs(1);
    let client = KafkaClient::new(config).unwrap();
    let mut reads = client.tail("t", vec![0], Duration::from_millis(200));
    let as_of = |update: krabka_coordination::cluster::Tailed| match update {
        krabka_coordination::cluster::Tailed::Read { complete_as_of, .. } => complete_as_of,
        krabka_coordination::cluster::Tailed::Failed { .. } => None,
    };
    let five = Duration::from_secs(5);
    // Confirmed by broker 2: fresh.
    let started = Instant::now();
    loop {
        let update = tokio::time::timeout(five, reads.recv()).await.unwrap();
        if as_of(update.unwrap()).is_some() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "never confirmed"
        );
    }
    // The leader is deposed, and for a while no other broker can say so:
    // broker 1's reads go on, none claiming a later instant.
    let deposed = Instant::now();
    silent.store(true, Ordering::SeqCst);
    moved.store(true, Ordering::SeqCst);
    let mut unconfirmed = 0;
    while deposed.elapsed() < Duration::from_millis(1500) {
        let Ok(Some(update)) = tokio::time::timeout(Duration::from_millis(200), reads.recv()).await
        else {
            continue;
        };
        unconfirmed += 1;
        if let Some(at) = as_of(update) {
            assert!(
                at <= deposed,
                "a read complete {:?} after the move",
                at - deposed
            );
        }
    }
    assert!(
        unconfirmed >= 3,
        "{unconfirmed} reads of the deposed leader"
    );
    // Once another broker answers, the deposed leader is stale and no
    // longer read.
    silent.store(false, Ordering::SeqCst);
    let told = Instant::now();
    while !client.state().epochs().is_stale(&one.addr) {
        assert!(
            told.elapsed() < Duration::from_secs(5),
            "never seen deposed"
        );
        let _ = tokio::time::timeout(Duration::from_millis(100), reads.recv()).await;
    }
    // A poll sent before may still come back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let polls = one.requests(ApiKey::Fetch).len();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(one.requests(ApiKey::Fetch).len(), polls, "no longer read");
    // The new leader serves: fresh again.
    serving.store(true, Ordering::SeqCst);
    let resumed = Instant::now();
    loop {
        let update = tokio::time::timeout(five, reads.recv()).await.unwrap();
        if as_of(update.unwrap()).is_some_and(|at| at > deposed) {
            break;
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(5),
            "never fresh again"
        );
    }
    eprintln!(
        "{unconfirmed} reads of the deposed leader, none fresher than the move; seen deposed {:?} after another broker could tell; fresh again {:?} after the new leader served",
        told.elapsed(),
        resumed.elapsed()
    );
}

#[tokio::test]
async fn a_read_has_its_leader_confirmed_by_another_broker_first() {
    // Broker 1, cut off, still leads t-0 at epoch 4 as far as it knows, and
    // it is all the client was told; brokers 2 and 3 know broker 2 leads
    // at epoch 5.
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let script = |me: i32| {
        let addrs = addrs.clone();
        Arc::new(
            move |header: &kafka_protocol::messages::RequestHeader, body: Bytes| {
                let addrs = addrs.lock().unwrap().clone();
                let brokers = numbered(&addrs);
                let believed = if me == 1 { (1, 4) } else { (2, 5) };
                match ApiKey::try_from(header.request_api_key).unwrap() {
                    ApiKey::Metadata => Some(leading(header, body, &brokers, believed)),
                    ApiKey::ListOffsets => {
                        use kafka_protocol::messages::ListOffsetsResponse;
                        use kafka_protocol::messages::list_offsets_response::{
                            ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
                        };
                        let response = ListOffsetsResponse::default().with_topics(vec![
                            ListOffsetsTopicResponse::default().with_partitions(vec![
                                ListOffsetsPartitionResponse::default()
                                    .with_partition_index(0)
                                    .with_offset(0),
                            ]),
                        ]);
                        Some(answer(header, &response))
                    }
                    _ => None,
                }
            },
        ) as super::fake::Script
    };
    let brokers = [
        FakeBroker::start(script(1)).await,
        FakeBroker::start(script(2)).await,
        FakeBroker::start(script(3)).await,
    ];
    *addrs.lock().unwrap() = brokers.iter().map(|b| b.addr.clone()).collect();
    let client = client(&[&brokers[0].addr]);
    client.refresh_metadata(&["t"]).await.unwrap();
    let read = client.read_committed("t", 0, 0).await.unwrap();
    assert_eq!(read.next_offset, 0);
    assert!(
        brokers[0].requests(ApiKey::ListOffsets).is_empty(),
        "the cut-off broker's log was not read"
    );
    assert_eq!(
        brokers[1].requests(ApiKey::ListOffsets).len(),
        1,
        "the leader's was"
    );
    assert!(client.state().epochs().is_stale(&brokers[0].addr));
}

/// `count` brokers; partition p of `__transaction_state` (three of them)
/// is led by broker p, so broker p coordinates the ids `partition_for`
/// maps to p (FindCoordinator says the same). Every describe is answered
/// with the pair 7:2; broker `b` holds each answer as `delay(b)` says.
async fn partition_leaders(count: usize, delay: impl Fn(usize) -> Delay) -> Vec<FakeBroker> {
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let mut brokers = Vec::new();
    for b in 0..count {
        let addrs = addrs.clone();
        let script = Arc::new(move |header: &RequestHeader, body: Bytes| {
            let addrs = addrs.lock().unwrap().clone();
            let version = header.request_api_version;
            match ApiKey::try_from(header.request_api_key).unwrap() {
                ApiKey::Metadata => {
                    let list: Vec<(i32, &str)> =
                        (0..).zip(addrs.iter().map(String::as_str)).collect();
                    let leaders = [(0, 0, 1), (1, 1, 1), (2, 2, 1)];
                    let topic = Some(("__transaction_state", &leaders[..]));
                    Some(answer(header, &metadata(&list, topic)))
                }
                ApiKey::FindCoordinator => {
                    let asked = request(version, body);
                    Some(answer(
                        header,
                        &naming(asked, |key| {
                            let p = super::coordinator::partition_for(key, 3);
                            (p as i32, addrs[p].as_str())
                        }),
                    ))
                }
                ApiKey::DescribeTransactions => Some(described(header, body, (7, 2), "Empty")),
                _ => None,
            }
        });
        brokers.push(FakeBroker::start_delayed(script, delay(b)).await);
    }
    *addrs.lock().unwrap() = brokers.iter().map(|b| b.addr.clone()).collect();
    brokers
}

/// Tells `client` that broker `p` of [`partition_leaders`] coordinates `id`.
fn learn_coordinator(client: &KafkaClient, brokers: &[FakeBroker], id: &str, p: usize) {
    let broker = Broker {
        id: p as i32,
        addr: brokers[p].addr.clone(),
    };
    client.state().learn(Lesson::CoordinatorFound {
        key: id,
        broker: &broker,
    });
}

#[tokio::test]
async fn a_round_waits_for_its_describes_so_the_next_takes_every_batch() {
    // Brokers 0-2 each coordinate a third of the ids (partition p of
    // `__transaction_state` led by broker p) and answer describes in 60, 66
    // and 72 ms; broker 3 coordinates nothing, so it confirms every round,
    // in 40 ms. A round that went on as soon as its confirmation returned
    // would find every describe still in flight, and the describes,
    // returning one by one, went in rounds of one or two batches: 0.67
    // confirmations per describe (three runs). A round that waits for its
    // describes too (as long again as its confirmation took, at most) takes
    // the batches of the two coordinators that answered first; the third's
    // checks, answered in the same instant, queue just after it: 0.51.
    let brokers = partition_leaders(4, |b| {
        Arc::new(move |header: &RequestHeader, body: &Bytes| {
            if header.request_api_key == ApiKey::DescribeTransactions as i16 {
                Duration::from_millis(60 + 6 * b as u64)
            } else if is_confirmation(header, body) {
                Duration::from_millis(40)
            } else {
                Duration::ZERO
            }
        }) as Delay
    })
    .await;
    let client = client(&[&brokers[3].addr]);
    client.refresh_metadata(&[]).await.unwrap();
    // Eight ids per coordinator, each checked in a loop of its own.
    let mut ids: Vec<(String, usize)> = Vec::new();
    for n in 0.. {
        let id = format!("role-{n}");
        let p = super::coordinator::partition_for(&id, 3);
        if ids.iter().filter(|(_, q)| *q == p).count() < 8 {
            learn_coordinator(&client, &brokers, &id, p);
            ids.push((id, p));
        }
        if ids.len() == 24 {
            break;
        }
    }
    let until = Instant::now() + Duration::from_secs(2);
    let loops = ids.into_iter().map(|(id, _)| {
        let client = client.clone();
        async move {
            let mut checks = 0;
            while Instant::now() < until {
                let answer = client.describe_transaction(&id).await.unwrap().unwrap();
                assert_eq!((answer.producer_id, answer.producer_epoch), (7, 2));
                checks += 1;
            }
            checks
        }
    });
    let checks: usize = futures::future::join_all(loops).await.into_iter().sum();
    let count = |f: &dyn Fn(&FakeBroker) -> usize| brokers.iter().map(f).sum::<usize>();
    let describes = count(&|b| b.requests(ApiKey::DescribeTransactions).len());
    let confirmations = count(&|b| {
        b.requests(ApiKey::FindCoordinator).len()
            + b.requests(ApiKey::Metadata)
                .into_iter()
                .filter(|(v, body)| {
                    let asked: MetadataRequest = request(*v, body.clone());
                    asked.topics.is_some_and(|t| !t.is_empty())
                })
                .count()
    });
    assert!(checks > 200, "only {checks} checks");
    assert!(
        confirmations * 5 < describes * 3,
        "{confirmations} confirmations for {describes} describes ({checks} checks)"
    );
}

#[tokio::test]
async fn a_hung_broker_whose_backoff_ended_is_asked_after_busy_live_ones() {
    // Broker 0 accepts and answers nothing (a SIGSTOPped broker); 1 and 2
    // answer Metadata, a request of the topic "busy" after 100 ms. Once 0
    // failed and its backoff ended, a request any broker can answer goes
    // to 1 or 2 even while both have a request in flight (as Java's
    // `leastLoadedNode` prefers a connected node to one it must connect
    // to): not to 0, which would cost it the hedge delay.
    let hung = FakeBroker::start(Arc::new(|_, _| None)).await;
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let mut live = Vec::new();
    for _ in 0..2 {
        let addrs = addrs.clone();
        let script = Arc::new(move |header: &RequestHeader, _body: Bytes| {
            let addrs = addrs.lock().unwrap().clone();
            let list: Vec<(i32, &str)> = (0..).zip(addrs.iter().map(String::as_str)).collect();
            (header.request_api_key == ApiKey::Metadata as i16)
                .then(|| answer(header, &metadata(&list, None)))
        });
        let delay = Arc::new(|header: &RequestHeader, body: &Bytes| {
            let asked: MetadataRequest = request(header.request_api_version, body.clone());
            let busy = asked.topics.is_some_and(|t| {
                t.iter()
                    .any(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == "busy"))
            });
            if busy {
                Duration::from_millis(100)
            } else {
                Duration::ZERO
            }
        }) as Delay;
        live.push(FakeBroker::start_delayed(script, delay).await);
    }
    *addrs.lock().unwrap() = vec![
        hung.addr.clone(),
        live[0].addr.clone(),
        live[1].addr.clone(),
    ];
    let mut config = ClientConfig::new([live[0].addr.as_str()]);
    config.request_timeout = Duration::from_millis(300);
    config.connect_timeout = Duration::from_millis(300);
    let client = KafkaClient::new(config).unwrap();
    client.refresh_metadata(&[]).await.unwrap();
    assert!(client.connection(&hung.addr).await.is_err());
    until_unblocked(&client, &hung.addr).await;
    let asked_hung = || hung.requests(ApiKey::Metadata).len();
    let before = asked_hung();
    for broker in &live {
        let (client, addr) = (client.clone(), broker.addr.clone());
        tokio::spawn(async move {
            let busy = super::metadata::build_metadata(vec!["busy".to_owned()]);
            client.send_to(&addr, &busy).await
        });
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let request = super::metadata::build_metadata(Vec::new());
    let (_, from) = client.send_any(&request, &[]).await.unwrap();
    assert_ne!(from, hung.addr);
    assert_eq!(asked_hung(), before, "the hung broker was asked again");
}

#[tokio::test]
async fn a_lone_describe_of_a_hung_coordinator_holds_no_other_check() {
    // Partition p of `__transaction_state` is led by broker p; broker 1
    // holds its describes a minute (hung), the others answer at once. A
    // lone check of an id of broker 1 goes out with its confirmation, which
    // returns; its describe must not hold the round loop until the request
    // timeout: a check of an id of broker 2 sent meanwhile is answered at
    // once.
    let brokers = partition_leaders(3, |b| {
        Arc::new(move |header: &RequestHeader, _: &Bytes| {
            if b == 1 && header.request_api_key == ApiKey::DescribeTransactions as i16 {
                Duration::from_secs(60)
            } else {
                Duration::ZERO
            }
        }) as Delay
    })
    .await;
    let mut config = ClientConfig::new([brokers[0].addr.as_str()]);
    config.request_timeout = Duration::from_secs(3);
    config.operation_timeout = Duration::from_secs(8);
    let client = KafkaClient::new(config).unwrap();
    client.refresh_metadata(&[]).await.unwrap();
    let id_of = |p: usize| {
        (0..)
            .map(|n| format!("role-{n}"))
            .find(|id| super::coordinator::partition_for(id, 3) == p)
            .unwrap()
    };
    let (hung, live) = (id_of(1), id_of(2));
    learn_coordinator(&client, &brokers, &hung, 1);
    learn_coordinator(&client, &brokers, &live, 2);
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move { client.describe_transaction(&hung).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let answer = client.describe_transaction(&live).await.unwrap().unwrap();
    let took = started.elapsed();
    assert_eq!((answer.producer_id, answer.producer_epoch), (7, 2));
    assert!(
        took < Duration::from_secs(1),
        "a check of a live coordinator waited {took:?} behind a hung one's describe"
    );
    waiting.abort();
}
