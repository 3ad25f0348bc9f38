//! Brokers that lie about lengths: an answer declaring far more elements
//! than its frame holds costs its connection (the patched kafka-protocol
//! refuses the count before allocating it; `connection` closes), and the
//! request is retried as after any broken connection: by another broker
//! when any can answer, on a new connection to the one that must.

use bytes::BytesMut;
use kafka_protocol::messages::{
    DescribeTransactionsResponse, FetchResponse, ListOffsetsResponse, MetadataResponse,
    ResponseHeader,
};
use kafka_protocol::protocol::{Encodable, HeaderVersion};

use super::*;
use crate::batch::tests::batch;

/// u32::MAX - 1 elements, as a compact array declares them.
const HUGE: [u8; 5] = [0xff, 0xff, 0xff, 0xff, 0x0f];

/// The answer to `header` of a response type `R` whose body is its
/// throttle time (and `after_throttle`), then a compact array declaring
/// [`HUGE`] elements, and nothing more.
fn lie<R: HeaderVersion>(header: &RequestHeader, after_throttle: &[u8]) -> Bytes {
    let mut frame = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(header.correlation_id)
        .encode(&mut frame, R::header_version(header.request_api_version))
        .unwrap();
    frame.extend_from_slice(&[0; 4]);
    frame.extend_from_slice(after_throttle);
    frame.extend_from_slice(&HUGE);
    frame.freeze()
}

/// True for the Metadata request every new connection opens with (the
/// cluster id: no topic): counts connections.
fn opens_connection(api: ApiKey, version: i16, body: &Bytes) -> bool {
    api == ApiKey::Metadata && {
        let asked: MetadataRequest = request(version, body.clone());
        asked.topics.is_some_and(|t| t.is_empty())
    }
}

fn connections(broker: &FakeBroker) -> usize {
    broker
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(api, version, body)| opens_connection(*api, *version, body))
        .count()
}

#[tokio::test]
async fn a_huge_count_from_one_broker_is_answered_by_another() {
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let liar: Arc<std::sync::Mutex<String>> = Arc::default();
    let mut brokers = Vec::new();
    for me in 0..2 {
        let (addrs, liar) = (addrs.clone(), liar.clone());
        let script = Arc::new(move |header: &RequestHeader, body: Bytes| {
            let addrs = addrs.lock().unwrap().clone();
            let list: Vec<(i32, &str)> = (0..).zip(addrs.iter().map(String::as_str)).collect();
            let asked: MetadataRequest = request(header.request_api_version, body.clone());
            let lies = addrs[me] == *liar.lock().unwrap();
            match asked.topics {
                Some(topics) if !topics.is_empty() && lies => {
                    Some(lie::<MetadataResponse>(header, &[]))
                }
                _ => Some(leading(header, body, &list, (0, 1))),
            }
        });
        brokers.push(FakeBroker::start(script).await);
    }
    *addrs.lock().unwrap() = brokers.iter().map(|b| b.addr.clone()).collect();
    *liar.lock().unwrap() = brokers[0].addr.clone();
    let (liar, honest) = (&brokers[0], &brokers[1]);
    // Equally idle brokers are tried in random order: rounds until the liar
    // was asked for a topic's metadata.
    for round in 0..64 {
        let client = client(&[&liar.addr, &honest.addr]);
        let asked_before = liar.requests(ApiKey::Metadata).len();
        client.metadata().refresh_metadata(&["t"]).await.unwrap();
        let leader = client.metadata().leader("t", 0).await.unwrap();
        assert_eq!(
            leader.broker.addr, liar.addr,
            "round {round}: the honest answer"
        );
        if liar.requests(ApiKey::Metadata).len() - asked_before < 2 {
            continue; // the honest broker was asked first
        }
        // The liar's connection was dropped: its broker backs off with the
        // reason (logged, and what /readyz shows while it lasts), and a new
        // connection is opened after it.
        let blocked = client
            .state()
            .nodes()
            .blocked(&liar.addr)
            .expect("backs off");
        assert!(
            blocked
                .reason
                .contains("Metadata v12 answer does not decode")
                && blocked.reason.contains("4294967294 elements declared"),
            "{}",
            blocked.reason
        );
        let opened = connections(liar);
        until_unblocked(&client, &liar.addr).await;
        client.connection(&liar.addr).await.unwrap();
        assert_eq!(connections(liar), opened + 1, "a new connection");
        return;
    }
    panic!("the lying broker was never asked for the topic's metadata");
}

#[tokio::test]
async fn a_huge_count_in_a_fetch_or_describe_answer_is_retried_on_a_new_connection() {
    let lied: Arc<std::sync::Mutex<std::collections::HashSet<ApiKey>>> = Arc::default();
    let addr: Arc<std::sync::Mutex<String>> = Arc::default();
    let (told, at) = (lied.clone(), addr.clone());
    let broker = FakeBroker::start(Arc::new(move |header: &RequestHeader, body: Bytes| {
        let me = at.lock().unwrap().clone();
        let list = [(0, me.as_str())];
        let version = header.request_api_version;
        // Each API's first answer lies; the next is honest.
        let first = |api: ApiKey| told.lock().unwrap().insert(api);
        match ApiKey::try_from(header.request_api_key).unwrap() {
            ApiKey::Metadata => Some(leading(header, body, &list, (0, 1))),
            ApiKey::ListOffsets if first(ApiKey::ListOffsets) => {
                Some(lie::<ListOffsetsResponse>(header, &[]))
            }
            ApiKey::ListOffsets => Some(listed(header, 1)),
            // After the throttle time: the error code and the session id.
            ApiKey::Fetch if first(ApiKey::Fetch) => {
                Some(lie::<FetchResponse>(header, &[0, 0, 0, 0, 0, 0]))
            }
            ApiKey::Fetch => {
                let records = batch(
                    0,
                    1,
                    -1,
                    false,
                    None,
                    kafka_protocol::records::Compression::None,
                );
                let data = PartitionData::default()
                    .with_partition_index(0)
                    .with_high_watermark(1)
                    .with_last_stable_offset(1)
                    .with_records(Some(records));
                Some(fetched_as(header, body, data))
            }
            ApiKey::FindCoordinator => {
                let asked = request(version, body);
                Some(answer(header, &naming(asked, |_| (0, me.as_str()))))
            }
            ApiKey::DescribeTransactions if first(ApiKey::DescribeTransactions) => {
                Some(lie::<DescribeTransactionsResponse>(header, &[]))
            }
            ApiKey::DescribeTransactions => Some(described(header, body, (7, 3), "Empty")),
            _ => None,
        }
    }))
    .await;
    *addr.lock().unwrap() = broker.addr.clone();
    let client = client(&[&broker.addr]);

    let read = client.reader().read_committed("t", 0, 0).await.unwrap();
    let offsets: Vec<i64> = read.records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0], "read after the lies");
    let described = client
        .describer()
        .describe_transaction("orders")
        .await
        .unwrap();
    let pair = described.map(|d| (d.producer_id, d.producer_epoch));
    assert_eq!(pair, Some((7, 3)));

    assert_eq!(broker.requests(ApiKey::ListOffsets).len(), 2);
    assert_eq!(broker.requests(ApiKey::Fetch).len(), 2);
    assert_eq!(broker.requests(ApiKey::DescribeTransactions).len(), 2);
    // Counted by their first request, which asks the cluster's id: the
    // connections each describe's confirmation opens for itself (one
    // broker) ask none, and are not counted.
    assert_eq!(connections(&broker), 4, "each lie cost its connection");
}
