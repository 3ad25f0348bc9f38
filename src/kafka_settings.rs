//! The Kafka settings every command that talks to Kafka takes, defined
//! once: flag, `KRABKA_…` environment variable, default and bounds. They
//! build a [`ClientConfig`].

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::kafka::{
    ClientConfig, DEFAULT_TOPIC, SaslConfig, SaslMechanism, Secret, Security, TlsConfig,
};
use crate::time::duration_between;

/// Kafka's security protocols.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
#[value(rename_all = "snake_case")]
pub enum Protocol {
    /// No TLS, no SASL.
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL without TLS (the password travels in the clear with PLAIN).
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

/// SASL mechanisms, by Kafka's names.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    /// PLAIN.
    #[value(name = "PLAIN")]
    Plain,
    /// SCRAM-SHA-256.
    #[value(name = "SCRAM-SHA-256")]
    ScramSha256,
    /// SCRAM-SHA-512.
    #[value(name = "SCRAM-SHA-512")]
    ScramSha512,
}

fn secret(text: &str) -> Result<Secret, String> {
    Ok(Secret::new(text))
}

/// The bound on a batch's decompressed size: `auto` (the topic's
/// `max.message.bytes`) or bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchBound(pub Option<usize>);

/// Smallest and largest bound accepted (bytes).
const BATCH_BOUND: std::ops::RangeInclusive<usize> = 1024..=1 << 30;

fn batch_bound(text: &str) -> Result<BatchBound, String> {
    if text == "auto" {
        return Ok(BatchBound(None));
    }
    match text.parse::<usize>() {
        Ok(bytes) if BATCH_BOUND.contains(&bytes) => Ok(BatchBound(Some(bytes))),
        _ => Err(format!(
            "`auto` or bytes from {} to {}",
            BATCH_BOUND.start(),
            BATCH_BOUND.end()
        )),
    }
}

const MS: Duration = Duration::from_millis(10);
const HOUR: Duration = Duration::from_secs(3600);

/// Where Kafka is, how to reach it and how long to wait for it.
#[derive(Args, Clone, Debug)]
pub struct KafkaSettings {
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
    #[arg(long, env = "KRABKA_KAFKA_REQUEST_TIMEOUT", default_value = "5s", value_parser = duration_between(MS, HOUR))]
    pub kafka_request_timeout: Duration,

    /// Limit on one Kafka operation across its retries.
    #[arg(long, env = "KRABKA_KAFKA_OPERATION_TIMEOUT", default_value = "10s", value_parser = duration_between(MS, HOUR))]
    pub kafka_operation_timeout: Duration,

    /// Most bytes one record batch of the topic may decompress to; a batch
    /// past it is skipped, its records unread, and reported. `auto`: the
    /// topic's max.message.bytes, the largest batch it takes uncompressed
    /// (Kafka's default 1048588 when it cannot be read).
    #[arg(long, env = "KRABKA_KAFKA_MAX_DECOMPRESSED_BATCH_BYTES", default_value = "auto", value_parser = batch_bound)]
    pub kafka_max_decompressed_batch_bytes: BatchBound,

    /// How to reach the brokers: plaintext, ssl, sasl_plaintext or sasl_ssl.
    #[arg(long, env = "KRABKA_KAFKA_SECURITY_PROTOCOL", value_enum, default_value_t = Protocol::Plaintext)]
    pub kafka_security_protocol: Protocol,

    /// PEM file of the CA certificates that sign the brokers' certificates
    /// (default: the system's).
    #[arg(long, env = "KRABKA_KAFKA_TLS_CA_FILE")]
    pub kafka_tls_ca_file: Option<PathBuf>,

    /// PEM file of a client certificate chain, for mutual TLS.
    #[arg(long, env = "KRABKA_KAFKA_TLS_CERT_FILE")]
    pub kafka_tls_cert_file: Option<PathBuf>,

    /// PEM file of the client certificate's private key.
    #[arg(long, env = "KRABKA_KAFKA_TLS_KEY_FILE")]
    pub kafka_tls_key_file: Option<PathBuf>,

    /// Check that a broker's certificate names the broker's host. Turn off
    /// only for certificates without the addresses (the chain is still checked).
    #[arg(long, env = "KRABKA_KAFKA_TLS_VERIFY_HOSTNAME", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub kafka_tls_verify_hostname: bool,

    /// SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long, env = "KRABKA_KAFKA_SASL_MECHANISM", value_enum, default_value_t = Mechanism::ScramSha512)]
    pub kafka_sasl_mechanism: Mechanism,

    /// SASL user name.
    #[arg(long, env = "KRABKA_KAFKA_SASL_USERNAME")]
    pub kafka_sasl_username: Option<String>,

    /// File holding the SASL password (a trailing newline is ignored).
    #[arg(long, env = "KRABKA_KAFKA_SASL_PASSWORD_FILE")]
    pub kafka_sasl_password_file: Option<PathBuf>,

    /// The SASL password itself; prefer the file or the environment
    /// variable, a flag shows in the process list.
    #[arg(long, env = "KRABKA_KAFKA_SASL_PASSWORD", hide_env_values = true, value_parser = secret)]
    pub kafka_sasl_password: Option<Secret>,
}

/// A file a flag names must be there and hold something; the message names
/// the flag.
fn readable(flag: &str, path: &std::path::Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Err(e) => Err(format!("{flag} {}: {e}", path.display())),
        Ok(m) if !m.is_file() => Err(format!("{flag} {}: not a file", path.display())),
        Ok(m) if m.len() == 0 => Err(format!("{flag} {}: the file is empty", path.display())),
        Ok(_) => Ok(()),
    }
}

impl KafkaSettings {
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
        let mut config = ClientConfig::new(servers);
        config.client_id = self.client_id.clone();
        config.request_timeout = self.kafka_request_timeout;
        config.operation_timeout = self.kafka_operation_timeout.max(self.kafka_request_timeout);
        config.max_decompressed_batch_bytes = self.kafka_max_decompressed_batch_bytes.0;
        config.security = self.security()?;
        Ok(config)
    }

    /// TLS and SASL from the flags; files named are read later, when the
    /// client is built.
    fn security(&self) -> Result<Security, String> {
        let (tls, sasl) = match self.kafka_security_protocol {
            Protocol::Plaintext => (false, false),
            Protocol::Ssl => (true, false),
            Protocol::SaslPlaintext => (false, true),
            Protocol::SaslSsl => (true, true),
        };
        let tls_flags = self.kafka_tls_ca_file.is_some()
            || self.kafka_tls_cert_file.is_some()
            || self.kafka_tls_key_file.is_some();
        if tls_flags && !tls {
            return Err(
                "--kafka-tls-* files are set but --kafka-security-protocol is not ssl or sasl_ssl"
                    .into(),
            );
        }
        let sasl_flags = self.kafka_sasl_username.is_some()
            || self.kafka_sasl_password_file.is_some()
            || self.kafka_sasl_password.is_some();
        if sasl_flags && !sasl {
            return Err("SASL credentials are set but --kafka-security-protocol is not sasl_plaintext or sasl_ssl".into());
        }
        for (flag, path) in [
            ("--kafka-tls-ca-file", &self.kafka_tls_ca_file),
            ("--kafka-tls-cert-file", &self.kafka_tls_cert_file),
            ("--kafka-tls-key-file", &self.kafka_tls_key_file),
        ] {
            if let Some(path) = path {
                readable(flag, path)?;
            }
        }
        let tls = tls.then(|| TlsConfig {
            ca_file: self.kafka_tls_ca_file.clone(),
            cert_file: self.kafka_tls_cert_file.clone(),
            key_file: self.kafka_tls_key_file.clone(),
            verify_hostname: self.kafka_tls_verify_hostname,
        });
        let sasl = if sasl {
            let username = self
                .kafka_sasl_username
                .clone()
                .filter(|u| !u.is_empty())
                .ok_or("--kafka-sasl-username is required with SASL")?;
            let password = match (&self.kafka_sasl_password_file, &self.kafka_sasl_password) {
                (Some(_), Some(_)) => {
                    return Err("give the SASL password as a file or as a value, not both".into());
                }
                (Some(path), None) => {
                    let text = std::fs::read_to_string(path).map_err(|e| {
                        format!(
                            "cannot read --kafka-sasl-password-file {}: {e}",
                            path.display()
                        )
                    })?;
                    Secret::new(text.trim_end_matches(['\n', '\r']))
                }
                (None, Some(password)) => password.clone(),
                (None, None) => {
                    return Err(
                        "SASL needs --kafka-sasl-password-file or KRABKA_KAFKA_SASL_PASSWORD"
                            .into(),
                    );
                }
            };
            Some(SaslConfig {
                mechanism: match self.kafka_sasl_mechanism {
                    Mechanism::Plain => SaslMechanism::Plain,
                    Mechanism::ScramSha256 => SaslMechanism::ScramSha256,
                    Mechanism::ScramSha512 => SaslMechanism::ScramSha512,
                },
                username,
                password,
            })
        } else {
            None
        };
        Ok(Security { tls, sasl })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(servers: &[&str]) -> KafkaSettings {
        KafkaSettings {
            bootstrap_servers: servers.iter().map(|s| (*s).to_owned()).collect(),
            topic: DEFAULT_TOPIC.into(),
            client_id: "c".into(),
            kafka_request_timeout: Duration::from_secs(1),
            kafka_operation_timeout: Duration::from_secs(2),
            kafka_max_decompressed_batch_bytes: BatchBound(None),
            kafka_security_protocol: Protocol::Plaintext,
            kafka_tls_ca_file: None,
            kafka_tls_cert_file: None,
            kafka_tls_key_file: None,
            kafka_tls_verify_hostname: true,
            kafka_sasl_mechanism: Mechanism::ScramSha512,
            kafka_sasl_username: None,
            kafka_sasl_password_file: None,
            kafka_sasl_password: None,
        }
    }

    #[test]
    fn sasl_needs_a_user_and_exactly_one_password_and_never_shows_it() {
        let mut a = args(&["b:1"]);
        a.kafka_security_protocol = Protocol::SaslSsl;
        assert!(a.client_config().unwrap_err().contains("username"));
        a.kafka_sasl_username = Some("svc".into());
        assert!(a.client_config().unwrap_err().contains("password"));
        a.kafka_sasl_password = Some(Secret::new("hunter2"));
        let config = a.client_config().unwrap();
        assert_eq!(config.security.protocol(), "SASL_SSL");
        let shown = format!("{config:?} {a:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        let mut plain = args(&["b:1"]);
        plain.kafka_sasl_username = Some("svc".into());
        assert!(plain.client_config().unwrap_err().contains("not sasl"));
    }

    #[test]
    fn a_missing_or_empty_tls_file_is_refused_naming_its_flag() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let mut a = args(&["b:1"]);
        a.kafka_security_protocol = Protocol::Ssl;
        a.kafka_tls_ca_file = Some(dir.join("missing.pem"));
        assert!(
            a.client_config()
                .unwrap_err()
                .starts_with("--kafka-tls-ca-file")
        );
        a.kafka_tls_ca_file = Some(empty);
        let err = a.client_config().unwrap_err();
        assert!(
            err.starts_with("--kafka-tls-ca-file") && err.contains("empty"),
            "{err}"
        );
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
    fn the_flags_defaults_are_the_clients() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            kafka: KafkaSettings,
        }
        let parsed = Cli::try_parse_from(["x", "--bootstrap-servers", "b:1"]).unwrap();
        let from_flags = parsed.kafka.client_config().unwrap();
        let library = ClientConfig::new(["b:1"]);
        assert_eq!(from_flags.request_timeout, library.request_timeout);
        assert_eq!(from_flags.operation_timeout, library.operation_timeout);
        assert_eq!(from_flags.client_id, library.client_id);
        assert_eq!(
            from_flags.max_decompressed_batch_bytes,
            library.max_decompressed_batch_bytes
        );
    }

    #[test]
    fn the_batch_bound_is_auto_or_bytes_within_its_range() {
        assert_eq!(batch_bound("auto"), Ok(BatchBound(None)));
        assert_eq!(batch_bound("4194304"), Ok(BatchBound(Some(4 << 20))));
        for bad in ["0", "1023", "2000000000", "1MiB", "", "-1"] {
            assert!(batch_bound(bad).unwrap_err().contains("auto"), "{bad}");
        }
        let mut a = args(&["b:1"]);
        a.kafka_max_decompressed_batch_bytes = BatchBound(Some(2048));
        assert_eq!(
            a.client_config().unwrap().max_decompressed_batch_bytes,
            Some(2048)
        );
    }
}
