//! The binary as an operator starts it, without Kafka (the fast tier):
//! configuration refused with exit status 2 naming the flag, before any port
//! is bound; the port bound before anything talks to Kafka (`/healthz` at
//! once, `/readyz` saying why not ready, SIGTERM obeyed at once, a taken
//! port refused at once with one cause); SIGHUP not fatal; plain logs when
//! they go to a file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_krabka-authority"));
    // Nothing from the caller's environment decides these tests.
    for (key, _) in std::env::vars() {
        if key.starts_with("KRABKA_") {
            command.env_remove(key);
        }
    }
    command
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `serve` with `args`; returns the exit status and stderr. The
/// service logs "serving" (at info) as soon as its port is bound: a refusal
/// must come before it.
fn refused(args: &[&str]) -> (i32, String) {
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let out = bin()
        .args([
            "serve",
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--listen",
            &listen,
        ])
        .args(args)
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !stderr.contains("serving"),
        "{args:?}: the port was bound before the refusal: {stderr}"
    );
    (out.status.code().unwrap_or(-1), stderr)
}

#[test]
fn unusable_settings_exit_2_naming_the_flag() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let empty = dir.join("empty");
    std::fs::write(&empty, "# no token here\n").unwrap();
    // A line no Authorization header can carry: malformed (an empty tokens
    // file is a revocation, and starts).
    let malformed = dir.join("malformed");
    std::fs::write(&malformed, "two words\n").unwrap();
    let missing = dir.join("missing");
    let (empty, malformed, missing) = (
        empty.to_str().unwrap(),
        malformed.to_str().unwrap(),
        missing.to_str().unwrap(),
    );
    let cases: &[(&[&str], &str)] = &[
        (&["--header-timeout", "300000000000y"], "--header-timeout"),
        (&["--request-timeout", "300000000000y"], "--request-timeout"),
        (
            &["--max-connections", "18446744073709551615"],
            "--max-connections",
        ),
        (
            &["--kafka-operation-timeout", "300000000000y"],
            "--kafka-operation-timeout",
        ),
        (
            &["--kafka-request-timeout", "300000000000y"],
            "--kafka-request-timeout",
        ),
        (&["--api-tokens-file", missing], "--api-tokens-file"),
        (&["--api-tokens-file", malformed], "--api-tokens-file"),
        (
            &[
                "--kafka-security-protocol",
                "ssl",
                "--kafka-tls-ca-file",
                missing,
            ],
            "--kafka-tls-ca-file",
        ),
        (
            &[
                "--kafka-security-protocol",
                "ssl",
                "--kafka-tls-ca-file",
                empty,
            ],
            "--kafka-tls-ca-file",
        ),
        (&["--protect-readyz"], "--api-tokens-file"),
    ];
    for (args, flag) in cases {
        let (code, stderr) = refused(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(
            stderr.contains(flag),
            "{args:?} does not name {flag}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args(["-s", name, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// `GET path` on the port: the whole answer, `None` when nothing answers.
fn get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    Some(answer)
}

fn healthz(port: u16) -> bool {
    get(port, "/healthz").is_some_and(|a| a.starts_with("HTTP/1.1 200"))
}

/// Waits for the child to exit, at most `limit`; its status, `None` if it
/// was still running.
fn exit_within(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if started.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A Kafka that never answers: the kernel accepts connections into the
/// backlog of a listener nobody serves (as with a hung broker), so every
/// request waits for its timeout.
fn silent_kafka() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

/// `serve` on `port` against `bootstrap`, with the chart's shutdown delay
/// and long Kafka timeouts, so that waiting on Kafka would show.
fn serve_against(bootstrap: &str, port: u16, log: &std::path::Path) -> Served {
    Served(
        bin()
            .args(["serve", "--bootstrap-servers", bootstrap, "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .args([
                "--kafka-request-timeout",
                "30s",
                "--kafka-operation-timeout",
                "60s",
                "--shutdown-delay",
                "5s",
            ])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// Whatever Kafka does (refuses, never answers, has no address), the port
/// is bound at once: `/healthz` answers 200 within a second of the start,
/// `/readyz` answers 503 saying the service is starting and why (the OS's
/// reason as soon as the client has it), and
/// SIGTERM stops it within a second (a service that was never ready has
/// nothing to drain and skips the shutdown delay).
#[test]
fn the_port_answers_at_once_and_sigterm_stops_at_once_whatever_kafka_does() {
    let (_silent, silent) = silent_kafka();
    for bootstrap in ["127.0.0.1:1", silent.as_str(), "no-such-host.invalid:9092"] {
        let port = free_port();
        let log = std::env::temp_dir().join(format!(
            "krabka-process-start-{}-{port}.log",
            std::process::id()
        ));
        let started = Instant::now();
        let mut served = serve_against(bootstrap, port, &log);
        while !healthz(port) {
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{bootstrap}: /healthz did not answer 200 within 1 s: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let healthy_after = started.elapsed();
        let ready = get(port, "/readyz").unwrap();
        assert!(ready.starts_with("HTTP/1.1 503"), "{bootstrap}: {ready}");
        // Anyone may ask /readyz: it says the service is starting, and the
        // bootstrap address only in the log line of the request id given.
        assert!(
            ready.contains(r#""reason":"starting: "#) && !ready.contains(bootstrap),
            "{bootstrap}: /readyz does not say it is starting, or names the address: {ready}"
        );
        // The OS's reason is known as soon as the client has it, long before
        // the Kafka operation (60 s here) gives up.
        let cause = match bootstrap {
            "127.0.0.1:1" => Some("Connection refused"),
            b if b.starts_with("no-such-host") => Some("failed to lookup address"),
            _ => None,
        };
        if let Some(cause) = cause {
            let mut ready = String::new();
            while !ready.contains(r#""reason":"starting: cannot reach Kafka""#) {
                assert!(
                    started.elapsed() < Duration::from_secs(3),
                    "{bootstrap}: /readyz does not say it cannot reach Kafka within 3 s: {ready}"
                );
                std::thread::sleep(Duration::from_millis(50));
                ready = get(port, "/readyz").unwrap_or_default();
            }
            assert!(!ready.contains(cause), "{ready}");
            let id = ready
                .split(r#""requestId":""#)
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or_else(|| panic!("no request id: {ready}"));
            let mut logged = String::new();
            while !logged.lines().any(|l| l.contains(id) && l.contains(cause)) {
                assert!(
                    started.elapsed() < Duration::from_secs(4),
                    "{bootstrap}: no log line of request {id} says {cause:?}: {logged}"
                );
                std::thread::sleep(Duration::from_millis(20));
                logged = std::fs::read_to_string(&log).unwrap_or_default();
            }
        }
        let stopping = Instant::now();
        signal(&served.0, "TERM");
        let status = exit_within(&mut served.0, Duration::from_secs(1));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        let status = status
            .unwrap_or_else(|| panic!("{bootstrap}: still running 1 s after SIGTERM: {text}"));
        assert!(status.success(), "{bootstrap}: {status}: {text}");
        eprintln!(
            "{bootstrap}: /healthz 200 after {healthy_after:?}; SIGTERM to exit {:?}",
            stopping.elapsed()
        );
    }
}

/// A port that is taken stops the service at once, with status 2 and one
/// message that says the cause once.
#[test]
fn a_taken_port_exits_2_at_once_saying_why_once() {
    let (_silent, silent) = silent_kafka();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let log = std::env::temp_dir().join(format!(
        "krabka-process-taken-{}-{port}.log",
        std::process::id()
    ));
    let started = Instant::now();
    let mut served = serve_against(&silent, port, &log);
    let status = exit_within(&mut served.0, Duration::from_secs(1));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let status = status.unwrap_or_else(|| panic!("still running after 1 s: {text}"));
    assert_eq!(status.code(), Some(2), "{text}");
    let errors: Vec<&str> = text.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "one message: {text}");
    assert!(
        errors[0].contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{text}"
    );
    assert_eq!(
        errors[0].matches("Address already in use").count(),
        1,
        "the cause once: {text}"
    );
    eprintln!(
        "taken port: exit 2 after {:?}: {}",
        started.elapsed(),
        errors[0]
    );
}

#[test]
fn sighup_keeps_serving_sigterm_stops_and_logs_to_a_file_are_plain() {
    let port = free_port();
    let log = std::env::temp_dir().join(format!("krabka-process-{}.log", std::process::id()));
    let mut served = Served(
        bin()
            .args(["serve", "--bootstrap-servers", "127.0.0.1:1", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    while !healthz(port) {
        assert!(started.elapsed() < Duration::from_secs(20), "never served");
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(&served.0, "HUP");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        served.0.try_wait().unwrap().is_none(),
        "SIGHUP stopped the service"
    );
    assert!(healthz(port), "not serving after SIGHUP");
    signal(&served.0, "TERM");
    let status = loop {
        if let Some(status) = served.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "SIGTERM did not stop it"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert!(text.contains("SIGHUP"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "colour codes in a log file: {text}"
    );
}

/// `request` sent as bytes on a new connection: the whole answer.
fn raw(port: u16, request: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = stream.write_all(request);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// A request head hyper cannot take (a 100,000-digit token, headers over
/// its buffer, a request line with a space in the path) is refused before
/// any route, by hyper itself: still a problem naming the part at fault and
/// the fix, never a bare status with an empty body.
#[test]
fn requests_refused_before_routing_get_a_problem_too() {
    let port = free_port();
    let log = std::env::temp_dir().join(format!(
        "krabka-process-heads-{}-{port}.log",
        std::process::id()
    ));
    let _served = serve_against("127.0.0.1:1", port, &log);
    let started = Instant::now();
    while !healthz(port) {
        assert!(started.elapsed() < Duration::from_secs(5), "not serving");
        std::thread::sleep(Duration::from_millis(10));
    }
    let token = format!("1{}:1", "0".repeat(100_000));
    let long_uri = format!("GET /roles/orders/authority?token={token} HTTP/1.1\r\nHost: t\r\n\r\n");
    let big_header = format!(
        "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(500_000)
    );
    for (request, status, field) in [
        (long_uri.as_bytes(), "414", "uri"),
        (big_header.as_bytes(), "431", "headers"),
        (
            &b"GET /he althz HTTP/1.1\r\nHost: t\r\n\r\n"[..],
            "400",
            "request",
        ),
        (
            &b"GET /healthz HTTP/1.1\r\nHo st: t\r\n\r\n"[..],
            "400",
            "request",
        ),
    ] {
        let answer = raw(port, request);
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{head}");
        assert!(
            head.contains("content-type: application/problem+json"),
            "{head}"
        );
        let problem: serde_json::Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("{status}: not JSON ({e}): {body:?}"));
        assert_eq!(
            problem["status"].as_u64().map(|s| s.to_string()).as_deref(),
            Some(status)
        );
        assert_eq!(problem["field"], field, "{body}");
        assert!(body.ends_with("}\n"), "{body:?}");
    }
    // The service still answers on new connections.
    assert!(healthz(port));
    let _ = std::fs::remove_file(&log);
}

/// The API tokens file broken while the service runs: said once at error
/// with the file and the line (never the token), and the token read before
/// is refused.
#[test]
fn a_tokens_file_broken_while_serving_is_said_at_error_and_refuses_all() {
    let port = free_port();
    let temp = tempfile::tempdir().unwrap();
    let tokens = temp.path().join("tokens");
    std::fs::write(&tokens, "alpha\n").unwrap();
    let log = temp.path().join("serve.log");
    let _served = Served(
        bin()
            .args(["serve", "--bootstrap-servers", "127.0.0.1:1", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--api-tokens-file")
            .arg(&tokens)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    while !healthz(port) {
        assert!(started.elapsed() < Duration::from_secs(20), "never served");
        std::thread::sleep(Duration::from_millis(50));
    }
    let metrics = |token: &str| {
        raw(
            port,
            format!("GET /metrics HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
    };
    assert!(metrics("alpha").starts_with("HTTP/1.1 200"));
    std::fs::write(&tokens, "alpha\nbeta gamma\n").unwrap();
    let mut text = String::new();
    while !text.contains("API tokens file unusable") {
        assert!(
            started.elapsed() < Duration::from_secs(25),
            "not said within a second or so: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
        text = std::fs::read_to_string(&log).unwrap_or_default();
    }
    let said: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("API tokens file unusable"))
        .collect();
    assert_eq!(said.len(), 1, "{said:#?}");
    assert!(
        said[0].contains("ERROR") && said[0].contains("line 2"),
        "{}",
        said[0]
    );
    assert!(
        !said[0].contains("gamma"),
        "a token is never logged: {}",
        said[0]
    );
    assert!(metrics("alpha").starts_with("HTTP/1.1 401"));
    std::thread::sleep(Duration::from_millis(1_200));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        text.matches("API tokens file unusable").count(),
        1,
        "once per change: {text}"
    );
}
