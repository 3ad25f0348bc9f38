//! TLS and SASL to a real broker with a SASL_SSL listener and a CA made for
//! the test; API bearer tokens; secrets kept out of logs and answers.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_authority::kafka::{
    ClientConfig, KafkaClient, KafkaError, KafkaTransport, SaslConfig, SaslMechanism, Secret,
    Security, TlsConfig, TopicSpec, TransportConfig,
};
use krabka_authority::leadership::acquire;
use krabka_authority::service::ServiceConfig;

use crate::support::broker::{
    OwnBroker, bootstrap, config_for, kafka_script, kafka_tool, topic, topic_on, transport,
};
use crate::support::leadership::fast_options;
use crate::support::process::{Process, binary, free_port};
use crate::support::service::{self, get, start};
use crate::support::{eventually, unique};

/// A bearer token for the API tests.
const API_TOKEN: &str = "api-token-9f3c1e";

pub const SVC_PASSWORD: &str = "svc-Secret-4711";

/// A CA, and a broker certificate it signed for 127.0.0.1.
pub struct Pki {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub other_ca: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// A self-signed CA: its PEM and the issuer that signs with it.
fn ca(name: &str) -> (String, rcgen::Issuer<'static, rcgen::KeyPair>) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let key = rcgen::KeyPair::generate().unwrap();
    let pem = params.self_signed(&key).unwrap().pem();
    (pem, rcgen::Issuer::new(params, key))
}

fn signed(names: &[&str], issuer: &rcgen::Issuer<'_, rcgen::KeyPair>) -> (String, String) {
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, names[0]);
    let key = rcgen::KeyPair::generate().unwrap();
    (
        params.signed_by(&key, issuer).unwrap().pem(),
        key.serialize_pem(),
    )
}

pub fn pki() -> Pki {
    let dir = std::env::temp_dir().join(unique("krabka-pki"));
    std::fs::create_dir_all(&dir).unwrap();
    let (ca_pem, issuer) = ca("krabka test CA");
    let (server, server_key) = signed(&["127.0.0.1"], &issuer);
    let (client, client_key) = signed(&["krabka-client"], &issuer);
    let (other_pem, _) = ca("some other CA");
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let ca = write("ca.pem", ca_pem);
    write("server.pem", format!("{server_key}{server}"));
    let client_cert = write("client.pem", client);
    let client_key = write("client.key", client_key);
    let other_ca = write("other-ca.pem", other_pem);
    Pki {
        dir,
        ca,
        other_ca,
        client_cert,
        client_key,
    }
}

/// A broker with PLAINTEXT (for the harness), SASL_SSL and SASL_PLAINTEXT
/// listeners; user `svc` for PLAIN and both SCRAM mechanisms; extra
/// properties (an authorizer) as given.
#[allow(dead_code)] // the broker is held: dropping it stops the instance
pub struct SecureBroker {
    pub broker: OwnBroker,
    pub plaintext: String,
    pub sasl_ssl: String,
    pub sasl_plaintext: String,
}

pub fn secure_broker(pki: &Pki, extra: &[&str]) -> SecureBroker {
    let jaas_plain = format!(
        "org.apache.kafka.common.security.plain.PlainLoginModule required user_svc=\"{SVC_PASSWORD}\" user_admin=\"admin-secret\";"
    );
    let scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;";
    let mut args: Vec<String> = vec![
        "--set".into(),
        "listeners=PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{free1},SASL_PLAINTEXT://127.0.0.1:{free2},CONTROLLER://127.0.0.1:{cport}".into(),
        "--set".into(),
        "advertised.listeners=PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{free1},SASL_PLAINTEXT://127.0.0.1:{free2}".into(),
        "--set".into(),
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT".into(),
        "--set".into(),
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512".into(),
        "--set".into(),
        "ssl.keystore.type=PEM".into(),
        "--set".into(),
        format!("ssl.keystore.location={}", pki.dir.join("server.pem").display()),
        "--add-scram".into(),
        format!("SCRAM-SHA-256=[name=svc,password={SVC_PASSWORD}]"),
        "--add-scram".into(),
        format!("SCRAM-SHA-512=[name=svc,password={SVC_PASSWORD}]"),
    ];
    for listener in ["sasl_ssl", "sasl_plaintext"] {
        args.push("--set".into());
        args.push(format!(
            "listener.name.{listener}.plain.sasl.jaas.config={jaas_plain}"
        ));
        for mech in ["scram-sha-256", "scram-sha-512"] {
            args.push("--set".into());
            args.push(format!(
                "listener.name.{listener}.{mech}.sasl.jaas.config={scram}"
            ));
        }
    }
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let broker = OwnBroker::start("secure", &refs);
    let sasl_ssl = kafka_script(&["address", "--name", &broker.name, "--listener", "SASL_SSL"]);
    let sasl_plaintext = kafka_script(&[
        "address",
        "--name",
        &broker.name,
        "--listener",
        "SASL_PLAINTEXT",
    ]);
    SecureBroker {
        plaintext: broker.addr.clone(),
        broker,
        sasl_ssl,
        sasl_plaintext,
    }
}

pub fn secure_config(
    addr: &str,
    tls: Option<&Path>,
    mechanism: SaslMechanism,
    password: &str,
) -> ClientConfig {
    let mut config = config_for(addr);
    config.operation_timeout = Duration::from_secs(8);
    config.security = Security {
        tls: tls.map(|ca| TlsConfig {
            ca_file: Some(ca.to_owned()),
            verify_hostname: true,
            ..TlsConfig::default()
        }),
        sasl: Some(SaslConfig {
            mechanism,
            username: "svc".into(),
            password: Secret::new(password),
        }),
    };
    config
}

/// Runs `serve` with `args`; returns how it ended, its stderr and how long it
/// ran (at most `limit`).
fn serve_outcome(args: &[&str], limit: Duration) -> (Option<i32>, String, Duration) {
    let log = std::env::temp_dir().join(unique("serve-log"));
    let mut child = binary()
        .arg("serve")
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = started.elapsed();
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(log);
    (code, stderr, took)
}

#[tokio::test(flavor = "multi_thread")]
async fn sasl_ssl_works_for_the_service_and_the_leadership_client_and_refuses_clearly() {
    let pki = pki();
    let broker = tokio::task::block_in_place(|| secure_broker(&pki, &[]));
    let topic = topic_on(&broker.plaintext, "secure", 2).await;

    for mechanism in [
        SaslMechanism::Plain,
        SaslMechanism::ScramSha256,
        SaslMechanism::ScramSha512,
    ] {
        let config = secure_config(&broker.sasl_ssl, Some(&pki.ca), mechanism, SVC_PASSWORD);
        // The leadership client over SASL_SSL.
        let transport = Arc::new(
            KafkaTransport::connect(
                KafkaClient::new(config.clone()).unwrap(),
                TransportConfig {
                    topic: topic.clone(),
                    partitions: None,
                    create: None,
                },
            )
            .await
            .unwrap_or_else(|e| panic!("{mechanism:?}: {e}")),
        );
        let role = unique("secure-role");
        let held = acquire(transport.clone(), &role, "a", fast_options())
            .await
            .unwrap();
        // The service over SASL_SSL.
        let mut service_config = service::Config {
            service: ServiceConfig::new(&broker.sasl_ssl),
            client: config,
        };
        service_config.kafka.topic = topic.clone();
        let service = start(service_config).await;
        let url = format!(
            "{}/roles/{role}/authority?token={}",
            service.url,
            held.token()
        );
        let (status, body, _) = get(&url).await;
        assert_eq!(
            (status, body["verdict"].as_str()),
            (200, Some("authoritative")),
            "{mechanism:?}: {body}"
        );
        eventually(|| async {
            (get(&format!("{}/readyz", service.url)).await.0 == 200).then_some(())
        })
        .await;
        eprintln!(
            "{mechanism:?} over SASL_SSL: leadership acquired {}, service answered 200",
            held.token()
        );
    }

    // SASL over plaintext too.
    let client = KafkaClient::new(secure_config(
        &broker.sasl_plaintext,
        None,
        SaslMechanism::ScramSha256,
        SVC_PASSWORD,
    ))
    .unwrap();
    assert_eq!(
        client
            .describer()
            .describe_transaction(&unique("none"))
            .await
            .unwrap(),
        None
    );

    // A wrong password fails at once, saying so, without the password.
    let started = Instant::now();
    let wrong = KafkaClient::new(secure_config(
        &broker.sasl_ssl,
        Some(&pki.ca),
        SaslMechanism::ScramSha512,
        "not-it",
    ))
    .unwrap();
    let err = wrong.metadata().refresh_metadata(&[]).await.unwrap_err();
    assert!(matches!(err, KafkaError::Auth { .. }), "{err}");
    assert!(err.is_access_error());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(!err.to_string().contains("not-it"));
    eprintln!("wrong password: {err}");

    // An untrusted certificate fails at once, saying so.
    let started = Instant::now();
    let untrusted = KafkaClient::new(secure_config(
        &broker.sasl_ssl,
        Some(&pki.other_ca),
        SaslMechanism::ScramSha512,
        SVC_PASSWORD,
    ))
    .unwrap();
    let err = untrusted
        .metadata()
        .refresh_metadata(&[])
        .await
        .unwrap_err();
    assert!(matches!(err, KafkaError::Tls(_)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));
    eprintln!("untrusted CA: {err}");

    // Hostname verification: the certificate names 127.0.0.1, not localhost.
    let localhost = broker.sasl_ssl.replace("127.0.0.1", "localhost");
    let strict = KafkaClient::new(secure_config(
        &localhost,
        Some(&pki.ca),
        SaslMechanism::ScramSha512,
        SVC_PASSWORD,
    ))
    .unwrap();
    let err = strict.metadata().refresh_metadata(&[]).await.unwrap_err();
    assert!(matches!(err, KafkaError::Tls(_)), "{err}");
    let mut lax_config = secure_config(
        &localhost,
        Some(&pki.ca),
        SaslMechanism::ScramSha512,
        SVC_PASSWORD,
    );
    if let Some(tls) = lax_config.security.tls.as_mut() {
        tls.verify_hostname = false;
    }
    KafkaClient::new(lax_config)
        .unwrap()
        .metadata()
        .refresh_metadata(&[])
        .await
        .expect("the chain still verifies");

    // The binary: a wrong password or an untrusted CA stops `serve` at
    // start-up with a clear message, not a hang.
    let password_file = pki.dir.join("wrong-password");
    std::fs::write(&password_file, "definitely-wrong\n").unwrap();
    let ca = pki.ca.display().to_string();
    let other = pki.other_ca.display().to_string();
    let pw = password_file.display().to_string();
    let common = [
        "--bootstrap-servers",
        broker.sasl_ssl.as_str(),
        "--topic",
        topic.as_str(),
        "--kafka-security-protocol",
        "sasl_ssl",
        "--kafka-sasl-username",
        "svc",
        "--kafka-sasl-mechanism",
        "SCRAM-SHA-512",
    ];
    let (code, stderr, took) = tokio::task::block_in_place(|| {
        let mut args = common.to_vec();
        args.extend([
            "--kafka-tls-ca-file",
            &ca,
            "--kafka-sasl-password-file",
            &pw,
        ]);
        serve_outcome(&args, Duration::from_secs(20))
    });
    assert_eq!(code, Some(2), "serve must stop: {stderr}");
    assert!(
        stderr.contains("authentication") && stderr.contains("failed"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("definitely-wrong"),
        "the password leaked: {stderr}"
    );
    eprintln!(
        "serve with a wrong password stopped in {took:?}: {}",
        stderr.lines().last().unwrap_or("")
    );
    std::fs::write(&password_file, format!("{SVC_PASSWORD}\n")).unwrap();
    let (code, stderr, took) = tokio::task::block_in_place(|| {
        let mut args = common.to_vec();
        args.extend([
            "--kafka-tls-ca-file",
            &other,
            "--kafka-sasl-password-file",
            &pw,
        ]);
        serve_outcome(&args, Duration::from_secs(20))
    });
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("TLS") && stderr.to_lowercase().contains("certificate"),
        "{stderr}"
    );
    assert!(!stderr.contains(SVC_PASSWORD));
    eprintln!(
        "serve with an untrusted CA stopped in {took:?}: {}",
        stderr.lines().last().unwrap_or("")
    );
    drop(broker);
    let _ = std::fs::remove_dir_all(&pki.dir);
    let _ = (pki.client_cert, pki.client_key);
}

#[tokio::test(flavor = "multi_thread")]
async fn mutual_tls_and_re_authentication() {
    let pki = pki();
    let ca = pki.ca.display().to_string();
    // An SSL listener that requires a client certificate, and a broker that
    // ends SASL sessions after 3 s unless the client re-authenticates.
    let broker = tokio::task::block_in_place(|| {
        secure_broker(
            &pki,
            &[
                "--set",
                "listeners=PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{free1},SASL_PLAINTEXT://127.0.0.1:{free2},SSL://127.0.0.1:{free3},CONTROLLER://127.0.0.1:{cport}",
                "--set",
                "advertised.listeners=PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{free1},SASL_PLAINTEXT://127.0.0.1:{free2},SSL://127.0.0.1:{free3}",
                "--set",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
                "--set",
                "listener.name.ssl.ssl.client.auth=required",
                "--set",
                "ssl.truststore.type=PEM",
                "--set",
                &format!("ssl.truststore.location={ca}"),
                "--set",
                "connections.max.reauth.ms=3000",
            ],
        )
    });
    let ssl = kafka_script(&[
        "address",
        "--name",
        &broker.broker.name,
        "--listener",
        "SSL",
    ]);
    let mut with_cert = config_for(&ssl);
    with_cert.operation_timeout = Duration::from_secs(5);
    with_cert.security = Security {
        tls: Some(TlsConfig {
            ca_file: Some(pki.ca.clone()),
            cert_file: Some(pki.client_cert.clone()),
            key_file: Some(pki.client_key.clone()),
            verify_hostname: true,
        }),
        sasl: None,
    };
    let client = KafkaClient::new(with_cert.clone()).unwrap();
    client
        .metadata()
        .refresh_metadata(&[])
        .await
        .expect("mutual TLS with the client certificate");
    eprintln!(
        "mutual TLS: {} brokers known",
        client.metadata().brokers().len()
    );
    let mut without = with_cert.clone();
    if let Some(tls) = without.security.tls.as_mut() {
        tls.cert_file = None;
        tls.key_file = None;
    }
    let started = Instant::now();
    let err = KafkaClient::new(without)
        .unwrap()
        .metadata()
        .refresh_metadata(&[])
        .await
        .unwrap_err();
    assert!(matches!(err, KafkaError::Tls(_)), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused at once, not retried: {:?}",
        started.elapsed()
    );
    eprintln!("mutual TLS without a client certificate: {err}");

    // Re-authentication: checks keep working across several 3 s sessions.
    let admin = KafkaClient::new(config_for(&broker.plaintext)).unwrap();
    let topic = unique("reauth");
    admin
        .topics()
        .ensure_topic(
            &topic,
            &TopicSpec {
                partitions: 1,
                replication_factor: 1,
                configs: vec![],
            },
        )
        .await
        .unwrap();
    let minter = KafkaTransport::connect(
        admin,
        TransportConfig {
            topic: topic.clone(),
            partitions: None,
            create: None,
        },
    )
    .await
    .unwrap();
    let role = unique("reauth-role");
    let token = krabka_authority::transport::Coordinator::acquire_epoch(
        &minter,
        &role,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let mut service_config = service::Config {
        service: ServiceConfig::new(&broker.sasl_ssl),
        client: secure_config(
            &broker.sasl_ssl,
            Some(&pki.ca),
            SaslMechanism::ScramSha256,
            SVC_PASSWORD,
        ),
    };
    service_config.kafka.topic = topic;
    let service = start(service_config).await;
    let url = format!("{}/roles/{role}/authority?token={token}", service.url);
    let until = Instant::now() + Duration::from_secs(10);
    let mut answered = 0;
    while Instant::now() < until {
        let (status, body, _) = get(&url).await;
        assert_eq!(status, 200, "a check failed across a session end: {body}");
        answered += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("re-authentication: {answered} checks over 10 s of 3 s SASL sessions, all 200");
    drop(broker);
    let _ = std::fs::remove_dir_all(&pki.dir);
}

#[tokio::test]
async fn bearer_tokens_guard_the_api_and_say_nothing_about_roles() {
    let topic = topic(1).await;
    let dir = std::env::temp_dir().join(unique("tokens"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tokens");
    std::fs::write(&file, "first-token-abc\n").unwrap();
    let mut config = service::config(&bootstrap(), &topic);
    config.auth.api_tokens_file = Some(file.clone());
    let service = start(config).await;
    let client = reqwest::Client::new();
    let ask = |path: &str, token: Option<&str>| {
        let mut request = client.get(format!("{}{path}", service.url));
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        request.send()
    };
    let known = unique("known");
    krabka_authority::transport::Registrar::register(&transport(&topic).await, &known, "m", 1)
        .await
        .unwrap();
    let mut bodies = Vec::new();
    for path in [
        "/roles",
        &format!("/roles/{known}"),
        "/roles/never-seen",
        &format!("/roles/{known}/authority?token=1:1"),
        "/authority/check",
        "/",
        "/metrics",
        "/no/such/thing",
    ] {
        let response = ask(path, None).await.unwrap();
        assert_eq!(response.status(), 401, "{path}");
        assert_eq!(
            response.headers()["www-authenticate"],
            "Bearer realm=\"krabka-authority\""
        );
        bodies.push(response.text().await.unwrap());
        let wrong = ask(path, Some("nope")).await.unwrap();
        assert_eq!(wrong.status(), 401, "{path} with a wrong token");
    }
    assert!(
        bodies.windows(2).all(|w| w[0] == w[1]),
        "one body for every refusal: {bodies:?}"
    );
    assert!(!bodies[0].contains(&known));
    for path in ["/healthz", "/readyz", "/openapi.yaml"] {
        assert_ne!(
            ask(path, None).await.unwrap().status(),
            401,
            "{path} stays open"
        );
    }
    let r = eventually(|| async {
        let r = ask(&format!("/roles/{known}"), Some("first-token-abc"))
            .await
            .unwrap();
        (r.status() == 200).then_some(r)
    })
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        ask("/metrics", Some("first-token-abc"))
            .await
            .unwrap()
            .status(),
        200
    );

    // Rotation without a restart: the file changes, the old token stops.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::write(&file, "# rotated\nsecond-token-xyz\n").unwrap();
    eventually(|| async {
        let old = ask("/roles", Some("first-token-abc"))
            .await
            .unwrap()
            .status();
        let new = ask("/roles", Some("second-token-xyz"))
            .await
            .unwrap()
            .status();
        (old == 401 && new == 200).then_some(())
    })
    .await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Adds an ACL through Kafka's own AclCommand on the PLAINTEXT listener
/// (`org.apache.kafka.tools` from 4.0, `kafka.admin` in 3.x).
fn acl(plaintext: &str, args: &[&str]) {
    let mut all = vec!["--bootstrap-server", plaintext, "--add"];
    all.extend_from_slice(args);
    kafka_tool(
        &[
            "org.apache.kafka.tools.AclCommand",
            "kafka.admin.AclCommand",
        ],
        &all,
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_service_works_with_exactly_the_documented_acls_and_a_missing_one_is_a_clear_503() {
    let pki = pki();
    let broker = tokio::task::block_in_place(|| {
        secure_broker(
            &pki,
            &[
                "--set",
                "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "--set",
                "super.users=User:ANONYMOUS",
                "--set",
                "allow.everyone.if.no.acl.found=false",
            ],
        )
    });
    let admin = KafkaClient::new(config_for(&broker.plaintext)).unwrap();
    let topic = topic_on(&broker.plaintext, "acl-topic", 2).await;
    let prefix = unique("lp");
    // Exactly the list of docs/operations.md (Security): Describe on the roles' transactional ids,
    // Read and Describe on the topic, Describe on __transaction_state. No Write, no
    // DescribeConfigs.
    tokio::task::block_in_place(|| {
        acl(
            &broker.plaintext,
            &[
                "--allow-principal",
                "User:svc",
                "--operation",
                "Describe",
                "--transactional-id",
                &prefix,
                "--resource-pattern-type",
                "prefixed",
            ],
        );
        acl(
            &broker.plaintext,
            &[
                "--allow-principal",
                "User:svc",
                "--operation",
                "Read",
                "--operation",
                "Describe",
                "--topic",
                &topic,
            ],
        );
        acl(
            &broker.plaintext,
            &[
                "--allow-principal",
                "User:svc",
                "--operation",
                "Describe",
                "--topic",
                "__transaction_state",
            ],
        );
    });
    let minter = KafkaTransport::connect(
        admin,
        TransportConfig {
            topic: topic.clone(),
            partitions: None,
            create: None,
        },
    )
    .await
    .unwrap();
    let role = format!("{prefix}-orders");
    let outside = unique("not-granted");
    let held = acquire(Arc::new(minter), &role, "a", fast_options())
        .await
        .unwrap();
    let other = KafkaTransport::connect(
        KafkaClient::new(config_for(&broker.plaintext)).unwrap(),
        TransportConfig {
            topic: topic.clone(),
            partitions: None,
            create: None,
        },
    )
    .await
    .unwrap();
    let outside_token = krabka_authority::transport::Coordinator::acquire_epoch(
        &other,
        &outside,
        Duration::from_secs(30),
    )
    .await
    .unwrap();

    // The binary, as svc over SASL_PLAINTEXT, logging to a file.
    let pw = pki.dir.join("svc-password");
    std::fs::write(&pw, SVC_PASSWORD).unwrap();
    // Bearer tokens on too, with /metrics protected: no secret may show
    // in the logs (at debug), the metrics, the problems or the document.
    let tokens = pki.dir.join("api-tokens");
    std::fs::write(&tokens, format!("{API_TOKEN}\n")).unwrap();
    let port = free_port();
    let log_path = pki.dir.join("serve.log");
    let served = Process(
        binary()
            .args([
                "serve",
                "--bootstrap-servers",
                &broker.sasl_plaintext,
                "--topic",
                &topic,
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .args([
                "--kafka-security-protocol",
                "sasl_plaintext",
                "--kafka-sasl-mechanism",
                "SCRAM-SHA-256",
                "--kafka-sasl-username",
                "svc",
            ])
            .arg("--kafka-sasl-password-file")
            .arg(&pw)
            .arg("--api-tokens-file")
            .arg(&tokens)
            .args(["--request-timeout", "3s", "--kafka-operation-timeout", "2s"])
            .env("RUST_LOG", "debug")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap(),
    );
    let url = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let ask = |url: &str| {
        let request = client.get(url).bearer_auth(API_TOKEN);
        async move {
            let response = request.send().await.expect("the service answers");
            let (status, headers) = (response.status().as_u16(), response.headers().clone());
            let text = response.text().await.unwrap();
            (
                status,
                serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
                headers,
            )
        }
    };
    let outcome = async {
        // The binary binds a moment after spawn: a refused connection is "not yet".
        eventually(|| async {
            let ready = reqwest::get(format!("{url}/readyz")).await.ok()?;
            (ready.status() == 200).then_some(())
        })
        .await;
        let (status, body, _) = ask(&format!(
            "{url}/roles/{role}/authority?token={}",
            held.token()
        ))
        .await;
        assert_eq!(
            (status, body["verdict"].as_str()),
            (200, Some("authoritative")),
            "{body}"
        );
        let view = eventually(|| async {
            let (status, v, _) = ask(&format!("{url}/roles/{role}")).await;
            (status == 200 && v["lease"]["member"] == "a").then_some(v)
        })
        .await;
        assert_eq!(view["members"][0]["member"], "a");

        // No Describe on that transactional id: a clear 503, never a verdict.
        let (status, body, headers) = ask(&format!(
            "{url}/roles/{outside}/authority?token={outside_token}"
        ))
        .await;
        assert_eq!(status, 503, "{body}");
        assert!(headers.contains_key("retry-after"));
        // What to do, and the request id; Kafka's error only in the logs.
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains("credentials or permissions"), "{body}");
        assert!(!detail.contains("uthorization"), "{body}");
        assert!(body["requestId"].is_string(), "{body}");
        // Its own cause, not a coordinator that could not be asked: an
        // operator must grant the ACL.
        assert_eq!(
            (body["type"].as_str(), body["title"].as_str()),
            (
                Some("urn:krabka-authority:problem:kafka-denied"),
                Some("Kafka denied access")
            ),
            "{body}"
        );

        // A wrong token is refused without an echo of what was sent.
        let refused = reqwest::Client::new()
            .get(format!("{url}/roles/{role}"))
            .bearer_auth("wrong-token-123")
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401);
        let refused = refused.text().await.unwrap();
        let (_, metrics, _) = ask(&format!("{url}/metrics")).await;
        let (_, document, _) = get(&format!("{url}/openapi.yaml")).await;
        for (what, text) in [
            ("a 401 body", refused),
            ("/metrics", metrics.to_string()),
            ("/openapi.yaml", document.to_string()),
            ("a 503 body", body.to_string()),
        ] {
            for secret in [SVC_PASSWORD, API_TOKEN, "wrong-token-123"] {
                assert!(!text.contains(secret), "{what} shows a secret");
            }
        }
        body
    }
    .await;
    drop(served);
    let log = std::fs::read_to_string(&log_path).unwrap();
    let id = outcome["requestId"].as_str().unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains(id) && l.contains(&outside) && l.contains("uthorization")),
        "the reason is in the log line of request {id}: {log}"
    );
    for secret in [SVC_PASSWORD, API_TOKEN, "wrong-token-123"] {
        assert!(!log.contains(secret), "a secret leaked into the debug logs");
    }
    eprintln!(
        "least privilege: 200 with Describe(TransactionalId, prefixed) + Read/Describe(topic); missing ACL: {}",
        outcome["detail"]
    );
    drop(held);
    drop(broker);
    let _ = std::fs::remove_dir_all(&pki.dir);
}
