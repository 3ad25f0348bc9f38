//! The TLS material of broker connections: the CA bundle, the client
//! certificate and its key, read from their files, and read again when one
//! changes, so that a rotation (cert-manager renewing a Secret, the
//! kubelet swapping its `..data` link, an operator rewriting the files)
//! needs no restart.
//!
//! - At start-up every file must be good: a missing, garbled or mismatched
//!   file, or a client certificate past its end, is an error naming the
//!   file (the service then stops with one line saying so).
//! - While running, the files are looked at at most once a second
//!   ([`crate::files`]), before a new connection and when asked
//!   ([`Tls::look`]). Changed files are loaded whole; only when every file
//!   is good (and the certificate and key match, and the certificate has
//!   not ended) do new connections use them. Otherwise the previous
//!   material stays in use and the reason is logged at warn; the files are
//!   read again at their next change. A certificate and its key rewritten
//!   one after the other are taken in once both are written.
//! - Connections already open keep the material they were opened with, as
//!   the broker keeps theirs.

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::time::Instant;

pub use krabka_coordination::cluster::TlsStatus;

use super::error::KafkaError;
use super::security::TlsConfig;
use crate::files::{FileStamp, LOOK_EVERY};
use krabka_coordination::sync::{lock, read, write};
use krabka_coordination::time::{Clock, SystemClock, rfc3339_ms};

/// The material in use.
struct Material {
    connector: tokio_rustls::TlsConnector,
    /// The stamps of the CA, certificate and key files it was read from.
    stamps: [Option<FileStamp>; 3],
    /// The end of the client certificate's validity (epoch ms).
    client_not_after: Option<i64>,
}

/// When the files were last looked at, and what came of the changes.
struct Look {
    at: Option<Instant>,
    /// The stamps of the files last refused: not read again until they
    /// change.
    refused_stamps: Option<[Option<FileStamp>; 3]>,
    reloads: u64,
    refused: u64,
}

/// The TLS material of one client, following its files.
pub(crate) struct Tls {
    config: TlsConfig,
    material: RwLock<Arc<Material>>,
    look: Mutex<Look>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn tls_err(reason: impl Into<String>) -> KafkaError {
    KafkaError::Tls(reason.into())
}

impl Tls {
    /// Reads every file; any problem is an error naming the file.
    pub(crate) fn load(config: &TlsConfig) -> Result<Tls, KafkaError> {
        let material = build(config)?;
        Ok(Tls {
            config: config.clone(),
            material: RwLock::new(Arc::new(material)),
            look: Mutex::new(Look {
                at: Some(Instant::now()),
                refused_stamps: None,
                reloads: 0,
                refused: 0,
            }),
        })
    }

    /// The connector for a new connection, after a look at the files.
    pub(crate) fn connector(&self) -> tokio_rustls::TlsConnector {
        self.look();
        read(&self.material).connector.clone()
    }

    /// Looks at the files (at most once a second) and takes in a change
    /// when every file is good; see the module docs.
    pub(crate) fn look(&self) {
        let now = {
            let mut look = lock(&self.look);
            if look.at.is_some_and(|at| at.elapsed() < LOOK_EVERY) {
                return;
            }
            look.at = Some(Instant::now());
            let now = stamps(&self.config);
            if now == read(&self.material).stamps || look.refused_stamps == Some(now) {
                return;
            }
            now
        };
        let result = build(&self.config);
        let mut look = lock(&self.look);
        match result {
            Ok(material) => {
                tracing::info!(
                    files = %self.files(),
                    client_certificate_ends = ?material.client_not_after.map(rfc3339_ms),
                    "TLS files changed: new connections use the new material"
                );
                *write(&self.material) = Arc::new(material);
                look.refused_stamps = None;
                look.reloads += 1;
            }
            Err(error) => {
                tracing::warn!(error = %error, "TLS files changed but cannot be used; new connections keep the previous material until they change again");
                look.refused_stamps = Some(now);
                look.refused += 1;
            }
        }
    }

    /// Makes the next look happen at once.
    #[cfg(test)]
    pub(crate) fn expire_look(&self) {
        lock(&self.look).at = None;
    }

    /// The material in use now, for metrics.
    pub(crate) fn status(&self) -> TlsStatus {
        self.look();
        let material = read(&self.material).clone();
        let look = lock(&self.look);
        TlsStatus {
            client_certificate: self.config.cert_file.clone().zip(material.client_not_after),
            reloads: look.reloads,
            refused: look.refused,
        }
    }

    /// The error of a failed handshake with `addr`. A TLS error (an alert,
    /// a certificate refused) is one retrying cannot fix, and a client
    /// certificate that ended is named as its likely cause; a handshake the
    /// peer cut without one (a reset, an end of stream: a broker reloading
    /// its listener) is a connection failure that a retry may get past, as
    /// Kafka's Java client treats an `IOException` in
    /// `SslTransportLayer.handshake` (a disconnect, not an
    /// `SslAuthenticationException`).
    pub(crate) fn handshake_error(&self, addr: &str, error: &std::io::Error) -> KafkaError {
        let refused = error
            .get_ref()
            .is_some_and(|inner| inner.is::<rustls::Error>());
        if !refused {
            return KafkaError::Connect {
                addr: addr.to_string(),
                reason: format!("TLS handshake cut: {error}"),
            };
        }
        let ended = read(&self.material)
            .client_not_after
            .filter(|end| *end <= SystemClock.now_ms());
        match (ended, &self.config.cert_file) {
            (Some(end), Some(file)) => tls_err(format!(
                "handshake with {addr} failed: {error}; the client certificate {} ended at {}",
                file.display(),
                rfc3339_ms(end)
            )),
            _ => tls_err(format!("handshake with {addr} failed: {error}")),
        }
    }

    fn files(&self) -> String {
        [
            &self.config.ca_file,
            &self.config.cert_file,
            &self.config.key_file,
        ]
        .into_iter()
        .flatten()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// The stamps of the configured files, in the order of [`Material`].
fn stamps(config: &TlsConfig) -> [Option<FileStamp>; 3] {
    [&config.ca_file, &config.cert_file, &config.key_file]
        .map(|file| file.as_deref().and_then(FileStamp::of))
}

fn read_pem_file(what: &str, path: &Path) -> Result<Vec<u8>, KafkaError> {
    std::fs::read(path)
        .map_err(|e| tls_err(format!("cannot read the {what} {}: {e}", path.display())))
}

/// The end of `cert`'s validity, epoch ms.
fn not_after(cert: &CertificateDer<'_>, file: &Path) -> Result<i64, KafkaError> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).map_err(|e| {
        tls_err(format!(
            "the client certificate {} is not an X.509 certificate: {e}",
            file.display()
        ))
    })?;
    Ok(parsed.validity().not_after.timestamp().saturating_mul(1000))
}

/// Reads the files and builds a connector from them. The stamps are taken
/// first: a file changed while it is read is read again at the next look.
fn build(config: &TlsConfig) -> Result<Material, KafkaError> {
    let stamps = stamps(config);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    match &config.ca_file {
        Some(path) => {
            let pem = read_pem_file("CA file", path)?;
            let mut added = 0;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| {
                    tls_err(format!("the CA file {} is not PEM: {e}", path.display()))
                })?;
                roots.add(cert).map_err(|e| {
                    tls_err(format!(
                        "a CA certificate in {} is invalid: {e}",
                        path.display()
                    ))
                })?;
                added += 1;
            }
            if added == 0 {
                return Err(tls_err(format!(
                    "the CA file {} holds no certificate",
                    path.display()
                )));
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            for cert in native.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(tls_err(
                    "no CA file given and no system CA certificates found",
                ));
            }
        }
    }
    let roots = Arc::new(roots);
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(e.to_string()))?;
    let builder = if config.verify_hostname {
        builder.with_root_certificates(roots)
    } else {
        let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| tls_err(e.to_string()))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(IgnoreHostname(inner)))
    };
    let (client, client_not_after) = match (&config.cert_file, &config.key_file) {
        (Some(cert_file), Some(key_file)) => {
            let pem = read_pem_file("client certificate", cert_file)?;
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| {
                    tls_err(format!(
                        "the client certificate {} is not PEM: {e}",
                        cert_file.display()
                    ))
                })?;
            let leaf = chain.first().ok_or_else(|| {
                tls_err(format!(
                    "the client certificate {} holds no certificate",
                    cert_file.display()
                ))
            })?;
            let end = not_after(leaf, cert_file)?;
            if end <= SystemClock.now_ms() {
                return Err(tls_err(format!(
                    "the client certificate {} ended at {}: renew it",
                    cert_file.display(),
                    rfc3339_ms(end)
                )));
            }
            let pem = read_pem_file("client key", key_file)?;
            let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
                tls_err(format!(
                    "the client key {} is not a PEM private key: {e}",
                    key_file.display()
                ))
            })?;
            let client = builder.with_client_auth_cert(chain, key).map_err(|e| {
                tls_err(format!(
                    "the client certificate {} and key {} do not match: {e}",
                    cert_file.display(),
                    key_file.display()
                ))
            })?;
            (client, Some(end))
        }
        (None, None) => (builder.with_no_client_auth(), None),
        _ => {
            return Err(tls_err(
                "a client certificate needs both a certificate file and a key file",
            ));
        }
    };
    Ok(Material {
        connector: tokio_rustls::TlsConnector::from(Arc::new(client)),
        stamps,
        client_not_after,
    })
}

/// Accepts a certificate that a full verification accepts, or that fails
/// only because it does not name the host: the chain and the validity are
/// still checked.
#[derive(Debug)]
struct IgnoreHostname(Arc<rustls::client::WebPkiServerVerifier>);

impl rustls::client::danger::ServerCertVerifier for IgnoreHostname {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The name to verify the broker's certificate against: the host part of
/// `host:port`.
pub(crate) fn server_name(addr: &str) -> Result<ServerName<'static>, KafkaError> {
    let host = addr
        .rsplit_once(':')
        .map_or(addr, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    ServerName::try_from(host.to_owned())
        .map_err(|e| tls_err(format!("{host:?} is not a host name: {e}")))
}
