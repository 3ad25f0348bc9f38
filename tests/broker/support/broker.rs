//! The broker under test (shared by the single-node tests), brokers of one
//! test, and clients, topics and transports on them.

use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use krabka_authority::kafka::{
    ClientConfig, KafkaClient, KafkaTransport, TopicSpec, TransportConfig,
};

use super::{capture_logs, repo, unique};

/// Runs `scripts/kafka` with `args`; returns stdout, panics with stderr.
pub fn kafka_script(args: &[&str]) -> String {
    let out = Command::new(repo().join("scripts/kafka"))
        .args(args)
        .output()
        .expect("scripts/kafka runs");
    assert!(
        out.status.success(),
        "scripts/kafka {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_owned()
}

/// The shared broker: `KRABKA_TEST_BOOTSTRAP`, or one started (and left
/// running) under the instance name `test-auto`.
pub fn bootstrap() -> String {
    static ADDR: OnceLock<String> = OnceLock::new();
    ADDR.get_or_init(|| match std::env::var("KRABKA_TEST_BOOTSTRAP") {
        Ok(addr) if !addr.is_empty() => addr,
        _ => {
            eprintln!("KRABKA_TEST_BOOTSTRAP is not set; starting scripts/kafka --name test-auto");
            kafka_script(&["start", "--name", "test-auto"])
        }
    })
    .clone()
}

/// Client settings with short timeouts for tests.
pub fn config_for(bootstrap: &str) -> ClientConfig {
    capture_logs();
    let mut config = ClientConfig::new(bootstrap.split(','));
    config.client_id = "krabka-test".into();
    config.request_timeout = Duration::from_secs(5);
    config.operation_timeout = Duration::from_secs(20);
    config
}

/// A client of the shared broker.
pub fn client() -> KafkaClient {
    KafkaClient::new(config_for(&bootstrap())).expect("client")
}

/// A fresh compacted topic of `partitions` for one test.
pub async fn topic(partitions: i32) -> String {
    topic_on(&bootstrap(), "krabka-test", partitions).await
}

/// A new topic named after `prefix` on the broker at `bootstrap`.
pub async fn topic_on(bootstrap: &str, prefix: &str, partitions: i32) -> String {
    let name = unique(prefix);
    let spec = TopicSpec {
        partitions,
        replication_factor: 1,
        configs: Vec::new(),
    };
    KafkaClient::new(config_for(bootstrap))
        .unwrap()
        .topics()
        .ensure_topic(&name, &spec)
        .await
        .expect("topic created");
    name
}

/// A transport on `topic` with its own client (its own producers).
pub async fn transport(topic: &str) -> KafkaTransport {
    KafkaTransport::connect(
        client(),
        TransportConfig {
            topic: topic.to_owned(),
            partitions: None,
            create: None,
        },
    )
    .await
    .expect("transport connects")
}

/// A role name that lands in `partition` of a topic of `partitions`.
pub fn role_in(partition: i32, partitions: i32, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|r| krabka_authority::coordination::role_partition(r, partitions) == Ok(partition))
        .expect("some role hashes there")
}

/// A broker instance of one test (for stopping, killing, restarting).
#[allow(dead_code)]
pub struct OwnBroker {
    pub name: String,
    pub addr: String,
}

#[allow(dead_code)]
impl OwnBroker {
    pub fn start(prefix: &str, extra: &[&str]) -> OwnBroker {
        let name = unique(prefix);
        let mut args = vec!["start", "--name", &name];
        args.extend_from_slice(extra);
        let addr = kafka_script(&args);
        OwnBroker { name, addr }
    }

    pub fn stop(&self) {
        kafka_script(&["stop", "--name", &self.name]);
    }

    pub fn kill(&self) {
        kafka_script(&["stop", "--kill", "--name", &self.name]);
    }

    pub fn restart(&self) {
        let addr = kafka_script(&["start", "--keep-data", "--name", &self.name]);
        assert_eq!(addr, self.addr, "restarted on the same port");
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        // Nothing left behind under the state root.
        let _ = Command::new(repo().join("scripts/kafka"))
            .args(["stop", "--purge", "--name", &self.name])
            .output();
    }
}

/// Runs one of Kafka's command-line tools from the jars `scripts/kafka`
/// provisioned: the first of `classes` this release has (a tool moved from
/// `kafka.admin` to `org.apache.kafka.tools` between releases), with
/// `args`; returns its stdout, panics with its stderr when it fails.
pub fn kafka_tool(classes: &[&str], args: &[&str]) -> String {
    let lib = kafka_script(&["provision"]);
    let mut last = None;
    for class in classes {
        let out = Command::new("java")
            .args(["-cp", &format!("{lib}/*"), class])
            .args(args)
            .output()
            .expect("java runs");
        if String::from_utf8_lossy(&out.stderr).contains("ClassNotFoundException") {
            last = Some(out);
            continue;
        }
        assert!(
            out.status.success(),
            "{class} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return String::from_utf8_lossy(&out.stdout).into_owned();
    }
    panic!("none of {classes:?} in this Kafka release: {last:?}");
}
