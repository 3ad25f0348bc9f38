//! Kafka as it runs in production: a controller and three brokers,
//! replication factor 3, `min.insync.replicas` 2. Brokers are killed (kill
//! -9), hung (SIGSTOP) and restarted under the service and the
//! leader-election client, and every answer is checked against what was
//! minted.
//!
//! The tests share one cluster (`KRABKA_TEST_CLUSTER`, set by
//! `scripts/test`; else one is started and left running under the name
//! `test-cluster-auto`) and run one at a time; each leaves every broker
//! running. Run them alone with
//! `scripts/test --cluster-only` (or `cargo test --test broker cluster::`
//! with `KRABKA_TEST_CLUSTER` set).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use krabka_authority::coordination::{FencingToken, role_partition};
use krabka_authority::kafka::{
    ClientConfig, KafkaClient, KafkaTransport, TopicSpec, TransportConfig,
};
use krabka_authority::leadership::{Event, Options, acquire};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::common::{capture_logs, kafka_script, unique};
use crate::service::{Service, config, start};

/// Kafka's default `broker.session.timeout.ms`: how long a dead broker
/// keeps its partitions before the controller moves them.
const SESSION_TIMEOUT: Duration = Duration::from_secs(9);
/// Kafka's default `request.timeout.ms`. A coordinator whose transaction
/// log append timed out (a replica died during the holder's commit) retries
/// it only when its marker sender thread wakes: on new markers to send, else
/// after this (`TransactionMarkerChannelManager::retryLogAppends`, polled by
/// `InterBrokerSendThread` at most this long). Until then InitProducerId for
/// the role answers CONCURRENT_TRANSACTIONS and no member can mint (CI saw
/// a standby wait 12 s and more for it).
const BROKER_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const LEASE: Duration = Duration::from_secs(4);
const STAGGER: Duration = Duration::from_secs(1);
/// The view staleness bound the service is configured with.
const ROSTER_TTL: Duration = Duration::from_millis(500);

pub struct Cluster {
    name: String,
    bootstrap: String,
}

/// The shared cluster.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| match std::env::var("KRABKA_TEST_CLUSTER") {
        Ok(bootstrap) if !bootstrap.is_empty() => Cluster {
            name: std::env::var("KRABKA_TEST_CLUSTER_NAME").expect(
                "KRABKA_TEST_CLUSTER_NAME names the scripts/kafka instance of KRABKA_TEST_CLUSTER",
            ),
            bootstrap,
        },
        _ => {
            eprintln!("KRABKA_TEST_CLUSTER is not set; starting scripts/kafka --name test-cluster-auto --brokers 3");
            let bootstrap =
                kafka_script(&["start", "--name", "test-cluster-auto", "--brokers", "3"]);
            Cluster {
                name: "test-cluster-auto".into(),
                bootstrap,
            }
        }
    })
}

#[derive(Clone, Debug, Deserialize)]
struct Node {
    id: i32,
    role: String,
    address: Option<String>,
    state: String,
}

impl Cluster {
    fn nodes(&self) -> Vec<Node> {
        let json = kafka_script(&["nodes", "--name", &self.name, "--json"]);
        let nodes: Vec<Node> = serde_json::from_str(&json).expect("nodes --json");
        nodes.into_iter().filter(|n| n.role == "broker").collect()
    }

    fn address(&self, id: i32) -> String {
        self.nodes()
            .into_iter()
            .find(|n| n.id == id)
            .and_then(|n| n.address)
            .expect("the broker's address")
    }

    /// `scripts/kafka VERB --node ID`, off the async threads.
    fn act(&self, verb: &str, id: i32) {
        let id = id.to_string();
        tokio::task::block_in_place(|| {
            kafka_script(&[verb, "--name", &self.name, "--node", &id]);
        });
    }

    /// Every broker running again.
    fn heal(&self) {
        for node in self.nodes() {
            match node.state.as_str() {
                "paused" => self.act("resume", node.id),
                "stopped" => self.act("start-node", node.id),
                _ => {}
            }
        }
    }

    fn client(&self) -> KafkaClient {
        capture_logs();
        let mut config = ClientConfig::new(self.bootstrap.split(','));
        config.client_id = "krabka-cluster-test".into();
        config.request_timeout = Duration::from_secs(2);
        config.operation_timeout = Duration::from_secs(30);
        KafkaClient::new(config).expect("client")
    }
}

/// One cluster test at a time, on a healthy cluster, left healthy.
struct Exclusive {
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

async fn exclusive() -> Exclusive {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let turn = TURN.lock().await;
    cluster().heal();
    Exclusive { _turn: turn }
}

impl Drop for Exclusive {
    fn drop(&mut self) {
        cluster().heal();
    }
}

/// A coordination topic on the cluster (replication factor 3).
async fn cluster_topic(partitions: i32) -> String {
    let name = unique("cluster-topic");
    let spec = TopicSpec {
        partitions,
        replication_factor: -1,
        configs: Vec::new(),
    };
    cluster()
        .client()
        .ensure_topic(&name, &spec)
        .await
        .expect("topic created");
    name
}

fn options(known: &Known, role: &str) -> Options {
    let (known, role) = (known.clone(), role.to_owned());
    Options::default()
        .with_lease_duration(LEASE)
        .with_renew_interval(Duration::from_secs(1))
        .with_challenge_stagger(STAGGER)
        .with_events(Arc::new(move |event: &Event| match event {
            Event::Acquired { token } => {
                known.minted_now(*token);
                known.held_now(&role);
            }
            Event::Renewed { .. } => known.held_now(&role),
            _ => {}
        }))
}

/// Tokens known to exist, by role, with the instant they were first known
/// (a member acquired with it, or an answer named it current).
#[derive(Clone, Debug, Default)]
struct Known {
    inner: Arc<Mutex<KnownInner>>,
}

#[derive(Debug, Default)]
struct KnownInner {
    /// Roles by token, filled from the event sink (which knows no role):
    /// every token is unique across roles (distinct producer ids).
    tokens: HashMap<FencingToken, Instant>,
    roles: HashMap<String, Vec<(FencingToken, Instant)>>,
    /// The last lease written per role (an acquisition or a renewal).
    held: HashMap<String, Instant>,
}

impl Known {
    fn held_now(&self, role: &str) {
        let mut k = self.inner.lock().unwrap();
        k.held.insert(role.to_owned(), Instant::now());
    }

    /// Waits until `role` has a lease written after `since` (by its holder
    /// renewing, or by a standby taking over), or panics at `within`.
    async fn held_again(&self, role: &str, since: Instant, within: Duration) -> Duration {
        loop {
            let last = self.inner.lock().unwrap().held.get(role).copied();
            if let Some(at) = last.filter(|at| *at > since) {
                return at - since;
            }
            assert!(
                since.elapsed() < within,
                "{role}: no lease written within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn minted_now(&self, token: FencingToken) {
        let mut k = self.inner.lock().unwrap();
        k.tokens.entry(token).or_insert_with(Instant::now);
    }

    fn seen(&self, role: &str, token: FencingToken, at: Instant) {
        let mut k = self.inner.lock().unwrap();
        let list = k.roles.entry(role.to_owned()).or_default();
        match list.iter_mut().find(|(t, _)| *t == token) {
            Some((_, first)) => *first = (*first).min(at),
            None => list.push((token, at)),
        }
    }

    /// The latest token of `role` a member acquired.
    fn latest(&self, role: &str, members: &Holders) -> Option<FencingToken> {
        members.current(role)
    }
}

/// Who holds a role, under which token, since when.
type Holding = (String, FencingToken, Instant);

/// The holders of every role, as their members report.
#[derive(Clone, Debug, Default)]
struct Holders {
    inner: Arc<Mutex<HashMap<String, Holding>>>,
}

impl Holders {
    fn current(&self, role: &str) -> Option<FencingToken> {
        self.inner.lock().unwrap().get(role).map(|(_, t, _)| *t)
    }

    fn holder(&self, role: &str) -> Option<Holding> {
        self.inner.lock().unwrap().get(role).cloned()
    }
}

/// Members of roles, each in its own client as separate processes would be.
struct Members {
    tasks: Vec<(String, String, JoinHandle<()>)>,
    holders: Holders,
}

impl Members {
    async fn start(topic: &str, roles: &[String], per_role: usize, known: &Known) -> Members {
        let holders = Holders::default();
        let mut tasks = Vec::new();
        for role in roles {
            for i in 0..per_role {
                let member = format!("m{i}");
                let transport = Arc::new(
                    KafkaTransport::connect(
                        cluster().client(),
                        TransportConfig {
                            topic: topic.to_owned(),
                            partitions: None,
                            create: None,
                        },
                    )
                    .await
                    .expect("transport"),
                );
                let (of, options, holders) = (role.clone(), options(known, role), holders.clone());
                let name = member.clone();
                let task = tokio::spawn(async move {
                    loop {
                        match acquire(transport.clone(), &of, &name, options.clone()).await {
                            Ok(held) => {
                                holders.inner.lock().unwrap().insert(
                                    of.clone(),
                                    (name.clone(), held.token(), Instant::now()),
                                );
                                held.done().await;
                            }
                            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                        }
                    }
                });
                tasks.push((role.clone(), member, task));
            }
        }
        Members { tasks, holders }
    }

    /// Waits until every role has a holder.
    async fn wait_for_holders(&self, roles: &[String], within: Duration) {
        let until = Instant::now() + within;
        while roles.iter().any(|r| self.holders.current(r).is_none()) {
            assert!(
                Instant::now() < until,
                "not every role got a holder within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Kills the member processes that hold `role` now (their renewals stop
    /// without a resign, as a crash would).
    fn kill_holder(&mut self, role: &str) -> Option<String> {
        let (member, _, _) = self.holders.holder(role)?;
        for (r, m, task) in &self.tasks {
            if r == role && *m == member {
                task.abort();
            }
        }
        Some(member)
    }
}

impl Drop for Members {
    fn drop(&mut self) {
        for (_, _, task) in &self.tasks {
            task.abort();
        }
    }
}

/// One answer of the service.
#[derive(Clone, Debug)]
struct Answer {
    role: String,
    token: FencingToken,
    sent: Instant,
    got: Instant,
    status: u16,
}

/// Checks of the holders' tokens (and of deposed ones) at a steady pace.
struct Load {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    answers: Arc<Mutex<Vec<Answer>>>,
}

impl Load {
    fn start(
        url: &str,
        roles: &[String],
        holders: &Holders,
        known: &Known,
        workers: usize,
    ) -> Load {
        let (stop, stopped) = watch::channel(false);
        let answers: Arc<Mutex<Vec<Answer>>> = Arc::default();
        let client = reqwest::Client::new();
        let mut tasks = Vec::new();
        for w in 0..workers {
            let (url, roles, holders, known) = (
                url.to_owned(),
                roles.to_vec(),
                holders.clone(),
                known.clone(),
            );
            let (client, answers, stopped) = (client.clone(), answers.clone(), stopped.clone());
            tasks.push(tokio::spawn(async move {
                let mut previous: HashMap<String, FencingToken> = HashMap::new();
                let mut n = w;
                while !*stopped.borrow() {
                    n += 1;
                    let role = &roles[n % roles.len()];
                    let Some(current) = known.latest(role, &holders) else {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    // Every third check asks about a deposed token, if any.
                    let token = match previous.get(role) {
                        Some(old) if n % 3 == 0 && *old != current => *old,
                        _ => current,
                    };
                    if previous.get(role).is_none_or(|p| *p < current) {
                        previous.insert(role.clone(), current);
                    }
                    let sent = Instant::now();
                    let result = client
                        .get(format!("{url}/roles/{role}/authority?token={token}"))
                        .timeout(Duration::from_secs(10))
                        .send()
                        .await;
                    let got = Instant::now();
                    let (status, body) = match result {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            (status, r.json::<Value>().await.unwrap_or(Value::Null))
                        }
                        Err(_) => (0, Value::Null),
                    };
                    if let Some(current) = body["current"].as_str().and_then(|c| c.parse().ok()) {
                        known.seen(role, current, got);
                    }
                    answers.lock().unwrap().push(Answer {
                        role: role.clone(),
                        token,
                        sent,
                        got,
                        status,
                    });
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
            }));
        }
        Load {
            stop,
            tasks,
            answers,
        }
    }

    async fn finish(self) -> Vec<Answer> {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        Arc::try_unwrap(self.answers)
            .map(|m| m.into_inner().unwrap())
            .unwrap_or_else(|a| a.lock().unwrap().clone())
    }
}

/// The 200s for a token that a newer one had superseded before the check
/// was sent: wrong verdicts.
fn wrong(answers: &[Answer], known: &Known) -> Vec<String> {
    let k = known.inner.lock().unwrap();
    let mut out = Vec::new();
    for a in answers.iter().filter(|a| a.status == 200) {
        let newer_before = k
            .roles
            .get(&a.role)
            .into_iter()
            .flatten()
            .map(|(t, at)| (*t, *at))
            .chain(k.tokens.iter().map(|(t, at)| (*t, *at)))
            .filter(|(t, at)| *t > a.token && *at < a.sent)
            .filter(|(t, _)| {
                // Only tokens of this role (producer ids are per role).
                t.producer_id() == a.token.producer_id()
                    || k.roles
                        .get(&a.role)
                        .is_some_and(|l| l.iter().any(|(x, _)| x == t))
            })
            .min();
        if let Some((t, _)) = newer_before {
            out.push(format!("{}: 200 for {} after {t} existed", a.role, a.token));
        }
    }
    out
}

/// Per role: how many checks answered 503, and the first and last of them.
fn unavailable(
    answers: &[Answer],
    after: Instant,
) -> BTreeMap<String, (usize, Duration, Duration)> {
    let mut out: BTreeMap<String, (usize, Duration, Duration)> = BTreeMap::new();
    for a in answers
        .iter()
        .filter(|a| a.status == 503 && a.sent >= after)
    {
        let at = a.sent - after;
        let entry = out.entry(a.role.clone()).or_insert((0, at, at));
        entry.0 += 1;
        entry.1 = entry.1.min(at);
        entry.2 = entry.2.max(a.got - after);
    }
    out
}

async fn coordinator_id(client: &KafkaClient, role: &str) -> i32 {
    client
        .transaction_coordinator(role)
        .await
        .expect("coordinator")
        .id
}

/// Roles held by members on a fresh topic of the cluster.
struct Scene {
    topic: String,
    roles: Vec<String>,
    known: Known,
    members: Members,
}

impl Scene {
    /// `roles` roles named after `prefix`, `per_role` members each, on a
    /// topic of `partitions`; returns once every role has a holder.
    async fn hold(prefix: &str, roles: usize, per_role: usize, partitions: i32) -> Scene {
        let topic = cluster_topic(partitions).await;
        let roles: Vec<String> = (0..roles)
            .map(|i| format!("{}-{i}", unique(prefix)))
            .collect();
        let known = Known::default();
        let members = Members::start(&topic, &roles, per_role, &known).await;
        members
            .wait_for_holders(&roles, Duration::from_secs(30))
            .await;
        Scene {
            topic,
            roles,
            known,
            members,
        }
    }

    /// The service over `bootstrap` and a check load of `workers` on it.
    async fn serve(&self, bootstrap: &str, workers: usize) -> (Service, Load) {
        let service = start(service_config(bootstrap, &self.topic)).await;
        let load = Load::start(
            &service.url,
            &self.roles,
            &self.members.holders,
            &self.known,
            workers,
        );
        (service, load)
    }

    /// The roles whose transaction coordinator is broker `id`.
    async fn coordinated_by(&self, id: i32) -> Vec<String> {
        let client = cluster().client();
        let mut out = Vec::new();
        for role in &self.roles {
            if coordinator_id(&client, role).await == id {
                out.push(role.clone());
            }
        }
        out
    }
}

fn service_config(bootstrap: &str, topic: &str) -> crate::service::Config {
    let mut config = config(bootstrap, topic);
    config.watch.roster_ttl = ROSTER_TTL;
    config.watch.poll_interval = Duration::from_secs(1);
    config.http.request_timeout = Duration::from_secs(3);
    config.client.request_timeout = Duration::from_secs(2);
    config.client.operation_timeout = Duration::from_secs(5);
    config.watch.challenge_stagger = STAGGER;
    config
}

async fn metric(service: &Service, name: &str) -> f64 {
    let text = reqwest::get(format!("{}/metrics", service.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until `role` has a holder other than `old`, or panics at `within`.
async fn takeover(holders: &Holders, role: &str, old: FencingToken, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if holders.current(role).is_some_and(|t| t > old) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{role}: no new holder within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

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
    let wrong = wrong(&answers, &known);
    let outages = unavailable(&answers, killed);
    eprintln!(
        "kill coordinator {victim}: {} checks, affected roles {affected:?}, 503s {outages:?}, {lookups} lookups in all",
        answers.len()
    );
    assert!(wrong.is_empty(), "wrong verdicts: {wrong:?}");
    for (role, outage) in &outages {
        assert!(
            affected.contains(role),
            "{role} is not coordinated by the dead broker, yet answered 503: {outage:?}"
        );
    }
    assert!(
        answers.iter().filter(|a| a.sent > killed).count() > 100,
        "too few checks"
    );
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
    let victim = client.partition_leader(&topic, partition).await.unwrap();
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
        if client.partition_leader(topic, p).await.unwrap() != victim {
            healthy_roles.push(role.clone());
        }
    }
    let paused = Instant::now();
    cluster().act("pause", victim);
    // Views of partitions on healthy leaders stay fresh during the hang.
    let http = reqwest::Client::new();
    let bound = ROSTER_TTL + Duration::from_secs(1);
    let mut oldest = Duration::ZERO;
    let mut late = Vec::new();
    while paused.elapsed() < Duration::from_secs(20) {
        for role in &healthy_roles {
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
            if status != 200 || age > bound {
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
    let wrong = wrong(&answers, known);
    let outages = unavailable(&answers, paused);
    let recovered: BTreeMap<&String, Duration> = outages
        .iter()
        .map(|(role, (_, _, last))| (role, *last))
        .collect();
    eprintln!(
        "hung broker {victim} for 20 s: {} checks; healthy views at most {oldest:?} old (bound {bound:?}); affected {affected:?}; 503s {outages:?}; checks correct again after {recovered:?} from the pause (resumed at {:?})",
        answers.len(),
        resumed - paused
    );
    assert!(wrong.is_empty(), "wrong verdicts: {wrong:?}");
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
        !tail.is_empty() && tail.iter().all(|a| a.status != 503),
        "503s 5 s after the resume"
    );
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
    let (_service, load) = scene.serve(&cluster().address(only), 3).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let killed = Instant::now();
    cluster().act("kill", only);
    tokio::time::sleep(SESSION_TIMEOUT + Duration::from_secs(6)).await;
    let answers = load.finish().await;
    let wrong = wrong(&answers, known);
    let outages = unavailable(&answers, killed);
    eprintln!(
        "bootstrap broker {only} killed: {} checks, 503s {outages:?}",
        answers.len()
    );
    assert!(wrong.is_empty(), "wrong verdicts: {wrong:?}");
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
        tail.clone().count() > 0 && tail.clone().all(|a| a.status != 503),
        "503s after the move"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart() {
    let _turn = exclusive().await;
    let scene = Scene::hold("rolling", 6, 2, 6).await;
    let (_service, load) = scene.serve(&cluster().bootstrap, 3).await;
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
    let wrong = wrong(&answers, known);
    let outages = unavailable(&answers, started);
    eprintln!(
        "rolling restart in {:?}: {} checks, 503s {outages:?}",
        started.elapsed(),
        answers.len()
    );
    assert!(wrong.is_empty(), "wrong verdicts: {wrong:?}");
    members
        .wait_for_holders(roles, Duration::from_secs(20))
        .await;
    let last = answers
        .iter()
        .rfind(|a| a.sent > started + Duration::from_secs(1));
    assert!(
        last.is_some_and(|a| a.status != 503),
        "the service answers after the restart"
    );
}

/// Issue 17: a coordinator that paused (SIGSTOP) while another broker took
/// its transaction-state partition and minted a newer token, and came back:
/// checks of the deposed token from several clients, single and batch, for
/// 5 s right after the resume, never answer 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_coordinator_that_paused_and_came_back_never_says_authoritative_for_a_deposed_token() {
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
        .partition_leader(&topic, 0)
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let mut totals = (0usize, 0usize, 0usize);
    for round in 0..rounds {
        let role = loop {
            let role = unique("paused-coordinator");
            if coordinator_id(&cluster().client(), &role).await != leader {
                break role;
            }
        };
        let t1 = cluster()
            .client()
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
        // Several clients at once, single and batch, for 5 s.
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
                while resumed.elapsed() < Duration::from_secs(5) {
                    let status = if worker % 2 == 0 {
                        http.get(&single)
                            .send()
                            .await
                            .map(|r| r.status().as_u16())
                            .unwrap_or(0)
                    } else {
                        let body = serde_json::json!([{ "role": role, "token": t1.to_string() }]);
                        match http
                            .post(format!("{url}/authority/check"))
                            .json(&body)
                            .send()
                            .await
                        {
                            Ok(r) => r
                                .json::<Value>()
                                .await
                                .ok()
                                .and_then(|b| b["results"][0]["status"].as_u64())
                                .map_or(0, |s| s as u16),
                            Err(_) => 0,
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
        let yes = seen.iter().filter(|(_, s)| *s == 200).count();
        let no = seen.iter().filter(|(_, s)| *s == 409).count();
        let undecided: Vec<Duration> = seen
            .iter()
            .filter(|(_, s)| *s == 503)
            .map(|(at, _)| *at)
            .collect();
        eprintln!(
            "round {round}: paused broker {x}, {t2} minted {minted:?} after the pause; after the resume {} checks of {t1}: {yes} x 200, {no} x 409, {} x 503 (503s until {:?})",
            seen.len(),
            undecided.len(),
            undecided.iter().max()
        );
        assert_eq!(
            yes, 0,
            "round {round}: a deposed token was called authoritative"
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
    // Reported, not asserted: whether a check reaches the resumed broker
    // before it catches up is timing.
    let refused = metric(&service, "krabka_stale_answers_total").await;
    eprintln!(
        "{rounds} rounds: {} checks of deposed tokens after a coordinator resumed: 0 x 200, {} x 409, {} x 503; {refused} answers refused as stale",
        totals.0, totals.1, totals.2
    );
}
