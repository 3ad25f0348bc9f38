//! Issue 31 (2): a coordinator whose disk stalls. The data folder of broker
//! X, the transaction coordinator of a held role R and the leader of R's
//! partition of the coordination topic, is an ext4 file system of its own
//! (`scripts/kafka start --loop-disks`), frozen with `fsfreeze` for 30 s
//! while checks of every role go on and R's standby tries to take R (its
//! holder cannot renew: every write to X blocks). X stays registered and
//! leader (its heartbeats need no disk), accepts connections, answers what
//! needs no write until its request handlers are all blocked in appends,
//! then nothing.
//!
//! Required: 0 × 200 for a deposed token; checks of roles coordinated
//! elsewhere never 503; R's view shows its age growing and `/readyz` names
//! R's partition; after the thaw the service's verdicts of R are right
//! again no later than Kafka's Java `Admin.describeTransactions` (bench/java,
//! the same timeouts, run beside it) plus 1 s.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use krabka_authority::coordination::{FencingToken, role_partition};
use krabka_authority::kafka::{ClientConfig, KafkaClient};
use krabka_authority::time::{Clock, SystemClock};
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use super::samples::{Sampler, first_naming, oldest};
use crate::support::cluster::{
    Holders, Known, Members, Scene, assert_sound, cluster, cluster_topic, exclusive,
    role_led_by_its_coordinator, takeover, unavailable,
};
use crate::support::{http_client, repo, unique};

/// How long X's disk stays frozen.
const FROZEN: Duration = Duration::from_secs(30);
/// How long the checks go on after the thaw.
const AFTER: Duration = Duration::from_secs(25);
/// How long into the freeze other applications' writes to X begin.
const QUIET: Duration = Duration::from_secs(10);

/// Other applications' writes to the partitions broker X leads: four
/// writers, one record at a time, each write given up after 2 s (its
/// request stays blocked in X, holding a request handler).
struct Traffic {
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<(usize, usize)>>,
}

/// A topic of the other applications and the partitions of it X leads;
/// made before the freeze (a topic's creation writes to every broker).
struct Planned {
    topic: String,
    led: Vec<i32>,
}

impl Traffic {
    async fn plan(x: i32) -> Planned {
        let topic = cluster_topic(6).await;
        let client = cluster().client();
        let mut led = Vec::new();
        for p in 0..6 {
            if client.metadata().partition_leader(&topic, p).await.unwrap() == x {
                led.push(p);
            }
        }
        assert!(!led.is_empty(), "broker {x} leads no partition of {topic}");
        Planned { topic, led }
    }

    fn start(Planned { topic, led }: Planned) -> Traffic {
        let (stop, stopped) = watch::channel(false);
        let tasks = (0..4)
            .map(|w| {
                let (topic, stopped) = (topic.clone(), stopped.clone());
                let partition = led[w % led.len()];
                tokio::spawn(async move {
                    let mut config = ClientConfig::new(cluster().bootstrap.split(','));
                    config.request_timeout = Duration::from_secs(2);
                    config.operation_timeout = Duration::from_secs(2);
                    let client = KafkaClient::new(config).unwrap();
                    let (mut written, mut failed) = (0, 0);
                    while !*stopped.borrow() {
                        let value = Bytes::from_static(b"application data");
                        match client
                            .producer()
                            .append(
                                &topic,
                                partition,
                                Bytes::from_static(b"k"),
                                Some(value),
                                SystemClock.now_ms(),
                            )
                            .await
                        {
                            Ok(_) => written += 1,
                            Err(_) => failed += 1,
                        }
                    }
                    (written, failed)
                })
            })
            .collect();
        Traffic { stop, tasks }
    }

    /// (written, failed) writes.
    async fn finish(self) -> (usize, usize) {
        self.stop.send_replace(true);
        let mut total = (0, 0);
        for task in self.tasks {
            let (w, f) = task.await.unwrap();
            total = (total.0 + w, total.1 + f);
        }
        total
    }
}

/// One answer about R, of the service or of the Java peer: when it was
/// asked and answered (epoch ms), and the current pair it named (`None`:
/// no answer, or no pair).
#[derive(Clone, Debug)]
struct Named {
    sent_ms: i64,
    got_ms: i64,
    current: Option<FencingToken>,
}

/// The instant (epoch ms) from which every answer sent after `from_ms`
/// named `truth`: the completion of the first such answer sent after the
/// last one that did not. `None` when the last answer is still wrong.
fn right_again(answers: &[Named], from_ms: i64, truth: FencingToken) -> Option<i64> {
    let mut after: Vec<&Named> = answers.iter().filter(|a| a.sent_ms >= from_ms).collect();
    after.sort_by_key(|a| a.sent_ms);
    let last_wrong = after.iter().rposition(|a| a.current != Some(truth));
    match last_wrong {
        Some(i) if i + 1 == after.len() => None,
        Some(i) => Some(after[i + 1..].iter().map(|a| a.got_ms).min()?),
        None => after.first().map(|a| a.got_ms),
    }
}

/// Checks R's current holder's token at the service every 50 ms; what
/// each answer named.
fn probe(
    url: &str,
    role: &str,
    holders: Holders,
    stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<Vec<Named>> {
    let url = format!("{url}/roles/{role}/authority");
    let role = role.to_owned();
    tokio::spawn(async move {
        let http = http_client().build().unwrap();
        let mut out = Vec::new();
        while !*stop.borrow() {
            let Some(token) = holders.current(&role) else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let sent_ms = SystemClock.now_ms();
            let answer = http
                .get(format!("{url}?token={token}"))
                .timeout(Duration::from_secs(10))
                .send()
                .await;
            let current = match answer {
                Ok(r) => r
                    .json::<Value>()
                    .await
                    .ok()
                    .and_then(|b| b["current"].as_str()?.parse().ok()),
                Err(_) => None,
            };
            out.push(Named {
                sent_ms,
                got_ms: SystemClock.now_ms(),
                current,
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        out
    })
}

/// bench/java's `describe-load`, built once: offline first (the cluster
/// tier runs in a network namespace of its own, and `scripts/test` builds
/// it before), else fetching its jars.
fn java_peer() -> PathBuf {
    static JAR: OnceLock<PathBuf> = OnceLock::new();
    JAR.get_or_init(|| {
        let dir = repo().join("bench/java");
        let build = |offline: bool| {
            Command::new("mvn")
                .args(["-q", "-B", "package"])
                .args(offline.then_some("-o"))
                .current_dir(&dir)
                .status()
                .is_ok_and(|s| s.success())
        };
        assert!(build(true) || build(false), "bench/java did not build");
        dir.join("target/describe-load.jar")
    })
    .clone()
}

/// Kafka's Java Admin checking `roles` at `rate` checks/s for `seconds`,
/// with the service's Kafka request timeout (2 s) and its HTTP request
/// timeout as the call's (3 s); every answer goes to `events`.
fn start_java(
    roles: &[(String, FencingToken)],
    rate: u32,
    seconds: u64,
    events: &std::path::Path,
) -> std::process::Child {
    let file = events.with_extension("roles");
    let text: String = roles.iter().map(|(r, t)| format!("{r} {t}\n")).collect();
    std::fs::write(&file, text).unwrap();
    Command::new("java")
        .arg("-jar")
        .arg(java_peer())
        .args(["--bootstrap", &cluster().bootstrap, "--roles-file"])
        .arg(&file)
        .args(["--concurrency", "64", "--warmup", "0"])
        .args([
            "--rate",
            &rate.to_string(),
            "--duration",
            &seconds.to_string(),
        ])
        .arg("--events")
        .arg(events)
        .args([
            "--set",
            "request.timeout.ms=2000",
            "--set",
            "default.api.timeout.ms=3000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("java runs")
}

/// The Java peer's answers about `role`.
fn java_answers(events: &std::path::Path, role: &str) -> Vec<Named> {
    std::fs::read_to_string(events)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            (fields.get(2) == Some(&role)).then(|| Named {
                sent_ms: fields[0].parse().unwrap(),
                got_ms: fields[1].parse().unwrap(),
                current: fields.get(4).and_then(|p| p.parse().ok()),
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_disk_of_a_roles_coordinator_and_leader_frozen_for_30_seconds() {
    assert!(
        std::env::var("KRABKA_TEST_DISKS").is_ok_and(|v| v == "1"),
        "cluster::disk needs the cluster scripts/test starts as root with --loop-disks (each \
         broker's data on a file system of its own, for fsfreeze): run scripts/test \
         --cluster-only as root"
    );
    let jar = tokio::task::spawn_blocking(java_peer).await.unwrap();
    assert!(jar.is_file());
    let _turn = exclusive().await;
    let started = Instant::now();
    let partitions = 6;
    let topic = cluster_topic(partitions).await;
    let client = cluster().client();
    // R: coordinated by the leader of its own partition.
    let (role, x) = role_led_by_its_coordinator(&client, &topic, partitions, "disk-r").await;
    let partition = role_partition(&role, partitions).unwrap();
    let mut roles = vec![role.clone()];
    roles.extend((0..3).map(|i| format!("{}-{i}", unique("disk-s"))));
    let known = Known::default();
    // Three members each: R keeps a holder and a standby after its first
    // holder is killed (to have a deposed token of R before the freeze).
    let members = Members::start(&topic, &roles, 3, &known).await;
    members
        .wait_for_holders(&roles, Duration::from_secs(30))
        .await;
    let mut scene = Scene {
        topic,
        roles: roles.clone(),
        known,
        members,
    };
    let (service, load) = scene.serve(&cluster().bootstrap, 3).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let deposed = scene.members.holders.current(&role).unwrap();
    scene.members.kill_holder(&role);
    takeover(
        &scene.members.holders,
        &role,
        deposed,
        Duration::from_secs(30),
    )
    .await;
    let t1 = scene.members.holders.current(&role).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;

    let sampler = Sampler::start(&service.url, &role);
    let (stop, stopped) = watch::channel(false);
    let probed = probe(&service.url, &role, scene.members.holders.clone(), stopped);
    let events = std::env::temp_dir().join(format!("{}.events", unique("disk-java")));
    let expected: Vec<(String, FencingToken)> = roles
        .iter()
        .map(|r| (r.clone(), scene.members.holders.current(r).unwrap()))
        .collect();
    let seconds = (Duration::from_secs(3) + FROZEN + AFTER).as_secs();
    let mut java = start_java(&expected, 40, seconds, &events);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let planned = Traffic::plan(x).await;
    let mut affected = scene.coordinated_by(x).await;

    cluster().act("freeze", x);
    let frozen = Instant::now();
    let frozen_ms = SystemClock.now_ms();
    // First only the roles' own writes wait on X (the holders' renewals,
    // R's standby's InitProducerId): X still answers what needs no write.
    // Then the writes of other applications to X's partitions, as a
    // production cluster has, take every request handler of X: it answers
    // nothing more.
    tokio::time::sleep(QUIET).await;
    let traffic = Traffic::start(planned);
    tokio::time::sleep(FROZEN - QUIET).await;
    // Asked again: a coordinator moved to X meanwhile is X's too.
    cluster().act("thaw", x);
    let thawed = Instant::now();
    let thawed_ms = SystemClock.now_ms();
    let traffic = traffic.finish().await;
    affected.extend(scene.coordinated_by(x).await);
    tokio::time::sleep(AFTER).await;
    stop.send_replace(true);
    let answers = load.finish().await;
    let (samples, ready) = sampler.finish().await;
    let probed = probed.await.unwrap();
    let java_done = tokio::task::spawn_blocking(move || java.wait())
        .await
        .unwrap();
    assert!(java_done.is_ok_and(|s| s.success()), "the Java peer failed");
    let java = java_answers(&events, &role);

    // The truth at the end: R's holder, as its member says and Kafka too.
    let truth = scene.members.holders.current(&role).unwrap();
    let described = client.describer().describe_transaction(&role).await;
    let service_right = right_again(&probed, thawed_ms, truth);
    let java_right = right_again(&java, thawed_ms, truth);
    let outages = unavailable(&answers, frozen);
    let oldest = oldest(&samples, frozen, thawed);
    let named = first_naming(&ready, partition);
    let since_thaw =
        |at: Option<i64>| at.map(|ms| Duration::from_millis((ms - thawed_ms).max(0) as u64));
    eprintln!(
        "broker {x}'s disk frozen for {:?} (coordinator of {role} and leader of partition {partition}): {} checks, 503s {outages:?} (affected {affected:?}); {role} went {deposed} -> {t1} before the freeze and is {truth} at the end ({described:?}); its views at most {oldest} ms old during the freeze; /readyz named partition {partition} {:?} after the freeze; right again after the thaw: the service {:?}, Java's Admin {:?} ({} and {} answers about {role}; frozen at {frozen_ms}); other applications' writes to broker {x} from {QUIET:?} into the freeze: {traffic:?} (written, failed) until the thaw",
        thawed - frozen,
        answers.len(),
        named.map(|at| at - frozen),
        since_thaw(service_right),
        since_thaw(java_right),
        probed.len(),
        java.len(),
    );
    assert_sound(&answers, &scene.known, &scene.roles, frozen, 5);
    for (r, outage) in &outages {
        assert!(
            *r == role || affected.contains(r),
            "{r} is not coordinated by the frozen broker {x}, yet answered 503: {outage:?}"
        );
    }
    assert!(
        oldest >= 10_000,
        "R's views never grew old during the freeze: {oldest} ms"
    );
    assert!(named.is_some(), "/readyz never named partition {partition}");
    let service_right = service_right.expect("the service's answers about R right again");
    let java_right = java_right.expect("Java's answers about R right again");
    assert!(
        service_right <= java_right + 1_000,
        "the service right again {} ms after the thaw, Java's Admin {} ms",
        service_right - thawed_ms,
        java_right - thawed_ms
    );
    scene
        .holders_authoritative(&service.url, Duration::from_secs(20))
        .await;
    let _ = std::fs::remove_file(&events);
    eprintln!("{:?} in all", started.elapsed());
}

#[test]
fn right_again_is_the_first_answer_after_the_last_wrong_one() {
    let t = |e| FencingToken::new(5, e).unwrap();
    let a = |sent_ms, got_ms, current| Named {
        sent_ms,
        got_ms,
        current,
    };
    let answers = [
        a(0, 10, Some(t(1))),
        a(100, 400, None),
        a(200, 250, Some(t(2))),
        a(300, 350, Some(t(1))),
        a(500, 520, Some(t(2))),
        a(600, 610, Some(t(2))),
    ];
    assert_eq!(right_again(&answers, 0, t(2)), Some(520));
    assert_eq!(right_again(&answers, 400, t(2)), Some(520));
    assert_eq!(right_again(&answers[..4], 0, t(2)), None);
    assert_eq!(right_again(&[], 0, t(2)), None);
}
