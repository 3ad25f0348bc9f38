use super::*;
use crate::versions::Versions;
use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
use kafka_protocol::protocol::decode_request_header_from_buffer;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

const MAX: usize = 64 * 1024;

fn connection(stream: DuplexStream) -> Connection {
    Connection::start(
        stream,
        "fake:9092",
        ConnSettings {
            client_id: "test".into(),
            max_frame_bytes: MAX,
        },
    )
    .with_versions(Versions::pinned_max())
}

/// Reads one request frame; returns (correlation id, api version).
async fn read_request(broker: &mut DuplexStream) -> (i32, i16) {
    let size = broker.read_i32().await.expect("size");
    let mut body = BytesMut::zeroed(size as usize);
    broker.read_exact(&mut body).await.expect("body");
    let mut body = body.freeze();
    let header = decode_request_header_from_buffer(&mut body).expect("header");
    (header.correlation_id, header.request_api_version)
}

/// Writes a Metadata response whose cluster id names `tag`.
async fn respond(broker: &mut DuplexStream, id: i32, version: i16, tag: &str) {
    let response =
        MetadataResponse::default().with_cluster_id(Some(StrBytes::from_string(tag.to_owned())));
    let mut buf = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(id)
        .encode(&mut buf, MetadataResponse::header_version(version))
        .expect("header");
    response.encode(&mut buf, version).expect("body");
    broker.write_i32(buf.len() as i32).await.expect("size");
    broker.write_all(&buf).await.expect("write");
}

fn tag(response: &MetadataResponse) -> String {
    response
        .cluster_id
        .as_ref()
        .map(|c| c.to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn pipelined_responses_reach_their_callers_in_any_order() {
    let (client, mut broker) = tokio::io::duplex(MAX);
    let conn = connection(client);
    let timeout = Duration::from_secs(5);
    let request = MetadataRequest::default();
    let calls = futures::future::join3(
        conn.call(&request, timeout),
        conn.call(&request, timeout),
        conn.call(&request, timeout),
    );
    let fake = async {
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(read_request(&mut broker).await);
        }
        // All three are in flight on one connection; answer in reverse.
        for (id, version) in seen.iter().rev() {
            respond(&mut broker, *id, *version, &format!("c{id}")).await;
        }
        seen.iter().map(|(id, _)| *id).collect::<Vec<_>>()
    };
    let ((a, b, c), ids) = tokio::join!(calls, fake);
    let got: Vec<String> = [a, b, c]
        .into_iter()
        .map(|r| tag(&r.expect("answered").0))
        .collect();
    let want: Vec<String> = ids.iter().map(|id| format!("c{id}")).collect();
    assert_eq!(got, want);
    assert!(!conn.is_closed());
}

#[tokio::test]
async fn a_dropped_connection_fails_every_request_in_flight_at_once() {
    let (client, mut broker) = tokio::io::duplex(MAX);
    let conn = connection(client);
    let timeout = Duration::from_secs(30);
    let request = MetadataRequest::default();
    let started = tokio::time::Instant::now();
    let calls = futures::future::join(conn.call(&request, timeout), conn.call(&request, timeout));
    let fake = async {
        read_request(&mut broker).await;
        read_request(&mut broker).await;
        drop(broker);
    };
    let ((a, b), ()) = tokio::join!(calls, fake);
    for result in [a, b] {
        match result {
            Err(KafkaError::ConnectionClosed { addr, .. }) => assert_eq!(addr, "fake:9092"),
            other => panic!("expected ConnectionClosed, got {other:?}"),
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "failed at once, not at the timeout"
    );
    assert!(conn.is_closed());
    // Later calls fail fast too.
    assert!(conn.call(&request, timeout).await.is_err());
}

#[tokio::test]
async fn an_oversized_frame_is_rejected_and_poisons_the_connection() {
    let (client, mut broker) = tokio::io::duplex(MAX);
    let conn = connection(client);
    let request = MetadataRequest::default();
    let call = conn.call(&request, Duration::from_secs(5));
    let fake = async {
        read_request(&mut broker).await;
        broker.write_i32(MAX as i32 + 1).await.expect("size");
        broker
    };
    let (result, _broker) = tokio::join!(call, fake);
    match result {
        Err(KafkaError::FrameTooLarge { size, max, .. }) => {
            assert_eq!(size, MAX as i64 + 1);
            assert_eq!(max, MAX);
        }
        other => panic!("expected FrameTooLarge, got {other:?}"),
    }
    assert!(conn.is_closed());
}

#[tokio::test]
async fn a_silent_broker_times_out_and_poisons_the_connection() {
    let (client, mut broker) = tokio::io::duplex(MAX);
    let conn = connection(client);
    let request = MetadataRequest::default();
    let call = conn.call(&request, Duration::from_millis(100));
    let fake = async {
        read_request(&mut broker).await;
        broker
    };
    let (result, _broker) = tokio::join!(call, fake);
    assert!(
        matches!(
            result,
            Err(KafkaError::Timeout {
                api: "Metadata",
                ..
            })
        ),
        "{result:?}"
    );
    assert!(conn.is_closed());
}

#[tokio::test]
async fn a_request_abandoned_halfway_through_its_write_poisons_the_connection() {
    // The broker reads nothing, so the pipe of 16 bytes fills mid-frame.
    let (client, _broker) = tokio::io::duplex(16);
    let conn = connection(client);
    let request = MetadataRequest::default().with_topics(Some(vec![
        kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
            .with_name(Some(StrBytes::from_static_str("a-topic-name").into()));
        4
    ]));
    let call = conn.call(&request, Duration::from_secs(5));
    let gave_up = tokio::time::timeout(Duration::from_millis(50), call).await;
    assert!(gave_up.is_err(), "the write cannot finish: {gave_up:?}");
    assert!(
        conn.is_closed(),
        "the next frame would follow half of this one"
    );
    assert!(matches!(
        conn.call(&request, Duration::from_secs(5)).await,
        Err(KafkaError::ConnectionClosed { .. })
    ));
}

#[tokio::test]
async fn a_broker_that_stops_reading_times_the_request_out() {
    // Nothing reads the pipe of 16 bytes: the write itself cannot end.
    let (client, _broker) = tokio::io::duplex(16);
    let conn = connection(client);
    let request = MetadataRequest::default();
    let result = tokio::time::timeout(
        Duration::from_secs(5),
        conn.call(&request, Duration::from_millis(100)),
    )
    .await
    .expect("the request timeout covers the write");
    assert!(
        matches!(
            result,
            Err(KafkaError::Timeout {
                api: "Metadata",
                ..
            })
        ),
        "{result:?}"
    );
    assert!(conn.is_closed());
}

#[tokio::test]
async fn a_late_answer_to_an_abandoned_request_is_ignored() {
    let (client, mut broker) = tokio::io::duplex(MAX);
    let conn = connection(client);
    let request = MetadataRequest::default();
    // The first caller gives up before the answer (dropped future).
    let first = conn.call(&request, Duration::from_secs(5));
    let (id, version) = tokio::select! {
        _ = first => panic!("no answer yet"),
        seen = read_request(&mut broker) => seen,
    };
    let second = conn.call(&request, Duration::from_secs(5));
    let fake = async {
        let (id2, v2) = read_request(&mut broker).await;
        respond(&mut broker, id, version, "stale").await;
        respond(&mut broker, id2, v2, "fresh").await;
    };
    let (result, ()) = tokio::join!(second, fake);
    assert_eq!(tag(&result.expect("answered").0), "fresh");
}

/// The count a compact array, string or bytes field declares: u32::MAX - 1.
const COMPACT_HUGE: [u8; 5] = [0xff, 0xff, 0xff, 0xff, 0x0f];
/// The count a classic array declares: i32::MAX.
const HUGE: [u8; 4] = [0x7f, 0xff, 0xff, 0xff];

/// Whether a request was answered, and whether its connection closed.
type Outcome = (Result<(), KafkaError>, bool);

/// Sends a default `R` at `version` and answers it with a response header
/// and `body`.
async fn answered_with<R: Request + Default>(version: i16, body: &[u8]) -> Outcome {
    let (client, mut broker) = tokio::io::duplex(MAX);
    let conn = connection(client);
    let request = R::default();
    let call = conn.send(&request, version, Duration::from_secs(5));
    let fake = async {
        let (id, _) = read_request(&mut broker).await;
        let mut frame = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(id)
            .encode(&mut frame, R::Response::header_version(version))
            .expect("header");
        frame.extend_from_slice(body);
        broker.write_i32(frame.len() as i32).await.expect("size");
        broker.write_all(&frame).await.expect("write");
        broker
    };
    let (result, _broker) = tokio::join!(call, fake);
    let closed = conn.is_closed();
    if closed {
        // Later calls fail at once, without writing.
        let again = conn
            .send(&R::default(), version, Duration::from_secs(5))
            .await;
        assert!(matches!(again, Err(KafkaError::ConnectionClosed { .. })));
    }
    (result.map(drop), closed)
}

/// Every answer the client decodes, at the version it sends, declaring a
/// count of 2^31 or 2^32 elements (or bytes) where its first one stands:
/// before the patched kafka-protocol, the array ones aborted the process
/// (an allocation failure); now each is an error that closes the
/// connection, and its caller may retry.
#[tokio::test]
async fn an_answer_declaring_a_huge_count_closes_the_connection_and_is_retried() {
    use kafka_protocol::messages::*;
    let t = [0u8; 4]; // throttle time
    let e = [0u8; 2]; // error code
    let cases: Vec<(&str, Outcome)> = vec![
        (
            "ApiVersions",
            answered_with::<ApiVersionsRequest>(3, &[&e[..], &COMPACT_HUGE].concat()).await,
        ),
        (
            "Metadata",
            answered_with::<MetadataRequest>(12, &[&t[..], &COMPACT_HUGE].concat()).await,
        ),
        (
            "FindCoordinator",
            answered_with::<FindCoordinatorRequest>(6, &[&t[..], &COMPACT_HUGE].concat()).await,
        ),
        (
            "DescribeTransactions",
            answered_with::<DescribeTransactionsRequest>(0, &[&t[..], &COMPACT_HUGE].concat())
                .await,
        ),
        ("Fetch", {
            // throttle, error code, session id, then the topics.
            let body = [&t[..], &e, &[0; 4], &COMPACT_HUGE].concat();
            answered_with::<FetchRequest>(12, &body).await
        }),
        (
            "ListOffsets",
            answered_with::<ListOffsetsRequest>(8, &[&t[..], &COMPACT_HUGE].concat()).await,
        ),
        (
            "Produce",
            answered_with::<ProduceRequest>(11, &COMPACT_HUGE).await,
        ),
        (
            "AddPartitionsToTxn",
            answered_with::<AddPartitionsToTxnRequest>(3, &[&t[..], &COMPACT_HUGE].concat()).await,
        ),
        (
            "CreateTopics",
            answered_with::<CreateTopicsRequest>(7, &[&t[..], &COMPACT_HUGE].concat()).await,
        ),
        (
            "DescribeConfigs",
            answered_with::<DescribeConfigsRequest>(4, &[&t[..], &COMPACT_HUGE].concat()).await,
        ),
        (
            "SaslHandshake",
            answered_with::<SaslHandshakeRequest>(1, &[&e[..], &HUGE].concat()).await,
        ),
        ("SaslAuthenticate", {
            // error code, a null error message, then the auth bytes.
            let body = [&e[..], &[0], &COMPACT_HUGE].concat();
            answered_with::<SaslAuthenticateRequest>(2, &body).await
        }),
        // No array in these two: their tagged fields declare the count.
        ("InitProducerId", {
            let body = [&t[..], &e, &[0; 8], &[0; 2], &COMPACT_HUGE].concat();
            answered_with::<InitProducerIdRequest>(5, &body).await
        }),
        ("EndTxn", {
            let body = [&t[..], &e, &COMPACT_HUGE].concat();
            answered_with::<EndTxnRequest>(4, &body).await
        }),
    ];
    assert_eq!(
        cases.len(),
        crate::versions::PINNED.len() + 1,
        "every API the client sends, and ApiVersions"
    );
    for (api, (result, closed)) in cases {
        let error = result.expect_err(api);
        let text = error.to_string();
        assert!(
            matches!(error, KafkaError::ConnectionClosed { .. })
                && text.contains(&format!("its {api} v"))
                && text.contains("answer does not decode"),
            "{api}: {text}"
        );
        let no_array = ["SaslAuthenticate", "InitProducerId", "EndTxn"].contains(&api);
        assert!(
            no_array || text.contains("elements declared"),
            "{api}: {text}"
        );
        assert!(error.is_retriable(), "{api}: {text}");
        assert!(closed, "{api}: the connection stays open");
    }
}

/// A frame's buffer grows with what arrives: a peer that declares 64 MiB
/// and sends 100 KiB costs about that, not the 64 MiB (read at once into a
/// buffer of the declared size before).
#[tokio::test]
async fn a_frame_is_allocated_as_its_bytes_arrive_not_as_declared() {
    let declared = 64 << 20;
    let (mut peer, mut ours) = tokio::io::duplex(MAX);
    let sent = async move {
        peer.write_all(&vec![7u8; 100 * 1024]).await.expect("write");
        drop(peer);
    };
    let mut body = BytesMut::new();
    let (read, ()) = tokio::join!(read_body(&mut ours, declared, &mut body), sent);
    assert_eq!(read.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
    assert_eq!(body.len(), 100 * 1024);
    assert!(
        body.capacity() <= 256 * 1024,
        "{} bytes reserved",
        body.capacity()
    );
    // A whole frame still arrives whole.
    let (mut peer, mut ours) = tokio::io::duplex(MAX);
    let frame: Vec<u8> = (0..3_000_000u32).map(|i| i as u8).collect();
    let expected = frame.clone();
    let sent = async move { peer.write_all(&frame).await.expect("write") };
    let mut body = BytesMut::new();
    let (read, ()) = tokio::join!(read_body(&mut ours, expected.len(), &mut body), sent);
    read.expect("read");
    assert_eq!(&body[..], &expected[..]);
}

#[tokio::test(start_paused = true)]
async fn a_connection_is_answering_while_its_broker_was_heard_from_within_the_silence() {
    let (client, mut broker) = tokio::io::duplex(MAX);
    let conn = connection(client);
    let answering = conn.answering();
    assert!(answering.now(), "just opened");
    async fn ask(conn: &Connection, broker: &mut DuplexStream) {
        let answer = async {
            let (id, version) = read_request(broker).await;
            respond(broker, id, version, "c").await;
        };
        let request = MetadataRequest::default();
        let (answered, ()) = tokio::join!(conn.call(&request, Duration::from_secs(30)), answer);
        answered.unwrap();
    }
    ask(&conn, &mut broker).await;
    tokio::time::sleep(SILENCE - Duration::from_millis(10)).await;
    assert!(
        answering.now(),
        "heard from a moment less than the silence ago"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Idle, or hanging: nothing heard for the silence.
    assert!(!answering.now(), "nothing heard for the silence");
    ask(&conn, &mut broker).await;
    assert!(answering.now(), "heard from again");
    // The host slept through the silence: tokio's clock did not move, yet
    // nothing was heard for it.
    krabka_coordination::time::simulate_suspend(SILENCE + Duration::from_millis(10));
    assert!(!answering.now(), "a suspend as long as the silence");
    ask(&conn, &mut broker).await;
    assert!(answering.now(), "heard from after the suspend");
    drop(conn);
    assert!(!answering.now(), "a connection gone");
}
