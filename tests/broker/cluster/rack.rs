//! A rack cut from the controller: brokers X and N lose their route to the
//! controller at once while clients still reach them. X coordinates role R
//! (it leads R's partition of `__transaction_state`, replicas [X, A, B]); N
//! holds no replica of that partition. The controller fences both, R's
//! partition moves to A or B, and a new holder mints T2 there; X goes on
//! answering T1 from memory, and N, fenced too, goes on naming X the
//! leader of R's partition at the epoch X last led it: a confirmation of
//! X's answer drawn at N backs it.
//!
//! The cluster is one of this test's own (a controller and four brokers,
//! `__transaction_state` of 4 partitions, replication factor 3, min ISR 2),
//! its brokers advertising a RACK listener at proxies of the test, in the
//! private network namespace of the cluster tier (`scripts/kafka cut`).
//! During the cut, T1 and T2 are checked by the CLI bootstrapped from X
//! alone (a fresh client per run), by a service reaching every broker and
//! by a service inside the rack (on the RACK listener, whose proxies of A
//! and B refuse from the cut on: it reaches X and N only). Every answer is
//! judged against the pair current when it was asked: 0 x 200 for T1 once
//! T2 is minted, 0 x 409 for T2. Found on Kafka 4.1.1: the CLI said
//! `authoritative` for T1 in about a third of its runs (those confirmed at
//! N), and the service in the rack for every check of T1, while it called
//! T2 unknown.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use krabka_authority::coordination::FencingToken;
use krabka_authority::kafka::TopicSpec;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::support::broker::kafka_script;
use crate::support::cluster::{
    CHECK_WAIT, OwnCluster, TRANSACTION_PARTITIONS, coordinator_id, exclusive, mint, own_client,
    service_config, transaction_partition, transaction_state_replicas,
};
use crate::support::process::binary;
use crate::support::proxy::Proxy;
use crate::support::service::{check, start};
use crate::support::{http_client, unique};

/// How long the cut lasts at least once T2 is minted.
const AFTER_MINT: Duration = Duration::from_secs(15);
/// CLI runs at least, and at most this long after the mint to make them.
const CLI_RUNS: usize = 45;
const CLI_LIMIT: Duration = Duration::from_secs(60);
const CLIENT_ID: &str = "krabka-rack-test";

/// One CLI run: its exit code and the verdict it printed.
type Run = (Option<i32>, String);

/// One check of a service and its answer.
#[derive(Clone, Debug)]
struct Seen {
    token: FencingToken,
    sent: Instant,
    got: Instant,
    /// The status; 0 when no answer came within [`CHECK_WAIT`].
    status: u16,
    /// The body's verdict (or problem type), for the counts.
    verdict: String,
}

/// Checks of T1, and of T2 once minted, at one service, without pause:
/// each token by workers of its own (a check the service answers only at
/// its request timeout holds up no other).
struct Checks {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<Vec<Seen>>>,
}

/// Workers per token.
const WORKERS: usize = 2;

impl Checks {
    fn start(
        url: &str,
        role: &str,
        t1: FencingToken,
        t2: &watch::Receiver<Option<FencingToken>>,
    ) -> Checks {
        let (stop, stopped) = watch::channel(false);
        let http = http_client().timeout(CHECK_WAIT).build().unwrap();
        let mut tasks = Vec::new();
        for w in 0..2 * WORKERS {
            let (url, role, http) = (url.to_owned(), role.to_owned(), http.clone());
            let (t2, stopped) = (t2.clone(), stopped.clone());
            tasks.push(tokio::spawn(async move {
                let mut seen = Vec::new();
                while !*stopped.borrow() {
                    let token = if w % 2 == 0 { Some(t1) } else { *t2.borrow() };
                    let Some(token) = token else {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    let sent = Instant::now();
                    let answer = check(&http, &url, &role, token).await;
                    let (status, body) = answer.unwrap_or((0, Value::Null));
                    let verdict = body["verdict"]
                        .as_str()
                        .or_else(|| body["type"].as_str())
                        .unwrap_or("-")
                        .to_owned();
                    seen.push(Seen {
                        token,
                        sent,
                        got: Instant::now(),
                        status,
                        verdict,
                    });
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                seen
            }));
        }
        Checks { stop, tasks }
    }

    async fn finish(self) -> Vec<Seen> {
        let _ = self.stop.send(true);
        let mut seen = Vec::new();
        for task in self.tasks {
            seen.extend(task.await.expect("the checks ran"));
        }
        seen
    }
}

/// What the answers of one service came to.
struct Judged {
    /// (status, verdict) -> count, of T1 asked before the mint, of T1
    /// asked after it and of T2.
    counts: [BTreeMap<(u16, String), usize>; 3],
    /// Answers that contradict the pair current when they were asked.
    wrong: Vec<String>,
    /// Checks without an answer, or with another status than 200, 409, 503.
    failed: Vec<String>,
    /// The first 200 for T2, after the mint.
    first_t2: Option<Duration>,
    /// The longest a check waited for its answer after the cut.
    slowest: Duration,
}

/// Judges `seen` against T1, current until the mint (begun at `began`,
/// done at `minted`), and T2 from then on: a 200 for T1 asked after the
/// mint, a 409 for T1 answered before it began and a 409 for T2 are wrong
/// (between the two instants, either verdict of T1 may be right).
fn judge(seen: &[Seen], t1: FencingToken, cut: Instant, began: Instant, minted: Instant) -> Judged {
    let mut judged = Judged {
        counts: Default::default(),
        wrong: Vec::new(),
        failed: Vec::new(),
        first_t2: None,
        slowest: Duration::ZERO,
    };
    for s in seen {
        if s.sent >= cut {
            judged.slowest = judged.slowest.max(s.got - s.sent);
        }
        let k = usize::from(s.token != t1);
        let phase = if k == 1 {
            2
        } else {
            usize::from(s.sent >= minted)
        };
        *judged.counts[phase]
            .entry((s.status, s.verdict.clone()))
            .or_default() += 1;
        let at = if s.sent >= minted {
            format!("{:?} after the mint", s.sent - minted)
        } else {
            format!("{:?} before the mint", minted - s.sent)
        };
        match (k, s.status) {
            (0, 200) if s.sent >= minted => {
                judged
                    .wrong
                    .push(format!("200 for the deposed {t1} asked {at}"));
            }
            (0, 409) if s.got <= began => {
                judged
                    .wrong
                    .push(format!("409 {} for the current {t1} {at}", s.verdict));
            }
            (1, 409) => {
                judged.wrong.push(format!(
                    "409 {} for the current {} {at}",
                    s.verdict, s.token
                ));
            }
            (1, 200) => {
                let after = s.got.saturating_duration_since(minted);
                judged.first_t2 = Some(judged.first_t2.map_or(after, |f| f.min(after)));
            }
            (_, 200 | 409 | 503) => {}
            _ => judged.failed.push(format!(
                "{} {at}: status {} {}",
                s.token, s.status, s.verdict
            )),
        }
    }
    judged
}

/// `(status, verdict): count` pairs, one line.
fn counts(counts: &BTreeMap<(u16, String), usize>) -> String {
    counts
        .iter()
        .map(|((status, verdict), n)| format!("{n} x {status} {verdict}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rack_cut_from_the_controller_never_confirms_its_coordinators_deposed_pair() {
    assert!(
        std::env::var("KRABKA_TEST_PARTITION").is_ok_and(|v| v == "1"),
        "cluster::rack cuts two brokers from the controller: run scripts/test --cluster-only as root"
    );
    let _turn = exclusive().await;
    let started = Instant::now();
    let name = format!("rack-{}", std::process::id());
    let plain = tokio::task::block_in_place(|| {
        kafka_script(&[
            "start",
            "--name",
            &name,
            "--brokers",
            "4",
            "--controller-host",
            "127.0.0.2",
            "--broker-uids",
            "42000",
            "--set",
            "listeners=PLAINTEXT://127.0.0.1:{port},RACK://127.0.0.1:{free1}",
            "--set",
            "advertised.listeners=PLAINTEXT://127.0.0.1:{port},RACK://127.0.0.1:{free2}",
            "--set",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,RACK:PLAINTEXT,CONTROLLER:PLAINTEXT",
        ])
    });
    let own = OwnCluster(name.clone());
    let up = started.elapsed();
    // Broker i (1..=4) at index i - 1 of each list.
    let plain: Vec<String> = plain.split(',').map(str::to_owned).collect();
    assert_eq!(plain.len(), 4, "{plain:?}");
    let real = kafka_script(&["address", "--name", &name, "--listener", "RACK"]);
    let advertised = kafka_script(&[
        "address",
        "--name",
        &name,
        "--listener",
        "RACK",
        "--advertised",
    ]);
    let advertised: Vec<String> = advertised.split(',').map(str::to_owned).collect();
    let mut proxies = Vec::new();
    for (listen, to) in advertised.iter().zip(real.split(',')) {
        proxies.push(Proxy::start(listen, to.to_owned()).await);
    }
    let all = plain.join(",");
    let client = own_client(&all, CLIENT_ID);
    let topic = unique("rack-topic");
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

    // R, its coordinator X, the replicas of its partition of
    // __transaction_state, and N, the broker that holds none.
    let role = unique("rack-role");
    let x = coordinator_id(&client, &role).await;
    let p = transaction_partition(&role, TRANSACTION_PARTITIONS);
    let (leader, replicas) = tokio::task::block_in_place(|| transaction_state_replicas(&all, p));
    assert_eq!(
        leader, x,
        "{role}'s coordinator leads __transaction_state-{p}"
    );
    assert_eq!(replicas.len(), 3, "{replicas:?}");
    // The quorum's min.isr: the topic's own min.insync.replicas, which
    // Kafka set from transaction.state.log.min.isr when it created it, as
    // DescribeConfigs tells the client.
    let min_isr = client
        .topics()
        .topic_config("__transaction_state", "min.insync.replicas")
        .await
        .expect("DescribeConfigs of __transaction_state");
    assert_eq!(min_isr.as_deref(), Some("2"));
    let n = (1..=4).find(|b| !replicas.contains(b)).unwrap();
    let others: Vec<i32> = replicas.iter().copied().filter(|b| *b != x).collect();
    let addr = |list: &[String], id: i32| list[usize::try_from(id - 1).unwrap()].clone();
    let x_addr = addr(&plain, x);
    let others_plain = others
        .iter()
        .map(|b| addr(&plain, *b))
        .collect::<Vec<_>>()
        .join(",");
    let rack_bootstrap = format!("{},{}", addr(&advertised, x), addr(&advertised, n));

    let t1 = mint(own_client(&all, CLIENT_ID), &topic, &role).await;
    let everywhere = start(service_config(&all, &topic)).await;
    let rack = start(service_config(&rack_bootstrap, &topic)).await;
    let http = http_client().timeout(CHECK_WAIT).build().unwrap();
    for (which, service) in [("every broker", &everywhere), ("the rack", &rack)] {
        let warm = Instant::now();
        loop {
            let answer = check(&http, &service.url, &role, t1).await;
            if answer.as_ref().is_some_and(|(s, _)| *s == 200) {
                break;
            }
            assert!(
                warm.elapsed() < Duration::from_secs(20),
                "the service reaching {which}: {t1} not authoritative before the cut: {answer:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let (t2_tx, t2_rx) = watch::channel(None);
    let loads = [
        Checks::start(&everywhere.url, &role, t1, &t2_rx),
        Checks::start(&rack.url, &role, t1, &t2_rx),
    ];
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The rack loses the controller, and its route to A and B.
    let cut = Instant::now();
    for b in [x, n] {
        tokio::task::block_in_place(|| {
            kafka_script(&["cut", "--name", &name, "--node", &b.to_string()]);
        });
    }
    for b in &others {
        proxies[usize::try_from(b - 1).unwrap()].sever();
    }
    let cuts_took = cut.elapsed();
    // Fenced: A and B say R's coordinator moved (a fresh client each time,
    // never answered from a cache).
    let moved_to = loop {
        let asked = own_client(&others_plain, CLIENT_ID);
        if let Ok(c) = asked.lookup().transaction_coordinator(&role).await
            && c.id != x
        {
            break c.id;
        }
        assert!(
            cut.elapsed() < Duration::from_secs(40),
            "{role}'s coordinator never moved off the cut broker {x}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let fenced = cut.elapsed();
    let began = Instant::now();
    let t2 = mint(own_client(&others_plain, CLIENT_ID), &topic, &role).await;
    let minted = Instant::now();
    t2_tx.send_replace(Some(t2));
    assert!(t2 > t1, "{t1} {t2}");

    // The CLI from X alone, a fresh client per run, three at a time.
    let runs = Arc::new(AtomicUsize::new(0));
    let cli: Arc<Mutex<Vec<Run>>> = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..3 {
        let (runs, cli) = (runs.clone(), cli.clone());
        let (x_addr, topic, role) = (x_addr.clone(), topic.clone(), role.clone());
        workers.push(tokio::task::spawn_blocking(move || {
            while (runs.load(Ordering::SeqCst) < CLI_RUNS || minted.elapsed() < AFTER_MINT)
                && minted.elapsed() < CLI_LIMIT
            {
                runs.fetch_add(1, Ordering::SeqCst);
                let out = binary()
                    .args([
                        "check",
                        "--bootstrap-servers",
                        &x_addr,
                        "--topic",
                        &topic,
                        &role,
                        &t1.to_string(),
                    ])
                    .output()
                    .expect("the binary runs");
                let stdout: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
                let verdict = stdout["verdict"].as_str().unwrap_or("-").to_owned();
                cli.lock().unwrap().push((out.status.code(), verdict));
            }
        }));
    }
    for worker in workers {
        worker.await.expect("the CLI runs");
    }
    tokio::time::sleep_until(minted + AFTER_MINT).await;
    let mut seen = Vec::new();
    for load in loads {
        seen.push(load.finish().await);
    }
    let lasted = cut.elapsed();
    let cli = cli.lock().unwrap().clone();
    let mut by_code: BTreeMap<Run, usize> = BTreeMap::new();
    for run in &cli {
        *by_code.entry(run.clone()).or_default() += 1;
    }
    let yes = cli.iter().filter(|(code, _)| *code == Some(0)).count();
    let [on_all, in_rack] = [&seen[0], &seen[1]].map(|s| judge(s, t1, cut, began, minted));

    eprintln!(
        "rack: cluster {name} up in {up:?}; {role} in __transaction_state-{p}, replicas {replicas:?}, coordinator X = {x}, N = {n} (no replica); cut X and N ({cuts_took:?} for both cuts); fenced: coordinator {moved_to} {fenced:?} after the cut; {t2} minted {:?} after the cut (the mint took {:?}); the cut lasted {lasted:?}",
        minted - cut,
        minted - began,
    );
    eprintln!(
        "rack: the CLI from X alone on the deposed {t1}: {} runs, {yes} exited 0; by (exit code, verdict): {by_code:?}",
        cli.len()
    );
    for (which, judged) in [
        ("every broker", &on_all),
        ("the rack (X and N only)", &in_rack),
    ] {
        eprintln!(
            "rack: service reaching {which}: {t1} asked before the mint: {}; {t1} asked after it: {}; {t2}: {}; first 200 for {t2} {:?} after the mint; answers after the cut took up to {:?}; {} wrong, e.g. {:?}; {} failed, e.g. {:?}",
            counts(&judged.counts[0]),
            counts(&judged.counts[1]),
            counts(&judged.counts[2]),
            judged.first_t2,
            judged.slowest,
            judged.wrong.len(),
            &judged.wrong[..judged.wrong.len().min(3)],
            judged.failed.len(),
            &judged.failed[..judged.failed.len().min(3)],
        );
    }

    // Healed before the verdicts (the cluster is removed anyway).
    for b in [x, n] {
        tokio::task::block_in_place(|| {
            kafka_script(&["mend", "--name", &name, "--node", &b.to_string()]);
        });
    }
    eprintln!("rack: the test took {:?}", started.elapsed());
    drop(own);

    assert!(cli.len() >= CLI_RUNS, "{} CLI runs", cli.len());
    assert_eq!(
        yes, 0,
        "the CLI from the cut coordinator called the deposed {t1} authoritative: {by_code:?}"
    );
    // The service in the rack may rightly answer 503, at its request
    // timeout (3 s): fewer answers.
    for (which, judged, least) in [
        ("every broker", &on_all, [10, 10, 10]),
        ("the rack", &in_rack, [10, 3, 3]),
    ] {
        assert!(
            judged.wrong.is_empty(),
            "the service reaching {which}: {} wrong answers: {:?}",
            judged.wrong.len(),
            &judged.wrong[..judged.wrong.len().min(10)]
        );
        assert!(
            judged.failed.is_empty(),
            "the service reaching {which}: {} checks failed: {:?}",
            judged.failed.len(),
            &judged.failed[..judged.failed.len().min(10)]
        );
        for (k, what) in ["before the mint", "after the mint", "of T2"]
            .into_iter()
            .enumerate()
        {
            let asked: usize = judged.counts[k].values().sum();
            assert!(
                asked >= least[k],
                "the service reaching {which}: {asked} checks {what}"
            );
        }
    }
    let first = on_all
        .first_t2
        .unwrap_or_else(|| panic!("the service reaching every broker: never 200 for {t2}"));
    assert!(
        first < Duration::from_secs(5),
        "the service reaching every broker: {t2} authoritative only {first:?} after the mint"
    );
}
