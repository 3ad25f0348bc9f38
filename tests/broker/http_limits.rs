//! Limits of the HTTP endpoint: slow and idle clients are disconnected,
//! oversized paths, queries and bodies are refused, the connection count is
//! bounded.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::support::broker::{bootstrap, topic};
use crate::support::service::{config, start};

fn host(url: &str) -> &str {
    url.trim_start_matches("http://")
}

/// Reads until the peer closes; returns what arrived and when it closed.
async fn until_closed(stream: &mut TcpStream, within: Duration) -> Option<(String, Duration)> {
    let started = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = within.checked_sub(started.elapsed())?;
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => {
                return Some((
                    String::from_utf8_lossy(&out).into_owned(),
                    started.elapsed(),
                ));
            }
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn slow_and_idle_connections_are_closed() {
    let topic = topic(1).await;
    let mut config = config(&bootstrap(), &topic);
    config.http.header_timeout = Duration::from_millis(800);
    let service = start(config).await;

    // A client that sends half a request line and stalls (slowloris).
    let mut slow = TcpStream::connect(host(&service.url)).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let (_, after) = until_closed(&mut slow, Duration::from_secs(5))
        .await
        .expect("slow client cut off");
    eprintln!("slow headers: closed after {after:?}");
    assert!(after < Duration::from_secs(3));

    // A keep-alive connection that goes idle after one request.
    let mut idle = TcpStream::connect(host(&service.url)).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (answer, after) = until_closed(&mut idle, Duration::from_secs(5))
        .await
        .expect("idle connection closed");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    eprintln!("idle keep-alive: closed after {after:?}");
    assert!(after < Duration::from_secs(3));
}

#[tokio::test]
async fn a_slow_body_is_refused_within_the_request_timeout() {
    let topic = topic(1).await;
    let mut config = config(&bootstrap(), &topic);
    config.http.request_timeout = Duration::from_secs(1);
    let service = start(config).await;
    let mut stream = TcpStream::connect(host(&service.url)).await.unwrap();
    stream
        .write_all(b"POST /authority/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n[{\"role\"")
        .await
        .unwrap();
    let (answer, after) = until_closed(&mut stream, Duration::from_secs(10))
        .await
        .expect("answered and closed");
    eprintln!(
        "slow body: {} after {after:?}",
        answer.lines().next().unwrap_or("")
    );
    assert!(
        answer.starts_with("HTTP/1.1 4") || answer.starts_with("HTTP/1.1 5"),
        "{answer}"
    );
    assert!(!answer.starts_with("HTTP/1.1 200"));
    assert!(after < Duration::from_secs(4));
}

#[tokio::test]
async fn oversized_paths_queries_and_bodies_are_refused() {
    let topic = topic(1).await;
    let mut config = config(&bootstrap(), &topic);
    config.http.max_body_bytes = 4096;
    let service = start(config).await;
    let client = reqwest::Client::new();

    let body = format!(
        "[{}]",
        vec!["{\"role\":\"r\",\"token\":\"1:1\"}"; 400].join(",")
    );
    let response = client
        .post(format!("{}/authority/check", service.url))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );

    let role = "r".repeat(70_000);
    let status = client
        .get(format!("{}/roles/{role}/authority?token=1:1", service.url))
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert!(
        matches!(status, Ok(414) | Ok(431) | Ok(400) | Err(_)),
        "{status:?}"
    );

    let token = "1".repeat(60_000);
    let response = client
        .get(format!("{}/roles/r/authority?token={token}", service.url))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        400,
        "an overlong token is a 400 naming it"
    );

    let headers = "x".repeat(1 << 20);
    let status = client
        .get(format!("{}/healthz", service.url))
        .header("x-big", headers)
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert!(
        matches!(status, Ok(431) | Ok(400) | Err(_)),
        "1 MiB of headers: {status:?}"
    );
}

#[tokio::test]
async fn connections_beyond_the_limit_are_closed() {
    let topic = topic(1).await;
    let mut config = config(&bootstrap(), &topic);
    config.http.max_connections = 4;
    let service = start(config).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(host(&service.url)).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        held.push(s);
    }
    let mut extra = TcpStream::connect(host(&service.url)).await.unwrap();
    let _ = extra
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let (answer, _) = until_closed(&mut extra, Duration::from_secs(3))
        .await
        .expect("closed at once");
    assert!(
        answer.is_empty(),
        "the fifth connection is not served: {answer}"
    );
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let response = reqwest::get(format!("{}/healthz", service.url))
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        200,
        "served again once connections are freed"
    );
}
