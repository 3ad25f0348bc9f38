//! Issue 44 (2): a broker replaced behind its address. A node id names a
//! registration, not a process: broker X, the coordinator of role R, is cut
//! off from the controller and goes on answering from memory on the
//! connections made to it, while a new process registers with X's node id
//! (a replaced host, a force-deleted pod whose volume was copied), leads
//! R's `__transaction_state` partition after a preferred election, and
//! mints a newer pair. Clients reach X through an address that now leads to
//! the new process for new connections (a moved DNS name; here a proxy),
//! while the connections made before stay with the old one.
//!
//! The cluster is one of this test's own (its brokers advertise an EXTERNAL
//! listener at proxies of the test), in the private network namespace of
//! the cluster tier (`scripts/kafka cut`). A service started before the
//! move and one started after it check the deposed and the new pair
//! without pause: 0 x 200 for the deposed pair. Before, the first answered
//! `200 authoritative` for it for as long as its connection lived (tried
//! twice on Kafka 4.1.1: 1,434 and 1,437 times in 30 s).

use std::time::Duration;

use krabka_authority::coordination::FencingToken;
use krabka_authority::kafka::{KafkaClient, TopicSpec};
use serde_json::Value;
use tokio::time::Instant;

use crate::support::broker::kafka_script;
use crate::support::cluster::{
    self, AfterReplacement, OwnCluster, coordinator_id, exclusive, own_client, service_config,
};
use crate::support::proxy::Proxy;
use crate::support::service::{check, start};
use crate::support::{http_client, unique};

fn client_of(bootstrap: &str) -> KafkaClient {
    own_client(bootstrap, "krabka-replacement-test")
}

/// A new pair minted through a client of its own (new connections, as a
/// new holder makes).
async fn mint(bootstrap: &str, topic: &str, role: &str) -> FencingToken {
    cluster::mint(client_of(bootstrap), topic, role).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_process_registered_with_a_cut_off_brokers_node_id_never_confirms_its_predecessor() {
    assert!(
        std::env::var("KRABKA_TEST_PARTITION").is_ok_and(|v| v == "1"),
        "cluster::replacement cuts a broker from the controller: run scripts/test --cluster-only as root"
    );
    let _turn = exclusive().await;
    let started = Instant::now();
    let name = format!("replacement-{}", std::process::id());
    tokio::task::block_in_place(|| {
        kafka_script(&[
            "start",
            "--name",
            &name,
            "--brokers",
            "3",
            "--controller-host",
            "127.0.0.2",
            "--broker-uids",
            "41000",
            "--set",
            "listeners=PLAINTEXT://127.0.0.1:{port},EXTERNAL://127.0.0.1:{free1}",
            "--set",
            "advertised.listeners=PLAINTEXT://127.0.0.1:{port},EXTERNAL://127.0.0.1:{free2}",
            "--set",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        ])
    });
    let own = OwnCluster(name.clone());
    let real = kafka_script(&["address", "--name", &name, "--listener", "EXTERNAL"]);
    let advertised = kafka_script(&[
        "address",
        "--name",
        &name,
        "--listener",
        "EXTERNAL",
        "--advertised",
    ]);
    let mut proxies = Vec::new();
    for (listen, to) in advertised.split(',').zip(real.split(',')) {
        proxies.push(Proxy::start(listen, to.to_owned()).await);
    }
    let x = 2;
    let x_addr = advertised.split(',').nth(x - 1).unwrap().to_owned();
    let bootstrap = advertised.clone();
    let client = client_of(&bootstrap);
    let topic = unique("replacement-topic");
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
    // R: coordinated by broker X (its preferred leader on a fresh cluster).
    let role = loop {
        let r = unique("replaced");
        if coordinator_id(&client, &r).await == x as i32 {
            break r;
        }
    };
    let t1 = mint(&bootstrap, &topic, &role).await;
    let before = start(service_config(&bootstrap, &topic)).await;
    let http = http_client().build().unwrap();
    let warm = check(&http, &before.url, &role, t1).await;
    assert_eq!(warm.as_ref().map(|(s, _)| *s), Some(200), "{warm:?}");

    // X loses the controller; once fenced, its partitions lead elsewhere.
    let cut = Instant::now();
    kafka_script(&["cut", "--name", &name, "--node", &x.to_string()]);
    let others: Vec<String> = advertised
        .split(',')
        .enumerate()
        .filter(|(i, _)| *i != x - 1)
        .map(|(_, a)| a.to_owned())
        .collect();
    loop {
        let asked = client_of(&others.join(","));
        if asked
            .lookup()
            .transaction_coordinator(&role)
            .await
            .is_ok_and(|c| c.id != x as i32)
        {
            break;
        }
        assert!(
            cut.elapsed() < Duration::from_secs(30),
            "{role}'s coordinator never moved"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let fenced = cut.elapsed();
    // The replacement: X's node id, a copy of its data, new ports; the
    // address X is advertised at leads to it for new connections.
    let listeners: Value = serde_json::from_str(&tokio::task::block_in_place(|| {
        kafka_script(&[
            "replace",
            "--name",
            &name,
            "--node",
            &x.to_string(),
            "--keep-advertised",
            "EXTERNAL",
        ])
    }))
    .expect("the replacement's listeners");
    proxies[x - 1].point(listeners["EXTERNAL"].as_str().unwrap().to_owned());
    // In sync, then the preferred leader of its partitions again (X led
    // R's: it is the first replica).
    let moved_back = loop {
        let _ = std::process::Command::new(crate::support::repo().join("scripts/kafka"))
            .args(["elect", "--name", &name])
            .output();
        let asked = client_of(&bootstrap);
        if asked
            .lookup()
            .transaction_coordinator(&role)
            .await
            .is_ok_and(|c| c.id == x as i32)
        {
            break cut.elapsed();
        }
        assert!(
            cut.elapsed() < Duration::from_secs(90),
            "the replacement never led {role}'s partition"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let t2 = mint(&bootstrap, &topic, &role).await;
    let minted = Instant::now();
    assert!(
        t2.same_producer(&t1) && t2.producer_epoch() > t1.producer_epoch(),
        "{t1} {t2}"
    );
    let after = start(service_config(&bootstrap, &topic)).await;

    // Both services, both tokens, without pause, for 20 s, then the CLI
    // from the moved address.
    let seen = AfterReplacement::observe(
        [&before.url, &after.url],
        &role,
        (t1, t2),
        minted,
        &x_addr,
        &topic,
    )
    .await;
    eprintln!(
        "broker {x} cut; fenced (its coordinator moved) {fenced:?} after the cut; its replacement led {role}'s partition {moved_back:?} after it; {t2} minted {:?} after the cut; checks (before, after the move) of {t1} and {t2}: {:?}; first 200 for {t2}: {:?} after the mint; 200s for {t1}: {}; the CLI from the moved address exited {:?}; the test took {:?}",
        minted - cut,
        seen.counts,
        seen.first_t2,
        seen.yes_t1.len(),
        seen.cli.status.code(),
        started.elapsed()
    );
    seen.assert_held((t1, t2));
    // The old process goes, and its user's routes with it.
    kafka_script(&["kill", "--name", &name, "--node", &x.to_string()]);
    kafka_script(&["mend", "--name", &name, "--node", &x.to_string()]);
    drop(own);
}
