//! One run: the simulated world of a plan, stepped to its end.
//!
//! Hosts: the plan's brokers (`b1` to `b3`, `b4` and `b5` in larger
//! clusters, each a scripted broker of the modelled cluster, its process
//! swapped when the node gets a new one), the service (`serve` as the binary runs it: `service::run` on the
//! simulated listener, its clock [`SimClock`]), and two observers (the
//! service's clients, and the `check` subcommand's path). The run applies
//! the plan's events between steps, ticks the model before each, and hands
//! back what the observers saw and what the model knows happened.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use super::clock::{SimClock, Steps};
use super::history::History;
use super::observe::{cli_observer, service_observer};
use super::schedule::{End, Event, MEMBERS, Plan, ROLES, TXN_PARTITIONS};
use crate::coordination::{FencingToken, Key, Lease, Registration, encode_key};
use crate::kafka::fake::FakeBroker;
use crate::kafka::fake::model::{Model, Part, Settings, Truth};
use crate::kafka::host;
use crate::service::{AppState, ServiceConfig};
use crate::time::{millis, simulate_host, simulate_suspend};

/// The simulation's wall clock at its start: 2026-01-01T00:00:00Z.
const EPOCH_MS: u64 = 1_767_225_600_000;
/// The coordination topic.
const TOPIC: &str = "__coordination_state";
/// The coordination topic's `min.compaction.lag.ms` in the simulation,
/// counted from a record's append (its `LogAppendTime`): longer than the
/// world ever keeps the service from reading (its faults end by 28 s; a
/// service bootstrapped from one broker paused 18 s and restarted
/// meanwhile reads nothing for as long), as the hour of a topic the service
/// creates is longer than an outage. With 10 s, seed 2026 lost a change
/// the service could not read for 14 s, as Kafka allows.
pub(super) const MIN_COMPACTION_LAG: Duration = Duration::from_secs(30);
/// The link latency when no fault slows it: up to 5 ms each way.
const LATENCY: Duration = Duration::from_millis(5);

/// What a run hands back.
#[derive(Debug)]
pub(super) struct Run {
    pub(super) history: History,
    pub(super) truth: Truth,
    /// What the run could not do as planned (a write refused: no leader).
    pub(super) refused: Vec<String>,
    /// What the brokers were asked (`Model::requests`).
    pub(super) requests: Vec<(Duration, usize, i16, u64)>,
}

fn host_of(node: i32) -> String {
    format!("b{node}")
}

/// The cluster's settings: the plan's shape, and Kafka's defaults where
/// the client's behaviour depends on them.
fn settings(plan: &Plan) -> Settings {
    Settings {
        brokers: plan
            .nodes
            .iter()
            .chain(&plan.joining)
            .map(|&n| (n, format!("b{n}:9092")))
            .collect(),
        later: plan.joining.clone(),
        txn_partitions: TXN_PARTITIONS,
        replication_factor: plan.replication_factor,
        min_isr: plan.min_isr,
        topic_min_isr: plan.topic_min_isr,
        topic: TOPIC.to_owned(),
        topic_partitions: 2,
        session_timeout: Duration::from_secs(9),
        heartbeat: Duration::from_secs(2),
        load: Duration::from_millis(50),
        transaction_timeout: Duration::from_secs(5),
        // The stream's promise (every change, or a reset) needs the service
        // to read a record before compaction may remove it: with none
        // (Kafka's default, where only the active segment protects a
        // record) seed 1 lost a change the service read 2.4 s late.
        min_compaction_lag: MIN_COMPACTION_LAG,
    }
}

/// A broker host: serves the node's process once it runs, and swaps in the
/// node's newest process for new connections when it gets one.
async fn broker_host(model: Arc<Model>, node: i32) -> turmoil::Result {
    let name = host_of(node);
    let mut serving = loop {
        match model.serving(node) {
            (p, true) => break p,
            _ => model.changed(Duration::from_millis(100)).await,
        }
    };
    let (script, gate) = model.process(serving);
    let broker = FakeBroker::start_simulated(&name, 9092, script, gate).await;
    loop {
        model.changed(Duration::from_secs(1)).await;
        if let (p, true) = model.serving(node)
            && p != serving
        {
            let (script, gate) = model.process(p);
            broker.replace_process(script, gate);
            serving = p;
        }
    }
}

/// The service, as `serve` runs it, bootstrapped from `bootstrap`.
async fn service_host(bootstrap: String, steps: Steps) -> turmoil::Result {
    let mut config = ServiceConfig::new(&bootstrap);
    config.kafka.topic = TOPIC.to_owned();
    config.http.listen = ([0, 0, 0, 0], 8080).into();
    config.watch.roster_ttl = Duration::from_millis(500);
    let client = config.kafka.client_config()?;
    let clock = Arc::new(SimClock::new(steps));
    let state = AppState::with_client_config_and_clock(config, client, clock)?;
    let listener = host::bind(([0, 0, 0, 0], 8080).into()).await?;
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    crate::service::run(listener, state, shutdown).await?;
    Ok(())
}

/// What the members of each role have done, to write only records that
/// change something (every record of a role is then an event of its
/// stream).
#[derive(Default)]
struct Members {
    registered: BTreeSet<(&'static str, &'static str)>,
    leased: BTreeSet<&'static str>,
}

/// This thread's draws seeded and its clocks the simulation's (suspends
/// from zero) while a run lasts; both put back when it ends, also when it
/// fails or panics, so nothing of one seed's run reaches the next one on
/// the thread (the range runner's, the fast tier's).
struct SimulatedThread;

impl SimulatedThread {
    fn start(seed: u64) -> SimulatedThread {
        host::seed_draws(Some(seed));
        simulate_host(true);
        align_task_ids();
        SimulatedThread
    }
}

/// The lists a current-thread runtime keeps its tasks in, by task id
/// modulo this (tokio's `OwnedTasks::new(1)`: one core, four shards).
const TASK_SHARDS: u64 = 4;

/// Makes the run's first task id one more than a multiple of
/// [`TASK_SHARDS`], as in a fresh process. Tokio numbers the tasks of every
/// runtime from one counter for the whole process, and a crashed or
/// bounced host's runtime drops its tasks list by list: their sockets send
/// their FINs in that order, and the network draws each one's latency from
/// the seeded generator as it is sent. Without this a seed's history
/// depended on how many tasks the process had spawned before it (seed 14
/// had four, one for each remainder). Tasks other threads spawn during the
/// run (the fast tier's other tests, the range runner on several threads)
/// still move the ids: a history is the seed's alone on one thread.
fn align_task_ids() {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    // Never polled: dropped with the runtime.
    while let Ok(id) = runtime.spawn(async {}).id().to_string().parse::<u64>() {
        if id % TASK_SHARDS == 0 {
            break;
        }
    }
}

impl Drop for SimulatedThread {
    fn drop(&mut self) {
        host::seed_draws(None);
        simulate_host(false);
    }
}

/// Runs `plan` to its end.
pub(super) fn run(plan: &Plan) -> Result<Run, String> {
    let _thread = SimulatedThread::start(plan.seed);
    let mut sim = turmoil::Builder::new()
        .simulation_duration(plan.duration + Duration::from_secs(60))
        .tick_duration(Duration::from_millis(5))
        .epoch(UNIX_EPOCH + Duration::from_millis(EPOCH_MS))
        .max_message_latency(LATENCY)
        .enable_random_order()
        .rng_seed(plan.seed)
        .build();
    let now_in_host: Arc<dyn Fn() -> Duration + Send + Sync> =
        Arc::new(|| turmoil::sim_elapsed().unwrap_or_default());
    let model = Model::new(settings(plan), "cluster-0", now_in_host);
    let mut members = Members::default();
    let mut refused = Vec::new();
    let wall = |at: Duration| EPOCH_MS as i64 + millis(at);
    // Every role held, its first two members registered.
    for role in ROLES {
        let minted = if plan.worn.contains(&role) {
            model.init_worn(
                role,
                crate::kafka::fake::model::EXHAUSTED_EPOCH - 6,
                Duration::ZERO,
            )
        } else {
            model.init_producer_id(role, Duration::ZERO)
        };
        if let Err(e) = minted {
            refused.push(format!("0s: {role}: {}", e.0));
        }
        for member in &MEMBERS[..2] {
            apply(
                &model,
                &mut members,
                Duration::ZERO,
                &Event::Register { role, member },
                wall,
            )
            .unwrap_or_else(|e| refused.push(e));
        }
    }
    for &node in plan.nodes.iter().chain(&plan.joining) {
        let model = model.clone();
        sim.host(host_of(node), move || broker_host(model.clone(), node));
    }
    let steps = Steps::default();
    let bootstrap: String = plan
        .bootstrap
        .iter()
        .map(|n| format!("b{n}:9092"))
        .collect::<Vec<_>>()
        .join(",");
    {
        let steps = steps.clone();
        sim.host("service", move || {
            service_host(bootstrap.clone(), steps.clone())
        });
    }
    let history = Arc::new(Mutex::new(History::default()));
    sim.client(
        "observer",
        service_observer(plan.seed, model.clone(), history.clone(), plan.duration),
    );
    sim.client(
        "cli",
        cli_observer(
            plan.seed,
            plan.nodes.clone(),
            model.clone(),
            history.clone(),
            steps.clone(),
            plan.duration,
        ),
    );
    let mut events = plan.events.iter().peekable();
    let mut clusters = 0;
    loop {
        let now = sim.elapsed();
        while let Some(due) = events.next_if(|e| e.at <= now) {
            let event = &due.event;
            match event {
                Event::Kill { node } => {
                    model.kill(*node);
                    sim.crash(host_of(*node));
                }
                Event::Restart { node } => {
                    // A start is on a stopped host: where another episode
                    // started a process on it meanwhile (a new cluster),
                    // that one is killed first, as the bounce kills what
                    // ran on the host (seed 87: a process the controller
                    // heard from, on a host that answered nobody).
                    model.kill(*node);
                    model.start_again(*node, now);
                    sim.bounce(host_of(*node));
                }
                Event::Partition { from, node, oneway } => match oneway {
                    true => sim.partition_oneway(from.host(), host_of(*node)),
                    false => sim.partition(from.host(), host_of(*node)),
                },
                Event::Repair { from, node, oneway } => match oneway {
                    true => sim.repair_oneway(from.host(), host_of(*node)),
                    false => sim.repair(from.host(), host_of(*node)),
                },
                Event::Hold { from, node } => sim.hold(from.host(), host_of(*node)),
                Event::Release { from, node } => sim.release(from.host(), host_of(*node)),
                Event::Slow { from, node, max_ms } => sim.set_link_max_message_latency(
                    from.host(),
                    host_of(*node),
                    Duration::from_millis(*max_ms),
                ),
                Event::Fast { from, node } => {
                    sim.set_link_max_message_latency(from.host(), host_of(*node), LATENCY)
                }
                Event::Flaky { from, node } => {
                    sim.set_link_fail_rate(from.host(), host_of(*node), 0.02)
                }
                Event::Steady { from, node } => {
                    sim.set_link_fail_rate(from.host(), host_of(*node), 0.0)
                }
                Event::RestartService => sim.bounce("service"),
                Event::StepClock { ms } => {
                    steps.fetch_add(*ms, std::sync::atomic::Ordering::SeqCst);
                }
                Event::Suspend { ms, role } => {
                    // While the host slept the world went on: the role's
                    // coordinator moved and minted.
                    simulate_suspend(Duration::from_millis(*ms));
                    // To the next replica after its leader.
                    let part = Part::Txn(model.txn_partition(role));
                    let replicas = model.replicas(part);
                    let i = model
                        .leader(part)
                        .and_then(|(l, _)| replicas.iter().position(|r| *r == l))
                        .map_or(0, |i| i + 1);
                    let to = replicas[i % replicas.len()];
                    if let Err(e) = model.move_and_init(role, to, now) {
                        refused.push(format!("{now:?}: {event:?}: {}", e.0));
                    }
                }
                Event::StopCluster => {
                    for &node in plan.nodes.iter().chain(&plan.joining) {
                        model.kill(node);
                        sim.crash(host_of(node));
                    }
                }
                Event::StartNewCluster => {
                    clusters += 1;
                    model.replace_cluster(&format!("cluster-{clusters}"), now);
                    members = Members::default();
                    for &node in plan.nodes.iter().chain(&plan.joining) {
                        sim.bounce(host_of(node));
                    }
                }
                other => {
                    if let Err(e) = apply(&model, &mut members, now, other, wall) {
                        refused.push(e);
                    }
                }
            }
        }
        model.tick(now);
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => return Err(format!("the simulation failed at {now:?}: {e}")),
        }
    }
    let history = std::mem::take(&mut *history.lock().unwrap());
    Ok(Run {
        history,
        truth: model.truth(),
        refused,
        requests: model.requests(),
    })
}

/// A member's event or a broker's that needs no host: applied to the model.
fn apply(
    model: &Model,
    members: &mut Members,
    now: Duration,
    event: &Event,
    wall: impl Fn(Duration) -> i64,
) -> Result<(), String> {
    let refused = |e: crate::kafka::fake::model::NotWritten| format!("{now:?}: {event:?}: {}", e.0);
    let key = |key: Key| encode_key(&key).unwrap_or_default();
    match *event {
        Event::Init { role } => model
            .init_producer_id(role, now)
            .map(|_| ())
            .map_err(refused),
        Event::Commit { role, times } => {
            for _ in 0..times {
                model.commit_tv2(role, now).map_err(refused)?;
            }
            Ok(())
        }
        Event::Expire { role } => model.expire(role, now).map_err(refused),
        Event::Register { role, member } => {
            let value = crate::coordination::encode_registration(&Registration {
                member: member.to_owned(),
                registered_at: wall(now),
            })
            .unwrap_or_default();
            model
                .write(role, key(Key::registration(role, member)), Some(value), now)
                .map_err(refused)?;
            members.registered.insert((role, member));
            Ok(())
        }
        Event::Deregister { role, member } => {
            let others = members
                .registered
                .iter()
                .filter(|(r, _)| *r == role)
                .count();
            if !members.registered.contains(&(role, member)) || others < 2 {
                return Ok(());
            }
            model
                .write(role, key(Key::registration(role, member)), None, now)
                .map_err(refused)?;
            members.registered.remove(&(role, member));
            Ok(())
        }
        Event::Lease { role, member, end } => {
            let Some((id, epoch)) = model.current(role) else {
                return Ok(());
            };
            let lease = Lease {
                member: member.to_owned(),
                token: FencingToken::new(id, epoch).map_err(|e| e.to_string())?,
                granted_at: wall(now),
                deadline: wall(now) + 5_000,
            };
            let value = crate::coordination::encode_lease(&lease).unwrap_or_default();
            model
                .write_in_transaction(role, key(Key::lease(role)), Some(value), now)
                .map_err(refused)?;
            members.leased.insert(role);
            match end {
                End::Commit => model
                    .end_transaction(role, true, now)
                    .map(|_| ())
                    .map_err(refused),
                End::Abort => model
                    .end_transaction(role, false, now)
                    .map(|_| ())
                    .map_err(refused),
                End::Hang => Ok(()),
            }
        }
        Event::Resign { role } => {
            if !members.leased.contains(role) {
                return Ok(());
            }
            model
                .write_in_transaction(role, key(Key::lease(role)), None, now)
                .map_err(refused)?;
            members.leased.remove(role);
            model
                .end_transaction(role, true, now)
                .map(|_| ())
                .map_err(refused)
        }
        Event::Compact { partition } => {
            model.compact(partition, now);
            Ok(())
        }
        Event::Pause { node } => {
            model.pause(node, true, Duration::ZERO, now);
            Ok(())
        }
        Event::Resume { node, lag_ms } => {
            model.pause(node, false, Duration::from_millis(lag_ms), now);
            Ok(())
        }
        Event::Stall { node } => {
            model.stall(node, true);
            Ok(())
        }
        Event::Thaw { node } => {
            model.stall(node, false);
            Ok(())
        }
        Event::Cut { node } => {
            model.cut(node, true);
            Ok(())
        }
        Event::Mend { node } => {
            model.cut(node, false);
            Ok(())
        }
        Event::Replace { node } => model.replace(node, now).map_err(refused),
        Event::Join { node } => {
            model.join(node, now);
            Ok(())
        }
        Event::SilenceController => {
            model.silence_controller(now);
            Ok(())
        }
        Event::ResumeController { ref lost } => {
            model.resume_controller(lost, now);
            Ok(())
        }
        Event::ActivateController => {
            model.activate_controller(now);
            Ok(())
        }
        Event::Elect => {
            model.elect_preferred();
            Ok(())
        }
        Event::Move { role, node } => {
            model.move_leader(Part::Txn(model.txn_partition(role)), node);
            Ok(())
        }
        ref other => Err(format!("{now:?}: {other:?} needs the simulation")),
    }
}
