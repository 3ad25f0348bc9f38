//! The server's limits over real sockets, with the service over the
//! in-memory cluster: slow and idle clients are disconnected, a stalled body
//! is refused at the request timeout, oversized paths, queries, headers and
//! bodies are refused, the connection count is bounded. (None of this asks
//! Kafka anything; the broker tier does not repeat it.)

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{ServeError, run};
use crate::service::ServiceConfig;
use crate::testkit::{app_state, eventually, service_config};
use crate::transport::memory::MemoryCluster;

/// `run` on a free port of 127.0.0.1 over an in-memory cluster.
struct Served {
    addr: String,
    stop: watch::Sender<bool>,
    done: JoinHandle<Result<(), ServeError>>,
}

async fn serve(config: ServiceConfig) -> Served {
    let state = app_state(&MemoryCluster::new(4), config);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = watch::channel(false);
    let done = tokio::spawn(run(listener, state, stopped));
    Served { addr, stop, done }
}

impl Served {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Shuts the server down; it must end cleanly within 5 s.
    async fn stop(self) {
        self.stop.send_replace(true);
        let ended = tokio::time::timeout(Duration::from_secs(5), self.done)
            .await
            .expect("the server stops within 5 s");
        ended.unwrap().unwrap();
    }
}

/// Reads until the peer closes; returns what arrived and when it closed,
/// or `None` when it stayed open for `within`.
async fn until_closed(stream: &mut TcpStream, within: Duration) -> Option<(String, Duration)> {
    let started = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = within.checked_sub(started.elapsed())?;
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => {
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
    let mut config = service_config();
    config.http.header_timeout = Duration::from_millis(800);
    let served = serve(config).await;

    // A client that sends half a request line and stalls (slowloris).
    let mut slow = TcpStream::connect(&served.addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let (_, after) = until_closed(&mut slow, Duration::from_secs(5))
        .await
        .expect("slow client cut off");
    assert!(after < Duration::from_secs(3), "closed after {after:?}");

    // A keep-alive connection that goes idle after one request.
    let mut idle = TcpStream::connect(&served.addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (answer, after) = until_closed(&mut idle, Duration::from_secs(5))
        .await
        .expect("idle connection closed");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(after < Duration::from_secs(3), "closed after {after:?}");
    served.stop().await;
}

#[tokio::test]
async fn a_stalled_body_is_408_within_the_request_timeout() {
    let mut config = service_config();
    config.http.request_timeout = Duration::from_secs(1);
    let served = serve(config).await;
    let mut stream = TcpStream::connect(&served.addr).await.unwrap();
    stream
        .write_all(b"POST /authority/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n[{\"role\"")
        .await
        .unwrap();
    let (answer, after) = until_closed(&mut stream, Duration::from_secs(10))
        .await
        .expect("answered and closed");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.contains("application/problem+json"),
        "a problem: {answer}"
    );
    assert!(after < Duration::from_secs(3), "answered after {after:?}");
    served.stop().await;
}

#[tokio::test]
async fn oversized_paths_queries_headers_and_bodies_are_refused() {
    let mut config = service_config();
    config.http.max_body_bytes = 4096;
    let served = serve(config).await;
    let client = reqwest::Client::new();

    let body = format!(
        "[{}]",
        vec!["{\"role\":\"r\",\"token\":\"1:1\"}"; 400].join(",")
    );
    let response = client
        .post(served.url("/authority/check"))
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
        .get(served.url(&format!("/roles/{role}/authority?token=1:1")))
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert!(matches!(status, Ok(414 | 431 | 400) | Err(_)), "{status:?}");

    let token = "1".repeat(60_000);
    let response = client
        .get(served.url(&format!("/roles/r/authority?token={token}")))
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
        .get(served.url("/healthz"))
        .header("x-big", headers)
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert!(
        matches!(status, Ok(431 | 400) | Err(_)),
        "1 MiB of headers: {status:?}"
    );
    served.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_limit_are_closed() {
    let mut config = service_config();
    config.http.max_connections = 4;
    let served = serve(config).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(&served.addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        held.push(s);
    }
    let mut extra = TcpStream::connect(&served.addr).await.unwrap();
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
    // Served again once connections are freed (their tasks end a moment
    // after the sockets close).
    eventually(Duration::from_secs(5), "served again", async || {
        let mut s = TcpStream::connect(&served.addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let (answer, _) = until_closed(&mut s, Duration::from_secs(3)).await?;
        answer.starts_with("HTTP/1.1 200").then_some(())
    })
    .await;
    served.stop().await;
}

#[tokio::test]
async fn batch_checks_past_the_limit_wait_with_their_bodies_unread() {
    let mut config = service_config();
    config.http.max_concurrent_batches = 1;
    config.http.request_timeout = Duration::from_secs(10);
    let served = serve(config).await;
    let body = br#"[{"role":"orders","token":"1:0"}]"#;
    let head = format!(
        "POST /authority/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );

    // The first batch holds the only permit while its body is on its way.
    let mut first = TcpStream::connect(&served.addr).await.unwrap();
    first.write_all(head.as_bytes()).await.unwrap();
    first.write_all(&body[..5]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    // A second, whole batch waits for it: no answer while the first is open.
    let mut second = TcpStream::connect(&served.addr).await.unwrap();
    second.write_all(head.as_bytes()).await.unwrap();
    second.write_all(body).await.unwrap();
    assert!(
        until_closed(&mut second, Duration::from_millis(700))
            .await
            .is_none(),
        "the second batch was answered while the first held the permit"
    );

    // The first completes; then the second is answered too.
    first.write_all(&body[5..]).await.unwrap();
    let (answer, _) = until_closed(&mut first, Duration::from_secs(5))
        .await
        .expect("the first batch is answered");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (answer, _) = until_closed(&mut second, Duration::from_secs(5))
        .await
        .expect("the second batch is answered once the permit is free");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    served.stop().await;
}

#[tokio::test]
async fn shutting_down_every_answer_closes_its_keep_alive_connection() {
    let mut config = service_config();
    config.http.shutdown_delay = Duration::from_millis(1500);
    let served = serve(config).await;
    eventually(Duration::from_secs(5), "ready", async || {
        let r = reqwest::get(served.url("/readyz")).await.ok()?;
        (r.status() == 200).then_some(())
    })
    .await;
    let mut kept = TcpStream::connect(&served.addr).await.unwrap();
    let request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    kept.write_all(request).await.unwrap();
    let mut buf = [0u8; 1024];
    let n = kept.read(&mut buf).await.unwrap();
    let before = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
    assert!(!before.contains("connection: close"), "{before}");

    // Within the shutdown delay the same connection is still served, and
    // told to go: its client reconnects to a pod still in the endpoints
    // rather than racing this connection's close when the delay ends.
    served.stop.send_replace(true);
    tokio::time::sleep(Duration::from_millis(100)).await;
    kept.write_all(request).await.unwrap();
    let (answer, after) = until_closed(&mut kept, Duration::from_secs(1))
        .await
        .expect("closed after its answer, within the delay");
    let answer = answer.to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(after < Duration::from_millis(500), "closed after {after:?}");
    served.stop().await;
}
