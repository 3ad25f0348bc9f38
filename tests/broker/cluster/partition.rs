//! Issue 21 (a): an asymmetric network partition. Broker X, the transaction
//! coordinator of role R and the leader of R's partition of the coordination
//! topic, loses its link to the controller while clients and the other
//! brokers still reach it (`scripts/kafka cut`: policy routing by X's user
//! in a private network namespace). The controller fences X after
//! `broker.session.timeout.ms` and moves its leaderships; a standby of R
//! mints T2 at the new coordinator (R's holder is killed once the
//! coordinator moved, as if it were on X's side: a holder that reaches the
//! new coordinator may keep its role); X never learns of it and keeps
//! answering T1 from memory for as long as the partition lasts.
//!
//! Two services, one bootstrapped from every broker and one from X only,
//! checked by a steady load (current and deposed tokens of every role), and
//! the views sampled of R and of S, a role of the same partition whose
//! coordinator is elsewhere (its holder keeps writing leases to the
//! partition's new leader through the partition, so a view still read from
//! X lags visibly): 0 × 200 for a deposed token; 0 views claiming an age
//! more than 1 s below their real lag (the leases written since, by their
//! members); 0 lookups or confirmations sent to X after a service first
//! reported it stale; roles coordinated elsewhere never 503.

use std::time::Duration;

use krabka_authority::coordination::role_partition;
use krabka_authority::kafka::{ClientConfig, KafkaClient};
use tokio::time::Instant;

use super::samples::{BrokerWatch, Sampler, honesty, since_stale};
use crate::support::cluster::{
    BROKER_REQUEST_TIMEOUT, Known, LEASE, Load, Members, SESSION_TIMEOUT, Scene, assert_sound,
    cluster, cluster_topic, coordinator_id, exclusive, role_led_by_its_coordinator, service_config,
    takeover, unavailable,
};
use crate::support::process::binary;
use crate::support::service::start;
use crate::support::{http_client, unique};
use krabka_authority::coordination::FencingToken;

/// How long the partition lasts once R's new holder has minted.
const AFTER_MINT: Duration = Duration::from_secs(8);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_cut_from_the_controller_while_it_coordinates_and_leads_a_held_role() {
    assert!(
        std::env::var("KRABKA_TEST_PARTITION").is_ok_and(|v| v == "1"),
        "cluster::partition needs the cluster scripts/test starts as root in a private network \
         namespace (the controller on its own address, each broker as its own user): run \
         scripts/test --cluster-only as root"
    );
    let _turn = exclusive().await;
    let started = Instant::now();
    let partitions = 6;
    let topic = cluster_topic(partitions).await;
    let client = cluster().client();
    // R: coordinated by the leader of its own partition.
    let (role, x) = role_led_by_its_coordinator(&client, &topic, partitions, "cut-r").await;
    // S: the same partition, coordinated elsewhere.
    let p = role_partition(&role, partitions).unwrap();
    let companion = loop {
        let s = unique("cut-s");
        if role_partition(&s, partitions).unwrap() == p && coordinator_id(&client, &s).await != x {
            break s;
        }
    };
    let mut roles = vec![role.clone(), companion.clone()];
    roles.extend((0..4).map(|i| format!("{}-{i}", unique("cut-other"))));
    let known = Known::default();
    let mut members = Members::start(&topic, &roles, 2, &known).await;
    members
        .wait_for_holders(&roles, Duration::from_secs(30))
        .await;
    let mut affected = Vec::new();
    for r in &roles {
        if coordinator_id(&client, r).await == x {
            affected.push(r.clone());
        }
    }
    let x_addr = cluster().address(x);
    let services = [
        start(service_config(&cluster().bootstrap, &topic)).await,
        start(service_config(&x_addr, &topic)).await,
    ];
    let loads: Vec<Load> = services
        .iter()
        .map(|s| Load::start(&s.url, &roles, &members.holders, &known, 2))
        .collect();
    let samplers: Vec<[Sampler; 2]> = services
        .iter()
        .map(|s| {
            [
                Sampler::start(&s.url, &role),
                Sampler::start(&s.url, &companion),
            ]
        })
        .collect();
    let watches: Vec<BrokerWatch> = services
        .iter()
        .map(|s| BrokerWatch::start(&s.url, &x_addr))
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;

    let t1 = members.holders.current(&role).unwrap();
    let cut = Instant::now();
    cluster().act("cut", x);
    // The controller fences X after the session timeout and R's
    // coordinator moves, as the other brokers say; then R's holder dies.
    let mut others = ClientConfig::new(cluster().addresses_but(x));
    others.request_timeout = Duration::from_secs(1);
    loop {
        // A fresh client each time: asked of the other brokers only, and
        // never answered from a cache.
        let asked = KafkaClient::new(others.clone()).unwrap();
        if asked
            .lookup()
            .transaction_coordinator(&role)
            .await
            .is_ok_and(|c| c.id != x)
        {
            break;
        }
        assert!(
            cut.elapsed() < SESSION_TIMEOUT + Duration::from_secs(10),
            "{role}'s coordinator never moved off the cut broker {x}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let moved = cut.elapsed();
    members.kill_holder(&role);
    let budget = LEASE + BROKER_REQUEST_TIMEOUT + Duration::from_secs(10);
    let took = moved + takeover(&members.holders, &role, t1, budget).await;
    let t2 = members.holders.current(&role).unwrap();
    let partition_until = Instant::now() + AFTER_MINT;
    // Issue 44 (1): clients that have not learned the cluster's size yet,
    // bootstrapped from X alone while it is cut off: the CLI (a fresh
    // client per run) and a service started now. Before, "no Metadata
    // answer yet" counted as one broker, and the CLI answered
    // `authoritative` for T1 and exited 0 (5 of 5 runs).
    let cli_topic = topic.clone();
    let cli = |token: FencingToken| {
        let out = tokio::task::block_in_place(|| {
            binary()
                .args([
                    "check",
                    "--bootstrap-servers",
                    &x_addr,
                    "--topic",
                    &cli_topic,
                    &role,
                    &token.to_string(),
                ])
                .output()
                .expect("the binary runs")
        });
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let cut_cli: Vec<_> = (0..5).map(|_| cli(t1)).collect();
    let fresh = start(service_config(&x_addr, &topic)).await;
    let http = http_client().build().unwrap();
    let mut fresh_answers = Vec::new();
    while Instant::now() + Duration::from_secs(1) < partition_until {
        let answer = http
            .get(format!("{}/roles/{role}/authority?token={t1}", fresh.url))
            .send()
            .await;
        fresh_answers.push(answer.map(|a| a.status().as_u16()).unwrap_or(0));
    }
    tokio::time::sleep_until(partition_until).await;
    // The instant the link is back: `mend` restores it first, then waits
    // (seconds) until the controller has unfenced X, and X may catch up
    // and be asked again meanwhile.
    let mended = Instant::now();
    cluster().act("mend", x);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let scene = Scene {
        topic,
        roles: roles.clone(),
        known: known.clone(),
        members,
    };
    for service in &services {
        scene
            .holders_authoritative(&service.url, Duration::from_secs(20))
            .await;
    }
    // Healed: the CLI from X answers right. A fresh client bootstrapped
    // from X alone while X still catches up may be undecided (exit 2, a
    // refusal, never a verdict): asked again, up to three times; a wrong
    // verdict fails at once.
    let now_held = scene.members.holders.current(&role).unwrap();
    let healed = |token: FencingToken| {
        let mut undecided = 0;
        loop {
            let answer = cli(token);
            if answer.0 != Some(2) || undecided == 2 {
                return (answer, undecided);
            }
            undecided += 1;
        }
    };
    let (held_cli, held_undecided) = healed(now_held);
    let (t1_cli, t1_undecided) = healed(t1);
    eprintln!("healed: the CLI undecided {held_undecided} and {t1_undecided} time(s) first");
    let healed_cli = [held_cli, t1_cli];

    let mut answers = Vec::new();
    for load in loads {
        answers.push(load.finish().await);
    }
    let mut views = Vec::new();
    for [of_r, of_s] in samplers {
        views.push([of_r.finish().await.0, of_s.finish().await.0]);
    }
    let mut stale = Vec::new();
    for watch in watches {
        stale.push(since_stale(&watch.finish().await, mended));
    }
    let minted = cut + took;
    for (i, ((answers, [of_r, of_s]), stale)) in answers.iter().zip(&views).zip(&stale).enumerate()
    {
        let which = ["bootstrapped from every broker", "bootstrapped from X only"][i];
        let outages = unavailable(answers, cut);
        let honest = honesty(of_r, &known.writes(&role));
        let honest_s = honesty(of_s, &known.writes(&companion));
        let first_t2 = answers
            .iter()
            .filter(|a| a.role == role && a.token == t2 && a.status == Ok(200))
            .map(|a| a.got)
            .min();
        eprintln!(
            "cut broker {x} ({x_addr}), the coordinator and partition leader of {role}: its coordinator moved {moved:?} after the cut, {t2} was minted {took:?} and the partition mended {:?} after the cut; service {which}: {} checks ({} of tokens deposed by then), 503s {outages:?} (affected {affected:?}); first 200 for {t2} {:?} after the mint; {} views of {role}: {} claim an age more than 1 s below their real lag (largest real lag {} ms, oldest claimed {} ms, {} header mismatches); {} views of {companion} (its partition, coordinated elsewhere, {} leases written): {} dishonest (largest real lag {} ms, oldest claimed {} ms); broker {x} first seen stale {:?} after the cut, then stale for {:?} of the partition: {} lookups/confirmations and {} metadata requests (probes) sent to it from then until the mend",
            mended - cut,
            answers.len(),
            answers
                .iter()
                .filter(|a| scene.members.holders.current(&a.role) != Some(a.token))
                .count(),
            first_t2.map(|at| at.saturating_duration_since(minted)),
            honest.views,
            honest.dishonest.len(),
            honest.worst_lag_ms,
            honest.oldest_ms,
            honest.header_mismatches,
            honest_s.views,
            known.writes(&companion).len(),
            honest_s.dishonest.len(),
            honest_s.worst_lag_ms,
            honest_s.oldest_ms,
            stale.first.map(|at| at - cut),
            stale.stale_for,
            stale.find_coordinator,
            stale.metadata,
        );
        // 0 x 200 for a deposed token, every check answered, each role
        // given verdicts after the cut.
        assert_sound(answers, &known, &roles, cut, 5);
        assert!(
            honest.dishonest.is_empty(),
            "{which}: views claiming freshness they lack: {:?}",
            honest.dishonest
        );
        assert!(
            honest_s.dishonest.is_empty(),
            "{which}: views of {companion} claiming freshness they lack: {:?}",
            honest_s.dishonest
        );
        assert_eq!(
            honest.header_mismatches + honest_s.header_mismatches,
            0,
            "{which}"
        );
        assert!(honest.views > 0, "{which}: no view of {role} answered");
        assert!(
            stale.first.is_some(),
            "{which}: broker {x} was never seen stale"
        );
        assert_eq!(
            stale.find_coordinator, 0,
            "{which}: lookups or confirmations sent to broker {x} after it was seen stale"
        );
        for (r, outage) in &outages {
            assert!(
                affected.contains(r),
                "{which}: {r} is not coordinated by the cut broker, yet answered 503: {outage:?}"
            );
        }
    }
    eprintln!(
        "cut test: {:?} in all, the partition lasting {:?}; during it, from X alone: the CLI on {t1} {cut_cli:?}, a service started after the mint {} checks of {t1}: {:?} 503s, {} 409s, {} 200s; healed, the CLI on the pair held then and {t1}: {healed_cli:?}",
        started.elapsed(),
        mended - cut,
        fresh_answers.len(),
        fresh_answers.iter().filter(|s| **s == 503).count(),
        fresh_answers.iter().filter(|s| **s == 409).count(),
        fresh_answers.iter().filter(|s| **s == 200).count(),
    );
    assert!(
        cut_cli.iter().all(|(code, _)| *code != Some(0)),
        "the CLI from the cut broker called the deposed {t1} authoritative: {cut_cli:?}"
    );
    assert!(
        !fresh_answers.is_empty() && !fresh_answers.contains(&200),
        "{fresh_answers:?}"
    );
    assert_eq!(
        (healed_cli[0].0, healed_cli[1].0),
        (Some(0), Some(1)),
        "healed: {healed_cli:?}"
    );
}
