//! Network faults between the service and the broker, through a TCP fault
//! proxy of the suite (added latency, connection resets, a silent black
//! hole, a half-open connection), and a broker crash with `kill -9`: the
//! service answers 503 within its timeout and never a stale 200, turns not
//! ready, and is right again within 5 s of healing, without a restart.

use std::net::TcpListener as StdListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use krabka_authority::coordination::{FencingToken, RoleState, role_partition};
use krabka_authority::kafka::{KafkaClient, KafkaTransport, TopicSpec, TransportConfig};
use krabka_authority::transport::{Coordinator, LeaseWriter, Registrar};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::support::broker::{OwnBroker, config_for, kafka_script, topic_on};
use crate::support::service::{Config, Service, config, get, start};
use crate::support::{eventually, unique};

/// What the proxy does to the traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything.
    Pass,
    /// Forward every chunk after this delay.
    Latency(Duration),
    /// Reset every connection (RST), now and on accept.
    Reset,
    /// Keep connections open, forward nothing: a silent network.
    BlackHole,
    /// Close the broker side, keep the client side open and silent.
    HalfOpen,
}

/// A TCP proxy whose behaviour a test switches.
pub struct FaultProxy {
    pub addr: String,
    mode: watch::Sender<Mode>,
    live: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl FaultProxy {
    /// Serves on `listener`, forwarding to `upstream`.
    pub fn start(listener: StdListener, upstream: String) -> FaultProxy {
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let listener = TcpListener::from_std(listener).unwrap();
        let (mode, _) = watch::channel(Mode::Pass);
        let live = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let (m, l, p) = (mode.clone(), live.clone(), peak.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let current = *m.borrow();
                if current == Mode::Reset {
                    let _ = client.set_zero_linger();
                    drop(client);
                    continue;
                }
                let (m, l, p, up) = (m.subscribe(), l.clone(), p.clone(), upstream.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&up).await else {
                        return;
                    };
                    let n = l.fetch_add(1, Ordering::SeqCst) + 1;
                    p.fetch_max(n, Ordering::SeqCst);
                    pipe(client, server, m).await;
                    l.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        FaultProxy {
            addr,
            mode,
            live,
            peak,
        }
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    pub fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

async fn pipe(client: TcpStream, server: TcpStream, mut mode: watch::Receiver<Mode>) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let mut cbuf = vec![0u8; 64 * 1024];
    let mut sbuf = vec![0u8; 64 * 1024];
    let mut upstream_open = true;
    loop {
        let current = *mode.borrow_and_update();
        match current {
            Mode::Reset => {
                // RST both ways: linger 0 on close.
                if let (Ok(c), Ok(s)) = (cr.reunite(cw), sr.reunite(sw)) {
                    let _ = c.set_zero_linger();
                    let _ = s.set_zero_linger();
                }
                return;
            }
            Mode::HalfOpen if upstream_open => {
                let _ = sw.shutdown().await;
                upstream_open = false;
            }
            _ => {}
        }
        tokio::select! {
            changed = mode.changed() => if changed.is_err() { return },
            read = cr.read(&mut cbuf) => {
                let Ok(n) = read else { return };
                if n == 0 { return }
                let now = *mode.borrow();
                if !forward(now, upstream_open, &mut sw, &cbuf[..n]).await { return }
            }
            read = sr.read(&mut sbuf), if upstream_open => {
                let Ok(n) = read else { return };
                if n == 0 { upstream_open = false; continue }
                let now = *mode.borrow();
                if !forward(now, true, &mut cw, &sbuf[..n]).await { return }
            }
        }
    }
}

/// Forwards `bytes` as the mode says (swallowed in a black hole or when the
/// far side is closed); false when the write failed.
async fn forward(
    mode: Mode,
    open: bool,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    bytes: &[u8],
) -> bool {
    match mode {
        Mode::Pass if open => to.write_all(bytes).await.is_ok(),
        Mode::Latency(delay) if open => {
            tokio::time::sleep(delay).await;
            to.write_all(bytes).await.is_ok()
        }
        _ => true,
    }
}

/// A broker whose PLAINTEXT listener is advertised at the proxy, plus a
/// DIRECT listener the harness uses to change things behind the proxy.
pub struct Rig {
    #[allow(dead_code)] // held: stops the broker when the rig drops
    pub broker: OwnBroker,
    pub proxy: FaultProxy,
    pub direct: String,
    pub topic: String,
}

pub async fn rig(prefix: &str) -> Rig {
    let reserved = StdListener::bind("127.0.0.1:0").unwrap();
    let proxy_port = reserved.local_addr().unwrap().port();
    let broker = OwnBroker::start(
        prefix,
        &[
            "--set",
            "listeners=PLAINTEXT://127.0.0.1:{port},DIRECT://127.0.0.1:{free1},CONTROLLER://127.0.0.1:{cport}",
            "--set",
            &format!(
                "advertised.listeners=PLAINTEXT://127.0.0.1:{proxy_port},DIRECT://127.0.0.1:{{free1}}"
            ),
            "--set",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,DIRECT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "--set",
            "inter.broker.listener.name=DIRECT",
        ],
    );
    let direct = kafka_script(&["address", "--name", &broker.name, "--listener", "DIRECT"]);
    let proxy = FaultProxy::start(reserved, broker.addr.clone());
    let topic = topic_on(&direct, "faults", 2).await;
    Rig {
        broker,
        proxy,
        direct,
        topic,
    }
}

async fn minter(direct: &str, topic: &str) -> KafkaTransport {
    KafkaTransport::connect(
        KafkaClient::new(config_for(direct)).unwrap(),
        TransportConfig {
            topic: topic.to_owned(),
            partitions: None,
            create: None,
        },
    )
    .await
    .unwrap()
}

const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

fn fault_config(bootstrap: &str, topic: &str) -> Config {
    let mut c = config(bootstrap, topic);
    c.http.request_timeout = CHECK_TIMEOUT;
    c.client.request_timeout = Duration::from_millis(800);
    c.client.operation_timeout = Duration::from_millis(1500);
    c.client.connect_timeout = Duration::from_millis(800);
    c.watch.roster_ttl = Duration::from_millis(300);
    c.watch.poll_interval = Duration::from_millis(500);
    c
}

async fn check(
    service: &Service,
    role: &str,
    token: FencingToken,
) -> (u16, serde_json::Value, Duration) {
    let started = Instant::now();
    let (status, body, _) = get(&format!(
        "{}/roles/{role}/authority?token={token}",
        service.url
    ))
    .await;
    (status, body, started.elapsed())
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_faults_answer_503_and_heal_within_5s() {
    let rig = rig("faults").await;
    let service = start(fault_config(&rig.proxy.addr, &rig.topic)).await;
    let minter = minter(&rig.direct, &rig.topic).await;
    let role = unique("fault-role");
    let mut token = minter
        .acquire_epoch(&role, Duration::from_secs(60))
        .await
        .unwrap();
    eventually(|| async { (check(&service, &role, token).await.0 == 200).then_some(()) }).await;
    eventually(|| async { (get(&format!("{}/readyz", service.url)).await.0 == 200).then_some(()) })
        .await;
    let baseline_tasks = alive_tasks();

    // Latency below the timeout: slower, still right.
    rig.proxy.set(Mode::Latency(Duration::from_millis(150)));
    let (status, body, took) = check(&service, &role, token).await;
    assert_eq!(status, 200, "{body}");
    eprintln!("latency 150 ms: 200 in {took:?}");

    let report = Mutex::new(Vec::new());
    for mode in [
        Mode::Latency(Duration::from_secs(3)),
        Mode::Reset,
        Mode::BlackHole,
        Mode::HalfOpen,
    ] {
        rig.proxy.set(mode);
        let faulted = Instant::now();
        let mut answered = 0;
        let mut not_ready = false;
        let mut minted_during = None;
        while faulted.elapsed() < Duration::from_secs(5) {
            let (status, body, took) = check(&service, &role, token).await;
            assert_ne!(
                status, 200,
                "{mode:?}: a 200 without the coordinator: {body}"
            );
            assert_eq!(status, 503, "{mode:?}: {body}");
            assert!(
                took <= CHECK_TIMEOUT + Duration::from_millis(1500),
                "{mode:?}: took {took:?}"
            );
            answered += 1;
            if get(&format!("{}/readyz", service.url)).await.0 == 503 {
                not_ready = true;
            }
            if minted_during.is_none() && faulted.elapsed() > Duration::from_secs(2) {
                // Behind the proxy, the role changes hands.
                minted_during = Some(
                    minter
                        .acquire_epoch(&role, Duration::from_secs(60))
                        .await
                        .unwrap(),
                );
            }
        }
        assert!(not_ready, "{mode:?}: /readyz never turned not ready");
        let old = token;
        token = minted_during.expect("minted during the fault");
        let peak = rig.proxy.peak();

        rig.proxy.set(Mode::Pass);
        let healed = Instant::now();
        eventually(|| async { (check(&service, &role, token).await.0 == 200).then_some(()) }).await;
        let recovered = healed.elapsed();
        let (status, body, _) = check(&service, &role, old).await;
        assert_eq!(
            (status, body["verdict"].as_str()),
            (409, Some("superseded")),
            "{mode:?}: {body}"
        );
        eventually(|| async {
            (get(&format!("{}/readyz", service.url)).await.0 == 200).then_some(())
        })
        .await;
        let ready_after = healed.elapsed();
        assert!(
            recovered < Duration::from_secs(5),
            "{mode:?}: right again only after {recovered:?}"
        );
        let tasks = alive_tasks();
        eprintln!(
            "{mode:?}: {answered} checks answered 503; right again {recovered:?} and ready {ready_after:?} after healing; proxy connections now {} (peak {peak}); tasks {tasks} (baseline {baseline_tasks})",
            rig.proxy.live()
        );
        report.lock().unwrap().push((mode, answered, recovered));
        assert!(peak <= 24, "{mode:?}: {peak} connections at once");
        assert!(
            tasks <= baseline_tasks + 40,
            "{mode:?}: tasks grew to {tasks}"
        );
    }
    drop(service);
    drop(rig);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_crash_under_load_fails_closed_and_the_watcher_loses_no_record() {
    let broker = OwnBroker::start("crash", &[]);
    let topic = unique("crash");
    let kafka = KafkaClient::new(config_for(&broker.addr)).unwrap();
    kafka
        .topics()
        .ensure_topic(
            &topic,
            &TopicSpec {
                partitions: 2,
                replication_factor: 1,
                configs: vec![],
            },
        )
        .await
        .unwrap();
    let service = start(fault_config(&broker.addr, &topic)).await;
    let writer = minter(&broker.addr, &topic).await;
    let role = unique("crash-role");
    let token = writer
        .acquire_epoch(&role, Duration::from_secs(120))
        .await
        .unwrap();
    let lease = |at: i64| krabka_authority::coordination::Lease {
        member: "holder".into(),
        token,
        granted_at: at,
        deadline: at + 120_000,
    };
    writer.write_lease(&role, token, &lease(1)).await.unwrap();
    let mut written = Vec::new();
    for i in 0..20 {
        written.push(writer.register(&role, &format!("m{i}"), i).await.unwrap());
    }
    eventually(|| async { (check(&service, &role, token).await.0 == 200).then_some(()) }).await;

    // A steady check load while the broker dies and comes back.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tally = Arc::new(Mutex::new((0usize, 0usize, 0usize)));
    let load = {
        let (stop, tally, url) = (
            stop.clone(),
            tally.clone(),
            format!("{}/roles/{role}/authority?token={token}", service.url),
        );
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            while !stop.load(Ordering::SeqCst) {
                let started = Instant::now();
                let status = client
                    .get(&url)
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0);
                let took = started.elapsed();
                {
                    let mut t = tally.lock().unwrap();
                    match status {
                        200 => t.0 += 1,
                        503 => t.1 += 1,
                        _ => t.2 += 1,
                    }
                }
                assert!(
                    took <= CHECK_TIMEOUT + Duration::from_millis(1500),
                    "a check took {took:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed = Instant::now();
    tokio::task::block_in_place(|| broker.kill());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = *tally.lock().unwrap();
    tokio::task::block_in_place(|| broker.restart());
    let restarted = Instant::now();
    eventually(|| async { (check(&service, &role, token).await.0 == 200).then_some(()) }).await;
    let recovered = restarted.elapsed();
    stop.store(true, Ordering::SeqCst);
    load.await.unwrap();
    let (ok, unavailable, other) = *tally.lock().unwrap();
    eprintln!(
        "kill -9: {ok} checks 200, {unavailable} 503, {other} other; down {:?}; right again {recovered:?} after the restart",
        restarted - killed
    );
    assert_eq!(other, 0, "only 200 (before and after) and 503 (while down)");
    assert!(during.1 > 0, "503s while the broker was down");
    assert!(recovered < Duration::from_secs(10));

    // The watcher resumed where it was and lost nothing: every record written
    // before the crash and after it is in the view.
    for i in 20..25 {
        written.push(writer.register(&role, &format!("m{i}"), i).await.unwrap());
    }
    let view = eventually(|| async {
        let (_, v, _) = get(&format!("{}/roles/{role}", service.url)).await;
        (v["members"].as_array().map_or(0, Vec::len) == 25).then_some(v)
    })
    .await;
    let offsets: Vec<i64> = view["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["offset"].as_i64().unwrap())
        .collect();
    assert_eq!(
        offsets, written,
        "every registration, at its offset, in order"
    );
    assert_eq!(view["lease"]["token"], token.to_string());
    let partition = role_partition(&role, 2).unwrap();
    let read = kafka
        .reader()
        .read_committed(&topic, partition, 0)
        .await
        .unwrap();
    let truth = RoleState::from_records(&role, &read.records);
    assert_eq!(truth.members().len(), 25);
}
