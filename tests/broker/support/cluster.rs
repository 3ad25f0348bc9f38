//! The cluster tests' harness: the shared 3-broker cluster (one test at a
//! time, healthy before and after), members of roles in clients of their
//! own, a steady check load on the service, and the audit of its answers
//! against the tokens known to exist.
//!
//! The cluster is `KRABKA_TEST_CLUSTER` (set by `scripts/test`, with
//! `KRABKA_TEST_CLUSTER_NAME` naming its `scripts/kafka` instance); else one
//! is started and left running under the name `test-cluster-auto`.
//!
//! A test that needs brokers set up otherwise (another listener, more
//! brokers) starts a cluster of its own ([`OwnCluster`]) in the cluster
//! tier's network namespace, with [`own_client`]s and [`mint`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use krabka_authority::coordination::FencingToken;
use krabka_authority::kafka::{
    ClientConfig, KafkaClient, KafkaTransport, TopicSpec, TransportConfig,
};
use krabka_authority::leadership::{Event, Options, acquire};
use krabka_authority::time::{Clock, SystemClock};
use krabka_authority::transport::Coordinator;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::broker::{kafka_script, kafka_tool};
use super::service::{Config, Service, config, start};
use super::{capture_logs, http_client, unique};

/// Kafka's default `broker.session.timeout.ms`: how long a dead broker
/// keeps its partitions before the controller moves them.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(9);
/// Kafka's default `request.timeout.ms`. A coordinator whose transaction
/// log append timed out (a replica died during the holder's commit) retries
/// it only when its marker sender thread wakes: on new markers to send, else
/// after this (`TransactionMarkerChannelManager::retryLogAppends`, polled by
/// `InterBrokerSendThread` at most this long). Until then InitProducerId for
/// the role answers CONCURRENT_TRANSACTIONS and no member can mint (CI saw
/// a standby wait 12 s and more for it).
pub const BROKER_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
pub const LEASE: Duration = Duration::from_secs(4);
pub const STAGGER: Duration = Duration::from_secs(1);
/// The view staleness bound the service is configured with.
pub const ROSTER_TTL: Duration = Duration::from_millis(500);

pub struct Cluster {
    name: String,
    pub bootstrap: String,
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
pub struct Node {
    pub id: i32,
    role: String,
    pub address: Option<String>,
    state: String,
    /// Cut from the controller (`scripts/kafka cut`).
    #[serde(default)]
    cut: bool,
    /// Its disk frozen (`scripts/kafka freeze`).
    #[serde(default)]
    frozen: bool,
}

/// The controller's node id in `scripts/kafka`'s clusters.
pub const CONTROLLER: i32 = 1000;

impl Cluster {
    /// The brokers.
    pub fn nodes(&self) -> Vec<Node> {
        self.all_nodes()
            .into_iter()
            .filter(|n| n.role == "broker")
            .collect()
    }

    /// The brokers and the controller.
    fn all_nodes(&self) -> Vec<Node> {
        let json = kafka_script(&["nodes", "--name", &self.name, "--json"]);
        serde_json::from_str(&json).expect("nodes --json")
    }

    /// The addresses of every broker but `id`.
    pub fn addresses_but(&self, id: i32) -> Vec<String> {
        self.nodes()
            .into_iter()
            .filter(|n| n.id != id)
            .filter_map(|n| n.address)
            .collect()
    }

    pub fn address(&self, id: i32) -> String {
        self.nodes()
            .into_iter()
            .find(|n| n.id == id)
            .and_then(|n| n.address)
            .expect("the broker's address")
    }

    /// `scripts/kafka VERB --node ID`, off the async threads.
    pub fn act(&self, verb: &str, id: i32) {
        let id = id.to_string();
        tokio::task::block_in_place(|| {
            kafka_script(&[verb, "--name", &self.name, "--node", &id]);
        });
    }

    /// A preferred leader election of `partition` (`TOPIC:N`): whether it
    /// was elected (its first replica in sync, and asked to lead).
    pub fn elect(&self, partition: &str) -> bool {
        tokio::task::block_in_place(|| {
            std::process::Command::new(super::repo().join("scripts/kafka"))
                .args(["elect", "--name", &self.name, "--partition", partition])
                .output()
                .is_ok_and(|out| out.status.success())
        })
    }

    /// Every node running, its disk writable and reaching the controller
    /// again.
    pub fn heal(&self) {
        for node in self.all_nodes() {
            if node.frozen {
                self.act("thaw", node.id);
            }
            if node.cut {
                self.act("mend", node.id);
            }
            match node.state.as_str() {
                "paused" => self.act("resume", node.id),
                "stopped" => self.act("start-node", node.id),
                _ => {}
            }
        }
    }

    pub fn client(&self) -> KafkaClient {
        capture_logs();
        let mut config = ClientConfig::new(self.bootstrap.split(','));
        config.client_id = "krabka-cluster-test".into();
        config.request_timeout = Duration::from_secs(2);
        config.operation_timeout = Duration::from_secs(30);
        KafkaClient::new(config).expect("client")
    }
}

/// A cluster of one test's own (`scripts/kafka start --name NAME ...`),
/// stopped and removed when dropped.
pub struct OwnCluster(pub String);

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new(super::repo().join("scripts/kafka"))
            .args(["stop", "--purge", "--name", &self.0])
            .output();
    }
}

/// A client of the brokers at `bootstrap` (comma-separated), named
/// `client_id`.
pub fn own_client(bootstrap: &str, client_id: &str) -> KafkaClient {
    let mut config = ClientConfig::new(bootstrap.split(','));
    config.client_id = client_id.into();
    config.request_timeout = Duration::from_secs(2);
    config.operation_timeout = Duration::from_secs(20);
    KafkaClient::new(config).expect("client")
}

/// A new pair of `role` minted (InitProducerId) through `client`, which
/// should be of its own: new connections, as a new holder makes.
pub async fn mint(client: KafkaClient, topic: &str, role: &str) -> FencingToken {
    let transport = KafkaTransport::connect(
        client,
        TransportConfig {
            topic: topic.to_owned(),
            partitions: None,
            create: None,
        },
    )
    .await
    .expect("a transport");
    transport
        .acquire_epoch(role, Duration::from_secs(60))
        .await
        .expect("a mint")
}

/// A broker replaced behind its address, as two services and the CLI saw
/// it: one service started before the move and one after, each asked of
/// the deposed `t1` and the new `t2` without pause for 20 s from the mint,
/// then the CLI bootstrapped from the moved address, of `t1`.
pub struct AfterReplacement {
    /// Every 200 for `t1`: which service, how long after the mint, its body.
    pub yes_t1: Vec<(usize, Duration, Value)>,
    /// Per service, the first 200 for `t2`, after the mint.
    pub first_t2: [Option<Duration>; 2],
    /// Per service, the checks answered of `t1` and of `t2`.
    pub counts: [[usize; 2]; 2],
    pub cli: std::process::Output,
}

impl AfterReplacement {
    pub async fn observe(
        services: [&str; 2],
        role: &str,
        (t1, t2): (FencingToken, FencingToken),
        minted: Instant,
        bootstrap: &str,
        topic: &str,
    ) -> AfterReplacement {
        let http = http_client().build().unwrap();
        let mut yes_t1 = Vec::new();
        let mut first_t2: [Option<Duration>; 2] = [None, None];
        let mut counts = [[0usize; 2]; 2];
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            for (s, url) in services.into_iter().enumerate() {
                for (k, token) in [t1, t2].into_iter().enumerate() {
                    let Some((status, body)) = super::service::check(&http, url, role, token).await
                    else {
                        continue;
                    };
                    counts[s][k] += 1;
                    if status == 200 && k == 0 {
                        yes_t1.push((s, minted.elapsed(), body));
                    } else if status == 200 {
                        first_t2[s].get_or_insert_with(|| minted.elapsed());
                    }
                }
            }
        }
        let cli = tokio::task::block_in_place(|| {
            super::process::binary()
                .args([
                    "check",
                    "--bootstrap-servers",
                    bootstrap,
                    "--topic",
                    topic,
                    role,
                    &t1.to_string(),
                ])
                .output()
                .expect("the binary runs")
        });
        AfterReplacement {
            yes_t1,
            first_t2,
            counts,
            cli,
        }
    }

    /// No 200 for `t1`; both services asked often, and each answered 200
    /// for `t2` within 5 s of its mint; the CLI said `superseded` (exit 1).
    pub fn assert_held(&self, (t1, t2): (FencingToken, FencingToken)) {
        let (yes_t1, counts) = (&self.yes_t1, &self.counts);
        assert!(
            yes_t1.is_empty(),
            "200 for the deposed {t1}: {:?}",
            &yes_t1[..yes_t1.len().min(3)]
        );
        for (s, which) in ["started before the move", "started after it"]
            .iter()
            .enumerate()
        {
            assert!(
                counts[s][0] > 10 && counts[s][1] > 10,
                "{which}: {counts:?}"
            );
            let first = self.first_t2[s].unwrap_or_else(|| panic!("{which}: never 200 for {t2}"));
            assert!(
                first < Duration::from_secs(5),
                "{which}: {t2} authoritative only {first:?} after the mint"
            );
        }
        assert_eq!(
            self.cli.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&self.cli.stdout)
        );
    }
}

/// One cluster test at a time, on a healthy cluster, left healthy.
pub struct Exclusive {
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

pub async fn exclusive() -> Exclusive {
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
pub async fn cluster_topic(partitions: i32) -> String {
    let name = unique("cluster-topic");
    let spec = TopicSpec {
        partitions,
        replication_factor: -1,
        configs: Vec::new(),
    };
    cluster()
        .client()
        .topics()
        .ensure_topic(&name, &spec)
        .await
        .expect("topic created");
    // Every broker knows it before members (fresh clients, asking any
    // broker) look for it: a broker that rejoined the controller a moment
    // ago may still be catching up.
    for node in cluster().nodes() {
        let addr = node.address.expect("a broker's address");
        let mut config = ClientConfig::new([addr.as_str()]);
        config.request_timeout = Duration::from_secs(2);
        let started = Instant::now();
        loop {
            // A fresh client: its first Metadata request goes to `addr`.
            let client = KafkaClient::new(config.clone()).expect("client");
            if client.topics().partition_count(&name).await.is_ok() {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "broker {addr} does not know the topic {name} after 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    name
}

pub fn options(known: &Known, role: &str) -> Options {
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
            Event::Renewed { deadline } => {
                known.held_now(&role);
                known.written(&role, *deadline);
            }
            _ => {}
        }))
}

/// Tokens known to exist, by role, with the instant they were first known
/// (a member acquired with it, or an answer named it current).
#[derive(Clone, Debug, Default)]
pub struct Known {
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
    /// Every lease written per role: its deadline, and when it was written
    /// (epoch ms; the member's write had committed).
    writes: HashMap<String, Vec<(i64, i64)>>,
}

impl Known {
    pub fn held_now(&self, role: &str) {
        let mut k = self.inner.lock().unwrap();
        k.held.insert(role.to_owned(), Instant::now());
    }

    /// Waits until `role` has a lease written after `since` (by its holder
    /// renewing, or by a standby taking over), or panics at `within`.
    pub async fn held_again(&self, role: &str, since: Instant, within: Duration) -> Duration {
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

    /// A lease of `role` with `deadline` was written just now.
    fn written(&self, role: &str, deadline: i64) {
        let now = SystemClock.now_ms();
        let mut k = self.inner.lock().unwrap();
        k.writes
            .entry(role.to_owned())
            .or_default()
            .push((deadline, now));
    }

    /// The leases written of `role`: (deadline, written at, epoch ms).
    pub fn writes(&self, role: &str) -> Vec<(i64, i64)> {
        let k = self.inner.lock().unwrap();
        k.writes.get(role).cloned().unwrap_or_default()
    }

    pub fn minted_now(&self, token: FencingToken) {
        let mut k = self.inner.lock().unwrap();
        k.tokens.entry(token).or_insert_with(Instant::now);
    }

    pub fn seen(&self, role: &str, token: FencingToken, at: Instant) {
        let mut k = self.inner.lock().unwrap();
        let list = k.roles.entry(role.to_owned()).or_default();
        match list.iter_mut().find(|(t, _)| *t == token) {
            Some((_, first)) => *first = (*first).min(at),
            None => list.push((token, at)),
        }
    }

    /// The latest token of `role` a member acquired.
    pub fn latest(&self, role: &str, members: &Holders) -> Option<FencingToken> {
        members.current(role)
    }
}

/// Who holds a role, under which token, since when.
pub type Holding = (String, FencingToken, Instant);

/// The holders of every role, as their members report.
#[derive(Clone, Debug, Default)]
pub struct Holders {
    inner: Arc<Mutex<HashMap<String, Holding>>>,
}

impl Holders {
    pub fn current(&self, role: &str) -> Option<FencingToken> {
        self.inner.lock().unwrap().get(role).map(|(_, t, _)| *t)
    }

    pub fn holder(&self, role: &str) -> Option<Holding> {
        self.inner.lock().unwrap().get(role).cloned()
    }
}

/// Members of roles, each in its own client as separate processes would be.
pub struct Members {
    tasks: Vec<(String, String, JoinHandle<()>)>,
    pub holders: Holders,
}

impl Members {
    pub async fn start(topic: &str, roles: &[String], per_role: usize, known: &Known) -> Members {
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
    pub async fn wait_for_holders(&self, roles: &[String], within: Duration) {
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
    pub fn kill_holder(&mut self, role: &str) -> Option<String> {
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

/// One check of the service and how it ended.
#[derive(Clone, Debug)]
pub struct Answer {
    pub role: String,
    pub token: FencingToken,
    pub sent: Instant,
    pub got: Instant,
    /// The status, or why no answer came within [`CHECK_WAIT`].
    pub status: Result<u16, String>,
}

/// How long a check waits for an answer: far past the service's request
/// timeout (3 s), so a check without an answer is a service that is dead or
/// hung, never one that is slow.
pub const CHECK_WAIT: Duration = Duration::from_secs(10);

impl Answer {
    /// A verdict (200 or 409), not a 503 or a failure.
    pub fn is_verdict(&self) -> bool {
        matches!(self.status, Ok(200 | 409))
    }
}

/// Checks of the holders' tokens (and of deposed ones) at a steady pace.
pub struct Load {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    answers: Arc<Mutex<Vec<Answer>>>,
}

impl Load {
    pub fn start(
        url: &str,
        roles: &[String],
        holders: &Holders,
        known: &Known,
        workers: usize,
    ) -> Load {
        let (stop, stopped) = watch::channel(false);
        let answers: Arc<Mutex<Vec<Answer>>> = Arc::default();
        let client = http_client().build().unwrap();
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
                        .timeout(CHECK_WAIT)
                        .send()
                        .await;
                    let got = Instant::now();
                    let (status, body) = match result {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            (Ok(status), r.json::<Value>().await.unwrap_or(Value::Null))
                        }
                        Err(e) => (Err(e.to_string()), Value::Null),
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

    pub async fn finish(self) -> Vec<Answer> {
        let _ = self.stop.send(true);
        for task in self.tasks {
            task.await.expect("a check worker panicked");
        }
        Arc::try_unwrap(self.answers)
            .map(|m| m.into_inner().unwrap())
            .unwrap_or_else(|a| a.lock().unwrap().clone())
    }
}

/// The 200s for a token that a newer one had superseded before the check
/// was sent: wrong verdicts.
pub fn wrong(answers: &[Answer], known: &Known) -> Vec<String> {
    let k = known.inner.lock().unwrap();
    let mut out = Vec::new();
    for a in answers.iter().filter(|a| a.status == Ok(200)) {
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
pub fn unavailable(
    answers: &[Answer],
    after: Instant,
) -> BTreeMap<String, (usize, Duration, Duration)> {
    let mut out: BTreeMap<String, (usize, Duration, Duration)> = BTreeMap::new();
    for a in answers
        .iter()
        .filter(|a| a.status == Ok(503) && a.sent >= after)
    {
        let at = a.sent - after;
        let entry = out.entry(a.role.clone()).or_insert((0, at, at));
        entry.0 += 1;
        entry.1 = entry.1.min(at);
        entry.2 = entry.2.max(a.got - after);
    }
    out
}

/// The answers that are neither a verdict nor a 503: checks that got no
/// answer (the service dead or hung) and any other status. Each is a
/// failure: the service answers every check, at worst with a 503.
pub fn failures(answers: &[Answer]) -> Vec<String> {
    answers
        .iter()
        .filter(|a| !a.is_verdict() && a.status != Ok(503))
        .map(|a| format!("{} {}: {:?}", a.role, a.token, a.status))
        .collect()
}

/// Per role of `roles`, the verdicts of checks sent after `after` (a role
/// without one is there with 0).
pub fn verdicts(answers: &[Answer], roles: &[String], after: Instant) -> BTreeMap<String, usize> {
    let mut out: BTreeMap<String, usize> = roles.iter().map(|r| (r.clone(), 0)).collect();
    for a in answers.iter().filter(|a| a.sent >= after && a.is_verdict()) {
        *out.entry(a.role.clone()).or_default() += 1;
    }
    out
}

/// What every test under load requires of the answers: no wrong 200, no
/// check without an answer or with another status than 200, 409 or 503,
/// and at least `min` verdicts for each role from `after` on (a dead
/// service, or one that answers nothing but 503, fails here).
pub fn assert_sound(
    answers: &[Answer],
    known: &Known,
    roles: &[String],
    after: Instant,
    min: usize,
) {
    let wrong = wrong(answers, known);
    assert!(wrong.is_empty(), "wrong verdicts: {wrong:?}");
    let failures = failures(answers);
    assert!(
        failures.is_empty(),
        "{} of {} checks failed: {:?}",
        failures.len(),
        answers.len(),
        &failures[..failures.len().min(10)]
    );
    let verdicts = verdicts(answers, roles, after);
    assert!(
        verdicts.values().all(|n| *n >= min),
        "fewer than {min} verdicts for a role: {verdicts:?}"
    );
}

/// A role named after `prefix` whose transaction coordinator leads its
/// partition of `topic` (of `partitions`), and that broker's id: the
/// broker whose fault hits both the role's checks and its views.
pub async fn role_led_by_its_coordinator(
    client: &KafkaClient,
    topic: &str,
    partitions: i32,
    prefix: &str,
) -> (String, i32) {
    loop {
        let role = unique(prefix);
        let coordinator = coordinator_id(client, &role).await;
        let p = krabka_authority::coordination::role_partition(&role, partitions).unwrap();
        if client.metadata().partition_leader(topic, p).await.unwrap() == coordinator {
            return (role, coordinator);
        }
    }
}

/// `transaction.state.log.num.partitions` of `scripts/kafka`'s clusters.
pub const TRANSACTION_PARTITIONS: i32 = 4;

/// The partition of `__transaction_state` that holds `id`, as Kafka's
/// `TransactionStateManager.partitionFor` computes it:
/// `Utils.abs(id.hashCode()) % partitions` (Java's `String.hashCode`, and
/// `Utils.abs(Integer.MIN_VALUE) == 0`).
pub fn transaction_partition(id: &str, partitions: i32) -> i32 {
    let hash = id.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    (if hash == i32::MIN { 0 } else { hash.abs() }) % partitions
}

/// The leader and the replicas of `__transaction_state`'s `partition`, as
/// Kafka's TopicCommand describes it.
pub fn transaction_state_replicas(bootstrap: &str, partition: i32) -> (i32, Vec<i32>) {
    let out = kafka_tool(
        &[
            "org.apache.kafka.tools.TopicCommand",
            "kafka.admin.TopicCommand",
        ],
        &[
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--topic",
            "__transaction_state",
        ],
    );
    for line in out.lines() {
        let field = |name: &str| {
            line.split('\t')
                .find_map(|f| f.trim().strip_prefix(name))
                .map(str::trim)
        };
        if field("Partition: ") != Some(&partition.to_string()) {
            continue;
        }
        let leader = field("Leader: ").and_then(|l| l.parse().ok());
        let replicas: Vec<i32> = field("Replicas: ")
            .unwrap_or_default()
            .split(',')
            .filter_map(|r| r.parse().ok())
            .collect();
        if let Some(leader) = leader {
            return (leader, replicas);
        }
    }
    panic!("no leader of __transaction_state-{partition} in:\n{out}");
}

pub async fn coordinator_id(client: &KafkaClient, role: &str) -> i32 {
    client
        .lookup()
        .transaction_coordinator(role)
        .await
        .expect("coordinator")
        .id
}

/// Roles held by members on a fresh topic of the cluster.
pub struct Scene {
    pub topic: String,
    pub roles: Vec<String>,
    pub known: Known,
    pub members: Members,
}

impl Scene {
    /// `roles` roles named after `prefix`, `per_role` members each, on a
    /// topic of `partitions`; returns once every role has a holder.
    pub async fn hold(prefix: &str, roles: usize, per_role: usize, partitions: i32) -> Scene {
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
    pub async fn serve(&self, bootstrap: &str, workers: usize) -> (Service, Load) {
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

    /// Every role's holder is authoritative: the service at `url` answers
    /// 200 for the token its holder holds now, within `within` (asked
    /// again while the holder changes, or while the service cannot ask).
    pub async fn holders_authoritative(&self, url: &str, within: Duration) {
        let http = http_client().build().unwrap();
        let started = Instant::now();
        for role in &self.roles {
            loop {
                let token = self.members.holders.current(role).expect("a holder");
                let answer = http
                    .get(format!("{url}/roles/{role}/authority?token={token}"))
                    .timeout(CHECK_WAIT)
                    .send()
                    .await;
                let last = match answer {
                    Ok(r) if r.status() == 200 => break,
                    Ok(r) => format!("{}: {}", r.status(), r.text().await.unwrap_or_default()),
                    Err(e) => e.to_string(),
                };
                assert!(
                    started.elapsed() < within,
                    "{role}: its holder's {token} is not authoritative within {within:?}: {last}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }

    /// The roles whose transaction coordinator is broker `id`.
    pub async fn coordinated_by(&self, id: i32) -> Vec<String> {
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

pub fn service_config(bootstrap: &str, topic: &str) -> Config {
    let mut config = config(bootstrap, topic);
    config.watch.roster_ttl = ROSTER_TTL;
    config.watch.poll_interval = Duration::from_secs(1);
    config.http.request_timeout = Duration::from_secs(3);
    config.client.request_timeout = Duration::from_secs(2);
    config.client.operation_timeout = Duration::from_secs(5);
    config.watch.challenge_stagger = STAGGER;
    config
}

pub async fn metric(service: &Service, name: &str) -> f64 {
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
pub async fn takeover(
    holders: &Holders,
    role: &str,
    old: FencingToken,
    within: Duration,
) -> Duration {
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
