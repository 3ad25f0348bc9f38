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
