//! TLS material rotated under a running client (fast tier): the CA bundle,
//! the client certificate and its key swapped as the kubelet swaps a
//! mounted Secret, or rewritten in place, against scripted brokers behind
//! TLS. The broker tier's `rotation` does the same to a real Kafka.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::client::KafkaClient;
use super::config::ClientConfig;
use super::error::KafkaError;
use super::fake::{FakeBroker, Script, answer, metadata};
use super::security::{Security, TlsConfig};
use super::tls::Tls;
use krabka_coordination::testkit::SecretMount;
use krabka_coordination::time::{Clock, SystemClock};

const DAY: Duration = Duration::from_secs(86_400);

/// A test CA.
struct Ca {
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            pem,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate for `name` ending `ends_in` from now (a negative
    /// offset: ended), and its key, as PEM.
    fn sign(&self, name: &str, ends_in: i64) -> (String, String) {
        let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let epoch = rcgen::date_time_ymd(1970, 1, 1);
        let now = Duration::from_millis(SystemClock.now_ms() as u64);
        params.not_before = epoch + (now - DAY);
        params.not_after = if ends_in >= 0 {
            epoch + now + Duration::from_secs(ends_in as u64)
        } else {
            epoch + (now - Duration::from_secs(ends_in.unsigned_abs()))
        };
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap().pem();
        (cert, key.serialize_pem())
    }
}

/// A broker's TLS: its certificate for 127.0.0.1 from `ca`; with
/// `clients`, it asks for a client certificate that CA signed.
fn server_tls(ca: &Ca, clients: Option<&Ca>) -> rustls::ServerConfig {
    let (cert, key) = ca.sign("127.0.0.1", 10 * 86_400);
    let chain = vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match clients {
        None => builder.with_no_client_auth(),
        Some(clients) => {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from_pem_slice(clients.pem.as_bytes()).unwrap())
                .unwrap();
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder.with_single_cert(chain, key).unwrap()
}

/// A broker answering Metadata (the cluster id a new connection asks
/// first, and a refresh).
fn metadata_only() -> Script {
    Arc::new(|header, _| {
        (header.request_api_key == ApiKey::Metadata as i16)
            .then(|| answer(header, &metadata(&[(1, "127.0.0.1:1")], None)))
    })
}

fn tls_config(mount: &SecretMount, client: bool) -> TlsConfig {
    TlsConfig {
        ca_file: Some(mount.path("ca.crt")),
        cert_file: client.then(|| mount.path("tls.crt")),
        key_file: client.then(|| mount.path("tls.key")),
        verify_hostname: true,
    }
}

/// A client of `broker` over `tls`, opening a new connection per call.
fn client_of(broker: &FakeBroker, tls: TlsConfig) -> KafkaClient {
    let mut config = ClientConfig::new([broker.addr.as_str()]);
    config.request_timeout = Duration::from_secs(2);
    config.operation_timeout = Duration::from_secs(2);
    config.security = Security {
        tls: Some(tls),
        sasl: None,
    };
    KafkaClient::new(config).unwrap()
}

/// One new connection's first request: Ok, or why it failed.
async fn connect(client: &KafkaClient, addr: &str) -> Result<(), KafkaError> {
    client.close().await;
    client.connection(addr).await.map(|_| ())
}

/// The next look at the files happens now (they are looked at at most once
/// a second).
fn look_now(client: &KafkaClient) {
    client.tls().unwrap().expire_look();
}

#[tokio::test]
async fn a_ca_bundle_swapped_in_is_used_by_the_next_connection() {
    let (old, new) = (Ca::new("old CA"), Ca::new("new CA"));
    // The broker's certificate is already from the new CA; the client
    // trusts only the old one.
    let broker = FakeBroker::start_tls(metadata_only(), server_tls(&new, None)).await;
    let mut mount = SecretMount::new(&[("ca.crt", old.pem.as_bytes())]);
    let client = client_of(&broker, tls_config(&mount, false));
    let refused = connect(&client, &broker.addr).await.unwrap_err();
    assert!(matches!(refused, KafkaError::Tls(_)), "{refused}");
    // cert-manager adds the new CA to the bundle; the kubelet swaps it in.
    let bundle = format!("{}{}", old.pem, new.pem);
    mount.update(&[("ca.crt", bundle.as_bytes())]);
    look_now(&client);
    connect(&client, &broker.addr)
        .await
        .expect("the new bundle trusts the broker");
    assert_eq!(client.tls_status().unwrap().reloads, 1);
}

#[tokio::test]
async fn a_client_certificate_rewritten_in_place_is_presented_by_the_next_connection() {
    let (ca, old_clients, new_clients) = (Ca::new("CA"), Ca::new("old"), Ca::new("new"));
    // The broker trusts only client certificates of the new client CA.
    let broker = FakeBroker::start_tls(metadata_only(), server_tls(&ca, Some(&new_clients))).await;
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| -> PathBuf { dir.path().join(name) };
    let (cert, key) = old_clients.sign("svc", 5 * 86_400);
    std::fs::write(file("ca.crt"), &ca.pem).unwrap();
    std::fs::write(file("tls.crt"), cert).unwrap();
    std::fs::write(file("tls.key"), key).unwrap();
    let client = client_of(
        &broker,
        TlsConfig {
            ca_file: Some(file("ca.crt")),
            cert_file: Some(file("tls.crt")),
            key_file: Some(file("tls.key")),
            verify_hostname: true,
        },
    );
    assert!(connect(&client, &broker.addr).await.is_err(), "an old one");
    let before = client.tls_status().unwrap();

    // The certificate first: it does not match the key yet, so the old
    // pair stays in use; then the key, and the new pair is taken in.
    let (cert, key) = new_clients.sign("svc", 9 * 86_400);
    std::fs::write(file("tls.crt"), cert).unwrap();
    look_now(&client);
    let halfway = client.tls_status().unwrap();
    assert_eq!((halfway.reloads, halfway.refused), (0, 1));
    assert_eq!(halfway.client_certificate, before.client_certificate);
    std::fs::write(file("tls.key"), key).unwrap();
    look_now(&client);
    connect(&client, &broker.addr)
        .await
        .expect("the new certificate is presented");
    let after = client.tls_status().unwrap();
    assert_eq!(after.reloads, 1);
    let (ends_before, ends_after) = (
        before.client_certificate.unwrap().1,
        after.client_certificate.unwrap().1,
    );
    assert!(
        (ends_after - ends_before - 4 * 86_400_000).abs() < 5_000,
        "{ends_before} -> {ends_after}"
    );
}

#[tokio::test]
async fn a_bad_new_file_keeps_the_previous_material_and_says_so() {
    let logs = krabka_coordination::testkit::Logs::capture();
    let ca = Ca::new("CA");
    let broker = FakeBroker::start_tls(metadata_only(), server_tls(&ca, Some(&ca))).await;
    let (cert, key) = ca.sign("svc", 3 * 86_400);
    let mut mount = SecretMount::new(&[
        ("ca.crt", ca.pem.as_bytes()),
        ("tls.crt", cert.as_bytes()),
        ("tls.key", key.as_bytes()),
    ]);
    let client = client_of(&broker, tls_config(&mount, true));
    connect(&client, &broker.addr).await.unwrap();
    let (ended, ended_key) = ca.sign("svc", -60);
    for (what, files) in [
        ("garbage", [("ca.crt", b"not PEM".as_slice())].to_vec()),
        (
            "an ended certificate",
            [
                ("ca.crt", ca.pem.as_bytes()),
                ("tls.crt", ended.as_bytes()),
                ("tls.key", ended_key.as_bytes()),
            ]
            .to_vec(),
        ),
    ] {
        let mut all = vec![
            ("ca.crt", ca.pem.as_bytes()),
            ("tls.crt", cert.as_bytes()),
            ("tls.key", key.as_bytes()),
        ];
        for (name, contents) in files {
            all.retain(|(n, _)| *n != name);
            all.push((name, contents));
        }
        mount.update(&all);
        look_now(&client);
        connect(&client, &broker.addr)
            .await
            .unwrap_or_else(|e| panic!("{what}: the previous material is kept: {e}"));
    }
    let status = client.tls_status().unwrap();
    assert_eq!((status.reloads, status.refused), (0, 2));
    let said = logs.lines("WARN", "keep the previous material");
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(
        said[1].contains("tls.crt") && said[1].contains("ended"),
        "{said:?}"
    );
    // Once, not at every look: nothing changed since.
    look_now(&client);
    client.tls_status();
    assert_eq!(logs.lines("WARN", "keep the previous material").len(), 2);
}

/// A broker reloading its listener resets handshakes in flight (CI saw it
/// on a real broker during a CA move): that is a connection failure to
/// retry, not a refusal of this client's TLS material.
#[tokio::test]
async fn a_handshake_the_broker_cuts_is_a_connection_failure_to_retry_not_a_refusal() {
    let ca = Ca::new("CA");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            // Read the ClientHello, then reset: RST, no TLS alert.
            let mut hello = [0; 64];
            let _ = stream.readable().await;
            let _ = stream.try_read(&mut hello);
            let _ = stream.set_zero_linger();
            drop(stream);
        }
    });
    let mount = SecretMount::new(&[("ca.crt", ca.pem.as_bytes())]);
    let mut config = ClientConfig::new([addr.as_str()]);
    config.security = Security {
        tls: Some(tls_config(&mount, false)),
        sasl: None,
    };
    let client = KafkaClient::new(config).unwrap();
    let cut = connect(&client, &addr).await.unwrap_err();
    assert!(
        matches!(cut, KafkaError::Connect { .. }) && cut.is_retriable() && !cut.is_access_error(),
        "{cut:?}"
    );
    // A broker whose certificate is not trusted is still a refusal.
    let other = Ca::new("other CA");
    let broker = FakeBroker::start_tls(metadata_only(), server_tls(&other, None)).await;
    let refused = connect(&client_of(&broker, tls_config(&mount, false)), &broker.addr)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, KafkaError::Tls(_)) && refused.is_access_error(),
        "{refused:?}"
    );
}

#[test]
fn an_ended_certificate_or_a_mismatched_key_is_refused_at_start_naming_the_file() {
    let ca = Ca::new("CA");
    let (ended, ended_key) = ca.sign("svc", -1);
    let (other, _) = ca.sign("svc", 86_400);
    let mount = SecretMount::new(&[
        ("ca.crt", ca.pem.as_bytes()),
        ("tls.crt", ended.as_bytes()),
        ("tls.key", ended_key.as_bytes()),
        ("other.crt", other.as_bytes()),
    ]);
    let config = tls_config(&mount, true);
    let error = Tls::load(&config).unwrap_err().to_string();
    assert!(
        error.contains(&mount.path("tls.crt").display().to_string()) && error.contains("ended"),
        "{error}"
    );
    let mismatched = TlsConfig {
        cert_file: Some(mount.path("other.crt")),
        ..config
    };
    let error = Tls::load(&mismatched).unwrap_err().to_string();
    assert!(
        error.contains("other.crt") && error.contains("tls.key") && error.contains("do not match"),
        "{error}"
    );
}
