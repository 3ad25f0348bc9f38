//! Certificates rotated under a running service, on a real broker with an
//! SSL listener that requires client certificates (keystores made with
//! `keytool` from test CAs). A whole move from one CA to another, as
//! cert-manager and operators do it, while checks go on without pause:
//!
//! 1. the service's CA bundle gains the new CA (the kubelet's `..data` swap
//!    of a mounted Secret) and the broker's truststore too (dynamic
//!    `listener.name.ssl.ssl.truststore.location`);
//! 2. the broker's certificate is replaced by one of the new CA (dynamic
//!    `ssl.keystore.location`);
//! 3. the service's client certificate and key are rewritten in place with
//!    one of the new CA (the certificate first, then the key);
//! 4. the old CA is dropped on both sides.
//!
//! After each step every connection is cut (a proxy in front of the
//! listener resets them), so the next ones must use the new material; a
//! bad file is refused and the previous material kept. 0 failed checks. A
//! client certificate that ended stops `serve` with a line naming it.

use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use krabka_authority::kafka::{
    ClientConfig, KafkaClient, KafkaTransport, Security, TlsConfig, TransportConfig,
};
use krabka_authority::transport::Coordinator;
use tokio::time::Instant;

use crate::faults::{FaultProxy, Mode};
use crate::support::broker::{OwnBroker, config_for, kafka_script, kafka_tool, topic_on};
use crate::support::process::binary;
use crate::support::service::{config, metric, start};
use crate::support::{http_client, unique};

const PASS: &str = "changeit";

/// Runs `keytool` (or another tool) with `args` in `dir`; panics with its
/// output when it fails.
fn tool(dir: &Path, program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The test PKI: two CAs, broker keystores and truststores, client
/// certificates, in one folder.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let dir = std::env::temp_dir().join(unique("krabka-rotation"));
        std::fs::create_dir_all(&dir).unwrap();
        let pki = Pki { dir };
        for ca in ["ca1", "ca2"] {
            pki.keytool(&[
                "-genkeypair",
                "-alias",
                "ca",
                "-keyalg",
                "EC",
                "-groupname",
                "secp256r1",
                "-dname",
                &format!("CN=krabka test {ca}"),
                "-ext",
                "bc:c",
                "-validity",
                "30",
                "-keystore",
                &format!("{ca}.p12"),
            ]);
            pki.keytool(&[
                "-exportcert",
                "-rfc",
                "-alias",
                "ca",
                "-keystore",
                &format!("{ca}.p12"),
                "-file",
                &format!("{ca}.pem"),
            ]);
        }
        // The broker's certificate for 127.0.0.1 from each CA (the same
        // name: Kafka refuses a dynamic keystore whose names changed).
        for (store, ca) in [("broker1", "ca1"), ("broker2", "ca2")] {
            let p12 = format!("{store}.p12");
            pki.keytool(&[
                "-genkeypair",
                "-alias",
                "broker",
                "-keyalg",
                "EC",
                "-groupname",
                "secp256r1",
                "-dname",
                "CN=127.0.0.1",
                "-ext",
                "SAN=ip:127.0.0.1",
                "-validity",
                "30",
                "-keystore",
                &p12,
            ]);
            pki.keytool(&[
                "-certreq",
                "-alias",
                "broker",
                "-keystore",
                &p12,
                "-file",
                &format!("{store}.csr"),
            ]);
            pki.sign(
                ca,
                &format!("{store}.csr"),
                &format!("{store}.crt"),
                &["-ext", "SAN=ip:127.0.0.1"],
                "30",
            );
            pki.keytool(&[
                "-importcert",
                "-noprompt",
                "-alias",
                "ca",
                "-file",
                &format!("{ca}.pem"),
                "-keystore",
                &p12,
            ]);
            pki.keytool(&[
                "-importcert",
                "-noprompt",
                "-alias",
                "broker",
                "-file",
                &format!("{store}.crt"),
                "-keystore",
                &p12,
            ]);
            // Only the broker's own entry: Kafka compares a new keystore's
            // entries with the old one's by alias.
            pki.keytool(&["-delete", "-alias", "ca", "-keystore", &p12]);
        }
        for (store, cas) in [
            ("trust1", &["ca1"][..]),
            ("trust12", &["ca1", "ca2"]),
            ("trust2", &["ca2"]),
        ] {
            for ca in cas {
                pki.keytool(&[
                    "-importcert",
                    "-noprompt",
                    "-alias",
                    ca,
                    "-file",
                    &format!("{ca}.pem"),
                    "-keystore",
                    &format!("{store}.p12"),
                ]);
            }
        }
        // The service's client certificates: a key and request from
        // openssl, signed by a CA with keytool.
        for (client, ca, days, start) in [
            ("client1", "ca1", "1", None),
            ("client2", "ca2", "2", None),
            ("ended", "ca2", "1", Some("-3d")),
        ] {
            tool(
                &pki.dir,
                "openssl",
                &[
                    "req",
                    "-new",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-nodes",
                    "-keyout",
                    &format!("{client}.key"),
                    "-subj",
                    "/CN=krabka-service",
                    "-out",
                    &format!("{client}.csr"),
                ],
            );
            let mut extra = vec![];
            if let Some(start) = start {
                extra.extend(["-startdate", start]);
            }
            pki.sign(
                ca,
                &format!("{client}.csr"),
                &format!("{client}.crt"),
                &extra,
                days,
            );
        }
        pki
    }

    fn keytool(&self, args: &[&str]) {
        let mut all = args.to_vec();
        all.extend(["-storetype", "PKCS12", "-storepass", PASS]);
        if args[0] == "-genkeypair" {
            all.extend(["-keypass", PASS]);
        }
        tool(&self.dir, "keytool", &all);
    }

    fn sign(&self, ca: &str, csr: &str, out: &str, extra: &[&str], days: &str) {
        let store = format!("{ca}.p12");
        let mut args = vec![
            "-gencert",
            "-rfc",
            "-alias",
            "ca",
            "-keystore",
            &store,
            "-infile",
            csr,
            "-outfile",
            out,
            "-validity",
            days,
        ];
        args.extend_from_slice(extra);
        self.keytool(&args);
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }
}

/// A folder laid out as the kubelet mounts a Secret (`ca.crt` a link
/// through `..data`), updated by swapping `..data`.
struct Mount {
    dir: PathBuf,
    version: u32,
}

impl Mount {
    fn new(dir: PathBuf, contents: &[u8]) -> Mount {
        std::fs::create_dir_all(&dir).unwrap();
        let mut mount = Mount { dir, version: 0 };
        mount.swap(contents);
        std::os::unix::fs::symlink("..data/ca.crt", mount.dir.join("ca.crt")).unwrap();
        mount
    }

    fn swap(&mut self, contents: &[u8]) {
        self.version += 1;
        let folder = format!("..v{}", self.version);
        std::fs::create_dir(self.dir.join(&folder)).unwrap();
        std::fs::write(self.dir.join(&folder).join("ca.crt"), contents).unwrap();
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&folder, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
}

/// Sets one of the broker's dynamic settings with Kafka's ConfigCommand
/// (`kafka.admin` in 3.x-4.1, `org.apache.kafka.tools` later).
fn alter_broker(plaintext: &str, setting: &str) {
    kafka_tool(
        &[
            "kafka.admin.ConfigCommand",
            "org.apache.kafka.tools.ConfigCommand",
        ],
        &[
            "--bootstrap-server",
            plaintext,
            "--entity-type",
            "brokers",
            "--entity-name",
            "1",
            "--alter",
            "--add-config",
            setting,
        ],
    );
}

/// Whether a fresh client with `tls` gets an answer from `addr`.
async fn connects(addr: &str, tls: TlsConfig) -> bool {
    let mut config = ClientConfig::new([addr]);
    config.request_timeout = Duration::from_secs(2);
    config.operation_timeout = Duration::from_secs(2);
    config.security = Security {
        tls: Some(tls),
        sasl: None,
    };
    match KafkaClient::new(config) {
        Ok(client) => client.metadata().refresh_metadata(&[]).await.is_ok(),
        Err(_) => false,
    }
}

/// Cuts every connection through `proxy`; returns once new ones are open.
async fn cut_all(proxy: &FaultProxy) {
    proxy.set(Mode::Reset);
    let started = Instant::now();
    while proxy.live() > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "connections still open"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    proxy.set(Mode::Pass);
    while proxy.live() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no new connection"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_move_to_another_ca_under_load_fails_no_check() {
    let pki = tokio::task::block_in_place(Pki::new);
    let path = |name: &str| pki.path(name).display().to_string();
    let reserved = StdListener::bind("127.0.0.1:0").unwrap();
    let proxy_port = reserved.local_addr().unwrap().port();
    let sets = [
        "listeners=PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{free1},CONTROLLER://127.0.0.1:{cport}".to_owned(),
        format!("advertised.listeners=PLAINTEXT://127.0.0.1:{{port}},SSL://127.0.0.1:{proxy_port}"),
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT".to_owned(),
        "listener.name.ssl.ssl.client.auth=required".to_owned(),
        "listener.name.ssl.ssl.keystore.type=PKCS12".to_owned(),
        format!("listener.name.ssl.ssl.keystore.location={}", path("broker1.p12")),
        format!("listener.name.ssl.ssl.keystore.password={PASS}"),
        format!("listener.name.ssl.ssl.key.password={PASS}"),
        "listener.name.ssl.ssl.truststore.type=PKCS12".to_owned(),
        format!("listener.name.ssl.ssl.truststore.location={}", path("trust1.p12")),
        format!("listener.name.ssl.ssl.truststore.password={PASS}"),
    ];
    let args: Vec<&str> = sets.iter().flat_map(|s| ["--set", s.as_str()]).collect();
    let broker = tokio::task::block_in_place(|| OwnBroker::start("rotation", &args));
    let ssl_bound = kafka_script(&["address", "--name", &broker.name, "--listener", "SSL"]);
    let proxy = FaultProxy::start(reserved, ssl_bound);
    let via_proxy = proxy.addr.clone();

    // The service's files: the CA bundle as a mounted Secret, the client
    // certificate and key as plain files rewritten in place.
    let mut mount = Mount::new(pki.path("ca-mount"), &pki.read("ca1.pem"));
    let (cert, key) = (pki.path("tls.crt"), pki.path("tls.key"));
    std::fs::copy(pki.path("client1.crt"), &cert).unwrap();
    std::fs::copy(pki.path("client1.key"), &key).unwrap();
    let tls = TlsConfig {
        ca_file: Some(mount.ca()),
        cert_file: Some(cert.clone()),
        key_file: Some(key.clone()),
        verify_hostname: true,
    };
    let topic = topic_on(&broker.addr, "rotation", 1).await;
    let mut settings = config(&via_proxy, &topic);
    settings.client.security = Security {
        tls: Some(tls.clone()),
        sasl: None,
    };
    let service = start(settings).await;
    let minter = KafkaTransport::connect(
        KafkaClient::new(config_for(&broker.addr)).unwrap(),
        TransportConfig {
            topic: topic.clone(),
            partitions: None,
            create: None,
        },
    )
    .await
    .unwrap();
    let role = unique("rotation-role");
    let token = minter
        .acquire_epoch(&role, Duration::from_secs(600))
        .await
        .unwrap();

    // Checks without pause; every answer must be 200.
    let url = format!("{}/roles/{role}/authority?token={token}", service.url);
    let stop = Arc::new(AtomicBool::new(false));
    let (checks, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let loops: Vec<_> = (0..2)
        .map(|_| {
            let (url, stop, checks, failed, failures) = (
                url.clone(),
                stop.clone(),
                checks.clone(),
                failed.clone(),
                failures.clone(),
            );
            tokio::spawn(async move {
                let http = http_client().build().unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let answer = http.get(&url).timeout(Duration::from_secs(10)).send().await;
                    checks.fetch_add(1, Ordering::Relaxed);
                    match answer {
                        Ok(r) if r.status() == 200 => {}
                        Ok(r) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            let status = r.status();
                            let body = r.text().await.unwrap_or_default();
                            failures.lock().unwrap().push(format!("{status}: {body}"));
                        }
                        Err(e) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            failures.lock().unwrap().push(e.to_string());
                        }
                    }
                }
            })
        })
        .collect();
    let expiry = || async {
        metric(
            &service,
            "krabka_kafka_tls_client_certificate_expiry_seconds",
            &[],
        )
        .await
    };
    let settle = || tokio::time::sleep(Duration::from_millis(1500));
    let steps = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let day = expiry().await;
    assert!((80_000.0..=86_400.0).contains(&day), "one day left: {day}");

    // 1. Both sides trust the new CA too.
    let both = [pki.read("ca1.pem"), pki.read("ca2.pem")].concat();
    mount.swap(&both);
    let truststore = format!(
        "listener.name.ssl.ssl.truststore.location={}",
        path("trust12.p12")
    );
    tokio::task::block_in_place(|| alter_broker(&broker.addr, &truststore));
    settle().await;
    cut_all(&proxy).await;

    // 2. The broker's certificate from the new CA: a client trusting only
    // the old one is refused now, the service's next connections are not.
    let keystore = format!(
        "listener.name.ssl.ssl.keystore.location={}",
        path("broker2.p12")
    );
    tokio::task::block_in_place(|| alter_broker(&broker.addr, &keystore));
    let only_old = TlsConfig {
        ca_file: Some(pki.path("ca1.pem")),
        ..tls.clone()
    };
    let started = Instant::now();
    while connects(&ssl_bound_of(&broker), only_old.clone()).await {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the broker keeps its old certificate"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cut_all(&proxy).await;

    // 3. The client certificate from the new CA, rewritten in place: the
    // certificate first (it does not match the key yet: refused, the old
    // pair kept), then the key.
    std::fs::write(&cert, pki.read("client2.crt")).unwrap();
    settle().await;
    cut_all(&proxy).await;
    std::fs::write(&key, pki.read("client2.key")).unwrap();
    settle().await;
    cut_all(&proxy).await;
    let two_days = expiry().await;
    assert!(
        (170_000.0..=172_800.0).contains(&two_days),
        "two days left: {two_days}"
    );

    // 4. The old CA dropped on both sides.
    mount.swap(&pki.read("ca2.pem"));
    let truststore = format!(
        "listener.name.ssl.ssl.truststore.location={}",
        path("trust2.p12")
    );
    tokio::task::block_in_place(|| alter_broker(&broker.addr, &truststore));
    settle().await;
    cut_all(&proxy).await;
    let old_client = TlsConfig {
        ca_file: Some(pki.path("ca2.pem")),
        cert_file: Some(pki.path("client1.crt")),
        key_file: Some(pki.path("client1.key")),
        verify_hostname: true,
    };
    assert!(
        !connects(&ssl_bound_of(&broker), old_client).await,
        "the broker still trusts the old CA's client certificates"
    );

    // A bad file: garbage in the CA bundle is refused, the material kept.
    mount.swap(b"not a certificate");
    settle().await;
    cut_all(&proxy).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let refused = metric(
        &service,
        "krabka_kafka_tls_reloads_total",
        &[("outcome", "refused")],
    )
    .await;
    let taken = metric(
        &service,
        "krabka_kafka_tls_reloads_total",
        &[("outcome", "taken")],
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        l.await.unwrap();
    }
    let (checks, failed) = (
        checks.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    eprintln!(
        "a move to another CA in {:?}: {checks} checks, {failed} failed; TLS files taken in {taken} times, refused {refused} (the certificate before its key, and the garbage bundle); client certificate ends in {day:.0} s, then {two_days:.0} s",
        steps.elapsed()
    );
    assert_eq!(failed, 0, "{:?}", failures.lock().unwrap());
    assert!(checks > 100, "{checks}");
    assert!(
        taken == 3.0 && refused >= 2.0,
        "taken {taken}, refused {refused}"
    );

    // A client certificate that ended: `serve` stops at once naming it.
    let out = tokio::task::block_in_place(|| {
        binary()
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--bootstrap-servers",
                &via_proxy,
            ])
            .args(["--kafka-security-protocol", "ssl"])
            .arg("--kafka-tls-ca-file")
            .arg(pki.path("ca2.pem"))
            .arg("--kafka-tls-cert-file")
            .arg(pki.path("ended.crt"))
            .arg("--kafka-tls-key-file")
            .arg(pki.path("ended.key"))
            .output()
            .unwrap()
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("ended.crt") && stderr.contains("ended at"),
        "{stderr}"
    );
    eprintln!(
        "an ended client certificate: {}",
        stderr.lines().last().unwrap_or("")
    );
    service.stop.send_replace(true);
    drop(broker);
    let _ = std::fs::remove_dir_all(&pki.dir);
}

/// The broker's SSL listener itself (not through the proxy).
fn ssl_bound_of(broker: &OwnBroker) -> String {
    kafka_script(&["address", "--name", &broker.name, "--listener", "SSL"])
}
