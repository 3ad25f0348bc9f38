//! Who the client is to the brokers: the security settings, and SASL
//! (PLAIN, SCRAM-SHA-256/512 through rsasl). The TLS material (rustls) is
//! `tls`.
//!
//! A connection is opened as TCP, wrapped in TLS when configured, asked for
//! its API versions, then authenticated with SaslHandshake v1 and
//! SaslAuthenticate. When the broker sets a session lifetime (KIP-368), the
//! connection is retired before it ends and the next request opens a fresh,
//! freshly authenticated one.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;

use super::connection::Connection;
use super::error::KafkaError;

/// A secret that never shows in `Debug` or `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// The SASL mechanisms this client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaslMechanism {
    /// Username and password in the clear (use it over TLS).
    Plain,
    /// SCRAM with SHA-256.
    ScramSha256,
    /// SCRAM with SHA-512.
    ScramSha512,
}

impl SaslMechanism {
    /// Kafka's name of the mechanism.
    pub fn name(&self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// SASL credentials.
#[derive(Clone, Debug)]
pub struct SaslConfig {
    /// The mechanism.
    pub mechanism: SaslMechanism,
    /// The user name.
    pub username: String,
    /// The password.
    pub password: Secret,
}

/// TLS settings.
#[derive(Clone, Debug, Default)]
pub struct TlsConfig {
    /// PEM file of the CA certificates to trust; `None` trusts the system's.
    pub ca_file: Option<PathBuf>,
    /// PEM file of a client certificate chain, for mutual TLS.
    pub cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    pub key_file: Option<PathBuf>,
    /// Check that the broker's certificate names the host connected to.
    /// On by default; turn it off only for brokers whose certificates do
    /// not carry their addresses (the chain is still verified).
    pub verify_hostname: bool,
}

/// Who the client is and how its connections are protected.
#[derive(Clone, Debug, Default)]
pub struct Security {
    /// TLS, when set.
    pub tls: Option<TlsConfig>,
    /// SASL, when set.
    pub sasl: Option<SaslConfig>,
}

impl Security {
    /// Kafka's name of the security protocol this amounts to.
    pub fn protocol(&self) -> &'static str {
        match (self.tls.is_some(), self.sasl.is_some()) {
            (false, false) => "PLAINTEXT",
            (true, false) => "SSL",
            (false, true) => "SASL_PLAINTEXT",
            (true, true) => "SASL_SSL",
        }
    }
}

/// Authenticates `conn` with SASL; returns the session lifetime the broker
/// set, if any.
pub(crate) async fn authenticate(
    conn: &Connection,
    sasl: &SaslConfig,
    timeout: Duration,
) -> Result<Option<Duration>, KafkaError> {
    let addr = conn.addr().to_owned();
    let auth_err = |reason: String| KafkaError::Auth {
        addr: addr.clone(),
        reason,
    };
    let handshake = SaslHandshakeRequest::default()
        .with_mechanism(StrBytes::from_static_str(sasl.mechanism.name()));
    let (response, _) = conn.call(&handshake, timeout).await?;
    if response.error_code != 0 {
        let enabled: Vec<String> = response.mechanisms.iter().map(|m| m.to_string()).collect();
        return Err(auth_err(format!(
            "the broker does not enable SASL mechanism {} (it enables {})",
            sasl.mechanism.name(),
            if enabled.is_empty() {
                "none".to_owned()
            } else {
                enabled.join(", ")
            }
        )));
    }

    let config = rsasl::config::SASLConfig::builder()
        .with_defaults()
        .with_callback(Credentials {
            username: sasl.username.clone(),
            password: sasl.password.clone(),
        })
        .map_err(|e| auth_err(format!("SASL set-up: {e}")))?;
    let mechanism = rsasl::mechname::Mechname::parse(sasl.mechanism.name().as_bytes())
        .map_err(|e| auth_err(format!("SASL set-up: {e}")))?;
    let mut session = rsasl::prelude::SASLClient::new(config)
        .start_suggested(&[mechanism])
        .map_err(|e| auth_err(format!("SASL set-up: {e}")))?;

    let mut input: Option<Vec<u8>> = None;
    let mut lifetime = None;
    loop {
        let mut out = Vec::new();
        let state = session
            .step(input.as_deref(), &mut out)
            .map_err(|e| auth_err(format!("{} exchange failed: {e}", sasl.mechanism.name())))?;
        if state.is_finished() && !state.has_sent_message() {
            break;
        }
        let request = SaslAuthenticateRequest::default().with_auth_bytes(out.into());
        let (response, _) = conn.call(&request, timeout).await?;
        if response.error_code != 0 {
            let message = response
                .error_message
                .map(|m| m.to_string())
                .unwrap_or_default();
            return Err(auth_err(format!(
                "{} authentication as {:?} failed: {message} (code {})",
                sasl.mechanism.name(),
                sasl.username,
                response.error_code
            )));
        }
        if response.session_lifetime_ms > 0 {
            lifetime = Some(Duration::from_millis(response.session_lifetime_ms as u64));
        }
        if state.is_finished() {
            break;
        }
        input = Some(response.auth_bytes.to_vec());
    }
    Ok(lifetime)
}

/// Hands rsasl the user name and password.
struct Credentials {
    username: String,
    password: Secret,
}

impl rsasl::callback::SessionCallback for Credentials {
    fn callback(
        &self,
        _session: &rsasl::callback::SessionData,
        _context: &rsasl::callback::Context<'_>,
        request: &mut rsasl::callback::Request<'_>,
    ) -> Result<(), rsasl::prelude::SessionError> {
        request
            .satisfy::<rsasl::property::AuthId>(self.username.as_str())?
            .satisfy::<rsasl::property::Password>(self.password.expose().as_bytes())?;
        Ok(())
    }
}
