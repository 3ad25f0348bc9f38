//! The binary as an operator starts it, without Kafka (the fast tier):
//! configuration refused with exit status 2 naming the flag, before any port
//! is bound; SIGHUP not fatal; plain logs when they go to a file.
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

/// Runs `serve` with `args`; returns the exit status and stderr.
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
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        std::net::TcpListener::bind(&listen).is_ok(),
        "{args:?}: the port was bound"
    );
    (out.status.code().unwrap_or(-1), stderr)
}

#[test]
fn unusable_settings_exit_2_naming_the_flag() {
    let dir = std::env::temp_dir().join(format!("krabka-process-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty");
    std::fs::write(&empty, "# no token here\n").unwrap();
    let missing = dir.join("missing");
    let (empty, missing) = (empty.to_str().unwrap(), missing.to_str().unwrap());
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
        (&["--api-tokens-file", empty], "--api-tokens-file"),
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
    std::fs::remove_dir_all(&dir).unwrap();
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

fn healthz(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = "GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
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
