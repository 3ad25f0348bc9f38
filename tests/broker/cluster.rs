//! Kafka as it runs in production: a controller and three brokers,
//! replication factor 3, `min.insync.replicas` 2. Brokers are killed (kill
//! -9), hung (SIGSTOP) and restarted under the service and the
//! leader-election client, and every answer is checked against what was
//! minted (the harness: `support/cluster.rs`).
//!
//! The tests share one cluster and run one at a time; each leaves every
//! broker running. Run them alone with `scripts/test --cluster-only` (or
//! `cargo test --features broker-tests --test broker cluster::` with
//! `KRABKA_TEST_CLUSTER` and `KRABKA_TEST_CLUSTER_NAME` set).
//!
//! [`partition`] cuts a broker from the controller alone, which needs the
//! cluster `scripts/test` starts as root in a private network namespace
//! ([`replacement`], [`rack`] and [`single`] start clusters of their own
//! there);
//! [`pauses`] pauses the controller and a partition's leader; [`disk`]
//! freezes the disk of a role's coordinator, which needs root too (each
//! broker's data on a loop-mounted file system); they judge the views'
//! claimed ages with [`samples`].

mod disk;
mod partition;
mod pauses;
mod producer_ids;
mod rack;
mod replacement;
mod samples;
mod single;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use krabka_authority::coordination::role_partition;
use krabka_authority::kafka::{ClientConfig, KafkaClient};
use serde_json::Value;
use tokio::time::Instant;

use crate::support::cluster::{
    Answer, BROKER_REQUEST_TIMEOUT, CHECK_WAIT, Known, LEASE, Members, ROSTER_TTL, SESSION_TIMEOUT,
    STAGGER, Scene, TRANSACTION_PARTITIONS, assert_sound, cluster, cluster_topic, coordinator_id,
    exclusive, metric, service_config, takeover, transaction_partition, transaction_state_replicas,
    unavailable, verdicts,
};
use crate::support::service::start;
use crate::support::{http_client, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_coordinator_of_held_roles() {
    let _turn = exclusive().await;
    let mut scene = Scene::hold("kill-coord", 6, 2, 6).await;
    let (service, load) = scene.serve(&cluster().bootstrap, 4).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let victim = coordinator_id(&cluster().client(), &scene.roles[0]).await;
    let affected = scene.coordinated_by(victim).await;
    let (roles, known) = (scene.roles.clone(), scene.known.clone());
    // The holder of the first role dies with its coordinator: a standby
    // must mint on the new coordinator. The other holders may keep their
    // roles (their token moves with the transaction state) or lose them.
    let old = scene.members.holders.current(&roles[0]).unwrap();
    scene.members.kill_holder(&roles[0]);
    let killed = Instant::now();
    cluster().act("kill", victim);
    let budget = LEASE + STAGGER + SESSION_TIMEOUT + Duration::from_secs(8);
    let took = takeover(&scene.members.holders, &roles[0], old, budget).await;
    eprintln!(
        "kill coordinator {victim} and a holder: a standby took over after {took:?} (budget {budget:?})"
    );
    for role in &affected {
        let held = known
            .held_again(role, killed + SESSION_TIMEOUT, budget)
            .await;
        eprintln!(
            "kill coordinator {victim}: {role} held again {held:?} after the session timeout"
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let answers = load.finish().await;
    let lookups = metric(&service, "krabka_coordinator_lookups_total").await;
    let outages = unavailable(&answers, killed);
    eprintln!(
        "kill coordinator {victim}: {} checks ({:?} verdicts after the kill), affected roles {affected:?}, 503s {outages:?}, {lookups} lookups in all",
        answers.len(),
        verdicts(&answers, &roles, killed)
    );
    assert_sound(&answers, &known, &roles, killed, 5);
    for (role, outage) in &outages {
        assert!(
            affected.contains(role),
            "{role} is not coordinated by the dead broker, yet answered 503: {outage:?}"
        );
    }
    assert!(
        answers
            .iter()
            .filter(|a| a.sent > killed && a.is_verdict())
            .count()
            > 100,
        "too few verdicts after the kill"
    );
    scene
        .holders_authoritative(&service.url, Duration::from_secs(20))
        .await;
    // No storm: lookups are batched and gated per failed coordinator (one
    // per backoff of 100 ms doubling to 1 s), whatever the check load.
    let bound = 2.0 * killed.elapsed().as_secs_f64() + 10.0;
    assert!(
        lookups <= bound,
        "{lookups} coordinator lookups (bound {bound:.0})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_leader_of_a_roles_partition_and_its_holder() {
    let _turn = exclusive().await;
    let mut scene = Scene::hold("kill-leader", 3, 2, 6).await;
    let (topic, roles) = (scene.topic.clone(), scene.roles.clone());
    let members = &mut scene.members;
    let client = cluster().client();
    let partition = role_partition(&roles[0], 6).unwrap();
    let victim = client
        .metadata()
        .partition_leader(&topic, partition)
        .await
        .unwrap();
    let old = members.holders.current(&roles[0]).unwrap();
    // The holder dies with the partition's leader: the standby must read
    // the partition from its new leader to see the lease lapse.
    members.kill_holder(&roles[0]);
    cluster().act("kill", victim);
    // A renewal committing as the broker dies may leave the commit's
    // transaction log append to the coordinator's retry (it times out after
    // the transaction timeout, the lease): minting waits for that retry.
    let stalled_commit = LEASE + BROKER_REQUEST_TIMEOUT;
    let budget = (LEASE + STAGGER + SESSION_TIMEOUT).max(stalled_commit) + Duration::from_secs(8);
    let took = takeover(&members.holders, &roles[0], old, budget).await;
    eprintln!(
        "kill leader {victim} of partition {partition} and the holder: taken over after {took:?} (budget {budget:?})"
    );
    let new_leader = cluster()
        .client()
        .metadata()
        .partition_leader(&topic, partition)
        .await
        .unwrap();
    assert_ne!(new_leader, victim, "the partition moved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_hung_for_20_seconds() {
    let _turn = exclusive().await;
    let partitions = 6;
    let scene = Scene::hold("hung", 12, 2, partitions).await;
    let (service, load) = scene.serve(&cluster().bootstrap, 4).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let client = cluster().client();
    let victim = coordinator_id(&client, &scene.roles[0]).await;
    let affected = scene.coordinated_by(victim).await;
    let (topic, roles, known) = (&scene.topic, &scene.roles, &scene.known);
    let mut healthy_roles = Vec::new();
    for role in roles {
        let p = role_partition(role, partitions).unwrap();
        if client.metadata().partition_leader(topic, p).await.unwrap() != victim {
            healthy_roles.push(role.clone());
        }
    }
    let paused = Instant::now();
    cluster().act("pause", victim);
    // Views of partitions on healthy leaders stay fresh during the hang,
    // but where Kafka itself holds a partition back: a holder's lease goes
    // to its role's partition in a transaction its role's coordinator
    // runs, and one the pause catches open (records appended, commit
    // markers not written yet) holds that partition's last stable offset
    // until another broker takes the coordinator over, after the victim's
    // session times out: read_committed reads, every member's too, stop
    // there, and the views honestly age (a CI run: 1.65 s to 9.7 s, with
    // "an open transaction holds the partition's last stable offset back"
    // logged). So the test reads each healthy partition as a member would
    // and excuses a view that is late only while, or just after, Kafka
    // held its partition back (its last stable offset stuck below the high
    // watermark).
    let http = http_client().build().unwrap();
    let bound = ROSTER_TTL + Duration::from_secs(1);
    let mut oldest = Duration::ZERO;
    let mut late = Vec::new();
    let mut held_at: BTreeMap<i32, Instant> = BTreeMap::new();
    let mut stuck: BTreeMap<i32, (i64, Instant)> = BTreeMap::new();
    while paused.elapsed() < Duration::from_secs(20) {
        for role in &healthy_roles {
            let p = role_partition(role, partitions).unwrap();
            // One fetch as the service's tailer sends it: its answer
            // carries the last stable offset and the high watermark.
            if let Some((lso, hwm)) = offsets(&client, topic, p).await {
                // Every transaction holds the offset for the milliseconds
                // between its append and its markers; held back is the
                // same offset held half a second or more.
                if lso < hwm {
                    let (offset, since) = *stuck.entry(p).or_insert((lso, Instant::now()));
                    if offset != lso {
                        stuck.insert(p, (lso, Instant::now()));
                    } else if since.elapsed() >= Duration::from_millis(500) {
                        held_at.insert(p, Instant::now());
                    }
                } else {
                    stuck.remove(&p);
                }
            }
            let response = http
                .get(format!("{}/roles/{role}", service.url))
                .timeout(Duration::from_secs(5))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            let age = Duration::from_millis(body["view"]["ageMs"].as_u64().unwrap_or(u64::MAX));
            oldest = oldest.max(age);
            let held = held_at.get(&p).is_some_and(|at| at.elapsed() <= bound);
            if status != 200 || (age > bound && !held) {
                late.push(format!(
                    "{role} at {:?}: {status} age {age:?}",
                    paused.elapsed()
                ));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cluster().act("resume", victim);
    let resumed = Instant::now();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let answers = load.finish().await;
    let outages = unavailable(&answers, paused);
    let recovered: BTreeMap<&String, Duration> = outages
        .iter()
        .map(|(role, (_, _, last))| (role, *last))
        .collect();
    eprintln!(
        "hung broker {victim} for 20 s: {} checks; healthy views at most {oldest:?} old (bound {bound:?}, but on partitions Kafka held back: {:?}); affected {affected:?}; 503s {outages:?}; checks correct again after {recovered:?} from the pause (resumed at {:?})",
        answers.len(),
        held_at.keys().collect::<Vec<_>>(),
        resumed - paused
    );
    assert_sound(&answers, known, roles, paused, 5);
    assert!(
        late.is_empty(),
        "views of healthy partitions went stale: {late:?}"
    );
    for (role, outage) in &outages {
        assert!(
            affected.contains(role),
            "{role} is not coordinated by the hung broker, yet answered 503: {outage:?}"
        );
    }
    // After the hang, every role answers again.
    let tail: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.sent > resumed + Duration::from_secs(5))
        .collect();
    assert!(
        !tail.is_empty() && tail.iter().all(|a| a.is_verdict()),
        "other answers than verdicts 5 s after the resume: {:?}",
        tail.iter().filter(|a| !a.is_verdict()).collect::<Vec<_>>()
    );
    scene
        .holders_authoritative(&service.url, Duration::from_secs(10))
        .await;
}

/// A partition's last stable offset and high watermark, from one
/// read_committed fetch at its leader (none when it does not answer within
/// a second).
async fn offsets(client: &KafkaClient, topic: &str, partition: i32) -> Option<(i64, i64)> {
    let reader = client.reader();
    let fetch = async {
        let (leaders, _) = reader.partition_leaders(topic, &[(partition, 0)]).await;
        let (leader, positions) = leaders.into_iter().next()?;
        let chunks = reader
            .fetch_from(&leader, topic, &positions, Duration::ZERO)
            .await
            .ok()?;
        let (_, chunk) = chunks.into_iter().next()?;
        let chunk = chunk.ok()?;
        Some((chunk.last_stable_offset, chunk.high_watermark))
    };
    tokio::time::timeout(Duration::from_secs(1), fetch)
        .await
        .ok()
        .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_the_lowest_id_broker_dead_a_new_candidate_joins_and_takes_a_role() {
    let _turn = exclusive().await;
    let topic = cluster_topic(3).await;
    let lowest = cluster().nodes().iter().map(|n| n.id).min().unwrap();
    cluster().act("kill", lowest);
    let known = Known::default();
    let role = [unique("new-candidate")];
    let started = Instant::now();
    let members = Members::start(&topic, &role, 1, &known).await;
    let within = SESSION_TIMEOUT + Duration::from_secs(20);
    members.wait_for_holders(&role, within).await;
    eprintln!(
        "lowest-id broker {lowest} dead: a new candidate took a role after {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bootstrapped_from_one_broker_that_then_dies() {
    let _turn = exclusive().await;
    let scene = Scene::hold("one-bootstrap", 6, 1, 3).await;
    let (roles, known) = (&scene.roles, &scene.known);
    // The service knows one broker only.
    let client = cluster().client();
    let mut coordinators = HashMap::new();
    for role in roles {
        coordinators.insert(role.clone(), coordinator_id(&client, role).await);
    }
    let only = cluster()
        .nodes()
        .iter()
        .map(|n| n.id)
        .find(|id| coordinators.values().filter(|c| *c == id).count() < roles.len())
        .unwrap();
    let (service, load) = scene.serve(&cluster().address(only), 3).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let killed = Instant::now();
    cluster().act("kill", only);
    tokio::time::sleep(SESSION_TIMEOUT + Duration::from_secs(6)).await;
    let answers = load.finish().await;
    let outages = unavailable(&answers, killed);
    eprintln!(
        "bootstrap broker {only} killed: {} checks ({:?} verdicts after the kill), 503s {outages:?}",
        answers.len(),
        verdicts(&answers, roles, killed)
    );
    assert_sound(&answers, known, roles, killed, 5);
    for (role, outage) in &outages {
        assert_eq!(
            coordinators[role], only,
            "{role} is not coordinated by the dead bootstrap broker, yet answered 503: {outage:?}"
        );
    }
    let tail = answers
        .iter()
        .filter(|a| a.sent > killed + SESSION_TIMEOUT + Duration::from_secs(4));
    assert!(
        tail.clone().count() > 0 && tail.clone().all(Answer::is_verdict),
        "other answers than verdicts after the move: {:?}",
        tail.filter(|a| !a.is_verdict()).collect::<Vec<_>>()
    );
    scene
        .holders_authoritative(&service.url, Duration::from_secs(10))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart() {
    let _turn = exclusive().await;
    let scene = Scene::hold("rolling", 6, 2, 6).await;
    let (service, load) = scene.serve(&cluster().bootstrap, 3).await;
    let (roles, members, known) = (&scene.roles, &scene.members, &scene.known);
    let started = Instant::now();
    for node in cluster().nodes() {
        cluster().act("stop", node.id);
        tokio::time::sleep(Duration::from_secs(2)).await;
        cluster().act("start-node", node.id);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let answers = load.finish().await;
    let outages = unavailable(&answers, started);
    eprintln!(
        "rolling restart in {:?}: {} checks ({:?} verdicts), 503s {outages:?}",
        started.elapsed(),
        answers.len(),
        verdicts(&answers, roles, started)
    );
    assert_sound(&answers, known, roles, started, 5);
    members
        .wait_for_holders(roles, Duration::from_secs(20))
        .await;
    let last = answers
        .iter()
        .rfind(|a| a.sent > started + Duration::from_secs(1));
    assert!(
        last.is_some_and(Answer::is_verdict),
        "the service answers after the restart: {last:?}"
    );
    scene
        .holders_authoritative(&service.url, Duration::from_secs(20))
        .await;
}

/// Issue 17: a coordinator that paused (SIGSTOP) while another broker took
/// its transaction-state partition and minted a newer token, and came back:
/// checks of the deposed token from several clients, single and batch, for
/// 5 s right after the resume, never answer 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_coordinator_that_paused_and_came_back_never_says_authoritative_for_a_deposed_token() {
    paused_coordinator_rounds(false).await;
}

/// Issue 52, finding 3: the same, and the resumed coordinator elected
/// leader of its partition again as soon as Kafka allows (preferred
/// elections from the resume on, until it leads): it may answer a describe
/// from its stale term, and a confirmation may then name it leader at its
/// new epoch. Checks for 10 s after the resume never answer 200 for the
/// deposed token. Kafka unfences the resumed broker on its first heartbeat
/// but elects it only once it fetched back into the ISR, by when it has
/// applied the metadata that deposed it, so this is as close as the broker
/// lets a test come; the simulation's model covers the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_coordinator_elected_again_right_after_its_resume_never_says_authoritative_for_a_deposed_token()
 {
    paused_coordinator_rounds(true).await;
}

/// Rounds of a coordinator paused, deposed and resumed, checks of the
/// deposed token after the resume; `elect_back`: elected again at once.
async fn paused_coordinator_rounds(elect_back: bool) {
    let _turn = exclusive().await;
    let rounds: usize = std::env::var("KRABKA_STALE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    // One partition: the service's watcher talks to its leader only, so
    // nothing the service does during the pause touches the coordinator
    // (a role is picked whose coordinator is another broker), and its
    // connection to the coordinator is idle and intact at the resume, as
    // in production between two checks.
    let topic = cluster_topic(1).await;
    let service = start(service_config(&cluster().bootstrap, &topic)).await;
    let leader = cluster()
        .client()
        .metadata()
        .partition_leader(&topic, 0)
        .await
        .unwrap();
    let http = http_client().timeout(CHECK_WAIT).build().unwrap();
    let mut totals = (0usize, 0usize, 0usize);
    let mut elected_back = Vec::new();
    for round in 0..rounds {
        // A third of the names hash to each broker: 50 tries miss with a
        // chance of (1/3)^50.
        let mut role = None;
        for _ in 0..50 {
            let name = unique("paused-coordinator");
            let coordinator = coordinator_id(&cluster().client(), &name).await;
            // To be elected back, it must be its partition's first replica.
            let preferred = || {
                let p = transaction_partition(&name, TRANSACTION_PARTITIONS);
                transaction_state_replicas(&cluster().bootstrap, p)
                    .1
                    .first()
                    == Some(&coordinator)
            };
            if coordinator != leader && (!elect_back || tokio::task::block_in_place(preferred)) {
                role = Some(name);
                break;
            }
        }
        let role = role.expect("a role coordinated by another broker than the leader");
        let partition = format!(
            "__transaction_state:{}",
            transaction_partition(&role, TRANSACTION_PARTITIONS)
        );
        let t1 = cluster()
            .client()
            .producer()
            .init_producer_id(&role, Duration::from_secs(60))
            .await
            .unwrap()
            .token();
        let single = format!("{}/roles/{role}/authority?token={t1}", service.url);
        let answer = http.get(&single).send().await.unwrap();
        let status = answer.status().as_u16();
        let body = answer.text().await.unwrap();
        assert_eq!(
            status, 200,
            "round {round}: the holder is authoritative: {body}"
        );
        let x = coordinator_id(&cluster().client(), &role).await;
        cluster().act("pause", x);
        let paused = Instant::now();
        // Another broker takes the partition; a second client mints there.
        let others: Vec<String> = cluster()
            .nodes()
            .into_iter()
            .filter(|n| n.id != x)
            .filter_map(|n| n.address)
            .collect();
        let mut config = ClientConfig::new(others);
        config.request_timeout = Duration::from_secs(2);
        config.operation_timeout = Duration::from_secs(60);
        let minter = KafkaClient::new(config).unwrap();
        let t2 = loop {
            if let Ok(session) = minter
                .producer()
                .init_producer_id(&role, Duration::from_secs(60))
                .await
            {
                break session.token();
            }
            assert!(
                paused.elapsed() < Duration::from_secs(60),
                "round {round}: no new coordinator"
            );
        };
        assert!(t2 > t1);
        let minted = paused.elapsed();
        cluster().act("resume", x);
        let resumed = Instant::now();
        let window = match elect_back {
            true => Duration::from_secs(10),
            false => Duration::from_secs(5),
        };
        // Elected again: preferred elections from the resume on, until X
        // leads its partition (when the election returns, it leads).
        let elected = elect_back.then(|| {
            let (partition, role) = (partition.clone(), role.clone());
            tokio::spawn(async move {
                while resumed.elapsed() < window {
                    if cluster().elect(&partition)
                        && coordinator_id(&cluster().client(), &role).await == x
                    {
                        return Some(resumed.elapsed());
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                None
            })
        });
        // Several clients at once, single and batch, for the window.
        let mut tasks = Vec::new();
        for worker in 0..4 {
            let (http, single, url, role) = (
                http.clone(),
                single.clone(),
                service.url.clone(),
                role.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut seen = Vec::new();
                while resumed.elapsed() < window {
                    // The status, or why there is none: each a failure.
                    let status: Result<u16, String> = if worker % 2 == 0 {
                        http.get(&single)
                            .send()
                            .await
                            .map(|r| r.status().as_u16())
                            .map_err(|e| e.to_string())
                    } else {
                        let body = serde_json::json!([{ "role": role, "token": t1.to_string() }]);
                        match http
                            .post(format!("{url}/authority/check"))
                            .json(&body)
                            .send()
                            .await
                        {
                            Ok(r) => {
                                let batch = r.status();
                                let body = r.json::<Value>().await.unwrap_or(Value::Null);
                                body["results"][0]["status"]
                                    .as_u64()
                                    .map(|s| s as u16)
                                    .ok_or_else(|| format!("batch {batch}: {body}"))
                            }
                            Err(e) => Err(e.to_string()),
                        }
                    };
                    seen.push((resumed.elapsed(), status));
                }
                seen
            }));
        }
        let mut seen = Vec::new();
        for task in tasks {
            seen.extend(task.await.unwrap());
        }
        let elected = match elected {
            Some(task) => task.await.unwrap(),
            None => None,
        };
        if let Some(at) = elected {
            elected_back.push(at);
        }
        let yes = seen.iter().filter(|(_, s)| *s == Ok(200)).count();
        let no = seen.iter().filter(|(_, s)| *s == Ok(409)).count();
        let undecided: Vec<Duration> = seen
            .iter()
            .filter(|(_, s)| *s == Ok(503))
            .map(|(at, _)| *at)
            .collect();
        let failed: Vec<_> = seen
            .iter()
            .filter(|(_, s)| !matches!(s, Ok(200 | 409 | 503)))
            .collect();
        eprintln!(
            "round {round}: paused broker {x}, {t2} minted {minted:?} after the pause; after the resume {} checks of {t1}: {yes} x 200, {no} x 409, {} x 503 (503s until {:?}); elected again {elected:?} after the resume",
            seen.len(),
            undecided.len(),
            undecided.iter().max()
        );
        assert_eq!(
            yes, 0,
            "round {round}: a deposed token was called authoritative"
        );
        assert!(
            failed.is_empty(),
            "round {round}: {} checks failed: {:?}",
            failed.len(),
            &failed[..failed.len().min(10)]
        );
        assert!(
            no > 0,
            "round {round}: the deposed token was never answered superseded"
        );
        totals = (
            totals.0 + seen.len(),
            totals.1 + no,
            totals.2 + undecided.len(),
        );
    }
    assert!(
        !elect_back || !elected_back.is_empty(),
        "the resumed coordinator was never elected again within the window"
    );
    // Reported, not asserted: whether a check reaches the resumed broker
    // before it catches up is timing.
    let refused = metric(&service, "krabka_stale_answers_total").await;
    eprintln!(
        "{rounds} rounds: {} checks of deposed tokens after a coordinator resumed: 0 x 200, {} x 409, {} x 503; {refused} answers refused as stale; elected again in {} rounds, at {elected_back:?} after the resume",
        totals.0,
        totals.1,
        totals.2,
        elected_back.len()
    );
}
