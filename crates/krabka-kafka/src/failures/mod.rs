//! The client under broker failure, against scripted brokers (the fast
//! tier; the broker tier kills and hangs real ones in tests/broker/cluster.rs):
//! routing and reconnects (`routing`), coordinator lookups (`lookups`),
//! the describes' confirmations (`confirmations`), partition reads
//! (`reads`) and answers that declare more than they hold (`lies`). The
//! scripted clusters they share are here.

mod confirmations;
mod lies;
mod lookups;
mod reads;
mod routing;

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

pub(super) use super::client::KafkaClient;
use super::config::{Broker, ClientConfig};
use super::error::KafkaError;
use super::state::Lesson;
use crate::fake::{Delay, FakeBroker, answer, described, metadata, naming, request};
use krabka_coordination::testkit::Logs;

pub(super) fn client(bootstrap: &[&str]) -> KafkaClient {
    let mut config = ClientConfig::new(bootstrap.iter().copied());
    config.request_timeout = Duration::from_secs(5);
    config.operation_timeout = Duration::from_secs(8);
    // Set, so reads do not ask the scripted brokers for the topic's
    // max.message.bytes (they answer no DescribeConfigs).
    config.max_decompressed_batch_bytes = Some(crate::DEFAULT_MAX_BATCH_BYTES);
    KafkaClient::new(config).unwrap()
}

/// A broker that answers Metadata with `brokers` and FindCoordinator with
/// `coordinator` for every key, counting the lookups.
pub(super) async fn answering(
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

/// Waits out `addr`'s reconnect backoff; panics when it lasts past 5 s
/// (a backoff that never ends fails the test instead of hanging it).
pub(super) async fn until_unblocked(client: &KafkaClient, addr: &str) {
    let waited = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(blocked) = client.state().nodes().blocked(addr) {
            tokio::time::sleep(blocked.left).await;
        }
    });
    waited.await.expect("the reconnect backoff ends within 5 s");
}

/// True for a confirmation: a FindCoordinator (these tests look nothing
/// up), or a Metadata request of `__transaction_state`.
pub(super) fn is_confirmation(header: &RequestHeader, body: &Bytes) -> bool {
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

/// The confirmations `broker` received (and the refreshes, which ask for
/// the same topic).
pub(super) fn confirmations_at(broker: &FakeBroker) -> usize {
    broker
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
}

/// Brokers 0, 1, … answering DescribeTransactions with `pairs[broker]`
/// for every id, and FindCoordinator (and Metadata of the one partition of
/// `__transaction_state`) with the broker `named` holds as the coordinator
/// of every id, as it stands when the request is read; broker `b` holds
/// its answer to its first confirmation `first_confirmation[b]` long.
pub(super) async fn scripted_brokers(
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
pub(super) async fn scripted_brokers_delayed(
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
pub(super) async fn two_brokers(pairs: [(i64, i16); 2]) -> Vec<FakeBroker> {
    scripted_brokers(&pairs, Arc::new(AtomicUsize::new(1)), &[Duration::ZERO; 2]).await
}

/// Broker 1 coordinates `ids` with the pair 7:1. A first check's
/// confirmation goes to broker 0 or 2, which names broker 1 and holds its
/// answer 600 ms. Meanwhile broker 1 is deposed: broker 2 mints 7:2 and
/// every broker names it; broker 1, paused and back, still answers 7:1. A
/// second check arrives while the first confirmation, which carries the ids
/// and names broker 1, is still in flight: it must wait for a confirmation
/// sent after it arrived, which names broker 2.
pub(super) async fn stale_answer_confirmed_before_the_check_arrived(ids: &[&str]) {
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
    client.metadata().refresh_metadata(&[]).await.unwrap();
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
            .describer()
            .describe_transactions(&ids, &|_, _| None, deadline)
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

/// Describes `ids` together (within 8 s) and asserts every answer is `pair`.
pub(super) async fn all_described_as(client: &KafkaClient, ids: &[String], pair: (i64, i16)) {
    let deadline = Instant::now() + Duration::from_secs(8);
    let answers = client
        .describer()
        .describe_transactions(ids, &|_, _| None, deadline)
        .await;
    for id in ids {
        let d = answers[id].as_ref().unwrap().as_ref().unwrap();
        assert_eq!((d.producer_id, d.producer_epoch), pair, "{id}");
    }
}

/// An address nothing listens on.
pub(super) fn closed_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// Counts the answers refused as stale, and records where each
/// confirmation went with how many ids.
#[derive(Debug, Default)]
pub(super) struct Refusals(AtomicUsize, std::sync::Mutex<Vec<(String, usize)>>);

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
pub(super) async fn one_cut_off(behind: Arc<AtomicBool>) -> Vec<FakeBroker> {
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

/// Three brokers' addresses by id (1, 2, 3).
pub(super) fn numbered(addrs: &[String]) -> [(i32, &str); 3] {
    [
        (1, addrs[0].as_str()),
        (2, addrs[1].as_str()),
        (3, addrs[2].as_str()),
    ]
}

/// Every asked topic with one partition led by `leader` at `epoch`.
pub(super) fn leading(
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

/// A ListOffsets answer: partition 0 of the topic at `offset`.
pub(super) fn listed(header: &kafka_protocol::messages::RequestHeader, offset: i64) -> Bytes {
    use kafka_protocol::messages::ListOffsetsResponse;
    use kafka_protocol::messages::list_offsets_response::{
        ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
    };
    let response = ListOffsetsResponse::default().with_topics(vec![
        ListOffsetsTopicResponse::default().with_partitions(vec![
            ListOffsetsPartitionResponse::default()
                .with_partition_index(0)
                .with_offset(offset),
        ]),
    ]);
    answer(header, &response)
}

/// A Fetch answer for partition 0: `code`, no records.
pub(super) fn fetched(
    header: &kafka_protocol::messages::RequestHeader,
    body: Bytes,
    code: i16,
) -> Bytes {
    fetched_as(
        header,
        body,
        PartitionData::default()
            .with_partition_index(0)
            .with_error_code(code),
    )
}

/// A Fetch answer of `partition` for the topic asked.
pub(super) fn fetched_as(
    header: &kafka_protocol::messages::RequestHeader,
    body: Bytes,
    partition: PartitionData,
) -> Bytes {
    let asked: FetchRequest = request(header.request_api_version, body);
    let response = FetchResponse::default().with_responses(vec![
        FetchableTopicResponse::default()
            .with_topic(asked.topics[0].topic.clone())
            .with_partitions(vec![partition]),
    ]);
    answer(header, &response)
}

/// `count` brokers; partition p of `__transaction_state` (three of them)
/// is led by broker p, so broker p coordinates the ids `partition_for`
/// maps to p (FindCoordinator says the same). Every describe is answered
/// with the pair 7:2; broker `b` holds each answer as `delay(b)` says.
pub(super) async fn partition_leaders(
    count: usize,
    delay: impl Fn(usize) -> Delay,
) -> Vec<FakeBroker> {
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let mut brokers = Vec::new();
    for b in 0..count {
        let script = leaders_script(addrs.clone());
        brokers.push(FakeBroker::start_delayed(script, delay(b)).await);
    }
    *addrs.lock().unwrap() = brokers.iter().map(|b| b.addr.clone()).collect();
    brokers
}

/// [`partition_leaders`] across a network whose round trip is
/// `round_trip` (answers pipelined, not held).
pub(super) async fn partition_leaders_across(
    count: usize,
    round_trip: Duration,
) -> Vec<FakeBroker> {
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let mut brokers = Vec::new();
    for _ in 0..count {
        let script = leaders_script(addrs.clone());
        brokers.push(FakeBroker::start_across(script, round_trip).await);
    }
    *addrs.lock().unwrap() = brokers.iter().map(|b| b.addr.clone()).collect();
    brokers
}

/// The script of [`partition_leaders`], the brokers' addresses in `addrs`.
fn leaders_script(addrs: Arc<std::sync::Mutex<Vec<String>>>) -> crate::fake::Script {
    Arc::new(move |header: &RequestHeader, body: Bytes| {
        let addrs = addrs.lock().unwrap().clone();
        let version = header.request_api_version;
        match ApiKey::try_from(header.request_api_key).unwrap() {
            ApiKey::Metadata => {
                let list: Vec<(i32, &str)> = (0..).zip(addrs.iter().map(String::as_str)).collect();
                let leaders = [(0, 0, 1), (1, 1, 1), (2, 2, 1)];
                let topic = Some(("__transaction_state", &leaders[..]));
                Some(answer(header, &metadata(&list, topic)))
            }
            ApiKey::FindCoordinator => {
                let asked = request(version, body);
                Some(answer(
                    header,
                    &naming(asked, |key| {
                        let p = crate::describe::partition_for(key, 3);
                        (p as i32, addrs[p].as_str())
                    }),
                ))
            }
            ApiKey::DescribeTransactions => Some(described(header, body, (7, 2), "Empty")),
            _ => None,
        }
    })
}

/// Tells `client` that broker `p` of [`partition_leaders`] coordinates `id`.
pub(super) fn learn_coordinator(client: &KafkaClient, brokers: &[FakeBroker], id: &str, p: usize) {
    let broker = Broker {
        id: p as i32,
        addr: brokers[p].addr.clone(),
    };
    client.state().learn(Lesson::CoordinatorFound {
        key: id,
        broker: &broker,
    });
}
