//! The binary as a child process: `serve` and `demo` run as an operator
//! would run them, killed when the test ends.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::broker::bootstrap;
use super::unique;

/// The binary under test.
pub fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_krabka-authority"))
}

/// A free port of 127.0.0.1 (free when asked; the child binds it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A memory figure of process `pid` from `/proc/<pid>/status`, in KiB:
/// `VmRSS` (resident now) or `VmHWM` (its peak); 0 when unreadable.
pub fn memory_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(&format!("{field}:")))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// A child process killed (and reaped) when the test ends, even by a panic.
#[derive(Debug)]
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `serve` process on a free port, its stderr in a log file, killed when
/// dropped (even by a panic).
pub struct Served {
    process: Process,
    pub url: String,
    log: PathBuf,
}

impl Served {
    /// Starts `serve` on `topic` of the shared broker (3 s request
    /// timeout, 2 s Kafka operations) and waits until `/readyz` says ready.
    pub async fn start(topic: &str) -> Served {
        let port = free_port();
        let mut command = binary();
        command
            .args([
                "serve",
                "--bootstrap-servers",
                &bootstrap(),
                "--topic",
                topic,
            ])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--request-timeout", "3s", "--kafka-operation-timeout", "2s"]);
        let served = Served::spawn(command, port, "serve");
        served
            .until("/readyz", Duration::from_secs(30), |status, _| {
                status == 200
            })
            .await;
        served
    }

    /// Spawns `command` (a `serve` listening on `port`), its stderr logged
    /// to a file named after `prefix` in the cargo target's tmp dir.
    pub fn spawn(mut command: Command, port: u16, prefix: &str) -> Served {
        let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(unique(prefix) + ".log");
        let child = command
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the binary runs");
        Served {
            process: Process(child),
            url: format!("http://127.0.0.1:{port}"),
            log,
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.process.0.id()
    }

    /// What it wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET `path`: the status and the JSON body (null when it is not
    /// JSON); status 0 when no answer came.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        match reqwest::get(format!("{}{path}", self.url)).await {
            Ok(response) => {
                let status = response.status().as_u16();
                (status, response.json().await.unwrap_or(Value::Null))
            }
            Err(_) => (0, Value::Null),
        }
    }

    /// The sum of the samples of metric `name` it exports (0 when none).
    pub async fn metric(&self, name: &str) -> f64 {
        let text = reqwest::get(format!("{}/metrics", self.url))
            .await
            .expect("the service answers")
            .text()
            .await
            .unwrap_or_default();
        text.lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|r| r.starts_with([' ', '{']))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Polls `path` until `accept` takes the answer; panics after `limit`
    /// with the last answer and the log.
    pub async fn until(
        &self,
        path: &str,
        limit: Duration,
        accept: impl Fn(u16, &Value) -> bool,
    ) -> Value {
        let started = Instant::now();
        loop {
            let (status, body) = self.get(path).await;
            if accept(status, &body) {
                return body;
            }
            assert!(
                started.elapsed() < limit,
                "{path}: last {status} {body} after {limit:?}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // The process first: its log is removed once it cannot write.
        let _ = self.process.0.kill();
        let _ = self.process.0.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}
