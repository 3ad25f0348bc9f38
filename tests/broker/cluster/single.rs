//! Issue 52 (2): the one broker of a cluster replaced behind its address.
//! A cluster of one broker with its controller elsewhere (node pools, a
//! staging cluster): the broker is cut off from the controller and goes on
//! answering from memory on the connections made to it, while a new process
//! registers with its node id (a force-deleted pod whose volume was
//! copied), leads `__transaction_state` again and mints a newer pair.
//! Clients reach the broker through an address that now leads to the new
//! process for new connections (a moved DNS name; here a proxy), while the
//! connections made before stay with the old one. No other broker can say
//! which process leads.
//!
//! A service started before the move and one started after it check the
//! deposed and the new pair without pause: 0 x 200 for the deposed pair,
//! and the CLI from the moved address exits 1. Before, a cluster known to
//! be one broker was never confirmed: the service started before the move
//! answered 200 for the deposed pair for as long as its connection lived.

use krabka_authority::coordination::FencingToken;
use krabka_authority::kafka::{KafkaClient, TopicSpec};
use serde_json::Value;
use tokio::time::Instant;

use crate::support::broker::kafka_script;
use crate::support::cluster::{
    self, AfterReplacement, OwnCluster, exclusive, own_client, service_config,
};
use crate::support::proxy::Proxy;
use crate::support::service::{check, start};
use crate::support::{http_client, unique};

fn client_of(bootstrap: &str) -> KafkaClient {
    own_client(bootstrap, "krabka-single-test")
}

/// A new pair minted through a client of its own (new connections, as a
/// new holder makes).
async fn mint(bootstrap: &str, topic: &str, role: &str) -> FencingToken {
    cluster::mint(client_of(bootstrap), topic, role).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_one_broker_replaced_behind_its_address_never_confirms_its_predecessor() {
    assert!(
        std::env::var("KRABKA_TEST_PARTITION").is_ok_and(|v| v == "1"),
        "cluster::single cuts a broker from the controller: run scripts/test --cluster-only as root"
    );
    let _turn = exclusive().await;
    let started = Instant::now();
    let name = format!("single-{}", std::process::id());
    tokio::task::block_in_place(|| {
        kafka_script(&[
            "start",
            "--name",
            &name,
            "--brokers",
            "1",
            "--controller-host",
            "127.0.0.2",
            "--broker-uids",
            "42000",
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
    let proxy = Proxy::start(&advertised, real.clone()).await;
    let bootstrap = advertised.clone();
    let client = client_of(&bootstrap);
    let topic = unique("single-topic");
    client
        .topics()
        .ensure_topic(
            &topic,
            &TopicSpec {
                partitions: 1,
                replication_factor: 1,
                configs: Vec::new(),
            },
        )
        .await
        .expect("the topic");
    let role = unique("single");
    let t1 = mint(&bootstrap, &topic, &role).await;
    let before = start(service_config(&bootstrap, &topic)).await;
    let http = http_client().build().unwrap();
    let warm = check(&http, &before.url, &role, t1).await;
    assert_eq!(warm.as_ref().map(|(s, _)| *s), Some(200), "{warm:?}");

    // The broker loses the controller; its replacement (its node id, a
    // copy of its data, new ports) registers once the old one's session
    // ended, and the address leads to it for new connections.
    let cut = Instant::now();
    kafka_script(&["cut", "--name", &name, "--node", "1"]);
    let listeners: Value = serde_json::from_str(&tokio::task::block_in_place(|| {
        kafka_script(&[
            "replace",
            "--name",
            &name,
            "--node",
            "1",
            "--keep-advertised",
            "EXTERNAL",
        ])
    }))
    .expect("the replacement's listeners");
    proxy.point(listeners["EXTERNAL"].as_str().unwrap().to_owned());
    // The new holder: new connections, so the new process, once it leads
    // `__transaction_state` (retried within the mint's 60 s).
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
        &bootstrap,
        &topic,
    )
    .await;
    eprintln!(
        "the one broker cut; {t2} minted at its replacement {:?} after the cut; checks (before, after the move) of {t1} and {t2}: {:?}; first 200 for {t2}: {:?} after the mint; 200s for {t1}: {}; the CLI from the moved address exited {:?}; the test took {:?}",
        minted - cut,
        seen.counts,
        seen.first_t2,
        seen.yes_t1.len(),
        seen.cli.status.code(),
        started.elapsed()
    );
    seen.assert_held((t1, t2));
    // The old process goes, and its user's routes with it.
    kafka_script(&["kill", "--name", &name, "--node", "1"]);
    kafka_script(&["mend", "--name", &name, "--node", "1"]);
    drop(own);
}
