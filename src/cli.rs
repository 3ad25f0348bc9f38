//! Command-line flags shared by the subcommands that talk to Kafka. Every
//! flag is also a `KRABKA_…` environment variable.

use std::time::Duration;

use clap::Args;

use crate::kafka::{ClientConfig, DEFAULT_TOPIC};

/// Parses a human duration such as `500ms`, `3s` or `1m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration ({e}); try 500ms, 3s or 1m"))
}

/// Where Kafka is and how long to wait for it.
#[derive(Args, Clone, Debug)]
pub struct KafkaArgs {
    /// Kafka bootstrap servers, comma-separated host:port.
    #[arg(
        long,
        env = "KRABKA_BOOTSTRAP_SERVERS",
        value_delimiter = ',',
        required = true
    )]
    pub bootstrap_servers: Vec<String>,

    /// The coordination topic.
    #[arg(long, env = "KRABKA_TOPIC", default_value = DEFAULT_TOPIC)]
    pub topic: String,

    /// Client id sent with every Kafka request.
    #[arg(long, env = "KRABKA_CLIENT_ID", default_value = "krabka-authority")]
    pub client_id: String,

    /// Limit on one Kafka request's round trip.
    #[arg(long, env = "KRABKA_KAFKA_REQUEST_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub kafka_request_timeout: Duration,

    /// Limit on one Kafka operation across its retries.
    #[arg(long, env = "KRABKA_KAFKA_OPERATION_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub kafka_operation_timeout: Duration,
}

impl KafkaArgs {
    /// The client configuration these flags describe.
    pub fn client_config(&self) -> Result<ClientConfig, String> {
        let servers: Vec<String> = self
            .bootstrap_servers
            .iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        if servers.is_empty() {
            return Err("--bootstrap-servers is empty".into());
        }
        for s in &servers {
            let valid = s.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
            });
            if !valid {
                return Err(format!("bootstrap server {s:?} is not host:port"));
            }
        }
        if self.topic.is_empty() {
            return Err("--topic is empty".into());
        }
        if self.kafka_request_timeout.is_zero() || self.kafka_operation_timeout.is_zero() {
            return Err("Kafka timeouts must be positive".into());
        }
        let mut config = ClientConfig::new(servers);
        config.client_id = self.client_id.clone();
        config.request_timeout = self.kafka_request_timeout;
        config.operation_timeout = self.kafka_operation_timeout.max(self.kafka_request_timeout);
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(servers: &[&str]) -> KafkaArgs {
        KafkaArgs {
            bootstrap_servers: servers.iter().map(|s| (*s).to_owned()).collect(),
            topic: DEFAULT_TOPIC.into(),
            client_id: "c".into(),
            kafka_request_timeout: Duration::from_secs(1),
            kafka_operation_timeout: Duration::from_secs(2),
        }
    }

    #[test]
    fn bootstrap_servers_must_be_host_and_port() {
        assert!(args(&["127.0.0.1:9092", " b:1 "]).client_config().is_ok());
        for bad in [
            &[][..],
            &["nohost"],
            &["h:"],
            &[":9"],
            &["h:99999"],
            &["h:0"],
        ] {
            assert!(args(bad).client_config().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn durations_read_like_humans_write_them() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("3s"), Ok(Duration::from_secs(3)));
        assert!(
            parse_duration("soon")
                .unwrap_err()
                .contains("not a duration")
        );
    }
}
