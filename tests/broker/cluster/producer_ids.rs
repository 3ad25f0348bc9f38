//! Issue 44 (3): producer ids do not only grow. The controller hands each
//! broker a block of 1000 producer ids (`ProducerIdsBlock`) when it first
//! needs one, and a coordinator draws from its own block: a role's producer
//! id changes when its transactional id expires
//! (`transactional.id.expiration.ms`) or its epoch runs out
//! (`TransactionMetadata.isProducerEpochExhausted`: InitProducerId at epoch
//! 32,766 rotates to a fresh id, `prepareProducerIdRotation`), to the block
//! of whichever broker coordinates the role then, lower as often as higher.
//!
//! On a cluster of this test's own (`transactional.id.expiration.ms` 8 s),
//! blocks are drawn so that broker 2 holds the highest: roles R (to
//! expire) and E (to exhaust) are minted there, E's epoch bumped to 32,760,
//! then broker 2 dies and their coordinators move to a broker of a lower
//! block. E's epoch runs out there, R expires and is minted again: both
//! land on lower producer ids. A service that saw the old pairs answers
//! the new ones `authoritative` and the old ones `superseded`, never a
//! lasting 503; a service started afterwards too. Before, every check of
//! the new pair answered 503 ("stale answer ... after 2001:32766 was
//! seen") until its deadline, and again after a restart.

use std::time::Duration;

use krabka_authority::coordination::FencingToken;
use krabka_authority::kafka::{
    ClientConfig, KafkaClient, KafkaTransport, TopicSpec, TransportConfig,
};
use krabka_authority::transport::Coordinator;
use tokio::time::Instant;

use crate::support::broker::kafka_script;
use crate::support::cluster::{coordinator_id, exclusive, service_config};
use crate::support::service::{Service, start};
use crate::support::{http_client, unique};

/// This test's cluster, stopped and removed when dropped.
struct Own(String);

impl Drop for Own {
    fn drop(&mut self) {
        let _ = std::process::Command::new(crate::support::repo().join("scripts/kafka"))
            .args(["stop", "--purge", "--name", &self.0])
            .output();
    }
}

fn client_of(bootstrap: &str) -> KafkaClient {
    let mut config = ClientConfig::new(bootstrap.split(','));
    config.client_id = "krabka-producer-ids-test".into();
    config.request_timeout = Duration::from_secs(2);
    config.operation_timeout = Duration::from_secs(20);
    KafkaClient::new(config).expect("client")
}

async fn transport(bootstrap: &str, topic: &str) -> KafkaTransport {
    KafkaTransport::connect(
        client_of(bootstrap),
        TransportConfig {
            topic: topic.to_owned(),
            partitions: None,
            create: None,
        },
    )
    .await
    .expect("a transport")
}

const LEASE: Duration = Duration::from_secs(60);

/// A role name coordinated by broker `id`.
async fn coordinated_by(client: &KafkaClient, id: i32, prefix: &str) -> String {
    loop {
        let role = unique(prefix);
        if coordinator_id(client, &role).await == id {
            return role;
        }
    }
}

/// A check's status and verdict.
async fn check(
    http: &reqwest::Client,
    service: &Service,
    role: &str,
    token: FencingToken,
) -> (u16, String) {
    match http
        .get(format!(
            "{}/roles/{role}/authority?token={token}",
            service.url
        ))
        .send()
        .await
    {
        Ok(answer) => {
            let status = answer.status().as_u16();
            let body: serde_json::Value = answer.json().await.unwrap_or_default();
            (status, body["verdict"].as_str().unwrap_or("").to_owned())
        }
        Err(e) => (0, e.to_string()),
    }
}

/// A role's new pair, its old one, and the verdict the old one must get.
struct Moved<'a> {
    role: &'a str,
    current: FencingToken,
    old: FencingToken,
    old_verdict: &'a str,
}

/// Checks `current` and `old` of `role` for `for_`: the instant `current`
/// was first `authoritative` (from `since`), and every answer that was not
/// what it must be once it was (200 for `current`, 409 `superseded` or
/// `unknown` for `old`, as `old_verdict` says).
async fn settle(
    http: &reqwest::Client,
    service: &Service,
    moved: Moved<'_>,
    since: Instant,
    for_: Duration,
) -> (Duration, Vec<String>, usize) {
    let Moved {
        role,
        current,
        old,
        old_verdict,
    } = moved;
    let mut first = None;
    let mut wrong = Vec::new();
    let mut checks = 0;
    let until = Instant::now() + for_;
    while Instant::now() < until || first.is_none() {
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "{current} of {role} never authoritative: {wrong:?}"
        );
        let (status, verdict) = check(http, service, role, current).await;
        checks += 1;
        if status == 200 {
            first.get_or_insert_with(|| since.elapsed());
        } else if first.is_some() {
            wrong.push(format!("{current}: {status} {verdict}"));
        }
        let (status, verdict) = check(http, service, role, old).await;
        checks += 1;
        if (status, verdict.as_str()) != (409, old_verdict) && first.is_some() {
            wrong.push(format!("{old}: {status} {verdict}"));
        }
        assert_ne!(status, 200, "200 for the old {old}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (first.unwrap_or_default(), wrong, checks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_role_whose_producer_id_goes_down_stays_checkable() {
    let _turn = exclusive().await;
    let started = Instant::now();
    let name = format!("producer-ids-{}", std::process::id());
    let bootstrap = tokio::task::block_in_place(|| {
        kafka_script(&[
            "start",
            "--name",
            &name,
            "--brokers",
            "3",
            "--set",
            "transactional.id.expiration.ms=8000",
            "--set",
            "transaction.remove.expired.transaction.cleanup.interval.ms=1000",
        ])
    });
    let own = Own(name.clone());
    let client = client_of(&bootstrap);
    let topic = unique("producer-ids-topic");
    client
        .topics()
        .ensure_topic(
            &topic,
            &TopicSpec {
                partitions: 3,
                replication_factor: 3,
                configs: Vec::new(),
            },
        )
        .await
        .expect("the topic");
    let minter = transport(&bootstrap, &topic).await;
    // Blocks drawn in this order: broker 1 the first, broker 3 the second,
    // broker 2 the highest.
    let mut low = Vec::new();
    for id in [1, 3] {
        let role = coordinated_by(&client, id, "block").await;
        low.push(minter.acquire_epoch(&role, LEASE).await.unwrap());
    }
    let expire = coordinated_by(&client, 2, "expire").await;
    let exhaust = coordinated_by(&client, 2, "exhaust").await;
    let mut e_pair = minter.acquire_epoch(&exhaust, LEASE).await.unwrap();
    assert!(
        low.iter().all(|t| t.producer_id() < e_pair.producer_id()),
        "broker 2 drew the highest block: {low:?}, then {e_pair}"
    );
    let bumping = Instant::now();
    while e_pair.producer_epoch() < 32_760 {
        e_pair = minter.acquire_epoch(&exhaust, LEASE).await.unwrap();
    }
    let bumped = bumping.elapsed();
    let r_pair = minter.acquire_epoch(&expire, LEASE).await.unwrap();
    let before = start(service_config(&bootstrap, &topic)).await;
    let http = http_client().build().unwrap();
    for (role, pair) in [(&exhaust, e_pair), (&expire, r_pair)] {
        assert_eq!(
            check(&http, &before, role, pair).await.0,
            200,
            "{role} {pair}"
        );
    }

    // Broker 2 dies: both roles move to a broker of a lower block.
    tokio::task::block_in_place(|| kafka_script(&["kill", "--name", &name, "--node", "2"]));
    let killed = Instant::now();
    loop {
        // A fresh client each time: never answered from a cache.
        let asked = client_of(&bootstrap);
        let mut moved = true;
        for role in [&expire, &exhaust] {
            moved &= asked
                .lookup()
                .transaction_coordinator(role)
                .await
                .is_ok_and(|c| c.id != 2);
        }
        if moved {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the roles never moved off broker 2"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // (b) E's epoch runs out at its new coordinator.
    let old_e = e_pair;
    while e_pair.same_producer(&old_e) {
        e_pair = transport(&bootstrap, &topic)
            .await
            .acquire_epoch(&exhaust, LEASE)
            .await
            .unwrap();
    }
    let rotated = Instant::now();
    assert!(
        e_pair.producer_id() < old_e.producer_id() && e_pair.producer_epoch() == 0,
        "{old_e} rotated to {e_pair}, from a lower block"
    );
    let (e_first, e_wrong, e_checks) = settle(
        &http,
        &before,
        Moved {
            role: &exhaust,
            current: e_pair,
            old: old_e,
            old_verdict: "superseded",
        },
        rotated,
        Duration::from_secs(5),
    )
    .await;

    // (a) R expires there (8 s idle), and is minted again.
    let expiring = Instant::now();
    loop {
        let asked = client_of(&bootstrap);
        if asked
            .describer()
            .describe_transaction(&expire)
            .await
            .is_ok_and(|d| d.is_none())
        {
            break;
        }
        assert!(
            expiring.elapsed() < Duration::from_secs(60),
            "{expire} never expired"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let expired = killed.elapsed();
    let new_r = transport(&bootstrap, &topic)
        .await
        .acquire_epoch(&expire, LEASE)
        .await
        .unwrap();
    let reminted = Instant::now();
    assert!(
        new_r.producer_id() < r_pair.producer_id(),
        "{r_pair} expired; {new_r} from a lower block"
    );
    let (r_first, r_wrong, r_checks) = settle(
        &http,
        &before,
        Moved {
            role: &expire,
            current: new_r,
            old: r_pair,
            old_verdict: "superseded",
        },
        reminted,
        Duration::from_secs(5),
    )
    .await;

    // A service started now never saw the old producer ids: their pairs
    // are not the current ones, and it cannot tell more (unknown).
    let after = start(service_config(&bootstrap, &topic)).await;
    let since = Instant::now();
    let (late_first, late_wrong, late_checks) = settle(
        &http,
        &after,
        Moved {
            role: &expire,
            current: new_r,
            old: r_pair,
            old_verdict: "unknown",
        },
        since,
        Duration::from_secs(3),
    )
    .await;
    eprintln!(
        "blocks: {low:?} then broker 2's ({old_e:?} bumped to epoch 32,760 in {bumped:?}, {r_pair}); broker 2 killed; {exhaust}'s epoch ran out at its new coordinator: {old_e} -> {e_pair}, authoritative {e_first:?} after (then {e_checks} checks, wrong {e_wrong:?}); {expire} expired {expired:?} after broker 2 was killed, {r_pair} -> {new_r}, authoritative {r_first:?} after the mint (then {r_checks} checks, wrong {r_wrong:?}); a service started afterwards: {late_first:?}, {late_checks} checks, wrong {late_wrong:?}; the test took {:?}",
        started.elapsed()
    );
    for (what, first, wrong) in [
        ("the rotated pair", e_first, e_wrong),
        ("the re-minted pair", r_first, r_wrong),
        ("a new service", late_first, late_wrong),
    ] {
        assert!(
            first < Duration::from_secs(3),
            "{what}: authoritative only {first:?} after"
        );
        assert!(wrong.is_empty(), "{what}: {wrong:?}");
    }
    drop(own);
}
